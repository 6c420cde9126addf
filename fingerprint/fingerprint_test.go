package fingerprint_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func base() fingerprint.Fields {
	return fingerprint.Fields{
		TenantRef: "tenant:demo", SecurityDomainRef: "security-domain:demo", ActorRef: "actor:demo",
		Provider: "inventory", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "test",
		Referent: "sku-1001", Payload: jsontext.Value(`{"quantity":20}`),
	}
}

func mustCompute(t *testing.T, f fingerprint.Fields) fingerprint.Result {
	t.Helper()
	r, err := fingerprint.Compute(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCanonicalShape(t *testing.T) {
	r := mustCompute(t, base())
	const want = `{"actor_ref":"actor:demo","capability":"inventory.adjust","environment":"test","external_spend":null,"operation":"adjust_stock","payload":{"quantity":20},"protected_disclosure":null,"provider":"inventory","referent":"sku-1001","schema":"actions.fingerprint.v2","security_domain_ref":"security-domain:demo","tenant_ref":"tenant:demo"}`
	if string(r.Canonical) != want {
		t.Errorf("canonical\n got %s\nwant %s", r.Canonical, want)
	}
	if !fingerprint.Valid(r.Fingerprint) || fingerprint.Key(r.Fingerprint) != r.IdempotencyKey || len(r.IdempotencyKey) != 64 {
		t.Errorf("result = %+v", r)
	}
}

// TestEveryFieldBinds: changing any fingerprinted field changes the
// fingerprint; changing only formatting does not.
func TestEveryFieldBinds(t *testing.T) {
	ref := mustCompute(t, base()).Fingerprint
	spend := &schema.Spend{Currency: "USD", AmountMinor: 100}
	plan := &schema.DisclosurePlan{FieldClasses: []string{"birth_date"}, Recipient: "r", Purpose: "p", Source: "user_profile"}
	changes := map[string]func(*fingerprint.Fields){
		"tenant":          func(f *fingerprint.Fields) { f.TenantRef = "tenant:other" },
		"tenant nfd":      func(f *fingerprint.Fields) { f.TenantRef = "tenant:demo\u0301" },
		"security_domain": func(f *fingerprint.Fields) { f.SecurityDomainRef = "security-domain:other" },
		"actor":           func(f *fingerprint.Fields) { f.ActorRef = "actor:other" },
		"provider":        func(f *fingerprint.Fields) { f.Provider = "demo" },
		"capability":      func(f *fingerprint.Fields) { f.Capability = "inventory.set" },
		"operation":       func(f *fingerprint.Fields) { f.Operation = "set_stock" },
		"environment":     func(f *fingerprint.Fields) { f.Environment = "live" },
		"referent":        func(f *fingerprint.Fields) { f.Referent = "sku-1002" },
		"payload":         func(f *fingerprint.Fields) { f.Payload = jsontext.Value(`{"quantity":21}`) },
		"payload null":    func(f *fingerprint.Fields) { f.Payload = nil },
		"spend":           func(f *fingerprint.Fields) { f.ExternalSpend = spend },
		"spend currency":  func(f *fingerprint.Fields) { f.ExternalSpend = &schema.Spend{Currency: "EUR", AmountMinor: 100} },
		"disclosure":      func(f *fingerprint.Fields) { f.ProtectedDisclosure = plan },
	}
	seen := map[string]string{ref: "base"}
	for name, change := range changes {
		f := base()
		change(&f)
		fp := mustCompute(t, f).Fingerprint
		if other, ok := seen[fp]; ok {
			t.Errorf("%s: same fingerprint as %s", name, other)
		}
		seen[fp] = name
	}
	same := map[string]func(*fingerprint.Fields){
		"payload key order":  func(f *fingerprint.Fields) { f.Payload = jsontext.Value(` { "quantity" : 20.0 } `) },
		"payload exponent":   func(f *fingerprint.Fields) { f.Payload = jsontext.Value(`{"quantity":2e1}`) },
		"payload escapes":    func(f *fingerprint.Fields) { f.Payload = jsontext.Value(`{"quan\u0074ity":20}`) },
		"empty payload null": func(f *fingerprint.Fields) { f.Payload = nil },
	}
	for name, change := range same {
		f := base()
		change(&f)
		want := ref
		if name == "empty payload null" {
			g := base()
			g.Payload = jsontext.Value("null")
			want = mustCompute(t, g).Fingerprint
		}
		if got := mustCompute(t, f).Fingerprint; got != want {
			t.Errorf("%s: fingerprint changed", name)
		}
	}
}

func TestDisclosurePlanForm(t *testing.T) {
	f := base()
	f.ProtectedDisclosure = &schema.DisclosurePlan{FieldClasses: []string{"travel_documents", "birth_date"}, Recipient: "Air", Purpose: "Ticket", Source: "user_profile"}
	r := mustCompute(t, f)
	if !strings.Contains(string(r.Canonical), `"protected_disclosure":{"field_classes":["birth_date","travel_documents"],"purpose":"Ticket","recipient":"Air","require_reauthentication":false,"source":"user_profile"}`) {
		t.Errorf("plan not in canonical form: %s", r.Canonical)
	}
	if f.ProtectedDisclosure.FieldClasses[0] != "travel_documents" {
		t.Error("Compute sorted the caller's slice")
	}
	g := base()
	g.ProtectedDisclosure = &schema.DisclosurePlan{FieldClasses: []string{"birth_date", "travel_documents"}, Recipient: "Air", Purpose: "Ticket", Source: "user_profile"}
	if mustCompute(t, g).Fingerprint != r.Fingerprint {
		t.Error("class order changed the fingerprint")
	}
}

func TestCheckNumbers(t *testing.T) {
	cases := []struct {
		in    string
		exact bool
	}{
		{`0`, true}, {`-0`, true}, {`-0.0e5`, true}, {`1.0`, true}, {`1e21`, true}, {`1E+21`, true}, {`0.1`, true},
		{`1e-7`, true}, {`100e-2`, true}, {`0.00000100`, true}, {`9007199254740991`, true}, {`9007199254740992`, true},
		{`-9007199254740992`, true}, {`18014398509481984`, true}, {`5e-324`, true}, {`1.7976931348623157e308`, true},
		{`123456789012345680000`, true}, {`4.50`, true},
		{`9007199254740993`, false}, {`-9007199254740993`, false}, {`12345678901234567890`, false},
		{`1.0000000000000001`, false}, {`0.1000000000000000055511151231257827`, false}, {`1e400`, false},
		{`-1e400`, false}, {`1e-400`, false}, {`2.5e-324`, false}, {`1e99999999999999999999`, false},
		{`{"a":[1,2,{"b":9007199254740993}]}`, false}, {`{"a":[1,2,{"b":9007199254740992}]}`, true},
		{`["9007199254740993"]`, true}, // a string, not a number
	}
	for _, c := range cases {
		err := fingerprint.CheckNumbers(jsontext.Value(c.in))
		if (err == nil) != c.exact {
			t.Errorf("CheckNumbers(%s) = %v, want exact=%v", c.in, err, c.exact)
		}
		if err != nil && !errors.Is(err, fingerprint.ErrInexactNumber) {
			t.Errorf("CheckNumbers(%s) = %v, want ErrInexactNumber", c.in, err)
		}
	}
	for _, bad := range []string{`{`, `[1,]`, `{"a":1,"a":2}`, `01`, ``, `1 2`} {
		if err := fingerprint.CheckNumbers(jsontext.Value(bad)); !errors.Is(err, fingerprint.ErrNotCanonical) {
			t.Errorf("CheckNumbers(%q) = %v, want ErrNotCanonical", bad, err)
		}
	}
}

func TestPayloadRefused(t *testing.T) {
	f := base()
	f.Payload = jsontext.Value(`{"amount":9007199254740993}`)
	if _, err := fingerprint.Compute(f); !errors.Is(err, fingerprint.ErrInexactNumber) {
		t.Errorf("err = %v", err)
	}
	f.Payload = jsontext.Value(`{"a":1,"a":1}`)
	if _, err := fingerprint.Compute(f); !errors.Is(err, fingerprint.ErrNotCanonical) {
		t.Errorf("duplicate names: err = %v", err)
	}
}

func TestValid(t *testing.T) {
	good := "sha256:" + strings.Repeat("0a", 32)
	for s, want := range map[string]bool{
		good: true, strings.ToUpper(good): false, good[:70]: false, good + "0": false,
		"sha1:" + strings.Repeat("0a", 32): false, strings.Repeat("0a", 32): false,
	} {
		if fingerprint.Valid(s) != want {
			t.Errorf("Valid(%q) != %v", s, want)
		}
	}
}

// FuzzCanonicalize: never panics; a canonical form is its own canonical
// form; accepted input has only exact numbers.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{"b":[1.0,1e21,-0],"a":"\u20ac"}`, `9007199254740993`, `[0.1,1e-7]`, `{"\ud83d\ude00":1,"\ufb33":2}`, `"x"`, `{"a":{"b":[{}]}}`} {
		f.Add([]byte(s))
		f.Add([]byte(s[:len(s)/2]))
		f.Add([]byte(s[len(s)/2:]))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := fingerprint.Canonicalize(in)
		if err != nil {
			if !errors.Is(err, fingerprint.ErrNotCanonical) {
				t.Fatalf("error %v does not wrap ErrNotCanonical", err)
			}
			return
		}
		c2, err := fingerprint.Canonicalize(c)
		if err != nil || string(c2) != string(c) {
			t.Fatalf("canonical form not stable: %q -> %q (%v)", c, c2, err)
		}
		if err := fingerprint.CheckNumbers(c); err != nil {
			t.Fatalf("canonical form has inexact numbers: %q", c)
		}
	})
}

// TestOfNormalizesACopy: Of hashes normalized names without changing the
// caller's proposal.
func TestOfNormalizesACopy(t *testing.T) {
	plan := &schema.DisclosurePlan{FieldClasses: []string{"travel_documents", "birth_date"}, Recipient: " Air ", Purpose: "Ticket", Source: "user_profile"}
	p := &schema.Proposal{}
	p.Context.Tenant.TenantRef = "tenant:demo"
	p.Context.Tenant.SecurityDomainRef = "security-domain:demo"
	p.Context.Actor.ActorRef = "actor:demo"
	p.Intent = schema.Intent{Provider: " Demo ", Capability: "Travel.Book", Operation: "book", Environment: "TEST", Payload: jsontext.Value(`{}`), ProtectedDisclosure: plan}
	r, err := fingerprint.Of(p, "offer:1")
	if err != nil {
		t.Fatal(err)
	}
	if p.Intent.Provider != " Demo " || plan.Recipient != " Air " || plan.FieldClasses[0] != "travel_documents" {
		t.Errorf("Of changed the proposal: %+v %+v", p.Intent, plan)
	}
	if !strings.Contains(string(r.Canonical), `"provider":"demo"`) || !strings.Contains(string(r.Canonical), `"tenant_ref":"tenant:demo"`) || !strings.Contains(string(r.Canonical), `"recipient":"Air"`) ||
		!strings.Contains(string(r.Canonical), `"environment":"test"`) || !strings.Contains(string(r.Canonical), `["birth_date","travel_documents"]`) {
		t.Errorf("not normalized: %s", r.Canonical)
	}
}
