package pebble

import "fmt"

// Converting a store's JSON records to the binary form (codec.go), once.
//
// Open does it, before it returns the store, and not `processor migrate`:
// that command moves a processor's state into a cluster's JetStream
// buckets and leaves the store behind, marked, for good; this is the
// store's own encoding, which every processor opening an older store
// needs whether it ever joins a cluster or not, with no step for an
// operator to remember. At Open nothing else reads or writes the store
// yet, so the pass races no stage. It is crash-safe as it is: each batch
// rewrites whole records in place (the same keys, no index touched), so a
// record is either JSON or binary and decode reads both; a pass cut short
// leaves no mark, and the next Open runs it again, skipping the records
// already binary by their first byte. Only then is the mark written.
//
// Nothing requires the pass for reading (JSON records read anyway): it
// makes an upgraded store as cheap to read as a new one, and it lets a
// later version stop reading JSON once every store it may meet is marked.
// A store converted here cannot be read by a processor of a version
// before the binary form (downgrading needs the store emptied).

// recordsKey marks a store whose records of the converted kinds are all
// binary: its value is the version of the form they were converted to.
// A store created by this version gets it at its first Open.
var recordsKey = append([]byte{prefixMeta}, "records_form"...)

// converted are the key prefixes whose records codec.go encodes, with the
// kind each holds.
var converted = [...]struct {
	prefix byte
	kind   recordKind
}{
	{prefixIntent, kindIntent},
	{prefixReceipt, kindReceipt},
	{prefixAttempt, kindAttempt},
	{prefixDelivery, kindDelivery},
	{prefixAdmitted, kindAdmitted},
	{prefixOutcome, kindOutcome},
	{prefixEnded, kindEnded},
	{prefixGrounding, kindGrounding},
	{prefixApproval, kindApproval},
	{prefixTimer, kindTimer},
}

// convertBatch is how many records one batch of the pass reads.
const convertBatch = 1024

// convertRecords runs the pass unless the store is marked (or writes
// JSON: tests of the pass).
func (s *Store) convertRecords() error {
	if s.jsonRecords {
		return nil
	}
	_, err := s.convert(-1)
	return err
}

// convert rewrites the JSON records of the converted kinds in the binary
// form and then marks the store; with limit ≥ 0 it stops, unmarked, once
// it has rewritten that many (tests: a pass cut short). It returns how
// many it rewrote. A record that does not decode is left as it was, and
// reading it reports ErrCorrupt as before: a store with one damaged
// record still opens.
func (s *Store) convert(limit int) (int, error) {
	var form int
	found, err := s.get(recordsKey, &form)
	if err != nil {
		return 0, fmt.Errorf("records form: %w", err)
	}
	if found && form >= int(recordVersion) {
		return 0, nil
	}
	n, bad := 0, 0
	for _, c := range converted {
		lower, upper := []byte{c.prefix}, prefixEnd([]byte{c.prefix})
		for {
			b := s.NewBatch()
			read := 0
			var last []byte
			err := s.scanRange(lower, upper, func(key, val []byte) (bool, error) {
				read++
				last = key
				if len(val) > 0 && val[0] == recordMark {
					return read < convertBatch, nil
				}
				rec := newOfKind(c.kind)
				if decodeJSON(val, rec) != nil {
					bad++
					return read < convertBatch, nil
				}
				enc, _ := encodeBinary(rec)
				b.ops = append(b.ops, op{key: key, val: enc})
				return read < convertBatch && (limit < 0 || n+len(b.ops) < limit), nil
			})
			if err != nil {
				return n, err
			}
			// NoSync: the mark's synced commit below makes every batch
			// before it durable (one WAL); a crash before it only makes
			// the next Open convert what was lost again.
			if err := b.Commit(NoSync); err != nil {
				return n, fmt.Errorf("records form: %w", err)
			}
			n += len(b.ops)
			if limit >= 0 && n >= limit {
				return n, nil
			}
			if read < convertBatch {
				break
			}
			lower = append(last, 0)
		}
	}
	b := s.NewBatch()
	b.set(recordsKey, int(recordVersion))
	if err := b.Commit(Sync); err != nil {
		return n, fmt.Errorf("records form: %w", err)
	}
	if n > 0 || bad > 0 {
		s.log.Info("kv: records converted to the binary form", "records", n, "undecodable_left", bad)
	}
	return n, nil
}
