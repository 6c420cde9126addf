package bench

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	kvpebble "github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/schema"
)

// The contract floor: the least work Portcullis's contract needs per
// proposal, written plainly and deciding nothing, so that Portcullis is
// measured against what it must do rather than against a chain that does
// nothing (issue 22). Per proposal:
//
//   - the host publishes the proposal's bytes (a bench proposal, signed
//     once with an ed25519 nkey beforehand: signing is the host's work) to
//     a proposals stream with a message id;
//   - five stages, each a durable pull consumer on its own stream, chained
//     by four hand-offs: each hand-off is a JetStream publish of the body
//     untouched with a message id and the seal, acknowledged by the
//     server, after which the stage acks what it pulled;
//   - stage 1 verifies the ed25519 signature (the admission's one
//     signature check) and seals the body with HMAC-SHA256; stages 2 to 5
//     each check the seal (one HMAC) — the body and key do not change, so
//     the MAC checked is the seal forwarded: one HMAC per stage;
//   - stage 4 (dispatch) writes an in-flight record to Pebble with Sync,
//     asks the connector with a core NATS request, and writes the reply
//     with Sync: exactly once needs both (the first before any call can
//     reach the provider, the second before the outcome is told).
//     Concurrent proposals' Sync commits share fsyncs (Pebble's group
//     commit, with the WAL interval Portcullis's store uses);
//   - stage 5 (outcome) puts the proposal's activity into a KV bucket and
//     publishes its outcome on a per-proposal subject of an outcomes
//     stream, then acks. The measurer hears the outcome there.
//
// Every message carries the body as it was published: no encoding, no
// lookups, no decisions. Its CPU per proposal is meant to stay within
// FloorBound of the raw chain's per message in the same run.

// FloorBound is the sanity bound on the floor: its CPU per
// proposal at most this many times the raw chain's per message in the
// same run, or the floor is not the least work.
const FloorBound = 3.5

// floorPrefix names the floor's streams, subjects and bucket.
const floorPrefix = "benchfloor"

// floorStages is the floor's number of stages; floorDispatch is the one
// that calls the connector.
const (
	floorStages   = 5
	floorDispatch = 4
)

// Headers the floor's messages carry.
const (
	hdrID   = "Bench-Id"
	hdrSig  = "Bench-Sig"
	hdrSeal = "Bench-Seal"
)

// errFloorRefused: a stage found a bad signature or seal (never, unless
// the floor is broken: its proposals are signed and sealed by itself).
var errFloorRefused = errors.New("bench: floor: signature or seal refused")

// floor is one run's parts.
type floor struct {
	conn    *nats.Conn // the stages'
	js      jetstream.JetStream
	db      *pebble.DB
	bucket  jetstream.KeyValue
	sealKey []byte
	signer  nkeys.KeyPair // verifies at stage 1
	cur     *atomic.Pointer[tracker]
	timeout time.Duration
}

// Floor runs the contract floor on the server at url, its Pebble store
// under dir, with proposals of the bench's (Proposal, padded by
// o.PayloadBytes). It removes its streams, bucket and store afterwards.
func Floor(ctx context.Context, url, dir string, o Options) (Side, error) {
	o.defaults()
	conn, err := nats.Connect(url)
	if err != nil {
		return Side{}, err
	}
	defer conn.Close()
	client, err := nats.Connect(url)
	if err != nil {
		return Side{}, err
	}
	defer client.Close()
	// The connector on a connection of its own, as the bench's.
	connConn, err := nats.Connect(url)
	if err != nil {
		return Side{}, err
	}
	defer connConn.Close()
	js, err := jetstream.New(conn, jetstream.WithPublishAsyncMaxPending(4*o.Window))
	if err != nil {
		return Side{}, err
	}
	clientJS, err := jetstream.New(client, jetstream.WithPublishAsyncMaxPending(max(o.Window, o.Rate)))
	if err != nil {
		return Side{}, err
	}

	for i := range floorStages + 1 {
		name, subject := floorStream(i), floorSubject(i)
		if i == floorStages {
			subject = floorOutcomes + "*"
		}
		err := createStream(ctx, js, name, subject, o)
		if err != nil {
			return Side{}, fmt.Errorf("bench: floor stream: %w", err)
		}
		defer js.DeleteStream(context.Background(), name)
	}
	var bucket jetstream.KeyValue
	err = retry(ctx, func(ctx context.Context) (err error) {
		bucket, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: "BENCH_FLOOR", Storage: jetstream.FileStorage, Replicas: max(1, o.Replicas),
		})
		return err
	})
	if err != nil {
		return Side{}, fmt.Errorf("bench: floor bucket: %w", err)
	}
	defer js.DeleteKeyValue(context.Background(), "BENCH_FLOOR")

	pdir := filepath.Join(dir, "floor-pebble")
	db, err := pebble.Open(pdir, &pebble.Options{
		Logger: floorLogger{}, FormatMajorVersion: pebble.FormatTableFormatV6, CacheSize: kvpebble.CacheSize,
		WALMinSyncInterval: func() time.Duration { return kvpebble.WALMinSyncInterval },
	})
	if err != nil {
		return Side{}, fmt.Errorf("bench: floor store: %w", err)
	}
	defer func() { db.Close(); os.RemoveAll(pdir) }()

	// The connector answers as the bench's: a confirmed reply naming the
	// provider's action.
	csub, err := connConn.Subscribe(floorPrefix+".connector", func(m *nats.Msg) {
		key := m.Header.Get(hdrID)
		b, err := schema.Marshal(schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "bench:" + key})
		if err == nil {
			_ = m.Respond(b)
		}
	})
	if err != nil {
		return Side{}, err
	}
	defer csub.Unsubscribe()
	if err := connConn.Flush(); err != nil {
		return Side{}, err
	}

	var cur atomic.Pointer[tracker]
	osub, err := client.Subscribe(floorOutcomes+"*", func(m *nats.Msg) {
		if t := cur.Load(); t != nil {
			t.end(strings.TrimPrefix(m.Subject, floorOutcomes), true)
		}
	})
	if err != nil {
		return Side{}, err
	}
	defer osub.Unsubscribe()
	if err := client.Flush(); err != nil {
		return Side{}, err
	}

	host, err := nkeys.CreateUser()
	if err != nil {
		return Side{}, err
	}
	pub, err := host.PublicKey()
	if err != nil {
		return Side{}, err
	}
	verifier, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return Side{}, err
	}
	f := &floor{conn: conn, js: js, db: db, bucket: bucket, sealKey: make([]byte, 32), signer: verifier, cur: &cur, timeout: 30 * time.Second}
	if _, err := rand.Read(f.sealKey); err != nil {
		return Side{}, err
	}
	// The stages stop, and the messages they hold are done with, before
	// the store closes (deferred earlier): a late redelivery must not
	// write to a closed Pebble.
	var handling sync.WaitGroup
	var consuming []jetstream.ConsumeContext
	defer func() {
		for _, cc := range consuming {
			cc.Stop()
			select {
			case <-cc.Closed():
			case <-time.After(5 * time.Second):
			}
		}
		handling.Wait()
	}()
	for i := range floorStages {
		cons, err := retryConsumer(ctx, js, floorStream(i), o)
		if err != nil {
			return Side{}, fmt.Errorf("bench: floor consumer: %w", err)
		}
		stage := i + 1
		cc, err := cons.Consume(func(m jetstream.Msg) {
			handling.Add(1)
			go func() { defer handling.Done(); f.handle(stage, m) }()
		}, jetstream.PullMaxMessages(256))
		if err != nil {
			return Side{}, err
		}
		consuming = append(consuming, cc)
	}

	// The host's proposals, signed, before the phases: the host's work.
	type signed struct {
		body []byte
		sig  string
	}
	sign := func(tag string, n int) ([]signed, error) {
		out := make([]signed, n)
		for i := range n {
			b, err := Proposal(floorID(tag == "l", i), o.PayloadBytes)
			if err != nil {
				return nil, err
			}
			sig, err := host.Sign(b)
			if err != nil {
				return nil, err
			}
			out[i] = signed{b, base64.StdEncoding.EncodeToString(sig)}
		}
		return out, nil
	}
	tp, err := sign("t", o.Count)
	if err != nil {
		return Side{}, err
	}
	lp, err := sign("l", o.latencyCount())
	if err != nil {
		return Side{}, err
	}
	return o.runSide(ctx, "floor", &cur, nil, floorID, func(latency bool, i int, id string) error {
		p := tp
		if latency {
			p = lp
		}
		m := nats.NewMsg(floorSubject(0))
		m.Data = p[i].body
		m.Header.Set(hdrID, id)
		m.Header.Set(hdrSig, p[i].sig)
		m.Header.Set(jetstream.MsgIDHeader, id)
		_, err := clientJS.PublishMsgAsync(m)
		return err
	})
}

// handle is stage's work on one message it pulled.
func (f *floor) handle(stage int, m jetstream.Msg) {
	h := m.Headers()
	id, body := h.Get(hdrID), m.Data()
	mac := hmac.New(sha256.New, f.sealKey)
	mac.Write(body)
	seal := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	var err error
	if stage == 1 {
		err = f.verify(body, h.Get(hdrSig))
	} else if !hmac.Equal([]byte(seal), []byte(h.Get(hdrSeal))) {
		err = errFloorRefused
	}
	if errors.Is(err, errFloorRefused) {
		_ = m.Term()
		if t := f.cur.Load(); t != nil {
			t.end(id, false)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	if stage == floorDispatch {
		err = f.dispatch(id, body)
	}
	if err == nil {
		if stage == floorStages {
			err = f.outcome(ctx, id)
		} else {
			err = f.handOff(ctx, stage, id, body, seal)
		}
	}
	if err != nil {
		// An unknown: the message is redelivered and its hand-off retried
		// under the same message id.
		_ = m.Nak()
		return
	}
	_ = m.Ack()
}

func (f *floor) verify(body []byte, sig string) error {
	s, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || f.signer.Verify(body, s) != nil {
		return errFloorRefused
	}
	return nil
}

// handOff publishes body to the next stage's stream with a message id and
// the seal and waits for the server's ack.
func (f *floor) handOff(ctx context.Context, stage int, id string, body []byte, seal string) error {
	out := nats.NewMsg(floorSubject(stage))
	out.Data = body
	out.Header.Set(hdrID, id)
	out.Header.Set(hdrSeal, seal)
	out.Header.Set(jetstream.MsgIDHeader, id+"/"+strconv.Itoa(stage))
	return f.publish(ctx, out)
}

// publish publishes m asynchronously (the stages' connection pipelines
// many) and waits for its PubAck.
func (f *floor) publish(ctx context.Context, m *nats.Msg) error {
	fut, err := f.js.PublishMsgAsync(m)
	if err != nil {
		return err
	}
	select {
	case <-fut.Ok():
		return nil
	case err := <-fut.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dispatch is stage 4's: the in-flight record synced before the call, the
// reply synced after it.
func (f *floor) dispatch(id string, body []byte) error {
	key := []byte("dispatch/" + id)
	if err := f.db.Set(key, []byte("in-flight"), pebble.Sync); err != nil {
		return err
	}
	req := nats.NewMsg(floorPrefix + ".connector")
	req.Data = body
	req.Header.Set(hdrID, id)
	reply, err := f.conn.RequestMsg(req, f.timeout)
	if err != nil {
		return err
	}
	return f.db.Set(key, reply.Data, pebble.Sync)
}

// outcome is stage 5's: the activity into the bucket, then the outcome on
// the proposal's subject of the outcomes stream.
func (f *floor) outcome(ctx context.Context, id string) error {
	out := fmt.Appendf(nil, `{"schema":"portcullis.outcome.v1","proposal_id":%q,"kind":"CONFIRMED","terminal":true}`, id)
	if _, err := f.bucket.Put(ctx, id, out); err != nil {
		return err
	}
	m := nats.NewMsg(floorOutcomes + id)
	m.Data = out
	m.Header.Set(jetstream.MsgIDHeader, id+"/outcome")
	return f.publish(ctx, m)
}

// floorID names the i-th message of a phase, as the Portcullis side's.
func floorID(latency bool, i int) string {
	if latency {
		return fmt.Sprintf("l-%06d", i)
	}
	return fmt.Sprintf("t-%06d", i)
}

// floorStream is stream i's name: 0 the proposals, 1–4 the hand-offs to
// stages 2–5, 5 the outcomes.
func floorStream(i int) string {
	switch i {
	case 0:
		return "BENCH_FLOOR_PROPOSALS"
	case floorStages:
		return "BENCH_FLOOR_OUTCOMES"
	}
	return "BENCH_FLOOR_" + strconv.Itoa(i)
}

// floorSubject is stream i's subject: one for the proposals (one host's,
// as the bench's), one per hand-off; the outcomes stream takes
// floorOutcome's.
func floorSubject(i int) string {
	if i == 0 {
		return floorPrefix + ".proposals." + Host
	}
	return floorPrefix + "." + strconv.Itoa(i)
}

// floorOutcomes prefixes each proposal's outcome subject.
const floorOutcomes = floorPrefix + ".outcomes."

// retryConsumer makes the durable pull consumer of stream, as the raw
// chain's hops.
func retryConsumer(ctx context.Context, js jetstream.JetStream, stream string, o Options) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	err := retry(ctx, func(ctx context.Context) (err error) {
		cons, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: "hop", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 4 * o.Window,
			DeliverPolicy: jetstream.DeliverAllPolicy, Replicas: max(1, o.Replicas),
		})
		return err
	})
	return cons, err
}

// floorLogger drops Pebble's messages but a fatal one, which ends the
// bench with its message (Pebble's default would exit the process).
type floorLogger struct{}

func (floorLogger) Infof(string, ...any)  {}
func (floorLogger) Errorf(string, ...any) {}
func (floorLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("bench: floor store: "+format, args...))
}
