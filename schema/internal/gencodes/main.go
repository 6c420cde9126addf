// Command gencodes writes Portcullis's closed sets from the one code table
// (table.go): the Go constants, lists and per-code tables of package schema
// (schema/codes_gen.go), the closed metric label sets of package metrics
// (metrics/labels_gen.go), and the enums of the JSON Schemas — their
// generated members in schema/jsonschema/defs.json and outcome.json; the
// rest of those files is hand-written and kept byte for byte.
//
// Run it with `go generate ./schema/...` (the directive is in
// schema/codes.go); it needs only Go and the module proxy. The test
// TestGeneratedFilesAreFresh regenerates every file in memory and fails
// while one on disk differs.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	root, err := moduleRoot()
	if err == nil {
		err = write(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gencodes:", err)
		os.Exit(1)
	}
}

// write regenerates every output under root, writing only those that
// changed.
func write(root string) error {
	if err := check(); err != nil {
		return err
	}
	for _, o := range outputs() {
		path := filepath.Join(root, filepath.FromSlash(o.path))
		old, err := os.ReadFile(path)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && o.whole) {
			return err
		}
		out, err := o.gen(old)
		if err != nil {
			return fmt.Errorf("%s: %w", o.path, err)
		}
		if bytes.Equal(old, out) {
			continue
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleRoot is the nearest directory at or above the working directory
// holding go.mod (go generate runs the command in schema/).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// output is one generated file: whole (written entirely from the table)
// or a hand-written file whose generated members gen replaces in old.
type output struct {
	path  string
	whole bool
	gen   func(old []byte) ([]byte, error)
}

func outputs() []output {
	return []output{
		{path: "schema/codes_gen.go", whole: true, gen: func([]byte) ([]byte, error) { return schemaGo() }},
		{path: "metrics/labels_gen.go", whole: true, gen: func([]byte) ([]byte, error) { return metricsGo() }},
		{path: "schema/jsonschema/defs.json", gen: defsJSON},
		{path: "schema/jsonschema/outcome.json", gen: outcomeJSON},
	}
}
