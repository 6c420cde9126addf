package attack_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Hosts as the Recorder names them: A is testenv.Host ("frontdesk",
// tenant:demo), B is testenv.OtherHost ("elsewhere", tenant:other).
const (
	hostA = testenv.HostName
	hostB = testenv.OtherHostName
)

// replayWindow is the runner's current replay window (its ReplayEvery,
// 10 minutes, on the clock): a repeat republishes its proposal's outcome
// once per window.
func replayWindow() int64 { return time.Now().UnixMilli() / (10 * time.Minute).Milliseconds() }

// refB names B's proposal for the Recorder.
func refB(id string) string { return hostB + "/" + id }

// intentOf is the lumber proposal of host A with its own payload (so that
// each test's intents are distinct), without a grant.
func intentOf(id string, quantity int) map[string]any {
	return testenv.Set(testenv.Lumber(id), "intent.payload", map[string]any{"quantity": quantity})
}

// grantedA is intentOf with an inline grant valid from now.
func grantedA(t *testing.T, id string, quantity int, now time.Time) map[string]any {
	t.Helper()
	return testenv.Granted(t, intentOf(id, quantity), "sku-1001", now)
}

// grantedB is B's proposal of the same intent in B's own tenant and
// security domain, with an inline grant valid from now.
func grantedB(t *testing.T, id string, quantity int, now time.Time) map[string]any {
	t.Helper()
	return testenv.Granted(t, testenv.AsOtherTenant(intentOf(id, quantity)), "sku-1001", now)
}

// keyOf is a fixture's idempotency key: what the fake provider counts by.
func keyOf(t *testing.T, p map[string]any) string {
	t.Helper()
	return strings.TrimPrefix(testenv.FingerprintOf(t, p, "sku-1001"), "sha256:")
}

// checkOutcome fails unless o is of kind with exactly the incidents given
// (phase/code, boundary not_invoked), with the kind's effect truth and
// terminality.
func checkOutcome(t *testing.T, o schema.Outcome, kind schema.Kind, incidents ...[2]string) {
	t.Helper()
	var want []schema.Incident
	for _, pc := range incidents {
		want = append(want, schema.Incident{Phase: schema.Phase(pc[0]), Code: schema.Code(pc[1]), DispatchBoundary: schema.BoundaryNotInvoked})
	}
	if o.Kind != kind || o.EffectTruth != kind.EffectTruth() || o.Terminal != kind.Terminal() || !slices.Equal(o.Incidents, want) || o.AtMs == 0 {
		t.Fatalf("%s/%s: outcome %+v, want %s with incidents %v", o.Host, o.ProposalID, o, kind, want)
	}
}

// confirmed checks a CONFIRMED outcome bound to fingerprint fp, and
// returns its receipt id.
func confirmed(t *testing.T, o schema.Outcome, fp string) string {
	t.Helper()
	checkOutcome(t, o, schema.KindConfirmed)
	if o.Fingerprint == nil || *o.Fingerprint != fp || o.Referent == nil || *o.Referent != "sku-1001" ||
		o.Receipt == nil || o.Receipt.Fingerprint != fp || o.Receipt.Status != schema.StatusConfirmed || o.Receipt.ReceiptID == "" {
		t.Fatalf("%s/%s: confirmed outcome not bound to %s: %+v (receipt %+v)", o.Host, o.ProposalID, fp, o, o.Receipt)
	}
	return o.Receipt.ReceiptID
}

func pc(phase schema.Phase, code schema.Code) [2]string {
	return [2]string{string(phase), string(code)}
}

// Incidents a test expects, by phase and code.
var (
	malformed          = pc(schema.PhaseAdmission, schema.CodeAdmissionMalformed)
	unauthenticated    = pc(schema.PhaseAdmission, schema.CodeAdmissionUnauthenticated)
	tenantNotPermitted = pc(schema.PhaseAdmission, schema.CodeAdmissionTenantNotPermitted)
	idReused           = pc(schema.PhaseAdmission, schema.CodeAdmissionProposalIDReused)
	grantUnmatched     = pc(schema.PhaseAuthorization, schema.CodeGrantUnmatched)
	notYetValid        = pc(schema.PhaseAuthorization, schema.CodeGrantNotYetValid)
	approvalRequired   = pc(schema.PhaseAuthorization, schema.CodeApprovalRequired)
	processingFailed   = pc(schema.PhaseAdmission, schema.CodeProcessingFailed)
)

// waitEvents waits until the recorder saw at least n incident events of
// phase/code.
func waitEvents(t *testing.T, env *testenv.Env, code [2]string, n int) {
	t.Helper()
	env.Recorder.WaitEvents(t, schema.Phase(code[0]), schema.Code(code[1]), n)
}

// history is what the outcomes and incidents streams hold: what any
// subscriber could ever read, without duplicates the streams dropped.
type history struct {
	outcomes map[string][]schema.Outcome // by subject
	events   []schema.IncidentEvent
}

// settled waits until the pipeline is idle (testenv's Quiesce), then reads
// both history streams.
func settled(t *testing.T, env *testenv.Env) history {
	t.Helper()
	env.Quiesce(t)
	h := history{outcomes: map[string][]schema.Outcome{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*testenv.WaitTimeout)
	defer cancel()
	each(t, ctx, env, env.Subjects.OutcomesStream(), func(subject string, data []byte) {
		var o schema.Outcome
		if err := schema.Decode(data, &o); err != nil {
			t.Fatalf("outcome on %s does not decode: %v", subject, err)
		}
		host, _, _ := env.Subjects.ParseOutcome(subject)
		o.Host = host
		h.outcomes[subject] = append(h.outcomes[subject], o)
	})
	each(t, ctx, env, env.Subjects.IncidentsStream(), func(subject string, data []byte) {
		var e schema.IncidentEvent
		if err := schema.Decode(data, &e); err != nil {
			t.Fatalf("event on %s does not decode: %v", subject, err)
		}
		h.events = append(h.events, e)
	})
	return h
}

func each(t *testing.T, ctx context.Context, env *testenv.Env, stream string, fn func(subject string, data []byte)) {
	t.Helper()
	s, err := env.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(m.Subject, m.Data)
	}
}

// on returns the outcomes published on host h's subject for id.
func (h history) on(env *testenv.Env, host, id string) []schema.Outcome {
	return h.outcomes[env.Subjects.Outcome(host, id)]
}

// count returns how many events of phase/code the incidents stream holds.
func (h history) count(code [2]string) int {
	n := 0
	for _, e := range h.events {
		if string(e.Phase) == code[0] && string(e.Code) == code[1] {
			n++
		}
	}
	return n
}

// codes counts every event by "phase/code".
func (h history) codes() map[string]int {
	m := map[string]int{}
	for _, e := range h.events {
		m[string(e.Phase)+"/"+string(e.Code)]++
	}
	return m
}

// total is the number of outcome messages in the outcomes stream.
func (h history) total() int {
	n := 0
	for _, outs := range h.outcomes {
		n += len(outs)
	}
	return n
}

// wantCodes fails unless the incidents stream holds exactly these events.
func (h history) wantCodes(t *testing.T, want map[[2]string]int) {
	t.Helper()
	w := map[string]int{}
	for k, n := range want {
		if n > 0 {
			w[k[0]+"/"+k[1]] = n
		}
	}
	got := h.codes()
	if len(got) != len(w) {
		t.Errorf("incident events %v, want exactly %v", got, w)
		return
	}
	for k, n := range w {
		if got[k] != n {
			t.Errorf("incident events %v, want exactly %v", got, w)
			return
		}
	}
}

// pending checks actions_approvals_pending once the pipeline is idle: every
// stage updates the gauge before it acks its input.
func pending(t *testing.T, env *testenv.Env, want float64) {
	t.Helper()
	env.Quiesce(t)
	if got := testutil.ToFloat64(env.Processor().Metrics().ApprovalsPending); got != want {
		t.Fatalf("actions_approvals_pending = %v, want %v", got, want)
	}
}

// records counts the processor's Pebble records.
func records(t *testing.T, env *testenv.Env) int {
	t.Helper()
	n := 0
	if err := env.Processor().Store().ForEach(func(k, v []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// logged reports whether a log line holds every fragment.
func logged(env *testenv.Env, fragments ...string) bool {
	for _, line := range bytes.Split(env.Logs.Bytes(), []byte("\n")) {
		all := true
		for _, f := range fragments {
			if !bytes.Contains(line, []byte(f)) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
