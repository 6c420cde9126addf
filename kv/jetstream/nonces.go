package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
)

// Nonces are the operator request nonces (kv.Nonces) of a cluster (SPEC §2.8,
// §6), in a JetStream KV bucket every processor shares: a nonce is claimed
// with a KV Create, so of a request and its replay — sent to the same
// processor or to another — exactly one is accepted.
//
// # Keys
//
//	n.<sha256(nonce)>  the request's stamp and a random claim id (the nonce
//	                   itself is not stored)
//	newest             the newest stamp accepted, raised by compare-and-set
//
// A claim creates its key first and reads newest after: a replay either
// finds the key, or the key was removed — which Sweep does only after
// newest was raised past the key's stamp by more than the window, so the
// replay then reads a newest that refuses it. A claim whose write timed
// out but was stored recognizes itself by its claim id. Keys carry no TTL
// and the bucket no MaxAge: the server's clock forgets nothing either.
type Nonces struct {
	KV jetstream.KeyValue
	// JS is the JetStream context KV was bound with: Sweep reads the
	// bucket's stream.
	JS jetstream.JetStream
	// Window is admin.NonceWindow of the cluster's clock margin: how far
	// apart the stamps of two accepted requests may lie. Default
	// DefaultNonceWindow.
	Window time.Duration
	// OpTimeout bounds one claim, retries included. Default 5s.
	OpTimeout time.Duration

	mu     sync.Mutex
	cursor uint64 // Sweep's: the stream sequence it reads on from
}

var _ kv.Nonces = (*Nonces)(nil)

// NonceBucket is the nonce bucket: every read from the stream's leader,
// no age limit (what a claim may forget is decided by Sweep), and
// per-message TTLs allowed for the markers of removed keys.
func NonceBucket(name string, replicas int) Bucket {
	return Bucket{Name: name, Replicas: replicas, AllowMsgTTL: true,
		Description: "Portcullis operator request nonces (hashed), each until a request stamped far enough after it was accepted"}
}

// nonceClaim is the value of n.<hash>. Claims made before stamps were
// kept hold only their expiry, which is at least their stamp.
type nonceClaim struct {
	RequestedAtMs int64  `json:"requested_at_ms,omitempty"`
	ExpiresAtMs   int64  `json:"expires_at_ms,omitempty"`
	Claim         string `json:"claim"`
}

func (c *nonceClaim) stamp() int64 {
	if c.RequestedAtMs != 0 {
		return c.RequestedAtMs
	}
	return c.ExpiresAtMs
}

type newestStamp struct {
	RequestedAtMs int64 `json:"requested_at_ms"`
}

const (
	nonceKeyPrefix = "n."
	newestKey      = "newest"
)

func nonceKey(nonce string) string {
	h := sha256.Sum256([]byte("nonce\x00" + nonce))
	return nonceKeyPrefix + hex.EncodeToString(h[:])
}

// DefaultNonceWindow is admin.NonceWindow(30s): twice the operator
// requests' staleness bound (admin.MaxRequestSkew, 60s) and a 30s margin.
const DefaultNonceWindow = 150 * time.Second

func (n *Nonces) window() time.Duration {
	if n.Window <= 0 {
		return DefaultNonceWindow
	}
	return n.Window
}

func (n *Nonces) handle() Handle {
	return Handle{KV: n.KV, JS: n.JS, Name: "admin", Timeouts: Timeouts{OpTimeout: n.OpTimeout}}
}

// ClaimNonce claims nonce for a request stamped requestedAtMs, as the
// Nonces doc comment describes.
func (n *Nonces) ClaimNonce(nonce string, requestedAtMs int64) (kv.NonceClaim, error) {
	c := nonceClaim{RequestedAtMs: requestedAtMs, Claim: CommitID()}
	// A key that exists holds a replay's claim, or this claim's own
	// earlier try that timed out but was stored.
	var got nonceClaim
	_, won, err := n.handle().Claim(nonceKey(nonce), c, &got)
	switch {
	case err != nil:
		return 0, fmt.Errorf("admin: claim nonce: %w", err)
	case !won && got.Claim != c.Claim:
		return kv.NonceReplayed, nil
	}
	newest, rev, err := n.newest()
	if err != nil {
		return 0, err
	}
	if requestedAtMs < newest-n.window().Milliseconds() {
		// Its nonce may have been forgotten. The key just created is
		// removed by a later Sweep.
		return kv.NonceTooOld, nil
	}
	// Raise newest. A raise that fails leaves it lower, which only keeps
	// nonces longer: the request is accepted all the same.
	for requestedAtMs > newest {
		data, _ := json.Marshal(newestStamp{RequestedAtMs: requestedAtMs})
		_, err := n.handle().Budget().Swap(n.KV, newestKey, data, rev, 0, func([]byte) bool { return false })
		if err == nil || !errors.Is(err, ErrConflict) {
			break
		}
		if newest, rev, err = n.newest(); err != nil {
			break
		}
	}
	return kv.NonceFresh, nil
}

// newest reads the newest stamp accepted and its revision (0, 0: none).
func (n *Nonces) newest() (int64, uint64, error) {
	var v newestStamp
	rev, _, err := n.handle().Get(newestKey, &v)
	if err != nil {
		return 0, 0, fmt.Errorf("admin: read the newest stamp: %w", err)
	}
	return v.RequestedAtMs, rev, nil
}

// Sweep removes the nonces no claim needs any more: those stamped more than
// the window before the newest stamp accepted. It reads the bucket's
// stream in order from where its previous sweep stopped and stops at the
// first claim it must keep, so each claim is read about once per processor
// (claims are written in about the order of their stamps; one out of order
// is only kept a little longer). Each removal is a purge on the revision
// read: a key claimed again since is not touched. It returns how many
// nonces it removed.
func (n *Nonces) Sweep(ctx context.Context) (int, error) {
	newest, _, err := n.newest()
	if err != nil || newest == 0 {
		return 0, err
	}
	floor := newest - n.window().Milliseconds()
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.handle()
	removed := 0
	err = h.Scan(ctx, nonceKeyPrefix, &n.cursor, func(key string, m *jetstream.RawStreamMsg) (bool, error) {
		var c nonceClaim
		if json.Unmarshal(m.Data, &c) == nil && c.stamp() >= floor {
			return false, nil // kept: read again next time
		}
		gone, err := h.Purge(key, m.Sequence, markerTTL)
		if err != nil {
			return false, fmt.Errorf("admin: sweep nonce: %w", err)
		}
		if gone {
			removed++
		}
		return true, nil
	})
	return removed, err
}
