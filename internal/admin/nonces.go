package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/portcullis/portcullis/internal/leaderkv"
)

// ReplicatedNonces are the operator request nonces of a cluster (SPEC §2.8,
// §6), in a JetStream KV bucket every processor shares: a nonce is claimed
// with a KV Create, so of a request and its replay — sent to the same
// processor or to another — exactly one is accepted.
//
// Each claim is the key n.<sha256(nonce)> (the nonce itself is not
// stored) holding the claim's expiry and a random claim id, by which a
// claim whose write timed out but was stored recognizes itself. The key
// carries a per-message TTL (the bucket's stream allows them): it lives
// until the request could no longer be accepted, plus Margin for the
// clocks of the processors disagreeing; the stream's MaxAge
// (NonceBucketStream) is a backstop.
type ReplicatedNonces struct {
	KV jetstream.KeyValue
	// Margin is how far the processors' clocks may disagree: a nonce is
	// remembered that much beyond its expiry. Default 30s.
	Margin time.Duration
	// OpTimeout bounds one claim, retries included. Default 5s.
	OpTimeout time.Duration
}

var _ Nonces = (*ReplicatedNonces)(nil)

// minKeyTTL is the shortest per-message TTL the server takes.
const minKeyTTL = time.Second

// NonceBucket is the nonce bucket: per-message TTLs allowed, every read
// from the stream's leader, and MaxAge a backstop far beyond any claim's
// TTL.
func NonceBucket(name string, replicas int) leaderkv.Bucket {
	return leaderkv.Bucket{Name: name, Replicas: replicas, MaxAge: time.Hour, AllowMsgTTL: true,
		Description: "Portcullis operator request nonces (hashed), each until its request could no longer be accepted"}
}

type nonceClaim struct {
	ExpiresAtMs int64  `json:"expires_at_ms"`
	Claim       string `json:"claim"`
}

func nonceKey(nonce string) string {
	h := sha256.Sum256([]byte("nonce\x00" + nonce))
	return "n." + hex.EncodeToString(h[:])
}

// ClaimNonce claims nonce until expiresAtMs: false if it was claimed
// before, by any processor, and not forgotten since. An error leaves it
// unknown whether the claim was stored; the request is then refused.
func (n *ReplicatedNonces) ClaimNonce(nonce string, expiresAtMs, nowMs int64) (bool, error) {
	margin, op := n.Margin, n.OpTimeout
	if margin <= 0 {
		margin = 30 * time.Second
	}
	if op <= 0 {
		op = 5 * time.Second
	}
	var id [12]byte
	_, _ = rand.Read(id[:])
	c := nonceClaim{ExpiresAtMs: expiresAtMs, Claim: hex.EncodeToString(id[:])}
	data, err := json.Marshal(c, json.Deterministic(true))
	if err != nil {
		return false, err
	}
	ttl := max(time.Duration(expiresAtMs-nowMs)*time.Millisecond+margin, minKeyTTL).Round(time.Second)
	key := nonceKey(nonce)
	deadline := time.Now().Add(op)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := n.KV.Create(ctx, key, data, jetstream.KeyTTL(ttl))
		if err == nil {
			cancel()
			return true, nil
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			// A replay, or this claim's own earlier try, stored.
			e, gerr := n.KV.Get(ctx, key)
			cancel()
			if errors.Is(gerr, jetstream.ErrKeyNotFound) && time.Now().Before(deadline) {
				continue // expired meanwhile: claim again
			}
			if gerr == nil {
				var got nonceClaim
				if json.Unmarshal(e.Value(), &got) != nil {
					return false, nil // not ours
				}
				return got.Claim == c.Claim, nil
			}
			err = gerr
		} else {
			cancel()
		}
		if !leaderkv.Unanswered(err) || time.Now().After(deadline) {
			return false, fmt.Errorf("admin: claim nonce: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
