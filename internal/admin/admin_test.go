package admin

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/metrics"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/reconciliation"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNormalizeFingerprint(t *testing.T) {
	hex := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for in, ok := range map[string]bool{
		"sha256:" + hex: true, hex: true, " SHA256:" + hex + " ": true, "ABCDEF" + hex[6:]: true,
		hex[:63]: false, "sha256:" + hex + "0": false, "md5:" + hex: false, "": false,
	} {
		got, valid := NormalizeFingerprint(in)
		if valid != ok || (ok && !schema.ValidFingerprint(got)) {
			t.Errorf("%q → %q %v", in, got, valid)
		}
	}
}

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &Error{Code: CodeNotIndeterminate, Message: "m"})
	if !errors.Is(err, ErrNotIndeterminate) || errors.Is(err, ErrNotFound) {
		t.Error("errors.Is does not match codes")
	}
	for _, c := range []*Error{ErrUnauthenticated, ErrStale, ErrReplayed} {
		if !errors.Is(fmt.Errorf("x: %w", &Error{Code: c.Code}), c) {
			t.Errorf("%s does not match", c.Code)
		}
	}
}

// The stamp travels inline, beside the request's own fields, and decodes
// strictly.
func TestStampWireForm(t *testing.T) {
	st, err := NewStamp(time.UnixMilli(1_700_000_000_123))
	if err != nil {
		t.Fatal(err)
	}
	if !ValidNonce(st.Nonce) || len(st.Nonce) != 24 {
		t.Fatalf("nonce form: %d characters", len(st.Nonce))
	}
	if other, _ := NewStamp(time.Now()); other.Nonce == st.Nonce {
		t.Fatal("two stamps share a nonce")
	}
	req := ReceiptsRequest{Stamp: st, Fingerprint: "sha256:ab"}
	body := schema.MustMarshal(&req)
	want := `{"requested_at_ms":1700000000123,"nonce":"` + st.Nonce + `","fingerprint":"sha256:ab"}`
	if string(body) != want {
		t.Fatalf("wire form %s", body)
	}
	var back ReceiptsRequest
	if err := schema.Decode(body, &back); err != nil || back != req {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if err := schema.Decode([]byte(`{"requested_at_ms":1,"nonce":"x","stamp":{}}`), &ListRequest{}); err == nil {
		t.Error("unknown member accepted")
	}
	for nonce, ok := range map[string]bool{
		strings.Repeat("A", MinNonceLen): true, strings.Repeat("_-", MaxNonceLen/2): true,
		strings.Repeat("A", MinNonceLen-1): false, strings.Repeat("A", MaxNonceLen+1): false,
		strings.Repeat("A", 30) + "=": false, strings.Repeat("A", 30) + "+": false, strings.Repeat("A", 30) + "\n": false, "": false,
	} {
		if ValidNonce(nonce) != ok {
			t.Errorf("ValidNonce(%q) = %v", nonce, !ok)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	op, _ := nkeys.CreateUser()
	opPub, _ := op.PublicKey()
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	operators := []config.Role{{Name: "oncall", PublicKey: opPub}}
	body := []byte(`{"requested_at_ms":1,"nonce":"x"}`)
	sign := func(kp nkeys.KeyPair, b []byte) nats.Header {
		h, err := Sign(kp, b)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	good := sign(op, body)
	with := func(h nats.Header, k, v string) nats.Header {
		c := nats.Header{}
		for key, vals := range h {
			c[key] = append([]string(nil), vals...)
		}
		if v == "" {
			c.Del(k)
		} else {
			c.Set(k, v)
		}
		return c
	}
	padded := with(good, HeaderSignature, good.Get(HeaderSignature)+"==")
	forged := with(sign(other, body), HeaderOperatorKey, opPub) // the operator's key, another's signature
	for _, c := range []struct {
		name     string
		hdr      nats.Header
		body     []byte
		unsigned bool // allowUnsigned
		operator string
		signed   bool
		reason   string
	}{
		{name: "signed", hdr: good, body: body, operator: "oncall", signed: true},
		{name: "signed, padded signature", hdr: padded, body: body, operator: "oncall", signed: true},
		{name: "signed, dev", hdr: good, body: body, unsigned: true, operator: "oncall", signed: true},
		{name: "unsigned", body: body, reason: reasonUnsigned},
		{name: "unsigned, dev", body: body, unsigned: true},
		{name: "another body", hdr: good, body: []byte(`{"requested_at_ms":2,"nonce":"x"}`), signed: true, reason: reasonBadSignature},
		{name: "forged", hdr: forged, body: body, signed: true, reason: reasonBadSignature},
		{name: "forged, dev", hdr: forged, body: body, unsigned: true, signed: true, reason: reasonBadSignature},
		{name: "unknown key", hdr: sign(other, body), body: body, signed: true, reason: reasonUnknownKey},
		{name: "key only", hdr: with(good, HeaderSignature, ""), body: body, signed: true, reason: reasonBadSignature},
		{name: "key only, dev", hdr: with(good, HeaderSignature, ""), body: body, unsigned: true, signed: true, reason: reasonBadSignature},
		{name: "signature only, dev", hdr: with(good, HeaderOperatorKey, ""), body: body, unsigned: true, signed: true, reason: reasonUnknownKey},
		{name: "signature not base64url", hdr: with(good, HeaderSignature, "a+b/"), body: body, signed: true, reason: reasonBadSignature},
		{name: "signature of a host header name", hdr: nats.Header{"Actions-Host-Key": {opPub}, HeaderSignature: good[HeaderSignature]}, body: body, signed: true, reason: reasonUnknownKey},
		{name: "not a key", hdr: with(good, HeaderOperatorKey, "oncall"), body: body, signed: true, reason: reasonUnknownKey},
		{name: "lower-case names", hdr: nats.Header{"actions-operator-key": good[HeaderOperatorKey], "actions-signature": good[HeaderSignature]}, body: body, operator: "oncall", signed: true},
		{name: "lower-case forged, dev", hdr: nats.Header{"actions-operator-key": {opPub}, "ACTIONS-SIGNATURE": forged[HeaderSignature]}, body: body, unsigned: true, signed: true, reason: reasonBadSignature},
		{name: "two keys", hdr: nats.Header{HeaderOperatorKey: {opPub, otherPub}, HeaderSignature: good[HeaderSignature]}, body: body, signed: true, reason: reasonUnknownKey},
		{name: "two signatures", hdr: nats.Header{HeaderOperatorKey: {opPub}, HeaderSignature: {good.Get(HeaderSignature), good.Get(HeaderSignature)}}, body: body, signed: true, reason: reasonBadSignature},
		{name: "two spellings", hdr: nats.Header{HeaderOperatorKey: {opPub}, "actions-operator-key": {opPub}, HeaderSignature: good[HeaderSignature]}, body: body, signed: true, reason: reasonUnknownKey},
		{name: "configured name is no key", hdr: with(sign(other, body), HeaderOperatorKey, otherPub+"x"), body: body, signed: true, reason: reasonUnknownKey},
	} {
		operator, signed, reason := authenticate(operators, c.unsigned, c.hdr, c.body)
		if operator != c.operator || signed != c.signed || reason != c.reason {
			t.Errorf("%s: got (%q, %v, %q), want (%q, %v, %q)", c.name, operator, signed, reason, c.operator, c.signed, c.reason)
		}
	}
}

// FuzzRequests: any request body, unsigned or signed by a configured
// operator, gets exactly one well-formed reply, a result or a closed error
// code, and never panics the server. Unsigned, it is refused
// (unauthenticated) unless the server accepts unsigned requests.
func FuzzRequests(f *testing.F) {
	st, err := pebble.Open(f.TempDir(), pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	op, _ := nkeys.CreateUser()
	opPub, _ := op.PublicKey()
	const nowMs = 1_700_000_000_000
	clock := stages.NewManualClock(time.UnixMilli(nowMs))
	rec := &reconciliation.Stage{Journal: pebble.NewJournal(st), Route: stages.Route{Subjects: subjects.Default(), Self: "reconciliation"}, Clock: clock, Metrics: metrics.New(nil, nil), MaxAttempts: 3}
	ap, err := pebble.NewApprovals(st)
	if err != nil {
		f.Fatal(err)
	}
	signedOnly := &Server{Journal: pebble.NewJournal(st), Approvals: ap, Nonces: pebble.Nonces{Store: st, Window: NonceWindow(30 * time.Second)}, Store: st, Reconciliation: stageResolver{rec}, ReconcileMaxAttempts: 3, Subjects: subjects.Default(), Clock: clock, Operators: []config.Role{{Name: "oncall", PublicKey: opPub}}}
	dev := &Server{Journal: pebble.NewJournal(st), Approvals: ap, Nonces: pebble.Nonces{Store: st, Window: NonceWindow(30 * time.Second)}, Store: st, Reconciliation: stageResolver{rec}, ReconcileMaxAttempts: 3, Subjects: subjects.Default(), Clock: clock, AllowUnsigned: true}
	fp := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	stamp := func(ms int64, nonce string) string { return fmt.Sprintf(`"requested_at_ms":%d,"nonce":%q`, ms, nonce) }
	n1, n2 := "AAAAAAAAAAAAAAAAAAAAAAAA", "bbbbbbbbbbbbbbbbbbbbbbbb_-"
	for _, seed := range []string{
		`{}`, ``, `{"fingerprint":"` + fp + `"}`,
		`{` + stamp(nowMs, n1) + `}`,
		`{` + stamp(nowMs, n2) + `,"fingerprint":"` + fp + `"}`,
		`{` + stamp(nowMs-60_001, n1) + `}`, `{` + stamp(nowMs+60_001, n1) + `}`,
		`{` + stamp(nowMs, "short") + `}`, `{` + stamp(0, n1) + `}`, `{` + stamp(-1, n1) + `}`,
		`{"requested_at_ms":1.5,"nonce":"` + n1 + `"}`, `{"requested_at_ms":"1","nonce":1}`,
		`{` + stamp(nowMs, n1) + `,` + stamp(nowMs, n2) + `}`,
		`{` + stamp(nowMs, n1) + `,"fingerprint":"` + fp + `","effect":"present","evidence_ref":"ticket:1"}`,
		`{"fingerprint":"` + fp + `","effect":"absent","evidence_ref":"no colon"}`,
		`{"fingerprint":"` + fp + `","fingerprint":"` + fp + `"}`,
		`{"effect":"maybe"}`, `[1]`, `null`, `"x"`, `{"fingerprint":1}`,
		`{"proposal":{"host":"h","proposal_id":"p-1"}}`, `{"fingerprint":"` + fp + `","proposal":{"host":"h","proposal_id":"p"}}`,
		`{"proposal":{"host":"h.x","proposal_id":"p"},"effect":"present","evidence_ref":"t:1"}`,
		`{"host":"h","proposal_id":"p-1"}`, `{"host":"","proposal_id":"p"}`, `{"host":"h","proposal_id":"a.b"}`,
		`{"limit":5}`, `{"limit":-1}`, `{"limit":100000}`, `{"limit":3,"before":7}`, `{"before":-1}`,
	} {
		f.Add([]byte(seed))
		f.Add([]byte(seed[:len(seed)/2]))
		f.Add([]byte(seed[len(seed)/2:]))
	}
	codes := map[string]bool{}
	for _, c := range Codes {
		codes[c] = c != CodeInternal
	}
	check := func(t *testing.T, verb string, out []byte, r answerProbe) *Error {
		if err := schema.Decode(out, r); err != nil {
			t.Fatalf("%s: reply does not decode: %v: %s", verb, err, out)
		}
		if r.result() == (r.err() != nil) {
			t.Fatalf("%s: reply has both or neither: %s", verb, out)
		}
		// Without JetStream (nil here), the verbs that read streams answer
		// internal.
		needsJS := verb == subjects.AdminProposalGet || verb == subjects.AdminActivityList
		if e := r.err(); e != nil && !codes[e.Code] && !(needsJS && e.Code == CodeInternal) {
			t.Fatalf("%s: unexpected code %s", verb, e.Code)
		}
		return r.err()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		hdr, err := Sign(op, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			s   *Server
			hdr nats.Header
		}{{signedOnly, hdr}, {dev, nil}, {signedOnly, nil}} {
			for _, r := range c.s.routes() {
				out, refused := r.serve(c.hdr, data)
				e := check(t, r.verb, out, probes[r.verb]())
				if (e == nil) != (refused == nil) || (e != nil && *e != *refused) {
					t.Fatalf("%s: the reply's error %+v is not the one returned, %+v", r.verb, e, refused)
				}
				if c.s == signedOnly && c.hdr == nil && len(data) <= MaxRequestBytes && (e == nil || e.Code != CodeUnauthenticated) {
					t.Fatalf("%s: unsigned request not refused: %s", r.verb, out)
				}
			}
		}
	})
}

// probes decode each verb's replies.
var probes = map[string]func() answerProbe{
	subjects.AdminReceipt:        func() answerProbe { return &probe[Receipts]{} },
	subjects.AdminReconcileList:  func() answerProbe { return &probe[List]{} },
	subjects.AdminReconcileSolve: func() answerProbe { return &probe[Resolved]{} },
	subjects.AdminApprovalsList:  func() answerProbe { return &probe[Approvals]{} },
	subjects.AdminProposalGet:    func() answerProbe { return &probe[Proposal]{} },
	subjects.AdminActivityList:   func() answerProbe { return &probe[ActivityList]{} },
	subjects.AdminStatus:         func() answerProbe { return &probe[Status]{} },
}

// answerProbe reads a decoded reply of any result type.
type answerProbe interface {
	result() bool
	err() *Error
}

type probe[T any] reply[T]

func (p *probe[T]) result() bool { return p.Result != nil }
func (p *probe[T]) err() *Error  { return p.Error }

// stageResolver is engine.Resolver for this internal test, which cannot
// import the engine (it imports this package): the real stage, its
// refusals as the API's errors.
type stageResolver struct{ s *reconciliation.Stage }

func (r stageResolver) Resolve(fp string, present bool, evidenceRef, operator string, checks ResolveChecks) (Resolution, error) {
	res, err := r.s.ResolveChecked(fp, present, evidenceRef, operator, checks.ReceiptID, checks.ObservedAtMs)
	for code, sentinels := range map[string][]error{
		CodeBadRequest:       {reconciliation.ErrInvalidFingerprint, reconciliation.ErrInvalidEvidence},
		CodeNotFound:         {reconciliation.ErrNotFound},
		CodeNotIndeterminate: {reconciliation.ErrNotIndeterminate, reconciliation.ErrSuperseded},
	} {
		for _, e := range sentinels {
			if errors.Is(err, e) {
				return Resolution{}, &Error{Code: code, Message: err.Error()}
			}
		}
	}
	return Resolution{Receipt: res.Receipt, OutcomeKind: res.OutcomeKind, Proposals: res.Proposals}, err
}
