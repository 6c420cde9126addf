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
	"github.com/portcullis/portcullis/subjects"
)

// startCluster starts a Clustered Env's cluster: with WithAuth, every
// server reads the accounts of cfg's roles as an external deployment's
// configuration would hold them (natsauth.AccountsBlock).
func (e *Env) startCluster(t testing.TB, cfg *config.Config) *Cluster {
	t.Helper()
	var opts []ClusterOption
	if block := e.accountsBlock(t, cfg); block != "" {
		opts = append(opts, ClusterAccounts(block))
	}
	return NewCluster(t, opts...)
}

// accountsBlock is the servers' accounts of cfg's roles with WithAuth
// (natsauth.AccountsBlock), "" without.
func (e *Env) accountsBlock(t testing.TB, cfg *config.Config) string {
	t.Helper()
	if e.auth == nil {
		return ""
	}
	pub, _ := e.auth.processor.PublicKey()
	block, err := natsauth.AccountsBlock(cfg, e.Subjects, pub)
	if err != nil {
		t.Fatal(err)
	}
	return block
}

// natsURL is where Env's clients connect: its server, or every server of
// its cluster.
func (e *Env) natsURL() string {
	if e.url != "" {
		return e.url
	}
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

	slot slot
}

// AddProcessor starts another processor of Env's deployment in process.
// Processors of a Clustered Env share the stages' consumers: each message
// goes to one of them.
func (e *Env) AddProcessor(t testing.TB, name string) *Instance {
	t.Helper()
	in := &Instance{Name: name, Config: e.ProcessorConfig(t, name), Logs: &LogBuffer{}}
	in.slot.name = "processor " + name
	in.slot.opts = e.slot.opts
	in.slot.opts.Config = in.Config
	in.slot.opts.Log = slog.New(slog.NewJSONHandler(io.MultiWriter(in.Logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() { in.Stop(t) })
	in.Start(t)
	return in
}

// Start starts the processor (again).
func (in *Instance) Start(t testing.TB) *engine.Processor {
	t.Helper()
	return in.slot.start(t)
}

// Stop drains and stops the processor, if running.
func (in *Instance) Stop(t testing.TB) {
	t.Helper()
	in.slot.stop(t)
}

// Processor returns the running processor (nil when stopped).
func (in *Instance) Processor() *engine.Processor { return in.slot.get() }

func (in *Instance) String() string { return fmt.Sprintf("processor %s", in.Name) }

// slot is one in-process processor: its options and, while it runs, the
// processor.
type slot struct {
	name string // in messages; "" is Env's own "processor"
	mu   sync.Mutex
	opts engine.Options
	proc *engine.Processor
}

func (s *slot) String() string {
	if s.name == "" {
		return "processor"
	}
	return s.name
}

func (s *slot) start(t testing.TB) *engine.Processor {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		t.Fatalf("testenv: %s already running", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := engine.Start(ctx, s.opts)
	if err != nil {
		t.Fatalf("%s start: %v", s, err)
	}
	s.proc = p
	return p
}

func (s *slot) stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		if err := p.Close(); err != nil {
			t.Errorf("%s stopped with error: %v", s, err)
		}
	}
}

func (s *slot) get() *engine.Processor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// consumers are the running processor's stage consumers, or those of
// the pipeline its options give (engine.Pipeline when none).
func (s *slot) consumers(subj subjects.Subjects, c *config.Config) []engine.Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return s.proc.Consumers()
	}
	p := s.opts.Pipeline
	if p == nil {
		p = engine.Pipeline()
	}
	return engine.Consumers(subj, c, p, nil)
}

func (s *slot) forget() {
	s.mu.Lock()
	s.proc = nil
	s.mu.Unlock()
}
