package history

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/portcullis/portcullis/schema"
)

// EnvDir names a directory for the visualisations of failed checks, kept
// after the test (else they go to the test's temporary directory).
const EnvDir = "PORTCULLIS_HISTORY_DIR"

// Dir is where a test writes visualisations: $PORTCULLIS_HISTORY_DIR, or
// tmp (a test's t.TempDir()).
func Dir(tmp string) string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	return tmp
}

// The model of what an operator reads (issue 26): per intent, the chain of
// its receipts as the journal holds it — it only grows, one receipt at a
// time. A receipt is written somewhere between its cause (the provider
// receiving the request it answers, the operator's call, or else the
// first proposal of the intent) and the first stored outcome that
// announced it (an outcome is published after its receipt is committed).
// A receipts read returns the whole chain at one instant between its call
// and its return: never older than an outcome stored before the read
// began, never a receipt not yet written. An activity read returns the
// snapshot's status: the snapshot is written after the outcome (it may
// lag), so the model asks only that a receipt's status it shows belongs
// to a receipt already written.
type linInput struct {
	write    bool
	activity bool
	receipt  string // write: the receipt written, "id=status"
}

// chainState is the receipts, oldest first, each "id=status", joined
// with ",".
type chainState = string

func entries(s chainState) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// ids are the receipt ids of s, joined with ",".
func ids(s chainState) string {
	var out []string
	for _, e := range entries(s) {
		id, _, _ := strings.Cut(e, "=")
		out = append(out, id)
	}
	return strings.Join(out, ",")
}

// receiptStatus reports whether status is a receipt's (the activity's
// earlier statuses — awaiting_approval, denied, authorized — are not).
func receiptStatus(status string) bool {
	switch schema.Status(status) {
	case schema.StatusConfirmed, schema.StatusAcknowledged, schema.StatusFailedBeforeDispatch,
		schema.StatusRejected, schema.StatusReconciliationRequired:
		return true
	}
	return false
}

var receiptModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(chainState), input.(linInput)
		switch {
		case in.write:
			if slices.Contains(entries(s), in.receipt) {
				return true, s
			}
			return true, strings.Join(append(entries(s), in.receipt), ",")
		case in.activity:
			status := output.(string)
			return !receiptStatus(status) || slices.ContainsFunc(entries(s), func(e string) bool { return strings.HasSuffix(e, "="+status) }), s
		default:
			return output.(string) == ids(s), s
		}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(linInput)
		switch {
		case in.write:
			return "write " + in.receipt
		case in.activity:
			return "activity → " + output.(string)
		}
		return "receipts → [" + output.(string) + "]"
	},
	DescribeState: func(state any) string { return "[" + state.(chainState) + "]" },
}

// linTimeout bounds porcupine's search (small per intent; a run whose
// search does not finish is reported, not passed).
const linTimeout = 30 * time.Second

// Linearizable checks RuleLinearizable for every intent an operator read,
// and on a failure writes porcupine's visualisation into dir (when not
// "") and returns its path.
func Linearizable(h History, dir string) (bad []Violation, visual string) {
	ops := h.linearOps()
	if len(ops) == 0 {
		return nil, ""
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range ops {
			if !yield(k) {
				return
			}
		}
	})
	var all []porcupine.Operation
	var failed []string
	for _, key := range keys {
		res, _ := porcupine.CheckOperationsVerbose(receiptModel, ops[key], linTimeout)
		switch res {
		case porcupine.Illegal:
			failed = append(failed, key)
			bad = append(bad, violation(RuleLinearizable, "key %s: the operator's reads of its receipts fit no order of the writes", short(key)))
		case porcupine.Unknown:
			failed = append(failed, key)
			bad = append(bad, violation(RuleLinearizable, "key %s: undecided within %s", short(key), linTimeout))
		}
	}
	if len(failed) == 0 || dir == "" {
		return bad, ""
	}
	for _, key := range failed {
		all = append(all, ops[key]...)
	}
	model := receiptModel
	model.Partition = func(hist []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range hist {
			k := op.Metadata.(string)
			by[k] = append(by[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range failed {
			out = append(out, by[k])
		}
		return out
	}
	model.DescribeOperationMetadata = func(info any) string { return "key " + short(info.(string)) }
	_, info := porcupine.CheckOperationsVerbose(model, all, linTimeout)
	path := filepath.Join(dir, fmt.Sprintf("history-%d.html", time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		bad = append(bad, violation(RuleLinearizable, "writing the visualisation: %v", err))
		return bad, ""
	}
	return bad, path
}

// linearOps builds, per intent that an operator read, the writes of its
// receipts and the reads.
func (h History) linearOps() map[string][]porcupine.Operation {
	read := map[string]bool{}
	for _, e := range h {
		if (e.Op == OpReadReceipts || e.Op == OpReadActivity) && e.Err == "" {
			read[e.Key] = true
		}
	}
	if len(read) == 0 {
		return nil
	}
	end := int64(math.MaxInt64 / 2)
	ns := func(t time.Time) int64 { return t.UnixNano() }

	type write struct {
		call, ret int64
		status    schema.Status
	}
	writes := map[string]map[string]*write{} // key → receipt → window
	firstProposal := map[string]int64{}
	f := h.firsts()
	for _, e := range h.of(OpOutcome) {
		key := keyOf(e.Outcome)
		if !read[key] {
			continue
		}
		if p, ok := f.proposed[e.Proposal]; ok {
			if f, seen := firstProposal[key]; !seen || ns(p) < f {
				firstProposal[key] = ns(p)
			}
		}
		rc := e.Outcome.Receipt
		if rc == nil {
			continue
		}
		if writes[key] == nil {
			writes[key] = map[string]*write{}
		}
		w := writes[key][rc.ReceiptID]
		if w == nil {
			w = &write{ret: ns(e.Return), status: rc.Status}
			if attempt, ok := providerAnswered(e.Outcome); ok {
				if t, found := f.asked[[2]string{key, attempt}]; found {
					w.call = ns(t)
				}
			} else if operatorSettled(e.Outcome) {
				if t, found := f.resolved[key]; found {
					w.call = ns(t)
				}
			}
			writes[key][rc.ReceiptID] = w
		}
		w.ret = min(w.ret, ns(e.Return))
	}
	ops := map[string][]porcupine.Operation{}
	for _, e := range h {
		if (e.Op != OpReadReceipts && e.Op != OpReadActivity) || e.Err != "" {
			continue
		}
		if writes[e.Key] == nil {
			writes[e.Key] = map[string]*write{}
		}
		for i, id := range e.Receipts {
			if writes[e.Key][id] == nil && i < len(e.Statuses) { // written, never announced: unbounded
				writes[e.Key][id] = &write{ret: end, status: e.Statuses[i]}
			}
		}
		out := strings.Join(e.Receipts, ",")
		if e.Op == OpReadActivity {
			out = e.Status
		}
		ops[e.Key] = append(ops[e.Key], porcupine.Operation{ClientId: 0, Call: ns(e.Call), Return: ns(e.Return),
			Input: linInput{activity: e.Op == OpReadActivity}, Output: out, Metadata: e.Key})
	}
	for key, ws := range writes {
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range ws {
				if !yield(id) {
					return
				}
			}
		})
		for i, id := range ids {
			w := ws[id]
			call := w.call
			if call == 0 {
				call = firstProposal[key]
			}
			ops[key] = append(ops[key], porcupine.Operation{ClientId: 1 + i, Call: min(call, w.ret), Return: w.ret,
				Input: linInput{write: true, receipt: id + "=" + string(w.status)}, Output: "", Metadata: key})
		}
	}
	return ops
}
