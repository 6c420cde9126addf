package rules

import (
	"fmt"
	"go/types"
	"sort"
	"strings"
)

// Module is the module path; rules name packages relative to it.
const Module = "github.com/portcullis/portcullis"

// A Layer is a set of packages, named by path relative to Module: "a/b" is
// that package, "a/b/..." is a/b and every package below it. A package
// belongs to the layer of its most specific pattern.
type Layer struct {
	Name     string
	Packages []string
}

// Layers lists the module bottom-up, as docs/development.md draws it. A
// package may import packages of its own layer and of the layers below.
var Layers = []Layer{
	{"wire", []string{
		"schema/...", "subjects", "fingerprint", "metrics/version", "kv/dirlock",
		"stages/adapter", "stages/fault", "stages/policy",
		"internal/seal", "internal/natscluster", "internal/adapters", "internal/fixtures",
	}},
	{"configuration, metrics, clients", []string{
		"internal/config", "internal/natsauth", "metrics", "client",
	}},
	{"state", []string{
		"kv/...", "internal/retention", "internal/shares",
	}},
	{"pipeline", []string{"stages/..."}},
	{"assembly and operator API", []string{
		"internal/engine", "internal/admin", "internal/console",
		"internal/migrate", "internal/sim",
	}},
	{"front ends and test harness", []string{
		"internal/mcp", "internal/demo", "internal/bench", "testenv/...",
		"internal/testenv/...", "internal/history", "internal/partition",
	}},
	{"commands and system tests", []string{
		"cmd/...", "internal/crashtest", "internal/clustertest",
		"internal/attack", "internal/rules",
	}},
}

// Shared are the packages under stages/ that are not stages: what more
// than one stage needs (a stage may not import another), public so that
// a stage needs nothing of internal/.
var Shared = []string{"stages/adapter", "stages/fault", "stages/policy"}

// FrontEnd is the one public package that may import internal/: testenv
// runs the whole processor for a host's or a connector's integration
// tests, as cmd/processor does, so it sits above internal/ in the layers;
// its exported API names only public types (Exposed checks that).
var FrontEnd = []string{"testenv"}

// Backends are the storage backends and what they are built from: a stage
// reaches state through the kv interfaces only.
var Backends = []string{
	"kv/pebble/...", "kv/jetstream/...", "github.com/cockroachdb/pebble/...",
}

// Operator is the operator code: it reads and settles state, never
// running a stage's logic itself.
var Operator = []string{"internal/admin/...", "internal/console/..."}

// Known are the violations the module still has, each exactly as Check or
// Exposed words it: a ratchet, not a waiver. TestModule fails on any
// violation not listed here, and on any listed one that is gone (remove it
// then), so the list only shrinks. What is left and why is in
// docs/development.md ("Rules that keep the layout").
var Known = []string{}

// A Package is one node of the import graph: its path relative to Module
// and the paths it imports (module packages relative, others in full).
type Package struct {
	Path    string
	Imports []string
}

// Rel returns p relative to Module, or p unchanged when it is outside.
func Rel(p string) string {
	if p == Module {
		return "."
	}
	return strings.TrimPrefix(p, Module+"/")
}

// match reports how specifically pattern names path: 0 not at all, else
// the pattern's length plus one for an exact match (so "a/b" beats
// "a/...").
func match(pattern, path string) int {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		if path == base || strings.HasPrefix(path, base+"/") {
			return len(base)
		}
		return 0
	}
	if path == pattern {
		return len(pattern) + 1
	}
	return 0
}

func matchesAny(patterns []string, path string) bool {
	for _, p := range patterns {
		if match(p, path) > 0 {
			return true
		}
	}
	return false
}

// LayerOf returns the index into layers of path's layer, or -1.
func LayerOf(layers []Layer, path string) int {
	best, at := 0, -1
	for i, l := range layers {
		for _, p := range l.Packages {
			if m := match(p, path); m > best {
				best, at = m, i
			}
		}
	}
	return at
}

// stageOf returns the stage a package belongs to ("dispatch" for
// stages/dispatch and below), or "" for the runner, the Shared packages and
// everything else.
func stageOf(path string) string {
	rest, ok := strings.CutPrefix(path, "stages/")
	if !ok || matchesAny(Shared, path) {
		return ""
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}

// Check returns every violation of the import rules in graph, sorted:
// packages in no layer, upward imports, a public package importing
// internal/ (but FrontEnd), a stage importing another stage or a backend,
// a package under stages/ reaching a backend through any chain of imports,
// operator code importing a stage.
func Check(layers []Layer, graph []Package) []string {
	var out []string
	inModule := map[string]bool{}
	for _, p := range graph {
		inModule[p.Path] = true
	}
	out = append(out, reachedBackends(graph)...)
	for _, p := range graph {
		from := LayerOf(layers, p.Path)
		if from < 0 {
			out = append(out, fmt.Sprintf("%s: in no layer: add it to rules.Layers and to docs/development.md's layout", p.Path))
		}
		stage := stageOf(p.Path)
		public := Public(p.Path) && !matchesAny(FrontEnd, p.Path)
		for _, imp := range p.Imports {
			if public && match("internal/...", imp) > 0 {
				out = append(out, fmt.Sprintf("%s imports %s: a public package imports nothing of internal/ (testenv, the front end, alone may)", p.Path, imp))
			}
			if inModule[imp] && from >= 0 {
				if to := LayerOf(layers, imp); to > from {
					out = append(out, fmt.Sprintf("%s (%s) imports %s (%s): upward", p.Path, layers[from].Name, imp, layers[to].Name))
				}
			}
			if stage != "" {
				if other := stageOf(imp); other != "" && other != stage {
					out = append(out, fmt.Sprintf("%s imports %s: a stage imports no other stage (its successor comes from the pipeline table)", p.Path, imp))
				}
				if matchesAny(Backends, imp) {
					out = append(out, fmt.Sprintf("%s imports %s: a stage imports no storage backend (only the kv interfaces)", p.Path, imp))
				}
			}
			if matchesAny(Operator, p.Path) && stageOf(imp) != "" {
				out = append(out, fmt.Sprintf("%s imports %s: operator code imports no stage", p.Path, imp))
			}
		}
	}
	sort.Strings(out)
	return out
}

// reachedBackends returns a violation for each package under stages/
// (the runner too) whose dependencies, direct or not, hold a backend:
// what `go list -deps` of it would list. A direct import by a stage is
// Check's own violation already, so only a backend reached through
// another package is named here, with the chain that reaches it.
func reachedBackends(graph []Package) []string {
	imports := map[string][]string{}
	for _, p := range graph {
		imports[p.Path] = p.Imports
	}
	var out []string
	for _, p := range graph {
		if match("stages/...", p.Path) == 0 {
			continue
		}
		// Breadth first, so that each backend is named with a shortest
		// chain; via[x] is the package x was reached from.
		via := map[string]string{p.Path: ""}
		queue := []string{p.Path}
		for len(queue) > 0 {
			at := queue[0]
			queue = queue[1:]
			for _, imp := range imports[at] {
				if _, seen := via[imp]; seen {
					continue
				}
				via[imp] = at
				if matchesAny(Backends, imp) {
					if at == p.Path && stageOf(p.Path) != "" {
						continue // a stage's own import: Check names it
					}
					chain := []string{imp}
					for x := at; x != ""; x = via[x] {
						chain = append([]string{x}, chain...)
					}
					out = append(out, fmt.Sprintf("%s depends on %s (%s): no package under stages/ depends on a storage backend, even indirectly (only the kv interfaces)",
						p.Path, imp, strings.Join(chain, " -> ")))
					continue // what the backend imports is its own business
				}
				queue = append(queue, imp)
			}
		}
	}
	return out
}

// Public reports whether a module package is public: it has no internal
// path element and is not a command.
func Public(path string) bool {
	for _, el := range strings.Split(path, "/") {
		if el == "internal" {
			return false
		}
	}
	return match("cmd/...", path) == 0
}

// Exposed returns, sorted, every exported declaration of pkg whose type
// names a type of an internal package: "Decl: names pkg/path.Type". A
// named type from elsewhere is not looked into (its own package answers
// for it), only its type arguments.
func Exposed(pkg *types.Package) []string {
	var out []string
	seen := map[string]bool{}
	report := func(decl string, t types.Type) {
		for _, n := range internalNames(t) {
			if line := decl + ": names " + n; !seen[line] {
				seen[line] = true
				out = append(out, line)
			}
		}
	}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch o := obj.(type) {
		case *types.TypeName:
			if o.IsAlias() {
				report(name, o.Type())
				continue
			}
			named, ok := o.Type().(*types.Named)
			if !ok {
				continue
			}
			report(name, exportedPart(named.Underlying()))
			for i := 0; i < named.NumMethods(); i++ {
				if m := named.Method(i); m.Exported() {
					report(name+"."+m.Name(), m.Type())
				}
			}
		default:
			report(name, obj.Type())
		}
	}
	sort.Strings(out)
	return out
}

// exportedPart returns the part of a type's definition a user can see:
// a struct's exported fields only; anything else whole.
func exportedPart(t types.Type) types.Type {
	s, ok := t.(*types.Struct)
	if !ok {
		return t
	}
	var fields []*types.Var
	for i := 0; i < s.NumFields(); i++ {
		if f := s.Field(i); f.Exported() {
			fields = append(fields, f)
		}
	}
	return types.NewStruct(fields, nil)
}

func internalNames(t types.Type) []string {
	var out []string
	visited := map[types.Type]bool{}
	var walk func(types.Type)
	walk = func(t types.Type) {
		if t == nil || visited[t] {
			return
		}
		visited[t] = true
		switch t := t.(type) {
		case *types.Named:
			if obj := t.Obj(); obj.Pkg() != nil && !Public(Rel(obj.Pkg().Path())) && strings.HasPrefix(obj.Pkg().Path(), Module+"/") {
				out = append(out, obj.Pkg().Path()+"."+obj.Name())
			}
			for i := 0; i < t.TypeArgs().Len(); i++ {
				walk(t.TypeArgs().At(i))
			}
		case *types.Alias:
			walk(types.Unalias(t))
		case *types.Pointer:
			walk(t.Elem())
		case *types.Slice:
			walk(t.Elem())
		case *types.Array:
			walk(t.Elem())
		case *types.Chan:
			walk(t.Elem())
		case *types.Map:
			walk(t.Key())
			walk(t.Elem())
		case *types.Signature:
			walk(t.Params())
			walk(t.Results())
			if tp := t.TypeParams(); tp != nil {
				for i := 0; i < tp.Len(); i++ {
					walk(tp.At(i).Constraint())
				}
			}
		case *types.Tuple:
			for i := 0; i < t.Len(); i++ {
				walk(t.At(i).Type())
			}
		case *types.Struct:
			for i := 0; i < t.NumFields(); i++ {
				walk(t.Field(i).Type())
			}
		case *types.Interface:
			for i := 0; i < t.NumMethods(); i++ {
				if m := t.Method(i); m.Exported() {
					walk(m.Type())
				}
			}
			for i := 0; i < t.NumEmbeddeds(); i++ {
				walk(t.EmbeddedType(i))
			}
		case *types.Union:
			for i := 0; i < t.Len(); i++ {
				walk(t.Term(i).Type())
			}
		case *types.TypeParam:
			walk(t.Constraint())
		}
	}
	walk(t)
	return out
}
