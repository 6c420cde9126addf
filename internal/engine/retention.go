package engine

import (
	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/internal/retention"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
)

// sweeper removes the store's records past their retention horizons
// (config block retention), holding the same locks as their writers.
func (p *Processor) sweeper(jr journal.Store) *retention.Sweeper {
	proposals, receipts := p.cfg.RetentionHorizons()
	return &retention.Sweeper{
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
