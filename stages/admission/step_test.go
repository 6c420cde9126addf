package admission_test

import (
	"reflect"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages/admission"
)

// TestStep walks the dedupe state machine: each row is the records a
// message finds and what it must do, so a change that admits a repeat, hands
// off twice or answers a reused id with another proposal's outcome fails.
func TestStep(t *testing.T) {
	ref := schema.ProposalRef{Host: "h1", ProposalID: "p-1"}
	const seq, other = 7, 3
	base := admission.Facts{Ref: ref, DeliveryID: "d-1", Digest: "dg", Seq: seq, Now: 100, TakesIDs: true}
	mine := &kv.Admitted{Digest: "dg", Seq: seq, AtMs: 50}
	with := func(edit func(f *admission.Facts)) admission.Facts {
		f := base
		edit(&f)
		return f
	}
	claim := &admission.Admission{
		Admitted: kv.Admitted{Digest: "dg", Seq: seq, AtMs: 100},
		Delivery: kv.Delivery{ProposalID: "p-1", Seq: seq, AtMs: 100},
	}
	failedClaim := &admission.Admission{Admitted: claim.Admitted, Delivery: claim.Delivery}
	failedClaim.Admitted.Failed = true
	cases := []struct {
		name string
		f    admission.Facts
		want admission.Decision
	}{
		{"a new message claims its ids", base, admission.Decision{Admit: claim}},
		{"claimed: handed off, then recorded forwarded", with(func(f *admission.Facts) { f.Claimed = true }),
			admission.Decision{Answer: admission.AnswerHandOff, Forward: &kv.Admitted{Digest: "dg", Seq: seq, AtMs: 100, Forwarded: true}}},
		{"claimed, refused: the refusal is its recorded answer", with(func(f *admission.Facts) { f.Claimed, f.Refused = true, true }),
			admission.Decision{Answer: admission.AnswerRefuse}},
		{"a delivery id another message took: its outcome", with(func(f *admission.Facts) {
			f.Delivery = &kv.Delivery{ProposalID: "p-0", Seq: other}
		}), admission.Decision{Answer: admission.AnswerReplay, Replay: schema.ProposalRef{Host: "h1", ProposalID: "p-0"},
			Note: "admission: repeated delivery; the recorded outcome is republished"}},
		{"the claim lost the delivery id", with(func(f *admission.Facts) {
			f.Claimed, f.Claim = true, kv.AdmissionClaim{Delivery: &kv.Delivery{ProposalID: "p-0", Seq: other}}
		}), admission.Decision{Answer: admission.AnswerReplay, Replay: schema.ProposalRef{Host: "h1", ProposalID: "p-0"},
			Note: "admission: repeated delivery; the recorded outcome is republished"}},
		{"same content under a new delivery id: a repeat", with(func(f *admission.Facts) {
			f.Admitted = &kv.Admitted{Digest: "dg", Seq: other}
		}), admission.Decision{Repeat: &kv.Delivery{ProposalID: "p-1", Seq: seq, AtMs: 100}, Answer: admission.AnswerReplay, Replay: ref,
			Note: "admission: repeated proposal; the recorded outcome is republished"}},
		{"the claim lost the proposal id to the same content: a repeat", with(func(f *admission.Facts) {
			f.Claimed, f.Claim = true, kv.AdmissionClaim{Admitted: &kv.Admitted{Digest: "dg", Seq: other}}
		}), admission.Decision{Repeat: &kv.Delivery{ProposalID: "p-1", Seq: seq, AtMs: 100}, Answer: admission.AnswerReplay, Replay: ref,
			Note: "admission: repeated proposal; the recorded outcome is republished"}},
		{"other content under a taken id: reused", with(func(f *admission.Facts) {
			f.Admitted = &kv.Admitted{Digest: "other", Seq: other}
		}), admission.Decision{Answer: admission.AnswerReused}},
		{"this message, handed off already: nothing", with(func(f *admission.Facts) {
			a := *mine
			a.Forwarded = true
			f.Admitted = &a
		}), admission.Decision{}},
		{"this message, given up on: its outcome", with(func(f *admission.Facts) {
			a := *mine
			a.Failed = true
			f.Admitted = &a
		}), admission.Decision{Answer: admission.AnswerReplay, Replay: ref}},
		{"this message, recorded but not handed off: hand off again", with(func(f *admission.Facts) { f.Admitted = mine }),
			admission.Decision{Answer: admission.AnswerHandOff, Forward: &kv.Admitted{Digest: "dg", Seq: seq, AtMs: 50, Forwarded: true}}},
		{"no ids taken, id free: refused unrecorded", with(func(f *admission.Facts) { f.TakesIDs, f.Refused = false, true }),
			admission.Decision{Answer: admission.AnswerRefuseUnrecorded}},
		{"no ids taken, id taken: reused", with(func(f *admission.Facts) {
			f.TakesIDs, f.Refused, f.Admitted = false, true, &kv.Admitted{Digest: "dg", Seq: other}
		}), admission.Decision{Answer: admission.AnswerReused}},
		{"giving up: claims its ids as failed", with(func(f *admission.Facts) { f.GivingUp = true }),
			admission.Decision{Admit: failedClaim}},
		{"giving up, claimed: PROCESSING_FAILED", with(func(f *admission.Facts) { f.GivingUp, f.Claimed = true, true }),
			admission.Decision{Answer: admission.AnswerFailed}},
		{"giving up, same content taken by another message: reused, not a repeat", with(func(f *admission.Facts) {
			f.GivingUp, f.Admitted = true, &kv.Admitted{Digest: "dg", Seq: other}
		}), admission.Decision{Answer: admission.AnswerReused}},
		{"giving up, taken by itself meanwhile: decided as Handle does", with(func(f *admission.Facts) {
			f.GivingUp, f.Claimed, f.Claim = true, true, kv.AdmissionClaim{Admitted: mine}
		}), admission.Decision{Answer: admission.AnswerHandle}},
		{"giving up, given up on elsewhere: that outcome", with(func(f *admission.Facts) {
			a := *mine
			a.Failed = true
			f.GivingUp, f.Admitted = true, &a
		}), admission.Decision{Answer: admission.AnswerReplay, Replay: ref}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := admission.Step(c.f)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Step = %+v, want %+v", got, c.want)
			}
		})
	}
}
