package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go/jetstream"
)

// Handle is one shared bucket as a replicated store works on it: every
// read from the stream's leader, each idempotent request retried within
// Timeouts while JetStream does not answer, errors prefixed with the
// store's Name. The journal, approvals, admission records and nonces use
// it instead of writing these requests each.
type Handle struct {
	KV jetstream.KeyValue
	// JS is the JetStream context KV was bound with: Keys and Scan read
	// the bucket's stream.
	JS jetstream.JetStream
	// Name prefixes errors ("journal", "approvals", ...).
	Name string
	Timeouts
}

// Budget is the retry budget of one request.
func (h Handle) Budget() Budget { return h.Timeouts.Budget() }

// Do runs an idempotent request f as Budget.Do does.
func (h Handle) Do(f func(ctx context.Context) error) error { return h.Budget().Do(f) }

// Get reads and decodes a key; found is false if it has no value. A value
// that does not decode is kv.ErrCorrupt.
func (h Handle) Get(key string, v any) (rev uint64, found bool, err error) {
	if rev, found, err = GetJSON(h.Budget(), h.KV, key, v); err != nil {
		return 0, false, fmt.Errorf("%s: get %s: %w", h.Name, key, err)
	}
	return rev, found, nil
}

// Put writes v, encoded as deterministic JSON, at key.
func (h Handle) Put(key string, v any) error {
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("%s: encode: %w", h.Name, err)
	}
	if err := h.Do(func(ctx context.Context) error { _, err := h.KV.Put(ctx, key, data); return err }); err != nil {
		return fmt.Errorf("%s: put %s: %w", h.Name, key, err)
	}
	return nil
}

// Create writes key unless it exists; an existing key is no error (these
// writes are repeated by repairs).
func (h Handle) Create(key string, v any) error {
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("%s: encode: %w", h.Name, err)
	}
	err = h.Do(func(ctx context.Context) error { _, err := h.KV.Create(ctx, key, data); return err })
	if err != nil && !Lost(err) {
		return fmt.Errorf("%s: create %s: %w", h.Name, key, err)
	}
	return nil
}

// MaxClaims is how often Claim tries a key that is taken and gone again.
const MaxClaims = 3

// ErrClaimGone: a key Claim tried was taken and gone again MaxClaims times.
var ErrClaimGone = errors.New("kv: claimed key taken and gone again and again")

// Claim creates key with v unless it holds a value (a KV Create: of two
// claims at once exactly one wins). won is false when the key existed:
// out then holds what is stored and rev its revision, and the caller
// tells its own earlier try that timed out but was stored from another's
// claim by what it holds. A key taken and gone again (expired, removed)
// is claimed again, MaxClaims tries in all (then ErrClaimGone). A stored
// value that does not decode is kv.ErrCorrupt.
func (h Handle) Claim(key string, v, out any) (rev uint64, won bool, err error) {
	data, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		return 0, false, fmt.Errorf("%s: encode: %w", h.Name, err)
	}
	for range MaxClaims {
		err := h.Do(func(ctx context.Context) (err error) {
			rev, err = h.KV.Create(ctx, key, data)
			return err
		})
		if err == nil {
			return rev, true, nil
		}
		if !Lost(err) {
			return 0, false, fmt.Errorf("%s: claim %s: %w", h.Name, key, err)
		}
		rev, found, err := h.Get(key, out)
		if err != nil {
			return 0, false, err
		}
		if found {
			return rev, false, nil
		}
		// Taken and not readable: gone again, or (on a cluster) a racing
		// create the leader refused ours for but has not applied yet.
		time.Sleep(pause)
	}
	return 0, false, fmt.Errorf("%s: claim %s: %w", h.Name, key, ErrClaimGone)
}

// Purge removes key if its revision is still rev, leaving a marker that
// lives ttl (0: the bucket's default); removed is false when it changed
// since.
func (h Handle) Purge(key string, rev uint64, ttl time.Duration) (removed bool, err error) {
	opts := []jetstream.KVDeleteOpt{jetstream.LastRevision(rev)}
	if ttl > 0 {
		opts = append(opts, jetstream.PurgeTTL(ttl))
	}
	err = h.Do(func(ctx context.Context) error { return h.KV.Purge(ctx, key, opts...) })
	switch {
	case err == nil:
		return true, nil
	case Lost(err):
		return false, nil
	}
	return false, fmt.Errorf("%s: purge %s: %w", h.Name, key, err)
}

// Keys lists the keys matching a filter (a key pattern), sorted: the
// subjects of the bucket's stream, from the stream's leader in one request
// (paged by the client), without creating a consumer. A deleted or purged
// key may be listed (its marker is a message); Get finds it absent.
func (h Handle) Keys(filter string) ([]string, error) {
	prefix := "$KV." + h.KV.Bucket() + "."
	var subjects map[string]uint64
	err := h.Do(func(ctx context.Context) error {
		st, err := h.JS.Stream(ctx, "KV_"+h.KV.Bucket())
		if err != nil {
			return err
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+filter))
		if err != nil {
			return err
		}
		subjects = info.State.Subjects
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: list %s: %w", h.Name, filter, err)
	}
	out := make([]string, 0, len(subjects))
	for subj := range subjects {
		out = append(out, strings.TrimPrefix(subj, prefix))
	}
	slices.Sort(out)
	return out, nil
}

// Scan reads the values under a key prefix in the order of the bucket's
// stream, from *cursor, without a consumer: visit gets each one's key and
// message (the markers of removed keys are passed over) and returns false
// to stop at it. *cursor moves past each message passed or visited with
// true, so that the next Scan goes on where this one stopped.
func (h Handle) Scan(ctx context.Context, prefix string, cursor *uint64, visit func(key string, m *jetstream.RawStreamMsg) (bool, error)) error {
	subjects := "$KV." + h.KV.Bucket() + "."
	for ctx.Err() == nil {
		m, err := h.Budget().NextMsg(h.JS, "KV_"+h.KV.Bucket(), max(*cursor, 1), subjects+prefix+">")
		if err != nil || m == nil {
			return err
		}
		if !Marker(m) {
			more, err := visit(strings.TrimPrefix(m.Subject, subjects), m)
			if err != nil || !more {
				return err
			}
		}
		*cursor = m.Sequence + 1
	}
	return nil
}

// Revision reads key's revision, its value left undecoded (0: the key has
// no value).
func (h Handle) Revision(key string) (uint64, error) {
	var e jetstream.KeyValueEntry
	err := h.Do(func(ctx context.Context) (err error) {
		e, err = h.KV.Get(ctx, key)
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("%s: get %s: %w", h.Name, key, err)
	}
	return e.Revision(), nil
}
