package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/kv/dirlock"
	"github.com/portcullis/portcullis/schema/keyfile"
)

// ErrConfiguresNothing is returned by Check for a file without a single
// block or attribute: every key would take its default, which is almost
// certainly not what its author meant (the wrong file, or an empty one).
var ErrConfiguresNothing = errors.New("configures nothing: it has no blocks or attributes, so every key takes its default (config.example.hcl shows them all; processor init writes a small one)")

// Check is the one check of a configuration file that `processor
// validate`, `processor run --config`, `processor check --config` and
// `processor migrate` share, so that whatever one refuses the others
// refuse with the same file:line message: Load (syntax, keys, values and
// the rules between them, nats.url's scheme included), then
//
//   - that the file configures something (ErrConfiguresNothing);
//   - that every file it names exists, can be read and holds what it
//     should — nats.credentials (a .creds file or an nkey seed),
//     nats.tls's cert_file and key_file (a certificate and its key),
//     ca_file (PEM certificates), internal.key_file when it exists (it
//     is created at the first start otherwise);
//   - that no running processor holds its store.dir or its embedded
//     server's nats.store_dir (their lock files, dirlock): the holder is
//     named by its pid. A command that works beside a running processor
//     drops these with WithoutInUse.
//
// Problems are diagnostics with file:line, like Load's. Relative paths
// are taken from the current directory, as the processor started there
// would take them.
func Check(path string) (*Config, error) {
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, parsed := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if parsed.HasErrors() { // Load parsed it: unreachable
		return nil, newError(parsed)
	}
	body := f.Body.(*hclsyntax.Body)
	if len(body.Attributes) == 0 && len(body.Blocks) == 0 {
		return c, &Error{Diags: hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Configures nothing",
			Detail: strings.TrimPrefix(ErrConfiguresNothing.Error(), "configures nothing: "), Extra: nothing{},
			Subject: &hcl.Range{Filename: path, Start: hcl.InitialPos, End: hcl.InitialPos}}}}
	}
	var d diags
	for _, ref := range c.fileRefs() {
		if msg := ref.check(c); msg != "" {
			d.about(body, ref.block, ref.attr, "Unusable file for "+ref.attr, "Unusable file for "+ref.name(), msg, nil)
		}
	}
	for _, u := range c.dirs() {
		var he *dirlock.HeldError
		if errors.As(dirlock.Check(filepath.Join(u.dir, dirlock.Name)), &he) {
			d.about(body, u.block, u.attr, "Directory in use", "Directory in use", dirlock.InUse(u.dir, he.Holder(), u.name()), inUse{})
		}
	}
	if d.HasErrors() {
		return c, newError(d.Diagnostics)
	}
	return c, nil
}

// nothing marks the diagnostic of ErrConfiguresNothing (errors.Is).
type nothing struct{}

// inUse marks the diagnostic of a directory a running processor holds.
type inUse struct{}

// Is makes errors.Is(err, ErrConfiguresNothing) true for Check's error
// about an empty file.
func (e *Error) Is(target error) bool {
	return target == ErrConfiguresNothing && len(e.Diags) == 1 && e.Diags[0].Extra == nothing{}
}

// WithoutInUse is Check's error without its complaints about directories
// a running processor holds (nil when those were all): for a command that
// works beside the processor without opening its stores (processor check,
// fingerprint and propose with --config).
func WithoutInUse(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	var keep hcl.Diagnostics
	for _, d := range e.Diags {
		if d.Extra != (inUse{}) {
			keep = append(keep, d)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	return &Error{Diags: keep}
}

// about adds a problem with the value of attr in the nested blocks path,
// at its file:line when it is written there, else (a default) without a
// position, summarized whole.
func (d *diags) about(body *hclsyntax.Body, path []string, attr, summary, wholeSummary, detail string, extra any) {
	if r := findAttr(body, path, attr); r != nil {
		d.Diagnostics = append(d.Diagnostics, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: r, Extra: extra})
		return
	}
	d.Diagnostics = append(d.Diagnostics, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: wholeSummary, Detail: detail, Extra: extra})
}

// dirRef is a data directory a configuration names.
type dirRef struct {
	block []string
	attr  string
	dir   string
}

func (r dirRef) name() string { return strings.Join(append(slices.Clone(r.block), r.attr), ".") }

// dirs lists the directories a processor of c locks while it runs:
// store.dir (Pebble), and the embedded server's nats.store_dir.
func (c *Config) dirs() []dirRef {
	out := []dirRef{{block: []string{"store"}, attr: "dir", dir: c.Store.Dir}}
	if c.NATS.Embedded {
		out = append(out, dirRef{block: []string{"nats"}, attr: "store_dir", dir: c.NATS.StoreDir})
	}
	return out
}

// fileRef is a file a configuration names: where (block path and
// attribute) and what it must hold.
type fileRef struct {
	block []string // "nats", "tls"
	attr  string
	path  string
	kind  fileKind
	// optional: the file may be missing (it is made at the first start).
	optional bool
}

type fileKind int

const (
	fileCredentials fileKind = iota
	fileCert
	fileKey
	fileCA
	fileInternalKey
)

func (r fileRef) name() string {
	n := ""
	for _, b := range r.block {
		n += b + "."
	}
	return n + r.attr
}

// fileRefs lists the files c names.
func (c *Config) fileRefs() []fileRef {
	var refs []fileRef
	if c.NATS.Credentials != "" {
		refs = append(refs, fileRef{block: []string{"nats"}, attr: "credentials", path: c.NATS.Credentials, kind: fileCredentials})
	}
	if t := c.NATS.TLS; t != nil {
		for _, f := range []struct {
			attr, path string
			kind       fileKind
		}{{"cert_file", t.CertFile, fileCert}, {"key_file", t.KeyFile, fileKey}, {"ca_file", t.CAFile, fileCA}} {
			if f.path != "" {
				refs = append(refs, fileRef{block: []string{"nats", "tls"}, attr: f.attr, path: f.path, kind: f.kind})
			}
		}
	}
	return append(refs, fileRef{block: []string{"internal"}, attr: "key_file", path: c.InternalKeyFile(), kind: fileInternalKey, optional: true})
}

// check returns what is wrong with the file, or "".
func (r fileRef) check(c *Config) string {
	where := r.path
	if !filepath.IsAbs(r.path) {
		if wd, err := os.Getwd(); err == nil {
			where = fmt.Sprintf("%s (relative to %s)", r.path, wd)
		}
	}
	data, err := os.ReadFile(r.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && r.optional:
		return ""
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s does not exist", where)
	case err != nil:
		return fmt.Sprintf("%s cannot be read: %v", where, cause(err))
	}
	clear(data) // it may be a secret; the checks below read what they need
	switch r.kind {
	case fileCredentials:
		creds, err := keyfile.IsCreds(r.path)
		if err == nil && !creds {
			var kp nkeys.KeyPair
			if kp, err = keyfile.LoadSeed(r.path); err == nil {
				kp.Wipe()
			}
		}
		if err != nil {
			return cause(err)
		}
	case fileCert, fileKey:
		t := c.NATS.TLS
		if r.kind == fileKey || t.KeyFile == "" || t.CertFile == "" {
			return "" // the pair is checked once, at cert_file; a lone one is Load's to refuse
		}
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			return fmt.Sprintf("%s with key_file %s: %v", where, t.KeyFile, err)
		}
	case fileCA:
		pem, _ := os.ReadFile(r.path)
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Sprintf("%s holds no PEM certificate", where)
		}
	case fileInternalKey:
		if _, err := keyfile.LoadInternal(r.path); err != nil {
			return cause(err)
		}
	}
	return ""
}

// cause is an error's text without the package prefixes that say nothing
// to the reader of a configuration (the file is named in the text).
func cause(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), "keyfile: ")
}

// findAttr is the range of the value of attr inside the nested blocks
// path (first block of each type), or nil when it is not written there.
func findAttr(body *hclsyntax.Body, path []string, attr string) *hcl.Range {
	for _, typ := range path {
		var next *hclsyntax.Body
		for _, b := range body.Blocks {
			if b.Type == typ {
				next = b.Body
				break
			}
		}
		if next == nil {
			return nil
		}
		body = next
	}
	a, ok := body.Attributes[attr]
	if !ok {
		return nil
	}
	r := a.Expr.Range()
	return &r
}
