// Package dispatch is the stage that calls providers: exactly once per
// fingerprint, whatever crashes, redeliveries or replays happen (SPEC §3
// Dispatch). The journal in Pebble (kv.Intent) is written with Sync before a
// provider is called and after it answers; a fingerprint that may have
// reached a provider is never sent again.
//
// decide.go holds the pure decisions: how an adapter's answer becomes a
// receipt and an outcome, and the receipt and timer identities. stage.go
// does the I/O in the order the spec fixes.
package dispatch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

// Verdict is what one provider answer (or failure) means.
type Verdict struct {
	Status     schema.Status // receipt status
	NextAction schema.NextAction
	// Attempted is false only when the provider was provably not contacted.
	Attempted bool
	// Incident is the outcome's incident; nil for confirmed and acknowledged.
	Incident *schema.Incident
	// ErrorCode is the receipt's error_code: the provider's own code when it
	// gave one, otherwise the incident's code.
	ErrorCode        string
	ProviderActionID string
	EvidenceRefs     []string
}

func incident(phase schema.Phase, code schema.Code) *schema.Incident {
	inc := schema.NewIncident(phase, code)
	return &inc
}

// MapDispatch turns an adapter's dispatch answer into a verdict. A timeout
// or an unknown error after the request may have been sent is
// indeterminate, never a failure (SPEC §3 Dispatch step 5).
func MapDispatch(reply schema.AdapterReply, err error) Verdict {
	if err != nil {
		code := schema.CodeAdapterError
		switch {
		case errors.Is(err, adapters.ErrNotInvoked):
			return Verdict{Status: schema.StatusFailedBeforeDispatch, NextAction: schema.NextNone,
				Incident: incident(schema.PhaseDispatch, schema.CodeAdapterUnavailable), ErrorCode: string(schema.CodeAdapterUnavailable)}
		case errors.Is(err, adapters.ErrTimeout):
			code = schema.CodeAdapterTimeout
		case errors.Is(err, adapters.ErrMalformedReply):
			code = schema.CodeMalformedAdapterResult
		}
		return Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true,
			Incident: incident(schema.PhaseDispatch, code), ErrorCode: string(code)}
	}
	v := Verdict{Attempted: true, ProviderActionID: reply.ProviderActionID, EvidenceRefs: reply.EvidenceRefs, ErrorCode: reply.ErrorCode}
	var code schema.Code
	switch reply.Outcome {
	case schema.ReplyConfirmed:
		v.Status, v.NextAction = schema.StatusConfirmed, schema.NextNone
	case schema.ReplyAcknowledged:
		v.Status, v.NextAction = schema.StatusAcknowledged, schema.NextVerify
	case schema.ReplyRejected:
		v.Status, v.NextAction, code = schema.StatusRejected, schema.NextNone, schema.CodeProviderRejected
	case schema.ReplyFailedBeforeDispatch:
		v.Status, v.NextAction, code = schema.StatusFailedBeforeDispatch, schema.NextNone, schema.CodeProviderFailedBeforeDispatch
		v.Attempted = false
	default: // indeterminate; the adapters refuse anything else as malformed
		v.Status, v.NextAction, code = schema.StatusReconciliationRequired, schema.NextReconcile, schema.CodeProviderIndeterminate
	}
	if code != "" {
		v.Incident = incident(schema.PhaseDispatch, code)
		if v.ErrorCode == "" {
			v.ErrorCode = string(code)
		}
	}
	return v
}

// Interrupted is the verdict for an in-flight record without a receipt: the
// processor stopped between "begin" and "receipt", so the provider may have
// acted. It is never dispatched again.
func Interrupted() Verdict {
	return Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true,
		Incident: incident(schema.PhaseDispatch, schema.CodeDispatchInterrupted), ErrorCode: string(schema.CodeDispatchInterrupted)}
}

// PhaseOf is the phase a denial code belongs to.
func PhaseOf(code schema.Code) schema.Phase {
	if p := schema.PhaseOf(code, schema.PhaseAuthorization, schema.PhaseDisclosure); p != "" {
		return p
	}
	return schema.PhaseAuthorization
}

// ReceiptID is deterministic: the same fingerprint and step always name the
// same receipt, so a replay writes and reports the same one.
func ReceiptID(fingerprint, step string) string {
	h := sha256.Sum256([]byte("receipt\x00" + fingerprint + "\x00" + step))
	return "rcpt_" + hex.EncodeToString(h[:16])
}

// Receipt builds the receipt of a verdict for an intent.
func Receipt(in *kv.Intent, v Verdict, step string, disclosure *schema.DisclosureRecord, nowMs int64) schema.Receipt {
	refs := v.EvidenceRefs
	if refs == nil {
		refs = []string{}
	}
	return schema.Receipt{
		ReceiptID:         ReceiptID(in.Fingerprint, step),
		Fingerprint:       in.Fingerprint,
		IdempotencyKey:    in.IdempotencyKey,
		Provider:          in.Provider,
		Capability:        in.Capability,
		Operation:         in.Operation,
		Environment:       in.Environment,
		Adapter:           in.Adapter,
		Status:            v.Status,
		DispatchAttempted: v.Attempted,
		NextAction:        v.NextAction,
		ProviderActionID:  v.ProviderActionID,
		EvidenceRefs:      refs,
		ErrorCode:         v.ErrorCode,
		Disclosure:        disclosure,
		RecordedAtMs:      nowMs,
	}
}

// Record stores a verdict's receipt on the intent: the journal's state, the
// latest receipt and the outcome to republish for later proposals.
func Record(in *kv.Intent, r schema.Receipt, v Verdict, nowMs int64) {
	in.State = kv.IntentDone
	in.ReceiptSeq++
	rc := r
	in.Receipt = &rc
	in.OutcomeKind = r.OutcomeKind()
	in.OutcomeTerminal = in.OutcomeKind.Terminal()
	in.OutcomeIncidents = nil
	if v.Incident != nil {
		in.OutcomeIncidents = []schema.Incident{*v.Incident}
	}
	in.UpdatedAtMs = nowMs
}

// Outcome is the outcome an intent's latest receipt gives a proposal.
func Outcome(in *kv.Intent, to schema.ProposalRef, nowMs int64) schema.Outcome {
	o := schema.NewOutcome(to, in.OutcomeKind, nowMs, append([]schema.Incident(nil), in.OutcomeIncidents...)...)
	o.Terminal = in.OutcomeTerminal
	o.Fingerprint = schema.StringPtr(in.Fingerprint)
	o.Referent = schema.StringPtr(in.Referent)
	if in.Receipt != nil {
		r := *in.Receipt
		o.Receipt = &r
	}
	return o
}

// Indeterminate reports whether a receipt leaves the effect unknown.
func Indeterminate(r *schema.Receipt) bool {
	return r != nil && r.Status == schema.StatusReconciliationRequired
}

// FingerprintHex is a fingerprint's 64 hex digits (subject token, KV key).
func FingerprintHex(fp string) string { return strings.TrimPrefix(fp, "sha256:") }
