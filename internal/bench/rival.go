package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/subjects"
)

// The hosts of Rival: each signs with its own key, in its own tenant.
const (
	VictimHost = "victim"
	RivalHost  = "rival"
)

// Rivals are the two hosts' keys, made for a run.
type Rivals struct {
	Victim, Rival nkeys.KeyPair
}

// NewRivals makes the two hosts' keys.
func NewRivals() (Rivals, error) {
	v, err := nkeys.CreateUser()
	if err != nil {
		return Rivals{}, err
	}
	r, err := nkeys.CreateUser()
	if err != nil {
		return Rivals{}, err
	}
	return Rivals{Victim: v, Rival: r}, nil
}

// Config is the configuration Rival measures: the embedded server under
// dir, signed input only (each host in its own ingress streams, with its
// own consumers and budgets: the defaults), hosts VictimHost and RivalHost each
// in a tenant of its name, and provider Provider on the nats adapter.
func (r Rivals) Config(dir string) (*config.Config, error) {
	c := config.Defaults()
	c.NATS.StoreDir = filepath.Join(dir, "nats")
	c.NATS.Listen = "127.0.0.1:0"
	c.NATS.Auth = false // loopback; admission still checks every signature
	c.Store.Dir = filepath.Join(dir, "store")
	c.Metrics.Listen = ""
	for _, h := range []struct {
		name string
		kp   nkeys.KeyPair
	}{{VictimHost, r.Victim}, {RivalHost, r.Rival}} {
		pub, err := h.kp.PublicKey()
		if err != nil {
			return nil, err
		}
		c.Hosts = append(c.Hosts, trust.Host{Name: h.name, PublicKey: pub, Tenants: []string{"tenant:" + h.name}})
		c.Tenants = append(c.Tenants, trust.Tenant{Ref: "tenant:" + h.name, SecurityDomains: []string{"security-domain:" + h.name}})
	}
	c.Providers = []config.Provider{{
		Name: Provider, Adapter: adapters.KindNATS, Settings: adapters.NATSSettings{}, Timeout: config.DefaultProviderTimeout,
		UnavailableRetry: config.DefaultUnavailableRetry, MaxInFlight: config.DefaultMaxInFlight,
	}}
	return c, c.Validate()
}

// Rivalry is what Rival measured.
type Rivalry struct {
	// Alone is the victim's proposals at its rate with nothing else
	// running; During the same while the rival's burst is in the
	// pipeline (from its first publish to its last outcome).
	Alone, During Phase
	// Burst is the rival's proposals, from the first publish to the last
	// outcome.
	Burst Phase
}

// RivalOptions configure Rival.
type RivalOptions struct {
	// Burst is the rival's number of proposals, published at once.
	Burst int
	// Rate is the victim's proposals per second, in both phases.
	Rate int
	// Alone is how long the victim runs alone.
	Alone time.Duration
	// PayloadBytes pads each proposal's payload.
	PayloadBytes int
	Progress     func(string)
}

// Rival measures one host's latency while another host bursts (issue 32:
// no host can stall another): on the server at url, where a processor of
// r.Config runs on subjects subj, the victim sends signed, granted
// proposals at o.Rate per second — first alone, then while the rival
// publishes o.Burst signed, granted proposals at once — each timed from
// its publish to its terminal outcome.
func Rival(ctx context.Context, url string, subj subjects.Subjects, r Rivals, o RivalOptions) (Rivalry, error) {
	_, stop, err := serveConnector(url, subj, 0)
	if err != nil {
		return Rivalry{}, err
	}
	defer stop()
	// Each host on a connection of its own, as hosts are: the rival's
	// burst queues in its own connection, not ahead of the victim's
	// publishes.
	victim, rival := newClock(), newClock()
	streams := map[string]jetstream.JetStream{}
	for host, c := range map[string]*clock{VictimHost: victim, RivalHost: rival} {
		nc, err := nats.Connect(url)
		if err != nil {
			return Rivalry{}, err
		}
		defer nc.Close()
		if streams[host], err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(o.Burst, 256))); err != nil {
			return Rivalry{}, err
		}
		sub, err := nc.Subscribe(subj.HostOutcomes(host), func(m *nats.Msg) {
			var out schema.Outcome
			if schema.Decode(m.Data, &out) != nil || !out.Terminal {
				return
			}
			c.end(out.ProposalID, out.Kind == schema.KindConfirmed)
		})
		if err != nil {
			return Rivalry{}, err
		}
		defer sub.Unsubscribe()
		if err := nc.Flush(); err != nil {
			return Rivalry{}, err
		}
	}
	publish := func(host string, kp nkeys.KeyPair, id string) error {
		body, err := ProposalOf(id, o.PayloadBytes, host)
		if err != nil {
			return err
		}
		hdr, err := trust.Sign(kp, body)
		if err != nil {
			return err
		}
		m := nats.NewMsg(subj.Proposal(host))
		m.Data, m.Header = body, hdr
		m.Header.Set(jetstream.MsgIDHeader, host+"/"+id)
		_, err = streams[host].PublishMsgAsync(m)
		return err
	}
	// The victim at its rate until stop, ids numbered from first.
	paceVictim := func(tag string, stop <-chan struct{}) (int, error) {
		interval := time.Second / time.Duration(o.Rate)
		start := time.Now()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return i, nil
			case <-ctx.Done():
				return i, ctx.Err()
			case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
			}
			id := fmt.Sprintf("%s-%06d", tag, i)
			victim.send(id)
			if err := publish(VictimHost, r.Victim, id); err != nil {
				return i, err
			}
		}
	}
	var out Rivalry

	// Alone.
	victim.reset()
	stopAlone := make(chan struct{})
	time.AfterFunc(o.Alone, func() { close(stopAlone) })
	started, cpu0 := time.Now(), CPUTime()
	n, err := paceVictim("alone", stopAlone)
	if err != nil {
		return Rivalry{}, err
	}
	if out.Alone, err = victim.wait(ctx, n, "victim alone", o.Progress); err != nil {
		return Rivalry{}, err
	}
	out.Alone.Elapsed, out.Alone.CPU = time.Since(started), CPUTime()-cpu0

	// During the rival's burst.
	victim.reset()
	rival.reset()
	stopDuring := make(chan struct{})
	var vn int
	var verr error
	var wg sync.WaitGroup
	started, cpu0 = time.Now(), CPUTime()
	wg.Go(func() { vn, verr = paceVictim("during", stopDuring) })
	for i := range o.Burst {
		id := fmt.Sprintf("burst-%06d", i)
		rival.send(id)
		if err := publish(RivalHost, r.Rival, id); err != nil {
			close(stopDuring)
			wg.Wait()
			return Rivalry{}, err
		}
	}
	out.Burst, err = rival.wait(ctx, o.Burst, "rival burst", o.Progress)
	close(stopDuring)
	wg.Wait()
	if err == nil {
		err = verr
	}
	if err != nil {
		return Rivalry{}, err
	}
	out.Burst.Elapsed, out.Burst.CPU = time.Since(started), CPUTime()-cpu0
	if out.During, err = victim.wait(ctx, vn, "victim during", o.Progress); err != nil {
		return Rivalry{}, err
	}
	out.During.Elapsed = out.Burst.Elapsed
	return out, nil
}

// clock times one host's proposals from publish to terminal outcome.
type clock struct {
	mu     sync.Mutex
	sent   map[string]time.Time
	lat    []time.Duration
	failed int
}

func newClock() *clock { return &clock{sent: map[string]time.Time{}} }

func (c *clock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent, c.lat, c.failed = map[string]time.Time{}, nil, 0
}

func (c *clock) send(id string) {
	c.mu.Lock()
	c.sent[id] = time.Now()
	c.mu.Unlock()
}

func (c *clock) end(id string, ok bool) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	t0, found := c.sent[id]
	if !found {
		return
	}
	delete(c.sent, id)
	if ok {
		c.lat = append(c.lat, now.Sub(t0))
	} else {
		c.failed++
	}
}

// wait waits until n proposals ended, and returns them as a phase.
func (c *clock) wait(ctx context.Context, n int, label string, progress func(string)) (Phase, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, moved := -1, time.Now()
	for {
		c.mu.Lock()
		done := len(c.lat) + c.failed
		if done >= n {
			lat := slices.Clone(c.lat)
			slices.Sort(lat)
			p := Phase{Count: n, Latencies: lat, Failed: c.failed}
			c.mu.Unlock()
			return p, nil
		}
		c.mu.Unlock()
		if done != last {
			last, moved = done, time.Now()
		} else if time.Since(moved) > stallTimeout {
			return Phase{}, fmt.Errorf("bench: %s: %d of %d ended, none for %s", label, done, n, stallTimeout)
		}
		if progress != nil {
			progress(fmt.Sprintf("%s %d/%d", label, done, n))
		}
		select {
		case <-ctx.Done():
			return Phase{}, ctx.Err()
		case <-tick.C:
		}
	}
}
