package pebble_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/pebble"
	"github.com/portcullis/portcullis/schema"
)

// An old store — every record JSON, as this package wrote them before the
// binary form — opens with the new code: its records read back equal,
// they are binary afterwards, the store is marked, and a second Open
// converts nothing.

// convertedPrefixes are the key prefixes whose records are binary.
const convertedPrefixes = "frcdmoegat"

// oldStore is what fillOld wrote: the keys to read everything back by.
type oldStore struct {
	fps        []string
	refs       []schema.ProposalRef
	deliveries []string
	groundings [][]byte
	timers     []string
}

func fingerprint(i int) string { return "sha256:" + fmt.Sprintf("%064x", i+1) }

// fillOld writes records of every converted kind (and of the kinds that
// stay JSON beside them) into a store opened with pebble.OpenJSON:
// intents with receipts, attempts, ends, timers and the indeterminate
// index through the journal; admission and delivery records; outcomes;
// grounding checkpoints; approval records with the parked index and
// their timers. extraDeliveries more delivery records make the pass span
// several batches.
func fillOld(t *testing.T, dir string, extraDeliveries int) oldStore {
	t.Helper()
	s, err := pebble.OpenJSON(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var o oldStore
	j := pebble.NewJournal(s)
	adm := pebble.AdmissionRecords{Store: s}
	for i := range 6 {
		fp := fingerprint(i)
		ref := schema.ProposalRef{Host: "h", ProposalID: fmt.Sprintf("p-%d", i)}
		o.fps, o.refs = append(o.fps, fp), append(o.refs, ref)
		rc := schema.Receipt{ReceiptID: kv.ReceiptID(fp, "dispatch"), Fingerprint: fp, IdempotencyKey: schema.FingerprintKey(fp),
			Provider: "payments", Capability: "refunds", Operation: "create", Environment: "test", Adapter: "nats",
			Status: schema.StatusAcknowledged, DispatchAttempted: true, NextAction: schema.NextVerify, RecordedAtMs: int64(1000 + i)}
		if i%2 == 0 {
			rc.EvidenceRefs = []string{"ledger:" + fmt.Sprint(i)}
			rc.Reconciliation = &schema.ReceiptReconcileRef{AttemptID: kv.AttemptID(fp, 1), PreviousReceiptID: "rcpt_0"}
		}
		rec := kv.NewIntent(kv.Identity{Fingerprint: fp, IdempotencyKey: schema.FingerprintKey(fp),
			Target: schema.Target{Provider: "payments", Capability: "refunds", Operation: "create", Environment: "test", Referent: "order-" + fmt.Sprint(i)}},
			"nats", int64(1000+i))
		rec.AddProposal(ref)
		rec.State, rec.DispatchAttempts, rec.Receipt, rec.ReceiptSeq = kv.StateDone, 1, &rc, 1
		rec.DispatchedFor = &ref
		rec.Latest = kv.Latest{Kind: schema.KindAcknowledged, Incidents: []schema.Incident{{Phase: "dispatch", Code: "C", DispatchBoundary: "after"}}}
		ended := &kv.EndedProposal{Ref: schema.ProposalRef{Host: "h", ProposalID: fmt.Sprintf("ended-%d", i)}, Ended: kv.Ended{Phase: "dispatch", Code: "DENIED", AtMs: 7}}
		rec.End(*ended)
		timer := kv.Timer{ID: kv.IntentTimerID(fp), DueMs: int64(5000 + i), Subject: "timers.reconcile", Data: []byte(fp), MsgID: "m-" + fp}
		o.timers = append(o.timers, timer.ID)
		if err := j.Commit(fp, kv.IntentWrites{Record: &rec, Receipt: &rc, Timer: &timer, Ended: ended, Indeterminate: 1, SinceMs: 9,
			Attempt: &kv.Attempt{AttemptID: kv.AttemptID(fp, 1), Number: 1, StartedAtMs: 11, Status: "confirmed", FinishedAtMs: 12}}); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("d-%d", i)
		o.deliveries = append(o.deliveries, id)
		if _, err := adm.Admit(ref, kv.Admitted{Digest: strings.Repeat("9e", 32), Seq: uint64(i + 1), Forwarded: i%2 == 0, AtMs: 3}, id, kv.Delivery{ProposalID: ref.ProposalID, Seq: uint64(i + 1), AtMs: 3}); err != nil {
			t.Fatal(err)
		}
		out := schema.NewOutcome(ref, schema.KindAcknowledged, 20)
		out.Fingerprint, out.Receipt = &fp, &rc
		if i == 1 {
			out = schema.NewOutcome(ref, schema.KindNeedsApproval, 20)
			out.Approval = &schema.Approval{Fingerprint: fp, Summary: "refund", ExternalSpend: &schema.Spend{Currency: "EUR", AmountMinor: 100}, ExpiresAtMs: 99}
		}
		if err := s.RecordOutcomes([]schema.Outcome{out}); err != nil {
			t.Fatal(err)
		}
		gk := kv.GroundingKey("grounding", uint64(i), []byte(fp))
		o.groundings = append(o.groundings, gk)
		g := kv.Grounding{Referent: "order-" + fmt.Sprint(i), ObservationRef: "obs:" + fmt.Sprint(i), AtMs: 4}
		if i == 3 {
			g = kv.Grounding{Code: "GROUNDING_AMBIGUOUS", AtMs: 4}
		}
		if err := s.PutGrounding(gk, g); err != nil {
			t.Fatal(err)
		}
		b := s.NewBatch()
		ap := &kv.Approval{Host: ref.Host, ProposalID: ref.ProposalID, Fingerprint: fp, Referent: "order", Seq: uint64(i), State: kv.StateParked,
			ArrivedAtMs: 30, ExpiresAtMs: 90, Evaluations: []schema.PolicyEvaluation{{Layer: "grant", Outcome: "pass"}}}
		b.PutApproval(ref, ap, true, 90)
		at := kv.Timer{ID: kv.ApprovalTimerID(ref), DueMs: 90, Subject: "timers.approval", MsgID: "a-" + ref.ProposalID}
		o.timers = append(o.timers, at.ID)
		b.AddTimer(at)
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	for i := range extraDeliveries {
		id := fmt.Sprintf("extra-%d", i)
		o.deliveries = append(o.deliveries, id)
		if err := adm.Repeat("h", id, kv.Delivery{ProposalID: "p-0", Seq: uint64(i), AtMs: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := rawForms(t, s); n.binary != 0 || n.json == 0 {
		t.Fatalf("the old store holds %d binary records, %d JSON", n.binary, n.json)
	}
	return o
}

// snapshot is everything read back through the store's API.
type snapshot struct {
	Intents      []kv.Intent
	Receipts     [][]schema.Receipt
	Attempts     []kv.Attempt
	Deliveries   []kv.Delivery
	Admitted     []kv.Admitted
	Outcomes     []schema.Outcome
	Ended        []kv.Ended
	Groundings   []kv.Grounding
	Approvals    []kv.Approval
	Timers       []kv.Timer
	Due          []kv.Timer
	Indet        []kv.Indeterminate
	Parked       []pebble.Parked
	Fingerprints []string
}

func read(t *testing.T, s *pebble.Store, o oldStore) snapshot {
	t.Helper()
	var sn snapshot
	must := func(found bool, err error) {
		t.Helper()
		if err != nil || !found {
			t.Fatalf("found %v, %v", found, err)
		}
	}
	j := pebble.NewJournal(s)
	for i, fp := range o.fps {
		rec, found, err := j.Load(fp)
		must(found, err)
		sn.Intents = append(sn.Intents, rec)
		rs, err := j.Receipts(fp)
		must(len(rs) == 1, err)
		sn.Receipts = append(sn.Receipts, rs)
		a, found, err := j.Attempt(fp, kv.AttemptID(fp, 1))
		must(found, err)
		sn.Attempts = append(sn.Attempts, a)
		e, found, err := j.Ended(rec.Ended[0].Ref)
		must(found, err)
		sn.Ended = append(sn.Ended, e)
		ref := o.refs[i]
		ad, found, err := s.Admitted(ref)
		must(found, err)
		sn.Admitted = append(sn.Admitted, ad)
		out, found, err := s.LastOutcome(ref)
		must(found, err)
		sn.Outcomes = append(sn.Outcomes, out)
		var ap kv.Approval
		must(s.Approval(ref, &ap))
		sn.Approvals = append(sn.Approvals, ap)
		fpOf, found, err := s.ProposalFingerprint(ref)
		must(found, err)
		sn.Fingerprints = append(sn.Fingerprints, fpOf)
		g, found, err := s.Grounding(o.groundings[i])
		must(found, err)
		sn.Groundings = append(sn.Groundings, g)
	}
	for _, id := range o.deliveries {
		d, found, err := s.Delivery("h", id)
		must(found, err)
		sn.Deliveries = append(sn.Deliveries, d)
	}
	for _, id := range o.timers {
		tm, found, err := s.Timer(id)
		must(found, err)
		sn.Timers = append(sn.Timers, tm)
	}
	var err error
	if sn.Due, err = s.DueTimers(1<<40, 100); err != nil || len(sn.Due) != len(o.timers) {
		t.Fatalf("due timers: %d, %v", len(sn.Due), err)
	}
	if sn.Indet, err = j.Indeterminates(); err != nil || len(sn.Indet) != len(o.fps) {
		t.Fatalf("indeterminates: %d, %v", len(sn.Indet), err)
	}
	if sn.Parked, err = s.ParkedIndex(); err != nil || len(sn.Parked) != len(o.refs) {
		t.Fatalf("parked: %d, %v", len(sn.Parked), err)
	}
	return sn
}

type forms struct{ binary, json, otherJSON int }

// rawForms counts the records of the converted kinds by their first byte,
// and checks that every other record stayed as it was (not binary).
func rawForms(t *testing.T, s *pebble.Store) forms {
	t.Helper()
	var n forms
	err := s.ForEach(func(k, v []byte) error {
		isBinary := len(v) > 0 && v[0] == pebble.RecordMark
		switch {
		case strings.IndexByte(convertedPrefixes, k[0]) < 0:
			if isBinary {
				t.Errorf("record %q of an unconverted kind is binary", k[:1])
			}
			if len(v) > 0 && k[0] != 'x' {
				n.otherJSON++
			}
		case isBinary:
			n.binary++
		case len(v) > 0 && v[0] == '{':
			n.json++
		default:
			t.Errorf("record %q is neither JSON nor binary: %q", k[:1], v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOldStoreOpens(t *testing.T) {
	dir := t.TempDir()
	o := fillOld(t, dir, 2500)

	old, err := pebble.OpenJSON(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := read(t, old, o)
	before := rawForms(t, old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	// Sanity: what the old store reads back is what was written.
	if got := want.Intents[2]; got.Receipt == nil || len(got.Receipt.EvidenceRefs) != 1 || got.Ended[0].Ended.Code != "DENIED" || *got.DispatchedFor != o.refs[2] {
		t.Fatalf("the old store's intent: %#v", got)
	}

	s, err := pebble.Open(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	after := rawForms(t, s)
	if after.json != 0 || after.binary != before.json || after.otherJSON != before.otherJSON+1 {
		t.Fatalf("before %+v, after %+v: every converted record binary, and the mark added", before, after)
	}
	if form, found, err := s.RecordsForm(); err != nil || !found || form != 1 {
		t.Fatalf("mark: %d %v %v", form, found, err)
	}
	if got := read(t, s, o); !reflect.DeepEqual(got, want) {
		t.Fatalf("read back after conversion:\n%+v\nbefore:\n%+v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A JSON record written after the mark (by the JSON writer) stays
	// JSON at the next Open: the pass does not run again.
	old, err = pebble.OpenJSON(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := (pebble.AdmissionRecords{Store: old}).Repeat("h", "late", kv.Delivery{ProposalID: "p-1", Seq: 1, AtMs: 1}); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s, err = pebble.Open(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := rawForms(t, s); n.json != 1 {
		t.Fatalf("second open: %+v, want the one JSON record left alone", n)
	}
	if d, found, err := s.Delivery("h", "late"); err != nil || !found || d.ProposalID != "p-1" {
		t.Fatalf("the JSON record: %+v %v %v", d, found, err)
	}
	if got := read(t, s, o); !reflect.DeepEqual(got, want) {
		t.Fatal("read back after the second open differs")
	}
}

// TestConversionInterrupted: a pass cut short leaves some records binary,
// some JSON and no mark; the store reads the same meanwhile, and the next
// Open finishes the pass.
func TestConversionInterrupted(t *testing.T) {
	dir := t.TempDir()
	o := fillOld(t, dir, 2500)
	s, err := pebble.OpenJSON(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := read(t, s, o)
	total := rawForms(t, s).json
	n, err := s.ConvertSome(1500)
	if err != nil || n != 1500 {
		t.Fatalf("converted %d, %v", n, err)
	}
	if f := rawForms(t, s); f.binary != 1500 || f.json != total-1500 {
		t.Fatalf("halfway: %+v of %d", f, total)
	}
	if _, found, err := s.RecordsForm(); found || err != nil {
		t.Fatalf("marked halfway: %v %v", found, err)
	}
	if got := read(t, s, o); !reflect.DeepEqual(got, want) {
		t.Fatal("a half-converted store reads otherwise")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = pebble.Open(dir, pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if f := rawForms(t, s); f.binary != total || f.json != 0 {
		t.Fatalf("after the next open: %+v of %d", f, total)
	}
	if _, found, err := s.RecordsForm(); !found || err != nil {
		t.Fatalf("mark: %v %v", found, err)
	}
	if got := read(t, s, o); !reflect.DeepEqual(got, want) {
		t.Fatal("read back after the finished pass differs")
	}
}

// TestNewStoreWritesBinary: a new store is marked at once and writes the
// converted kinds binary.
func TestNewStoreWritesBinary(t *testing.T) {
	s, err := pebble.Open(t.TempDir(), pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, found, err := s.RecordsForm(); !found || err != nil {
		t.Fatalf("mark: %v %v", found, err)
	}
	if err := s.PutGrounding(kv.GroundingKey("s", 1, nil), kv.Grounding{Referent: "r", AtMs: 1}); err != nil {
		t.Fatal(err)
	}
	if f := rawForms(t, s); f.binary != 1 || f.json != 0 {
		t.Fatalf("%+v", f)
	}
}
