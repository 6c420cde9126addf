package admin

import (
	"fmt"
	"slices"

	"github.com/portcullis/portcullis/schema"
)

// Resolver records the finding of the operator named operator about an
// indeterminate effect: present or absent, with one evidence reference.
// The reconciliation stage does it (engine.Resolver wires it in: operator
// code imports no stage). A refusal is an *Error: CodeBadRequest (not a
// fingerprint, bad evidence), CodeNotFound (no receipt) or
// CodeNotIndeterminate; any other error is internal.
type Resolver interface {
	Resolve(fp string, present bool, evidenceRef, operator string, checks ResolveChecks) (Resolution, error)
}

// Resolution is what an operator's settlement recorded.
type Resolution struct {
	Receipt     schema.Receipt
	OutcomeKind schema.Kind
	Proposals   []schema.ProposalRef
}

// Pending is one action whose effect is unknown, for the operator's queue.
type Pending struct {
	Intent    `json:",inline"`
	Proposals []schema.ProposalRef `json:"proposals"`
	// SinceMs is when the effect became unknown.
	SinceMs int64 `json:"since_ms"`
	// Attempts polls so far of MaxAttempts; Exhausted once they are spent.
	Attempts    int  `json:"attempts"`
	MaxAttempts int  `json:"max_attempts"`
	Exhausted   bool `json:"exhausted"`
	// NextAtMs is when the next poll is due (0: none).
	NextAtMs int64 `json:"next_at_ms"`
	// ErrorCode and ReceiptID are the latest receipt's.
	ErrorCode string `json:"error_code"`
	ReceiptID string `json:"receipt_id"`
}

// indeterminate lists every action whose effect is unknown, oldest first,
// from the journal's index.
func (s *Server) indeterminate() ([]Pending, error) {
	idx, err := s.Journal.Indeterminates()
	if err != nil {
		return nil, fmt.Errorf("admin: read index: %w", err)
	}
	out := make([]Pending, 0, len(idx))
	for _, e := range idx {
		rec, found, err := s.Journal.Load(e.Fingerprint)
		if err != nil {
			return nil, fmt.Errorf("admin: read journal: %w", err)
		}
		if !found || rec.Receipt == nil || rec.Receipt.Status != schema.StatusReconciliationRequired {
			continue // settled meanwhile
		}
		out = append(out, Pending{
			Intent: Intent{
				Fingerprint: rec.Fingerprint,
				Target: schema.Target{
					Provider:    rec.Provider,
					Capability:  rec.Capability,
					Operation:   rec.Operation,
					Environment: rec.Environment,
					Referent:    rec.Referent,
				},
			},
			Proposals: slices.Clone(rec.Proposals), SinceMs: e.SinceMs,
			Attempts: rec.ReconcileAttempt, MaxAttempts: s.ReconcileMaxAttempts, Exhausted: rec.ReconcileExhausted,
			NextAtMs: rec.ReconcileNextAtMs, ErrorCode: rec.Receipt.ErrorCode, ReceiptID: rec.Receipt.ReceiptID,
		})
	}
	slices.SortStableFunc(out, func(a, b Pending) int {
		switch {
		case a.SinceMs < b.SinceMs:
			return -1
		case a.SinceMs > b.SinceMs:
			return 1
		}
		return 0
	})
	return out, nil
}
