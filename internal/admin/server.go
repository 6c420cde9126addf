package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/metrics/version"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/stages"
	"github.com/portcullis/portcullis/subjects"
)

// Proposals map a proposal to the fingerprint it was grounded to (found
// false if unknown): pebble.Store on one processor, the replicated admission
// records (kvjs.Admissions) on a cluster.
type Proposals interface {
	ProposalFingerprint(ref schema.ProposalRef) (fingerprint string, found bool, err error)
}

// MaxRequestBytes bounds a request body.
const MaxRequestBytes = 4096

// The micro service.
const (
	// ServiceName is the service's name on $SRV.PING|INFO|STATS.
	ServiceName = "portcullis-admin"
	// QueueGroup is every endpoint's queue group: of several processors
	// on one NATS system, one answers each request.
	QueueGroup = "portcullis-admin"
)

// readTimeout bounds what one request reads from JetStream.
const readTimeout = 10 * time.Second

// Server answers operator requests from the processor's own state.
type Server struct {
	Journal kv.Journal
	// Approvals are the authorization stage's records: parked approvals
	// (approvals.list) and a proposal's decision (proposals.get).
	Approvals kv.Approvals
	// Nonces remembers operator request nonces: the processor's store, or
	// on a cluster the shared bucket (kv/pebble's or kv/jetstream's
	// Nonces).
	Nonces kv.Nonces
	// Store maps a proposal to its fingerprint: the processor's store, or
	// on a cluster the replicated admission records.
	Store Proposals
	// Reconciliation records an operator's finding (the reconciliation
	// stage, through engine.Resolver: operator code imports no stage).
	Reconciliation Resolver
	// ReconcileMaxAttempts is reconciliation.max_attempts, shown with each
	// action of the indeterminate queue.
	ReconcileMaxAttempts int
	Subjects             subjects.Subjects
	Clock                stages.Clock
	Log                  *slog.Logger
	// JS reads the outcome stream (proposals.get) and the activity bucket
	// (activity.list, the providers of approvals.list). nil: those verbs
	// answer internal.
	JS jetstream.JetStream
	// Operators are the configured operators: only their signatures count.
	Operators []config.Role
	// AllowUnsigned accepts requests without signature headers, from an
	// unnamed operator (admission.allow_unsigned; `processor run --dev`).
	// Their stamp is checked only when the body carries one. A request
	// with either signature header is checked in full even then.
	AllowUnsigned bool
	// Self is this processor's status (status.get, and its peers' through
	// $SRV.STATS; status.go). nil: status.get lists no processors.
	Self func() ProcessorStatus

	// nc is the connection Serve serves on: status.get asks the peers on it.
	nc atomic.Pointer[nats.Conn]
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// route is one endpoint: the verb (its subject is <prefix>.admin.<verb>),
// the micro endpoint name, and the verb's handler behind the middleware.
type route struct {
	verb, name string
	serve      func(hdr nats.Header, data []byte) ([]byte, *Error)
}

func (s *Server) routes() []route {
	return []route{
		{subjects.AdminReceipt, "receipts-get", endpoint(s, subjects.AdminReceipt, s.receipts)},
		{subjects.AdminReconcileList, "reconcile-list", endpoint(s, subjects.AdminReconcileList, s.list)},
		{subjects.AdminReconcileSolve, "reconcile-resolve", endpoint(s, subjects.AdminReconcileSolve, s.resolve)},
		{subjects.AdminApprovalsList, "approvals-list", endpoint(s, subjects.AdminApprovalsList, s.approvals)},
		{subjects.AdminProposalGet, "proposals-get", endpoint(s, subjects.AdminProposalGet, s.proposal)},
		{subjects.AdminActivityList, "activity-list", endpoint(s, subjects.AdminActivityList, s.activityList)},
		{subjects.AdminStatus, StatusEndpoint, endpoint(s, subjects.AdminStatus, s.status)},
	}
}

// endpoint is the middleware around every verb: the verb's handler runs
// only for a request that admit let through, with the signing operator's
// name. It returns the reply and, for a refusal or failure, its error.
func endpoint[Req, Res any, P interface {
	*Req
	stamped
}](s *Server, verb string, h func(operator string, req P) (*Res, *Error)) func(nats.Header, []byte) ([]byte, *Error) {
	return func(hdr nats.Header, data []byte) ([]byte, *Error) {
		var req Req
		operator, e := s.admit(verb, hdr, data, P(&req))
		if e == nil {
			var res *Res
			if res, e = h(operator, &req); e == nil {
				return answer(res, nil), nil
			}
		}
		return answer[Res](nil, e), e
	}
}

// Serve adds the operator API to nc as the micro service ServiceName: one
// endpoint per verb, in queue group QueueGroup. stop stops the service and
// waits for requests being answered.
func (s *Server) Serve(nc *nats.Conn) (stop func(), err error) {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		stopped bool
	)
	build := version.Get()
	s.nc.Store(nc)
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     build.SemVer(),
		Description: "Portcullis operator API: signed, stamped, single-use requests on " + s.Subjects.Admins(),
		Metadata:    map[string]string{"prefix": s.Subjects.Prefix(), "revision": build.Revision},
		QueueGroup:  QueueGroup,
		// Every processor's status rides on its statistics (status.go).
		StatsHandler: s.statsData,
	})
	if err != nil {
		return nil, fmt.Errorf("admin: service: %w", err)
	}
	for _, r := range s.routes() {
		h := micro.HandlerFunc(func(req micro.Request) {
			mu.Lock()
			if stopped {
				mu.Unlock()
				return
			}
			wg.Add(1)
			mu.Unlock()
			defer wg.Done()
			if req.Reply() == "" {
				return
			}
			out, e := r.serve(nats.Header(req.Headers()), req.Data())
			if e != nil {
				// The micro error headers let $SRV.STATS count refusals;
				// the body is the reply as always.
				_ = req.Error(e.Code, headerText(e.Message, e.Code), out)
				return
			}
			_ = req.Respond(out)
		})
		err := svc.AddEndpoint(r.name, h, micro.WithEndpointSubject(s.Subjects.Admin(r.verb)),
			micro.WithEndpointMetadata(map[string]string{"verb": r.verb}))
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("admin: endpoint %s: %w", r.verb, err)
		}
	}
	if err := nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("admin: subscribe: %w", err)
	}
	return func() {
		_ = svc.Stop()
		mu.Lock()
		stopped = true
		mu.Unlock()
		wg.Wait()
	}, nil
}

// headerText makes an error message fit a header value: one line, never
// empty.
func headerText(msg, fallback string) string {
	msg = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	if strings.TrimSpace(msg) == "" {
		return fallback
	}
	return msg
}

func answer[T any](v *T, e *Error) []byte {
	return schema.MustMarshal(reply[T]{Result: v, Error: e})
}

func bad(msg string) *Error { return &Error{Code: CodeBadRequest, Message: msg} }

func notFound(msg string) *Error { return &Error{Code: CodeNotFound, Message: msg} }

// refuse logs a refused request, value-free (the verb, the code and the
// check that failed), and returns its error.
func (s *Server) refuse(verb, code, reason string) *Error {
	s.log().Warn("operator request refused", "verb", verb, "code", code, "reason", reason)
	return &Error{Code: code, Message: "operator request refused: " + reason}
}

// admit runs the checks every request passes before its verb acts, in this
// order: size; signature (unauthenticated); strict decoding into req
// (bad_request); the stamp's form (bad_request), age (stale) and nonce
// (replayed: the nonce is claimed, synced, before admit returns; stale
// when the stamp is too far before one accepted already for its nonce to
// be remembered, Nonces). It
// returns the signing operator's configured name ("" when unsigned).
//
// An unsigned request (accepted only with AllowUnsigned) may omit the
// stamp; a stamp it carries is checked like a signed request's.
func (s *Server) admit(verb string, hdr nats.Header, data []byte, req stamped) (operator string, e *Error) {
	if len(data) > MaxRequestBytes {
		return "", bad("request too large")
	}
	operator, signed, reason := authenticate(s.Operators, s.AllowUnsigned, hdr, data)
	if reason != "" {
		return "", s.refuse(verb, CodeUnauthenticated, reason)
	}
	if e := decode(data, req); e != nil {
		return "", e
	}
	st := req.stamp()
	if !signed && *st == (Stamp{}) {
		return "", nil
	}
	if st.RequestedAtMs <= 0 || !ValidNonce(st.Nonce) {
		return "", bad(fmt.Sprintf("requested_at_ms (Unix ms) and nonce (%d–%d characters of A-Z a-z 0-9 _ -) are required", MinNonceLen, MaxNonceLen))
	}
	now, skew := stages.NowMs(s.Clock), MaxRequestSkew.Milliseconds()
	switch {
	case st.RequestedAtMs < now-skew:
		return "", s.refuse(verb, CodeStale, fmt.Sprintf("requested_at_ms is more than %s old", MaxRequestSkew))
	case st.RequestedAtMs > now+skew:
		return "", s.refuse(verb, CodeStale, fmt.Sprintf("requested_at_ms is more than %s in the future", MaxRequestSkew))
	}
	// Claimed for good: what is forgotten, and what is refused as too old
	// for its nonce to be known, follows the stamps accepted (Nonces), not
	// this clock.
	claim, err := s.Nonces.ClaimNonce(st.Nonce, st.RequestedAtMs)
	switch {
	case err != nil:
		return "", s.internal("recording the nonce", err)
	case claim == kv.NonceReplayed:
		return "", s.refuse(verb, CodeReplayed, "the nonce was used before")
	case claim == kv.NonceTooOld:
		return "", s.refuse(verb, CodeStale, "requested_at_ms is too far before a request already accepted")
	}
	s.log().Debug("operator request", "verb", verb, "operator", operator, "signed", signed)
	return operator, nil
}

func (s *Server) internal(what string, err error) *Error {
	s.log().Error("admin request failed", "what", what, "err", err)
	return &Error{Code: CodeInternal, Message: what + " failed; see the processor's log"}
}

// decode strictly decodes a request body.
func decode(data []byte, v any) *Error {
	if len(data) == 0 {
		data = []byte("{}")
	}
	if err := schema.Decode(data, v); err != nil {
		return bad("request does not decode")
	}
	return nil
}

// target is the fingerprint a request names: its fingerprint, or the one
// its proposal was grounded to. Exactly one of the two must be given. A
// fingerprint is returned as given (the verb checks its form).
func (s *Server) target(fingerprint string, proposal *schema.ProposalRef) (string, *Error) {
	switch {
	case (fingerprint == "") == (proposal == nil):
		return "", bad("give exactly one of fingerprint and proposal")
	case proposal == nil:
		return fingerprint, nil
	case !ValidProposalRef(*proposal):
		return "", bad("proposal must be a host name and a proposal_id")
	}
	fp, found, err := s.Store.ProposalFingerprint(*proposal)
	if err != nil {
		return "", s.internal("reading the proposal's records", err)
	}
	if !found {
		return "", notFound("no fingerprint for " + proposal.String() + ": unknown here, or it ended before grounding")
	}
	return fp, nil
}

func (s *Server) receipts(_ string, req *ReceiptsRequest) (*Receipts, *Error) {
	fp, e := s.target(req.Fingerprint, req.Proposal)
	if e != nil {
		return nil, e
	}
	if !schema.ValidFingerprint(fp) {
		return nil, bad("fingerprint must be sha256:<64 lowercase hex>")
	}
	rec, found, err := s.Journal.Load(fp)
	if err != nil {
		return nil, s.internal("reading the journal", err)
	}
	if !found || rec.Receipt == nil {
		return nil, notFound("no receipt for " + fp)
	}
	rs, err := s.Journal.Receipts(fp)
	if err != nil {
		return nil, s.internal("reading receipts", err)
	}
	return &Receipts{
		Fingerprint: rec.Fingerprint, Referent: rec.Referent, Proposals: slices.Clone(rec.Proposals),
		OutcomeKind: rec.Latest.Kind, Terminal: rec.Latest.Terminal, Resolution: rec.Resolution, Receipts: rs,
	}, nil
}

func (s *Server) list(_ string, _ *ListRequest) (*List, *Error) {
	actions, err := s.indeterminate()
	if err != nil {
		return nil, s.internal("reading the indeterminate index", err)
	}
	return &List{NowMs: stages.NowMs(s.Clock), Actions: actions}, nil
}

func (s *Server) resolve(operator string, req *ResolveRequest) (*Resolved, *Error) {
	if req.Effect != EffectPresent && req.Effect != EffectAbsent {
		return nil, bad(`effect must be "present" or "absent"`)
	}
	fp, e := s.target(req.Fingerprint, req.Proposal)
	if e != nil {
		return nil, e
	}
	if req.ReceiptID != "" && !schema.ValidReceiptID(req.ReceiptID) {
		return nil, bad("receipt_id is not a receipt id (rcpt_<32 hex>)")
	}
	if req.ObservedAtMs < 0 {
		return nil, bad("observed_at_ms must be a Unix time in milliseconds")
	}
	res, err := s.Reconciliation.Resolve(fp, req.Effect == EffectPresent, req.EvidenceRef, operator, req.ResolveChecks)
	var refused *Error
	switch {
	case errors.As(err, &refused):
		return nil, refused
	case err != nil:
		return nil, s.internal("recording the resolution", err)
	}
	return &Resolved{Fingerprint: fp, OutcomeKind: res.OutcomeKind, Receipt: res.Receipt, Proposals: res.Proposals}, nil
}

// limit checks a request's list size.
func limit(n, def, most int) (int, *Error) {
	switch {
	case n == 0:
		return def, nil
	case n < 0 || n > most:
		return 0, bad(fmt.Sprintf("limit must be between 1 and %d", most))
	}
	return n, nil
}

func (s *Server) approvals(_ string, req *ApprovalsRequest) (*Approvals, *Error) {
	n, e := limit(req.Limit, DefaultApprovalsLimit, MaxApprovalsLimit)
	if e != nil {
		return nil, e
	}
	parked, total, err := s.Approvals.Parked(n)
	if err != nil {
		return nil, s.internal("reading the parked approvals", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	providers := s.providers(ctx, parked)
	out := &Approvals{NowMs: stages.NowMs(s.Clock), Total: total, Approvals: make([]ParkedApproval, 0, len(parked))}
	for _, a := range parked {
		out.Approvals = append(out.Approvals, ParkedApproval{
			Host: a.Host, ProposalID: a.ProposalID, Fingerprint: a.Fingerprint, Referent: a.Referent,
			Provider: providers[a.Fingerprint], ArrivedAtMs: a.ArrivedAtMs, ExpiresAtMs: a.ExpiresAtMs,
		})
	}
	return out, nil
}

// providers reads the provider of each approval's intent from its activity
// snapshot (the authorization record does not name it). What cannot be
// read stays "": the list is still worth having.
func (s *Server) providers(ctx context.Context, parked []kv.Approval) map[string]string {
	out := map[string]string{}
	if len(parked) == 0 || s.JS == nil {
		return out
	}
	bucket, err := s.JS.KeyValue(ctx, s.Subjects.ActivityBucket())
	if err != nil {
		s.log().Warn("admin: activity bucket unavailable; providers left out", "err", err)
		return out
	}
	for _, a := range parked {
		if _, done := out[a.Fingerprint]; done {
			continue
		}
		out[a.Fingerprint] = ""
		e, err := bucket.Get(ctx, schema.FingerprintKey(a.Fingerprint))
		if err != nil {
			continue
		}
		var act schema.Activity
		if schema.Decode(e.Value(), &act) == nil {
			out[a.Fingerprint] = act.Provider
		}
	}
	return out
}

func (s *Server) proposal(_ string, req *ProposalRequest) (*Proposal, *Error) {
	ref := schema.ProposalRef{Host: req.Host, ProposalID: req.ProposalID}
	if !ValidProposalRef(ref) {
		return nil, bad("host and proposal_id must name a proposal")
	}
	out := &Proposal{Host: ref.Host, ProposalID: ref.ProposalID, Outcomes: []StoredOutcome{}}
	fp, _, err := s.Store.ProposalFingerprint(ref)
	if err != nil {
		return nil, s.internal("reading the proposal's records", err)
	}
	a, found, err := s.Approvals.Load(ref)
	if err != nil {
		return nil, s.internal("reading the proposal's records", err)
	}
	if found {
		out.Approval = &ApprovalState{State: string(a.State), ArrivedAtMs: a.ArrivedAtMs, ExpiresAtMs: a.ExpiresAtMs, DecidedAtMs: a.DecidedAtMs, Code: a.Code}
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	if out.Outcomes, out.Truncated, err = s.outcomes(ctx, ref); err != nil {
		return nil, s.internal("reading the outcome stream", err)
	}
	if fp == "" {
		fp = outcomesFingerprint(out.Outcomes)
	}
	if fp == "" && out.Approval == nil && len(out.Outcomes) == 0 {
		return nil, notFound("nothing known of " + ref.String() + " (no record, no outcome in the stream)")
	}
	out.Fingerprint = fp
	if fp != "" {
		in, found, err := s.Journal.Load(fp)
		if err != nil {
			return nil, s.internal("reading the journal", err)
		}
		if found {
			out.Receipt = in.Receipt
		}
	}
	return out, nil
}

// outcomesFingerprint is the fingerprint the latest outcome that names one
// names.
func outcomesFingerprint(outs []StoredOutcome) string {
	for i := len(outs) - 1; i >= 0; i-- {
		if fp := outs[i].Outcome.NamedFingerprint(); fp != "" {
			return fp
		}
	}
	return ""
}

// outcomes reads the messages on a proposal's outcome subject from the
// outcome stream, oldest first, by direct gets of the next message for the
// subject: the first MaxProposalOutcomes-1, then the last (truncated says
// some between were left out).
func (s *Server) outcomes(ctx context.Context, ref schema.ProposalRef) ([]StoredOutcome, bool, error) {
	if s.JS == nil {
		return nil, false, errors.New("admin: no JetStream")
	}
	stream, err := s.JS.Stream(ctx, s.Subjects.OutcomesStream())
	if err != nil {
		return nil, false, err
	}
	subject := s.Subjects.Outcome(ref.Host, ref.ProposalID)
	var out []StoredOutcome
	add := func(m *jetstream.RawStreamMsg) {
		var o schema.Outcome
		if err := schema.Decode(m.Data, &o); err != nil {
			s.log().Warn("admin: an outcome message does not decode; left out", "seq", m.Sequence)
			return
		}
		o.Host = ref.Host
		out = append(out, StoredOutcome{Seq: m.Sequence, Outcome: o})
	}
	seq := uint64(1)
	for n := 0; n < MaxProposalOutcomes-1; n++ {
		m, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return orEmpty(out), false, nil
		}
		if err != nil {
			return nil, false, err
		}
		add(m)
		seq = m.Sequence + 1
	}
	// The rest: the last one, and whether any lie between.
	next, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return orEmpty(out), false, nil
	}
	if err != nil {
		return nil, false, err
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return nil, false, err
	}
	add(last)
	return out, last.Sequence != next.Sequence, nil
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// kvOperation is the header that marks a KV delete or purge.
const kvOperation = "KV-Operation"

func (s *Server) activityList(_ string, req *ActivityListRequest) (*ActivityList, *Error) {
	n, e := limit(req.Limit, DefaultActivityLimit, MaxActivityLimit)
	if e != nil {
		return nil, e
	}
	if s.JS == nil {
		return nil, s.internal("reading the activity bucket", errors.New("admin: no JetStream"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	bucket := s.Subjects.ActivityBucket()
	stream, err := s.JS.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, s.internal("reading the activity bucket", err)
	}
	entries, next, err := latestEntries(ctx, stream, "$KV."+bucket+".", req.Before, n, s.log())
	if err != nil {
		return nil, s.internal("reading the activity bucket", err)
	}
	return &ActivityList{NowMs: stages.NowMs(s.Clock), Entries: entries, Next: next}, nil
}

// probesPerEntry bounds the direct gets of one activity page: a sequence
// superseded by a later revision of its key is a gap that costs one.
const probesPerEntry = 64

// latestEntries walks the bucket's stream down from before-1 (0: from its
// last message) by direct gets, collecting up to n live snapshots: with
// History 1 every message still in the stream is its key's latest
// revision, so the walk meets the most recently changed first. It stops
// after n entries or n*probesPerEntry gets and returns where the next page
// starts (0: the stream is exhausted).
func latestEntries(ctx context.Context, stream jetstream.Stream, keyPrefix string, before uint64, n int, log *slog.Logger) ([]ActivityEntry, uint64, error) {
	st := stream.CachedInfo().State
	entries := []ActivityEntry{}
	seq := st.LastSeq
	if before > 0 && before-1 < seq {
		seq = before - 1
	}
	first := max(st.FirstSeq, 1)
	for probes := 0; seq >= first && len(entries) < n && probes < n*probesPerEntry; probes++ {
		m, err := stream.GetMsg(ctx, seq)
		seq--
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		if op := m.Header.Get(kvOperation); op != "" {
			continue // a delete or purge marker
		}
		var a schema.Activity
		if err := schema.Decode(m.Data, &a); err != nil {
			log.Warn("admin: an activity snapshot does not decode; left out", "seq", m.Sequence)
			continue
		}
		fp := a.Fingerprint
		if fp == "" {
			fp = schema.FingerprintOfKey(strings.TrimPrefix(m.Subject, keyPrefix))
		}
		entries = append(entries, ActivityEntry{
			Intent: Intent{
				Fingerprint: fp,
				Target: schema.Target{
					Provider:    a.Provider,
					Capability:  a.Capability,
					Operation:   a.Operation,
					Environment: a.Environment,
					Referent:    a.Referent,
				},
			},
			Status: a.Status, Proposals: orEmpty(a.Proposals), UpdatedAtMs: a.UpdatedAtMs, Revision: m.Sequence,
		})
	}
	var next uint64
	if seq >= first && seq > 0 {
		next = seq + 1
	}
	return entries, next, nil
}
