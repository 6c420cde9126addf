package pebble

import (
	"encoding/binary"
	"errors"
)

// Key prefixes. One byte each; every record type has its own, so prefix
// scans never cross types.
const (
	prefixDelivery      byte = 'd' // sha256(host, delivery_id) → Delivery
	prefixAdmitted      byte = 'm' // host, proposal_id → Admitted
	prefixOutcome       byte = 'o' // host, proposal_id → last Outcome
	prefixEnded         byte = 'e' // host, proposal_id → Ended (dispatch-time denial)
	prefixTimer         byte = 't' // due_ms, id → Timer
	prefixTimerIndex    byte = 'T' // id → due_ms
	prefixApproval      byte = 'a' // host, proposal_id → kv.Approval (authorization's decision record)
	prefixPending       byte = 'p' // host, proposal_id → expires_at_ms, while the proposal is parked
	prefixIntent        byte = 'f' // fingerprint → Intent (dispatch state)
	prefixReceipt       byte = 'r' // fingerprint, seq → Receipt
	prefixAttempt       byte = 'c' // fingerprint, attempt_id → Attempt
	prefixIndeterminate byte = 'i' // fingerprint → since_ms
	prefixGrounding     byte = 'g' // sha256(stream, seq, input) → Grounding
	prefixNonce         byte = 'n' // sha256(nonce) → requested_at_ms (operator requests)
	prefixNonceStamp    byte = 'N' // requested_at_ms, sha256(nonce) → nothing (for the sweep)
	prefixMeta          byte = 'z' // name → the store's own facts (its instance id, the newest nonce stamp)
	prefixExpiry        byte = 'x' // class, filed_at_ms, id → nothing (retention.go)
)

// Variable-length components are escaped so that ordering and prefix scans
// stay correct: 0x00 becomes 0x00 0xFF and a component ends with 0x00 0x01
// (the CockroachDB encoding of bytes, ascending).
const (
	escape    byte = 0x00
	escaped00 byte = 0xFF
	escTerm   byte = 0x01
)

var errBadKey = errors.New("kv: malformed key")

func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == escape {
			b = append(b, escape, escaped00)
		} else {
			b = append(b, s[i])
		}
	}
	return append(b, escape, escTerm)
}

// readString decodes one escaped component and returns the rest.
func readString(b []byte) (string, []byte, error) {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != escape {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			return "", nil, errBadKey
		}
		switch b[i+1] {
		case escTerm:
			return string(out), b[i+2:], nil
		case escaped00:
			out = append(out, escape)
			i++
		default:
			return "", nil, errBadKey
		}
	}
	return "", nil, errBadKey
}

func appendUint64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

func readUint64(b []byte) (uint64, []byte, error) {
	if len(b) < 8 {
		return 0, nil, errBadKey
	}
	return binary.BigEndian.Uint64(b), b[8:], nil
}

// prefixEnd returns the first key after every key starting with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // prefix was all 0xFF: no upper bound
}
