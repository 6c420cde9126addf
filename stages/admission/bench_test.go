package admission

import (
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/schema/trust"
)

// BenchmarkDecide is admission's pure cost per proposal: strict decode,
// validation, signature verification.
func BenchmarkDecide(b *testing.B) {
	host, _ := nkeys.CreateUser()
	key, _ := host.PublicKey()
	pol := Policy{MaxPayloadBytes: 65536, Providers: []string{"demo"},
		Trust: trust.Policy{
			Hosts:   []trust.Host{{Name: "h", PublicKey: key, Tenants: []string{"tenant:demo"}}},
			Tenants: []trust.Tenant{{Ref: "tenant:demo", SecurityDomains: []string{"security-domain:demo"}}}}}
	body := []byte(lumber)
	hdr, _ := trust.Sign(host, body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if v := Decide(pol, "h", body, hdr); v.Incident != nil {
			b.Fatal(v.Incident.Code)
		}
	}
}
