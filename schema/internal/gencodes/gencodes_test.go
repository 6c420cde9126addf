package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGeneratedFilesAreFresh regenerates every file from the code table in
// memory and compares it with the file on disk: it fails when the table
// was edited without running the generator, or a generated file (or a
// generated member of a schema file) was edited by hand.
func TestGeneratedFilesAreFresh(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outputs() {
		disk, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(o.path)))
		if err != nil {
			t.Errorf("%s: %v; run `go generate ./schema/...`", o.path, err)
			continue
		}
		want, err := o.gen(disk)
		if err != nil {
			t.Errorf("%s: %v", o.path, err)
			continue
		}
		if !bytes.Equal(disk, want) {
			t.Errorf("%s is stale: the code table (schema/internal/gencodes/table.go) makes %s; run `go generate ./schema/...` and commit the result",
				o.path, firstDifference(disk, want))
		}
	}
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + " " + quoteLine(wl) + " where the file has " + quoteLine(gl)
		}
	}
	return "a different file"
}

func quoteLine(s string) string { return "«" + strings.TrimSpace(s) + "»" }

// TestTableIsChecked: a row naming what the lists do not have, or a row
// written twice, is refused before anything is written.
func TestTableIsChecked(t *testing.T) {
	if err := check(); err != nil {
		t.Fatalf("the table: %v", err)
	}
	saved := rows
	t.Cleanup(func() { rows = saved })
	for name, r := range map[string]row{
		"unknown phase":    {Phase: "audit", Code: "PROCESSING_FAILED", Boundary: "not_invoked"},
		"unknown code":     {Phase: "dispatch", Code: "NOT_A_CODE", Boundary: "not_invoked"},
		"unknown kind":     {Phase: "dispatch", Code: "ADAPTER_ERROR", Kind: "MAYBE", Boundary: "unknown"},
		"unknown boundary": {Phase: "dispatch", Code: "ADAPTER_ERROR", Boundary: "perhaps"},
		"row twice":        saved[0],
	} {
		rows = append(append([]row(nil), saved...), r)
		if err := check(); err == nil {
			t.Errorf("%s: table accepted", name)
		}
	}
}

// TestSpliceKeepsTheRest: only the owned values change; every other byte,
// the escapes included, is kept.
func TestSpliceKeepsTheRest(t *testing.T) {
	in := []byte("{\n  \"a\": \"\\u00a7 kept\",\n  \"b\": {\n    \"enum\": [\n      \"x\"\n    ]\n  },\n  \"c\": [1,2]\n}\n")
	out, err := splice(in, map[string]any{"/b": enum([]any{"y", "§"})})
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"a\": \"\\u00a7 kept\",\n  \"b\": {\n    \"enum\": [\n      \"y\",\n      \"\\u00a7\"\n    ]\n  },\n  \"c\": [1,2]\n}\n"
	if string(out) != want {
		t.Errorf("splice made\n%s\nwant\n%s", out, want)
	}
	if _, err := splice(in, map[string]any{"/nowhere": "x"}); err == nil {
		t.Error("splice replaced a value that is not there")
	}
}
