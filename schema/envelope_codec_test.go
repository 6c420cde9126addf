package schema_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// codecEnvelopes are envelopes at every level a stage hands on, from a
// real admitted proposal: each named for what it exercises.
func codecEnvelopes(t testing.TB) map[string]*schema.Envelope {
	t.Helper()
	admitted := func(payload string) schema.Envelope {
		p, err := schema.CheckProposal(proposalWithPayload(payload), 0)
		if err != nil {
			t.Fatal(err)
		}
		return schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: "h1", AdmittedAtMs: 1_700_000_000_123}
	}
	fp := "sha256:" + strings.Repeat("ab", 32)
	grounded := func(e schema.Envelope) schema.Envelope {
		e.Proposal.Grounding.Candidates, e.Proposal.Grounding.CandidateSource = nil, ""
		e.Grounded = &schema.Grounded{Referent: "sku-1001", Fingerprint: fp, IdempotencyKey: strings.Repeat("ab", 32), ObservationRef: "catalog:12"}
		return e
	}
	grant := schema.Grant{Schema: schema.SchemaGrant, ProposalID: "p-1", IntentFingerprint: fp, AuthorizedBy: "actor:demo",
		AuthorizationMethod: schema.MethodManual, AuthenticationAssurance: schema.AssuranceBiometric,
		IssuedAtMs: 1_700_000_000_000, ExpiresAtMs: 1_700_003_600_000}
	authorized := func(e schema.Envelope, g schema.Grant) schema.Envelope {
		e = grounded(e)
		e.Authorization = &schema.AuthorizationRecord{Grant: g, DecidedAtMs: 1_700_000_000_456, Evaluations: []schema.PolicyEvaluation{
			{Layer: "grant", Outcome: schema.EvalPass}, {Layer: "managed_policy:spend", Outcome: schema.EvalDeny, ReasonCode: schema.CodeProcessingFailed}}}
		return e
	}
	out := map[string]*schema.Envelope{}
	add := func(name string, e schema.Envelope) { out[name] = &e }

	add("admitted inline candidates", admitted(`{"quantity":20}`))
	viaSource := admitted(`{"quantity":20}`)
	viaSource.Proposal.Grounding.Candidates, viaSource.Proposal.Grounding.CandidateSource = nil, "catalog_main"
	add("admitted candidate source", viaSource)
	empty := admitted(`{"quantity":20}`)
	empty.Proposal.Grounding.Candidates = []schema.Candidate{}
	add("admitted empty candidates", empty)
	add("admitted null payload", admitted(`null`))
	add("admitted large payload", admitted(`{"note":"`+strings.Repeat("x", 200_000)+`","n":[1,2.5,-3e2]}`))
	add("grounded", grounded(admitted(`{"quantity":20}`)))
	add("authorized", authorized(admitted(`{"quantity":20}`), grant))

	full := admitted(`{"quantity":20,"nested":{"a":[true,false,null,"\u00e9"]}}`)
	full.Proposal.Requester = &schema.Requester{AgentID: "agent-1", ModelProvider: "anthropic", ModelID: "m", SessionID: "s", RunID: "r"}
	full.Proposal.Intent.ExternalSpend = &schema.Spend{Currency: "EUR", AmountMinor: 12_345}
	full.Proposal.Intent.ProtectedDisclosure = &schema.DisclosurePlan{FieldClasses: []string{schema.ClassBirthDate, schema.ClassLegalIdentity},
		Recipient: "Airline", Purpose: "ticketing", Source: schema.SourceUserProfile, RequireReauthentication: true}
	full.Proposal.Intent.Display.Summary = "Adjust stock — naïve ✓"
	spendGrant := grant
	spendGrant.MaxExternalSpend = &schema.Spend{Currency: "EUR", AmountMinor: schema.MaxSpendMinor}
	full.Proposal.Grant = &spendGrant
	add("authorized with requester, spend and disclosure plan", authorized(full, spendGrant))

	bound := grounded(admitted(`{"quantity":20}`))
	bound.Authorization = &schema.AuthorizationRecord{Bound: true, DecidedAtMs: 7}
	add("bound", bound)
	noRequester := authorized(admitted(`{}`), grant)
	noRequester.Proposal.Requester = nil
	noRequester.Authorization.Evaluations = nil
	add("authorized without requester or evaluations", noRequester)
	return out
}

// TestEnvelopeBinaryRoundTrip: every envelope comes back from its binary
// form deep-equal (nil and empty slices, absent and present optionals
// alike), and the form begins with its version, never '{'.
func TestEnvelopeBinaryRoundTrip(t *testing.T) {
	for name, env := range codecEnvelopes(t) {
		t.Run(name, func(t *testing.T) {
			data := schema.EncodeEnvelope(env)
			if data[0] != schema.EnvelopeBinaryV1 || !schema.IsBinaryEnvelope(data) {
				t.Fatalf("first byte %#x", data[0])
			}
			// Decoded into an envelope that held another: nothing of it stays.
			got := *codecEnvelopes(t)["authorized with requester, spend and disclosure plan"]
			if err := schema.DecodeEnvelope(data, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, env) {
				t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, *env)
			}
			if again := schema.EncodeEnvelope(&got); string(again) != string(data) {
				t.Fatal("re-encoding differs")
			}
		})
	}
}

// TestEnvelopeBinaryMatchesJSON: the JSON envelope an earlier version
// wrote and its binary form decode to the same struct, so that a stage
// reads an upgrade's leftovers as it reads its own hand-offs.
func TestEnvelopeBinaryMatchesJSON(t *testing.T) {
	for name, env := range codecEnvelopes(t) {
		t.Run(name, func(t *testing.T) {
			var fromJSON, fromBinary schema.Envelope
			if err := schema.DecodeEnvelope(schema.MustMarshal(env), &fromJSON); err != nil {
				t.Fatal(err)
			}
			if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&fromJSON), &fromBinary); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fromJSON, fromBinary) {
				t.Fatalf("JSON and binary differ:\n json %+v\n bin  %+v", fromJSON, fromBinary)
			}
		})
	}
}

// TestEnvelopeBinaryRandom: any envelope (random strings, numbers,
// optionals, slices), raw values aside, survives the binary form. A field
// added to Envelope and left out of the codec fails here.
func TestEnvelopeBinaryRandom(t *testing.T) {
	raws := []string{`null`, `{}`, `"s"`, `[1,{"a":[]}]`, `-0.5e3`, `true`}
	rawOf := func(v jsontext.Value, r *rand.Rand) jsontext.Value {
		if v == nil {
			return nil
		}
		return jsontext.Value(raws[r.IntN(len(raws))])
	}
	f := func(env schema.Envelope, seed uint64) bool {
		r := rand.New(rand.NewPCG(seed, 1))
		p := &env.Proposal
		p.Intent.Payload = rawOf(p.Intent.Payload, r)
		p.Grounding.Subject = rawOf(p.Grounding.Subject, r)
		for i := range p.Grounding.Candidates {
			p.Grounding.Candidates[i].Attributes = rawOf(p.Grounding.Candidates[i].Attributes, r)
		}
		var got schema.Envelope
		if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&env), &got); err != nil {
			t.Log(err)
			return false
		}
		return reflect.DeepEqual(got, env)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 300}); err != nil {
		t.Fatal(err)
	}
}

// TestEnvelopeBinaryCorrupt: every truncation, an added byte, a bad
// version and a changed byte anywhere either fail as malformed or decode
// to an envelope that is itself whole (it encodes and decodes again to
// the same): never a panic, never half an envelope.
func TestEnvelopeBinaryCorrupt(t *testing.T) {
	env := codecEnvelopes(t)["authorized with requester, spend and disclosure plan"]
	data := schema.EncodeEnvelope(env)
	refused := func(b []byte) {
		t.Helper()
		var got schema.Envelope
		err := schema.DecodeEnvelope(b, &got)
		var ve *schema.ValidationError
		if !errors.Is(err, schema.ErrMalformed) || !errors.As(err, &ve) {
			t.Fatalf("err = %v, want a *ValidationError wrapping ErrMalformed", err)
		}
		if !reflect.DeepEqual(got, schema.Envelope{}) {
			t.Fatal("a refused envelope left fields behind")
		}
	}
	for n := range len(data) {
		refused(data[:n])
	}
	refused(append(append([]byte(nil), data...), 0))
	for _, v := range []byte{0xB0, 0xB2, 0xBF} {
		b := append([]byte(nil), data...)
		b[0] = v
		refused(b)
	}
	decoded := 0
	for i := 1; i < len(data); i++ {
		for _, x := range []byte{0x01, 0x80, 0xFF, 0x7F} {
			b := append([]byte(nil), data...)
			b[i] ^= x
			var got schema.Envelope
			if err := schema.DecodeEnvelope(b, &got); err != nil {
				if !errors.Is(err, schema.ErrMalformed) {
					t.Fatalf("byte %d ^ %#x: err = %v", i, x, err)
				}
				continue
			}
			decoded++
			var again schema.Envelope
			if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&got), &again); err != nil || !reflect.DeepEqual(got, again) {
				t.Fatalf("byte %d ^ %#x decoded to an envelope that does not survive its own form: %v", i, x, err)
			}
		}
	}
	if decoded == 0 {
		t.Fatal("no corruption decoded: the test exercises nothing but refusals")
	}
}

// TestEnvelopeBinaryBounded: lengths and counts beyond the data are
// refused before anything is allocated for them.
func TestEnvelopeBinaryBounded(t *testing.T) {
	head := []byte{schema.EnvelopeBinaryV1}
	for name, b := range map[string][]byte{
		"huge string":           binary.AppendUvarint(append([]byte(nil), head...), 1<<62),
		"overflowing varint":    append(append([]byte(nil), head...), 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01),
		"string one past":       append(binary.AppendUvarint(append([]byte(nil), head...), 4), "abc"...),
		"larger than a message": append(append([]byte(nil), head...), make([]byte, schema.MaxMessageBytes)...),
	} {
		t.Run(name, func(t *testing.T) {
			var env schema.Envelope
			if err := schema.DecodeEnvelope(b, &env); !errors.Is(err, schema.ErrMalformed) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	// A candidate count of a billion, with a few bytes behind it.
	env := codecEnvelopes(t)["admitted inline candidates"]
	data := schema.EncodeEnvelope(env)
	b := patchCandidateCount(t, data, 1<<30)
	allocs := testing.AllocsPerRun(10, func() {
		var got schema.Envelope
		if err := schema.DecodeEnvelope(b, &got); !errors.Is(err, schema.ErrMalformed) {
			t.Fatalf("err = %v", err)
		}
	})
	if allocs > 10 {
		t.Fatalf("%v allocations refusing a huge count", allocs)
	}
}

// patchCandidateCount rewrites the one candidate's count (2: one plus one)
// of an envelope with inline candidates, found as the byte after the
// grounding section's observation_ref, to n+1.
func patchCandidateCount(t testing.TB, data []byte, n uint64) []byte {
	t.Helper()
	marker := append([]byte{byte(len("catalog:12"))}, "catalog:12"...)
	i := strings.LastIndex(string(data), string(marker))
	if i < 0 || data[i+len(marker)] != 2 {
		t.Fatal("no candidate count found")
	}
	out := append([]byte(nil), data[:i+len(marker)]...)
	out = binary.AppendUvarint(out, n+1)
	return append(out, data[i+len(marker)+1:]...)
}

// TestEnvelopeBinaryDepth: a binary envelope holds the deepest proposal
// admission admits, and refuses a raw value one level deeper, as the
// JSON envelope does.
func TestEnvelopeBinaryDepth(t *testing.T) {
	p, err := schema.DecodeProposal(proposalWithPayload(arrays(schema.MaxDepth-2)), 0)
	if err != nil {
		t.Fatal(err)
	}
	env := schema.Envelope{Schema: schema.SchemaEnvelope, Proposal: *p, Host: "h", AdmittedAtMs: 1}
	var got schema.Envelope
	if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&env), &got); err != nil {
		t.Fatalf("the deepest proposal: %v", err)
	}
	env.Proposal.Intent.Payload = jsontext.Value(arrays(schema.MaxDepth - 1))
	if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&env), &got); !errors.Is(err, schema.ErrMalformed) {
		t.Fatalf("a payload one level deeper: err = %v", err)
	}
	env.Proposal.Intent.Payload = jsontext.Value(`{"a":1,"a":2}`)
	if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&env), &got); !errors.Is(err, schema.ErrMalformed) {
		t.Fatalf("a payload with a duplicate name: err = %v", err)
	}
	env.Proposal.Intent.Payload = jsontext.Value(`{"a":1}`)
	env.Host = "h\xff"
	if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&env), &got); !errors.Is(err, schema.ErrMalformed) {
		t.Fatalf("a string of invalid UTF-8: err = %v", err)
	}
}

// TestEnvelopePeeks: the bulkheads' readers find in either form what the
// decoder finds.
func TestEnvelopePeeks(t *testing.T) {
	for name, env := range codecEnvelopes(t) {
		t.Run(name, func(t *testing.T) {
			for form, data := range map[string][]byte{"json": schema.MustMarshal(env), "binary": schema.EncodeEnvelope(env)} {
				if p, ok := schema.EnvelopeProvider(data); !ok || p != env.Proposal.Intent.Provider {
					t.Errorf("%s: provider = %q, %v", form, p, ok)
				}
				src, ok := schema.EnvelopeCandidateSource(data)
				want := env.Proposal.Grounding.CandidateSource
				// JSON omits an empty source: not found is its answer.
				if src != want || (!ok && (form == "binary" || want != "")) {
					t.Errorf("%s: candidate source = %q, %v; want %q", form, src, ok, want)
				}
			}
			// A truncated envelope gives nothing or the truth: the field is
			// read only whole, and the bytes before it are only stepped over.
			data := schema.EncodeEnvelope(env)
			for n := range len(data) {
				if src, ok := schema.EnvelopeCandidateSource(data[:n]); ok && src != env.Proposal.Grounding.CandidateSource {
					t.Fatalf("candidate source %q from %d of %d bytes", src, n, len(data))
				}
				if p, ok := schema.EnvelopeProvider(data[:n]); ok && p != env.Proposal.Intent.Provider {
					t.Fatalf("provider %q from %d of %d bytes", p, n, len(data))
				}
			}
		})
	}
}
