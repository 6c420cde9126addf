package disclosure_test

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
)

const fp = "sha256:1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988"

func intent() *schema.Intent {
	return &schema.Intent{
		Provider: "duffel", Capability: "flights.book", Operation: "create_order", Environment: "test",
		Payload: jsontext.Value(`{"offer_id":"off_1"}`),
		ProtectedDisclosure: &schema.DisclosurePlan{
			FieldClasses:            []string{"legal_identity", "birth_date", "contact_details"},
			Recipient:               "Duffel",
			Purpose:                 "Create the exact approved order.",
			Source:                  "user_profile",
			RequireReauthentication: true,
		},
	}
}

func grant() *schema.Grant {
	return &schema.Grant{Schema: schema.SchemaGrant, IntentFingerprint: fp, AuthorizedBy: "actor:demo",
		AuthorizationMethod: "manual", AuthenticationAssurance: "biometric", IssuedAtMs: 1, ExpiresAtMs: 2}
}

func request(t testing.TB) schema.DisclosureRequest {
	t.Helper()
	req, err := disclosure.NewRequest(fp, intent(), grant())
	if err != nil {
		t.Fatal(err)
	}
	return req
}

var goodValues = map[string]string{
	"legal_identity":  `{"given_name":"Ada","family_name":"Lovelace","gender":"f"}`,
	"birth_date":      `"1990-01-31"`,
	"contact_details": `{"email":"ada@example.org","phone":"+44 20 0000"}`,
}

// answer is a valid reply to request(t) as a member map; tests mutate it.
func answer() map[string]any {
	values := map[string]any{}
	for c, v := range goodValues {
		values[c] = jsontext.Value(v)
	}
	return map[string]any{
		"schema":                         schema.SchemaDisclosure,
		"fingerprint":                    fp,
		"provider":                       "duffel",
		"operation":                      "create_order",
		"environment":                    "test",
		"recipient":                      "Duffel",
		"purpose":                        "Create the exact approved order.",
		"field_classes":                  []string{"birth_date", "contact_details", "legal_identity"},
		"source":                         "user_profile",
		"require_reauthentication":       true,
		"authorization_method":           "manual",
		"grant_authentication_assurance": "biometric",
		"authentication_assurance":       "biometric",
		"protected_values":               values,
	}
}

func encode(t testing.TB, m map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(m, json.Deterministic(true))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func with(mut func(m map[string]any)) map[string]any {
	m := answer()
	mut(m)
	return m
}

func values(m map[string]any) map[string]any { return m["protected_values"].(map[string]any) }

func codeOf(err error) string {
	if err == nil {
		return "ok"
	}
	if c, ok := disclosure.Code(err); ok {
		return string(c)
	}
	return "not a disclosure error: " + err.Error()
}

const (
	ok        = "ok"
	malformed = string(schema.CodeDisclosureMalformed)
	refused   = string(schema.CodeDisclosureRefused)
	mismatch  = string(schema.CodeDisclosureBindingMismatch)
	reauth    = string(schema.CodeDisclosureReauthRequired)
	fields    = string(schema.CodeDisclosureFieldMismatch)
)

func TestEvaluateValid(t *testing.T) {
	req := request(t)
	d, err := disclosure.Evaluate(&req, encode(t, answer()))
	if err != nil {
		t.Fatal(err)
	}
	want := schema.DisclosureRecord{Recipient: "Duffel", Purpose: "Create the exact approved order.",
		FieldClasses: []string{"birth_date", "contact_details", "legal_identity"}, Source: "user_profile", AuthenticationAssurance: "biometric"}
	if !slices.Equal(d.Record.FieldClasses, want.FieldClasses) || d.Record.Recipient != want.Recipient ||
		d.Record.Purpose != want.Purpose || d.Record.Source != want.Source || d.Record.AuthenticationAssurance != want.AuthenticationAssurance {
		t.Fatalf("record %+v", d.Record)
	}
	if got := slices.Sorted(maps.Keys(d.Values)); !slices.Equal(got, want.FieldClasses) {
		t.Fatalf("value classes %v", got)
	}
	for c, v := range goodValues {
		if string(d.Values[c]) != v {
			t.Fatalf("%s: %s, want %s (as sent)", c, d.Values[c], v)
		}
	}
	dd := d.ForDispatch()
	if dd.Recipient != "Duffel" || len(dd.Values) != 3 || !slices.Equal(dd.FieldClasses, want.FieldClasses) {
		t.Fatalf("ForDispatch %v", dd)
	}
	d.Wipe()
	if len(d.Values) != 0 || len(dd.Values) != 0 {
		t.Fatal("Wipe left values behind")
	}
	if d.Record.AuthenticationAssurance != "biometric" {
		t.Fatal("Wipe dropped the record")
	}
}

func TestEvaluateCodes(t *testing.T) {
	req := request(t)
	big := with(func(m map[string]any) { m["purpose"] = strings.Repeat("p", disclosure.MaxReplyBytes) })
	cases := []struct {
		name string
		body []byte
		want string
	}{
		// decode
		{"not json", []byte(`{"refused":`), malformed},
		{"array", []byte(`[]`), malformed},
		{"string", []byte(`"ok"`), malformed},
		{"empty", nil, malformed},
		{"trailing data", append(encode(t, answer()), " {}"...), malformed},
		{"oversized", encode(t, big), malformed},
		{"unknown member", encode(t, with(func(m map[string]any) { m["note"] = "x" })), malformed},
		{"member name case", encode(t, with(func(m map[string]any) { m["Fingerprint"] = m["fingerprint"]; delete(m, "fingerprint") })), malformed},
		{"duplicate member", []byte(strings.Replace(string(encode(t, answer())), `"environment":"test"`, `"environment":"test","environment":"test"`, 1)), malformed},
		{"duplicate inside a value", []byte(strings.Replace(string(encode(t, answer())), `"gender":"f"`, `"gender":"f","gender":"m"`, 1)), malformed},
		{"null binding", encode(t, with(func(m map[string]any) { m["authorization_method"] = nil })), malformed},
		{"null protected_values", encode(t, with(func(m map[string]any) { m["protected_values"] = nil })), malformed},
		{"null inside a value", encode(t, with(func(m map[string]any) {
			values(m)["legal_identity"] = jsontext.Value(`{"given_name":"Ada","family_name":"L","title":null}`)
		})), malformed},
		{"wrong type", encode(t, with(func(m map[string]any) { m["require_reauthentication"] = "true" })), malformed},
		{"field_classes not a list", encode(t, with(func(m map[string]any) { m["field_classes"] = "birth_date" })), malformed},
		{"protected_values not an object", encode(t, with(func(m map[string]any) { m["protected_values"] = []string{} })), malformed},
		{"empty string binding", encode(t, with(func(m map[string]any) { m["authorization_method"] = "" })), malformed},
		{"wrong schema", encode(t, with(func(m map[string]any) { m["schema"] = "actions.disclosure.v2" })), malformed},
		{"no schema", encode(t, with(func(m map[string]any) { delete(m, "schema") })), ok},
		{"invalid utf8", []byte(strings.Replace(string(encode(t, answer())), "Lovelace", "Love\xfflace", 1)), malformed},

		// refusal
		{"refused", []byte(`{"refused":true,"reason_code":"USER_DECLINED"}`), refused},
		{"refused with schema and bindings", encode(t, map[string]any{"schema": schema.SchemaDisclosure, "refused": true, "reason_code": "NO_PROFILE", "fingerprint": "sha256:other", "provider": "other"}), refused},
		{"refused without reason", []byte(`{"refused":true}`), malformed},
		{"refused with bad reason", []byte(`{"refused":true,"reason_code":"user declined"}`), malformed},
		{"refused with null reason", []byte(`{"refused":true,"reason_code":null}`), malformed},
		{"refused with values", encode(t, with(func(m map[string]any) { m["refused"] = true; m["reason_code"] = "X" })), malformed},
		{"refused with assurance only", []byte(`{"refused":true,"reason_code":"X","authentication_assurance":"none"}`), malformed},
		{"refused false", encode(t, with(func(m map[string]any) { m["refused"] = false })), ok},
		{"reason without refusal", encode(t, with(func(m map[string]any) { m["reason_code"] = "X" })), malformed},
		{"refused not a bool", []byte(`{"refused":"true","reason_code":"X"}`), malformed},

		// shape of an answer
		{"missing fingerprint", encode(t, with(func(m map[string]any) { delete(m, "fingerprint") })), malformed},
		{"missing provider", encode(t, with(func(m map[string]any) { delete(m, "provider") })), malformed},
		{"missing operation", encode(t, with(func(m map[string]any) { delete(m, "operation") })), malformed},
		{"missing environment", encode(t, with(func(m map[string]any) { delete(m, "environment") })), malformed},
		{"missing recipient", encode(t, with(func(m map[string]any) { delete(m, "recipient") })), malformed},
		{"missing purpose", encode(t, with(func(m map[string]any) { delete(m, "purpose") })), malformed},
		{"missing field_classes", encode(t, with(func(m map[string]any) { delete(m, "field_classes") })), malformed},
		{"missing source", encode(t, with(func(m map[string]any) { delete(m, "source") })), malformed},
		{"missing assurance", encode(t, with(func(m map[string]any) { delete(m, "authentication_assurance") })), malformed},
		{"missing values", encode(t, with(func(m map[string]any) { delete(m, "protected_values") })), malformed},
		{"unknown assurance", encode(t, with(func(m map[string]any) { m["authentication_assurance"] = "strong" })), malformed},
		{"assurance case", encode(t, with(func(m map[string]any) { m["authentication_assurance"] = "Biometric" })), malformed},
		{"duplicate class", encode(t, with(func(m map[string]any) {
			m["field_classes"] = []string{"birth_date", "birth_date", "contact_details", "legal_identity"}
		})), malformed},
		{"optional echoes absent", encode(t, with(func(m map[string]any) {
			delete(m, "require_reauthentication")
			delete(m, "authorization_method")
			delete(m, "grant_authentication_assurance")
		})), ok},

		// bindings
		{"fingerprint", encode(t, with(func(m map[string]any) { m["fingerprint"] = "sha256:" + strings.Repeat("0", 64) })), mismatch},
		{"provider", encode(t, with(func(m map[string]any) { m["provider"] = "amadeus" })), mismatch},
		{"operation", encode(t, with(func(m map[string]any) { m["operation"] = "cancel_order" })), mismatch},
		{"environment", encode(t, with(func(m map[string]any) { m["environment"] = "live" })), mismatch},
		{"recipient", encode(t, with(func(m map[string]any) { m["recipient"] = "Amadeus" })), mismatch},
		{"recipient case", encode(t, with(func(m map[string]any) { m["recipient"] = "duffel" })), mismatch},
		{"purpose", encode(t, with(func(m map[string]any) { m["purpose"] = "Marketing." })), mismatch},
		{"source", encode(t, with(func(m map[string]any) { m["source"] = "fictional_test_fixture" })), mismatch},
		{"classes subset", encode(t, with(func(m map[string]any) { m["field_classes"] = []string{"birth_date", "legal_identity"} })), mismatch},
		{"classes superset", encode(t, with(func(m map[string]any) {
			m["field_classes"] = []string{"birth_date", "contact_details", "legal_identity", "travel_documents"}
		})), mismatch},
		{"classes unknown", encode(t, with(func(m map[string]any) { m["field_classes"] = []string{"birth_date", "contact_details", "ssn"} })), mismatch},
		{"classes reordered", encode(t, with(func(m map[string]any) {
			m["field_classes"] = []string{"legal_identity", "birth_date", "contact_details"}
		})), ok},
		{"reauthentication", encode(t, with(func(m map[string]any) { m["require_reauthentication"] = false })), mismatch},
		{"method", encode(t, with(func(m map[string]any) { m["authorization_method"] = "policy" })), mismatch},
		{"grant assurance", encode(t, with(func(m map[string]any) { m["grant_authentication_assurance"] = "managed" })), mismatch},

		// reauthentication
		{"session assurance", encode(t, with(func(m map[string]any) { m["authentication_assurance"] = "session" })), reauth},
		{"no assurance", encode(t, with(func(m map[string]any) { m["authentication_assurance"] = "none" })), reauth},
		{"managed assurance", encode(t, with(func(m map[string]any) { m["authentication_assurance"] = "managed" })), ok},

		// classes
		{"missing class", encode(t, with(func(m map[string]any) { delete(values(m), "birth_date") })), fields},
		{"extra class", encode(t, with(func(m map[string]any) { values(m)["loyalty_accounts"] = jsontext.Value(`[]`) })), fields},
		{"unknown class", encode(t, with(func(m map[string]any) { values(m)["ssn"] = jsontext.Value(`"1"`) })), fields},
		{"class swapped", encode(t, with(func(m map[string]any) {
			delete(values(m), "birth_date")
			values(m)["loyalty_accounts"] = jsontext.Value(`[]`)
		})), fields},
		{"no values", encode(t, with(func(m map[string]any) { m["protected_values"] = map[string]any{} })), fields},

		// contracts
		{"bad date", encode(t, with(func(m map[string]any) { values(m)["birth_date"] = jsontext.Value(`"2023-02-29"`) })), malformed},
		{"bad gender", encode(t, with(func(m map[string]any) {
			values(m)["legal_identity"] = jsontext.Value(`{"given_name":"Ada","family_name":"L","gender":"x"}`)
		})), malformed},
		{"value of the wrong class", encode(t, with(func(m map[string]any) { values(m)["contact_details"] = jsontext.Value(`"1990-01-31"`) })), malformed},

		// order: the first failing step decides
		{"refusal before shape", []byte(`{"refused":true,"reason_code":"X","provider":"other"}`), refused},
		{"shape before bindings", encode(t, with(func(m map[string]any) { m["provider"] = "other"; delete(m, "source") })), malformed},
		{"bindings before reauthentication", encode(t, with(func(m map[string]any) {
			m["provider"] = "other"
			m["authentication_assurance"] = "none"
		})), mismatch},
		{"reauthentication before classes", encode(t, with(func(m map[string]any) {
			m["authentication_assurance"] = "session"
			delete(values(m), "birth_date")
		})), reauth},
		{"classes before contracts", encode(t, with(func(m map[string]any) {
			delete(values(m), "contact_details")
			values(m)["birth_date"] = jsontext.Value(`"1990-02-30"`)
		})), fields},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := disclosure.Evaluate(&req, c.body)
			if got := codeOf(err); got != c.want {
				t.Fatalf("got %s, want %s", got, c.want)
			}
			if err != nil {
				if err.Error() != c.want {
					t.Fatalf("error text %q is not the code", err.Error())
				}
				var de *disclosure.Error
				if !errors.As(err, &de) || d.Values != nil {
					t.Fatal("failure returned values or no *Error")
				}
				if info, ok := schema.LookupCode(schema.PhaseDisclosure, schema.Code(c.want)); !ok || info.Kind != schema.KindDenied {
					t.Fatalf("%s is not a DENIED disclosure code", c.want)
				}
			}
		})
	}
}

// TestEvaluateReauthenticationNotRequired: without the requirement any
// valid assurance passes, and the record keeps the actual one.
func TestEvaluateReauthenticationNotRequired(t *testing.T) {
	in := intent()
	in.ProtectedDisclosure.RequireReauthentication = false
	req, err := disclosure.NewRequest(fp, in, grant())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"none", "session", "biometric", "managed"} {
		m := with(func(m map[string]any) { m["authentication_assurance"] = a; m["require_reauthentication"] = false })
		d, err := disclosure.Evaluate(&req, encode(t, m))
		if err != nil || d.Record.AuthenticationAssurance != a {
			t.Fatalf("%s: %v, %+v", a, err, d.Record)
		}
	}
}

// TestSchemaReplyEncodes: schema.DisclosureReply, the type resolvers encode
// with, produces what Evaluate accepts.
func TestSchemaReplyEncodes(t *testing.T) {
	req := request(t)
	yes := true
	r := schema.DisclosureReply{
		Schema: schema.SchemaDisclosure, Fingerprint: fp, Provider: req.Provider, Operation: req.Operation,
		Environment: req.Environment, Recipient: req.Recipient, Purpose: req.Purpose, FieldClasses: req.FieldClasses,
		Source: req.Source, RequireReauthentication: &yes, AuthorizationMethod: "manual",
		GrantAuthenticationAssurance: "biometric", AuthenticationAssurance: "managed",
		ProtectedValues: map[string]jsontext.Value{},
	}
	for c, v := range goodValues {
		r.ProtectedValues[c] = jsontext.Value(v)
	}
	if _, err := disclosure.Evaluate(&req, schema.MustMarshal(r)); err != nil {
		t.Fatalf("answer: %v", err)
	}
	refusal := schema.DisclosureReply{Refused: true, ReasonCode: "USER_DECLINED"}
	if _, err := disclosure.Evaluate(&req, schema.MustMarshal(refusal)); codeOf(err) != refused {
		t.Fatalf("refusal: %v", err)
	}
}

func TestNewRequest(t *testing.T) {
	in := intent()
	in.ProtectedDisclosure.Recipient = "  Duffel  "
	req, err := disclosure.NewRequest(fp, in, grant())
	if err != nil {
		t.Fatal(err)
	}
	want := schema.DisclosureRequest{
		Schema: schema.SchemaDisclosure, Fingerprint: fp, Provider: "duffel", Operation: "create_order", Environment: "test",
		Recipient: "Duffel", Purpose: "Create the exact approved order.",
		FieldClasses: []string{"birth_date", "contact_details", "legal_identity"}, Source: "user_profile",
		RequireReauthentication: true, AuthorizationMethod: "manual", GrantAuthenticationAssurance: "biometric",
	}
	if string(schema.MustMarshal(req)) != string(schema.MustMarshal(want)) {
		t.Fatalf("request\n%s\nwant\n%s", schema.MustMarshal(req), schema.MustMarshal(want))
	}
	if in.ProtectedDisclosure.FieldClasses[0] != "legal_identity" {
		t.Fatal("NewRequest changed the intent")
	}

	env := &schema.Envelope{
		Proposal:      schema.Proposal{Intent: *intent()},
		Grounded:      &schema.Grounded{Fingerprint: fp},
		Authorization: &schema.AuthorizationRecord{Grant: *grant()},
	}
	if r, err := disclosure.RequestForEnvelope(env); err != nil || r.Fingerprint != fp || r.AuthorizationMethod != "manual" {
		t.Fatalf("envelope: %+v %v", r, err)
	}

	bad := []func(*schema.Intent, *schema.Grant) (string, *schema.Intent, *schema.Grant){
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			in.ProtectedDisclosure = nil
			return fp, in, g
		},
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) { return fp, in, nil },
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			return "sha256:abc", in, g
		},
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			in.ProtectedDisclosure.FieldClasses = []string{"ssn"}
			return fp, in, g
		},
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			in.ProtectedDisclosure.Source = "crm"
			return fp, in, g
		},
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			in.ProtectedDisclosure.Purpose = "a\nb"
			return fp, in, g
		},
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			in.Environment = "staging"
			return fp, in, g
		},
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			g.AuthenticationAssurance = "strong"
			return fp, in, g
		},
		func(in *schema.Intent, g *schema.Grant) (string, *schema.Intent, *schema.Grant) {
			g.AuthorizationMethod = "vibes"
			return fp, in, g
		},
	}
	for i, mut := range bad {
		f, in, g := mut(intent(), grant())
		if _, err := disclosure.NewRequest(f, in, g); !errors.Is(err, disclosure.ErrInvalidRequest) {
			t.Errorf("%d: %v", i, err)
		}
	}
	if _, err := disclosure.RequestForEnvelope(&schema.Envelope{}); !errors.Is(err, disclosure.ErrInvalidRequest) {
		t.Error("an ungrounded envelope built a request")
	}
}
