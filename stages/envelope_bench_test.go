package stages_test

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/bench"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// benchEnvelope is the authorized envelope of the bench's proposal, as
// dispatch reads it, and the input carrying it on dispatch's subject.
func benchEnvelope(b *testing.B) (*schema.Envelope, stages.Route, *stages.Input) {
	b.Helper()
	subj, err := subjects.New("actions")
	if err != nil {
		b.Fatal(err)
	}
	r := stages.Route{Subjects: subj, Self: subjects.StageDispatch}
	body, err := bench.Proposal("bench-1", 0)
	if err != nil {
		b.Fatal(err)
	}
	p, err := schema.CheckProposal(body, 0)
	if err != nil {
		b.Fatal(err)
	}
	env := &schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: "h1", AdmittedAtMs: 1,
		Grounded: &schema.Grounded{Referent: "sku-1001", Fingerprint: p.Grant.IntentFingerprint,
			IdempotencyKey: strings.TrimPrefix(p.Grant.IntentFingerprint, "sha256:"), ObservationRef: "catalog:12"},
		Authorization: &schema.AuthorizationRecord{Grant: *p.Grant, DecidedAtMs: 2,
			Evaluations: []schema.PolicyEvaluation{{Layer: "grant", Outcome: schema.EvalPass}}}}
	in := &stages.Input{Subject: r.Subjects.Stage(subjects.StageDispatch, subjects.KindProposal, subjects.ProposalToken("h1", "bench-1")),
		Data: schema.MustMarshal(env)}
	return env, r, in
}

// BenchmarkDecodeEnvelope is what each stage after admission pays to read
// its hand-off (Route.Envelope).
func BenchmarkDecodeEnvelope(b *testing.B) {
	_, r, in := benchEnvelope(b)
	b.SetBytes(int64(len(in.Data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Envelope(in, stages.Authorized); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeEnvelope is what each stage pays to hand the envelope on.
func BenchmarkEncodeEnvelope(b *testing.B) {
	env, _, in := benchEnvelope(b)
	b.SetBytes(int64(len(in.Data)))
	b.ReportAllocs()
	for b.Loop() {
		schema.MustMarshal(env)
	}
}

// BenchmarkPeekString is the runner's bulkhead key of a dispatch and a
// grounding hand-off, read before the envelope is decoded.
func BenchmarkPeekString(b *testing.B) {
	_, _, in := benchEnvelope(b)
	b.SetBytes(int64(len(in.Data)))
	b.ReportAllocs()
	for b.Loop() {
		if p, ok := stages.PeekString(in.Data, "proposal", "intent", "provider"); !ok || p == "" {
			b.Fatal("no provider")
		}
		if _, ok := stages.PeekString(in.Data, "proposal", "grounding", "candidate_source"); ok {
			b.Fatal("a candidate source")
		}
	}
}
