package disclosure_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
)

func evaluateSeeds(t testing.TB) [][]byte {
	return [][]byte{
		encode(t, answer()),
		encode(t, with(func(m map[string]any) { delete(m, "schema"); m["authentication_assurance"] = "managed" })),
		encode(t, with(func(m map[string]any) { m["provider"] = "other" })),
		encode(t, with(func(m map[string]any) { delete(values(m), "birth_date") })),
		encode(t, with(func(m map[string]any) {
			values(m)["legal_identity"] = jsontext.Value(`{"given_name":"Ada","family_name":"L","middle_names":["A","B"],"title":"Dr","gender":"m"}`)
			values(m)["contact_details"] = jsontext.Value(`{"email":"a@b","phone":"1","address":{"line1":"1","line2":"2","city":"C","region":"R","postal_code":"P","country_code":"GB"}}`)
		})),
		[]byte(`{"refused":true,"reason_code":"USER_DECLINED"}`),
		[]byte(`{"refused":true}`),
		[]byte(`{"protected_values":{"birth_date":null}}`),
		[]byte(`{"a":1,"a":2}`),
		[]byte(`[]`),
		[]byte(``),
	}
}

// FuzzEvaluate: no reply panics or hangs; every failure is one closed
// disclosure code; a success has exactly the requested classes, each within
// its contract.
func FuzzEvaluate(f *testing.F) {
	for _, s := range evaluateSeeds(f) {
		f.Add(s)
		f.Add(s[:len(s)/2])
		f.Add(s[len(s)/2:])
	}
	req := request(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := disclosure.Evaluate(&req, data)
		if err != nil {
			code, ok := disclosure.Code(err)
			if !ok || err.Error() != string(code) {
				t.Fatalf("not a bare code: %v", err)
			}
			if info, ok := schema.LookupCode(schema.PhaseDisclosure, code); !ok || info.Kind != schema.KindDenied || code == schema.CodeDisclosureUnavailable {
				t.Fatalf("code %s cannot come from a reply", code)
			}
			return
		}
		if got := slices.Sorted(maps.Keys(d.Values)); !slices.Equal(got, req.FieldClasses) {
			t.Fatalf("classes %v", got)
		}
		for c, v := range d.Values {
			if !disclosure.ValidValue(c, v) {
				t.Fatalf("%s accepted outside its contract", c)
			}
		}
		if schema.AssuranceRank(d.Record.AuthenticationAssurance) < schema.AssuranceRank(schema.AssuranceBiometric) {
			t.Fatal("reauthentication required but weak assurance accepted")
		}
	})
}

// FuzzValidValue: no value panics; an accepted value stays accepted after
// canonicalization (the checks see meaning, not formatting).
func FuzzValidValue(f *testing.F) {
	for c, v := range goodValues {
		f.Add(c, []byte(v))
		f.Add(c, []byte(v[:len(v)/2]))
		f.Add(c, []byte(v[len(v)/2:]))
	}
	for _, s := range []struct{ c, v string }{
		{"accessibility_needs", `[{"kind":"wheelchair","details":"aisle"}]`},
		{"loyalty_accounts", `[{"program":"Miles","member_number":"1"}]`},
		{"travel_documents", `[{"document_type":"passport","issuing_country":"GB","number":"1","expiry_date":"2030-01-01","nationality":"GB"}]`},
	} {
		f.Add(s.c, []byte(s.v))
		f.Add(s.c, []byte(s.v[:len(s.v)/2]))
		f.Add(s.c, []byte(s.v[len(s.v)/2:]))
	}
	f.Fuzz(func(t *testing.T, class string, raw []byte) {
		if !disclosure.ValidValue(class, jsontext.Value(raw)) {
			return
		}
		v := jsontext.Value(slices.Clone(raw))
		if err := v.Canonicalize(); err != nil {
			t.Fatalf("accepted a value that does not canonicalize: %v", err)
		}
		if !disclosure.ValidValue(class, v) {
			t.Fatal("canonical form rejected")
		}
	})
}
