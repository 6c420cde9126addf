package engine

import (
	"errors"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/stages/dispatch"
	"github.com/portcullis/portcullis/stages/reconciliation"
)

// Resolver is the operator API's admin.Resolver: the reconciliation stage's
// Resolve, its refusals as the API's errors. The engine wires the two, so
// that operator code imports no stage.
type Resolver struct{ Stage *reconciliation.Stage }

var _ admin.Resolver = Resolver{}

// Resolve records an operator's finding (reconciliation.Stage.Resolve).
func (r Resolver) Resolve(fp string, present bool, evidenceRef, operator string, checks admin.ResolveChecks) (admin.Resolution, error) {
	res, err := r.Stage.ResolveChecked(fp, present, evidenceRef, operator, checks.ReceiptID, checks.ObservedAtMs)
	switch {
	case errors.Is(err, reconciliation.ErrInvalidFingerprint), errors.Is(err, reconciliation.ErrInvalidEvidence):
		return admin.Resolution{}, &admin.Error{Code: admin.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, reconciliation.ErrNotFound):
		return admin.Resolution{}, &admin.Error{Code: admin.CodeNotFound, Message: "no receipt for " + fp}
	case errors.Is(err, reconciliation.ErrNotIndeterminate), errors.Is(err, reconciliation.ErrSuperseded):
		return admin.Resolution{}, &admin.Error{Code: admin.CodeNotIndeterminate, Message: err.Error()}
	case err != nil:
		return admin.Resolution{}, err
	}
	return admin.Resolution{Receipt: res.Receipt, OutcomeKind: res.OutcomeKind, Proposals: res.Proposals}, nil
}

// adaptersAs is the adapters as a stage names them (an interface of its
// own, which every adapters.Adapter satisfies).
func adaptersAs[A any](as map[string]adapters.Adapter) map[string]A {
	out := make(map[string]A, len(as))
	for name, a := range as {
		if x, ok := any(a).(A); ok {
			out[name] = x
		}
	}
	return out
}

// dispatchProviders is what dispatch uses of the configured providers.
func dispatchProviders(ps []config.Provider) []dispatch.Provider {
	out := make([]dispatch.Provider, len(ps))
	for i, p := range ps {
		out[i] = dispatch.Provider{Name: p.Name, Timeout: p.Timeout, UnavailableRetry: p.UnavailableRetry, MaxInFlight: p.MaxInFlight}
	}
	return out
}
