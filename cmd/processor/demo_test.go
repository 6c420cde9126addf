package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/demo"
	"github.com/portcullis/portcullis/internal/testenv"
)

// TestDemo runs `processor demo` in process: it must tell the whole story,
// exit 0, and leave no data directory behind (goleak checks that nothing
// keeps running).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("plays every scenario")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out, errb bytes.Buffer
	if code := run([]string{"demo"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"lumber-wrong-scope     → DENIED                  GROUNDING_SCOPE_MISMATCH",
		"lumber-missing         → NEEDS_CLARIFICATION     GROUNDING_RESOURCE_DISCRIMINATOR_MISSING",
		"lumber-mismatch        → NEEDS_CLARIFICATION     GROUNDING_RESOURCE_DISCRIMINATOR_MISMATCH",
		"lumber-ambiguous       → NEEDS_CLARIFICATION     GROUNDING_RESOURCE_DISCRIMINATION_AMBIGUOUS",
		"authorization saw 0 of them, the provider 0 dispatches",
		"restart-vague          → NEEDS_CLARIFICATION",
		"restart-exact          → CONFIRMED                referent svc:payments-prod",
		"fingerprint " + published(t, "payments-production")[:len("sha256:")+12] + "…", // the published test vector
		"book-sea-jfk           → NEEDS_APPROVAL          APPROVAL_REQUIRED",
		`approval prompt: "Book SEA→JFK for $245.67?"  (USD 245.67`,
		"resolver released birth_date, contact_details, legal_identity",
		"book-sea-jfk           → RECONCILIATION_REQUIRED ADAPTER_TIMEOUT",
		"asks duffel (read-only): confirmed, ord_0000demo",
		"book-sea-jfk           → CONFIRMED",
		"Provider dispatches: 1.",
		"no payload or protected value",
		"PROVIDER_INDETERMINATE + RECONCILE_EXHAUSTED (terminal)",
		"$ processor reconcile list",
		"1 indeterminate action, oldest first:",
		"effect absent → REJECTED",
		"pay-invoice-42         → REJECTED",
		"settled by the operator ops",
		"operator   ops",
		"no indeterminate actions",
		"Every scenario ended as it should.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the demo did not print %q", want)
		}
	}
	// Headings and notes in a newcomer's words: the builders' terms at
	// most as a SPEC reference in parentheses (issue 34: "seed 000",
	// "grounding failure matrix", "sealed too (HMAC)").
	for _, jargon := range []string{"seed 0", "matrix", "HMAC", "sealed", "fail closed"} {
		if strings.Contains(s, jargon) {
			t.Errorf("the demo says %q", jargon)
		}
	}
	for _, l := range strings.Split(s, "\n") {
		if regexp.MustCompile(`^[0-9]\. `).MatchString(l) {
			if i := strings.Index(l, "SPEC §"); i >= 0 && !strings.Contains(l[:i], "(") {
				t.Errorf("heading %q: a SPEC reference outside parentheses", l)
			}
		}
	}
	for _, secret := range demo.Secrets() {
		if strings.Contains(s, secret) {
			t.Errorf("the demo printed a protected value or the payload: %q", secret)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", s, errb.String())
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the demo left %d entries in its temporary directory", len(left))
	}
	if code := run([]string{"demo", "extra"}, nil, &out, &errb); code != 2 {
		t.Errorf("demo with an argument: exit %d", code)
	}
}

// published returns the fingerprint of a vector in
// fingerprint/testdata/fingerprints.json, generated independently of Go.
func published(t *testing.T, name string) string {
	t.Helper()
	for _, v := range vectors(t) {
		if v.Name == name {
			return v.Fingerprint
		}
	}
	t.Fatalf("no vector %s", name)
	return ""
}

// TestDemoKeep: `processor demo --keep` leaves the indeterminate payment
// for an operator and prints the command lines that settle it; the
// printed `processor reconcile resolve` line (signed with the printed
// seed) settles it, and the demo reports the operator's resolution and
// keeps running until told to stop. (The console's line is driven in a
// browser by internal/console's TestBrowserDemo.)
func TestDemoKeep(t *testing.T) {
	if testing.Short() {
		t.Skip("plays every scenario")
	}
	t.Setenv("TMPDIR", t.TempDir())
	out := &testenv.LogBuffer{}
	keep, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- demo.Run(demo.Options{Stdout: out, Keep: keep}) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("demo: %v", err)
		}
	}()
	out.Wait(t, "Waiting for the resolution")
	s := string(out.Bytes())
	if !regexp.MustCompile(`processor console --url nats://127\.0\.0\.1:\d+ --nkey \S+operator\.nk`).MatchString(s) ||
		!strings.Contains(s, "restock-approval       → NEEDS_APPROVAL") {
		t.Fatalf("the demo's instructions:\n%s", s)
	}
	m := regexp.MustCompile(`processor reconcile resolve (sha256:[0-9a-f]{64}) --absent --evidence '([^']+)' \\\n\s+--url (\S+) --nkey (\S+)`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no resolve line:\n%s", s)
	}
	var cout, cerr bytes.Buffer
	if code := run([]string{"reconcile", "resolve", m[1], "--absent", "--evidence", m[2], "--url", m[3], "--nkey", m[4]}, nil, &cout, &cerr); code != 0 {
		t.Fatalf("resolve: exit %d\n%s%s", code, cout.String(), cerr.String())
	}
	out.Wait(t, "settled by the operator ops, evidence ledger-console:payments?invoice=INV-0042. Provider dispatches: 1.")
	out.Wait(t, "Still running")
}
