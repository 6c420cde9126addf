package jsonschema_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/schema/jsonschema"
	"github.com/portcullis/portcullis/stages/grounding"
)

// files holds every schema file decoded, by name.
func files(t *testing.T) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	entries, err := jsonschema.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, _ := jsonschema.FS.ReadFile(e.Name())
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out[e.Name()] = m
	}
	return out
}

// node is a schema object and the file it is in (for relative $refs).
type node struct {
	file string
	m    map[string]any
}

// at resolves a reference ("x.json", "x.json#/$defs/y", "#/$defs/y")
// relative to file.
func at(t *testing.T, fs map[string]map[string]any, file, ref string) node {
	t.Helper()
	f, frag, _ := strings.Cut(ref, "#")
	if f == "" {
		f = file
	}
	var cur any = fs[f]
	if cur == nil {
		t.Fatalf("no schema file %s", f)
	}
	for _, p := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if p == "" {
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: bad pointer %s", f, frag)
		}
		cur = m[p]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		t.Fatalf("%s#%s is not a schema object", f, frag)
	}
	return node{f, m}
}

// object follows $refs and nullable anyOf wrappers to the schema of a JSON
// object: the one with "properties".
func object(t *testing.T, fs map[string]map[string]any, n node, path string) node {
	t.Helper()
	for range 10 {
		if _, ok := n.m["properties"]; ok {
			return n
		}
		if r, ok := n.m["$ref"].(string); ok {
			n = at(t, fs, n.file, r)
			continue
		}
		var objs []node
		for _, key := range []string{"anyOf", "oneOf"} {
			branches, _ := n.m[key].([]any)
			for _, b := range branches {
				bm := b.(map[string]any)
				if bm["type"] == "null" {
					continue
				}
				objs = append(objs, node{n.file, bm})
			}
		}
		if len(objs) != 1 {
			t.Fatalf("%s: no single object schema in %v", path, n.m)
		}
		n = objs[0]
	}
	t.Fatalf("%s: $ref chain too long", path)
	return node{}
}

type field struct {
	name   string
	typ    reflect.Type
	always bool // present in every encoding
}

var rawType = reflect.TypeFor[jsontext.Value]()

// jsonFields lists a struct's JSON members as go-json-experiment encodes
// them: `json:"-"` fields are skipped; "omitzero" omits a zero value; and
// "omitempty" omits a value that encodes as "", null, [] or {} — so it
// never omits a number or a bool.
func jsonFields(t *testing.T, typ reflect.Type) []field {
	var out []field
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if f.Anonymous {
			// An embedded struct without a JSON name is inlined: its
			// members are the outer struct's, in its place.
			if name, _, _ := strings.Cut(tag, ","); name != "" || f.Type.Kind() != reflect.Struct {
				t.Fatalf("%s: embedded field %s: not handled", typ, f.Name)
			}
			out = append(out, jsonFields(t, f.Type)...)
			continue
		}
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		o := strings.Split(opts, ",")
		k := f.Type.Kind()
		emptyable := k == reflect.String || k == reflect.Slice || k == reflect.Map || k == reflect.Pointer || k == reflect.Interface
		always := !slices.Contains(o, "omitzero") && !(slices.Contains(o, "omitempty") && emptyable)
		out = append(out, field{name, f.Type, always})
	}
	return out
}

// zeroKeys are the members of a zero value's encoding.
func zeroKeys(t *testing.T, typ reflect.Type) []string {
	b, err := schema.Marshal(reflect.New(typ).Elem().Interface())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(m))
}

func strs(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	sort.Strings(out)
	return out
}

// agreement walks a Go type and its schema together.
type agreement struct {
	t  *testing.T
	fs map[string]map[string]any
	// input: a message the processor receives; its schema may leave
	// optional what the Go type always encodes, where lenient says so.
	input   bool
	lenient map[string]bool
	used    map[string]bool
	visited int
}

func (a *agreement) walk(path string, typ reflect.Type, n node) {
	t := a.t
	t.Helper()
	a.visited++
	fields := jsonFields(t, typ)
	var names, always []string
	for _, f := range fields {
		names = append(names, f.name)
		if f.always {
			always = append(always, f.name)
		}
	}
	sort.Strings(names)
	sort.Strings(always)
	if z := zeroKeys(t, typ); !slices.Equal(z, always) {
		t.Errorf("%s (%s): the tags say %v are always encoded, a zero value encodes %v", path, typ, always, z)
	}
	props, _ := n.m["properties"].(map[string]any)
	if got := slices.Sorted(maps.Keys(props)); !slices.Equal(got, names) {
		t.Errorf("%s (%s): schema properties %v, Go members %v", path, typ, got, names)
	}
	if n.m["additionalProperties"] != false {
		t.Errorf("%s (%s): additionalProperties is not false, but decoding is strict", path, typ)
	}
	var required []string
	if r, ok := n.m["required"]; ok {
		required = strs(r)
	}
	if !a.input {
		if !slices.Equal(required, always) {
			t.Errorf("%s (%s): schema requires %v, Go always encodes %v", path, typ, required, always)
		}
	} else {
		for _, r := range required {
			if !slices.Contains(always, r) {
				t.Errorf("%s (%s): schema requires %s, which the Go type may omit", path, typ, r)
			}
		}
		for _, m := range always {
			p := path + "." + m
			if !slices.Contains(required, m) {
				if !a.lenient[p] {
					t.Errorf("%s: the Go type always encodes it, the schema does not require it, and it is not listed as optional on input", p)
				}
				a.used[p] = true
			}
		}
	}
	for _, f := range fields {
		ft := f.typ
		p := path + "." + f.name
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		sub, ok := props[f.name].(map[string]any)
		if !ok {
			continue
		}
		switch {
		case ft == rawType:
		case ft.Kind() == reflect.Struct:
			a.walk(p, ft, object(t, a.fs, node{n.file, sub}, p))
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			arr := object2array(t, a.fs, node{n.file, sub}, p)
			items, _ := arr.m["items"].(map[string]any)
			a.walk(p+"[]", ft.Elem(), object(t, a.fs, node{arr.file, items}, p+"[]"))
		}
	}
}

// object2array follows $refs to an array schema (one with "items").
func object2array(t *testing.T, fs map[string]map[string]any, n node, path string) node {
	for range 10 {
		if _, ok := n.m["items"]; ok {
			return n
		}
		r, ok := n.m["$ref"].(string)
		if !ok {
			t.Fatalf("%s: no array schema", path)
		}
		n = at(t, fs, n.file, r)
	}
	t.Fatalf("%s: $ref chain too long", path)
	return node{}
}

// TestGoTypesAgree: for each wire type, the schema's properties are
// exactly its JSON members (json:"-" excluded), additionalProperties is
// false (decoding is strict), and the schema requires exactly the members
// the type always encodes — or, for input messages, a subset of them, the
// rest listed here as optional on input (the processor fills the default).
func TestGoTypesAgree(t *testing.T) {
	fs := files(t)
	lenient := map[string]bool{
		// SPEC §2.1: a missing payload is null; grant, spend and plan may
		// be omitted (null); display and requester are optional metadata.
		"proposal.grant":                                true,
		"proposal.intent.payload":                       true,
		"proposal.intent.external_spend":                true,
		"proposal.intent.protected_disclosure":          true,
		"proposal.intent.display":                       true,
		"proposal.intent.display.summary":               true,
		"proposal.grounding.observation_ref":            true,
		"proposal.grounding.candidates[].source":        true,
		"proposal.grounding.candidates[].evidence_refs": true,
		// README: require_reauthentication is false when omitted.
		"proposal.intent.protected_disclosure.require_reauthentication": true,
		"proposal.grant.max_external_spend":                             true,
		"grant.max_external_spend":                                      true,
		"candidate_reply.candidates[].source":                           true,
		"candidate_reply.candidates[].evidence_refs":                    true,
	}
	cases := []struct {
		name  string
		typ   reflect.Type
		ref   string
		input bool
	}{
		{"outcome", reflect.TypeFor[schema.Outcome](), "outcome.json", false},
		{"incident_event", reflect.TypeFor[schema.IncidentEvent](), "incident_event.json", false},
		{"incident", reflect.TypeFor[schema.Incident](), "defs.json#/$defs/incident", false},
		{"receipt", reflect.TypeFor[schema.Receipt](), "receipt.json", false},
		{"activity", reflect.TypeFor[schema.Activity](), "activity.json", false},
		{"dispatch_request", reflect.TypeFor[schema.DispatchRequest](), "dispatch_request.json", false},
		{"reconcile_request", reflect.TypeFor[schema.ReconcileRequest](), "reconcile_request.json", false},
		{"disclosure_request", reflect.TypeFor[schema.DisclosureRequest](), "disclosure_request.json", false},
		{"candidate_request", reflect.TypeFor[grounding.SourceRequest](), "candidate_request.json", false},
		{"proposal", reflect.TypeFor[schema.Proposal](), "proposal.json", true},
		{"grant", reflect.TypeFor[schema.Grant](), "grant.json#/$defs/inline", true},
		{"decline", reflect.TypeFor[schema.Decline](), "decline.json", true},
		{"adapter_reply", reflect.TypeFor[schema.AdapterReply](), "adapter_reply.json", true},
		{"candidate_reply", reflect.TypeFor[grounding.SourceReply](), "candidate_reply.json", true},
	}
	used := map[string]bool{}
	for _, c := range cases {
		a := &agreement{t: t, fs: fs, input: c.input, lenient: lenient, used: used}
		file, _, _ := strings.Cut(c.ref, "#")
		a.walk(c.name, c.typ, object(t, fs, at(t, fs, file, c.ref), c.name))
	}
	for p := range lenient {
		if !used[p] {
			t.Errorf("%s is listed as optional on input but is not", p)
		}
	}

	// The standalone grant is the inline one with proposal_id required.
	if got := strs(fs["grant.json"]["required"]); !slices.Equal(got, []string{"proposal_id"}) {
		t.Errorf("grant.json requires %v beyond the inline grant", got)
	}

	// DisclosureReply encodes both answers and refusals, every member
	// omitted when empty: its members are those of the two schemas.
	answer := at(t, fs, "disclosure_reply.json", "#/$defs/answer")
	refusal := at(t, fs, "disclosure_reply.json", "#/$defs/refusal")
	union := map[string]bool{}
	for _, n := range []node{answer, refusal} {
		if n.m["additionalProperties"] != false {
			t.Errorf("disclosure reply: additionalProperties is not false")
		}
		for k := range n.m["properties"].(map[string]any) {
			union[k] = true
		}
	}
	var goNames []string
	for _, f := range jsonFields(t, reflect.TypeFor[schema.DisclosureReply]()) {
		goNames = append(goNames, f.name)
		if f.always {
			t.Errorf("DisclosureReply.%s is always encoded; a reply omits what it does not say", f.name)
		}
	}
	if got := slices.Sorted(maps.Keys(union)); !slices.Equal(got, slices.Sorted(slices.Values(goNames))) {
		t.Errorf("disclosure reply: schema members %v, Go members %v", got, goNames)
	}
}

func enum(t *testing.T, fs map[string]map[string]any, file, ref string) []string {
	t.Helper()
	n := at(t, fs, file, ref)
	if c, ok := n.m["const"].(string); ok {
		return []string{c}
	}
	return strs(n.m["enum"])
}

func names[T ~string](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.Compact(s)
}

// TestEnumsMatchGo: every closed set in the schemas is the Go one.
func TestEnumsMatchGo(t *testing.T) {
	fs := files(t)
	var codes, kinds, truths []string
	for _, c := range schema.Codes() {
		codes = append(codes, string(c.Code))
	}
	for _, k := range schema.Kinds() {
		kinds = append(kinds, string(k))
		truths = append(truths, string(k.EffectTruth()))
	}
	var assurances []string
	for _, a := range []string{"none", "session", "biometric", "managed"} {
		if schema.AssuranceRank(a) >= 0 {
			assurances = append(assurances, a)
		}
	}
	cases := []struct {
		file, ref string
		want      []string
	}{
		{"defs.json", "#/$defs/phase", names(schema.Phases())},
		{"defs.json", "#/$defs/code", codes},
		{"defs.json", "#/$defs/kind", kinds},
		{"defs.json", "#/$defs/effect_truth", truths},
		{"defs.json", "#/$defs/dispatch_boundary", names([]schema.Boundary{schema.BoundaryNotInvoked, schema.BoundaryInvoked, schema.BoundaryUnknown})},
		{"defs.json", "#/$defs/receipt_status", names(schema.Statuses())},
		{"defs.json", "#/$defs/next_action", names([]schema.NextAction{schema.NextNone, schema.NextVerify, schema.NextReconcile})},
		{"defs.json", "#/$defs/adapter", []string{adapters.KindNATS, adapters.KindHTTP, adapters.KindFake}},
		{"defs.json", "#/$defs/authorization_method", schema.AuthorizationMethods()},
		{"defs.json", "#/$defs/assurance", assurances},
		{"defs.json", "#/$defs/field_class", schema.FieldClasses()},
		{"defs.json", "#/$defs/disclosure_source", []string{schema.SourceUserProfile, schema.SourceFictionalTestFixture}},
		{"defs.json", "#/$defs/environment", []string{schema.EnvMock, schema.EnvTest, schema.EnvLive}},
		{"adapter_reply.json", "#/properties/outcome", []string{schema.ReplyConfirmed, schema.ReplyAcknowledged, schema.ReplyRejected, schema.ReplyFailedBeforeDispatch, schema.ReplyIndeterminate}},
		{"activity.json", "#/properties/status", append([]string{schema.ActivityAwaitingApproval, schema.ActivityDenied, schema.ActivityAuthorized}, names(schema.Statuses())...)},
		{"activity.json", "#/$defs/policy_evaluation/properties/outcome", []string{schema.EvalPass, schema.EvalDeny}},
		{"proposal.json", "#/properties/schema", []string{schema.SchemaProposal}},
		{"grant.json", "#/$defs/inline/properties/schema", []string{schema.SchemaGrant}},
		{"decline.json", "#/properties/schema", []string{schema.SchemaDecline}},
		{"outcome.json", "#/properties/schema", []string{schema.SchemaOutcome}},
		{"activity.json", "#/properties/schema", []string{schema.SchemaActivity}},
		{"dispatch_request.json", "#/properties/schema", []string{schema.SchemaDispatch}},
		{"reconcile_request.json", "#/properties/schema", []string{schema.SchemaReconcile}},
		{"disclosure_request.json", "#/properties/schema", []string{schema.SchemaDisclosure}},
	}
	for _, c := range cases {
		if got, want := enum(t, fs, c.file, c.ref), sorted(c.want...); !slices.Equal(got, want) {
			t.Errorf("%s%s = %v, Go has %v", c.file, c.ref, got, want)
		}
	}
}

// TestCodeTable: the incident schemas accept exactly the (phase, code,
// boundary) rows of schema.Codes — all of them in an incident event, and
// those with an outcome kind inside an outcome.
func TestCodeTable(t *testing.T) {
	event, err := jsonschema.CompileRef("incident_event.json")
	if err != nil {
		t.Fatal(err)
	}
	inOutcome, err := jsonschema.CompileRef("defs.json#/$defs/incident")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[schema.Code]bool{"NOT_A_CODE": true}
	for _, c := range schema.Codes() {
		codes[c.Code] = true
	}
	for _, phase := range append(schema.Phases(), "nowhere") {
		for code := range codes {
			for _, b := range []schema.Boundary{schema.BoundaryNotInvoked, schema.BoundaryInvoked, schema.BoundaryUnknown} {
				info, ok := schema.LookupCode(phase, code)
				row := ok && info.Boundary == b
				inc := map[string]any{"phase": string(phase), "code": string(code), "dispatch_boundary": string(b)}
				if got := inOutcome(inc) == nil; got != (row && info.Kind != "") {
					t.Errorf("outcome incident %s/%s/%s: valid = %v, table row %v kind %q", phase, code, b, got, row, info.Kind)
				}
				inc["at_ms"] = json.Number("1")
				if got := event(inc) == nil; got != row {
					t.Errorf("incident event %s/%s/%s: valid = %v, table row %v", phase, code, b, got, row)
				}
			}
		}
	}
}

// TestKindTable: each kind is valid with its fixed effect truth and
// terminality (RECONCILIATION_REQUIRED: either) and with no other.
func TestKindTable(t *testing.T) {
	v, err := jsonschema.Default()
	if err != nil {
		t.Fatal(err)
	}
	statusOf := map[schema.Kind]schema.Status{}
	for _, s := range schema.Statuses() {
		r := schema.Receipt{Status: s}
		statusOf[r.OutcomeKind()] = s
	}
	truths := []schema.EffectTruth{schema.TruthNotDispatched, schema.TruthUnverified, schema.TruthPresent, schema.TruthAbsent, schema.TruthIndeterminate}
	for _, kind := range schema.Kinds() {
		o := schema.NewOutcome(schema.ProposalRef{Host: "h", ProposalID: "p-1"}, kind, 1)
		for _, c := range schema.Codes() {
			if c.Kind == kind && kind != schema.KindRejected {
				o.Incidents = []schema.Incident{schema.NewIncident(c.Phase, c.Code)}
				break
			}
		}
		if kind == schema.KindReconciliationRequired {
			o.Incidents = append(o.Incidents, schema.NewIncident(schema.PhaseReconciliation, schema.CodeReconcileExhausted))
		}
		if kind != schema.KindDenied && kind != schema.KindNeedsClarification && kind != schema.KindIntegrationFailure {
			o.Fingerprint, o.Referent = schema.StringPtr(fp), schema.StringPtr("sku-1")
		}
		if s, ok := statusOf[kind]; ok && kind != schema.KindDenied {
			r := doc(t, receiptJSON)
			r["status"] = s
			r["next_action"] = schema.NextNone
			if s == schema.StatusAcknowledged {
				r["next_action"] = schema.NextVerify
			}
			if s == schema.StatusFailedBeforeDispatch {
				r["dispatch_attempted"] = false
			}
			r["error_code"] = "X"
			b, _ := json.Marshal(r)
			var rc schema.Receipt
			if err := schema.Decode(b, &rc); err != nil {
				t.Fatal(err)
			}
			o.Receipt = &rc
		}
		if kind == schema.KindNeedsApproval {
			o.Approval = &schema.Approval{Fingerprint: fp, ExpiresAtMs: 2}
		}
		for _, truth := range truths {
			for _, terminal := range []bool{false, true} {
				o.EffectTruth, o.Terminal = truth, terminal
				want := truth == kind.EffectTruth() && (terminal == kind.Terminal() || kind == schema.KindReconciliationRequired)
				err := v.Validate(jsonschema.Outcome, schema.MustMarshal(o))
				if (err == nil) != want {
					t.Errorf("%s %s terminal=%v: valid = %v, want %v: %v", kind, truth, terminal, err == nil, want, err)
				}
			}
		}
	}
}
