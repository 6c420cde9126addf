package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/trust"
	"github.com/portcullis/portcullis/stages/admission"
	"github.com/portcullis/portcullis/stages/grounding"
)

// judgement is what the processor would make of a proposal, offline: the
// admission and grounding stages' own decisions, with the problems that
// earned a refusal.
type judgement struct {
	// ProposalID is the id an outcome would be addressed to; "" when the
	// processor could not read one (it would publish only the event).
	ProposalID string
	// Incident is the refusal; nil when the proposal is admissible and
	// grounds (or names a candidate source and no referent was given).
	Incident *schema.Incident
	Problems []schema.Problem
	Proposal *schema.Proposal
	// SourceWithoutReferent: the proposal names a candidate_source and no
	// --referent was given, so it was not grounded.
	SourceWithoutReferent bool
	Referent              string
	Result                fingerprint.Result
	// Err: the fingerprint could not be computed (unreachable after
	// admission's checks).
	Err error
}

// judgeOptions are what the offline checks take from flags and config.
type judgeOptions struct {
	maxBytes, maxCandidates int
	// referent replaces the candidate rules when set.
	referent    string
	referentSet bool
	// providers, when non-nil, are the configured providers (admission's
	// provider check); host, when non-nil, the signing host whose tenants
	// bind the trusted context.
	providers []string
	tenants   []trust.Tenant
	host      *trust.Host
}

// judge runs admission's and grounding's checks on a body, as the stages
// do, in their order: admission.Offline (strict decoding, formats,
// complete context; every problem of a body that does not decode, where
// admission reports the first: everyProblem), then — with the configuration to do it — tenant and
// domain, and provider; then grounding (Precheck with a referent, else
// Decide on the inline candidates); then the fingerprint.
func judge(body []byte, o judgeOptions) judgement {
	v := admission.Offline(body, o.maxBytes)
	j := judgement{ProposalID: v.ProposalID, Incident: v.Incident, Problems: v.Problems, Proposal: v.Proposal}
	if j.Incident != nil && v.Proposal == nil && len(v.Problems) == 1 {
		// Strict decoding stopped at one member: find the others too.
		j.Problems = everyProblem(body, o.maxBytes, v.Problems[0])
	}
	if j.Incident != nil {
		return j
	}
	p := v.Proposal
	refuse := func(pr *schema.Problem) judgement {
		inc := schema.NewIncident(schema.PhaseAdmission, pr.Code)
		j.Incident, j.Problems = &inc, []schema.Problem{*pr}
		return j
	}
	if o.host != nil {
		t := trust.Policy{Hosts: []trust.Host{*o.host}, Tenants: o.tenants}
		if pr := admission.TenantProblem(t, o.host.Name, &p.Context); pr != nil {
			return refuse(pr)
		}
	}
	if o.providers != nil {
		if pr := admission.ProviderProblem(o.providers, p); pr != nil {
			return refuse(pr)
		}
	}
	var verdict grounding.Binding
	var candidates []schema.Candidate
	switch {
	case o.referentSet:
		verdict = grounding.Binding{Referent: o.referent}
		if inc := grounding.Precheck(p); inc != nil {
			verdict = grounding.Binding{Incident: inc}
		}
	case p.Grounding.CandidateSource != "":
		if inc := grounding.Precheck(p); inc != nil {
			verdict = grounding.Binding{Incident: inc}
			break
		}
		j.SourceWithoutReferent = true
		return j
	default:
		candidates = p.Grounding.Candidates
		verdict = grounding.Decide(p, candidates, o.maxCandidates)
	}
	if !verdict.Grounded() {
		j.Incident = verdict.Incident
		j.Problems = grounding.Explain(p, candidates, verdict.Incident.Code)
		return j
	}
	r, err := fingerprint.Of(p, verdict.Referent)
	if err != nil {
		// Admission's checks make this unreachable; say so if it is not.
		j.Err = fmt.Errorf("an admissible proposal has no fingerprint: %w", err)
		return j
	}
	j.Referent, j.Result = verdict.Referent, r
	return j
}

// readBody reads FILE, or standard input for "-" or no argument, one byte
// past the largest allowed body (so that an oversized one is refused as
// too large rather than cut).
func readBody(files []string, stdin io.Reader) (body []byte, name string, err error) {
	in, name := stdin, "standard input"
	if len(files) == 1 && files[0] != "-" {
		f, err := os.Open(files[0])
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		in, name = f, files[0]
	}
	body, err = io.ReadAll(io.LimitReader(in, int64(config.MaxMaxPayloadBytes)+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", name, err)
	}
	return body, name, nil
}

// problemJSON is a problem as `check -o json` prints it.
type problemJSON struct {
	Path string      `json:"path"`
	Rule schema.Rule `json:"rule"`
	Code schema.Code `json:"code"`
	// Line and Column (1-based; the column counts characters) locate
	// where strict decoding stopped; absent for the rules of a decoded
	// proposal, which Path locates.
	Line   int `json:"line,omitzero"`
	Column int `json:"column,omitzero"`
}

func problemLine(body []byte, p schema.Problem) problemJSON {
	out := problemJSON{Path: p.Path, Rule: p.Rule, Code: p.Code}
	if p.Offset >= 0 && p.Offset <= int64(len(body)) {
		before := body[:p.Offset]
		out.Line = bytes.Count(before, []byte("\n")) + 1
		out.Column = utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	}
	return out
}

// String is one line: "path: rule [CODE]", the position when known.
func (p problemJSON) String() string {
	path := p.Path
	if path == "" {
		path = "(body)"
	}
	where := ""
	if p.Line > 0 {
		where = fmt.Sprintf(", line %d column %d", p.Line, p.Column)
	}
	return fmt.Sprintf("%s: %s [%s%s]", path, p.Rule, p.Code, where)
}

// explain lists a judgement's problems, one line each.
func explain(w io.Writer, prefix string, body []byte, problems []schema.Problem) {
	for _, p := range problems {
		fmt.Fprintf(w, "%s%s\n", prefix, problemLine(body, p))
	}
}

// checkOutput is what `check -o json` prints.
type checkOutput struct {
	// Admissible: no offline check refuses the proposal.
	Admissible bool `json:"admissible"`
	// Kind and Code are the outcome the processor would answer with.
	Kind schema.Kind `json:"kind,omitempty"`
	Code schema.Code `json:"code,omitempty"`
	// Outcome says whether the refusal would get an outcome (its
	// proposal_id readable) or only the incident event.
	Outcome  *bool         `json:"outcome,omitempty"`
	Problems []problemJSON `json:"problems,omitempty"`
	Referent string        `json:"referent,omitempty"`
	// Fingerprint and IdempotencyKey: absent for a candidate_source
	// proposal checked without --referent.
	Fingerprint    string `json:"fingerprint,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// cmdCheck explains offline which field of a proposal breaks which rule,
// with the processor's own checks (admission's decoding, formats and
// context; tenant, domain and provider when configured; grounding), and
// prints its fingerprint when none does.
func cmdCheck(c *cmdline, args []string, stdin io.Reader) int {
	fs := c.fs
	referent := fs.String("referent", "", "ground to referent `R` instead of the inline candidates (for a candidate_source proposal's fingerprint)")
	cfgPath := fs.String("config", "", "configuration `FILE`: its limits, providers, tenants and hosts apply")
	dev := fs.Bool("dev", false, "check against the configuration of run --dev (its providers)")
	host := fs.String("host", "", "with --config: the host `H` that signs it (its tenants and their security domains apply)")
	var out output
	out.register(fs)
	files, code, done := c.parse(args)
	if done {
		return code
	}
	asJSON, err := out.json()
	if err != nil {
		return c.usageError("%v", err)
	}
	o, code, ok := c.judgeOptions(fs, *referent, *cfgPath, *dev, *host)
	if !ok {
		return code
	}
	body, _, err := readBody(files, stdin)
	if err != nil {
		return c.fail(err)
	}
	j := judge(body, o)
	if j.Err != nil {
		return c.fail(j.Err)
	}
	res := checkOutput{Admissible: j.Incident == nil, Referent: j.Referent, Fingerprint: j.Result.Fingerprint, IdempotencyKey: j.Result.IdempotencyKey}
	if j.Incident != nil {
		info, _ := schema.LookupCode(j.Incident.Phase, j.Incident.Code)
		outcome := j.ProposalID != ""
		res.Kind, res.Code, res.Outcome = info.Kind, j.Incident.Code, &outcome
		for _, p := range j.Problems {
			res.Problems = append(res.Problems, problemLine(body, p))
		}
	}
	switch {
	case asJSON:
		writeJSON(c.stdout, res)
	case j.Incident == nil:
		fmt.Fprintln(c.stdout, "admissible as far as offline checks go")
		if j.SourceWithoutReferent {
			fmt.Fprintln(c.stdout, "it names a candidate_source: give --referent R for the fingerprint of the target R")
			break
		}
		fmt.Fprintf(c.stdout, "referent         %s\nfingerprint      %s\nidempotency_key  %s\n", j.Referent, j.Result.Fingerprint, j.Result.IdempotencyKey)
	default:
		explain(c.stdout, "", body, j.Problems)
		if j.ProposalID == "" {
			fmt.Fprintf(c.stderr, "processor check: %s, and no readable proposal_id: the processor would publish only the incident event, no outcome\n", j.Incident.Code)
		}
	}
	if j.Incident != nil {
		return 1
	}
	return 0
}

// judgeOptions reads the flags common to check and fingerprint. done
// reports a usage error or failure with its exit code.
func (c *cmdline) judgeOptions(fs *flag.FlagSet, referent, cfgPath string, dev bool, host string) (judgeOptions, int, bool) {
	referentSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "referent" {
			referentSet = true
		}
	})
	if referentSet && !(&schema.Candidate{Referent: referent}).Valid() {
		return judgeOptions{}, c.usageError("--referent must be a non-empty single line of at most 512 bytes"), false
	}
	if dev && cfgPath != "" {
		return judgeOptions{}, c.usageError("--dev and --config exclude each other"), false
	}
	if host != "" && cfgPath == "" {
		return judgeOptions{}, c.usageError("--host goes with --config (the hosts and tenants are configured there)"), false
	}
	cfg := config.Defaults()
	switch {
	case dev:
		cfg = config.Dev(os.TempDir())
	case cfgPath != "":
		// validate's and run's check, without what only a start needs:
		// check opens no store, so a running processor's is no problem.
		loaded, err := config.Check(cfgPath)
		if err = config.WithoutInUse(err); err != nil {
			return judgeOptions{}, c.fail(err), false
		}
		cfg = loaded
	}
	o := judgeOptions{
		maxBytes: cfg.Admission.MaxPayloadBytes, maxCandidates: cfg.Grounding.MaxCandidates,
		referent: referent, referentSet: referentSet, tenants: cfg.Tenants,
	}
	if dev || cfgPath != "" {
		o.providers = []string{}
		for _, p := range cfg.Providers {
			o.providers = append(o.providers, p.Name)
		}
	}
	if host != "" {
		h, ok := cfg.Host(host)
		if !ok {
			return judgeOptions{}, c.usageError("--host %q: no such host in %s", host, cfgPath), false
		}
		o.host = &h
	}
	return o, 0, true
}

// checkAbout is the help of `processor check`.
func checkAbout() string {
	return `Reads a proposal (FILE, or standard input for - or none) and says, offline, what the processor would make of
it, with the processor's own checks: strict decoding, formats and trusted context (admission), tenant and security
domain (with --config and --host), provider (with --config or --dev), grounding (the inline candidates, or
--referent). Each problem is one line: the field's JSON pointer, the rule it breaks and the code it earns, never
the value; every problem in one run, unknown and duplicate members named by their own pointers, with the line and
column of each member that did not decode (the processor's log, which must stay value-free, names only the
object that holds one, and only the first). Exit 0 when nothing refuses it, with the referent, fingerprint v2 and idempotency key; 1 with
one line per problem; 2 for usage errors. -o json prints {admissible, kind, code, outcome, problems, referent,
fingerprint, idempotency_key}.`
}
