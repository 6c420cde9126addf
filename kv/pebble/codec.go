package pebble

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"

	"github.com/go-json-experiment/json"
)

// The records the stages read and write for every proposal are stored in
// a compact binary form instead of JSON: reflection-driven JSON was most
// of what the store cost the processor (kv/pebble's get ~7 % and set ~2 %
// of its CPU under `processor bench`), for records whose every field is
// known here. The form, version 1:
//
//	recordMark  recordVersion  kind  fields…
//
// recordMark is a byte no JSON text starts with (JSON starts with '{',
// '"', '[', a digit, '-', 't', 'f', 'n' or white space; 0xFF is not even
// UTF-8), so that decode tells the two forms apart by the first byte and a
// record written as JSON by an earlier version still reads (convert.go
// rewrites them once). The fields follow in the order of the record's Go
// struct, without names:
//
//	string, []byte  uvarint length, then the bytes
//	int, int64      varint (zigzag)
//	uint64          uvarint
//	bool            one byte, 0 or 1
//	*T              one byte, 0 (nil) or 1, then T
//	[]T             uvarint count, then each T
//
// A decoded record equals what its JSON form decoded to, so that no caller
// sees which form was read: a slice the JSON form always wrote (no
// omitempty: "proposals":[]) decodes empty but not nil, one it omitted
// when empty (omitempty) decodes nil; a Timer's empty Data is empty, not
// nil ("data":""). A field added to one of these structs must be added
// here, in a new version (TestCodecRoundTrip fails until it is).
//
// Records of other kinds (timer index entries, the parked and
// indeterminate indexes, nonces, the store's own facts, tools' marks)
// stay JSON: they are rare or tiny.
const (
	recordMark    byte = 0xFF
	recordVersion byte = 1
)

// recordKind says which struct a binary record holds (its third byte): a
// record decoded into another type goes through that struct, as its JSON
// form would have.
type recordKind byte

const (
	kindIntent    recordKind = iota + 1 // kv.Intent
	kindReceipt                         // schema.Receipt
	kindAttempt                         // kv.Attempt
	kindDelivery                        // kv.Delivery
	kindAdmitted                        // kv.Admitted
	kindOutcome                         // schema.Outcome, without Host (as its JSON form)
	kindEnded                           // kv.Ended
	kindGrounding                       // kv.Grounding
	kindApproval                        // kv.Approval
	kindTimer                           // kv.Timer
	kindEnd                             // one past the last
)

var kindNames = [...]string{
	kindIntent: "intent", kindReceipt: "receipt", kindAttempt: "attempt", kindDelivery: "delivery",
	kindAdmitted: "admitted", kindOutcome: "outcome", kindEnded: "ended", kindGrounding: "grounding",
	kindApproval: "approval", kindTimer: "timer",
}

func (k recordKind) String() string {
	if k > 0 && k < kindEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", byte(k))
}

// newOfKind returns a pointer to a zero record of kind k (nil for an
// unknown kind).
func newOfKind(k recordKind) any {
	switch k {
	case kindIntent:
		return new(kv.Intent)
	case kindReceipt:
		return new(schema.Receipt)
	case kindAttempt:
		return new(kv.Attempt)
	case kindDelivery:
		return new(kv.Delivery)
	case kindAdmitted:
		return new(kv.Admitted)
	case kindOutcome:
		return new(schema.Outcome)
	case kindEnded:
		return new(kv.Ended)
	case kindGrounding:
		return new(kv.Grounding)
	case kindApproval:
		return new(kv.Approval)
	case kindTimer:
		return new(kv.Timer)
	}
	return nil
}

// encodeBinary returns the binary form of v, a record of a converted kind
// (as a value or a pointer); ok is false for any other type.
func encodeBinary(v any) (val []byte, ok bool) {
	// Built in a pooled scratch buffer and copied out at its exact size:
	// one allocation whatever the record's size.
	buf := scratch.Get().(*[]byte)
	e := enc((*buf)[:0])
	switch r := v.(type) {
	case *kv.Intent:
		e = e.intent(r)
	case kv.Intent:
		e = e.intent(&r)
	case *schema.Receipt:
		e = e.header(kindReceipt).receipt(r)
	case schema.Receipt:
		e = e.header(kindReceipt).receipt(&r)
	case *kv.Attempt:
		e = e.attempt(r)
	case kv.Attempt:
		e = e.attempt(&r)
	case *kv.Delivery:
		e = e.delivery(r)
	case kv.Delivery:
		e = e.delivery(&r)
	case *kv.Admitted:
		e = e.admitted(r)
	case kv.Admitted:
		e = e.admitted(&r)
	case *schema.Outcome:
		e = e.outcome(r)
	case schema.Outcome:
		e = e.outcome(&r)
	case *kv.Ended:
		e = e.ended(r)
	case kv.Ended:
		e = e.ended(&r)
	case *kv.Grounding:
		e = e.grounding(r)
	case kv.Grounding:
		e = e.grounding(&r)
	case *kv.Approval:
		e = e.approval(r)
	case kv.Approval:
		e = e.approval(&r)
	case *kv.Timer:
		e = e.timer(r)
	case kv.Timer:
		e = e.timer(&r)
	default:
		scratch.Put(buf)
		return nil, false
	}
	val = append([]byte(nil), e...)
	if cap(e) <= 64<<10 { // an outsize record's buffer is let go
		*buf = e[:0]
		scratch.Put(buf)
	}
	return val, true
}

// decodeBinary decodes a binary record (val[0] is recordMark) into v. A v
// of the record's own type is filled directly; any other type (a tool's
// partial struct, a map) receives the record through its JSON form, as if
// the record had been stored as JSON.
func decodeBinary(val []byte, v any) error {
	d := decoder{b: val}
	kind := d.header()
	if d.err != "" {
		return d.fail()
	}
	switch r := v.(type) {
	case *kv.Intent:
		if kind == kindIntent {
			*r = d.intent()
			return d.finish()
		}
	case *schema.Receipt:
		if kind == kindReceipt {
			*r = d.receipt()
			return d.finish()
		}
	case *kv.Attempt:
		if kind == kindAttempt {
			*r = d.attempt()
			return d.finish()
		}
	case *kv.Delivery:
		if kind == kindDelivery {
			*r = d.delivery()
			return d.finish()
		}
	case *kv.Admitted:
		if kind == kindAdmitted {
			*r = d.admitted()
			return d.finish()
		}
	case *schema.Outcome:
		if kind == kindOutcome {
			*r = d.outcome()
			return d.finish()
		}
	case *kv.Ended:
		if kind == kindEnded {
			*r = d.ended()
			return d.finish()
		}
	case *kv.Grounding:
		if kind == kindGrounding {
			*r = d.grounding()
			return d.finish()
		}
	case *kv.Approval:
		if kind == kindApproval {
			*r = d.approval()
			return d.finish()
		}
	case *kv.Timer:
		if kind == kindTimer {
			*r = d.timer()
			return d.finish()
		}
	}
	own := newOfKind(kind)
	if own == nil {
		d.failf("unknown kind")
		return d.fail()
	}
	if err := decodeBinary(val, own); err != nil {
		return err
	}
	j, err := json.Marshal(own, json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("%w: %s record as JSON: %w", ErrCorrupt, kind, err)
	}
	return decodeJSON(j, v)
}

// enc is a binary record being built. Its methods append and return the
// longer record, like append: the record lives in the caller's local
// variables, never behind a pointer, so that no append pays a GC write
// barrier (which storing a slice through a pointer does while the
// collector runs: a third of the encoder's time when it did).
type enc []byte

// scratch holds the encoder's buffers.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (b enc) header(k recordKind) enc { return append(b, recordMark, recordVersion, byte(k)) }

func (b enc) str(s string) enc {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func (b enc) bytes(p []byte) enc {
	return append(binary.AppendUvarint(b, uint64(len(p))), p...)
}

func (b enc) int(v int64) enc   { return binary.AppendVarint(b, v) }
func (b enc) uint(v uint64) enc { return binary.AppendUvarint(b, v) }
func (b enc) count(n int) enc   { return binary.AppendUvarint(b, uint64(n)) }
func (b enc) bool(v bool) enc   { return append(b, b2u(v)) }

func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func (b enc) ref(r schema.ProposalRef) enc { return b.str(r.Host).str(r.ProposalID) }

func (b enc) incidents(is []schema.Incident) enc {
	b = b.count(len(is))
	for _, i := range is {
		b = b.str(string(i.Phase)).str(string(i.Code)).str(string(i.DispatchBoundary))
	}
	return b
}

func (b enc) strs(ss []string) enc {
	b = b.count(len(ss))
	for _, s := range ss {
		b = b.str(s)
	}
	return b
}

func (b enc) intent(r *kv.Intent) enc {
	b = b.header(kindIntent).str(r.Fingerprint).str(r.IdempotencyKey).target(&r.Target).str(r.Adapter).str(string(r.State))
	b = b.count(len(r.Proposals))
	for _, p := range r.Proposals {
		b = b.ref(p)
	}
	b = b.int(int64(r.DispatchAttempts)).int(r.InFlightAtMs).int(r.NotInvokedSinceMs).str(r.InFlightBy).int(r.InFlightUntilMs)
	b = b.bool(r.DispatchedFor != nil)
	if r.DispatchedFor != nil {
		b = b.ref(*r.DispatchedFor)
	}
	b = b.bool(r.Receipt != nil)
	if r.Receipt != nil {
		b = b.receipt(r.Receipt)
	}
	b = b.uint(r.ReceiptSeq).str(string(r.Latest.Kind)).bool(r.Latest.Terminal).incidents(r.Latest.Incidents)
	b = b.int(int64(r.ReconcileAttempt)).int(int64(r.UnansweredPolls)).bool(r.ReconcileExhausted).int(r.ReconcileNextAtMs)
	b = b.str(r.Resolution).str(string(r.DispatchCode)).int(int64(r.Redispatches)).int(r.ReceiptAfterMs)
	b = b.count(len(r.Ended))
	for i := range r.Ended {
		b = b.ref(r.Ended[i].Ref).endedFields(&r.Ended[i].Ended)
	}
	return b.int(r.UpdatedAtMs)
}

func (b enc) target(t *schema.Target) enc {
	return b.str(t.Provider).str(t.Capability).str(t.Operation).str(t.Environment).str(t.Referent)
}

// receipt appends a receipt's fields (no header: it is also a part of the
// intent and outcome records).
func (b enc) receipt(r *schema.Receipt) enc {
	b = b.str(r.ReceiptID).str(r.Fingerprint).str(r.IdempotencyKey).str(r.Provider).str(r.Capability).str(r.Operation).str(r.Environment)
	b = b.str(r.Adapter).str(string(r.Status)).bool(r.DispatchAttempted).str(string(r.NextAction)).str(r.ProviderActionID)
	b = b.strs(r.EvidenceRefs).str(r.ErrorCode)
	b = b.bool(r.Disclosure != nil)
	if d := r.Disclosure; d != nil {
		b = b.str(d.Recipient).str(d.Purpose).strs(d.FieldClasses).str(d.Source).str(d.AuthenticationAssurance)
	}
	b = b.bool(r.Reconciliation != nil)
	if c := r.Reconciliation; c != nil {
		b = b.str(c.AttemptID).str(c.PreviousReceiptID).str(c.Operator)
	}
	return b.int(r.RecordedAtMs)
}

func (b enc) attempt(a *kv.Attempt) enc {
	return b.header(kindAttempt).str(a.AttemptID).int(int64(a.Number)).int(a.StartedAtMs).str(a.Status).int(a.FinishedAtMs)
}

func (b enc) delivery(d *kv.Delivery) enc {
	return b.header(kindDelivery).str(d.ProposalID).uint(d.Seq).int(d.AtMs)
}

func (b enc) admitted(a *kv.Admitted) enc {
	return b.header(kindAdmitted).str(a.Digest).uint(a.Seq).bool(a.Forwarded).bool(a.Failed).int(a.AtMs)
}

func (b enc) outcome(o *schema.Outcome) enc {
	b = b.header(kindOutcome).str(o.Schema).str(o.ProposalID).str(string(o.Kind)).bool(o.Terminal).str(string(o.EffectTruth))
	b = b.incidents(o.Incidents)
	b = b.bool(o.Fingerprint != nil)
	if o.Fingerprint != nil {
		b = b.str(*o.Fingerprint)
	}
	b = b.bool(o.Referent != nil)
	if o.Referent != nil {
		b = b.str(*o.Referent)
	}
	b = b.bool(o.Receipt != nil)
	if o.Receipt != nil {
		b = b.receipt(o.Receipt)
	}
	b = b.bool(o.Approval != nil)
	if a := o.Approval; a != nil {
		b = b.str(a.Fingerprint).str(a.Summary).bool(a.ExternalSpend != nil)
		if s := a.ExternalSpend; s != nil {
			b = b.str(s.Currency).int(s.AmountMinor)
		}
		b = b.int(a.ExpiresAtMs)
	}
	return b.int(o.AtMs).bool(o.RecordedEarlier)
}

func (b enc) ended(x *kv.Ended) enc { return b.header(kindEnded).endedFields(x) }

func (b enc) endedFields(x *kv.Ended) enc {
	return b.str(string(x.Phase)).str(string(x.Code)).int(x.AtMs)
}

func (b enc) grounding(g *kv.Grounding) enc {
	return b.header(kindGrounding).str(string(g.Code)).str(g.Referent).str(g.ObservationRef).int(g.AtMs)
}

func (b enc) approval(a *kv.Approval) enc {
	b = b.header(kindApproval).str(a.Host).str(a.ProposalID).str(a.Fingerprint).str(a.Referent).uint(a.Seq).str(string(a.State))
	b = b.int(a.ArrivedAtMs).int(a.ExpiresAtMs).str(a.DecidedBy).int(a.DecidedAtMs).str(string(a.Code)).bool(a.Bound)
	b = b.count(len(a.Evaluations))
	for _, ev := range a.Evaluations {
		b = b.str(ev.Layer).str(ev.Outcome).str(string(ev.ReasonCode))
	}
	return b
}

func (b enc) timer(t *kv.Timer) enc {
	return b.header(kindTimer).str(t.ID).int(t.DueMs).str(t.Subject).bytes(t.Data).str(t.MsgID)
}

// decoder reads a binary record. Every read checks its bounds; the first
// failure sticks (later reads return zero values) and finish reports it
// as ErrCorrupt, so that a damaged record never panics and never makes
// the decoder allocate more than the record's size allows: a count is
// refused when the bytes left could not hold that many elements.
type decoder struct {
	b []byte
	// s is a copy of b made at the first string read: every decoded
	// string is a substring of it, one allocation for the record's
	// strings (b is Pebble's buffer, valid only until the read returns).
	s    string
	i    int
	kind recordKind
	err  string // the first failure; "" none
	at   int    // where it happened
}

func (d *decoder) failf(what string) {
	if d.err == "" {
		d.err, d.at = what, d.i
	}
	d.i = len(d.b) // nothing more is read
}

func (d *decoder) fail() error {
	return fmt.Errorf("%w: binary %s record: %s at byte %d", ErrCorrupt, d.kind, d.err, d.at)
}

// finish reports the first failure, or bytes left over.
func (d *decoder) finish() error {
	if d.err == "" && d.i != len(d.b) {
		d.failf("trailing bytes")
	}
	if d.err != "" {
		return d.fail()
	}
	return nil
}

func (d *decoder) header() recordKind {
	switch {
	case len(d.b) < 3 || d.b[0] != recordMark:
		d.failf("truncated header")
	case d.b[1] != recordVersion:
		d.failf(fmt.Sprintf("unknown version %d", d.b[1]))
	default:
		d.kind = recordKind(d.b[2])
		d.i = 3
	}
	return d.kind
}

func (d *decoder) uint() uint64 {
	v, n := binary.Uvarint(d.b[d.i:])
	if n <= 0 {
		d.failf("bad uvarint")
		return 0
	}
	d.i += n
	return v
}

func (d *decoder) int() int64 {
	v, n := binary.Varint(d.b[d.i:])
	if n <= 0 {
		d.failf("bad varint")
		return 0
	}
	d.i += n
	return v
}

// length reads a length of that many bytes to follow.
func (d *decoder) length() int {
	n := d.uint()
	if n > uint64(len(d.b)-d.i) {
		d.failf("length past the end")
		return 0
	}
	return int(n)
}

func (d *decoder) str() string {
	n := d.length()
	if n == 0 {
		return ""
	}
	if d.s == "" {
		d.s = string(d.b)
	}
	s := d.s[d.i : d.i+n]
	d.i += n
	return s
}

// bytes reads a []byte; empty is not nil (as its JSON form, "").
func (d *decoder) bytes() []byte {
	n := d.length()
	p := make([]byte, n)
	copy(p, d.b[d.i:d.i+n])
	d.i += n
	return p
}

// count reads the length of a list whose every element takes at least
// minBytes bytes.
func (d *decoder) count(minBytes int) int {
	n := d.uint()
	if n > uint64((len(d.b)-d.i)/minBytes) {
		d.failf("count past the end")
		return 0
	}
	return int(n)
}

func (d *decoder) bool() bool {
	if d.i >= len(d.b) {
		d.failf("truncated")
		return false
	}
	v := d.b[d.i]
	if v > 1 {
		d.failf("bad bool")
		return false
	}
	d.i++
	return v == 1
}

// present reads the presence byte of a pointer.
func (d *decoder) present() bool { return d.bool() }

func (d *decoder) ref() schema.ProposalRef {
	return schema.ProposalRef{Host: d.str(), ProposalID: d.str()}
}

// incidents reads a list of incidents; omitempty says whether the JSON
// form omitted an empty one (then empty decodes nil, else empty).
func (d *decoder) incidents(omitempty bool) []schema.Incident {
	n := d.count(3)
	if n == 0 {
		return emptyOrNil[schema.Incident](omitempty)
	}
	out := make([]schema.Incident, n)
	for i := range out {
		out[i] = schema.Incident{Phase: schema.Phase(d.str()), Code: schema.Code(d.str()), DispatchBoundary: schema.Boundary(d.str())}
	}
	return out
}

// strs reads a list of strings the JSON form always wrote (empty, not nil).
func (d *decoder) strs() []string {
	n := d.count(1)
	if n == 0 {
		return []string{}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str()
	}
	return out
}

func emptyOrNil[T any](omitempty bool) []T {
	if omitempty {
		return nil
	}
	return []T{}
}

func (d *decoder) intent() kv.Intent {
	var r kv.Intent
	r.Fingerprint = d.str()
	r.IdempotencyKey = d.str()
	r.Target = d.target()
	r.Adapter = d.str()
	r.State = kv.IntentState(d.str())
	if n := d.count(2); n > 0 {
		r.Proposals = make([]schema.ProposalRef, n)
		for i := range r.Proposals {
			r.Proposals[i] = d.ref()
		}
	} else {
		r.Proposals = []schema.ProposalRef{}
	}
	r.DispatchAttempts = int(d.int())
	r.InFlightAtMs = d.int()
	r.NotInvokedSinceMs = d.int()
	r.InFlightBy = d.str()
	r.InFlightUntilMs = d.int()
	if d.present() {
		ref := d.ref()
		r.DispatchedFor = &ref
	}
	if d.present() {
		rc := d.receipt()
		r.Receipt = &rc
	}
	r.ReceiptSeq = d.uint()
	r.Latest.Kind = schema.Kind(d.str())
	r.Latest.Terminal = d.bool()
	r.Latest.Incidents = d.incidents(true)
	r.ReconcileAttempt = int(d.int())
	r.UnansweredPolls = int(d.int())
	r.ReconcileExhausted = d.bool()
	r.ReconcileNextAtMs = d.int()
	r.Resolution = d.str()
	r.DispatchCode = schema.Code(d.str())
	r.Redispatches = int(d.int())
	r.ReceiptAfterMs = d.int()
	if n := d.count(5); n > 0 {
		r.Ended = make([]kv.EndedProposal, n)
		for i := range r.Ended {
			r.Ended[i] = kv.EndedProposal{Ref: d.ref(), Ended: d.endedFields()}
		}
	}
	r.UpdatedAtMs = d.int()
	return r
}

func (d *decoder) target() schema.Target {
	return schema.Target{Provider: d.str(), Capability: d.str(), Operation: d.str(), Environment: d.str(), Referent: d.str()}
}

func (d *decoder) receipt() schema.Receipt {
	var r schema.Receipt
	r.ReceiptID = d.str()
	r.Fingerprint = d.str()
	r.IdempotencyKey = d.str()
	r.Provider = d.str()
	r.Capability = d.str()
	r.Operation = d.str()
	r.Environment = d.str()
	r.Adapter = d.str()
	r.Status = schema.Status(d.str())
	r.DispatchAttempted = d.bool()
	r.NextAction = schema.NextAction(d.str())
	r.ProviderActionID = d.str()
	r.EvidenceRefs = d.strs()
	r.ErrorCode = d.str()
	if d.present() {
		r.Disclosure = &schema.DisclosureRecord{
			Recipient:               d.str(),
			Purpose:                 d.str(),
			FieldClasses:            d.strs(),
			Source:                  d.str(),
			AuthenticationAssurance: d.str(),
		}
	}
	if d.present() {
		r.Reconciliation = &schema.ReceiptReconcileRef{AttemptID: d.str(), PreviousReceiptID: d.str(), Operator: d.str()}
	}
	r.RecordedAtMs = d.int()
	return r
}

func (d *decoder) attempt() kv.Attempt {
	return kv.Attempt{AttemptID: d.str(), Number: int(d.int()), StartedAtMs: d.int(), Status: d.str(), FinishedAtMs: d.int()}
}

func (d *decoder) delivery() kv.Delivery {
	return kv.Delivery{ProposalID: d.str(), Seq: d.uint(), AtMs: d.int()}
}

func (d *decoder) admitted() kv.Admitted {
	return kv.Admitted{Digest: d.str(), Seq: d.uint(), Forwarded: d.bool(), Failed: d.bool(), AtMs: d.int()}
}

func (d *decoder) outcome() schema.Outcome {
	var o schema.Outcome
	o.Schema = d.str()
	o.ProposalID = d.str()
	o.Kind = schema.Kind(d.str())
	o.Terminal = d.bool()
	o.EffectTruth = schema.EffectTruth(d.str())
	o.Incidents = d.incidents(false)
	if d.present() {
		s := d.str()
		o.Fingerprint = &s
	}
	if d.present() {
		s := d.str()
		o.Referent = &s
	}
	if d.present() {
		rc := d.receipt()
		o.Receipt = &rc
	}
	if d.present() {
		o.Approval = &schema.Approval{Fingerprint: d.str(), Summary: d.str(), ExternalSpend: d.spend(), ExpiresAtMs: d.int()}
	}
	o.AtMs = d.int()
	o.RecordedEarlier = d.bool()
	return o
}

func (d *decoder) spend() *schema.Spend {
	if !d.present() {
		return nil
	}
	return &schema.Spend{Currency: d.str(), AmountMinor: d.int()}
}

func (d *decoder) ended() kv.Ended { return d.endedFields() }

func (d *decoder) endedFields() kv.Ended {
	return kv.Ended{Phase: schema.Phase(d.str()), Code: schema.Code(d.str()), AtMs: d.int()}
}

func (d *decoder) grounding() kv.Grounding {
	return kv.Grounding{Code: schema.Code(d.str()), Referent: d.str(), ObservationRef: d.str(), AtMs: d.int()}
}

func (d *decoder) approval() kv.Approval {
	var a kv.Approval
	a.Host = d.str()
	a.ProposalID = d.str()
	a.Fingerprint = d.str()
	a.Referent = d.str()
	a.Seq = d.uint()
	a.State = kv.ApprovalState(d.str())
	a.ArrivedAtMs = d.int()
	a.ExpiresAtMs = d.int()
	a.DecidedBy = d.str()
	a.DecidedAtMs = d.int()
	a.Code = schema.Code(d.str())
	a.Bound = d.bool()
	if n := d.count(3); n > 0 {
		a.Evaluations = make([]schema.PolicyEvaluation, n)
		for i := range a.Evaluations {
			a.Evaluations[i] = schema.PolicyEvaluation{Layer: d.str(), Outcome: d.str(), ReasonCode: schema.Code(d.str())}
		}
	} else {
		a.Evaluations = []schema.PolicyEvaluation{}
	}
	return a
}

func (d *decoder) timer() kv.Timer {
	return kv.Timer{ID: d.str(), DueMs: d.int(), Subject: d.str(), Data: d.bytes(), MsgID: d.str()}
}
