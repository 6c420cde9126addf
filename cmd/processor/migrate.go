package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/migrate"
)

const migrateAbout = `Moves a single node's local state — its dispatch journal (intents, receipts, reconciliation attempts,
pending polls), its parked and decided approvals and its admission records (proposal ids and delivery ids
taken) — into the buckets of the cluster FILE names (nats.url; store.journal "replicated", or "auto"), so that
its store.dir can then run with store.journal = "replicated". Run it with the processor that owns store.dir
stopped (the store is locked while it runs). Every record is written by a compare-and-set create: one the
cluster already holds is counted present when it is the same record (or a later version of it), reported as
a conflict otherwise, and never overwritten; running it again, or after it stopped midway, is safe. Once
everything moved the store is marked migrated. A proposal parked on a node whose NATS is not the cluster's
cannot move (a grant re-reads its envelope from the node's stream): decide it first. --accept-conflicts marks
the store even with conflicts, leaving the cluster's records as they are.
Prints counts only. Exit 0: marked migrated; 1: not (failed, conflicts, or parked proposals left); 2: usage.`

func cmdMigrate(c *cmdline, args []string, _ io.Reader) int {
	path := c.fs.String("config", "", "the `FILE` (HCL) the processor will run with on the cluster: its store.dir, the cluster's nats.url")
	accept := c.fs.Bool("accept-conflicts", false, "mark the store migrated even though some records conflict with the cluster's (which stay)")
	if _, code, done := c.parse(args); done {
		return code
	}
	if *path == "" {
		return c.usageError("--config is required")
	}
	cfg, err := config.Check(*path)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return 1
	}
	if _, err := os.Stat(cfg.Store.Dir); err != nil {
		return c.fail(fmt.Errorf("store.dir %s: %w (nothing to move)", cfg.Store.Dir, err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sum, err := migrate.Run(ctx, migrate.Options{Config: cfg, Log: log, AcceptConflicts: *accept})
	printMigration(c.stdout, cfg, sum)
	switch {
	case errors.Is(err, migrate.ErrIncomplete):
		why := "records conflict with the cluster's (listed above): check them, then run again with --accept-conflicts to keep the cluster's"
		if sum.Approvals.NotMoved > 0 {
			why = "proposals are parked in a stream the cluster does not have: decide them on the single node (store.journal = \"local\"), then run again"
		}
		fmt.Fprintf(c.stderr, "processor migrate: not marked migrated: %s\n", why)
		return 1
	case err != nil:
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "store.dir %s is marked migrated: run it with store.journal = \"replicated\"\n", cfg.Store.Dir)
	return 0
}

func printMigration(w io.Writer, cfg *config.Config, s migrate.Summary) {
	fmt.Fprintf(w, "%-22s %8s %8s %8s %9s\n", "moved into "+cfg.Prefix+"_*", "created", "present", "conflict", "not moved")
	for _, r := range []struct {
		name string
		c    migrate.Counts
	}{{"intents", s.Intents}, {"dispatch-time ends", s.Ended}, {"approvals", s.Approvals}, {"proposal ids", s.Admissions}, {"delivery ids", s.Deliveries}} {
		fmt.Fprintf(w, "%-22s %8d %8d %8d %9d\n", r.name, r.c.Created, r.c.Present, r.c.Conflict, r.c.NotMoved)
	}
	fmt.Fprintf(w, "timers now the cluster's: %d\n", s.Timers)
}
