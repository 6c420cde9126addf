package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
)

// A processor holds its embedded server's nats.store_dir as Pebble holds
// store.dir: a second processor on the same JetStream store (with a
// store.dir of its own) is refused at start, naming the holder, before it
// starts a server on the first one's store; once the first stops, the
// directory is free again (issue 34: both started).
func TestNATSStoreDirHeld(t *testing.T) {
	dir := t.TempDir()
	cfg := func(store string) *config.Config {
		c := config.Dev(dir)
		c.Store.Dir = filepath.Join(dir, store)
		c.NATS.Listen, c.Metrics.Listen = "127.0.0.1:0", ""
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := engine.Start(ctx, engine.Options{Config: cfg("s1")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = engine.Start(ctx, engine.Options{Config: cfg("s2")})
	want := filepath.Join(dir, "nats") + " is held by this process"
	if !errors.Is(err, engine.ErrNATSStoreLocked) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "give this processor a nats.store_dir of its own") {
		t.Fatalf("second processor on the same nats.store_dir: %v, want ErrNATSStoreLocked saying %q", err, want)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := engine.Start(ctx, engine.Options{Config: cfg("s2")})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}
