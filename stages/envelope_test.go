package stages_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

func envelopeSeed(t testing.TB, grounded, authorized bool) *schema.Envelope {
	t.Helper()
	env := &schema.Envelope{Schema: schema.SchemaEnvelope, Host: "h1", AdmittedAtMs: 1}
	env.Proposal.ProposalID = "p-1"
	if grounded {
		env.Grounded = &schema.Grounded{Referent: "r", Fingerprint: "sha256:" + strings.Repeat("a", 64), IdempotencyKey: "k"}
	}
	if authorized {
		env.Authorization = &schema.AuthorizationRecord{}
	}
	return env
}

// TestEnvelopeLevels: each level refuses an envelope that lacks what it
// needs, with ErrEnvelope, and reads one that has it.
func TestEnvelopeLevels(t *testing.T) {
	cases := []struct {
		name                 string
		grounded, authorized bool
		need                 stages.Carries
		ok                   bool
	}{
		{"grounded reads grounded", true, false, stages.Grounded, true},
		{"grounded refuses ungrounded", false, false, stages.Grounded, false},
		{"authorized refuses unauthorized", true, false, stages.Authorized, false},
		{"authorized reads authorized", true, true, stages.Authorized, true},
		{"admitted refuses an invalid proposal", false, false, stages.Admitted, false},
	}
	for _, c := range cases {
		for form, encode := range envelopeForms {
			t.Run(c.name+"/"+form, func(t *testing.T) {
				data := encode(envelopeSeed(t, c.grounded, c.authorized))
				env, err := stages.DecodeEnvelope(data, c.need)
				if c.ok != (err == nil) {
					t.Fatalf("err = %v, want ok=%v", err, c.ok)
				}
				if err != nil && !errors.Is(err, stages.ErrEnvelope) {
					t.Fatalf("err = %v, not ErrEnvelope", err)
				}
				if err == nil && env.Ref() != (schema.ProposalRef{Host: "h1", ProposalID: "p-1"}) {
					t.Fatalf("ref = %+v", env.Ref())
				}
			})
		}
	}
	for form, encode := range envelopeForms {
		other := envelopeSeed(t, true, false)
		other.Schema = "portcullis.other.v1"
		if _, err := stages.DecodeEnvelope(encode(other), stages.Grounded); !errors.Is(err, stages.ErrEnvelope) {
			t.Fatalf("%s: another schema: err = %v", form, err)
		}
		badFingerprint := envelopeSeed(t, true, true)
		badFingerprint.Grounded.Fingerprint = "sha256:short"
		if _, err := stages.DecodeEnvelope(encode(badFingerprint), stages.Grounded); !errors.Is(err, stages.ErrEnvelope) {
			t.Fatalf("%s: a malformed fingerprint: err = %v", form, err)
		}
	}
}

// envelopeForms are the envelope's two forms: the binary one every stage
// writes, and the JSON one of earlier versions, which stages still read
// (envelopes left in the stage, parked and held streams at an upgrade).
var envelopeForms = map[string]func(*schema.Envelope) []byte{
	"binary": schema.EncodeEnvelope,
	"json":   func(e *schema.Envelope) []byte { return schema.MustMarshal(e) },
}

// TestEnvelopeBinaryRefused: a binary envelope the decoder refuses
// (truncated, a byte too many, an unknown version) is ErrEnvelope wrapping
// schema's value-free *ValidationError, at every level.
func TestEnvelopeBinaryRefused(t *testing.T) {
	data := schema.EncodeEnvelope(envelopeSeed(t, true, true))
	bad := map[string][]byte{
		"truncated": data[:len(data)-1],
		"trailing":  append(append([]byte(nil), data...), 0),
		"version":   append([]byte{0xB2}, data[1:]...),
	}
	for name, b := range bad {
		for _, need := range []stages.Carries{stages.Admitted, stages.Grounded, stages.Authorized} {
			env, err := stages.DecodeEnvelope(b, need)
			var ve *schema.ValidationError
			if env != nil || !errors.Is(err, stages.ErrEnvelope) || !errors.As(err, &ve) {
				t.Errorf("%s, need %d: env = %v, err = %v", name, need, env, err)
			}
		}
	}
}

// TestEnvelopeSubject: Route.Envelope reads only a proposal subject of the
// stage itself that names the envelope's proposal.
func TestEnvelopeSubject(t *testing.T) {
	subj, err := subjects.New("pc")
	if err != nil {
		t.Fatal(err)
	}
	r := stages.Route{Subjects: subj, Self: subjects.StageDispatch}
	for form, encode := range envelopeForms {
		data := encode(envelopeSeed(t, true, true))
		for _, c := range []struct {
			subject string
			ok      bool
		}{
			{subj.Stage(subjects.StageDispatch, subjects.KindProposal, "h1.p-1"), true},
			{subj.Stage(subjects.StageDispatch, subjects.KindProposal, "h1.p-2"), false},
			{subj.Stage(subjects.StageDispatch, subjects.KindProposal, "h2.p-1"), false},
			{subj.Stage(subjects.StageDispatch, subjects.KindTimer, "h1.p-1"), false},
			{subj.Stage(subjects.StageAuthorization, subjects.KindProposal, "h1.p-1"), false},
			{"pc.proposals.h1", false},
		} {
			_, err := r.Envelope(&stages.Input{Subject: c.subject, Data: data}, stages.Authorized)
			if c.ok != (err == nil) || (err != nil && !errors.Is(err, stages.ErrEnvelope)) {
				t.Errorf("%s %s: err = %v, want ok=%v", form, c.subject, err, c.ok)
			}
		}
	}
}

// FuzzDecodeEnvelope: whatever the bytes, in either form, the decoder
// answers with an envelope carrying what was asked or an ErrEnvelope
// error — never a panic, and never an envelope that lacks what its level
// promises; what it decodes survives the binary form unchanged; the
// bulkheads' peeks never panic and, on what decodes, agree with it.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(schema.MustMarshal(*envelopeSeed(f, true, true)))
	f.Add(schema.MustMarshal(*envelopeSeed(f, true, false)))
	f.Add(schema.EncodeEnvelope(envelopeSeed(f, true, true)))
	f.Add(schema.EncodeEnvelope(envelopeSeed(f, true, false)))
	f.Add(schema.EncodeEnvelope(envelopeSeed(f, false, false)))
	for _, env := range realEnvelopes(f) {
		f.Add(schema.EncodeEnvelope(env))
	}
	f.Add([]byte{schema.EnvelopeBinaryV1})
	f.Add([]byte{schema.EnvelopeBinaryV1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01})
	f.Add([]byte(`{"schema":"portcullis.envelope.v1","grounded":null}`))
	f.Add([]byte(`{"schema":`))
	f.Add([]byte(strings.Repeat("[", 200)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		provider, providerOK := schema.EnvelopeProvider(data)
		source, sourceOK := schema.EnvelopeCandidateSource(data)
		var any schema.Envelope
		if schema.DecodeEnvelope(data, &any) == nil {
			var again schema.Envelope
			if err := schema.DecodeEnvelope(schema.EncodeEnvelope(&any), &again); err != nil || !reflect.DeepEqual(any, again) {
				t.Fatalf("a decoded envelope does not survive the binary form: %v", err)
			}
			if schema.IsBinaryEnvelope(data) &&
				(!providerOK || provider != any.Proposal.Intent.Provider || !sourceOK || source != any.Proposal.Grounding.CandidateSource) {
				t.Fatalf("peeks %q %v, %q %v disagree with the decoder", provider, providerOK, source, sourceOK)
			}
		}
		for _, need := range []stages.Carries{stages.Admitted, stages.Grounded, stages.Authorized} {
			env, err := stages.DecodeEnvelope(data, need)
			if err != nil {
				if !errors.Is(err, stages.ErrEnvelope) || env != nil {
					t.Fatalf("need %d: err = %v, env = %v", need, err, env)
				}
				continue
			}
			if env.Schema != schema.SchemaEnvelope ||
				(need >= stages.Grounded && (env.Grounded == nil || !schema.ValidFingerprint(env.Grounded.Fingerprint))) ||
				(need >= stages.Authorized && env.Authorization == nil) {
				t.Fatalf("need %d: an envelope that lacks what its level promises", need)
			}
		}
	})
}
