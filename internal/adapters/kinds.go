package adapters

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/nats-io/nats.go"
	"github.com/zclconf/go-cty/cty"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Adapter kinds built in.
const (
	KindNATS = "nats"
	KindHTTP = "http"
	KindFake = "fake"
)

// DefaultTimeout bounds a call when a provider sets no timeout.
const DefaultTimeout = 10 * time.Second

// Settings are an adapter kind's own part of a provider block: the
// attributes and blocks only that kind takes, decoded by the kind, and what
// it builds the provider's adapter from.
type Settings interface {
	// Kind is the adapter kind the settings belong to.
	Kind() string
	// New builds provider p's adapter.
	New(p Provider, env Env) (Adapter, error)
	// Encode writes the settings into a provider block (for `processor
	// validate`'s normalized output and the config round trip).
	Encode(b *hclwrite.Body)
}

// Provider is what every adapter is built with, whatever its kind.
type Provider struct {
	Name string
	// Timeout bounds one dispatch or reconcile call (≤ 0: DefaultTimeout).
	Timeout time.Duration
}

// Env is what the processor lends adapters.
type Env struct {
	// NC carries the nats adapter's requests.
	NC       *nats.Conn
	Subjects subjects.Subjects
	// Now is the processor's clock (nil: the wall clock): the fake reads
	// not_after_ms against it.
	Now func() time.Time
}

// Kind is one adapter kind: its name (a provider block's `adapter`) and
// how it decodes the rest of a provider block. A new adapter is one
// package that calls Register from its init function.
type Kind struct {
	Name string
	// Decode reads the kind's own attributes and blocks from body (the
	// provider block without the attributes every provider has); an
	// attribute or block the kind does not take is an error. An empty body
	// gives the kind's defaults. Diagnostics carry body's source ranges.
	Decode func(body hcl.Body) (Settings, hcl.Diagnostics)
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// Register adds an adapter kind; it panics on a duplicate name (a
// programming error, found at start).
func Register(k Kind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kinds[k.Name]; dup || k.Name == "" || k.Decode == nil {
		panic(fmt.Sprintf("adapters: kind %q registered twice or incomplete", k.Name))
	}
	kinds[k.Name] = k
}

// Lookup returns the adapter kind of that name.
func Lookup(name string) (Kind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[name]
	return k, ok
}

// Kinds lists the registered kinds' names, sorted.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Defaults are kind's settings for a provider block without any of its
// own attributes.
func Defaults(kind string) (Settings, error) {
	k, ok := Lookup(kind)
	if !ok {
		return nil, fmt.Errorf("adapters: unknown adapter kind %q (known: %v)", kind, Kinds())
	}
	s, diags := k.Decode(hcl.EmptyBody())
	if diags.HasErrors() {
		return nil, fmt.Errorf("adapters: %s has no defaults: %w", kind, diags)
	}
	return s, nil
}

// Build makes provider p's adapter of kind from s (nil: the kind's
// defaults).
func Build(kind string, s Settings, p Provider, env Env) (Adapter, error) {
	if s == nil {
		var err error
		if s, err = Defaults(kind); err != nil {
			return nil, fmt.Errorf("adapters: provider %q: %w", p.Name, err)
		}
	}
	if s.Kind() != kind {
		return nil, fmt.Errorf("adapters: provider %q: %s settings for a %s adapter", p.Name, s.Kind(), kind)
	}
	return s.New(p, env)
}

func init() {
	Register(Kind{Name: KindNATS, Decode: decodeNATS})
	Register(Kind{Name: KindHTTP, Decode: decodeHTTP})
	Register(Kind{Name: KindFake, Decode: decodeFake})
}

// NATSSettings are the nats adapter's: it takes nothing of its own.
type NATSSettings struct{}

// Kind implements Settings.
func (NATSSettings) Kind() string { return KindNATS }

// New implements Settings.
func (NATSSettings) New(p Provider, env Env) (Adapter, error) {
	return NewNATS(p.Name, env.NC, env.Subjects, p.Timeout)
}

// Encode implements Settings.
func (NATSSettings) Encode(*hclwrite.Body) {}

func decodeNATS(body hcl.Body) (Settings, hcl.Diagnostics) {
	var none struct{}
	return NATSSettings{}, gohcl.DecodeBody(body, nil, &none)
}

// HTTPSettings are the http adapter's.
type HTTPSettings struct {
	// BaseURL is the endpoint root: an absolute http:// or https:// URL
	// without query or fragment (required).
	BaseURL string
}

// Kind implements Settings.
func (HTTPSettings) Kind() string { return KindHTTP }

// New implements Settings.
func (s HTTPSettings) New(p Provider, _ Env) (Adapter, error) {
	return NewHTTP(p.Name, s.BaseURL, p.Timeout)
}

// Encode implements Settings.
func (s HTTPSettings) Encode(b *hclwrite.Body) {
	b.SetAttributeValue("base_url", cty.StringVal(s.BaseURL))
}

// validBaseURL reports whether u can be an http adapter's base_url.
func validBaseURL(u string) bool {
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "http" || p.Scheme == "https") && p.Host != "" && p.RawQuery == "" && p.Fragment == ""
}

func decodeHTTP(body hcl.Body) (Settings, hcl.Diagnostics) {
	var raw struct {
		BaseURL *string `hcl:"base_url,optional"`
	}
	diags := gohcl.DecodeBody(body, nil, &raw)
	if diags.HasErrors() {
		return nil, diags
	}
	s := HTTPSettings{}
	if raw.BaseURL != nil {
		s.BaseURL = *raw.BaseURL
	}
	if !validBaseURL(s.BaseURL) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid value for base_url",
			Detail:   "the http adapter needs an http:// or https:// base_url without query or fragment",
			Subject:  attrRange(body, "base_url"),
		})
	}
	return s, diags
}

// FakeScript is the fake adapter's settings: the outcomes it returns for
// successive calls, the last one repeating. Empty lists mean "confirmed".
type FakeScript struct {
	Dispatch  []string
	Reconcile []string
}

// Kind implements Settings.
func (FakeScript) Kind() string { return KindFake }

// New implements Settings.
func (s FakeScript) New(p Provider, env Env) (Adapter, error) {
	f := NewFake(p.Name, s)
	f.SetClock(env.Now)
	return f, nil
}

// Encode implements Settings.
func (s FakeScript) Encode(b *hclwrite.Body) {
	sb := b.AppendNewBlock("script", nil).Body()
	sb.SetAttributeValue("dispatch", stringList(s.Dispatch))
	sb.SetAttributeValue("reconcile", stringList(s.Reconcile))
}

func decodeFake(body hcl.Body) (Settings, hcl.Diagnostics) {
	var raw struct {
		Script *struct {
			Dispatch  *[]string `hcl:"dispatch,optional"`
			Reconcile *[]string `hcl:"reconcile,optional"`
			Body      hcl.Body  `hcl:",body"`
		} `hcl:"script,block"`
	}
	s := FakeScript{Dispatch: []string{schema.ReplyConfirmed}, Reconcile: []string{schema.ReplyConfirmed}}
	diags := gohcl.DecodeBody(body, nil, &raw)
	if diags.HasErrors() || raw.Script == nil {
		return s, diags
	}
	check := func(attr string, v *[]string, reconcile bool) []string {
		if v == nil {
			return nil
		}
		bad := func(detail string) {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError, Summary: "Invalid value for " + attr, Detail: detail,
				Subject: attrRange(raw.Script.Body, attr),
			})
		}
		if len(*v) == 0 {
			bad("list at least one outcome")
		}
		for _, o := range *v {
			if r := (schema.AdapterReply{Outcome: o}); !r.Valid(reconcile) {
				bad(fmt.Sprintf("%q is not a %s outcome", o, attr))
			}
		}
		return slices.Clone(*v)
	}
	if v := check("dispatch", raw.Script.Dispatch, false); v != nil {
		s.Dispatch = v
	}
	if v := check("reconcile", raw.Script.Reconcile, true); v != nil {
		s.Reconcile = v
	}
	return s, diags
}

// stringList is v as an HCL list of strings.
func stringList(v []string) cty.Value {
	if len(v) == 0 {
		return cty.ListValEmpty(cty.String)
	}
	out := make([]cty.Value, len(v))
	for i, x := range v {
		out[i] = cty.StringVal(x)
	}
	return cty.ListVal(out)
}

// attrRange is where attr is written in body, or body's range.
func attrRange(body hcl.Body, attr string) *hcl.Range {
	if attrs, _ := body.JustAttributes(); attrs != nil {
		if a, ok := attrs[attr]; ok {
			return a.Range.Ptr()
		}
	}
	if sb, ok := body.(interface{ MissingItemRange() hcl.Range }); ok {
		r := sb.MissingItemRange()
		return &r
	}
	return nil
}
