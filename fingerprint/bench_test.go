package fingerprint_test

import (
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/schema"
)

// BenchmarkCompute is the fingerprint grounding computes and dispatch
// computes again for each proposal: the bench's payload, a spend and a
// disclosure plan.
func BenchmarkCompute(b *testing.B) {
	f := base()
	f.Payload = jsontext.Value(`{"quantity":20,"request_id":"bench-000001","note":"cedar, 8ft, grade A"}`)
	f.ExternalSpend = &schema.Spend{Currency: "EUR", AmountMinor: 12345}
	f.ProtectedDisclosure = &schema.DisclosurePlan{FieldClasses: []string{"passport", "birth_date"}, Recipient: "air", Purpose: "ticket", Source: "user_profile"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fingerprint.Compute(f); err != nil {
			b.Fatal(err)
		}
	}
}
