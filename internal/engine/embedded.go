package engine

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A full disk under the embedded server (nats.store_dir). nats-server
// marks a stream whose store failed to write — "no space left on device"
// included — and from then on refuses every write to it without an
// answer, until the stream is loaded again: without help the processor
// would retry its publishes for ever while /readyz said ready, and stay
// stuck after space returned. So the processor watches its server's
// health (what nats-server's /healthz reports, stream write errors among
// it): a stream out of space makes the processor unready, naming the
// cause; once nats.store_dir has room again (embeddedRoom) it restarts
// the server on the same address and store, which loads every stream
// afresh, and its connection, consumers and every stage carry on (their
// unanswered publishes are unknowns, retried under the same message ids;
// inputs are kept). Any other write error stops the processor: only an
// operator can fix it. (room.go keeps the disk from filling in the first
// place, where it fills gradually.)

// embeddedWatch is how often the embedded server's health is read.
const embeddedWatch = time.Second

// freeSpace reports the bytes free to an unprivileged writer under dir.
var freeSpace = diskFree

// watchEmbedded runs while the processor does, with an embedded server.
func (p *Processor) watchEmbedded(ctx context.Context) {
	every(ctx, embeddedWatch, func() bool {
		werr := writeError(p.srv)
		switch {
		case werr == "":
			return true
		case !strings.Contains(werr, "no space left on device"):
			p.fail(fmt.Errorf("processor: the embedded NATS server cannot write its JetStream store (nats.store_dir %s): %s", p.cfg.NATS.StoreDir, werr))
			return false
		}
		p.health.natsFull.Store(true)
		p.log.Error("embedded NATS store full: nothing is written until nats.store_dir has room again; the embedded server restarts then",
			"store_dir", p.cfg.NATS.StoreDir, "err", werr)
		if !p.awaitRoom(ctx) {
			return false
		}
		if err := p.restartServer(); err != nil {
			p.fail(fmt.Errorf("processor: restarting the embedded NATS server after its store had room again: %w", err))
			return false
		}
		p.health.natsFull.Store(false)
		p.log.Info("embedded NATS server restarted: its store has room again", "store_dir", p.cfg.NATS.StoreDir)
		return true
	})
}

// writeError is the first stream write error srv's health reports, or "".
func writeError(srv *server.Server) string {
	h := srv.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		if e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			return e.Error
		}
	}
	return ""
}

// awaitRoom waits until nats.store_dir has DiskReserve free (a restart
// on a disk still full would fail its streams again at once), or ctx
// ends (false).
func (p *Processor) awaitRoom(ctx context.Context) bool {
	t := time.NewTicker(embeddedWatch)
	defer t.Stop()
	for {
		free, err := freeSpace(p.cfg.NATS.StoreDir)
		if err == nil && free >= DiskReserve {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// restartServer stops the embedded server and starts it again on the
// address it had, with the same store and identity.
func (p *Processor) restartServer() error {
	old := p.srv
	port := old.Addr().(*net.TCPAddr).Port
	old.Shutdown()
	old.WaitForShutdown()
	srv, err := p.launchServer(port)
	if err != nil {
		return err
	}
	p.srv = srv
	return nil
}
