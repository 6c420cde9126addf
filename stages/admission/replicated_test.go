package admission_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"
	"github.com/portcullis/portcullis/kv/kvtest"

	"github.com/portcullis/portcullis/kv/pebble"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/admission"
	"github.com/portcullis/portcullis/subjects"
)

var buckets atomic.Int64

// processor is one processor's admission stage on the shared records.
type processor struct {
	stage   *admission.Stage
	records *kvjs.Admissions
	js      jetstream.JetStream
}

// cluster opens n processors' admission stages on one fresh bucket on url,
// each with its own connection and Pebble store, and the outcome stream.
func cluster(t *testing.T, url string, replicas, n int) ([]processor, nkeys.KeyPair) {
	t.Helper()
	host, _ := nkeys.CreateUser()
	key, _ := host.PublicKey()
	pol := admission.Policy{MaxPayloadBytes: 65536, Providers: []string{"demo"},
		Trust: trust.Policy{
			Hosts:   []trust.Host{{Name: testenv.HostName, PublicKey: key, Tenants: []string{"tenant:demo"}}},
			Tenants: []trust.Tenant{{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}}}}}
	bucket := fmt.Sprintf("admission_%d", buckets.Add(1))
	subj := subjects.Default()
	var out []processor
	for i := range n {
		js, h := kvtest.OpenBucket(t, url, kvjs.AdmissionBucket(bucket, replicas, time.Hour))
		if i == 0 {
			testenv.Retry(t, func(ctx context.Context) error {
				cfg := kvjs.OutcomeStream(subj)
				cfg.Replicas = replicas
				_, err := js.CreateOrUpdateStream(ctx, cfg)
				return err
			})
		}
		st, err := pebble.Open(t.TempDir(), pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		rec := kvjs.NewAdmissions(kvjs.AdmissionsOptions{KV: h, JS: js, Local: st, Subjects: subj})
		out = append(out, processor{
			stage: &admission.Stage{Policy: pol, Records: rec,
				Route: stages.Route{Subjects: subj, Self: subjects.StageAdmission, Next: subjects.StageGrounding}, Clock: stages.SystemClock{}},
			records: rec, js: js,
		})
	}
	return out, host
}

// input is proposal p as the stream's message number seq.
func input(t *testing.T, host nkeys.KeyPair, p map[string]any, seq uint64) *stages.Input {
	t.Helper()
	body := testenv.Body(t, p)
	hdr, err := trust.Sign(host, body)
	if err != nil {
		t.Fatal(err)
	}
	return &stages.Input{Subject: subjects.Default().Proposal(testenv.HostName), Data: body, Header: hdr, Stream: "ACTIONS_PROPOSALS", StreamSeq: seq, Delivered: 1}
}

func reusedCode(r stages.Result) bool {
	return len(r.Events) == 1 && r.Events[0].Code == schema.CodeAdmissionProposalIDReused && len(r.Next) == 0 && len(r.Outcomes) == 0 && len(r.Replayed) == 0
}

// Two processors handle one proposal id with different content at the same
// moment: exactly one admits it, the other refuses it as a reuse.
func testRacingClaims(t *testing.T, url string, replicas int) {
	ps, host := cluster(t, url, replicas, 2)
	for round := range 10 {
		id := fmt.Sprintf("race-%d", round)
		a := testenv.Set(testenv.Lumber(id), "context.delivery.delivery_id", "delivery:a-"+id)
		b := testenv.Set(testenv.Set(testenv.Lumber(id), "context.delivery.delivery_id", "delivery:b-"+id), "intent.payload", map[string]any{"quantity": 21})
		ins := []*stages.Input{input(t, host, a, uint64(2*round+1)), input(t, host, b, uint64(2*round+2))}
		res := make([]stages.Result, 2)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				var err error
				if res[i], err = ps[i].stage.Handle(context.Background(), ins[i]); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		admitted, reused := 0, 0
		for _, r := range res {
			switch {
			case len(r.Next) == 1:
				admitted++
			case reusedCode(r):
				reused++
			default:
				t.Errorf("round %d: unexpected result %+v", round, r)
			}
		}
		if admitted != 1 || reused != 1 {
			t.Fatalf("round %d: %d admitted, %d refused as reuse; want one each", round, admitted, reused)
		}
		// The refused message's delivery id stays free: it was withdrawn.
		for i, in := range ins {
			if len(res[i].Next) == 1 {
				continue
			}
			del := "delivery:a-" + id
			if i == 1 {
				del = "delivery:b-" + id
			}
			if _, found, err := ps[0].records.Delivery(testenv.HostName, del); err != nil || found {
				t.Errorf("round %d: refused message's delivery id recorded (%v, %v), seq %d", round, found, err, in.StreamSeq)
			}
		}
	}
}

// A repeat handled by another processor than the one that admitted the
// proposal is answered with the proposal's latest outcome, read from the
// outcome stream; a repeated delivery id likewise; a redelivery of the
// admitted message itself is handed off again.
func testRepeatOnOtherProcessor(t *testing.T, url string, replicas int) {
	ps, host := cluster(t, url, replicas, 2)
	p := testenv.Lumber("rep-1")
	r, err := ps[0].stage.Handle(context.Background(), input(t, host, p, 1))
	if err != nil || len(r.Next) != 1 {
		t.Fatalf("first: %+v, %v", r, err)
	}
	// Redelivered to the other processor before the hand-off was acked:
	// handed off again (same message id).
	r, err = ps[1].stage.Handle(context.Background(), input(t, host, p, 1))
	if err != nil || len(r.Next) != 1 {
		t.Fatalf("redelivery on the other processor: %+v, %v", r, err)
	}
	if err := r.Done(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, err = ps[0].stage.Handle(context.Background(), input(t, host, p, 1)); err != nil || len(r.Next) != 0 || len(r.Events) != 0 {
		t.Fatalf("redelivery after the hand-off: %+v, %v", r, err)
	}
	// The outcome, published by whichever processor.
	o := schema.NewOutcome(schema.ProposalRef{Host: testenv.HostName, ProposalID: "rep-1"}, schema.KindNeedsApproval, 7)
	fp := "sha256:" + fmt.Sprintf("%064x", 1)
	o.Approval = &schema.Approval{Fingerprint: fp}
	data, err := schema.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps[0].js.Publish(context.Background(), subjects.Default().OutcomeRecord(testenv.HostName, "rep-1"), data); err != nil {
		t.Fatal(err)
	}
	repeat := testenv.Set(testenv.Lumber("rep-1"), "context.delivery.delivery_id", "delivery:again")
	for _, in := range []*stages.Input{input(t, host, repeat, 2), input(t, host, repeat, 3)} {
		r, err = ps[1].stage.Handle(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Replayed) != 1 || r.Replayed[0].Kind != schema.KindNeedsApproval || r.Replayed[0].Host != testenv.HostName || len(r.Next) != 0 {
			t.Fatalf("repeat seq %d on the other processor: %+v", in.StreamSeq, r)
		}
	}
	// Any processor maps the proposal to its fingerprint.
	if got, found, err := ps[1].records.ProposalFingerprint(schema.ProposalRef{Host: testenv.HostName, ProposalID: "rep-1"}); err != nil || !found || got != fp {
		t.Fatalf("fingerprint %q, %v, %v", got, found, err)
	}
}

// publishOutcome publishes an outcome of kind for id, with incident code
// of phase when code is set.
func publishOutcome(t *testing.T, js jetstream.JetStream, id string, kind schema.Kind, phase schema.Phase, code schema.Code) {
	t.Helper()
	o := schema.NewOutcome(schema.ProposalRef{Host: testenv.HostName, ProposalID: id}, kind, 7)
	if code != "" {
		o.Incidents = []schema.Incident{schema.NewIncident(phase, code)}
	}
	data, err := schema.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), subjects.Default().OutcomeRecord(testenv.HostName, id), data); err != nil {
		t.Fatal(err)
	}
}

// A namesake refused while the id was free (an admission refusal the
// proposal that took the id cannot have got) and published after the
// proposal's own outcomes: a repeat is answered with the proposal's last
// own outcome, whichever processor handles it; with only the namesake's,
// nothing.
func testRepeatSkipsNamesake(t *testing.T, url string, replicas int) {
	ps, host := cluster(t, url, replicas, 2)
	const id = "namesake-race"
	p := testenv.Set(testenv.Lumber(id), "context.delivery.delivery_id", "delivery:taker")
	r, err := ps[0].stage.Handle(context.Background(), input(t, host, p, 10))
	if err != nil || len(r.Next) != 1 {
		t.Fatalf("first: %+v, %v", r, err)
	}
	// Refused before the proposal took the id: nothing of the proposal's yet.
	publishOutcome(t, ps[0].js, id, schema.KindIntegrationFailure, schema.PhaseAdmission, schema.CodeAdmissionMalformed)
	publishOutcome(t, ps[0].js, id, schema.KindIntegrationFailure, schema.PhaseAdmission, schema.CodeProcessingFailed)
	repeat := func(seq uint64) stages.Result {
		t.Helper()
		in := input(t, host, testenv.Set(testenv.Lumber(id), "context.delivery.delivery_id", fmt.Sprintf("delivery:repeat-%d", seq)), seq)
		r, err := ps[1].stage.Handle(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := repeat(20); len(r.Replayed) != 0 || len(r.Next) != 0 || len(r.Outcomes) != 0 {
		t.Fatalf("repeat of a proposal without an outcome of its own: %+v", r)
	}
	// The proposal's outcomes, then racing namesakes' refusals after them.
	publishOutcome(t, ps[0].js, id, schema.KindNeedsApproval, "", "")
	publishOutcome(t, ps[0].js, id, schema.KindDenied, schema.PhaseAuthorization, schema.CodeGrantExpired)
	publishOutcome(t, ps[0].js, id, schema.KindDenied, schema.PhaseAdmission, schema.CodeAdmissionTenantNotPermitted)
	publishOutcome(t, ps[0].js, id, schema.KindDenied, schema.PhaseAdmission, schema.CodeAdmissionContextIncomplete)
	if r := repeat(21); len(r.Replayed) != 1 || r.Replayed[0].Kind != schema.KindDenied || r.Replayed[0].Incidents[0].Code != schema.CodeGrantExpired {
		t.Fatalf("repeat: %+v, want the proposal's own DENIED", r)
	}
	// An admission refusal the proposal can have got is its own.
	publishOutcome(t, ps[0].js, id, schema.KindIntegrationFailure, schema.PhaseAdmission, schema.CodeAdmissionProviderUnknown)
	if r := repeat(22); len(r.Replayed) != 1 || r.Replayed[0].Incidents[0].Code != schema.CodeAdmissionProviderUnknown {
		t.Fatalf("repeat: %+v, want the proposal's own admission outcome", r)
	}
}

func TestReplicatedR1(t *testing.T) {
	url := testenv.StartServer(t, "").ClientURL()
	t.Run("racing claims", func(t *testing.T) { testRacingClaims(t, url, 1) })
	t.Run("repeat on another processor", func(t *testing.T) { testRepeatOnOtherProcessor(t, url, 1) })
	t.Run("repeat skips a namesake", func(t *testing.T) { testRepeatSkipsNamesake(t, url, 1) })
}

func TestReplicatedR3(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	url := testenv.NewCluster(t).URL()
	t.Run("racing claims", func(t *testing.T) { testRacingClaims(t, url, 3) })
	t.Run("repeat on another processor", func(t *testing.T) { testRepeatOnOtherProcessor(t, url, 3) })
	t.Run("repeat skips a namesake", func(t *testing.T) { testRepeatSkipsNamesake(t, url, 3) })
}
