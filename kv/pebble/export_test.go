package pebble

// Hooks for the external tests of the binary form's conversion
// (convert_test.go).

// OpenJSON opens the store in dir as stores were before the binary form:
// it writes every record as JSON and does not convert at open.
func OpenJSON(dir string, o Options) (*Store, error) {
	s, err := openDB(dir, o)
	if err != nil {
		return nil, err
	}
	s.jsonRecords = true
	return s, nil
}

// ConvertSome runs the conversion of Open but stops, without the mark,
// once it has rewritten limit records (a pass cut short by a crash).
func (s *Store) ConvertSome(limit int) (int, error) { return s.convert(limit) }

// RecordsForm returns the store's mark of converted records.
func (s *Store) RecordsForm() (form int, found bool, err error) {
	found, err = s.get(recordsKey, &form)
	return form, found, err
}

// RecordMark is the first byte of a binary record.
const RecordMark = recordMark
