package engine

import (
	"context"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/portcullis/portcullis/internal/retention"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// sweeper removes the store's records past their retention horizons
// (config block retention), holding the same locks as their writers; with
// a replicated journal, also the journal bucket's and the nonces'.
func (p *Processor) sweeper(jr kv.Journal) *retention.Sweeper {
	proposals, receipts := p.cfg.RetentionHorizons()
	return &retention.Sweeper{
		Shared:   p.sharedSweep(jr),
		Store:    p.store,
		Horizons: retention.Horizons{Proposals: proposals, Receipts: receipts},
		LockProposal: func(ref schema.ProposalRef) func() {
			admitted := p.store.Lock(kv.ProposalLockKey(ref))
			approval := p.approvals.Lock(ref)
			return func() { approval(); admitted() }
		},
		LockIntent: jr.Lock,
		Now:        func() int64 { return stages.NowMs(p.clock) },
		Log:        p.log.With("component", "retention"),
	}
}

// sharedSweep sweeps the buckets a cluster shares: the replicated
// journal's finished records and old dispatch-time ends
// (kvjs.Journal.Sweep), and the operator nonces no claim needs
// (kvjs.Nonces.Sweep). nil without them.
func (p *Processor) sharedSweep(jr kv.Journal) func(context.Context, retention.Horizons, int64) (retention.Stats, error) {
	rj, ok := jr.(*kvjs.Journal)
	if !ok {
		return nil
	}
	return func(ctx context.Context, h retention.Horizons, now int64) (retention.Stats, error) {
		js, err := rj.Sweep(ctx, h.Receipts, h.Proposals, time.UnixMilli(now))
		st := retention.Stats{Intents: js.Intents, Proposals: js.Ended, Kept: js.Kept}
		if err != nil || p.replicatedNonces == nil {
			return st, err
		}
		st.Nonces, err = p.replicatedNonces.Sweep(ctx)
		return st, err
	}
}
