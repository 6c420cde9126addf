package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/keyfile"
)

// ErrConfiguresNothing is returned by Check for a file without a single
// block or attribute: every key would take its default, which is almost
// certainly not what its author meant (the wrong file, or an empty one).
var ErrConfiguresNothing = errors.New("configures nothing: it has no blocks or attributes, so every key takes its default (config.example.hcl shows them all)")

// Check is Load and then what `processor validate` adds to it: that the
// file configures something, and that every file it names exists, can be
// read and holds what it should — nats.credentials (a .creds file or an
// nkey seed), nats.tls's cert_file and key_file (a certificate and its
// key), ca_file (PEM certificates), internal.key_file when it exists (it
// is created at the first start otherwise). Problems are diagnostics with
// file:line, like Load's. Relative paths are taken from the current
// directory, as the processor started there would take them.
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
		return c, fmt.Errorf("%s %w", path, ErrConfiguresNothing)
	}
	var d diags
	for _, ref := range c.fileRefs() {
		if msg := ref.check(c); msg != "" {
			if r := findAttr(body, ref.block, ref.attr); r != nil {
				d.atRange(*r, "Unusable file for "+ref.attr, "%s", msg)
			} else {
				d.Diagnostics = append(d.Diagnostics, &hcl.Diagnostic{Severity: hcl.DiagError,
					Summary: "Unusable file for " + ref.name(), Detail: msg})
			}
		}
	}
	if d.HasErrors() {
		return c, newError(d.Diagnostics)
	}
	return c, nil
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
