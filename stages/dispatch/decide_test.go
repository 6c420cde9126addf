package dispatch

import (
	"errors"
	"fmt"
	"testing"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

func TestMapDispatch(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("adapters: demo dispatch: %w", err) }
	cases := []struct {
		name      string
		reply     schema.AdapterReply
		err       error
		status    schema.Status
		next      schema.NextAction
		attempted bool
		kind      schema.Kind
		code      schema.Code // "" no incident
		boundary  schema.Boundary
		errorCode string
	}{
		{"confirmed", schema.AdapterReply{Outcome: "confirmed", ProviderActionID: "a:1"}, nil, schema.StatusConfirmed, schema.NextNone, true, schema.KindConfirmed, "", "", ""},
		{"acknowledged", schema.AdapterReply{Outcome: "acknowledged"}, nil, schema.StatusAcknowledged, schema.NextVerify, true, schema.KindAcknowledged, "", "", ""},
		{"rejected", schema.AdapterReply{Outcome: "rejected", ErrorCode: "card_declined"}, nil, schema.StatusRejected, schema.NextNone, true, schema.KindRejected, schema.CodeProviderRejected, schema.BoundaryInvoked, "card_declined"},
		{"rejected without code", schema.AdapterReply{Outcome: "rejected"}, nil, schema.StatusRejected, schema.NextNone, true, schema.KindRejected, schema.CodeProviderRejected, schema.BoundaryInvoked, string(schema.CodeProviderRejected)},
		{"failed before dispatch", schema.AdapterReply{Outcome: "failed_before_dispatch"}, nil, schema.StatusFailedBeforeDispatch, schema.NextNone, false, schema.KindFailedBeforeDispatch, schema.CodeProviderFailedBeforeDispatch, schema.BoundaryNotInvoked, string(schema.CodeProviderFailedBeforeDispatch)},
		{"indeterminate", schema.AdapterReply{Outcome: "indeterminate"}, nil, schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeProviderIndeterminate, schema.BoundaryInvoked, string(schema.CodeProviderIndeterminate)},
		{"no responders", schema.AdapterReply{}, wrap(adapters.ErrNotInvoked), schema.StatusFailedBeforeDispatch, schema.NextNone, false, schema.KindFailedBeforeDispatch, schema.CodeAdapterUnavailable, schema.BoundaryNotInvoked, string(schema.CodeAdapterUnavailable)},
		{"timeout", schema.AdapterReply{}, wrap(adapters.ErrTimeout), schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeAdapterTimeout, schema.BoundaryUnknown, string(schema.CodeAdapterTimeout)},
		{"malformed", schema.AdapterReply{}, wrap(adapters.ErrMalformedReply), schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeMalformedAdapterResult, schema.BoundaryInvoked, string(schema.CodeMalformedAdapterResult)},
		{"unknown error", schema.AdapterReply{}, errors.New("connection reset"), schema.StatusReconciliationRequired, schema.NextReconcile, true, schema.KindReconciliationRequired, schema.CodeAdapterError, schema.BoundaryUnknown, string(schema.CodeAdapterError)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := MapDispatch(tc.reply, tc.err)
			if v.Status != tc.status || v.NextAction != tc.next || v.Attempted != tc.attempted || v.ErrorCode != tc.errorCode {
				t.Errorf("verdict = %+v", v)
			}
			in := kv.Intent{Fingerprint: "sha256:" + fmt.Sprintf("%064x", 1), Provider: "demo", Referent: "svc:1"}
			r := Receipt(&in, v, "dispatch", nil, 10)
			Record(&in, r, v, 10)
			o := Outcome(&in, schema.ProposalRef{Host: "h", ProposalID: "p-1"}, 11)
			if o.Kind != tc.kind || o.EffectTruth != tc.kind.EffectTruth() || o.Terminal != tc.kind.Terminal() {
				t.Errorf("outcome = %+v", o)
			}
			if tc.code == "" {
				if len(o.Incidents) != 0 {
					t.Errorf("incidents = %+v", o.Incidents)
				}
			} else if len(o.Incidents) != 1 || o.Incidents[0].Code != tc.code || o.Incidents[0].DispatchBoundary != tc.boundary || o.Incidents[0].Phase != schema.PhaseDispatch {
				t.Errorf("incidents = %+v", o.Incidents)
			}
			if *o.Fingerprint != in.Fingerprint || *o.Referent != "svc:1" || o.Receipt == nil || o.Receipt.ReceiptID != r.ReceiptID {
				t.Errorf("outcome binding = %+v", o)
			}
			if Indeterminate(&r) != (tc.status == schema.StatusReconciliationRequired) {
				t.Error("indeterminate")
			}
		})
	}
}

func TestDeniedAndInterrupted(t *testing.T) {
	if PhaseOf(schema.CodeGrantExpired) != schema.PhaseAuthorization {
		t.Error("grant code phase")
	}
	if PhaseOf(schema.CodeDisclosureRefused) != schema.PhaseDisclosure {
		t.Error("disclosure code phase")
	}
	v := Interrupted()
	if v.Status != schema.StatusReconciliationRequired || !v.Attempted || v.Incident.DispatchBoundary != schema.BoundaryUnknown {
		t.Errorf("interrupted = %+v", v)
	}
}

func TestReceiptIDIsDeterministic(t *testing.T) {
	a, b := ReceiptID("sha256:00", "dispatch"), ReceiptID("sha256:00", "dispatch")
	if a != b || a == ReceiptID("sha256:00", "interrupted") || a == ReceiptID("sha256:01", "dispatch") {
		t.Errorf("receipt ids %s %s", a, b)
	}
}
