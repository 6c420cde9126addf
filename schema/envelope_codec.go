package schema

import (
	"encoding/binary"
	"unicode/utf8"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// The internal envelope's binary form. It lives here, beside the Envelope
// type and its JSON decoder, rather than under stages/: the type and both of
// its forms change together, and every reader of envelopes (the stages,
// internal/testenv, internal/sim) already reaches schema, so DecodeEnvelope
// stays the one decoder of either form (stages.DecodeEnvelope adds the
// levels on top of it).
//
// Why binary: every stage after admission decoded the whole JSON envelope
// and the stages that add to it encoded it again — about 5 % of the
// processor's CPU in `processor bench`. Hand-written and length-prefixed,
// with no reflection: BenchmarkDecodeEnvelope (stages) went from 8.4 µs,
// 15 allocations (JSON) to well under a microsecond on the bench's
// authorized envelope (see stages/envelope_bench_test.go).
//
// Layout (version 1). Every string and raw JSON value is a uvarint length
// then its bytes; a slice or raw value is a uvarint of its length plus one,
// 0 being nil (so nil and empty survive a round trip, as Validate tells
// "candidates": [] beside a candidate source from no candidates at all); an
// optional struct is a byte 0 (absent) or 1 then its fields; an int64 is a
// zigzag varint; a bool a byte 0 or 1. In order:
//
//	0xB1 (EnvelopeBinaryV1)
//	schema, host, admitted_at_ms
//	proposal: schema, proposal_id, context (10 strings, in Context.fields order),
//	  intent: provider, capability, operation, environment, payload (raw),
//	    ?external_spend (currency, amount_minor), ?protected_disclosure
//	    (field_classes, recipient, purpose, source, require_reauthentication),
//	    display.summary
//	  ?grant, ?requester (5 strings),
//	  grounding: uvarint length of the section, then candidate_source,
//	    subject (raw), scope, observation_ref, candidates (referent, source,
//	    attributes (raw), evidence_refs)
//	?grounded (referent, fingerprint, idempotency_key, observation_ref)
//	?authorization: grant, evaluations (layer, outcome, reason_code),
//	  decided_at_ms, bound
//
// The raw values (grounding.subject, candidate attributes, intent.payload)
// are carried as the bytes admission kept, untouched; the grounding stage
// judges them later, as before. The grounding section is length-prefixed
// so that a reader that wants no candidates can step over them at once,
// and begins with the candidate source, which the grounding bulkhead
// reads (EnvelopeCandidateSource) before anything is decoded. The decode is a full one, not lazy: every stage reads
// nearly every field (policy, activity, the fingerprint), and after
// grounding the candidates are gone from the envelope anyway.
//
// The first byte can never begin a JSON text (0xB0–0xBF are UTF-8
// continuation bytes), so envelopes written as JSON by an earlier version
// — still in the stage, parked and held streams at an upgrade, parked ones
// for up to twice approval.ttl — are told apart by it and still decoded.

// EnvelopeBinaryV1 is the first byte of a version-1 binary envelope.
const EnvelopeBinaryV1 byte = 0xB1

// envelopeBinaryFamily is the high nibble of every binary envelope
// version: a first byte in it that is not a version this build knows is
// refused as an unknown version rather than tried as JSON.
const envelopeBinaryFamily byte = 0xB0

// Rules of the binary envelope (value-free, as the JSON ones).
const (
	RuleEnvelopeVersion   Rule = "unknown binary envelope version"
	RuleEnvelopeTruncated Rule = "binary envelope ends too early"
	RuleEnvelopeLength    Rule = "binary envelope length beyond its data"
	RuleEnvelopeFlag      Rule = "binary envelope flag other than 0 or 1"
	RuleEnvelopeSection   Rule = "binary envelope section length does not match its fields"
	RuleEnvelopeTrailing  Rule = "data after the binary envelope"
	RuleEnvelopeRaw       Rule = "binary envelope raw value is not one valid JSON value"
)

// IsBinaryEnvelope reports whether data is in a binary envelope form
// (of any version) rather than JSON.
func IsBinaryEnvelope(data []byte) bool {
	return len(data) > 0 && data[0]&0xF0 == envelopeBinaryFamily
}

// EncodeEnvelope is the one encoder of the internal envelope: its binary
// form, which every stage hands on, parks and holds (DecodeEnvelope reads
// it back). It cannot fail.
func EncodeEnvelope(env *Envelope) []byte {
	return AppendEnvelope(make([]byte, 0, envelopeSizeHint(env)), env)
}

// envelopeSizeHint is a capacity that holds the usual envelope at once:
// the raw values, which are most of it, plus room for the rest.
func envelopeSizeHint(env *Envelope) int {
	n := 768 + len(env.Proposal.Intent.Payload) + len(env.Proposal.Grounding.Subject) + len(env.Proposal.Intent.Display.Summary)
	for i := range env.Proposal.Grounding.Candidates {
		n += 64 + len(env.Proposal.Grounding.Candidates[i].Attributes)
	}
	return n
}

// AppendEnvelope appends env's binary form to b.
func AppendEnvelope(b []byte, env *Envelope) []byte {
	b = append(b, EnvelopeBinaryV1)
	b = appendStr(b, env.Schema)
	b = appendStr(b, env.Host)
	b = binary.AppendVarint(b, env.AdmittedAtMs)
	b = appendProposal(b, &env.Proposal)
	b = appendFlag(b, env.Grounded != nil)
	if g := env.Grounded; g != nil {
		b = appendStr(b, g.Referent)
		b = appendStr(b, g.Fingerprint)
		b = appendStr(b, g.IdempotencyKey)
		b = appendStr(b, g.ObservationRef)
	}
	b = appendFlag(b, env.Authorization != nil)
	if a := env.Authorization; a != nil {
		b = appendGrant(b, &a.Grant)
		b = appendCount(b, len(a.Evaluations), a.Evaluations == nil)
		for _, e := range a.Evaluations {
			b = appendStr(b, e.Layer)
			b = appendStr(b, e.Outcome)
			b = appendStr(b, string(e.ReasonCode))
		}
		b = binary.AppendVarint(b, a.DecidedAtMs)
		b = appendFlag(b, a.Bound)
	}
	return b
}

func appendProposal(b []byte, p *Proposal) []byte {
	b = appendStr(b, p.Schema)
	b = appendStr(b, p.ProposalID)
	c := &p.Context
	for _, s := range [...]string{c.Tenant.TenantRef, c.Tenant.SecurityDomainRef, c.Actor.ActorRef, c.Actor.Assurance,
		c.Authorization.ScopeRef, c.Authorization.PolicyRevision, c.Provider.AccountRef,
		c.Delivery.DeliveryID, c.Delivery.Source, c.HostInvocation.InvocationID} {
		b = appendStr(b, s)
	}
	in := &p.Intent
	b = appendStr(b, in.Provider)
	b = appendStr(b, in.Capability)
	b = appendStr(b, in.Operation)
	b = appendStr(b, in.Environment)
	b = appendRaw(b, in.Payload)
	b = appendFlag(b, in.ExternalSpend != nil)
	if s := in.ExternalSpend; s != nil {
		b = appendSpend(b, s)
	}
	b = appendFlag(b, in.ProtectedDisclosure != nil)
	if d := in.ProtectedDisclosure; d != nil {
		b = appendStrs(b, d.FieldClasses)
		b = appendStr(b, d.Recipient)
		b = appendStr(b, d.Purpose)
		b = appendStr(b, d.Source)
		b = appendFlag(b, d.RequireReauthentication)
	}
	b = appendStr(b, in.Display.Summary)
	b = appendFlag(b, p.Grant != nil)
	if p.Grant != nil {
		b = appendGrant(b, p.Grant)
	}
	b = appendFlag(b, p.Requester != nil)
	if r := p.Requester; r != nil {
		b = appendStr(b, r.AgentID)
		b = appendStr(b, r.ModelProvider)
		b = appendStr(b, r.ModelID)
		b = appendStr(b, r.SessionID)
		b = appendStr(b, r.RunID)
	}
	// The grounding section, after its length: encoded in place after a
	// reserved maximal uvarint, then moved up against its real length.
	g := &p.Grounding
	start := len(b)
	b = append(b, make([]byte, binary.MaxVarintLen64)...)
	body := len(b)
	b = appendStr(b, g.CandidateSource)
	b = appendRaw(b, g.Subject)
	b = appendStr(b, g.Scope)
	b = appendStr(b, g.ObservationRef)
	b = appendCount(b, len(g.Candidates), g.Candidates == nil)
	for i := range g.Candidates {
		c := &g.Candidates[i]
		b = appendStr(b, c.Referent)
		b = appendStr(b, c.Source)
		b = appendRaw(b, c.Attributes)
		b = appendStrs(b, c.EvidenceRefs)
	}
	n := len(b) - body
	head := binary.AppendUvarint(b[start:start], uint64(n))
	copy(b[start+len(head):], b[body:])
	return b[:start+len(head)+n]
}

func appendGrant(b []byte, g *Grant) []byte {
	b = appendStr(b, g.Schema)
	b = appendStr(b, g.ProposalID)
	b = appendStr(b, g.IntentFingerprint)
	b = appendStr(b, g.AuthorizedBy)
	b = appendStr(b, g.AuthorizationMethod)
	b = appendStr(b, g.AuthenticationAssurance)
	b = binary.AppendVarint(b, g.IssuedAtMs)
	b = binary.AppendVarint(b, g.ExpiresAtMs)
	b = appendFlag(b, g.MaxExternalSpend != nil)
	if g.MaxExternalSpend != nil {
		b = appendSpend(b, g.MaxExternalSpend)
	}
	return b
}

func appendSpend(b []byte, s *Spend) []byte {
	b = appendStr(b, s.Currency)
	return binary.AppendVarint(b, s.AmountMinor)
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendRaw(b []byte, v jsontext.Value) []byte {
	b = appendCount(b, len(v), v == nil)
	return append(b, v...)
}

func appendStrs(b []byte, ss []string) []byte {
	b = appendCount(b, len(ss), ss == nil)
	for _, s := range ss {
		b = appendStr(b, s)
	}
	return b
}

// appendCount writes a slice's length plus one, or 0 for a nil slice.
func appendCount(b []byte, n int, isNil bool) []byte {
	if isNil {
		return append(b, 0)
	}
	return binary.AppendUvarint(b, uint64(n)+1)
}

func appendFlag(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// decodeEnvelopeBinary strictly decodes a binary envelope: the version
// this build writes, every length within the data, every flag 0 or 1,
// every string valid UTF-8 (as JSON strings are), every raw value one
// valid JSON value (no duplicate names) within the depth a JSON envelope
// allows it, and nothing after. Its allocations are bounded by the data
// (itself at most MaxMessageBytes): one copy for all strings and raw
// values, and the structs and slices the encoded counts ask for, each
// count checked against the bytes left (at most some 20 bytes of structs
// per byte of input, as JSON's decoder allows too). On failure env is
// left zero.
func decodeEnvelopeBinary(data []byte, env *Envelope) error {
	if len(data) > MaxMessageBytes {
		return invalid(ErrMalformed, "", Problem{Rule: RuleTooLarge, Offset: -1})
	}
	if data[0] != EnvelopeBinaryV1 {
		return invalid(ErrMalformed, "", Problem{Rule: RuleEnvelopeVersion, Offset: 0})
	}
	*env = Envelope{} // no field of an earlier use survives an absent one
	r := envReader{data: data, off: 1}
	r.envelope(env)
	if r.rule == "" && r.off != len(data) {
		r.fail(RuleEnvelopeTrailing)
	}
	if r.rule != "" {
		*env = Envelope{}
		return invalid(ErrMalformed, "", Problem{Rule: r.rule, Offset: int64(r.at)})
	}
	return nil
}

// envReader reads a binary envelope. Its first failure sticks (rule, at);
// every read after it returns zero values, so the decoding functions need
// not check after each field.
type envReader struct {
	data []byte
	off  int
	// buf is one copy of data, made at the first string or raw value: every
	// string field is a substring of it (unsafe.String) and every raw value
	// a sub-slice, its capacity cut at its end so that an append never
	// reaches past it. The two never overlap, so a raw value changed in
	// place (jsontext.Value's methods may) changes no string; and nothing
	// else writes buf. One allocation for every variable-length field.
	buf  []byte
	blk  *envelopeBlock
	rule Rule
	at   int
}

func (r *envReader) fail(rule Rule) {
	if r.rule == "" {
		r.rule, r.at = rule, r.off
	}
}

func (r *envReader) failed() bool { return r.rule != "" }

// uvarint reads a uvarint no greater than max.
func (r *envReader) uvarint(max uint64) uint64 {
	if r.failed() {
		return 0
	}
	v, n := binary.Uvarint(r.data[r.off:])
	switch {
	case n == 0:
		r.fail(RuleEnvelopeTruncated)
		return 0
	case n < 0:
		r.fail(RuleEnvelopeLength)
		return 0
	case v > max:
		r.fail(RuleEnvelopeLength)
		return 0
	}
	r.off += n
	return v
}

func (r *envReader) varint() int64 {
	if r.failed() {
		return 0
	}
	v, n := binary.Varint(r.data[r.off:])
	switch {
	case n == 0:
		r.fail(RuleEnvelopeTruncated)
		return 0
	case n < 0:
		r.fail(RuleIntegerRange)
		return 0
	}
	r.off += n
	return v
}

func (r *envReader) flag() bool {
	if r.failed() {
		return false
	}
	if r.off >= len(r.data) {
		r.fail(RuleEnvelopeTruncated)
		return false
	}
	switch r.data[r.off] {
	case 0:
		r.off++
		return false
	case 1:
		r.off++
		return true
	}
	r.fail(RuleEnvelopeFlag)
	return false
}

// envelopeBlock holds the envelope's optional parts that a stage past
// grounding always finds, so that they cost one allocation, not four.
type envelopeBlock struct {
	grant         Grant
	grounded      Grounded
	authorization AuthorizationRecord
	evaluations   [2]PolicyEvaluation
}

// block is the envelope's envelopeBlock, made at its first use.
func (r *envReader) block() *envelopeBlock {
	if r.blk == nil {
		r.blk = new(envelopeBlock)
	}
	return r.blk
}

// copyData makes buf, once.
func (r *envReader) copyData() {
	if r.buf == nil {
		r.buf = append([]byte(nil), r.data...)
	}
}

// left is how many bytes are still to read.
func (r *envReader) left() uint64 { return uint64(len(r.data) - r.off) }

func (r *envReader) str() string {
	n := r.uvarint(r.left())
	if r.failed() || n == 0 {
		return ""
	}
	if n > r.left() {
		r.fail(RuleEnvelopeLength)
		return ""
	}
	b := r.data[r.off : r.off+int(n)]
	if !utf8.Valid(b) {
		r.fail(RuleUTF8)
		return ""
	}
	r.copyData()
	s := unsafe.String(&r.buf[r.off], int(n))
	r.off += int(n)
	return s
}

// count reads a slice's length: -1 for a nil slice. Each element takes at
// least min bytes, so a count the data cannot hold is refused before
// anything is allocated for it.
func (r *envReader) count(min uint64) int {
	n := r.uvarint(r.left()/min + 1)
	if r.failed() || n == 0 {
		return -1
	}
	return int(n - 1)
}

// Raw values nest inside the envelope: a JSON envelope (EnvelopeDepth)
// leaves the payload and the subject MaxDepth-2 levels of their own, and
// candidate attributes (inside the candidates array and a candidate)
// MaxDepth-4. The binary form holds them to the same.
const (
	rawDepth       = MaxDepth - 2
	attributeDepth = MaxDepth - 4
)

// raw reads a raw JSON value nesting at most depth levels.
func (r *envReader) raw(depth int) jsontext.Value {
	n := r.count(1)
	if n <= 0 {
		if n == 0 {
			return jsontext.Value{}
		}
		return nil
	}
	if uint64(n) > r.left() {
		r.fail(RuleEnvelopeLength)
		return nil
	}
	if v := jsontext.Value(r.data[r.off : r.off+n]); !v.IsValid() || !WithinDepth(v, depth) {
		r.fail(RuleEnvelopeRaw)
		return nil
	}
	r.copyData()
	v := jsontext.Value(r.buf[r.off : r.off+n : r.off+n])
	r.off += n
	return v
}

func (r *envReader) strList() []string {
	n := r.count(1)
	if n < 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.str()
	}
	return out
}

func (r *envReader) envelope(env *Envelope) {
	env.Schema = r.str()
	env.Host = r.str()
	env.AdmittedAtMs = r.varint()
	r.proposal(&env.Proposal)
	if r.flag() {
		env.Grounded = &r.block().grounded
		*env.Grounded = Grounded{Referent: r.str(), Fingerprint: r.str(), IdempotencyKey: r.str(), ObservationRef: r.str()}
	}
	if r.flag() {
		blk := r.block()
		a := &blk.authorization
		r.grant(&a.Grant)
		if n := r.count(3); n >= 0 {
			if n <= len(blk.evaluations) {
				a.Evaluations = blk.evaluations[:n:n]
			} else {
				a.Evaluations = make([]PolicyEvaluation, n)
			}
			for i := range a.Evaluations {
				e := &a.Evaluations[i]
				e.Layer, e.Outcome, e.ReasonCode = r.str(), r.str(), Code(r.str())
			}
		}
		a.DecidedAtMs = r.varint()
		a.Bound = r.flag()
		env.Authorization = a
	}
}

func (r *envReader) proposal(p *Proposal) {
	p.Schema = r.str()
	p.ProposalID = r.str()
	c := &p.Context
	c.Tenant.TenantRef, c.Tenant.SecurityDomainRef = r.str(), r.str()
	c.Actor.ActorRef, c.Actor.Assurance = r.str(), r.str()
	c.Authorization.ScopeRef, c.Authorization.PolicyRevision = r.str(), r.str()
	c.Provider.AccountRef = r.str()
	c.Delivery.DeliveryID, c.Delivery.Source = r.str(), r.str()
	c.HostInvocation.InvocationID = r.str()
	in := &p.Intent
	in.Provider, in.Capability, in.Operation, in.Environment = r.str(), r.str(), r.str(), r.str()
	in.Payload = r.raw(rawDepth)
	if r.flag() {
		in.ExternalSpend = r.spend()
	}
	if r.flag() {
		d := &DisclosurePlan{}
		d.FieldClasses = r.strList()
		d.Recipient, d.Purpose, d.Source = r.str(), r.str(), r.str()
		d.RequireReauthentication = r.flag()
		in.ProtectedDisclosure = d
	}
	in.Display.Summary = r.str()
	if r.flag() {
		p.Grant = &r.block().grant
		r.grant(p.Grant)
	}
	if r.flag() {
		p.Requester = &Requester{AgentID: r.str(), ModelProvider: r.str(), ModelID: r.str(), SessionID: r.str(), RunID: r.str()}
	}
	size := r.uvarint(r.left())
	if size > r.left() {
		r.fail(RuleEnvelopeLength)
	}
	end := r.off + int(size)
	g := &p.Grounding
	g.CandidateSource = r.str()
	g.Subject = r.raw(rawDepth)
	g.Scope, g.ObservationRef = r.str(), r.str()
	if n := r.count(4); n >= 0 {
		g.Candidates = make([]Candidate, n)
		for i := range g.Candidates {
			c := &g.Candidates[i]
			c.Referent, c.Source = r.str(), r.str()
			c.Attributes = r.raw(attributeDepth)
			c.EvidenceRefs = r.strList()
		}
	}
	if !r.failed() && r.off != end {
		r.fail(RuleEnvelopeSection)
	}
}

func (r *envReader) grant(g *Grant) {
	g.Schema, g.ProposalID, g.IntentFingerprint = r.str(), r.str(), r.str()
	g.AuthorizedBy, g.AuthorizationMethod, g.AuthenticationAssurance = r.str(), r.str(), r.str()
	g.IssuedAtMs, g.ExpiresAtMs = r.varint(), r.varint()
	if r.flag() {
		g.MaxExternalSpend = r.spend()
	}
}

func (r *envReader) spend() *Spend {
	return &Spend{Currency: r.str(), AmountMinor: r.varint()}
}

// EnvelopeProvider reads intent.provider from an envelope in either form
// without decoding it (the dispatch bulkhead, before the handler decodes
// and checks the envelope). ok is false when it cannot be read.
func EnvelopeProvider(data []byte) (string, bool) {
	if !IsBinaryEnvelope(data) {
		return PeekString(data, "proposal", "intent", "provider")
	}
	r := envSkipper{data: data}
	if !r.version() || !r.skipStrs(2) || !r.skipVarint() || !r.skipStrs(2+10) {
		return "", false
	}
	return r.str()
}

// EnvelopeCandidateSource reads grounding.candidate_source from an
// envelope in either form without decoding it (the grounding bulkhead).
// In the binary form it steps over the proposal before its grounding
// section, reading lengths only; the source is the section's first field.
// ok is false when it cannot be read.
func EnvelopeCandidateSource(data []byte) (string, bool) {
	if !IsBinaryEnvelope(data) {
		return PeekString(data, "proposal", "grounding", "candidate_source")
	}
	r := envSkipper{data: data}
	if !r.version() || !r.skipStrs(2) || !r.skipVarint() || !r.skipStrs(2+10+4) || !r.skipBytes() {
		return "", false
	}
	if r.opt() && (!r.skipStrs(1) || !r.skipVarint()) { // external_spend
		return "", false
	}
	if r.opt() && (!r.skipList() || !r.skipStrs(3) || !r.skip(1)) { // protected_disclosure
		return "", false
	}
	if !r.skipStrs(1) { // display.summary
		return "", false
	}
	if r.opt() && !r.skipGrant() {
		return "", false
	}
	if r.opt() && !r.skipStrs(5) { // requester
		return "", false
	}
	if _, ok := r.uvarint(); !ok { // the grounding section's length
		return "", false
	}
	return r.str()
}

// envSkipper steps over a binary envelope's fields without keeping them.
type envSkipper struct {
	data []byte
	off  int
}

func (r *envSkipper) version() bool {
	if len(r.data) == 0 || r.data[0] != EnvelopeBinaryV1 {
		return false
	}
	r.off = 1
	return true
}

func (r *envSkipper) uvarint() (uint64, bool) {
	v, n := binary.Uvarint(r.data[r.off:])
	if n <= 0 {
		return 0, false
	}
	r.off += n
	return v, true
}

func (r *envSkipper) skip(n uint64) bool {
	if n > uint64(len(r.data)-r.off) {
		return false
	}
	r.off += int(n)
	return true
}

func (r *envSkipper) skipVarint() bool {
	_, n := binary.Varint(r.data[r.off:])
	if n <= 0 {
		return false
	}
	r.off += n
	return true
}

func (r *envSkipper) str() (string, bool) {
	n, ok := r.uvarint()
	if !ok || n > uint64(len(r.data)-r.off) {
		return "", false
	}
	s := string(r.data[r.off : r.off+int(n)])
	r.off += int(n)
	return s, true
}

func (r *envSkipper) skipStrs(k int) bool {
	for range k {
		n, ok := r.uvarint()
		if !ok || !r.skip(n) {
			return false
		}
	}
	return true
}

// skipBytes steps over a raw value (its length plus one, 0 for nil).
func (r *envSkipper) skipBytes() bool {
	n, ok := r.uvarint()
	return ok && (n == 0 || r.skip(n-1))
}

// skipList steps over a list of strings.
func (r *envSkipper) skipList() bool {
	n, ok := r.uvarint()
	if !ok {
		return false
	}
	for i := uint64(1); i < n; i++ {
		if !r.skipStrs(1) {
			return false
		}
	}
	return true
}

// opt reads an optional's presence flag; a bad flag reads as absent (the
// skip that follows then fails on what it finds, or the decoder refuses
// the envelope later).
func (r *envSkipper) opt() bool {
	if r.off >= len(r.data) {
		return false
	}
	r.off++
	return r.data[r.off-1] == 1
}

func (r *envSkipper) skipGrant() bool {
	if !r.skipStrs(6) || !r.skipVarint() || !r.skipVarint() {
		return false
	}
	if r.opt() && (!r.skipStrs(1) || !r.skipVarint()) {
		return false
	}
	return true
}
