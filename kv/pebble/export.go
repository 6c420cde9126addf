package pebble

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/schema"
)

// What `processor migrate` reads to move a store's state into the buckets
// of a cluster (package migrate): every record of a kind, a page at a time
// in key order, so that a store of any size is read in bounded memory and
// no iterator stays open while the caller works.

// page returns up to limit keys under prefix after after (exclusive; nil:
// from the first), with their values.
func (s *Store) page(prefix byte, after []byte, limit int) (keys, vals [][]byte, err error) {
	lower := []byte{prefix}
	if after != nil {
		lower = append(bytes.Clone(after), 0)
	}
	err = s.scanRange(lower, prefixEnd([]byte{prefix}), func(key, val []byte) (bool, error) {
		keys, vals = append(keys, key), append(vals, bytes.Clone(val))
		return len(keys) < limit, nil
	})
	return keys, vals, err
}

// Cursor is where a page ended: pass it to the next call (nil: the first).
type Cursor []byte

// IntentsAfter returns up to limit fingerprints of journal records after
// the cursor, and the cursor after them (nil once there are none).
func (s *Store) IntentsAfter(c Cursor, limit int) ([]string, Cursor, error) {
	keys, _, err := s.page(prefixIntent, c, limit)
	var out []string
	for _, k := range keys {
		if len(k) != 1+sha256.Size {
			return nil, nil, fmt.Errorf("%w: intent key", ErrCorrupt)
		}
		out = append(out, "sha256:"+hex.EncodeToString(k[1:]))
	}
	return out, last(keys), err
}

// ProposalRecords are the per-proposal record kinds ProposalsAfter pages
// through.
type ProposalRecords byte

// Kinds of ProposalsAfter.
const (
	ApprovalRecords ProposalRecords = ProposalRecords(prefixApproval)
	Admissions      ProposalRecords = ProposalRecords(prefixAdmitted)
	Ends            ProposalRecords = ProposalRecords(prefixEnded)
)

// ProposalsAfter returns up to limit proposals holding a record of kind
// after the cursor, and the cursor after them.
func (s *Store) ProposalsAfter(kind ProposalRecords, c Cursor, limit int) ([]schema.ProposalRef, Cursor, error) {
	keys, _, err := s.page(byte(kind), c, limit)
	var out []schema.ProposalRef
	for _, k := range keys {
		ref, rerr := readProposalKey(k)
		if rerr != nil {
			return nil, nil, fmt.Errorf("%w: proposal key: %w", ErrCorrupt, rerr)
		}
		out = append(out, ref)
	}
	return out, last(keys), err
}

// DeliveryRecord is a delivery record with its key's hash (the delivery id
// is not stored: DeliveryHash).
type DeliveryRecord struct {
	Hash []byte
	kv.Delivery
}

// DeliveriesAfter returns up to limit delivery records after the cursor,
// and the cursor after them.
func (s *Store) DeliveriesAfter(c Cursor, limit int) ([]DeliveryRecord, Cursor, error) {
	keys, vals, err := s.page(prefixDelivery, c, limit)
	var out []DeliveryRecord
	for i, k := range keys {
		if len(k) != 1+sha256.Size {
			return nil, nil, fmt.Errorf("%w: delivery key", ErrCorrupt)
		}
		var d kv.Delivery
		if derr := decode(vals[i], &d); derr != nil {
			return nil, nil, derr
		}
		out = append(out, DeliveryRecord{Hash: k[1:], Delivery: d})
	}
	return out, last(keys), err
}

// DeliveryHash is the hash a delivery record is stored under:
// SHA-256 of "delivery", the host and the delivery id, NUL-separated.
func DeliveryHash(host, deliveryID string) []byte { return deliveryKey(host, deliveryID)[1:] }

func last(keys [][]byte) Cursor {
	if len(keys) == 0 {
		return nil
	}
	return keys[len(keys)-1]
}

// Migrated is the mark `processor migrate` leaves on a store whose state
// it moved into a cluster's buckets.
type Migrated struct {
	// AtMs is when the migration finished.
	AtMs int64 `json:"at_ms"`
	// Prefix is the subject prefix of the buckets it went to.
	Prefix string `json:"prefix"`
}

var migratedKey = append([]byte{prefixMeta}, "migrated"...)

// Migrated returns the store's migration mark, if it has one.
func (s *Store) Migrated() (Migrated, bool, error) {
	var m Migrated
	found, err := s.get(migratedKey, &m)
	return m, found, err
}

// MarkMigrated marks the store as migrated.
func (b *Batch) MarkMigrated(m Migrated) { b.set(migratedKey, m) }
