package admission_test

import (
	"context"
	"testing"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

func processingFailed(r stages.Result) bool {
	return len(r.Outcomes) == 1 && r.Outcomes[0].Incidents[0].Code == schema.CodeProcessingFailed && len(r.Next) == 0
}

// Admission never announces a give-up that a hand-off it may have made
// could contradict (issue 19): once a message took its proposal id, giving
// up on it hands it off again under the same message id; a message given
// up on before it took its id takes the id for its PROCESSING_FAILED,
// which a processor still handling the same message, and a repeat, answer
// with — neither hands it off. On the records processors share, two
// processors apart.
func TestGiveUpNeverContradictsAHandOff(t *testing.T) {
	url := testenv.StartServer(t, "").ClientURL()
	ps, host := cluster(t, url, 1, 2)
	ctx := context.Background()

	// Handed off, then given up on (the ack was lost, and the redelivery
	// failed elsewhere): handed off again, no outcome.
	handed := input(t, host, testenv.Lumber("gu-handed"), 1)
	if r, err := ps[0].stage.Handle(ctx, handed); err != nil || len(r.Next) != 1 {
		t.Fatalf("handle: %+v, %v", r, err)
	}
	r, err := ps[1].stage.GiveUp(ctx, handed, stages.ErrRetriesExhausted)
	if err != nil || len(r.Next) != 1 || len(r.Outcomes) != 0 {
		t.Fatalf("give-up after the hand-off: %+v, %v; want the hand-off again and no outcome", r, err)
	}

	// Given up on before taking its id: PROCESSING_FAILED, and the id is
	// its — the same message handled elsewhere is not handed off.
	failed := input(t, host, testenv.Lumber("gu-failed"), 2)
	r, err = ps[0].stage.GiveUp(ctx, failed, stages.ErrRetriesExhausted)
	if err != nil || !processingFailed(r) {
		t.Fatalf("give-up: %+v, %v", r, err)
	}
	o := r.Outcomes[0]
	if _, err := ps[0].js.Publish(ctx, subjects.Default().OutcomeRecord(o.Host, o.ProposalID), schema.MustMarshal(o)); err != nil {
		t.Fatal(err)
	}
	r, err = ps[1].stage.Handle(ctx, failed)
	if err != nil || len(r.Next) != 0 || len(r.Outcomes) != 0 {
		t.Fatalf("the given-up message handled elsewhere: %+v, %v; want no hand-off", r, err)
	}
	// A repeat (same body, new delivery id) hears the give-up.
	rep := input(t, host, testenv.Set(testenv.Lumber("gu-failed"), "context.delivery.delivery_id", "delivery:again"), 3)
	r, err = ps[1].stage.Handle(ctx, rep)
	if err != nil || len(r.Next) != 0 || len(r.Outcomes) != 0 || len(r.Replayed) != 1 || r.Replayed[0].Incidents[0].Code != schema.CodeProcessingFailed {
		t.Fatalf("repeat of the given-up proposal: %+v, %v; want its PROCESSING_FAILED again", r, err)
	}
	// Giving up again (another delivery) answers the same.
	r, err = ps[1].stage.GiveUp(ctx, failed, stages.ErrRetriesExhausted)
	if err != nil || len(r.Next) != 0 || len(r.Outcomes) != 0 {
		t.Fatalf("second give-up: %+v, %v", r, err)
	}
}
