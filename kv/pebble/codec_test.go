package pebble

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"

	"github.com/go-json-experiment/json"
)

// allKinds are the converted record kinds.
func allKinds() []recordKind {
	var out []recordKind
	for k := recordKind(1); k < kindEnd; k++ {
		out = append(out, k)
	}
	return out
}

// fill sets every exported field reachable from v to random values: nil,
// empty and full slices and pointers, empty and odd strings, extreme
// numbers. A field the codec forgets loses its value and fails the
// round trip. A kind of field the filler does not know fails the test, so
// that a new kind of field gets generated here before it is trusted.
func fill(t *testing.T, r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(randString(r))
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 1)
	case reflect.Int, reflect.Int64:
		v.SetInt(randInt(r))
	case reflect.Uint64:
		v.SetUint(randUint(r))
	case reflect.Uint8:
		v.SetUint(uint64(r.IntN(256)))
	case reflect.Pointer:
		if r.IntN(3) == 0 {
			v.SetZero()
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(t, r, p.Elem())
		v.Set(p)
	case reflect.Slice:
		switch r.IntN(4) {
		case 0:
			v.SetZero()
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			n := 1 + r.IntN(4)
			s := reflect.MakeSlice(v.Type(), n, n)
			for i := range n {
				fill(t, r, s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, r, v.Field(i))
			}
		}
	default:
		t.Fatalf("fill: no generator for %s", v.Type())
	}
}

var oddStrings = []string{"", "a", "sha256:" + strings.Repeat("ab", 32), "é日本", "\x00", "quote\"back\\slash\nnl", "<&>", "\u2028", strings.Repeat("x", 300)}

func randString(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return oddStrings[r.IntN(len(oddStrings))]
	}
	b := make([]rune, r.IntN(20))
	for i := range b {
		b[i] = rune(' ' + r.IntN(0x3000))
		if b[i] >= 0xD800 && b[i] < 0xE000 {
			b[i] = 'z'
		}
	}
	return string(b)
}

func randInt(r *rand.Rand) int64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.MaxInt64
	case 2:
		return math.MinInt64
	case 3:
		return -r.Int64N(1000)
	default:
		return r.Int64()
	}
}

func randUint(r *rand.Rand) uint64 {
	switch r.IntN(3) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	default:
		return r.Uint64()
	}
}

// jsonRoundTrip is what a record read back as JSON was, before the
// binary form: what the binary form must read back too.
func jsonRoundTrip(t *testing.T, k recordKind, v any) any {
	t.Helper()
	j, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		t.Fatal(err)
	}
	out := newOfKind(k)
	if err := json.Unmarshal(j, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCodecRoundTrip: every converted kind, filled at random, reads back
// from its binary form exactly as from its JSON form (deep-equal, nil and
// empty slices told apart), and decoding it into another type (a map)
// gives what decoding its JSON form gave.
func TestCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 2))
	for range 3000 {
		for _, k := range allKinds() {
			v := newOfKind(k)
			fill(t, r, reflect.ValueOf(v).Elem())
			want := jsonRoundTrip(t, k, v)
			bin, ok := encodeBinary(v)
			if !ok || bin[0] != recordMark || bin[1] != recordVersion || recordKind(bin[2]) != k {
				t.Fatalf("%s: encoded as %x", k, bin[:min(3, len(bin))])
			}
			// By value as by pointer.
			if byValue, _ := encodeBinary(reflect.ValueOf(v).Elem().Interface()); !bytes.Equal(byValue, bin) {
				t.Fatalf("%s: a value encodes otherwise than its pointer", k)
			}
			got := newOfKind(k)
			if err := decode(bin, got); err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s:\nbinary %#v\nJSON   %#v", k, got, want)
			}
			if again, _ := encodeBinary(got); !bytes.Equal(again, bin) {
				t.Fatalf("%s: the decoded record encodes otherwise", k)
			}
			j, _ := json.Marshal(v, json.Deterministic(true))
			var fromJSON, fromBinary map[string]any
			if err := decode(j, &fromJSON); err != nil {
				t.Fatal(err)
			}
			if err := decode(bin, &fromBinary); err != nil {
				t.Fatalf("%s into a map: %v", k, err)
			}
			if !reflect.DeepEqual(fromJSON, fromBinary) {
				t.Fatalf("%s into a map:\nbinary %v\nJSON   %v", k, fromBinary, fromJSON)
			}
		}
	}
}

// TestCodecZeroAndEmpty pins the JSON form's nil-versus-empty answers for
// the records callers compare: a zero record's always-written lists read
// back empty, its omitted ones nil.
func TestCodecZeroAndEmpty(t *testing.T) {
	for _, v := range []any{&kv.Intent{}, &kv.Intent{Proposals: []schema.ProposalRef{}, Ended: []kv.EndedProposal{}, Latest: kv.Latest{Incidents: []schema.Incident{}}}} {
		bin, _ := encodeBinary(v)
		var got kv.Intent
		if err := decode(bin, &got); err != nil {
			t.Fatal(err)
		}
		if got.Proposals == nil || len(got.Proposals) != 0 || got.Ended != nil || got.Latest.Incidents != nil {
			t.Fatalf("intent lists: %#v %#v %#v", got.Proposals, got.Ended, got.Latest.Incidents)
		}
	}
	bin, _ := encodeBinary(schema.Outcome{Host: "h", Receipt: &schema.Receipt{}})
	var o schema.Outcome
	if err := decode(bin, &o); err != nil {
		t.Fatal(err)
	}
	if o.Host != "" || o.Incidents == nil || o.Receipt == nil || o.Receipt.EvidenceRefs == nil || o.Fingerprint != nil {
		t.Fatalf("outcome: %#v", o)
	}
	bin, _ = encodeBinary(kv.Timer{ID: "t"})
	var tm kv.Timer
	if err := decode(bin, &tm); err != nil || tm.Data == nil {
		t.Fatalf("timer data: %#v, %v", tm.Data, err)
	}
}

func realisticIntent() kv.Intent {
	fp := "sha256:" + strings.Repeat("3f", 32)
	ref := schema.ProposalRef{Host: "checkout", ProposalID: "prop-01HZX3K9V7"}
	return kv.Intent{
		Identity: kv.Identity{Fingerprint: fp, IdempotencyKey: strings.Repeat("3f", 32), Target: schema.Target{
			Provider: "payments", Capability: "refunds", Operation: "create", Environment: "production", Referent: "order-8812",
		}},
		Adapter: "nats", State: kv.StateDone,
		Proposals:        []schema.ProposalRef{ref},
		DispatchAttempts: 1, InFlightAtMs: 1_767_000_000_123, InFlightBy: "p_0123456789abcdef", InFlightUntilMs: 1_767_000_030_123,
		DispatchedFor: &ref,
		Receipt: &schema.Receipt{
			ReceiptID: "rcpt_" + strings.Repeat("c4", 16), Fingerprint: fp, IdempotencyKey: strings.Repeat("3f", 32),
			Provider: "payments", Capability: "refunds", Operation: "create", Environment: "production", Adapter: "nats",
			Status: schema.StatusConfirmed, DispatchAttempted: true, NextAction: schema.NextNone,
			ProviderActionID: "re_3PqYk2L", EvidenceRefs: []string{"ledger:entry/99812"}, RecordedAtMs: 1_767_000_000_456,
		},
		ReceiptSeq:  1,
		Latest:      kv.Latest{Kind: schema.KindConfirmed, Terminal: true},
		UpdatedAtMs: 1_767_000_000_456,
	}
}

func realisticAdmitted() kv.Admitted {
	return kv.Admitted{Digest: strings.Repeat("9e", 32), Seq: 184_467, Forwarded: true, AtMs: 1_767_000_000_001}
}

// samples are one realistic record of each kind, the fuzz seeds.
func samples() []any {
	in := realisticIntent()
	return []any{
		&in, in.Receipt, &kv.Attempt{AttemptID: "rcn_x_1", Number: 1, StartedAtMs: 5, Status: "confirmed", FinishedAtMs: 9},
		&kv.Delivery{ProposalID: "prop-1", Seq: 7, AtMs: 8}, ptr(realisticAdmitted()),
		&schema.Outcome{Schema: schema.SchemaOutcome, ProposalID: "prop-1", Kind: schema.KindConfirmed, Terminal: true,
			Incidents: []schema.Incident{{Phase: "dispatch", Code: "X", DispatchBoundary: "after"}}, Fingerprint: &in.Fingerprint, Receipt: in.Receipt,
			Approval: &schema.Approval{Fingerprint: in.Fingerprint, ExternalSpend: &schema.Spend{Currency: "EUR", AmountMinor: 1200}}, AtMs: 3},
		&kv.Ended{Phase: "dispatch", Code: "DENIED", AtMs: 4},
		&kv.Grounding{Referent: "order-1", ObservationRef: "obs:1", AtMs: 5},
		&kv.Approval{Host: "h", ProposalID: "p", State: kv.StateParked, Evaluations: []schema.PolicyEvaluation{{Layer: "grant", Outcome: "pass"}}},
		&kv.Timer{ID: "approval/h.p", DueMs: 10, Subject: "x.y", Data: []byte("{}"), MsgID: "m"},
	}
}

func ptr[T any](v T) *T { return &v }

// TestCodecCorrupt: every truncation of every sample, and every byte of it
// replaced, decodes to an ErrCorrupt or to a record, never a panic; a
// count far beyond the record's bytes is refused before anything is
// allocated for it.
func TestCodecCorrupt(t *testing.T) {
	for _, s := range samples() {
		bin, _ := encodeBinary(s)
		for n := range len(bin) {
			if err := decode(bin[:n], reflect.New(reflect.TypeOf(s).Elem()).Interface()); !errors.Is(err, kv.ErrCorrupt) {
				t.Fatalf("%T cut to %d bytes: %v", s, n, err)
			}
		}
		for i := range bin {
			for _, x := range []byte{0, 1, 2, 0x7f, 0x80, 0xff} {
				c := bytes.Clone(bin)
				c[i] = x
				decodeAll(t, c)
			}
		}
		if err := decode(append(bytes.Clone(bin), 0), reflect.New(reflect.TypeOf(s).Elem()).Interface()); !errors.Is(err, kv.ErrCorrupt) {
			t.Fatalf("%T with a trailing byte: %v", s, err)
		}
	}
	// An intent whose proposal count claims 2^62 entries.
	e := enc(nil).header(kindIntent)
	for range 9 {
		e = e.str("")
	}
	e = e.count(1 << 62)
	var in kv.Intent
	allocs := testing.AllocsPerRun(10, func() {
		if err := decode(e, &in); !errors.Is(err, kv.ErrCorrupt) {
			t.Fatalf("huge count: %v", err)
		}
	})
	if allocs > 5 {
		t.Fatalf("a huge count allocated %v times", allocs)
	}
	for _, bad := range [][]byte{{recordMark}, {recordMark, 2, byte(kindIntent)}, {recordMark, recordVersion, 0}, {recordMark, recordVersion, byte(kindEnd)}} {
		if err := decode(bad, &in); !errors.Is(err, kv.ErrCorrupt) {
			t.Fatalf("%x: %v", bad, err)
		}
		var m map[string]any
		if err := decode(bad, &m); !errors.Is(err, kv.ErrCorrupt) {
			t.Fatalf("%x into a map: %v", bad, err)
		}
	}
}

// decodeAll decodes data into every kind and a map: an error is
// ErrCorrupt, and a record that decodes encodes and decodes to itself.
func decodeAll(t *testing.T, data []byte) {
	t.Helper()
	for _, k := range allKinds() {
		v := newOfKind(k)
		err := decode(data, v)
		if err != nil {
			if !errors.Is(err, kv.ErrCorrupt) {
				t.Fatalf("%s: %v is not ErrCorrupt", k, err)
			}
			continue
		}
		if len(data) > 2 && recordKind(data[2]) == k {
			again, _ := encodeBinary(v)
			w := newOfKind(k)
			if err := decode(again, w); err != nil || !reflect.DeepEqual(v, w) {
				t.Fatalf("%s: decoded %#v, again %#v (%v)", k, v, w, err)
			}
		}
	}
	var m map[string]any
	if err := decode(data, &m); err != nil && !errors.Is(err, kv.ErrCorrupt) {
		t.Fatalf("into a map: %v is not ErrCorrupt", err)
	}
}

// FuzzDecodeBinary feeds the binary decoder damaged records.
func FuzzDecodeBinary(f *testing.F) {
	for _, s := range samples() {
		bin, _ := encodeBinary(s)
		f.Add(bin)
		f.Add(bin[:len(bin)/2])
	}
	f.Add([]byte{recordMark, recordVersion, byte(kindIntent), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || data[0] != recordMark {
			data = append([]byte{recordMark}, data...)
		}
		decodeAll(t, data)
	})
}
