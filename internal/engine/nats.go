package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/natsauth"
	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/kv/dirlock"
	"github.com/portcullis/portcullis/schema/keyfile"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// loadInternalKey reads the internal HMAC key, creating it (and its
// directory, mode 0700) at the first start.
func loadInternalKey(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("engine: internal.key_file directory: %w", err)
	}
	key, err := keyfile.LoadOrCreateInternal(path)
	if err != nil {
		return nil, fmt.Errorf("engine: internal.key_file: %w", err)
	}
	return key, nil
}

// connect starts the embedded server (or not) and connects the
// processor's own identity.
func (p *Processor) connect() error {
	n := p.cfg.NATS
	url := n.URL
	p.natsErrs = newNATSErrors(p.log.Warn)
	opts := []nats.Option{
		nats.Name("portcullis-processor"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		p.natsErrs.option(),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(MaxPingsOut),
		// What the connection does under a partition is in the log.
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // closed on purpose (a stop, a refused start): nothing to reconnect
			}
			p.log.Warn("nats disconnected; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.log.Info("nats reconnected", "server", redactURL(nc.ConnectedUrl()))
		}),
	}
	if n.Embedded {
		// The processor's own identity is created at every start: its seed
		// never leaves this process (SPEC §2.8).
		kp, err := nkeys.CreateUser()
		if err != nil {
			return fmt.Errorf("engine: processor identity: %w", err)
		}
		pub, _ := kp.PublicKey()
		if err := p.startServer(pub); err != nil {
			return err
		}
		url = p.srv.ClientURL()
		if n.Auth {
			opts = append(opts, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub)))
		}
	}
	login, err := loginOptions(n)
	if err != nil {
		return err
	}
	// The stages batch their writes on the connection (stages.Wire).
	p.wire = &stages.Wire{}
	p.nc, p.js, err = dial(url, append(opts, append(login, p.wire.Option())...))
	if err == nil {
		p.wire.Attach(p.nc)
	}
	return err
}

// A server that goes silent (a partition: no reset, no error, its TCP
// connection alive) is noticed only by pings. With nats.go's defaults (a
// ping every 2 minutes, 2 unanswered) a processor kept its connection to
// a server cut off from it for 4 minutes or more, doing nothing though
// the other servers were reachable (TestPartitionLeadersCutOff). With
// these it gives the server up after about 20 seconds and reconnects to
// another; a ping every 5 seconds costs nothing.
const (
	PingInterval = 5 * time.Second
	MaxPingsOut  = 3
)

// loginOptions are the processor's login (nats.credentials, with an
// external server) and TLS options.
func loginOptions(n config.NATS) ([]nats.Option, error) {
	var opts []nats.Option
	if !n.Embedded && n.Credentials != "" {
		o, err := credentialsOption(n.Credentials)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o...)
	}
	if t := n.TLS; t != nil {
		if t.CAFile != "" {
			opts = append(opts, nats.RootCAs(t.CAFile))
		}
		if !n.Embedded && t.CertFile != "" {
			opts = append(opts, nats.ClientCert(t.CertFile, t.KeyFile))
		}
	}
	return opts, nil
}

func dial(url string, opts []nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: connect to NATS at %s: %w", redactURL(url), err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("engine: jetstream: %w", err)
	}
	return nc, js, nil
}

// Connect connects to the external NATS servers of c (nats.url) as the
// processor does — its nats.credentials and TLS — for a tool that works on
// the processor's streams and buckets (`processor migrate`).
func Connect(c *config.Config) (*nats.Conn, jetstream.JetStream, error) {
	if c.NATS.Embedded {
		return nil, nil, errors.New("engine: the configuration runs an embedded server (no nats.url)")
	}
	opts, err := loginOptions(c.NATS)
	if err != nil {
		return nil, nil, err
	}
	return dial(c.NATS.URL, append(opts, nats.Name("portcullis-tool")))
}

// credentialsOption logs in with nats.credentials: a .creds file (user JWT
// and seed) or an nkey seed file; either way replies come to the
// identity's own inbox prefix.
func credentialsOption(path string) ([]nats.Option, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("engine: nats.credentials: %w", err)
	}
	if strings.Contains(string(raw), "BEGIN NATS USER JWT") {
		return []nats.Option{nats.UserCredentials(path)}, nil
	}
	kp, err := keyfile.LoadSeed(path)
	if err != nil {
		return nil, fmt.Errorf("engine: nats.credentials: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("engine: nats.credentials: %w", err)
	}
	return []nats.Option{nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(subjects.Inbox(pub))}, nil
}

// redactURL drops user information from a server URL list for messages.
func redactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, s := range parts {
		if at := strings.LastIndex(s, "@"); at >= 0 {
			if scheme := strings.Index(s, "://"); scheme >= 0 && scheme < at {
				parts[i] = s[:scheme+3] + "…@" + s[at+1:]
			}
		}
	}
	return strings.Join(parts, ",")
}

// startServer starts the embedded nats-server. With auth on, every role is
// an nkey user in an account of its own and the processor's identity the
// user of natsauth.ProcessorAccount, the one account with JetStream (SPEC
// §2.8); with auth off, everyone shares the server's global account. TLS
// when configured. A listen address in use fails at once, before the
// server is created.
func (p *Processor) startServer(processorKey string) error {
	n := p.cfg.NATS
	_, portStr, err := net.SplitHostPort(n.Listen)
	if err != nil {
		return fmt.Errorf("engine: nats.listen %q: %w", n.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("engine: nats.listen %q: not a port", n.Listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else if err := probeListen(n.Listen); err != nil {
		return fmt.Errorf("engine: nats.listen %s: %w", n.Listen, err)
	}
	// The store directory's lock first: nats-server does not lock it, and
	// two servers on one JetStream store corrupt it.
	if err := p.lockNATSStore(); err != nil {
		return err
	}
	p.srvKey = processorKey
	srv, err := p.launchServer(port)
	if err != nil {
		return err
	}
	p.srv = srv
	return nil
}

// launchServer creates and starts the embedded server on port (the
// configured host), and waits until it accepts connections.
func (p *Processor) launchServer(port int) (*server.Server, error) {
	n := p.cfg.NATS
	host, _, _ := net.SplitHostPort(n.Listen)
	opts := &server.Options{
		ServerName: "portcullis",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   n.StoreDir,
		SyncAlways: n.SyncAlways,
		NoSigs:     true,
		NoLog:      true,
		MaxPayload: EmbeddedMaxPayload(p.cfg),
		// The streams' budgets are reservations against this limit, not
		// space used; left unset, it is 75 % of the disk free at start,
		// and the default budgets (about 10 GiB) refuse to be created on
		// a disk with less than about 14 GiB free.
		JetStreamMaxStore: EmbeddedMaxStore,
	}
	if n.Auth {
		// Every role its own account, the processor's with JetStream
		// (SPEC §2.8; natsauth). Built anew at every start: an account
		// belongs to one server.
		accounts, users, err := natsauth.ServerAuth(p.cfg, p.subj, p.srvKey)
		if err != nil {
			return nil, fmt.Errorf("engine: embedded nats: %w", err)
		}
		opts.Accounts, opts.Nkeys = accounts, users
	}
	if t := n.TLS; t != nil {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.CertFile, KeyFile: t.KeyFile})
		if err != nil {
			return nil, fmt.Errorf("engine: nats.tls: %w", err)
		}
		opts.TLSConfig = tc
		opts.TLSTimeout = 2
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("engine: embedded nats: %w", err)
	}
	// nats-server reports why it did not start (JetStream's store
	// directory not writable, a listener it could not open) only to its
	// logger, then gives up: catch that, instead of waiting for a
	// readiness that cannot come.
	fatal := &startLog{fatal: make(chan string, 1)}
	srv.SetLoggerV2(fatal, false, false, false)
	go srv.Start()
	if err := awaitStart(srv, fatal, embeddedStartTimeout); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("engine: embedded nats on %s (store_dir %s): %w", n.Listen, n.StoreDir, err)
	}
	if n.Auth {
		if err := natsauth.EnableJetStream(srv); err != nil {
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil, fmt.Errorf("engine: embedded nats: %w", err)
		}
	}
	return srv, nil
}

// ErrNATSStoreLocked is returned by Start when another processor holds the
// embedded server's nats.store_dir.
var ErrNATSStoreLocked = errors.New("engine: nats store directory in use")

// lockNATSStore takes the lock file in nats.store_dir (dirlock.Name; made
// with the directory if need be) for as long as the processor runs, as
// Pebble's lock does for store.dir: a second processor on the same
// embedded JetStream store is refused, naming the first.
func (p *Processor) lockNATSStore() error {
	n := p.cfg.NATS
	if err := os.MkdirAll(n.StoreDir, 0o755); err != nil {
		return fmt.Errorf("engine: embedded nats on %s (store_dir %s): %w", n.Listen, n.StoreDir, err)
	}
	lk, err := dirlock.Acquire(filepath.Join(n.StoreDir, dirlock.Name))
	var he *dirlock.HeldError
	switch {
	case errors.As(err, &he):
		return fmt.Errorf("%w: %s", ErrNATSStoreLocked, dirlock.InUse(n.StoreDir, he.Holder(), "nats.store_dir"))
	case err != nil:
		return fmt.Errorf("engine: embedded nats on %s (store_dir %s): %w", n.Listen, n.StoreDir, err)
	}
	p.natsLock = lk
	return nil
}

// embeddedStartTimeout bounds the embedded server's start when it reports
// no error (a cold start on a slow disk).
const embeddedStartTimeout = 10 * time.Second

// errNotStarted: the embedded server neither started nor said why.
var errNotStarted = errors.New("did not start")

// awaitStart waits until srv accepts connections, or reports the error it
// logged as fatal (at once), or timeout passes.
func awaitStart(srv *server.Server, log *startLog, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if srv.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		select {
		case msg := <-log.fatal:
			return errors.New(msg)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %s", errNotStarted, timeout)
		}
	}
}

// startLog is the embedded server's logger: it keeps the first fatal
// error (nats-server logs it, then stops starting) and drops the rest, as
// the server's NoLog did. It never exits the process, unlike nats-server's
// own logger.
type startLog struct{ fatal chan string }

func (l *startLog) Fatalf(format string, v ...any) {
	select {
	case l.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}
func (l *startLog) Noticef(string, ...any) {}
func (l *startLog) Warnf(string, ...any)   {}
func (l *startLog) Errorf(string, ...any)  {}
func (l *startLog) Debugf(string, ...any)  {}
func (l *startLog) Tracef(string, ...any)  {}

// EmbeddedMaxStore is the embedded server's JetStream file store limit,
// nats-server's own upper bound. Every stream Portcullis creates has a
// byte budget (streams.*_max_bytes) that JetStream reserves against it;
// what the disk must hold is what the streams store, which their
// retention bounds.
const EmbeddedMaxStore = 1 << 40

// EmbeddedMaxPayload is the embedded server's max_payload for c: the
// largest proposal with its headers, and at least the nats-server default.
func EmbeddedMaxPayload(c *config.Config) int32 {
	return int32(max(c.Admission.MaxPayloadBytes+headerAllowance, 1<<20))
}

// probeListen fails if addr cannot be listened on now (in use, not a local
// address, not permitted). The server would otherwise only log it.
func probeListen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			return op.Err
		}
		return err
	}
	return ln.Close()
}

// ClusterTimers ensures c's streams and buckets as a processor's start
// does (EnsureStreams) and returns the timers a processor of c arms on a
// cluster: message schedules in each Scheduled stage's timers stream (or
// in its own stream, where an earlier version put them), sealed with
// sealer — for a tool that arms timers as the processors would
// (`processor migrate`).
func ClusterTimers(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, c *config.Config, sealer *seal.Sealer) (*kvjs.Schedules, error) {
	_, legacy, deferred, err := ensureStreams(ctx, js, s, c, Pipeline(), nil)
	if err == nil {
		// A store being migrated parks nothing on the cluster yet.
		err = upgradeStreams(ctx, js, s, deferred, 0, nil)
	}
	if err != nil {
		return nil, err
	}
	return &kvjs.Schedules{JS: js, Subjects: s, Seal: sealer, Legacy: legacy}, nil
}
