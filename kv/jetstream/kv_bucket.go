package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
)

// Bucket describes a shared bucket's stream.
type Bucket struct {
	// Name is the bucket's; its stream is "KV_" + Name.
	Name        string
	Description string
	Replicas    int
	// MaxAge drops values that long after their last write (0: never).
	MaxAge time.Duration
	// DenyDelete refuses deleting messages from the stream (KV deletes
	// and purges are markers, not deletes, and still work).
	DenyDelete bool
	// AllowMsgTTL lets a write carry its own TTL (jetstream.KeyTTL).
	AllowMsgTTL bool
}

// Stream is the bucket's stream: one value per key, on file, every read
// served by the stream's leader (AllowDirect off from creation: a
// client's KV handle reads with direct gets whenever its stream allows
// them, and a follower may answer those stale).
func (b Bucket) Stream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              "KV_" + b.Name,
		Description:       b.Description,
		Subjects:          []string{"$KV." + b.Name + ".>"},
		MaxMsgsPerSubject: 1,
		MaxBytes:          -1,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		MaxAge:            b.MaxAge,
		AllowMsgTTL:       b.AllowMsgTTL,
		Storage:           jetstream.FileStorage,
		Replicas:          b.Replicas,
		AllowRollup:       true,
		DenyDelete:        b.DenyDelete,
		Duplicates:        2 * time.Minute,
		AllowDirect:       false,
		Discard:           jetstream.DiscardNew,
	}
}

// Ensure creates or updates the bucket's stream and binds it.
func (b Bucket) Ensure(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	if _, err := js.CreateOrUpdateStream(ctx, b.Stream()); err != nil {
		return nil, fmt.Errorf("kv: bucket %s: %w", b.Name, err)
	}
	return Bind(ctx, js, b.Name)
}

// Bind returns a handle on a bucket whose stream exists, refusing a stream
// that serves direct gets.
func Bind(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	h, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("kv: bucket %s: %w", bucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("kv: bucket %s: %w", bucket, err)
	}
	if st.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("kv: bucket %s: its stream allows direct gets, which followers may answer stale", bucket)
	}
	return h, nil
}

var (
	// ErrConflict: the key's value changed since the revision the write
	// compared with was read (another writer got there first). Nothing
	// was written.
	ErrConflict = kv.ErrConflict
	// ErrUncertain: whether the write was stored could not be learned
	// within the settle budget.
	ErrUncertain = kv.ErrUncertain
)

// Swap stores data at key if the key's revision is still rev (0: if the
// key has no value), returning the new revision. A failure that is not a
// clear refusal — a conflict, or this write's own earlier try that timed
// out but was stored, or no answer at all — is settled by reading the key
// back: mine tells whether a value read back is this write's (a write
// carries an id of its own). It returns ErrConflict, ErrUncertain once
// settle has passed, or the refusal.
func (b Budget) Swap(kv jetstream.KeyValue, key string, data []byte, rev uint64, settle time.Duration, mine func(value []byte) bool) (uint64, error) {
	b = b.WithDefaults()
	write := func() (uint64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), b.Attempt)
		defer cancel()
		if rev == 0 {
			return kv.Create(ctx, key, data)
		}
		return kv.Update(ctx, key, data, rev)
	}
	deadline := time.Now().Add(settle)
	for {
		newRev, err := write()
		if err == nil {
			return newRev, nil
		}
		cas := Lost(err)
		if !cas && !Unanswered(err) {
			return 0, err
		}
		for {
			var e jetstream.KeyValueEntry
			rerr := b.Do(func(ctx context.Context) (err error) {
				e, err = kv.Get(ctx, key)
				return err
			})
			if rerr == nil || errors.Is(rerr, jetstream.ErrKeyNotFound) {
				var gotRev uint64
				if rerr == nil {
					gotRev = e.Revision()
				}
				switch {
				case rerr == nil && mine(e.Value()):
					return gotRev, nil
				case cas || gotRev != rev:
					return 0, ErrConflict
				}
				break // unchanged, and not this write's: write again
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("%w: %w", ErrUncertain, errors.Join(err, rerr))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%w: %w", ErrUncertain, err)
		}
		time.Sleep(pause)
	}
}

// NextMsg reads the first message of stream at or after seq on a subject
// matching filter, from the stream's leader (no consumer), retried as b
// does; nil when there is none. The shared buckets' sweeps read their
// streams in order with it.
func (b Budget) NextMsg(js jetstream.JetStream, stream string, seq uint64, filter string) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := b.Do(func(ctx context.Context) error {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		m, err = st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: read %s from %d: %w", stream, seq, err)
	}
	return m, nil
}

// Marker reports whether a bucket's stream message marks its key deleted
// or purged rather than holding a value.
func Marker(m *jetstream.RawStreamMsg) bool { return m.Header.Get("KV-Operation") != "" }

// Lost reports a compare-and-set (or a create) refused because the key
// changed since the revision it named, or exists: every form JetStream
// answers with — ErrKeyExists, ErrKeyRevisionMismatch, and the clustered
// "wrong last sequence" (10164) that a stream leader answers a racing
// write with, which nats.go's ErrKeyExists does not match.
func Lost(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == errCodeWrongLastSequenceClustered)
}

// errCodeWrongLastSequenceClustered is nats-server's
// JSStreamWrongLastSequenceConstantErr.
const errCodeWrongLastSequenceClustered jetstream.ErrorCode = 10164
