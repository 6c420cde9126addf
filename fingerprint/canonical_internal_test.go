package fingerprint

import (
	"errors"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// canonicalReference is Canonical as it was before it skipped the second
// walk: encode the object, then Canonicalize it as any value (validity and
// every number checked again). Canonical must agree with it on every input.
func canonicalReference(f Fields) ([]byte, error) {
	payload := f.Payload
	if len(payload) == 0 {
		payload = jsontext.Value("null")
	}
	if !payload.IsValid() {
		return nil, ErrNotCanonical
	}
	if !schema.ExactNumbers(payload) {
		return nil, ErrInexactNumber
	}
	o := object{Schema: schema.SchemaFingerprint, TenantRef: f.TenantRef, SecurityDomainRef: f.SecurityDomainRef,
		ActorRef: f.ActorRef, Provider: f.Provider, Capability: f.Capability, Operation: f.Operation,
		Environment: f.Environment, Referent: f.Referent, Payload: payload, ExternalSpend: f.ExternalSpend}
	raw, err := json.Marshal(o)
	if err != nil {
		return nil, ErrNotCanonical
	}
	return Canonicalize(raw)
}

// FuzzCanonicalAgrees: Canonical gives the reference's bytes, or an error
// where it errs, with the same sentinel (inexact numbers in the payload or
// the spend, invalid payloads, invalid UTF-8 in names).
func FuzzCanonicalAgrees(f *testing.F) {
	f.Add([]byte(`{"quantity":20,"b":[1.0,1e21,-0],"a":"\u20ac"}`), int64(100), "sku-1", true)
	f.Add([]byte(`{"a":9007199254740993}`), int64(1), "r", false)
	f.Add([]byte(`{"a":1,"a":2}`), int64(1), "r", true)
	f.Add([]byte(`null`), int64(9007199254740993), "r", true)
	f.Add([]byte(``), int64(-1<<62), "\xff", true)
	f.Fuzz(func(t *testing.T, payload []byte, amount int64, referent string, spend bool) {
		in := Fields{TenantRef: "t", SecurityDomainRef: "d", ActorRef: "a", Provider: "p", Capability: "c",
			Operation: "o", Environment: "e", Referent: referent, Payload: payload}
		if spend {
			in.ExternalSpend = &schema.Spend{Currency: "EUR", AmountMinor: amount}
		}
		got, err := Canonical(in)
		want, wantErr := canonicalReference(in)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("err %v, reference %v", err, wantErr)
		case err == nil && string(got) != string(want):
			t.Fatalf("%s, reference %s", got, want)
		case err != nil && errors.Is(err, ErrInexactNumber) != errors.Is(wantErr, ErrInexactNumber):
			t.Fatalf("err %v, reference %v", err, wantErr)
		}
	})
}
