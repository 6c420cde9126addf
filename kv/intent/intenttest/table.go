// Package intenttest reads and runs the transition tables of package
// intent (kv/intent/testdata/*.txt): one table per file, one transition
// per row, written for a person to read. The intent package's own test
// runs them, and so does the simulation (internal/sim), each against its
// own checks.
//
// A file holds comments (#), named states and rows:
//
//	state lost = done/timeout; poll 1 at=7000; reopen at=40000
//	before | event | after | told | incidents | effects
//
// A state is built from a fresh record (new) by its events, or from an
// earlier state named first. A row applies its event to its before state;
// the other cells are what intent.Apply must give (Render):
//
//   - after: the record's state (new, in_flight, not_invoked, done/<receipt
//     status>, lost) and what sets it apart: props= its proposals, by= the
//     in-flight record's writer, attempts= the in-flight records written,
//     code= the dispatch code that left the effect unknown, lost= the
//     redispatches, polls= the reconciliation attempts started, exhausted,
//     resolved= who settled it, ended= the proposals ended on it; "=" when
//     the event was refused (the record is unchanged);
//   - told: each outcome as <proposal>:<kind>[<incident codes>], "!" when
//     terminal, "(earlier)" when recorded_earlier; "-" none;
//   - incidents: the incident events, <phase>/<code>; "-" none;
//   - effects: write (the record changed), receipt (a receipt made),
//     poll=<n>@<ms>, cancel-poll,
//     announce, index+1/index-1, ended=<proposal>, redispatch=<n>, and for
//     a refusal refused=<reason> and retry=<wait>; "-" none.
//
// An event is a name and its words: the proposal (p1, p2…), a verdict or
// finding, and key=value options: at=<ms> (default 10000), poll_at=<ms>
// (default at+1000) and the event's own (see parseEvent).
package intenttest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/intent"
	"github.com/portcullis/portcullis/schema"
)

// Fingerprint is the fingerprint of every table's intent.
const Fingerprint = "sha256:5e00000000000000000000000000000000000000000000000000000000000001"

// Host is the host of every table's proposals.
const Host = "h"

// Row is one transition of a table.
type Row struct {
	File string
	Line int
	// Before, Event, After, Told, Incidents, Effects are the row's cells.
	Before, Event, After, Told, Incidents, Effects string
}

// Cells are a row's expected cells, or what a transition gave.
type Cells struct{ After, Told, Incidents, Effects string }

// Expected are the row's expected cells.
func (r Row) Expected() Cells {
	return Cells{After: r.After, Told: r.Told, Incidents: r.Incidents, Effects: r.Effects}
}

func (r Row) String() string {
	return fmt.Sprintf("%s:%d: %s | %s", filepath.Base(r.File), r.Line, r.Before, r.Event)
}

// Table is one file's states and rows.
type Table struct {
	File   string
	States map[string]kv.Intent
	Rows   []Row
	lines  []string
	rowAt  map[int]int // line index → row index
	header int         // the column names' line index
}

// Files are the tables in dir (its *.txt).
func Files(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return nil, fmt.Errorf("intenttest: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("intenttest: no tables in %s", dir)
	}
	return files, nil
}

// Load reads and parses one table, building its named states.
func Load(file string) (*Table, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("intenttest: %w", err)
	}
	defer f.Close()
	t := &Table{File: file, States: map[string]kv.Intent{"new": New()}, rowAt: map[int]int{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		t.lines = append(t.lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("intenttest: %s: %w", file, err)
	}
	header := false
	for i, line := range t.lines {
		s := strings.TrimSpace(line)
		switch {
		case s == "" || strings.HasPrefix(s, "#"):
		case strings.HasPrefix(s, "state "):
			name, def, ok := strings.Cut(strings.TrimPrefix(s, "state "), "=")
			if !ok {
				return nil, fmt.Errorf("%s:%d: a state is: state <name> = <events>", file, i+1)
			}
			rec, err := t.build(strings.TrimSpace(def))
			if err != nil {
				return nil, fmt.Errorf("%s:%d: state %s: %w", file, i+1, strings.TrimSpace(name), err)
			}
			t.States[strings.TrimSpace(name)] = rec
		case !header:
			header = true // the column names
			t.header = i
		default:
			cells := strings.Split(s, "|")
			if len(cells) != 6 {
				return nil, fmt.Errorf("%s:%d: a row has 6 cells, not %d", file, i+1, len(cells))
			}
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			t.rowAt[i] = len(t.Rows)
			t.Rows = append(t.Rows, Row{File: file, Line: i + 1, Before: cells[0], Event: cells[1],
				After: cells[2], Told: cells[3], Incidents: cells[4], Effects: cells[5]})
		}
	}
	return t, nil
}

// build applies a state's events, none of which may be refused.
func (t *Table) build(def string) (kv.Intent, error) {
	steps := strings.Split(def, ";")
	first := strings.TrimSpace(steps[0])
	rec, ok := t.States[first]
	if ok {
		steps = steps[1:]
	} else {
		rec = New()
	}
	for _, step := range steps {
		ev, err := ParseEvent(rec, strings.TrimSpace(step))
		if err != nil {
			return kv.Intent{}, err
		}
		var fx intent.Effects
		if rec, fx = intent.Apply(rec, ev); fx.Refused != nil {
			return kv.Intent{}, fmt.Errorf("%s: %w", step, fx.Refused)
		}
	}
	return rec, nil
}

// Before is the row's before state.
func (t *Table) Before(r Row) (kv.Intent, error) {
	rec, ok := t.States[r.Before]
	if !ok {
		return kv.Intent{}, fmt.Errorf("%s: no state %q", r, r.Before)
	}
	return rec, nil
}

// Transition is one row's before record, event, and what Apply made of it.
type Transition struct {
	Before, After kv.Intent
	Event         intent.Event
	Effects       intent.Effects
}

// Run applies the row's event to its before state.
func (t *Table) Run(r Row) (Transition, error) {
	rec, err := t.Before(r)
	if err != nil {
		return Transition{}, err
	}
	ev, err := ParseEvent(rec, r.Event)
	if err != nil {
		return Transition{}, fmt.Errorf("%s: %w", r, err)
	}
	after, fx := intent.Apply(rec, ev)
	return Transition{Before: rec, After: after, Event: ev, Effects: fx}, nil
}

// Rewrite writes the table back with got's cells in place of each row's
// (got[i] for Rows[i]), the columns aligned.
func (t *Table) Rewrite(got []Cells) error {
	rows := make([][]string, len(t.Rows))
	head := []string{"before", "event", "after", "told", "incidents", "effects"}
	width := make([]int, 6)
	for j, s := range head {
		width[j] = len(s)
	}
	for i, r := range t.Rows {
		c := got[i]
		rows[i] = []string{r.Before, r.Event, c.After, c.Told, c.Incidents, c.Effects}
		for j, s := range rows[i] {
			width[j] = max(width[j], len(s))
		}
	}
	var b strings.Builder
	for i, line := range t.lines {
		n, ok := t.rowAt[i]
		if !ok && i != t.header {
			b.WriteString(line + "\n")
			continue
		}
		cells := head
		if ok {
			cells = rows[n]
		}
		for j, s := range cells {
			if j == len(cells)-1 {
				b.WriteString(s)
				break
			}
			b.WriteString(s + strings.Repeat(" ", width[j]-len(s)) + " | ")
		}
		b.WriteString("\n")
	}
	if err := os.WriteFile(t.File, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("intenttest: %w", err)
	}
	return nil
}

// New is the record of the tables' intent before anything happened.
func New() kv.Intent {
	id := kv.Identity{
		Fingerprint:    Fingerprint,
		IdempotencyKey: kv.Hex(Fingerprint),
		Target: schema.Target{
			Provider:    "payments",
			Capability:  "refund",
			Operation:   "create",
			Environment: "test",
			Referent:    "order-1",
		},
	}
	return kv.NewIntent(id, "", 0)
}

// Ref is proposal name's reference.
func Ref(name string) schema.ProposalRef { return schema.ProposalRef{Host: Host, ProposalID: name} }

// ParseEvent reads an event for record rec (NotInvoked's lease defaults
// to rec's):
//
//	join p2
//	begin p1 by=A until=35000 [adapter=fake]
//	not_invoked p1 [lease=B]            (a lease by B: not the record's)
//	reply p1 <confirmed|acknowledged|rejected|failed_before_dispatch|indeterminate|timeout|error|unavailable>
//	interrupt p1 self=B [force]
//	deny p1 <phase>/<code> [redispatch=n] [ended=<phase>/<code>@<ms>]
//	end p1 <phase>/<code>
//	give_up p1 [redispatch=n]
//	poll <n>
//	finding <n> <confirmed|rejected|absent|unknown|exhausted|verified|unverified>
//	reopen
//	operator <present|absent> [examined=<receipt id|latest|other>] [observed=<ms>] [fence=<ms>] [by=<name>]
func ParseEvent(rec kv.Intent, s string) (intent.Event, error) {
	words := strings.Fields(s)
	if len(words) == 0 {
		return intent.Event{}, errors.New("no event")
	}
	ev := intent.Event{Kind: intent.Kind(words[0]), NowMs: 10000}
	var args []string
	opts := map[string]string{}
	for _, w := range words[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			opts[k] = v
		} else {
			args = append(args, w)
		}
	}
	num := func(key string, def int64) (int64, error) {
		v, ok := opts[key]
		if !ok {
			return def, nil
		}
		delete(opts, key)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s=%s: %w", key, v, err)
		}
		return n, nil
	}
	var err error
	if ev.NowMs, err = num("at", 10000); err != nil {
		return ev, err
	}
	if ev.PollAtMs, err = num("poll_at", ev.NowMs+1000); err != nil {
		return ev, err
	}
	r, err := num("redispatch", 0)
	if err != nil {
		return ev, err
	}
	ev.Redispatch = int(r)
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	if p := arg(0); len(p) > 1 && p[0] == 'p' && strings.Trim(p[1:], "0123456789") == "" {
		ev.Ref, args = Ref(p), args[1:]
	}
	switch ev.Kind {
	case intent.Join, intent.GiveUp, intent.Reopen:
	case intent.Begin:
		ev.By, ev.Adapter = opts["by"], "fake"
		delete(opts, "by")
		if a, ok := opts["adapter"]; ok {
			ev.Adapter = a
			delete(opts, "adapter")
		}
		if ev.UntilMs, err = num("until", ev.NowMs+30000); err != nil {
			return ev, err
		}
	case intent.NotInvoked:
		ev.Lease = intent.LeaseOf(rec)
		if by, ok := opts["lease"]; ok {
			ev.Lease.By = by
			delete(opts, "lease")
		}
	case intent.Reply:
		if ev.Verdict, err = dispatchVerdict(arg(0)); err != nil {
			return ev, err
		}
	case intent.Interrupt:
		ev.Self = opts["self"]
		delete(opts, "self")
		ev.Force = arg(0) == "force"
	case intent.Deny, intent.End:
		if ev.Phase, ev.Code, err = incident(arg(0)); err != nil {
			return ev, err
		}
		if e, ok := opts["ended"]; ok {
			delete(opts, "ended")
			inc, at, _ := strings.Cut(e, "@")
			var end kv.Ended
			if end.Phase, end.Code, err = incident(inc); err != nil {
				return ev, err
			}
			if end.AtMs, err = strconv.ParseInt(at, 10, 64); err != nil {
				return ev, fmt.Errorf("ended=%s: %w", e, err)
			}
			ev.Ended = &end
		}
	case intent.Poll, intent.Finding:
		n, err := strconv.Atoi(arg(0))
		if err != nil {
			return ev, fmt.Errorf("%s: the attempt's number: %w", ev.Kind, err)
		}
		ev.Attempt, ev.AttemptID = n, kv.AttemptID(Fingerprint, n)
		if ev.Kind == intent.Finding {
			if ev.Verdict, err = finding(rec, arg(1)); err != nil {
				return ev, err
			}
		}
	case intent.Operator:
		ev.Present = arg(0) == "present"
		ev.EvidenceRef, ev.Operator = "ticket:42", opts["by"]
		delete(opts, "by")
		switch ex := opts["examined"]; ex {
		case "", "latest":
			if ex == "latest" && rec.Receipt != nil {
				ev.Examined = rec.Receipt.ReceiptID
			}
		case "other":
			ev.Examined = kv.ReceiptID(Fingerprint, "other")
		default:
			ev.Examined = ex
		}
		delete(opts, "examined")
		if ev.ObservedAtMs, err = num("observed", 0); err != nil {
			return ev, err
		}
		if ev.AbsentAfterMs, err = num("fence", 0); err != nil {
			return ev, err
		}
	default:
		return ev, fmt.Errorf("unknown event %q", ev.Kind)
	}
	for k := range opts {
		return ev, fmt.Errorf("%s: unknown option %s", ev.Kind, k)
	}
	return ev, nil
}

func incident(s string) (schema.Phase, schema.Code, error) {
	p, c, ok := strings.Cut(s, "/")
	if !ok {
		return "", "", fmt.Errorf("%q: an incident is <phase>/<code>", s)
	}
	return schema.Phase(p), schema.Code(c), nil
}

// dispatchVerdict is the verdict of a provider's reply to dispatch, as
// stages/dispatch.MapDispatch makes it.
func dispatchVerdict(s string) (kv.Verdict, error) {
	inc := func(code schema.Code) []schema.Incident {
		return []schema.Incident{schema.NewIncident(schema.PhaseDispatch, code)}
	}
	unknown := func(code schema.Code) kv.Verdict {
		return kv.Verdict{Status: schema.StatusReconciliationRequired, NextAction: schema.NextReconcile, Attempted: true,
			Incidents: inc(code), ErrorCode: string(code)}
	}
	switch s {
	case "confirmed":
		return kv.Verdict{Status: schema.StatusConfirmed, NextAction: schema.NextNone, Attempted: true}, nil
	case "acknowledged":
		return kv.Verdict{Status: schema.StatusAcknowledged, NextAction: schema.NextVerify, Attempted: true}, nil
	case "rejected":
		return kv.Verdict{Status: schema.StatusRejected, NextAction: schema.NextNone, Attempted: true,
			Incidents: inc(schema.CodeProviderRejected), ErrorCode: string(schema.CodeProviderRejected)}, nil
	case "failed_before_dispatch":
		return kv.Verdict{Status: schema.StatusFailedBeforeDispatch, NextAction: schema.NextNone,
			Incidents: inc(schema.CodeProviderFailedBeforeDispatch), ErrorCode: string(schema.CodeProviderFailedBeforeDispatch)}, nil
	case "indeterminate":
		return unknown(schema.CodeProviderIndeterminate), nil
	case "timeout":
		return unknown(schema.CodeAdapterTimeout), nil
	case "error":
		return unknown(schema.CodeAdapterError), nil
	case "unavailable":
		return intent.Unavailable(), nil
	}
	return kv.Verdict{}, fmt.Errorf("unknown reply %q", s)
}

// finding is the verdict of a reconciliation attempt on rec's receipt, as
// stages/reconciliation.Decide makes it (max_attempts reached: exhausted).
func finding(rec kv.Intent, s string) (kv.Verdict, error) {
	v := kv.Verdict{EvidenceRefs: []string{}}
	if rec.Receipt != nil {
		v.Attempted, v.ProviderActionID = rec.Receipt.DispatchAttempted, rec.Receipt.ProviderActionID
	}
	settled := func(status schema.Status, attempted bool, code schema.Code) (kv.Verdict, error) {
		v.Status, v.Attempted, v.NextAction, v.Settled, v.Resolution = status, attempted, schema.NextNone, true, kv.ResolvedByProvider
		if code != "" {
			v.Incidents, v.ErrorCode = []schema.Incident{schema.NewIncident(schema.PhaseDispatch, code)}, string(code)
		}
		return v, nil
	}
	rcn := func(code schema.Code) schema.Incident { return schema.NewIncident(schema.PhaseReconciliation, code) }
	switch s {
	case "confirmed":
		return settled(schema.StatusConfirmed, true, "")
	case "rejected":
		return settled(schema.StatusRejected, true, schema.CodeProviderRejected)
	case "absent":
		return settled(schema.StatusFailedBeforeDispatch, false, schema.CodeProviderFailedBeforeDispatch)
	case "unknown":
		v.Status, v.NextAction = schema.StatusReconciliationRequired, schema.NextReconcile
		v.Incidents, v.ErrorCode = []schema.Incident{rcn(schema.CodeReconcileError)}, string(schema.CodeReconcileError)
		return v, nil
	case "unverified":
		v.Status, v.NextAction = schema.StatusAcknowledged, schema.NextVerify
		v.Events, v.ErrorCode = []schema.Incident{rcn(schema.CodeReconcileError)}, string(schema.CodeReconcileError)
		return v, nil
	case "verified":
		return settled(schema.StatusConfirmed, true, "")
	case "exhausted":
		v.Status, v.NextAction, v.Exhausted = schema.StatusReconciliationRequired, schema.NextNone, true
		v.Incidents = []schema.Incident{rcn(schema.CodeReconcileError), rcn(schema.CodeReconcileExhausted)}
		v.ErrorCode = string(schema.CodeReconcileExhausted)
		return v, nil
	}
	return kv.Verdict{}, fmt.Errorf("unknown finding %q", s)
}

// Render is what a transition gives, in a row's words.
func Render(tr Transition) Cells {
	fx := tr.Effects
	if fx.Refused != nil {
		eff := "refused=" + refusal(fx.Refused)
		if fx.Retry > 0 {
			eff += " retry=" + fx.Retry.String()
		}
		return Cells{After: "=", Told: "-", Incidents: "-", Effects: eff}
	}
	var told []string
	for _, o := range fx.Told {
		s := o.ProposalID + ":" + string(o.Kind)
		if len(o.Incidents) > 0 {
			s += "[" + codes(o.Incidents) + "]"
		}
		if o.Terminal {
			s += "!"
		}
		if o.RecordedEarlier {
			s += "(earlier)"
		}
		told = append(told, s)
	}
	var incs []string
	for _, i := range fx.Events {
		incs = append(incs, string(i.Phase)+"/"+string(i.Code))
	}
	var eff []string
	if fx.Receipt != nil {
		eff = append(eff, "receipt")
	}
	if p := fx.Poll; p != nil {
		eff = append(eff, fmt.Sprintf("poll=%d@%d", p.Attempt, p.AtMs))
	}
	if fx.CancelPoll {
		eff = append(eff, "cancel-poll")
	}
	if fx.Announce {
		eff = append(eff, "announce")
	}
	if fx.Indeterminate > 0 {
		eff = append(eff, "index+1")
	} else if fx.Indeterminate < 0 {
		eff = append(eff, "index-1")
	}
	if fx.Ended != nil {
		eff = append(eff, "ended="+fx.Ended.Ref.ProposalID)
	}
	if fx.Redispatch > 0 {
		eff = append(eff, "redispatch="+strconv.Itoa(fx.Redispatch))
	}
	if fx.Changed {
		eff = append([]string{"write"}, eff...)
	}
	return Cells{After: State(tr.After), Told: join(told), Incidents: join(incs), Effects: join(eff)}
}

// State renders a record as a row's after cell.
func State(r kv.Intent) string {
	s := string(r.State)
	if s == "" {
		s = "new"
	}
	if r.Receipt != nil {
		s += "/" + string(r.Receipt.Status)
	}
	w := []string{s}
	if len(r.Proposals) > 0 {
		var ps []string
		for _, p := range r.Proposals {
			ps = append(ps, p.ProposalID)
		}
		w = append(w, "props="+strings.Join(ps, ","))
	}
	if r.InFlightBy != "" {
		w = append(w, "by="+r.InFlightBy)
	}
	if r.DispatchAttempts > 0 {
		w = append(w, "attempts="+strconv.Itoa(r.DispatchAttempts))
	}
	if r.DispatchCode != "" {
		w = append(w, "code="+string(r.DispatchCode))
	}
	if r.Redispatches > 0 {
		w = append(w, "lost="+strconv.Itoa(r.Redispatches))
	}
	if r.ReconcileAttempt > 0 {
		w = append(w, "polls="+strconv.Itoa(r.ReconcileAttempt))
	}
	if r.ReconcileExhausted {
		w = append(w, "exhausted")
	}
	if r.Resolution != "" {
		w = append(w, "resolved="+r.Resolution)
	}
	if len(r.Ended) > 0 {
		var es []string
		for _, e := range r.Ended {
			es = append(es, e.Ref.ProposalID)
		}
		w = append(w, "ended="+strings.Join(es, ","))
	}
	return strings.Join(w, " ")
}

func codes(incs []schema.Incident) string {
	var cs []string
	for _, i := range incs {
		cs = append(cs, string(i.Code))
	}
	return strings.Join(cs, ",")
}

func join(ws []string) string {
	if len(ws) == 0 {
		return "-"
	}
	return strings.Join(ws, " ")
}

// refusal names a refusal of intent.Apply.
func refusal(err error) string {
	names := []struct {
		err  error
		name string
	}{
		{intent.ErrLeaseHeld, "lease-held"}, {intent.ErrMovedOn, "moved-on"}, {intent.ErrNoReceipt, "no-receipt"},
		{intent.ErrTooEarly, "too-early"}, {intent.ErrNotIndeterminate, "not-indeterminate"},
		{intent.ErrSuperseded, "superseded"}, {intent.ErrNotAllowed, "not-allowed"},
	}
	i := slices.IndexFunc(names, func(n struct {
		err  error
		name string
	}) bool {
		return errors.Is(err, n.err)
	})
	if i < 0 {
		return strings.ReplaceAll(err.Error(), " ", "_")
	}
	return names[i].name
}

// Diff says how got differs from the row's cells ("" when it does not).
func Diff(r Row, got Cells) string {
	want := r.Expected()
	var b strings.Builder
	for _, c := range []struct{ name, want, got string }{
		{"after", want.After, got.After}, {"told", want.Told, got.Told},
		{"incidents", want.Incidents, got.Incidents}, {"effects", want.Effects, got.Effects},
	} {
		if c.want != c.got {
			fmt.Fprintf(&b, "\n\t%s: want %q\n\t%s   got %q", c.name, c.want, strings.Repeat(" ", len(c.name)), c.got)
		}
	}
	return b.String()
}
