// Package subjects names every subject, stream, consumer and bucket
// Portcullis uses, all derived from one prefix (default "actions").
// "SPEC §1" here is section 1 of PROTOCOL.md, the wire contract at the
// repository's root.
//
// Public subjects (SPEC §1); <h> is a configured host's name:
//
//	<prefix>.proposals.<h>                   proposals from host <h>
//	<prefix>.grants.<h>                      host <h>'s standalone grants and declines
//	<prefix>.outcomes.<h>.<proposal_id>      outcomes of host <h>'s proposals
//	<prefix>.incidents.<phase>               incident events
//	<prefix>.candidates.<source>             candidate sources (core request-reply)
//	<prefix>.provider.<provider>.dispatch    provider connectors (core request-reply)
//	<prefix>.provider.<provider>.reconcile
//	<prefix>.disclosure.resolve              protected-profile resolver (core request-reply)
//
// Internal subjects:
//
//	<prefix>.stage.<stage>.<kind>.<id>       stage handoffs and timer triggers; id is
//	                                         <h>.<proposal_id> or a fingerprint's hex digits
//	<prefix>.kept.parked.<h>.<proposal_id>   envelopes kept per host (see Parked, Held)
//	<prefix>.kept.held.<h>.<hex>
//	<prefix>.admin.<verb>                    operator requests (CLI ↔ running processor)
//	<prefix>.record.outcomes.<h>.<proposal_id>  where the processor publishes an outcome: the
//	                                         outcomes stream stores it as <prefix>.outcomes.<h>.<proposal_id>
//	                                         and only then sends it there live (OutcomeRecord)
//
// Every identity receives replies under its own inbox prefix
// _INBOX.<public key> (Inbox).
//
// It imports nothing of Portcullis: every other package names subjects
// through it.
package subjects

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DefaultPrefix is the subject prefix when none is configured.
const DefaultPrefix = "actions"

// ErrInvalidPrefix is returned for a prefix that is not one or more plain
// subject tokens.
var ErrInvalidPrefix = errors.New("subjects: invalid prefix")

var (
	prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
)

// ValidHost reports whether h can be a host's subject token (SPEC §1):
// ^[A-Za-z0-9_-]{1,64}$, checked byte by byte (it runs for every message
// of every stage, where the regular expression cost a percent of the
// processor's CPU).
func ValidHost(h string) bool {
	if len(h) < 1 || len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// HostHeader is the header that names the host whose share of a history
// stream a message the processor publishes counts in (an incident event,
// an activity snapshot): a configured host's name, or Unattributed. The
// outcomes name theirs in their subjects.
const HostHeader = "Actions-Host"

// Unattributed is HostHeader's value for what no configured host is
// known to have caused: the events of input that names none, or that is
// not authenticated (its subject's host token is anyone's choice).
const Unattributed = "*"

// Stage names. They are also the durable consumer names and the values of
// the `stage` metric label.
const (
	StageAdmission      = "admission"
	StageGrounding      = "grounding"
	StageAuthorization  = "authorization"
	StageGrants         = "grants"
	StageDispatch       = "dispatch"
	StageReconciliation = "reconciliation"
)

// Message kinds on stage subjects.
const (
	KindProposal = "proposal" // an envelope handed on by the previous stage
	KindTimer    = "timer"    // a durable timer firing (approval expiry, reconciliation poll)
)

// Subjects derives every name from a prefix.
type Subjects struct {
	prefix string
}

// New validates prefix and returns its subjects.
func New(prefix string) (Subjects, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !prefixPattern.MatchString(prefix) || len(prefix) > 64 {
		return Subjects{}, fmt.Errorf("%w: %q", ErrInvalidPrefix, prefix)
	}
	return Subjects{prefix: prefix}, nil
}

// Default returns the subjects of DefaultPrefix.
func Default() Subjects { return Subjects{prefix: DefaultPrefix} }

func (s Subjects) p() string {
	if s.prefix == "" {
		return DefaultPrefix
	}
	return s.prefix
}

// Prefix returns the configured prefix.
func (s Subjects) Prefix() string { return s.p() }

// Proposals is the filter of every host's proposals.
func (s Subjects) Proposals() string { return s.p() + ".proposals.>" }

// Proposal is where host h publishes proposals.
func (s Subjects) Proposal(h string) string { return s.p() + ".proposals." + h }

// Grants is the filter of every host's grants and declines.
func (s Subjects) Grants() string { return s.p() + ".grants.>" }

// Grant is where host h publishes grants and declines.
func (s Subjects) Grant(h string) string { return s.p() + ".grants." + h }

// Outcomes is the filter of every outcome.
func (s Subjects) Outcomes() string { return s.p() + ".outcomes.>" }

// HostOutcomes is the filter of host h's outcomes.
func (s Subjects) HostOutcomes(h string) string { return s.p() + ".outcomes." + h + ".>" }

// Outcome is the subject of host h's proposal's outcomes.
func (s Subjects) Outcome(h, proposalID string) string {
	return s.p() + ".outcomes." + h + "." + proposalID
}

// OutcomeRecord is the internal subject the processor publishes host h's
// proposal's outcomes on. The outcomes stream captures it, stores the
// outcome under Outcome(h, proposalID) (a subject transform) and, once
// stored, republishes it there for live subscribers: so what a host sees
// live is exactly what the stream stored, in its order — a publish the
// stream refuses (a stale outcome, SPEC §2.4 Order) or drops as a
// duplicate (a repeat inside the replay window) reaches nobody.
func (s Subjects) OutcomeRecord(h, proposalID string) string {
	return s.p() + ".record.outcomes." + h + "." + proposalID
}

// OutcomeRecords is the filter of every OutcomeRecord subject.
func (s Subjects) OutcomeRecords() string { return s.p() + ".record.outcomes.>" }

// ParseOutcome splits an outcome subject into host and proposal id.
func (s Subjects) ParseOutcome(subject string) (h, proposalID string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.p()+".outcomes.")
	if !found {
		return "", "", false
	}
	h, proposalID, ok = strings.Cut(rest, ".")
	return h, proposalID, ok && ValidHost(h) && proposalID != "" && !strings.Contains(proposalID, ".")
}

// IngressHost returns the <h> token of a proposals or grants subject; ok is
// false for any other subject or a token that is not a valid host name.
func (s Subjects) IngressHost(subject string) (h string, ok bool) {
	for _, kind := range []string{".proposals.", ".grants."} {
		if rest, found := strings.CutPrefix(subject, s.p()+kind); found {
			return rest, ValidHost(rest)
		}
	}
	return "", false
}

func (s Subjects) Incidents() string            { return s.p() + ".incidents.>" }
func (s Subjects) Incident(phase string) string { return s.p() + ".incidents." + phase }

func (s Subjects) Candidates(source string) string { return s.p() + ".candidates." + source }
func (s Subjects) DisclosureResolve() string       { return s.p() + ".disclosure.resolve" }
func (s Subjects) ProviderDispatch(provider string) string {
	return s.p() + ".provider." + provider + ".dispatch"
}
func (s Subjects) ProviderReconcile(provider string) string {
	return s.p() + ".provider." + provider + ".reconcile"
}

// Internal is the filter of every internal (stage) subject.
func (s Subjects) Internal() string { return s.p() + ".stage.>" }

// Admins is the filter of every operator request subject.
func (s Subjects) Admins() string { return s.p() + ".admin.>" }

// Inbox is the reply-subject prefix of the identity with this public key:
// "_INBOX.<public key>". Clients pass it to nats.CustomInboxPrefix.
func Inbox(publicKey string) string { return "_INBOX." + publicKey }

// DirectGetLast is the JetStream API subject a host requests (empty body)
// to read the last message on subject from stream.
func DirectGetLast(stream, subject string) string {
	return "$JS.API.DIRECT.GET." + stream + "." + subject
}

// ProposalToken is a proposal's identity as a subject suffix:
// "<h>.<proposal_id>" (neither part contains a dot).
func ProposalToken(h, proposalID string) string { return h + "." + proposalID }

// ParseProposalToken reads "<h>.<proposal_id>".
func ParseProposalToken(s string) (h, proposalID string, ok bool) {
	h, proposalID, ok = strings.Cut(s, ".")
	if !ok || !ValidHost(h) || proposalID == "" || strings.Contains(proposalID, ".") {
		return "", "", false
	}
	return h, proposalID, true
}

// StageAll is the filter of everything a stage consumes from its stream.
func (s Subjects) StageAll(stage string) string { return s.p() + ".stage." + stage + ".>" }

// StageKind is the filter of one kind of a stage's messages: its
// hand-offs (KindProposal), or its timers (KindTimer).
func (s Subjects) StageKind(stage, kind string) string {
	return s.p() + ".stage." + stage + "." + kind + ".>"
}

// Stage is the subject of one message of a kind for a stage; id is a
// proposal id or a fingerprint's hex digits.
func (s Subjects) Stage(stage, kind, id string) string {
	return s.p() + ".stage." + stage + "." + kind + "." + id
}

// Schedules is the filter of the schedule messages (nats-server message
// scheduling, ADR-51) of a stage's timers: they live in the stage's stream
// beside the timer messages the server publishes from them, outside the
// stage consumer's filter (StageAll).
func (s Subjects) Schedules(stage string) string { return s.p() + ".schedule." + stage + ".>" }

// Schedule is the subject of one of a stage's schedule messages; id is one
// subject token naming the timer.
func (s Subjects) Schedule(stage, id string) string { return s.p() + ".schedule." + stage + "." + id }

// ParseStage splits a stage subject into its kind and id.
func (s Subjects) ParseStage(subject string) (stage, kind, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.p()+".stage.")
	if !found {
		return "", "", "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// Admin is an operator request subject.
func (s Subjects) Admin(verb string) string { return s.p() + ".admin." + verb }

// Admin verbs.
const (
	AdminReceipt        = "receipts.get"
	AdminReconcileList  = "reconcile.list"
	AdminReconcileSolve = "reconcile.resolve"
	AdminApprovalsList  = "approvals.list"
	AdminProposalGet    = "proposals.get"
	AdminActivityList   = "activity.list"
	AdminStatus         = "status.get"
)

// AdminVerbs lists every admin verb.
func AdminVerbs() []string {
	return []string{AdminReceipt, AdminReconcileList, AdminReconcileSolve, AdminApprovalsList, AdminProposalGet, AdminActivityList, AdminStatus}
}

// Stream names.

func (s Subjects) streamBase() string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(s.p()))
}

// ProposalsStream and GrantsStream are the ingress streams every host
// shares when unsigned input is allowed (local development).
func (s Subjects) ProposalsStream() string { return s.streamBase() + "_PROPOSALS" }
func (s Subjects) GrantsStream() string    { return s.streamBase() + "_GRANTS" }

// HostProposalsStream and HostGrantsStream are host h's own ingress
// streams: its budget, and its own Nats-Msg-Id dedupe window.
func (s Subjects) HostProposalsStream(h string) string {
	return s.streamBase() + "_PROPOSALS_" + NameToken(h)
}
func (s Subjects) HostGrantsStream(h string) string {
	return s.streamBase() + "_GRANTS_" + NameToken(h)
}

// Kept envelopes. Each host keeps the envelopes of its proposals parked
// for approval, and of its dispatches whose effect is unknown, in streams
// of its own (its budgets): HostParkedStream and HostHeldStream. With
// unsigned input allowed (local development), where any subject token is
// a host, the hosts share KeptParkedStream and KeptHeldStream.
//
//	<prefix>.kept.parked.<h>.<proposal_id>   a parked proposal's envelope
//	<prefix>.kept.held.<h>.<hex>             a dispatch's envelope, by fingerprint

// HostParkedStream and HostHeldStream are host h's kept envelopes.
func (s Subjects) HostParkedStream(h string) string {
	return s.streamBase() + "_PARKED_" + NameToken(h)
}
func (s Subjects) HostHeldStream(h string) string { return s.streamBase() + "_HELD_" + NameToken(h) }

// KeptParkedStream and KeptHeldStream are every host's kept envelopes when
// the hosts share streams (unsigned input allowed).
func (s Subjects) KeptParkedStream() string { return s.streamBase() + "_KEPT_PARKED" }
func (s Subjects) KeptHeldStream() string   { return s.streamBase() + "_KEPT_HELD" }

// Parked is the subject of host h's parked proposal's envelope;
// HostParked the filter of h's, ParkedAll of every host's.
func (s Subjects) Parked(h, proposalID string) string {
	return s.p() + ".kept.parked." + h + "." + proposalID
}
func (s Subjects) HostParked(h string) string { return s.p() + ".kept.parked." + h + ".>" }
func (s Subjects) ParkedAll() string          { return s.p() + ".kept.parked.>" }

// Held is the subject of the envelope host h's proposal left for the
// intent whose fingerprint's 64 hex digits are hex; HostHeld the filter of
// h's, HeldAll of every host's.
func (s Subjects) Held(h, hex string) string { return s.p() + ".kept.held." + h + "." + hex }
func (s Subjects) HostHeld(h string) string  { return s.p() + ".kept.held." + h + ".>" }
func (s Subjects) HeldAll() string           { return s.p() + ".kept.held.>" }

// Where an earlier version kept the envelopes, one stream for every host:
// read, and dropped, until those streams are empty (engine deletes them
// then).

// LegacyHeldStream held, per intent, the envelope of a dispatch whose
// effect is unknown; LegacyHeld is an intent's subject (hex: the
// fingerprint's 64 hex digits), LegacyHeldAll the filter of all.
func (s Subjects) LegacyHeldStream() string     { return s.streamBase() + "_HELD" }
func (s Subjects) LegacyHeld(hex string) string { return s.p() + ".held." + hex }
func (s Subjects) LegacyHeldAll() string        { return s.p() + ".held.>" }

// LegacyParkedStream held the envelopes of proposals parked for approval;
// LegacyParked is a proposal's subject (token: ProposalToken),
// LegacyParkedAll the filter of all.
func (s Subjects) LegacyParkedStream() string { return s.streamBase() + "_PARKED" }
func (s Subjects) LegacyParked(token string) string {
	return s.p() + ".stage." + StageAuthorization + ".parked." + token
}
func (s Subjects) LegacyParkedAll() string {
	return s.p() + ".stage." + StageAuthorization + ".parked.>"
}

// HostStageKind is the filter of host h's messages of a kind for a stage:
// the hand-offs of h's proposals (KindProposal), which a stage reads with
// a consumer of h's own.
func (s Subjects) HostStageKind(stage, kind, h string) string {
	return s.p() + ".stage." + stage + "." + kind + "." + h + ".>"
}

// HostConsumer is the durable consumer through which a stage reads host
// h's messages from a stream the hosts share.
func HostConsumer(stage, h string) string { return stage + "_" + NameToken(h) }

// NameToken is host name h as part of a stream or consumer name: itself
// when it has no upper-case letter, else lower-cased with 8 hex digits of
// its SHA-256 (stream and consumer names become file names, and two names
// that differ only in case must not share one on a case-insensitive file
// system).
func NameToken(h string) string {
	low := strings.ToLower(h)
	if low == h {
		return h
	}
	sum := sha256.Sum256([]byte(h))
	return low + "_" + hex.EncodeToString(sum[:4])
}
func (s Subjects) OutcomesStream() string  { return s.streamBase() + "_OUTCOMES" }
func (s Subjects) IncidentsStream() string { return s.streamBase() + "_INCIDENTS" }

// StageStream is the stream feeding a stage (grounding, authorization,
// dispatch, reconciliation).
func (s Subjects) StageStream(stage string) string {
	return s.streamBase() + "_" + strings.ToUpper(stage)
}

// TimersStream is the stream of a stage's durable timers
// (StageKind(stage, KindTimer)) and, on a cluster, of the schedules that
// fire them (Schedules): apart from the stage's hand-offs, so that the
// hand-off stream refuses when full (the stage before waits) while the
// schedules, which nats-server keeps only in a stream that drops its
// oldest messages, never share its budget.
func (s Subjects) TimersStream(stage string) string {
	return s.streamBase() + "_TIMERS_" + strings.ToUpper(stage)
}

// TimersConsumer is the durable consumer of a stage's timers stream, and
// its `stage` metric label.
func TimersConsumer(stage string) string { return stage + "_timers" }

// JournalBucket is the KV bucket of the replicated dispatch journal:
// "actions_journal" for the default prefix.
func (s Subjects) JournalBucket() string { return s.bucket("journal") }

// AdmissionBucket is the KV bucket of the replicated admission records
// (proposal ids and delivery ids taken): "actions_admission" for the
// default prefix.
func (s Subjects) AdmissionBucket() string {
	return s.bucket("admission")
}

// NonceBucket is the KV bucket of the operator request nonces claimed on a
// cluster: "actions_nonces" for the default prefix.
func (s Subjects) NonceBucket() string {
	return s.bucket("nonces")
}

// ApprovalsBucket is the KV bucket of the replicated approval records
// (the authorization stage's state on a cluster): "actions_approvals" for
// the default prefix.
func (s Subjects) ApprovalsBucket() string {
	return s.bucket("approvals")
}

// bucket is the name of the prefix's bucket called name.
func (s Subjects) bucket(name string) string {
	return strings.NewReplacer(".", "_", "-", "_").Replace(s.p()) + "_" + name
}

// ActivityBucket is the KV bucket of activity snapshots: "actions_activity"
// for the default prefix.
func (s Subjects) ActivityBucket() string {
	return s.bucket("activity")
}
