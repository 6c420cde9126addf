package admin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

var t0 = time.UnixMilli(1_764_424_800_000)

// rawReply is any admin reply.
type rawReply struct {
	Result json.RawMessage `json:"result"`
	Error  *admin.Error    `json:"error"`
}

// ask sends a raw request and returns the reply's error code ("" for a
// result).
func ask(t *testing.T, env *testenv.Env, verb string, body []byte, hdr nats.Header) string {
	t.Helper()
	m := &nats.Msg{Subject: env.Subjects.Admin(verb), Data: body, Header: hdr}
	r, err := env.NC.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	var rep rawReply
	if err := json.Unmarshal(r.Data, &rep); err != nil {
		t.Fatalf("%s: reply %s: %v", verb, r.Data, err)
	}
	if (rep.Error == nil) == (rep.Result == nil) {
		t.Fatalf("%s: reply has both or neither: %s", verb, r.Data)
	}
	if rep.Error == nil {
		return ""
	}
	return rep.Error.Code
}

func sign(t *testing.T, kp nkeys.KeyPair, body []byte) nats.Header {
	t.Helper()
	h, err := admin.Sign(kp, body)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newNonce(t *testing.T) string {
	t.Helper()
	st, err := admin.NewStamp(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st.Nonce
}

// listBody is a reconcile.list request made at ms with nonce.
func listBody(ms int64, nonce string) []byte {
	return fmt.Appendf(nil, `{"requested_at_ms":%d,"nonce":%q}`, ms, nonce)
}

// TestOperatorRequestAuthentication: every refusal of SPEC §2.8 with its
// exact code, against a real processor, including a replay after a
// restart; and none of it in the log.
func TestOperatorRequestAuthentication(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	stranger, _ := nkeys.CreateUser()
	now := func() int64 { return clock.Now().UnixMilli() }
	list := subjects.AdminReconcileList
	var secrets []string // nonces, signatures and keys that must not be logged
	signed := func(kp nkeys.KeyPair, body []byte) nats.Header {
		h := sign(t, kp, body)
		secrets = append(secrets, h.Get(admin.HeaderSignature))
		return h
	}
	fresh := func(ms int64) []byte {
		n := newNonce(t)
		secrets = append(secrets, n)
		return listBody(ms, n)
	}
	replayed := fresh(now())
	replayedHdr := signed(env.Operator, replayed)

	type step struct {
		name string
		verb string
		body []byte
		hdr  nats.Header
		code string
	}
	b := fresh(now())
	tampered := bytes.Replace(b, []byte(`"requested_at_ms":`), []byte(`"requested_at_ms": `), 1)
	forged := signed(stranger, b)
	opPub, _ := env.Operator.PublicKey()
	forged.Set(admin.HeaderOperatorKey, opPub)
	steps := []step{
		{"signed", list, replayed, replayedHdr, ""},
		{"signed receipts", subjects.AdminReceipt, fmt.Appendf(nil, `{"requested_at_ms":%d,"nonce":%q,"fingerprint":"sha256:%s"}`, now(), newNonce(t), strings.Repeat("ab", 32)), nil, admin.CodeNotFound},
		{"unsigned", list, fresh(now()), nil, admin.CodeUnauthenticated},
		{"unsigned, no stamp", list, []byte(`{}`), nil, admin.CodeUnauthenticated},
		{"wrongly signed", list, b, forged, admin.CodeUnauthenticated},
		{"body changed after signing", list, tampered, signed(env.Operator, b), admin.CodeUnauthenticated},
		{"unknown key", list, b, signed(stranger, b), admin.CodeUnauthenticated},
		{"key of a host", list, b, signed(env.Host, b), admin.CodeUnauthenticated},
		{"key without signature", list, b, nats.Header{admin.HeaderOperatorKey: {opPub}}, admin.CodeUnauthenticated},
		{"replayed", list, replayed, replayedHdr, admin.CodeReplayed},
		{"replayed, signed again", list, replayed, signed(env.Operator, replayed), admin.CodeReplayed},
		{"expired", list, fresh(now() - 60_001), nil, admin.CodeStale},
		{"60s old", list, fresh(now() - 60_000), nil, ""},
		{"future", list, fresh(now() + 60_001), nil, admin.CodeStale},
		{"60s ahead", list, fresh(now() + 60_000), nil, ""},
		{"signed without stamp", list, []byte(`{}`), nil, admin.CodeBadRequest},
		{"signed with a short nonce", list, listBody(now(), "abc"), nil, admin.CodeBadRequest},
		{"signed, no time", list, listBody(0, newNonce(t)), nil, admin.CodeBadRequest},
		{"signed, unknown member", list, []byte(`{"requested_at_ms":1,"nonce":"AAAAAAAAAAAAAAAAAAAAAAAA","x":1}`), nil, admin.CodeBadRequest},
	}
	for i := range steps {
		// A nil header on a step that expects anything but unauthenticated
		// means "signed by the operator".
		if steps[i].hdr == nil && steps[i].code != admin.CodeUnauthenticated {
			steps[i].hdr = signed(env.Operator, steps[i].body)
		}
	}
	for _, s := range steps {
		if got := ask(t, env, s.verb, s.body, s.hdr); got != s.code {
			t.Errorf("%s: code %q, want %q", s.name, got, s.code)
		}
	}

	// A replay after a restart is refused: the nonce is in Pebble.
	env.Restart(t)
	if got := ask(t, env, list, replayed, replayedHdr); got != admin.CodeReplayed {
		t.Errorf("replay after restart: code %q", got)
	}
	// Once the window has passed, the same request is stale, not new.
	clock.Advance(2 * admin.MaxRequestSkew)
	if got := ask(t, env, list, replayed, replayedHdr); got != admin.CodeStale {
		t.Errorf("replay after the window: code %q", got)
	}
	// The client signs and stamps: its requests succeed, again and again.
	ops := env.Admin()
	for range 3 {
		if _, err := ops.List(context.Background()); err != nil {
			t.Fatalf("client: %v", err)
		}
	}
	if _, err := (&admin.Client{NC: env.NC, Subjects: env.Subjects, Key: stranger, Now: clock.Now}).List(context.Background()); !errors.Is(err, admin.ErrUnauthenticated) {
		t.Errorf("a stranger's client: %v", err)
	}
	if _, err := (&admin.Client{NC: env.NC, Subjects: env.Subjects, Key: env.Operator}).List(context.Background()); !errors.Is(err, admin.ErrStale) {
		t.Errorf("a client whose clock is a year off: %v", err) // t0 is in 2025
	}

	logs := env.Logs.Bytes()
	for _, want := range []string{`"code":"unauthenticated"`, `"code":"stale"`, `"code":"replayed"`, `"reason":"bad signature"`, `"reason":"not the key of a configured operator"`, `"reason":"no signature"`} {
		if !bytes.Contains(logs, []byte(want)) {
			t.Errorf("log lacks %s", want)
		}
	}
	hostPub, _ := env.Host.PublicKey()
	strangerPub, _ := stranger.PublicKey()
	for _, s := range append(secrets, opPub, hostPub, strangerPub) {
		if s != "" && bytes.Contains(logs, []byte(s)) {
			t.Errorf("the log holds a nonce, signature or key")
		}
	}
}

// TestResolutionNamesOperator: the receipt and the activity record of a
// resolution name the operator who signed it.
func TestResolutionNamesOperator(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock))
	fp := indeterminate(t, env, clock, "prop-op")
	res, err := env.Admin().Resolve(context.Background(), fp, true, "ticket:OPS-7")
	if err != nil {
		t.Fatal(err)
	}
	if res.Receipt.Reconciliation == nil || res.Receipt.Reconciliation.Operator != testenv.OperatorName {
		t.Fatalf("receipt = %+v", res.Receipt.Reconciliation)
	}
	o := env.Recorder.Wait(t, "prop-op", testenv.Terminal)
	if o.Receipt.Reconciliation == nil || o.Receipt.Reconciliation.Operator != testenv.OperatorName {
		t.Errorf("outcome receipt = %+v", o.Receipt.Reconciliation)
	}
	a := activity(t, env, fp, func(a *schema.Activity) bool { return a.Status == string(schema.StatusConfirmed) })
	if a.Reconciliation == nil || a.Reconciliation.ResolvedBy != testenv.OperatorName {
		t.Errorf("activity reconciliation = %+v", a.Reconciliation)
	}
	rs, err := env.Admin().Receipts(context.Background(), fp)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs.Receipts {
		named := r.Reconciliation != nil && r.Reconciliation.Operator != ""
		if named != (i == len(rs.Receipts)-1) {
			t.Errorf("receipt %d names an operator: %v", i, named)
		}
	}
}

// TestDevAcceptsUnsigned: with admission.allow_unsigned (processor run
// --dev) unsigned requests are answered, stamped or not; a stamp they carry
// is still checked, and a signed request is still checked in full. The
// resolution names nobody.
func TestDevAcceptsUnsigned(t *testing.T) {
	clock := stages.NewManualClock(t0)
	env := testenv.New(t, testenv.WithClock(clock), testenv.WithConfig(func(c *config.Config) { c.Admission.AllowUnsigned = true }))
	now := clock.Now().UnixMilli()
	list := subjects.AdminReconcileList
	stranger, _ := nkeys.CreateUser()
	b := listBody(now, newNonce(t))
	for _, s := range []struct {
		name string
		body []byte
		hdr  nats.Header
		code string
	}{
		{"unsigned, no stamp", []byte(`{}`), nil, ""},
		{"unsigned, empty body", nil, nil, ""},
		{"unsigned, stamped", b, nil, ""},
		{"unsigned, replayed", b, nil, admin.CodeReplayed},
		{"unsigned, expired", listBody(now-60_001, newNonce(t)), nil, admin.CodeStale},
		{"unsigned, half a stamp", []byte(`{"requested_at_ms":1}`), nil, admin.CodeBadRequest},
		{"signed by a stranger", listBody(now, newNonce(t)), sign(t, stranger, b), admin.CodeUnauthenticated},
		{"bad signature", b, nats.Header{admin.HeaderOperatorKey: {mustPub(t, env.Operator)}, admin.HeaderSignature: {base64.RawURLEncoding.EncodeToString(make([]byte, 64))}}, admin.CodeUnauthenticated},
	} {
		if got := ask(t, env, list, s.body, s.hdr); got != s.code {
			t.Errorf("%s: code %q, want %q", s.name, got, s.code)
		}
	}
	if _, err := env.Admin().List(context.Background()); err != nil {
		t.Errorf("signed in dev: %v", err)
	}
	fp := indeterminate(t, env, clock, "prop-dev")
	res, err := (&admin.Client{NC: env.NC, Subjects: env.Subjects, Now: clock.Now}).Resolve(context.Background(), fp, false, "ticket:DEV-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Receipt.Reconciliation.Operator != "" || bytes.Contains(schema.MustMarshal(res.Receipt), []byte(`"operator"`)) {
		t.Errorf("an unsigned resolution names an operator: %+v", res.Receipt.Reconciliation)
	}
	a := activity(t, env, fp, func(a *schema.Activity) bool { return a.Status == string(schema.StatusRejected) })
	if a.Reconciliation == nil || a.Reconciliation.Resolution != "operator" || a.Reconciliation.ResolvedBy != "" {
		t.Errorf("activity reconciliation = %+v", a.Reconciliation)
	}
}

func mustPub(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// indeterminate makes an action whose effect is unknown (the fake provider
// times out) and returns its fingerprint.
func indeterminate(t *testing.T, env *testenv.Env, clock stages.Clock, pid string) string {
	t.Helper()
	env.Fakes["demo"].OnDispatch(func(context.Context, schema.DispatchRequest) (schema.AdapterReply, error) {
		return schema.AdapterReply{}, adapters.ErrTimeout
	})
	m := testenv.Lumber(pid)
	m = testenv.Granted(t, m, "sku-1001", clock.Now())
	env.PublishSigned(t, m, env.Host)
	env.Recorder.Wait(t, pid, func(outs []schema.Outcome) bool {
		return outs[len(outs)-1].Kind == schema.KindReconciliationRequired
	})
	return testenv.FingerprintOf(t, m, "sku-1001")
}

// activity returns the fingerprint's activity snapshot once the pipeline
// is idle (a stage writes it after its outcome, before it acks), and fails
// unless ok holds for it.
func activity(t *testing.T, env *testenv.Env, fp string, ok func(*schema.Activity) bool) schema.Activity {
	t.Helper()
	env.Quiesce(t)
	kv, err := env.JS.KeyValue(context.Background(), env.Subjects.ActivityBucket())
	if err != nil {
		t.Fatal(err)
	}
	var a schema.Activity
	e, err := kv.Get(context.Background(), strings.TrimPrefix(fp, "sha256:"))
	if err != nil || schema.Decode(e.Value(), &a) != nil || !ok(&a) {
		t.Fatalf("activity of %s does not satisfy the condition: %+v (%v)", fp, a, err)
	}
	return a
}
