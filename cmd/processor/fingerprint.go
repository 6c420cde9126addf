package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/stages/admission"
	"github.com/portcullis/portcullis/stages/grounding"
)

// fingerprintOutput is what `processor fingerprint` prints for a proposal
// that grounds.
type fingerprintOutput struct {
	Referent       string `json:"referent"`
	Fingerprint    string `json:"fingerprint"`
	IdempotencyKey string `json:"idempotency_key"`
	// Canonical is the JCS text that was hashed (--canonical).
	Canonical *string `json:"canonical,omitempty"`
}

// cmdFingerprint grounds a proposal offline, as the processor would, and
// prints its referent, fingerprint (v2, SPEC §2.3) and idempotency key (exit 0); or the
// outcome that ends it (exit 1): the admission outcome for invalid input,
// the grounding outcome when it does not ground.
//
// With --referent the candidate rules (bound, discriminator, match) are
// replaced by the given referent; subject and scope are still checked. A
// proposal naming a candidate_source needs --referent: the command does not
// connect to NATS.
func cmdFingerprint(c *cmdline, args []string, stdin io.Reader) int {
	stdout, stderr, fs := c.stdout, c.stderr, c.fs
	referent := fs.String("referent", "", "fingerprint for referent `R` instead of grounding the inline candidates (required with candidate_source)")
	cfgPath := fs.String("config", "", "configuration `FILE`: its admission.max_payload_bytes and grounding.max_candidates apply")
	canonical := fs.Bool("canonical", false, "also print the canonical JSON that was hashed")
	files, code, done := c.parse(args)
	if done {
		return code
	}
	referentSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "referent" {
			referentSet = true
		}
	})
	if referentSet && !(&schema.Candidate{Referent: *referent}).Valid() {
		return c.usageError("--referent must be a non-empty single line of at most 512 bytes")
	}
	cfg := config.Defaults()
	if *cfgPath != "" {
		loaded, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		cfg = loaded
	}

	in, name := stdin, "standard input"
	if len(files) == 1 && files[0] != "-" {
		f, err := os.Open(files[0])
		if err != nil {
			fmt.Fprintln(stderr, "processor fingerprint:", err)
			return 1
		}
		defer f.Close()
		in, name = f, files[0]
	}
	// Read one byte past the largest allowed body, so that an oversized
	// one is refused as too large rather than cut.
	body, err := io.ReadAll(io.LimitReader(in, int64(config.MaxMaxPayloadBytes)+1))
	if err != nil {
		fmt.Fprintf(stderr, "processor fingerprint: reading %s: %v\n", name, err)
		return 1
	}

	now := stages.NowMs(stages.SystemClock{})
	v := admission.Offline(body, cfg.Admission.MaxPayloadBytes)
	if v.Incident != nil {
		if v.ProposalID == "" {
			// No readable proposal id: the processor would publish only
			// the incident event.
			writeJSON(stdout, v.Incident.Event(now))
		} else {
			writeJSON(stdout, schema.FailureOutcome(schema.ProposalRef{ProposalID: v.ProposalID}, *v.Incident, now))
		}
		return 1
	}
	p := v.Proposal

	var verdict grounding.Verdict
	switch {
	case referentSet:
		verdict = grounding.Verdict{Referent: *referent}
		if inc := grounding.Precheck(p); inc != nil {
			verdict = grounding.Verdict{Incident: inc}
		}
	case p.Grounding.CandidateSource != "":
		return c.usageError("the proposal names a candidate_source; give the referent it grounds to with --referent")
	default:
		verdict = grounding.Decide(p, p.Grounding.Candidates, cfg.Grounding.MaxCandidates)
	}
	if !verdict.Grounded() {
		writeJSON(stdout, schema.FailureOutcome(schema.ProposalRef{ProposalID: p.ProposalID}, *verdict.Incident, now))
		return 1
	}
	r, err := fingerprint.Of(p, verdict.Referent)
	if err != nil {
		// Admission's checks make this unreachable; say so plainly.
		fmt.Fprintln(stderr, "processor fingerprint:", err)
		return 1
	}
	out := fingerprintOutput{Referent: verdict.Referent, Fingerprint: r.Fingerprint, IdempotencyKey: r.IdempotencyKey}
	if *canonical {
		c := string(r.Canonical)
		out.Canonical = &c
	}
	writeJSON(stdout, out)
	return 0
}

// fingerprintAbout is the help of `processor fingerprint`.
func fingerprintAbout() string {
	return "Reads a proposal (FILE, or standard input for - or none) and prints its grounded referent, fingerprint v2 and\n" +
		"idempotency key as JSON (exit 0), or the outcome that ends it (exit 1). Offline: it does not connect to NATS.\n" +
		fmt.Sprintf("Fingerprint v2 (SPEC §2.3): \"sha256:\" + hex SHA-256 of the RFC 8785 (JCS) JSON of {\"schema\": %q, tenant_ref,\n", schema.SchemaFingerprint) +
		"security_domain_ref, actor_ref, provider, capability, operation, environment, referent, payload,\n" +
		"protected_disclosure, external_spend}; the idempotency key is its 64 hex digits."
}

func writeJSON(w io.Writer, v any) {
	fmt.Fprintf(w, "%s\n", schema.MustMarshal(v))
}
