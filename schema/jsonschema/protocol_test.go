package jsonschema_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/jsonschema"
)

// The wire contract in the repository, for integrators in any language.
const (
	repoRoot     = "../.."
	protocolFile = "PROTOCOL.md"
)

func readProtocol(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, protocolFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// members lists the member names a schema file gives its messages: its
// top-level properties, those of a one-of's branches (disclosure_reply)
// and of the grant's inline form, and of nested objects written out in
// place (protected_disclosure of a dispatch request).
func members(t *testing.T, file string) []string {
	t.Helper()
	raw, err := jsonschema.FS.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var names []string
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		m, ok := v.(map[string]any)
		if !ok || depth > 3 {
			return
		}
		if props, ok := m["properties"].(map[string]any); ok {
			for name, p := range props {
				names = append(names, name)
				walk(p, depth+1)
			}
		}
		for _, key := range []string{"oneOf", "anyOf"} {
			if list, ok := m[key].([]any); ok {
				for _, b := range list {
					walk(b, depth)
				}
			}
		}
	}
	walk(doc, 0)
	if file == "grant.json" || file == "disclosure_reply.json" {
		for _, d := range doc["$defs"].(map[string]any) {
			walk(d, 0)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// TestProtocolNamesEverySchemaAndCode: PROTOCOL.md is consistent with the
// JSON Schemas and the closed sets — every schema file, every member of
// every message, every outcome kind, effect truth, phase, boundary and
// incident code, and every error code of an operator request appears in
// it (issue 23: the wire contract was not in the repository).
func TestProtocolNamesEverySchemaAndCode(t *testing.T) {
	doc := readProtocol(t)
	has := func(what, name string) {
		t.Helper()
		if !strings.Contains(doc, "`"+name+"`") && !strings.Contains(doc, `"`+name+`"`) {
			t.Errorf("%s names %s %q nowhere", protocolFile, what, name)
		}
	}
	entries, err := jsonschema.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		files++
		has("the schema", name)
		if name == "defs.json" || name == "disclosure_values.json" {
			continue // definitions, not messages
		}
		for _, m := range members(t, name) {
			has("the member of "+name, m)
		}
	}
	if files < 16 {
		t.Errorf("only %d schema files", files)
	}
	for _, k := range schema.Kinds() {
		has("the outcome kind", string(k))
		has("the effect truth", string(k.EffectTruth()))
	}
	for _, p := range schema.Phases() {
		has("the phase", string(p))
	}
	for _, b := range []schema.Boundary{schema.BoundaryNotInvoked, schema.BoundaryInvoked, schema.BoundaryUnknown} {
		has("the boundary", string(b))
	}
	for _, c := range schema.Codes() {
		has("the code", string(c.Code))
	}
	for _, c := range admin.Codes {
		has("the operator reply code", c)
	}
}

// sectionNumber finds a numbered heading ("## 2. Messages", "### 2.7 Trust").
var sectionNumber = regexp.MustCompile(`(?m)^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s`)

// citation finds a section citation: "§2.7", "§ 3" (in JSON, escaped as
// \u00a7).
var citation = regexp.MustCompile(`§\s?(\d+(?:\.\d+)*)`)

// citingFiles are the kinds of file that cite the contract.
var citingFiles = []string{".go", ".md", ".hcl", ".ts", ".mjs", ".sh", ".json", ".yml", ".yaml"}

// TestCitationsPointIntoProtocol: every "SPEC §…" (any "§N") in the
// repository names a section PROTOCOL.md has, and nothing refers to a
// SPEC.md the repository does not hold.
func TestCitationsPointIntoProtocol(t *testing.T) {
	sections := map[string]bool{}
	for _, m := range sectionNumber.FindAllStringSubmatch(readProtocol(t), -1) {
		sections[m[1]] = true
	}
	for _, want := range []string{"1", "2", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "3", "4", "5", "6", "7"} {
		if !sections[want] {
			t.Errorf("%s has no section %s", protocolFile, want)
		}
	}
	cited := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(citingFiles, filepath.Ext(path)) {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(raw), `\u00a7`, "§")
		rel, _ := filepath.Rel(repoRoot, path)
		for i, line := range strings.Split(text, "\n") {
			for _, m := range citation.FindAllStringSubmatch(line, -1) {
				cited++
				if !sections[m[1]] {
					t.Errorf("%s:%d cites §%s, which %s does not have", rel, i+1, m[1], protocolFile)
				}
			}
			if strings.Contains(line, "SPEC.md") && rel != protocolFile && !strings.HasSuffix(rel, "protocol_test.go") {
				t.Errorf("%s:%d refers to SPEC.md, which is not in the repository: cite %s", rel, i+1, protocolFile)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 100 {
		t.Errorf("only %d citations found: is the walk reading the repository?", cited)
	}
	t.Logf("%d citations, all into %s", cited, protocolFile)
}
