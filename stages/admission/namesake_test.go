package admission_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// A message refused before it could take its proposal id (malformed) gets
// an outcome on that id's subject; a valid proposal then takes the id. A
// repeat of the valid one is answered only from its own outcomes: nothing
// while it is in flight (its outcome comes on its own), its own latest
// outcome once it has one — never the refused namesake's, which on a
// cluster is the last message on the subject.
func TestRepeatAnsweredOnlyFromItsOwnOutcome(t *testing.T) {
	t.Run("single node", func(t *testing.T) { testRepeatNotTheNamesakes(t, testenv.New(t)) })
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a three-server cluster")
		}
		testRepeatNotTheNamesakes(t, testenv.New(t, testenv.Clustered()))
	})
}

func testRepeatNotTheNamesakes(t *testing.T, env *testenv.Env) {
	const id = "namesake-1"
	// The namesake: readable id, malformed body, refused with an outcome.
	env.PublishSigned(t, testenv.Set(testenv.Lumber(id), "intent.colour", "red"), env.Host)
	refusal := env.Recorder.Wait(t, id, testenv.Terminal)
	if refusal.Kind != schema.KindIntegrationFailure {
		t.Fatalf("namesake: %+v", refusal)
	}

	// The proposal that takes the id, held at the provider.
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	called := make(chan struct{}, 1)
	fake := env.Fakes["demo"]
	fake.OnDispatch(func(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
		called <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return schema.AdapterReply{}, ctx.Err()
		}
		return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "act-1"}, nil
	})
	p := testenv.Set(testenv.Lumber(id), "context.delivery.delivery_id", "delivery:taker")
	testenv.Granted(t, p, "sku-1001", time.Now())
	env.PublishSigned(t, p, env.Host)
	select {
	case <-called:
	case <-time.After(testenv.WaitTimeout):
		t.Fatal("the proposal never reached its provider")
	}

	// A repeat while it is in flight: nothing is answered.
	testenv.Set(p, "context.delivery.delivery_id", "delivery:repeat-1")
	env.PublishSigned(t, p, env.Host)
	admission := testenv.StageConsumers(env.Subjects, env.Config)[0]
	if admission.Name != subjects.StageAdmission {
		t.Fatalf("first stage consumer is %s", admission.Name)
	}
	testenv.QuiesceConsumers(t, env.JS, env.Recorder, admission)
	if outs := env.Recorder.Outcomes(id); len(outs) != 1 {
		t.Fatalf("a repeat of a proposal in flight was answered: %+v", outs[1:])
	}

	// Done: a repeat is answered with its own outcome.
	free()
	confirmed := env.Recorder.Wait(t, id, testenv.Kind(schema.KindConfirmed))
	testenv.Set(p, "context.delivery.delivery_id", "delivery:repeat-2")
	env.PublishSigned(t, p, env.Host)
	env.Recorder.WaitAll(t, id, testenv.Count(3))
	env.Quiesce(t)
	outs := env.Recorder.Outcomes(id)
	if len(outs) != 3 {
		t.Fatalf("outcomes %+v, want the refusal, CONFIRMED and its repeat", outs)
	}
	if last := outs[2]; last.Kind != schema.KindConfirmed || last.Receipt == nil || confirmed.Receipt == nil || last.Receipt.ReceiptID != confirmed.Receipt.ReceiptID {
		t.Errorf("the repeat was answered %+v, want the proposal's own CONFIRMED", last)
	}
}
