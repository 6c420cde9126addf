package admin_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// TestStatus: status.get, signed by the operator over its own login (NATS
// authentication on), reports the counts and the processor as its /readyz
// and metrics see it: ready, every stage consumer in the table's order,
// the messages each finished. Unsigned, it is refused like every verb.
func TestStatus(t *testing.T) {
	env := testenv.New(t, testenv.WithAuth())
	env.PublishSigned(t, testenv.Granted(t, testenv.Lumber("prop-1"), "sku-1001", env.Clock.Now()), env.Host)
	env.Recorder.Wait(t, "prop-1", testenv.Terminal)
	parked := testenv.Set(testenv.Lumber("prop-2"), "intent.payload", map[string]any{"quantity": 50}) // another intent
	env.PublishSigned(t, parked, env.Host)                                                            // no grant: parked
	env.Recorder.Wait(t, "prop-2", testenv.Kind(schema.KindNeedsApproval))

	var st *admin.Status
	testenv.WaitFor(t, "the status to count prop-1 through dispatch", func() bool {
		var err error
		if st, err = env.Admin().Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(st.Processors) != 1 {
			return false
		}
		p := st.Processors[0] // counted once each stage is done with its message
		return stageOf(p, "dispatch").Finished() >= 1 && stageOf(p, "authorization").Finished() >= 2 && stageOf(p, "admission").Finished() >= 2
	})
	if st.Operator != testenv.OperatorName {
		t.Errorf("operator %q, want the signing key's block name %q", st.Operator, testenv.OperatorName)
	}
	p := st.Processors[0]
	if p.ID != env.Processor().InstanceID() || !p.Ready || p.Reason != "" || p.Version == "" || p.StartedAtMs <= 0 {
		t.Errorf("processor = %+v", p)
	}
	var names []string
	for _, s := range p.Stages {
		names = append(names, s.Stage)
		if !s.Consuming {
			t.Errorf("stage %s not consuming", s.Stage)
		}
	}
	if want := consumerNames(env); !slices.Equal(names, want) {
		t.Errorf("stages %q, want %q", names, want)
	}
	if a, z := stageOf(p, "admission"), stageOf(p, "authorization"); a.Forwarded != 2 || z.Outcome != 1 || z.Forwarded != 1 {
		t.Errorf("admission %+v, authorization %+v", a, z)
	}
	if st.ApprovalsPending != 1 || st.Indeterminate != 0 || st.NowMs <= 0 {
		t.Errorf("counts = %+v", st)
	}

	unsigned := &admin.Client{NC: env.ConnectAs(t, env.Operator), Subjects: env.Subjects}
	if _, err := unsigned.Status(context.Background()); !errors.Is(err, admin.ErrUnauthenticated) {
		t.Errorf("unsigned status: %v", err)
	}
	// A host may not ask at all: NATS refuses its publish on the admin subject.
	host := &admin.Client{NC: env.ConnectAs(t, env.Host), Subjects: env.Subjects, Key: env.Host, Timeout: 300 * time.Millisecond}
	if _, err := host.Status(context.Background()); err == nil {
		t.Error("a host got a status")
	}
}

func stageOf(p admin.ProcessorStatus, name string) admin.StageStatus {
	for _, s := range p.Stages {
		if s.Stage == name {
			return s
		}
	}
	return admin.StageStatus{}
}

// consumerNames are the stage consumers' names, in the table's order
// (a Scheduled stage's timers have a consumer of their own).
func consumerNames(env *testenv.Env) []string {
	var out []string
	for _, c := range engine.Consumers(env.Subjects, env.Config, engine.Pipeline(), nil) {
		out = append(out, c.Name)
	}
	return out
}

// TestStatusEveryProcessor: whichever processor answers, the status lists
// every processor serving the API on the NATS system — each one's own
// readiness, gathered from its service statistics — and none twice.
func TestStatusEveryProcessor(t *testing.T) {
	ns, st := plainServer(t)
	ap, err := pebble.NewApprovals(st)
	if err != nil {
		t.Fatal(err)
	}
	op, _ := nkeys.CreateUser()
	opPub, _ := op.PublicKey()
	subj := subjects.Default()
	clock := stages.NewManualClock(t0)
	selves := map[string]admin.ProcessorStatus{
		"proc-a": {ID: "proc-a", Version: "0.0.0-devel", Ready: true, Stages: []admin.StageStatus{{Stage: "admission", Consuming: true, Forwarded: 7}}},
		"proc-b": {ID: "proc-b", Version: "0.0.0-devel", Ready: false, Reason: "nats: disconnected"},
	}
	for _, id := range []string{"proc-a", "proc-b"} {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		s := &admin.Server{Store: st, Journal: pebble.NewJournal(st), Approvals: ap, Nonces: pebble.Nonces{Store: st, Window: admin.NonceWindow(0)}, Subjects: subj, Clock: clock,
			Operators: []config.Role{{Name: "oncall", PublicKey: opPub}}, Self: func() admin.ProcessorStatus { return selves[id] }}
		stop, err := s.Serve(nc)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := &admin.Client{NC: nc, Subjects: subj, Key: op, Now: clock.Now}
	testenv.WaitFor(t, "a status listing both processors", func() bool {
		got, err := cl.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int{}
		for _, p := range got.Processors {
			ids[p.ID]++
			if want := selves[p.ID]; p.Ready != want.Ready || p.Reason != want.Reason || len(p.Stages) != len(want.Stages) {
				t.Fatalf("processor %+v, want %+v", p, want)
			}
		}
		for id, n := range ids {
			if n != 1 {
				t.Fatalf("%s listed %d times", id, n)
			}
		}
		return len(ids) == 2
	})
}
