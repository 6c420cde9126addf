package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCheckCatchesPlanted plants each kind of import violation in a
// made-up graph and checks that Check names it — and that a graph obeying
// every rule passes.
func TestCheckCatchesPlanted(t *testing.T) {
	clean := []Package{
		{Path: "schema"},
		{Path: "kv", Imports: []string{"schema"}},
		{Path: "kv/pebble", Imports: []string{"kv", "kv/pebble/internal/keys", "github.com/cockroachdb/pebble/v2"}},
		{Path: "kv/pebble/internal/keys"},
		{Path: "stages/policy", Imports: []string{"schema"}},
		{Path: "internal/config", Imports: []string{"stages/policy"}},
		{Path: "stages", Imports: []string{"kv", "schema"}},
		{Path: "stages/dispatch", Imports: []string{"stages", "stages/policy", "kv", "schema", "fmt"}},
		{Path: "internal/admin", Imports: []string{"kv", "stages"}},
		{Path: "internal/engine", Imports: []string{"stages/dispatch", "kv/pebble", "internal/admin"}},
		{Path: "cmd/processor", Imports: []string{"internal/engine"}},
		{Path: "internal/testenv", Imports: []string{"internal/engine"}},
		{Path: "testenv", Imports: []string{"internal/testenv", "schema"}},
	}
	if got := Check(Layers, clean); len(got) != 0 {
		t.Fatalf("a clean graph has violations: %q", got)
	}
	plant := func(path, imp string) []Package {
		g := slices.Clone(clean)
		for i := range g {
			if g[i].Path == path {
				g[i].Imports = append(slices.Clone(g[i].Imports), imp)
				return g
			}
		}
		return append(g, Package{Path: path, Imports: []string{imp}})
	}
	for _, tc := range []struct {
		name  string
		graph []Package
		want  string
	}{
		{"upward", plant("kv", "stages"), "kv (state) imports stages (pipeline): upward"},
		{"upward to a command", plant("internal/engine", "cmd/processor"), "internal/engine (assembly and operator API) imports cmd/processor"},
		{"a stage imports a stage", plant("stages/dispatch", "stages/reconciliation"), "a stage imports no other stage"},
		{"a stage's subpackage imports a stage", plant("stages/dispatch/wire", "stages/grounding"), "stages/dispatch/wire imports stages/grounding"},
		{"a stage imports a backend", plant("stages/dispatch", "kv/pebble"), "a stage imports no storage backend"},
		{"a stage imports Pebble", plant("stages/dispatch", "github.com/cockroachdb/pebble/v2"), "a stage imports no storage backend"},
		{"a stage imports a backend", plant("stages/grounding", "kv/jetstream"), "a stage imports no storage backend"},
		{"operator code imports a stage", plant("internal/admin", "stages/reconciliation"), "operator code imports no stage"},
		{"console imports a stage", plant("internal/console", "stages/dispatch"), "operator code imports no stage"},
		{"a public package imports internal", plant("client", "internal/seal"), "client imports internal/seal: a public package imports nothing of internal/"},
		{"a stage imports internal", plant("stages/dispatch", "internal/adapters"), "stages/dispatch imports internal/adapters: a public package imports nothing of internal/"},
		{"the runner imports internal", plant("stages", "internal/seal"), "stages imports internal/seal: a public package imports nothing of internal/"},
		{"a public subpackage imports internal", plant("schema/jsonschema", "internal/config"), "schema/jsonschema imports internal/config: a public package imports nothing of internal/"},
		{"a package beside testenv imports internal", plant("testenv/helpers", "internal/testenv"), "testenv/helpers imports internal/testenv: a public package imports nothing of internal/"},
		{"a package in no layer", append(slices.Clone(clean), Package{Path: "internal/newthing"}), "internal/newthing: in no layer"},
		{"a stage reaches a backend through kv", plant("kv", "kv/pebble"), "stages/dispatch depends on kv/pebble (stages/dispatch -> kv -> kv/pebble)"},
		{"the runner reaches a backend through kv", plant("kv", "kv/pebble"), "stages depends on kv/pebble (stages -> kv -> kv/pebble)"},
		{"the runner imports a backend", plant("stages", "kv/jetstream"), "stages depends on kv/jetstream (stages -> kv/jetstream)"},
		{"a stage reaches Pebble itself", plant("kv", "github.com/cockroachdb/pebble/v2"), "stages/dispatch depends on github.com/cockroachdb/pebble/v2 (stages/dispatch -> kv -> github.com/cockroachdb/pebble/v2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(Layers, tc.graph)
			if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, tc.want) }) {
				t.Fatalf("violations %q do not name %q", got, tc.want)
			}
		})
	}
}

func TestLayerOfMostSpecific(t *testing.T) {
	layers := []Layer{{"low", []string{"a/..."}}, {"high", []string{"a/b"}}}
	for path, want := range map[string]int{"a": 0, "a/c": 0, "a/b": 1, "a/b/c": 0, "ab": -1} {
		if got := LayerOf(layers, path); got != want {
			t.Errorf("LayerOf(%q) = %d, want %d", path, got, want)
		}
	}
}

// TestExposedCatchesPlanted type-checks a public package whose exported
// declarations name an internal type in every way one can, and one that
// only hides it, and checks that Exposed names exactly the first kind.
func TestExposedCatchesPlanted(t *testing.T) {
	fset := token.NewFileSet()
	check := func(path, src string, imp types.Importer) *types.Package {
		f, err := parser.ParseFile(fset, path+".go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg, err := (&types.Config{Importer: imp}).Check(path, fset, []*ast.File{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pkg
	}
	secret := check(Module+"/internal/secret", `package secret
type Record struct{ A int }
type Key string
`, nil)
	imp := importerFunc(func(path string) (*types.Package, error) {
		if path == secret.Path() {
			return secret, nil
		}
		return nil, errors.New("unknown package " + path)
	})
	pub := check(Module+"/pub", `package pub
import "github.com/portcullis/portcullis/internal/secret"
func Load() (*secret.Record, error) { return nil, nil }
type Handle struct {
	Name  string
	Recs  map[string][]secret.Record
	inner secret.Record
}
func (Handle) Get(k secret.Key) {}
func (Handle) get(k secret.Key) {}
type Alias = secret.Key
type Store interface{ Put(secret.Record) }
var Default *secret.Record
type Box[T any] struct{ V T }
var Boxed Box[secret.Key]
func hidden() secret.Record { return secret.Record{} }
type Clean struct{ s secret.Record }
func (Clean) Len() int { return hidden().A }
`, imp)
	got := Exposed(pub)
	want := []string{
		"Alias: names " + Module + "/internal/secret.Key",
		"Boxed: names " + Module + "/internal/secret.Key",
		"Default: names " + Module + "/internal/secret.Record",
		"Handle.Get: names " + Module + "/internal/secret.Key",
		"Handle: names " + Module + "/internal/secret.Record",
		"Load: names " + Module + "/internal/secret.Record",
		"Store: names " + Module + "/internal/secret.Record",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Exposed:\n got %q\nwant %q", got, want)
	}
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// listed is what `go list -json` says of one package.
type listed struct {
	ImportPath string
	Name       string
	Export     string
	Imports    []string
	Standard   bool
	Module     *struct{ Path string }
}

func goList(t *testing.T, args ...string) []listed {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e"}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return strings.TrimSuffix(strings.TrimSpace(string(out)), "/go.mod")
}

// TestModule checks the real module: every package in a layer, no upward
// import, no public package but testenv importing internal/, no stage
// importing a stage or a backend, no package under stages/ depending on a
// backend at all, no operator code
// importing a stage, no public package exposing an internal type.
func TestModule(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to read the module: %v", err)
	}
	var graph []Package
	var public []string
	for _, p := range goList(t, "-json=ImportPath,Name,Imports", "./...") {
		if p.ImportPath == Module || !strings.HasPrefix(p.ImportPath, Module+"/") {
			continue
		}
		n := Package{Path: Rel(p.ImportPath)}
		for _, imp := range p.Imports {
			n.Imports = append(n.Imports, Rel(imp))
		}
		graph = append(graph, n)
		if p.Name != "main" && Public(n.Path) {
			public = append(public, p.ImportPath)
		}
	}
	if len(graph) < 20 || len(public) < 5 {
		t.Fatalf("go list found %d packages, %d public: not the module", len(graph), len(public))
	}
	found := Check(Layers, graph)
	// Whether a stage depends on a backend is what `go list -deps` of it
	// says, so the packages outside the module count too: one that
	// imports a backend carries it into the stage.
	var deps []Package
	for _, p := range goList(t, "-deps", "-json=ImportPath,Imports,Standard", "./stages/...") {
		if p.Standard {
			continue
		}
		n := Package{Path: Rel(p.ImportPath)}
		for _, imp := range p.Imports {
			n.Imports = append(n.Imports, Rel(imp))
		}
		deps = append(deps, n)
	}
	for _, v := range reachedBackends(deps) {
		if !slices.Contains(found, v) {
			found = append(found, v)
		}
	}

	// The public signatures, from the compiler's export data (what `go
	// vet` has just built, so usually cached).
	exports := map[string]string{}
	for _, p := range goList(t, append([]string{"-deps", "-export", "-json=ImportPath,Export"}, public...)...) {
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file := exports[path]
		if file == "" {
			return nil, errors.New("no export data for " + path)
		}
		return os.Open(file)
	})
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Errorf("%s: reading its export data: %v", Rel(path), err)
			continue
		}
		for _, v := range Exposed(pkg) {
			found = append(found, fmt.Sprintf("%s.%s: a public package exposes no internal type", Rel(path), v))
		}
	}
	known := map[string]bool{}
	for _, k := range Known {
		known[k] = true
	}
	for _, v := range found {
		if !known[v] {
			t.Error(v)
		}
		delete(known, v)
	}
	for k := range known {
		t.Errorf("fixed, so remove it from rules.Known: %s", k)
	}
}
