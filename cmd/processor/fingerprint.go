package main

import (
	"fmt"
	"io"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
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
	o, code, ok := c.judgeOptions(fs, *referent, *cfgPath, false, "")
	if !ok {
		return code
	}
	o.providers = nil // offline: the fingerprint does not depend on them
	body, _, err := readBody(files, stdin)
	if err != nil {
		return c.fail(err)
	}

	now := stages.NowMs(stages.SystemClock{})
	j := judge(body, o)
	if j.Err != nil {
		return c.fail(j.Err)
	}
	switch {
	case j.SourceWithoutReferent:
		return c.usageError("the proposal names a candidate_source; give the referent it grounds to with --referent")
	case j.Incident != nil && j.ProposalID == "":
		// No readable proposal id: the processor would publish only the
		// incident event.
		writeJSON(stdout, j.Incident.Event(now))
	case j.Incident != nil:
		writeJSON(stdout, schema.FailureOutcome(schema.ProposalRef{ProposalID: j.ProposalID}, *j.Incident, now))
	}
	if j.Incident != nil {
		// Why, on standard error: the same lines as `processor check`.
		explain(stderr, "processor fingerprint: ", body, j.Problems)
		return 1
	}
	out := fingerprintOutput{Referent: j.Referent, Fingerprint: j.Result.Fingerprint, IdempotencyKey: j.Result.IdempotencyKey}
	if *canonical {
		c := string(j.Result.Canonical)
		out.Canonical = &c
	}
	writeJSON(stdout, out)
	return 0
}

// fingerprintAbout is the help of `processor fingerprint`.
func fingerprintAbout() string {
	return "Reads a proposal (FILE, or standard input for - or none) and prints its grounded referent, fingerprint v2 and\n" +
		"idempotency key as JSON (exit 0), or the outcome that ends it (exit 1), with one line per problem on standard\n" +
		"error (as `processor check` explains them). Offline: it does not connect to NATS.\n" +
		fmt.Sprintf("Fingerprint v2 (SPEC §2.3): \"sha256:\" + hex SHA-256 of the RFC 8785 (JCS) JSON of {\"schema\": %q, tenant_ref,\n", schema.SchemaFingerprint) +
		"security_domain_ref, actor_ref, provider, capability, operation, environment, referent, payload,\n" +
		"protected_disclosure, external_spend}; the idempotency key is its 64 hex digits."
}

func writeJSON(w io.Writer, v any) {
	fmt.Fprintf(w, "%s\n", schema.MustMarshal(v))
}
