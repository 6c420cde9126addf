package adapters_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// key returns a distinct 64-hex idempotency key per seed.
func key(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return hex.EncodeToString(sum[:])
}

func dispatchReq(provider, seed string) schema.DispatchRequest {
	k := key(seed)
	return schema.DispatchRequest{
		Schema:         schema.SchemaDispatch,
		Fingerprint:    "sha256:" + k,
		IdempotencyKey: k,
		Target: schema.Target{
			Provider:    provider,
			Capability:  "inventory.adjust",
			Operation:   "adjust_stock",
			Environment: "test",
			Referent:    "sku-1001",
		},
		Payload:    jsontext.Value(`{"quantity":20}`),
		NotAfterMs: time.Now().Add(time.Hour).UnixMilli(),
	}
}

func reconcileReq(seed, attempt string) schema.ReconcileRequest {
	k := key(seed)
	return schema.ReconcileRequest{
		Schema:            schema.SchemaReconcile,
		Fingerprint:       "sha256:" + k,
		IdempotencyKey:    k,
		AttemptID:         attempt,
		ProviderActionID:  "act:1",
		PreviousReceiptID: "rcpt:1",
	}
}

// class names the error class an adapter error belongs to.
func class(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, adapters.ErrInvalidRequest):
		if !errors.Is(err, adapters.ErrNotInvoked) {
			return "invalid-but-invoked?"
		}
		return "invalid"
	case errors.Is(err, adapters.ErrNotInvoked):
		return "not_invoked"
	case errors.Is(err, adapters.ErrTimeout):
		return "timeout"
	case errors.Is(err, adapters.ErrMalformedReply):
		return "malformed"
	}
	return "unknown"
}

func TestDecodeReply(t *testing.T) {
	refs := func(n int, ref string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = `"` + ref + `"`
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	ok511 := "a:" + strings.Repeat("x", 509)
	cases := []struct {
		name      string
		body      string
		reconcile bool
		want      string // "ok" or "malformed"
	}{
		{"minimal", `{"outcome":"confirmed"}`, false, "ok"},
		{"full", `{"outcome":"acknowledged","provider_action_id":"ord_1","evidence_refs":["prov:1","prov:2"],"error_code":"E.1:x-y_z"}`, false, "ok"},
		{"rejected", `{"outcome":"rejected","error_code":"CARD_DECLINED"}`, false, "ok"},
		{"failed before dispatch", `{"outcome":"failed_before_dispatch"}`, false, "ok"},
		{"indeterminate", `{"outcome":"indeterminate"}`, false, "ok"},
		{"reconcile confirmed", `{"outcome":"confirmed"}`, true, "ok"},
		{"reconcile rejected", `{"outcome":"rejected"}`, true, "ok"},
		{"reconcile failed before dispatch", `{"outcome":"failed_before_dispatch"}`, true, "ok"},
		{"reconcile indeterminate", `{"outcome":"indeterminate"}`, true, "ok"},
		{"reconcile acknowledged", `{"outcome":"acknowledged"}`, true, "malformed"},
		{"null optionals", `{"outcome":"confirmed","provider_action_id":null,"evidence_refs":null,"error_code":null}`, false, "ok"},
		{"empty evidence list", `{"outcome":"confirmed","evidence_refs":[]}`, false, "ok"},
		{"unknown outcome", `{"outcome":"done"}`, false, "malformed"},
		{"outcome case", `{"outcome":"Confirmed"}`, false, "malformed"},
		{"outcome null", `{"outcome":null}`, false, "malformed"},
		{"missing outcome", `{"provider_action_id":"a"}`, false, "malformed"},
		{"outcome not string", `{"outcome":1}`, false, "malformed"},
		{"unknown member", `{"outcome":"confirmed","detail":"x"}`, false, "malformed"},
		{"member name case", `{"Outcome":"confirmed"}`, false, "malformed"},
		{"duplicate member", `{"outcome":"rejected","outcome":"confirmed"}`, false, "malformed"},
		{"trailing data", `{"outcome":"confirmed"} {}`, false, "malformed"},
		{"array", `[{"outcome":"confirmed"}]`, false, "malformed"},
		{"empty body", ``, false, "malformed"},
		{"truncated", `{"outcome":"confirmed"`, false, "malformed"},
		{"invalid utf8", "{\"outcome\":\"confirmed\",\"provider_action_id\":\"\xff\"}", false, "malformed"},
		{"action id 512", `{"outcome":"confirmed","provider_action_id":"` + strings.Repeat("a", 512) + `"}`, false, "ok"},
		{"action id 513", `{"outcome":"confirmed","provider_action_id":"` + strings.Repeat("a", 513) + `"}`, false, "malformed"},
		{"action id multiline", `{"outcome":"confirmed","provider_action_id":"a\nb"}`, false, "malformed"},
		{"action id blank", `{"outcome":"confirmed","provider_action_id":"  "}`, false, "malformed"},
		{"20 evidence refs", `{"outcome":"confirmed","evidence_refs":` + refs(20, "p:1") + `}`, false, "ok"},
		{"21 evidence refs", `{"outcome":"confirmed","evidence_refs":` + refs(21, "p:1") + `}`, false, "malformed"},
		{"evidence ref 512", `{"outcome":"confirmed","evidence_refs":["` + ok511 + `x"]}`, false, "ok"},
		{"evidence ref 513", `{"outcome":"confirmed","evidence_refs":["` + ok511 + `xy"]}`, false, "malformed"},
		{"evidence ref without colon", `{"outcome":"confirmed","evidence_refs":["ref-1"]}`, false, "malformed"},
		{"evidence ref multiline", `{"outcome":"confirmed","evidence_refs":["a:1\r"]}`, false, "malformed"},
		{"evidence ref empty", `{"outcome":"confirmed","evidence_refs":[""]}`, false, "malformed"},
		{"evidence refs not list", `{"outcome":"confirmed","evidence_refs":"a:1"}`, false, "malformed"},
		{"error code 128", `{"outcome":"rejected","error_code":"` + strings.Repeat("E", 128) + `"}`, false, "ok"},
		{"error code 129", `{"outcome":"rejected","error_code":"` + strings.Repeat("E", 129) + `"}`, false, "malformed"},
		{"error code space", `{"outcome":"rejected","error_code":"CARD DECLINED"}`, false, "malformed"},
		{"error code slash", `{"outcome":"rejected","error_code":"a/b"}`, false, "malformed"},
		{"size limit", `{"outcome":"confirmed"}` + strings.Repeat(" ", adapters.MaxReplyBytes-23), false, "ok"},
		{"over size limit", `{"outcome":"confirmed"}` + strings.Repeat(" ", adapters.MaxReplyBytes-22), false, "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := adapters.DecodeReply([]byte(c.body), c.reconcile)
			if got := class(err); got != c.want {
				t.Fatalf("got %s (%v), want %s", got, err, c.want)
			}
			if err == nil && !r.Valid(c.reconcile) {
				t.Fatalf("accepted an invalid reply %+v", r)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	srv := testenv.StartServer(t, "")
	nc := testenv.Connect(t, srv)
	env := adapters.Env{NC: nc, Subjects: subjects.Default()}
	cases := []struct {
		kind     string
		settings adapters.Settings
		noConn   bool
		ok       bool
	}{
		{adapters.KindNATS, nil, false, true},
		{adapters.KindNATS, adapters.NATSSettings{}, true, false}, // no connection
		{adapters.KindHTTP, adapters.HTTPSettings{BaseURL: "http://127.0.0.1:1/api/"}, false, true},
		{adapters.KindHTTP, adapters.HTTPSettings{BaseURL: "ftp://x"}, false, false},
		{adapters.KindHTTP, adapters.HTTPSettings{BaseURL: "http://x/?q=1"}, false, false},
		{adapters.KindHTTP, nil, false, false}, // no defaults: base_url is required
		{adapters.KindFake, adapters.FakeScript{Dispatch: []string{"confirmed"}}, false, true},
		{adapters.KindFake, nil, false, true},
		{adapters.KindFake, adapters.NATSSettings{}, false, false}, // another kind's settings
		{"grpc", nil, false, false},
	}
	for i, c := range cases {
		e := env
		if c.noConn {
			e.NC = nil
		}
		a, err := adapters.Build(c.kind, c.settings, adapters.Provider{Name: "p", Timeout: time.Second}, e)
		if !c.ok {
			if err == nil {
				t.Errorf("%d: want an error", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if a.Kind() != c.kind {
			t.Errorf("%d: kind %q, want %q", i, a.Kind(), c.kind)
		}
	}
	if got := adapters.Kinds(); !slices.Equal(got, []string{"fake", "http", "nats"}) {
		t.Errorf("kinds %v", got)
	}
}

// TestInvalidRequests: every adapter refuses the same bad requests, without
// sending them (ErrInvalidRequest, also ErrNotInvoked).
func TestInvalidRequests(t *testing.T) {
	srv := testenv.StartServer(t, "")
	nc := testenv.Connect(t, srv)
	natsA, err := adapters.NewNATS("inventory", nc, subjects.Default(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	httpA, err := adapters.NewHTTP("inventory", "http://127.0.0.1:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fake := adapters.NewFake("inventory", adapters.FakeScript{})
	badD := []func(*schema.DispatchRequest){
		func(r *schema.DispatchRequest) { r.Schema = "actions.dispatch.v2" },
		func(r *schema.DispatchRequest) { r.Provider = "other" },
		func(r *schema.DispatchRequest) { r.IdempotencyKey = strings.ToUpper(r.IdempotencyKey) },
		func(r *schema.DispatchRequest) { r.IdempotencyKey = r.IdempotencyKey[:63] },
		func(r *schema.DispatchRequest) { r.Fingerprint = "sha256:" + key("other") },
		func(r *schema.DispatchRequest) { r.Payload = jsontext.Value(`{"a":`) },
		func(r *schema.DispatchRequest) { r.NotAfterMs = 0 }, // SPEC §4: every dispatch carries its lease's end
		func(r *schema.DispatchRequest) { r.NotAfterMs = -1 },
	}
	badR := []func(*schema.ReconcileRequest){
		func(r *schema.ReconcileRequest) { r.Schema = schema.SchemaDispatch },
		func(r *schema.ReconcileRequest) { r.IdempotencyKey = "" },
		func(r *schema.ReconcileRequest) { r.Fingerprint = r.IdempotencyKey },
		func(r *schema.ReconcileRequest) { r.AttemptID = "" },
	}
	for _, a := range []adapters.Adapter{natsA, httpA, fake} {
		for i, mut := range badD {
			req := dispatchReq("inventory", "bad")
			mut(&req)
			if _, err := a.Dispatch(t.Context(), req); class(err) != "invalid" {
				t.Errorf("%s dispatch %d: %s (%v)", a.Kind(), i, class(err), err)
			}
		}
		for i, mut := range badR {
			req := reconcileReq("bad", "att-1")
			mut(&req)
			if _, err := a.Reconcile(t.Context(), req); class(err) != "invalid" {
				t.Errorf("%s reconcile %d: %s (%v)", a.Kind(), i, class(err), err)
			}
		}
	}
	if fake.Dispatches() != 0 || fake.Reconciles() != 0 {
		t.Errorf("the fake saw %d dispatches and %d reconciles of invalid requests", fake.Dispatches(), fake.Reconciles())
	}
}
