package disclosure_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/disclosure"
)

const planted = "PLANTED-VALUE-93be51"

// plantedAnswer carries the planted string in every value, then mut makes
// one failure happen.
func plantedAnswer(mut func(m map[string]any)) map[string]any {
	m := answer()
	values(m)["legal_identity"] = jsontext.Value(`{"given_name":"` + planted + `","family_name":"` + planted + `"}`)
	values(m)["contact_details"] = jsontext.Value(`{"email":"` + planted + `@x","phone":"` + planted + `"}`)
	if mut != nil {
		mut(m)
	}
	return m
}

func noPlanted(t *testing.T, what, text string) {
	t.Helper()
	if strings.Contains(text, planted) {
		t.Errorf("%s carries a planted value: %s", what, text)
	}
}

// TestPrivacy makes every failure happen with planted values in the reply
// (and in member names) and checks no error text carries them; and that
// formatting or logging a successful disclosure never prints values.
func TestPrivacy(t *testing.T) {
	req := request(t)
	bodies := map[string][]byte{
		"bad contract": encode(t, plantedAnswer(func(m map[string]any) {
			values(m)["birth_date"] = jsontext.Value(`"` + planted + `"`)
		})),
		"unknown member name": encode(t, plantedAnswer(func(m map[string]any) { m[planted] = planted })),
		"unknown value member": encode(t, plantedAnswer(func(m map[string]any) {
			values(m)["legal_identity"] = jsontext.Value(`{"given_name":"A","family_name":"B","` + planted + `":"` + planted + `"}`)
		})),
		"duplicate":           []byte(strings.Replace(string(encode(t, plantedAnswer(nil))), `"phone":`, `"phone":"`+planted+`","phone":`, 1)),
		"null":                encode(t, plantedAnswer(func(m map[string]any) { m["authorization_method"] = nil })),
		"mismatch":            encode(t, plantedAnswer(func(m map[string]any) { m["recipient"] = planted })),
		"reauth":              encode(t, plantedAnswer(func(m map[string]any) { m["authentication_assurance"] = "none" })),
		"fields":              encode(t, plantedAnswer(func(m map[string]any) { values(m)[planted] = jsontext.Value(`"` + planted + `"`) })),
		"refused":             []byte(`{"refused":true,"reason_code":"` + planted + `"}`),
		"refused, bad reason": []byte(`{"refused":true,"reason_code":"` + planted + ` !"}`),
		"syntax":              []byte(`{"` + planted + `":"` + planted),
	}
	seen := map[schema.Code]bool{}
	for what, body := range bodies {
		d, err := disclosure.Evaluate(&req, body)
		if err == nil {
			t.Fatalf("%s: no failure", what)
		}
		code, _ := disclosure.Code(err)
		seen[code] = true
		for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err), fmt.Sprint(d)} {
			noPlanted(t, what, text)
		}
	}
	for _, code := range []schema.Code{schema.CodeDisclosureMalformed, schema.CodeDisclosureBindingMismatch, schema.CodeDisclosureReauthRequired,
		schema.CodeDisclosureFieldMismatch, schema.CodeDisclosureRefused} {
		if !seen[code] {
			t.Errorf("failure %s not exercised", code)
		}
	}

	// Transport failures.
	f := newResolverFixture(t)
	_, err := disclosure.Resolve(t.Context(), f.nc, f.subject, req, 200*time.Millisecond)
	noPlanted(t, "no responders", err.Error())

	// Success: the values are there, and nothing prints them.
	d, err := disclosure.Evaluate(&req, encode(t, plantedAnswer(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(d.Values["legal_identity"]), planted) {
		t.Fatal("the planted value did not arrive")
	}
	dd := d.ForDispatch()
	dispatch := schema.DispatchRequest{Schema: schema.SchemaDispatch, ProtectedDisclosure: dd}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		for name, v := range map[string]any{"Disclosure": d, "*Disclosure": &d, "Values": d.Values, "DispatchDisclosure": dd, "DispatchRequest": dispatch,
			"DisclosureReply": schema.DisclosureReply{ProtectedValues: d.Values}} {
			noPlanted(t, fmt.Sprintf("%s formatted with %s", name, verb), fmt.Sprintf(verb, v))
		}
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	logger.Info("disclosed", "disclosure", d, "values", d.Values, "dispatch", dd)
	logger.Info("disclosed", "disclosure", &d)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("disclosed", "disclosure", d, "values", d.Values, "dispatch", dd)
	noPlanted(t, "slog output", logs.String())
	if !strings.Contains(logs.String(), "legal_identity") {
		t.Errorf("logs do not even name the classes: %s", logs.String())
	}
}
