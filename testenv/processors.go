package testenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/engine"
	"github.com/portcullis/portcullis/internal/natsauth"
)

// startCluster starts a Clustered Env's cluster: with WithAuth, every
// server reads the accounts of cfg's roles as an external deployment's
// configuration would hold them (natsauth.AccountsBlock).
func (e *Env) startCluster(t testing.TB, cfg *config.Config) *Cluster {
	t.Helper()
	var opts []ClusterOption
	if e.auth != nil {
		pub, _ := e.auth.processor.PublicKey()
		block, err := natsauth.AccountsBlock(cfg, e.Subjects, pub)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, ClusterAccounts(block))
	}
	return NewCluster(t, opts...)
}

// natsURL is where Env's clients connect: its server, or every server of
// its cluster.
func (e *Env) natsURL() string {
	if e.Cluster != nil {
		return e.Cluster.URL()
	}
	return e.Server.ClientURL()
}

// Account is the NATS account of the processor's streams: natsauth's
// processor account with WithAuth, the server's global account without.
func (e *Env) Account() string {
	if e.Auth {
		return natsauth.ProcessorAccount
	}
	return "$G"
}

// StepDownStream makes the leader of one of the processor's streams step
// down (Clustered only) and returns the servers it moved from and to.
func (e *Env) StepDownStream(t testing.TB, stream string) (from, to int) {
	t.Helper()
	if e.Cluster == nil {
		t.Fatal("testenv: StepDownStream needs a Clustered Env")
	}
	return e.Cluster.StepDownStream(t, e.Account(), stream)
}

// ProcessorConfig returns the configuration of another processor of Env's
// deployment named name: Env's configuration with a store directory of
// its own and Env's internal key file (created now if missing, so that
// processors starting together agree on it). It runs in process with
// AddProcessor, or as a binary with StartProcess.
func (e *Env) ProcessorConfig(t testing.TB, name string) *config.Config {
	t.Helper()
	e.Sealer(t) // the key file exists before anyone starts
	c := *e.Config
	c.Internal.KeyFile = e.Config.InternalKeyFile()
	c.Store.Dir = filepath.Join(t.TempDir(), name, "store")
	return &c
}

// Instance is another processor of Env's deployment running in this
// process: ProcessorConfig's configuration, Env's clock and fake adapters
// (Fakes count every processor's calls). It is stopped when the test ends,
// before the servers.
type Instance struct {
	Name   string
	Config *config.Config
	// Logs holds what this processor logged.
	Logs *LogBuffer

	mu   sync.Mutex
	opts engine.Options
	proc *engine.Processor
}

// AddProcessor starts another processor of Env's deployment in process.
// Processors of a Clustered Env share the stages' consumers: each message
// goes to one of them.
func (e *Env) AddProcessor(t testing.TB, name string) *Instance {
	t.Helper()
	in := &Instance{Name: name, Config: e.ProcessorConfig(t, name), Logs: &LogBuffer{}}
	in.opts = e.opts
	in.opts.Config = in.Config
	in.opts.Log = slog.New(slog.NewJSONHandler(io.MultiWriter(in.Logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() { in.Stop(t) })
	in.Start(t)
	return in
}

// Start starts the processor (again).
func (in *Instance) Start(t testing.TB) *engine.Processor {
	t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.proc != nil {
		t.Fatalf("testenv: processor %s already running", in.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, in.opts)
	if err != nil {
		t.Fatalf("processor %s start: %v", in.Name, err)
	}
	in.proc = p
	return p
}

// Stop drains and stops the processor, if running.
func (in *Instance) Stop(t testing.TB) {
	t.Helper()
	in.mu.Lock()
	p := in.proc
	in.proc = nil
	in.mu.Unlock()
	if p != nil {
		if err := p.Close(); err != nil {
			t.Errorf("processor %s stopped with error: %v", in.Name, err)
		}
	}
}

// Processor returns the running processor (nil when stopped).
func (in *Instance) Processor() *engine.Processor {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.proc
}

// String names the instance in test logs.
func (in *Instance) String() string { return fmt.Sprintf("processor %s", in.Name) }
