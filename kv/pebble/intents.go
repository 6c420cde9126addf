package pebble

import (
	"encoding/hex"
	"fmt"

	"github.com/portcullis/portcullis/kv"

	"github.com/portcullis/portcullis/schema"
)

// fingerprintBytes decodes "sha256:<64 hex>" to its 32 bytes.
func fingerprintBytes(fp string) ([]byte, error) {
	if !schema.ValidFingerprint(fp) {
		return nil, fmt.Errorf("kv: not a fingerprint: %q", fp)
	}
	b, err := hex.DecodeString(schema.FingerprintKey(fp))
	if err != nil {
		return nil, fmt.Errorf("kv: not a fingerprint: %w", err)
	}
	return b, nil
}

func intentKey(fp []byte) []byte { return append([]byte{prefixIntent}, fp...) }

func receiptKey(fp []byte, seq uint64) []byte {
	return appendUint64(append([]byte{prefixReceipt}, fp...), seq)
}

func attemptKey(fp []byte, attemptID string) []byte {
	return appendString(append([]byte{prefixAttempt}, fp...), attemptID)
}

func indeterminateKey(fp []byte) []byte { return append([]byte{prefixIndeterminate}, fp...) }

// Intent decodes a fingerprint's journal record (a kv.Intent)
// into v; found is false if there is none.
func (s *Store) Intent(fingerprint string, v any) (bool, error) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		return false, err
	}
	return s.get(intentKey(fp), v)
}

// HasIntents reports whether the store holds any fingerprint's journal
// record (a local journal in use).
func (s *Store) HasIntents() (bool, error) {
	found := false
	err := s.scan([]byte{prefixIntent}, func(_, _ []byte) (bool, error) {
		found = true
		return false, nil
	})
	return found, err
}

// PutIntent writes a fingerprint's journal record.
func (b *Batch) PutIntent(fingerprint string, v any) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		b.err = err
		return
	}
	b.set(intentKey(fp), v)
	// Filed, and its last write noted, at the time of the write, not the
	// record's own change time: a proposal answered from the journal
	// (dispatch step 1) changes no state but must keep it for as long as
	// its own replays can arrive.
	now := b.s.now()
	b.file(ClassIntent, now, fp)
	b.ops = append(b.ops, op{key: lastWriteKey(ClassIntent, fp), val: appendUint64(nil, uint64(max(now, 0)))})
}

// AppendReceipt stores a receipt as number seq of the fingerprint's history.
func (b *Batch) AppendReceipt(seq uint64, r schema.Receipt) {
	fp, err := fingerprintBytes(r.Fingerprint)
	if err != nil {
		b.err = err
		return
	}
	b.set(receiptKey(fp, seq), r)
}

// Receipts returns a fingerprint's receipts, oldest first.
func (s *Store) Receipts(fingerprint string) ([]schema.Receipt, error) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		return nil, err
	}
	var out []schema.Receipt
	err = s.scan(append([]byte{prefixReceipt}, fp...), func(_, val []byte) (bool, error) {
		var r schema.Receipt
		if err := decode(val, &r); err != nil {
			return false, err
		}
		out = append(out, r)
		return true, nil
	})
	return out, err
}

// Attempt decodes a reconciliation attempt's checkpoint into v.
func (s *Store) Attempt(fingerprint, attemptID string, v any) (bool, error) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		return false, err
	}
	return s.get(attemptKey(fp, attemptID), v)
}

// PutAttempt writes a reconciliation attempt's checkpoint.
func (b *Batch) PutAttempt(fingerprint, attemptID string, v any) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		b.err = err
		return
	}
	b.set(attemptKey(fp, attemptID), v)
}

// SetIndeterminate adds (sinceMs > 0) or removes (0) a fingerprint from the
// index of actions whose effect is unknown.
func (b *Batch) SetIndeterminate(fingerprint string, sinceMs int64) {
	fp, err := fingerprintBytes(fingerprint)
	if err != nil {
		b.err = err
		return
	}
	if sinceMs > 0 {
		b.set(indeterminateKey(fp), sinceMs)
	} else {
		b.delete(indeterminateKey(fp))
	}
}

// CountIndeterminate counts the fingerprints whose effect is unknown.
func (s *Store) CountIndeterminate() (int, error) { return s.count([]byte{prefixIndeterminate}) }

// Indeterminates lists every fingerprint whose effect is unknown.
func (s *Store) Indeterminates() ([]kv.Indeterminate, error) {
	var out []kv.Indeterminate
	err := s.scan([]byte{prefixIndeterminate}, func(key, val []byte) (bool, error) {
		var since int64
		if err := decode(val, &since); err != nil {
			return false, err
		}
		out = append(out, kv.Indeterminate{Fingerprint: schema.FingerprintOfKey(hex.EncodeToString(key[1:])), SinceMs: since})
		return true, nil
	})
	return out, err
}
