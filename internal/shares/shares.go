// Package shares keeps each host's share of the history streams every host
// shares — the outcomes, the incident events and the activity bucket —
// within its budget, in bytes and in messages (SPEC §2.8 Budgets): those
// streams drop their oldest messages when full, so without shares one
// host's history could push every other host's out.
//
// A Ledger tails each stream it keeps, headers only (the server sends each
// message's subject, headers and size, never its body), from its first
// message, and attributes each message to a share: the host its subject
// names (an outcome), or its Actions-Host header (an incident event, an
// activity snapshot: subjects.HostHeader). Once a share is over its budget
// its oldest messages go — by one filtered purge where the share has
// subjects of its own (a host's outcomes), else one by one — until it is
// back under fifteen sixteenths of it. Every processor of a cluster keeps
// its own ledger of the same streams and trims the same messages: what a
// stream holds is the one truth, so a restart or a crash loses nothing
// (the ledger is read again), and trims are idempotent.
package shares

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream is one history stream whose shares a Ledger keeps.
type Stream struct {
	// Name is the stream's name.
	Name string
	// Share attributes a message to a share by its subject and headers;
	// ok false: to none (a message of an earlier version, which ages out
	// by the stream's own limits).
	Share func(subject string, hdr nats.Header) (share string, ok bool)
	// Keyed: the stream keeps one message per subject (a KV bucket, whose
	// streams refuse deleting messages): a message replaces the one before
	// it on its subject, and a share's oldest go by purging their
	// subjects, each up to its own message.
	Keyed bool
	// MaxBytes and MaxMsgs bound each share (MaxMsgs 0: no bound).
	MaxBytes int64
	MaxMsgs  int64
	// Filter, if set, is the subject filter that takes exactly a share's
	// messages: its oldest go by one filtered purge. Otherwise they are
	// deleted one by one.
	Filter func(share string) string
}

// entry is one message a share holds.
type entry struct {
	seq  uint64
	size int64
	key  string // its subject, in a Keyed stream
}

// share is one share of a stream: its messages in stream order.
type share struct {
	q     []entry // q[head:] are held
	head  int
	bytes int64
	msgs  int64
}

func (s *share) push(e entry) {
	s.q = append(s.q, e)
	s.bytes += e.size
	s.msgs++
}

// front is the share's oldest message.
func (s *share) front() (entry, bool) {
	if s.head >= len(s.q) {
		return entry{}, false
	}
	return s.q[s.head], true
}

func (s *share) pop() {
	e := s.q[s.head]
	s.head++
	s.bytes -= e.size
	s.msgs--
	if s.head >= 1024 && s.head*2 >= len(s.q) {
		s.q = append([]entry(nil), s.q[s.head:]...)
		s.head = 0
	}
}

// keyed is where a key's message is held.
type keyed struct {
	share string
	seq   uint64
	size  int64
}

// Ledger keeps the shares of Streams.
type Ledger struct {
	JS      jetstream.JetStream
	Streams []Stream
	Log     *slog.Logger
	// Every is how often each stream is trimmed and checked against its
	// first sequence even without news. Default 5s.
	Every time.Duration
}

// Run tails every stream and trims its shares until ctx ends.
func (l *Ledger) Run(ctx context.Context) {
	every := l.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	var wg sync.WaitGroup
	for _, st := range l.Streams {
		t := &tail{l: l, st: st, shares: map[string]*share{}, keys: map[string]keyed{}, due: make(chan struct{}, 1)}
		wg.Go(func() { t.run(ctx, every) })
	}
	wg.Wait()
}

// tail is one stream's ledger.
type tail struct {
	l  *Ledger
	st Stream

	mu     sync.Mutex
	last   uint64 // the last sequence seen
	shares map[string]*share
	keys   map[string]keyed // by subject, in a Keyed stream
	due    chan struct{}    // a share is over its budget
}

func (t *tail) log() *slog.Logger {
	if t.l.Log == nil {
		return slog.Default()
	}
	return t.l.Log
}

// run follows the stream (again after any failure) and trims, until ctx
// ends.
func (t *tail) run(ctx context.Context, every time.Duration) {
	var wg sync.WaitGroup
	wg.Go(func() { t.trimLoop(ctx, every) })
	defer wg.Wait()
	for try := 1; ctx.Err() == nil; try++ {
		err := t.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := min(time.Duration(try)*250*time.Millisecond, 5*time.Second)
		if try == 1 || try%20 == 0 {
			t.log().Warn("history shares: following the stream failed; trying again", "stream", t.st.Name, "err", err, "retry", wait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// follow tails the stream, headers only, from the message after the last
// one seen, until ctx ends or the tail fails.
func (t *tail) follow(ctx context.Context) error {
	t.mu.Lock()
	cfg := jetstream.OrderedConsumerConfig{HeadersOnly: true, DeliverPolicy: jetstream.DeliverAllPolicy}
	if t.last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, t.last+1
	}
	t.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	cons, err := t.l.JS.OrderedConsumer(cctx, t.st.Name, cfg)
	cancel()
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			it.Stop()
			return err
		}
		t.see(m)
	}
}

// see accounts one message of the stream.
func (t *tail) see(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	seq := meta.Sequence.Stream
	hdr := m.Headers()
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq <= t.last {
		return // seen: the ordered consumer started over
	}
	t.last = seq
	if t.st.Keyed {
		// The message before it on its subject is gone (the stream keeps
		// one per subject).
		key := m.Subject()
		if old, ok := t.keys[key]; ok {
			if s := t.shares[old.share]; s != nil {
				// Its entry stays in the queue, dead; its bytes go now.
				s.bytes -= old.size
				s.msgs--
			}
			delete(t.keys, key)
		}
		if kvDeleted(hdr) {
			return
		}
		name, ok := t.st.Share(m.Subject(), hdr)
		if !ok {
			return
		}
		e := entry{seq: seq, size: size(m.Subject(), hdr), key: key}
		t.share(name).push(e)
		t.keys[key] = keyed{share: name, seq: seq, size: e.size}
		t.overdue(name)
		return
	}
	name, ok := t.st.Share(m.Subject(), hdr)
	if !ok {
		return
	}
	t.share(name).push(entry{seq: seq, size: size(m.Subject(), hdr)})
	t.overdue(name)
}

func (t *tail) share(name string) *share {
	s := t.shares[name]
	if s == nil {
		s = &share{}
		t.shares[name] = s
	}
	return s
}

// overdue wakes the trimmer if share name is over its budget (t.mu held).
func (t *tail) overdue(name string) {
	if t.over(t.shares[name]) {
		select {
		case t.due <- struct{}{}:
		default:
		}
	}
}

func (t *tail) over(s *share) bool {
	return s.bytes > t.st.MaxBytes || t.st.MaxMsgs > 0 && s.msgs > t.st.MaxMsgs
}

// live reports whether e is still a message the stream holds as far as
// the ledger knows (not replaced under its key).
func (t *tail) live(e entry) bool {
	if !t.st.Keyed {
		return true
	}
	k, ok := t.keys[e.key]
	return ok && k.seq == e.seq
}

// size is what a message takes of its stream's bytes, near enough: its
// subject, headers and body (Nats-Msg-Size) and JetStream's own record.
func size(subject string, hdr nats.Header) int64 {
	n := int64(len(subject)) + 30
	for k, vs := range hdr {
		if k == nats.MsgSize {
			body, _ := strconv.ParseInt(vs[0], 10, 64)
			n += body
			continue
		}
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}

// kvDeleted reports a KV delete or purge marker.
func kvDeleted(hdr nats.Header) bool {
	op := hdr.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}

// trimLoop trims the shares over their budget when told, and every
// interval: then also forgets what the stream no longer holds (its
// max_age, its own byte bound).
func (t *tail) trimLoop(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.due:
		case <-tick.C:
			t.forgetGone(ctx)
		}
		t.trim(ctx)
	}
}

// forgetGone drops the entries below the stream's first sequence.
func (t *tail) forgetGone(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := t.l.JS.Stream(cctx, t.st.Name)
	if err != nil {
		return
	}
	first := st.CachedInfo().State.FirstSeq
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.shares {
		for {
			e, ok := s.front()
			if !ok || e.seq >= first {
				break
			}
			t.drop(s, e)
		}
	}
}

// drop pops e, s's front (t.mu held), and forgets its key.
func (t *tail) drop(s *share, e entry) {
	if !t.live(e) {
		// Replaced: its bytes went when its successor came.
		s.head++
		return
	}
	s.pop()
	if t.st.Keyed {
		delete(t.keys, e.key)
	}
}

// trim brings every share over its budget back under fifteen sixteenths
// of it, oldest messages first.
func (t *tail) trim(ctx context.Context) {
	t.mu.Lock()
	var names []string
	for name, s := range t.shares {
		if t.over(s) {
			names = append(names, name)
		}
	}
	t.mu.Unlock()
	for _, name := range names {
		if err := t.trimShare(ctx, name); err != nil && ctx.Err() == nil {
			// The next trim tries again.
			t.log().Warn("history shares: a share over its budget not trimmed", "stream", t.st.Name, "share", name, "err", err)
		}
	}
}

// trimShare removes share name's oldest messages until it is under its
// target, and only then forgets them: a failure leaves them counted, and
// the next trim removes them.
func (t *tail) trimShare(ctx context.Context, name string) error {
	maxBytes, maxMsgs := t.st.MaxBytes*15/16, t.st.MaxMsgs*15/16
	t.mu.Lock()
	s := t.shares[name]
	var gone []entry
	bytes, msgs := s.bytes, s.msgs
	for i := s.head; i < len(s.q) && (bytes > maxBytes || t.st.MaxMsgs > 0 && msgs > maxMsgs); i++ {
		e := s.q[i]
		if t.live(e) {
			bytes -= e.size
			msgs--
		}
		gone = append(gone, e)
	}
	keep := uint64(0)
	if s.head+len(gone) < len(s.q) {
		keep = s.q[s.head+len(gone)].seq
	} else {
		keep = t.last + 1
	}
	t.mu.Unlock()
	if len(gone) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := t.l.JS.Stream(cctx, t.st.Name)
	if err != nil {
		return err
	}
	done := len(gone)
	if t.st.Filter != nil {
		// Everything of the share below keep goes (what was replaced or is
		// gone already, too).
		err = st.Purge(cctx, jetstream.WithPurgeSubject(t.st.Filter(name)), jetstream.WithPurgeSequence(keep))
		if err != nil {
			done = 0
		}
	} else {
		for i, e := range gone {
			if !t.liveNow(e) {
				continue
			}
			if t.st.Keyed {
				// Its subject up to it: a newer message there stays.
				err = st.Purge(cctx, jetstream.WithPurgeSubject(e.key), jetstream.WithPurgeSequence(e.seq+1))
			} else if err = st.DeleteMsg(cctx, e.seq); gone404(err) {
				err = nil // deleted already: another processor's trim, or the stream's limits
			}
			if err != nil {
				done = i
				break
			}
		}
	}
	t.mu.Lock()
	for range done {
		e, ok := s.front()
		if !ok {
			break
		}
		t.drop(s, e)
	}
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stream %s: %w", t.st.Name, err)
	}
	return nil
}

func (t *tail) liveNow(e entry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live(e)
}

// gone404 reports JetStream's answer to deleting a message it does not
// hold (deleted already, by another processor's trim or the stream's own
// limits).
func gone404(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) ||
		errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) && strings.Contains(err.Error(), "no message found")
}
