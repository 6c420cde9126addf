package stages_test

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/bench"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// realEnvelopes are the bench's proposal as each stage hands it on:
// admitted (inline candidates, and a candidate source instead), grounded
// and authorized (as dispatch reads it, and as dispatch holds it).
func realEnvelopes(t testing.TB) []*schema.Envelope {
	t.Helper()
	body, err := bench.Proposal("bench-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := schema.CheckProposal(body, 0)
	if err != nil {
		t.Fatal(err)
	}
	admitted := &schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: "h1", AdmittedAtMs: 1}
	viaSource := *admitted
	viaSource.Proposal.Grounding.Candidates, viaSource.Proposal.Grounding.CandidateSource = nil, "catalog"
	grounded := *admitted
	grounded.Proposal.Grounding.Candidates = nil
	grounded.Grounded = &schema.Grounded{Referent: "sku-1001", Fingerprint: p.Grant.IntentFingerprint,
		IdempotencyKey: strings.TrimPrefix(p.Grant.IntentFingerprint, "sha256:"), ObservationRef: "catalog:12"}
	authorized := grounded
	authorized.Authorization = &schema.AuthorizationRecord{Grant: *p.Grant, DecidedAtMs: 2,
		Evaluations: []schema.PolicyEvaluation{{Layer: "grant", Outcome: schema.EvalPass}}}
	return []*schema.Envelope{admitted, &viaSource, &grounded, &authorized}
}

// benchEnvelope is the authorized envelope of the bench's proposal, as
// dispatch reads it, and the input carrying it on dispatch's subject in
// the given form (schema.EncodeEnvelope, or the JSON of earlier versions).
func benchEnvelope(b *testing.B, encode func(*schema.Envelope) []byte) (*schema.Envelope, stages.Route, *stages.Input) {
	b.Helper()
	subj, err := subjects.New("actions")
	if err != nil {
		b.Fatal(err)
	}
	r := stages.Route{Subjects: subj, Self: subjects.StageDispatch}
	env := realEnvelopes(b)[3]
	in := &stages.Input{Subject: r.Subjects.Stage(subjects.StageDispatch, subjects.KindProposal, subjects.ProposalToken("h1", "bench-1")),
		Data: encode(env)}
	return env, r, in
}

// The envelope benchmarks, on the bench's authorized envelope (798 bytes
// binary, 1861 JSON), 2 cores of an Oxide Virtual Turin-like Processor,
// go1.26, shared with other work (load ~11: wall ns/op varied 2×, so
// cpu-ns/op, the process's CPU per op, is the steadier column):
//
//	                          ns/op  cpu-ns/op   B/op  allocs/op
//	DecodeEnvelope/json       21200      10200   1040         12
//	DecodeEnvelope/binary      7600       4700   1872          4
//	EncodeEnvelope/json       11200       8700   2048          1
//	EncodeEnvelope/binary      2900       1770    896          1
//	PeekString/json (both)     4900       2100     32          2
//	PeekString/binary (both)    690        370     16          1
//
// BenchmarkDecodeEnvelope is what each stage after admission pays to read
// its hand-off (Route.Envelope).
func BenchmarkDecodeEnvelope(b *testing.B) {
	for form, encode := range envelopeForms {
		b.Run(form, func(b *testing.B) {
			_, r, in := benchEnvelope(b, encode)
			b.SetBytes(int64(len(in.Data)))
			b.ReportAllocs()
			defer cpuPerOp(b)()
			for b.Loop() {
				if _, err := r.Envelope(in, stages.Authorized); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeEnvelope is what each stage pays to hand the envelope on.
func BenchmarkEncodeEnvelope(b *testing.B) {
	for form, encode := range envelopeForms {
		b.Run(form, func(b *testing.B) {
			env, _, in := benchEnvelope(b, encode)
			b.SetBytes(int64(len(in.Data)))
			b.ReportAllocs()
			defer cpuPerOp(b)()
			for b.Loop() {
				encode(env)
			}
		})
	}
}

// BenchmarkPeekString is the runner's bulkhead key of a dispatch and a
// grounding hand-off, read before the envelope is decoded
// (schema.EnvelopeProvider and EnvelopeCandidateSource: on JSON, the
// PeekString scanner).
func BenchmarkPeekString(b *testing.B) {
	for form, encode := range envelopeForms {
		b.Run(form, func(b *testing.B) {
			_, _, in := benchEnvelope(b, encode)
			b.SetBytes(int64(len(in.Data)))
			b.ReportAllocs()
			defer cpuPerOp(b)()
			for b.Loop() {
				if p, ok := schema.EnvelopeProvider(in.Data); !ok || p == "" {
					b.Fatal("no provider")
				}
				if s, ok := schema.EnvelopeCandidateSource(in.Data); s != "" || (!ok && form == "binary") {
					b.Fatal("a candidate source")
				}
			}
		})
	}
}
