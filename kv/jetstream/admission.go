package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Admissions are the admission records (kv.Admissions) on a JetStream KV bucket that every
// processor of a cluster shares (SPEC §6), so that a proposal id reused
// with other content, or a repeated delivery id, is caught whichever
// processors handle the two messages.
//
// # Keys
//
//	prop.<sha256(host, proposal_id)>  kv.Admitted: content digest, stream seq
//	dlv.<sha256(host, delivery_id)>   kv.Delivery: proposal id, stream seq
//
// Neither key holds the host or the delivery id; the values hold only
// digests, sequences, times and the proposal id (an outcome subject
// token).
//
// # Claims
//
// A claim is a KV Create (expected last subject sequence 0): of two
// processors claiming one id at once exactly one wins, the other reads
// the winner's record. The delivery id is claimed first, then the
// proposal id; a claim that finds a record of its own message (the same
// stream sequence: a redelivery, or its own write that timed out but was
// stored) has won. A delivery claim followed by a lost proposal claim
// with other content (a reuse) is withdrawn again, so the refused
// message's delivery id stays free as on one node. The bucket's stream has
// AllowDirect off: every read is served by the stream's leader (a
// follower's direct get can be stale right after a write).
//
// A proposal's latest outcome is read from the outcome stream — the last
// message on its subject that is the proposal's own, not a refused
// namesake's (LastOutcome) — and from the processor's own store only when
// the stream has none (the processor records an outcome before it
// publishes it): a repeat is answered whichever processor handled the
// proposal.
type Admissions struct {
	h        Handle
	local    AdmissionsLocal
	subjects subjects.Subjects
}

var _ kv.Admissions = (*Admissions)(nil)

// AdmissionsLocal is what the shared records take from the processor's
// own store (pebble.Store): its locks, shared with the retention sweep;
// the outcomes it recorded before publishing them; and the fingerprints
// it grounded proposals to.
type AdmissionsLocal interface {
	Lock(key string) (unlock func())
	LastOutcome(ref schema.ProposalRef) (schema.Outcome, bool, error)
	ProposalFingerprint(ref schema.ProposalRef) (fingerprint string, found bool, err error)
}

// AdmissionsOptions configure NewAdmissions.
type AdmissionsOptions struct {
	// KV is the admission bucket (EnsureBucket, Bind); JS reads the
	// outcome stream.
	KV jetstream.KeyValue
	JS jetstream.JetStream
	// Local is the processor's store: its locks (shared with the
	// retention sweep), and the outcomes it recorded.
	Local    AdmissionsLocal
	Subjects subjects.Subjects
	// Timeouts bound each request (OpTimeout, retries included, default
	// 5s; AttemptTimeout one try of it, default 1s: a stream electing a
	// leader answers nothing).
	Timeouts
}

// NewAdmissions returns the records on o.KV.
func NewAdmissions(o AdmissionsOptions) *Admissions {
	return &Admissions{h: Handle{KV: o.KV, JS: o.JS, Name: "admission", Timeouts: o.Timeouts}, local: o.Local, subjects: o.Subjects}
}

// AdmissionBucket is the admission records' bucket; every read from the stream's
// leader. Records expire maxAge after their last write: the retention
// horizon of proposals (config.RetentionHorizons), at least the streams'
// MaxAge, so that a message that can still be redelivered or replayed
// finds its records.
func AdmissionBucket(name string, replicas int, maxAge time.Duration) Bucket {
	return Bucket{Name: name, Replicas: replicas, MaxAge: maxAge,
		Description: "Portcullis admission records: proposal ids and delivery ids taken, value-free"}
}

func admissionHash(kind string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func admittedKey(ref schema.ProposalRef) string {
	return "prop." + admissionHash("proposal", ref.Host, ref.ProposalID)
}
func deliveryKey(host, id string) string { return "dlv." + admissionHash("delivery", host, id) }

func (r *Admissions) do(f func(ctx context.Context) error) error { return r.h.Do(f) }

func (r *Admissions) Lock(key string) func() { return r.local.Lock(key) }

func (r *Admissions) Delivery(host, deliveryID string) (kv.Delivery, bool, error) {
	var d kv.Delivery
	_, found, err := r.h.Get(deliveryKey(host, deliveryID), &d)
	return d, found, err
}

func (r *Admissions) Admitted(ref schema.ProposalRef) (kv.Admitted, bool, error) {
	var a kv.Admitted
	_, found, err := r.h.Get(admittedKey(ref), &a)
	return a, found, err
}

// Admit claims the delivery id, then the proposal id (the Admissions doc
// comment says why in this order).
func (r *Admissions) Admit(ref schema.ProposalRef, a kv.Admitted, deliveryID string, d kv.Delivery) (kv.AdmissionClaim, error) {
	dkey := deliveryKey(ref.Host, deliveryID)
	var gotD kv.Delivery
	drev, won, err := r.h.Claim(dkey, d, &gotD)
	if err != nil {
		return kv.AdmissionClaim{}, err
	}
	if !won && gotD.Seq != d.Seq {
		return kv.AdmissionClaim{Delivery: &gotD}, nil
	}
	var gotA kv.Admitted
	if _, won, err = r.h.Claim(admittedKey(ref), a, &gotA); err != nil {
		return kv.AdmissionClaim{}, err
	}
	if won {
		return kv.AdmissionClaim{}, nil
	}
	if gotA.Seq != a.Seq && gotA.Digest != a.Digest {
		// A reuse: refused, and its delivery id left free again. If this
		// fails the id stays taken and a repeat of the refused message
		// republishes the first proposal's outcome on its own subject.
		if err := r.do(func(ctx context.Context) error {
			return r.h.KV.Delete(ctx, dkey, jetstream.LastRevision(drev))
		}); err != nil && !Lost(err) {
			return kv.AdmissionClaim{}, fmt.Errorf("admission: withdraw delivery: %w", err)
		}
	}
	return kv.AdmissionClaim{Admitted: &gotA}, nil
}

// Repeat claims the delivery id for a repeat; a delivery id another
// message took meanwhile keeps its record.
func (r *Admissions) Repeat(host, deliveryID string, d kv.Delivery) error {
	var got kv.Delivery
	_, _, err := r.h.Claim(deliveryKey(host, deliveryID), d, &got)
	return err
}

// Forwarded overwrites the proposal's record with a, which this message's
// own claim wrote (no other message writes a taken key).
func (r *Admissions) Forwarded(ref schema.ProposalRef, a kv.Admitted) error {
	return r.h.Put(admittedKey(ref), a)
}

// LastOutcome returns the latest outcome of the proposal that took ref's
// id: the last message on its outcome subject that is that proposal's
// (ownOutcome), and the local store's record when the stream has none.
// An id nobody took has no outcome to repeat.
func (r *Admissions) LastOutcome(ref schema.ProposalRef) (schema.Outcome, bool, error) {
	a, taken, err := r.Admitted(ref)
	if err != nil || !taken {
		return schema.Outcome{}, false, err
	}
	o, found, err := r.lastOwnOutcome(ref, a)
	if err != nil || found {
		return o, found, err
	}
	return r.local.LastOutcome(ref)
}

// lastOwnOutcome reads the last outcome on ref's subject that belongs to
// the proposal whose admission record is a. The last message is that
// almost always: a namesake is refused with an outcome only while the id
// is free, so its outcome comes before the proposal's — unless the
// proposal is still in flight (then it has none: found is false) or the
// namesake's refusal raced the proposal's claim and was published after
// some of its outcomes (then the subject is read forward for the last of
// them, at most MaxOutcomeScan messages; beyond that found is false).
func (r *Admissions) lastOwnOutcome(ref schema.ProposalRef, a kv.Admitted) (schema.Outcome, bool, error) {
	subject := r.subjects.Outcome(ref.Host, ref.ProposalID)
	var last *jetstream.RawStreamMsg
	err := r.do(func(ctx context.Context) error {
		st, err := r.h.JS.Stream(ctx, r.subjects.OutcomesStream())
		if err != nil {
			return err
		}
		last, err = st.GetLastMsgForSubject(ctx, subject)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return schema.Outcome{}, false, nil
	}
	if err != nil {
		return schema.Outcome{}, false, fmt.Errorf("admission: read outcome: %w", err)
	}
	o, _, err := decodeOutcome(ref, last)
	if err != nil || ownOutcome(&o, a) {
		return o, err == nil, err
	}
	var own *schema.Outcome
	err = r.scanOutcomes(subject, MaxOutcomeScan, func(m *jetstream.RawStreamMsg) bool {
		if m.Sequence >= last.Sequence {
			return false
		}
		if o, _, err := decodeOutcome(ref, m); err == nil && ownOutcome(&o, a) {
			own = &o
		}
		return true
	})
	if errors.Is(err, errScanBound) || own == nil {
		return schema.Outcome{}, false, nil
	}
	if err != nil {
		return schema.Outcome{}, false, err
	}
	return *own, true, nil
}

// MaxOutcomeScan bounds the outcomes lastOwnOutcome reads forward.
const MaxOutcomeScan = 256

// ownOutcome reports whether an outcome on a proposal id's subject can be
// the one of the proposal that took the id (admission record a), rather
// than a namesake's: a message refused before it could take the id. A
// proposal takes its id only once it decoded, its context was complete
// and its tenant permitted (SPEC §3 Admission steps 2–4), so it never gets
// an outcome for one of those refusals; and admission's PROCESSING_FAILED
// is its own only when admission gave up on it (a.Failed) — otherwise it
// went to a message that could not take ids. Every other outcome on the
// subject is the proposal's: the later stages handle only what admission
// handed off, and a repeat republishes the proposal's own outcome.
func ownOutcome(o *schema.Outcome, a kv.Admitted) bool {
	if o.Unadmitted() {
		return false
	}
	for _, inc := range o.Incidents {
		if inc.Phase == schema.PhaseAdmission && inc.Code == schema.CodeProcessingFailed {
			return a.Failed
		}
	}
	return true
}

var errScanBound = errors.New("admission: more outcomes than a scan reads")

// scanOutcomes reads the messages on an outcome subject from the first,
// in order, until visit returns false, none is left, or limit were read
// (errScanBound).
func (r *Admissions) scanOutcomes(subject string, limit int, visit func(*jetstream.RawStreamMsg) bool) error {
	seq := uint64(1)
	for range limit {
		var m *jetstream.RawStreamMsg
		err := r.do(func(ctx context.Context) error {
			st, err := r.h.JS.Stream(ctx, r.subjects.OutcomesStream())
			if err != nil {
				return err
			}
			m, err = st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			return err
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("admission: read outcomes: %w", err)
		}
		if !visit(m) {
			return nil
		}
		seq = m.Sequence + 1
	}
	return errScanBound
}

func decodeOutcome(ref schema.ProposalRef, m *jetstream.RawStreamMsg) (schema.Outcome, bool, error) {
	var o schema.Outcome
	if err := schema.Decode(m.Data, &o); err != nil {
		return schema.Outcome{}, false, fmt.Errorf("admission: outcome seq %d: %w", m.Sequence, err)
	}
	o.Host = ref.Host
	return o, true, nil
}

// LastStreamOutcome reads a proposal's last outcome from the outcome
// stream: a direct get of the last message on its subject (the stream
// allows direct gets, SPEC §2.8).
func LastStreamOutcome(js jetstream.JetStream, subj subjects.Subjects, ref schema.ProposalRef, op, attempt time.Duration) (schema.Outcome, bool, error) {
	var m *jetstream.RawStreamMsg
	err := Budget{Op: op, Attempt: attempt}.Do(func(ctx context.Context) error {
		st, err := js.Stream(ctx, subj.OutcomesStream())
		if err != nil {
			return err
		}
		m, err = st.GetLastMsgForSubject(ctx, subj.Outcome(ref.Host, ref.ProposalID))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return schema.Outcome{}, false, nil
	}
	if err != nil {
		return schema.Outcome{}, false, fmt.Errorf("admission: read outcome: %w", err)
	}
	return decodeOutcome(ref, m)
}

// ProposalFingerprint returns the fingerprint a proposal was grounded to,
// on any processor: the local store's (pebble.Store.ProposalFingerprint), else
// the one its outcomes name on the outcome stream — every outcome from
// grounding on does (its fingerprint, approval or receipt): the last
// message on its subject, else the first MaxFingerprintScan.
func (r *Admissions) ProposalFingerprint(ref schema.ProposalRef) (string, bool, error) {
	if fp, found, err := r.local.ProposalFingerprint(ref); err != nil || found {
		return fp, found, err
	}
	o, found, err := LastStreamOutcome(r.h.JS, r.subjects, ref, r.h.OpTimeout, r.h.AttemptTimeout)
	if err != nil || !found {
		return "", false, err
	}
	if fp := o.NamedFingerprint(); fp != "" {
		return fp, true, nil
	}
	var named string
	err = r.scanOutcomes(r.subjects.Outcome(ref.Host, ref.ProposalID), MaxFingerprintScan, func(m *jetstream.RawStreamMsg) bool {
		var o schema.Outcome
		if schema.Decode(m.Data, &o) == nil {
			named = o.NamedFingerprint()
		}
		return named == ""
	})
	if err != nil && !errors.Is(err, errScanBound) {
		return "", false, err
	}
	return named, named != "", nil
}

// MaxFingerprintScan bounds the outcomes ProposalFingerprint reads.
const MaxFingerprintScan = 16

// ImportAdmitted writes the record of a proposal id a single node's
// admission took (`processor migrate`) unless the key holds one: Present
// when it is the same proposal's (its digest and time), otherwise a
// Conflict, never overwritten.
func (r *Admissions) ImportAdmitted(ref schema.ProposalRef, a kv.Admitted) (Import, error) {
	return ImportJSON(r.h, admittedKey(ref), &a, func(got *kv.Admitted) bool {
		return got.Digest == a.Digest && got.AtMs == a.AtMs
	})
}

// ImportDelivery writes a delivery record of a single node's store, under
// the hash it is stored by there (pebble.DeliveryHash: the same the bucket's
// key is made of), unless the key holds one: Present when it names the
// same proposal at the same time, otherwise a Conflict.
func (r *Admissions) ImportDelivery(hash []byte, d kv.Delivery) (Import, error) {
	return ImportJSON(r.h, "dlv."+hex.EncodeToString(hash), &d, func(got *kv.Delivery) bool {
		return got.ProposalID == d.ProposalID && got.AtMs == d.AtMs
	})
}
