package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	kvjs "github.com/portcullis/portcullis/kv/jetstream"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/subjects"
)

// DuplicateWindow is the Nats-Msg-Id dedupe window. Durable dedupe
// (delivery ids, receipts) lives in Pebble; this window absorbs
// republishing after a crash or a lost ack.
const DuplicateWindow = 10 * time.Minute

// headerAllowance is what an ingress message may carry beyond its body
// (signature headers, a Nats-Msg-Id): the streams' MaxMsgSize counts both.
const headerAllowance = 4096

// StreamConfigs lists every stream of a configuration. The streams that
// feed stages hold work, not history (WorkQueue retention: a message goes
// once its consumer acked it), so their size follows the backlog, not the
// week's traffic; outcomes and incidents are history (Limits, MaxAge).
// Every stream is bounded, with a discard policy chosen by what it holds:
//   - ingress: each host has its own proposals and grants streams (its
//     budget, IngressMaxBytes and IngressMaxMsgs, and its own Nats-Msg-Id
//     dedupe window), which refuse new messages when full — that host's
//     publish fails, no other host's; with unsigned input allowed (local
//     development, where any subject token is a host) the hosts share
//     one stream, each subject IngressMaxMsgs;
//   - stage streams refuse too: the stage's hand-off is retried, its input
//     kept, until there is room (the stage before waits: nothing is failed
//     or dropped);
//   - a Scheduled stage's timers have a stream of their own (TimersStream):
//     on a cluster it holds the nats-server schedules, which a stream
//     takes only if it drops its oldest messages when full — so the
//     hand-offs never share that stream;
//   - history (outcomes, incidents) drops its oldest messages.
//
// MaxAge is at least twice the approval TTL: a parked proposal's envelope
// is re-read from the parked stream when its grant arrives.
//
// pipeline's internal stages each get a stream; nil: Pipeline(). With a
// replicated journal (store.journal) the list also holds the streams of
// the buckets a cluster shares — the journal's (kvjs.JournalBucket), the
// approvals' (kvjs.ApprovalsBucket, records kept for ApprovalsHorizon),
// the admission records' (kvjs.AdmissionBucket) and the operator
// nonces' (kvjs.NonceBucket) — and the Scheduled stages take their
// timers' schedules.
func StreamConfigs(s subjects.Subjects, c *config.Config, pipeline []Spec) []jetstream.StreamConfig {
	if pipeline == nil {
		pipeline = Pipeline()
	}
	lim := c.Streams
	maxAge := max(lim.MaxAge, 2*c.Approval.TTL)
	mk := func(name, desc string, maxBytes int64, discard jetstream.DiscardPolicy, subj ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    subj,
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      maxAge,
			MaxBytes:    maxBytes,
			Discard:     discard,
			Duplicates:  DuplicateWindow,
			Replicas:    c.NATS.Replicas,
		}
	}
	ingress := func(cfg jetstream.StreamConfig) jetstream.StreamConfig {
		cfg.MaxMsgSize = int32(c.Admission.MaxPayloadBytes + headerAllowance)
		if perHost(c) {
			cfg.MaxMsgs = lim.IngressMaxMsgs
		} else {
			cfg.MaxMsgsPerSubject, cfg.DiscardNewPerSubject = lim.IngressMaxMsgs, true
		}
		return cfg
	}
	history := func(cfg jetstream.StreamConfig) jetstream.StreamConfig {
		cfg.Retention = jetstream.LimitsPolicy
		cfg.AllowDirect = true // hosts and operators read it with direct gets (SPEC §2.8)
		return cfg
	}
	// The outcomes: published on internal subjects, stored under the
	// public ones and sent there live once stored (kv/jetstream.OutcomeStream).
	outcomes := func(cfg jetstream.StreamConfig) jetstream.StreamConfig {
		o := kvjs.OutcomeStream(s)
		cfg.Subjects, cfg.SubjectTransform, cfg.RePublish = o.Subjects, o.SubjectTransform, o.RePublish
		return cfg
	}
	var out []jetstream.StreamConfig
	if perHost(c) {
		for _, h := range c.Hosts {
			out = append(out,
				ingress(mk(s.HostProposalsStream(h.Name), "Portcullis ingress: host "+h.Name+"'s proposals", lim.IngressMaxBytes, jetstream.DiscardNew, s.Proposal(h.Name))),
				ingress(mk(s.HostGrantsStream(h.Name), "Portcullis ingress: host "+h.Name+"'s standalone grants and declines", lim.IngressMaxBytes, jetstream.DiscardNew, s.Grant(h.Name))))
		}
	} else {
		out = append(out,
			ingress(mk(s.ProposalsStream(), "Portcullis ingress: proposals from hosts", lim.IngressMaxBytes, jetstream.DiscardNew, s.Proposals())),
			ingress(mk(s.GrantsStream(), "Portcullis ingress: standalone grants and declines", lim.IngressMaxBytes, jetstream.DiscardNew, s.Grants())))
	}
	out = append(out,
		history(outcomes(mk(s.OutcomesStream(), "Portcullis outcomes, one subject per proposal", lim.HistoryMaxBytes, jetstream.DiscardOld))),
		history(mk(s.IncidentsStream(), "Portcullis value-free incident events", lim.HistoryMaxBytes, jetstream.DiscardOld, s.Incidents())))
	// Envelopes kept per host (kept): each host's in a stream of its own,
	// its budget, refusing when full — that host's park or hold is
	// refused, no other host's.
	kept := func(name, desc string, maxBytes int64, subj string) jetstream.StreamConfig {
		cfg := mk(name, desc, maxBytes, jetstream.DiscardNew, subj)
		cfg.Retention, cfg.MaxMsgsPerSubject = jetstream.LimitsPolicy, 1
		return cfg
	}
	for _, st := range internalStages(pipeline) {
		if st.Holds {
			// The envelope of each dispatch whose effect is unknown for
			// want of an answer, until reconciliation knows (one per
			// intent and host: history of a kind, read back by subject).
			if perHost(c) {
				for _, h := range c.Hosts {
					out = append(out, kept(s.HostHeldStream(h.Name), "Portcullis: host "+h.Name+"'s envelopes of dispatches whose effect is unknown", lim.HostHeldMaxBytes, s.HostHeld(h.Name)))
				}
			} else {
				out = append(out, kept(s.KeptHeldStream(), "Portcullis envelopes of dispatches whose effect is unknown", lim.StageMaxBytes, s.HeldAll()))
			}
		}
		if !st.Scheduled {
			out = append(out, mk(s.StageStream(st.Name), "Portcullis hand-off to the "+st.Name+" stage", lim.StageMaxBytes, jetstream.DiscardNew, s.StageAll(st.Name)))
			continue
		}
		if !st.TimersOnly {
			out = append(out, mk(s.StageStream(st.Name), "Portcullis hand-off to the "+st.Name+" stage", lim.StageMaxBytes, jetstream.DiscardNew,
				s.StageKind(st.Name, subjects.KindProposal)))
		}
		timers := mk(s.TimersStream(st.Name), "Portcullis durable timers of the "+st.Name+" stage", lim.StageMaxBytes, jetstream.DiscardNew,
			s.StageKind(st.Name, subjects.KindTimer))
		if c.ReplicatedJournal() {
			timers = scheduled(s, st.Name, timers)
		}
		out = append(out, timers)
		if st.Parks {
			// One envelope per parked proposal, until it is decided:
			// history of a kind, read back by subject.
			if perHost(c) {
				for _, h := range c.Hosts {
					out = append(out, kept(s.HostParkedStream(h.Name), "Portcullis: host "+h.Name+"'s envelopes of proposals parked for approval", lim.HostParkedMaxBytes, s.HostParked(h.Name)))
				}
			} else {
				out = append(out, kept(s.KeptParkedStream(), "Portcullis envelopes of proposals parked for approval", lim.StageMaxBytes, s.ParkedAll()))
			}
		}
	}
	if c.ReplicatedJournal() {
		proposals, _ := c.RetentionHorizons()
		out = append(out, kvjs.JournalBucket(s.JournalBucket(), c.NATS.Replicas).Stream(),
			kvjs.ApprovalsBucket(s.ApprovalsBucket(), c.NATS.Replicas, ApprovalsHorizon(c)).Stream(),
			kvjs.AdmissionBucket(s.AdmissionBucket(), c.NATS.Replicas, proposals).Stream(),
			kvjs.NonceBucket(s.NonceBucket(), c.NATS.Replicas).Stream())
	}
	return out
}

// perHost reports whether each host has its own ingress streams and its
// own consumers at every stage: always, but with unsigned input allowed
// (local development), where any subject token is a host.
func perHost(c *config.Config) bool { return !c.Admission.AllowUnsigned }

// ApprovalsHorizon is how long the replicated approvals bucket keeps a
// record after its last change (the bucket stream's MaxAge; the retention
// sweep covers Pebble only): the proposals' retention horizon, and at
// least as long as the streams keep the inputs that could ask for it
// again (a redelivered proposal, grant or expiry republishes the recorded
// decision). A parked record's expiry fires long before: approval.ttl is
// at most half of it.
func ApprovalsHorizon(c *config.Config) time.Duration {
	proposals, _ := c.RetentionHorizons()
	return max(proposals, c.Streams.MaxAge, 2*c.Approval.TTL)
}

// scheduled makes a timers stream take its stage's schedules: their
// subjects (outside the timers consumer's filter), message schedules on,
// and — which schedules require — the oldest messages dropped when full.
// A timers stream holds only timers, each due within 32 reconciliation
// intervals or one approval.ttl, and their schedules: one per pending
// intent or parked proposal. Each Scheduled stage has its own schedule
// subjects (`<prefix>.schedule.<stage>.>`), so two never overlap.
func scheduled(s subjects.Subjects, stage string, cfg jetstream.StreamConfig) jetstream.StreamConfig {
	cfg.Subjects = []string{s.StageKind(stage, subjects.KindTimer), s.Schedules(stage)}
	cfg.AllowMsgSchedules = true
	cfg.Discard = jetstream.DiscardOld
	return cfg
}

// legacyScheduled is the stream layout of a Scheduled stage whose stream
// an earlier version gave message schedules: the server never turns them
// off, so that stream keeps taking the stage's timers and schedules (and
// drops its oldest messages when full), and no timers stream is made.
func legacyScheduled(s subjects.Subjects, stage string, cfg jetstream.StreamConfig) jetstream.StreamConfig {
	cfg = scheduled(s, stage, cfg)
	cfg.Subjects = []string{s.StageAll(stage), s.Schedules(stage)}
	return cfg
}

// ActivityConfig is the activity bucket: one value-free snapshot per
// intent, kept as long as the streams keep their messages after its last
// change. It shares history's byte bound, and like history it drops its
// oldest messages when full (EnsureStreams sets that on its stream).
func ActivityConfig(s subjects.Subjects, c *config.Config) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      s.ActivityBucket(),
		Description: "Portcullis value-free activity snapshot per intent fingerprint",
		History:     1,
		TTL:         max(c.Streams.MaxAge, 2*c.Approval.TTL),
		MaxBytes:    c.Streams.HistoryMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    c.NATS.Replicas,
	}
}

// EnsureStreams creates or updates every stream of the default pipeline
// and the activity bucket. It is idempotent: every start runs it. Each
// JetStream API call is retried with a short context while the server (a
// cluster without a meta leader yet, or electing one) does not answer,
// until ctx ends.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, c *config.Config) (jetstream.KeyValue, error) {
	kv, _, deferred, err := ensureStreams(ctx, js, s, c, Pipeline(), nil)
	if err == nil {
		err = upgradeStreams(ctx, js, s, deferred, 0, nil)
	}
	return kv, err
}

// ensureStreams creates or updates every stream of pipeline and the
// activity bucket. It returns the Scheduled stages whose stream an earlier
// version gave message schedules and that still holds some
// (legacyScheduled): they run without a timers stream; and the streams an
// earlier version made that cannot be changed in place (retention, or
// subjects another stream now takes), which upgradeStreams replaces once
// it can tell they hold no work. log (nil: none) hears of each.
func ensureStreams(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, c *config.Config, pipeline []Spec, log *slog.Logger) (jetstream.KeyValue, map[string]bool, []jetstream.StreamConfig, error) {
	legacy := map[string]bool{}
	var deferred []jetstream.StreamConfig
	desired := StreamConfigs(s, c, pipeline)
	for _, st := range internalStages(pipeline) {
		if !st.Scheduled {
			continue
		}
		var cfg jetstream.StreamConfig
		found := false
		err := retryJS(ctx, func(ctx context.Context) error {
			stream, err := js.Stream(ctx, s.StageStream(st.Name))
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			cfg, found = stream.CachedInfo().Config, true
			return nil
		})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("engine: stream %s: %w", s.StageStream(st.Name), err)
		}
		if !found || !cfg.AllowMsgSchedules {
			continue
		}
		// Schedules the server still holds would be lost with the stream:
		// then it keeps its layout (and its stage runs on it).
		if pending, err := schedulesPending(ctx, js, s, cfg.Name); err != nil {
			return nil, nil, nil, err
		} else if pending {
			legacy[st.Name] = true
			if log != nil {
				log.Error("stream made with message schedules by an earlier version, schedules pending: it keeps the stage's timers and drops its oldest hand-offs when full; it is replaced at a start when none is pending",
					"stream", cfg.Name)
			}
			continue
		}
		deferred = append(deferred, stageStreamOrRetired(s, st, cfg, desired))
	}
	// Streams of an earlier layout whose subjects a stream of this one
	// takes (the ingress all hosts shared, a stage stream that took its
	// timers) go first, once they hold no work.
	retiring := map[string][]string{}
	retire, err := overlapping(ctx, js, s, pipeline, desired, legacy, deferred, retiring)
	if err != nil {
		return nil, nil, nil, err
	}
	deferred = append(retire, deferred...)
	for _, cfg := range desired {
		if stage, ok := scheduledStage(s, pipeline, cfg.Name); ok && legacy[stage] {
			cfg = legacyScheduled(s, stage, cfg)
		} else if stage, ok := timersStage(s, pipeline, cfg.Name); ok && legacy[stage] {
			continue
		}
		if slices.ContainsFunc(deferred, func(d jetstream.StreamConfig) bool { return d.Name == cfg.Name }) {
			continue
		}
		if overlapsAny(cfg, retiring) {
			deferred = append(deferred, cfg) // made once the old one is gone
			continue
		}
		err = retryJS(ctx, func(ctx context.Context) error {
			if stage, ok := timersStage(s, pipeline, cfg.Name); ok && !cfg.AllowMsgSchedules {
				// A stream once given schedules keeps them (the server
				// refuses to turn them off): a local journal after a
				// replicated one uses it as it is.
				if st, err := js.Stream(ctx, cfg.Name); err == nil && st.CachedInfo().Config.AllowMsgSchedules {
					cfg = scheduled(s, stage, cfg)
				}
			}
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			return err
		})
		if incompatible(err) {
			deferred = append(deferred, cfg)
			continue
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("engine: stream %s: %w", cfg.Name, err)
		}
	}
	if err := retireLegacyKept(ctx, js, s, log); err != nil {
		return nil, nil, nil, err
	}
	var kv jetstream.KeyValue
	err = retryJS(ctx, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, ActivityConfig(s, c))
		return err
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("engine: bucket %s: %w", s.ActivityBucket(), err)
	}
	if err := retryJS(ctx, func(ctx context.Context) error { return discardOldest(ctx, js, "KV_"+s.ActivityBucket()) }); err != nil {
		return nil, nil, nil, fmt.Errorf("engine: bucket %s: %w", s.ActivityBucket(), err)
	}
	return kv, legacy, deferred, nil
}

// overlapping finds the streams (not among desired, nor a legacy stage's
// kept as it is, nor already deferred) that capture a subject of a desired
// stream: an earlier layout's. Each is to be retired (a config with its
// name and no subjects).
func overlapping(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, pipeline []Spec, desired []jetstream.StreamConfig, legacy map[string]bool, deferred []jetstream.StreamConfig, retiring map[string][]string) ([]jetstream.StreamConfig, error) {
	keep := map[string]bool{}
	for _, d := range desired {
		keep[d.Name] = true
	}
	for _, d := range deferred {
		keep[d.Name] = true
	}
	for stage, ok := range legacy {
		if ok {
			keep[s.StageStream(stage)] = true
		}
	}
	var out []jetstream.StreamConfig
	for _, d := range desired {
		if stage, ok := timersStage(s, pipeline, d.Name); ok && legacy[stage] {
			continue
		}
		for _, subj := range d.Subjects {
			var names []string
			err := retryJS(ctx, func(ctx context.Context) error {
				names = names[:0]
				l := js.StreamNames(ctx, jetstream.WithStreamListSubject(subj))
				for n := range l.Name() {
					names = append(names, n)
				}
				return l.Err()
			})
			if err != nil {
				return nil, fmt.Errorf("engine: streams taking %s: %w", subj, err)
			}
			for _, n := range names {
				if keep[n] {
					continue
				}
				keep[n] = true
				var old []string
				err := retryJS(ctx, func(ctx context.Context) error {
					st, err := js.Stream(ctx, n)
					if err == nil {
						old = st.CachedInfo().Config.Subjects
					}
					return err
				})
				if err != nil {
					return nil, fmt.Errorf("engine: stream %s: %w", n, err)
				}
				retiring[n] = old
				out = append(out, jetstream.StreamConfig{Name: n})
			}
		}
	}
	return out, nil
}

// overlapsAny reports whether cfg takes a subject one of the retiring
// streams (their subjects, by name) takes too.
func overlapsAny(cfg jetstream.StreamConfig, retiring map[string][]string) bool {
	for _, subjs := range retiring {
		for _, a := range subjs {
			for _, b := range cfg.Subjects {
				if collide(a, b) {
					return true
				}
			}
		}
	}
	return false
}

// collide reports whether some subject matches both filters a and b.
func collide(a, b string) bool {
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(ta) && i < len(tb); i++ {
		if ta[i] == ">" || tb[i] == ">" {
			return true
		}
		if ta[i] != tb[i] && ta[i] != "*" && tb[i] != "*" {
			return false
		}
	}
	return len(ta) == len(tb)
}

// stageStreamOrRetired is what replaces a Scheduled stage's legacy stream
// cfg: the stage stream of desired, or — for a stage that has only timers
// now — a config naming the stream with no subjects, which upgradeStreams
// deletes and does not make again.
func stageStreamOrRetired(s subjects.Subjects, st Spec, cfg jetstream.StreamConfig, desired []jetstream.StreamConfig) jetstream.StreamConfig {
	for _, d := range desired {
		if d.Name == cfg.Name {
			return d
		}
	}
	return jetstream.StreamConfig{Name: s.StageStream(st.Name)}
}

// incompatible reports a stream update the server refuses because the
// stream was made otherwise (its retention, or subjects another stream
// now takes): an earlier version's layout.
func incompatible(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamNameInUse, errCodeSubjectsOverlap:
		return true
	case errCodeStreamInvalidConfig:
		return strings.Contains(apiErr.Description, "retention")
	}
	return false
}

// JetStream error codes of incompatible stream updates.
const (
	errCodeStreamInvalidConfig jetstream.ErrorCode = 10052
	errCodeSubjectsOverlap     jetstream.ErrorCode = 10065
)

// schedulesPending reports whether stream holds message schedules that have
// not fired.
func schedulesPending(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, stream string) (bool, error) {
	var pending bool
	err := retryJS(ctx, func(ctx context.Context) error {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.Prefix()+".schedule.>"))
		if err != nil {
			return err
		}
		pending = len(info.State.Subjects) > 0
		return nil
	})
	return pending, err
}

// ErrStreamHoldsWork is returned at start for a stream an earlier version
// made that must be replaced but still holds work.
var ErrStreamHoldsWork = errors.New("engine: a stream made by an earlier version still holds work")

// upgradeStreams replaces the streams ensureStreams deferred: each, once
// it holds no work — every consumer caught up, no schedule pending, and
// for the authorization stream no proposal parked (its envelope would go
// with it) — is deleted and made anew (or only deleted, when nothing
// takes its place); otherwise the start fails, naming it.
func upgradeStreams(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, deferred []jetstream.StreamConfig, parked int, log *slog.Logger) error {
	for _, cfg := range deferred {
		err := retryJS(ctx, func(ctx context.Context) error {
			st, err := js.Stream(ctx, cfg.Name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			idle, err := holdsNoWork(ctx, st, s)
			if err != nil {
				return err
			}
			if !idle || (cfg.Name == s.StageStream(subjects.StageAuthorization) && parked > 0) {
				return fmt.Errorf("%w: %s — run the version that made it until every stage consumer has caught up and no approval is pending, then start this one", ErrStreamHoldsWork, cfg.Name)
			}
			return js.DeleteStream(ctx, cfg.Name)
		})
		if err != nil {
			return err
		}
		if len(cfg.Subjects) == 0 {
			continue
		}
		if err := retryJS(ctx, func(ctx context.Context) error { _, err := js.CreateStream(ctx, cfg); return err }); err != nil {
			return fmt.Errorf("engine: stream %s: %w", cfg.Name, err)
		}
		if log != nil {
			log.Info("stream made by an earlier version replaced", "stream", cfg.Name)
		}
	}
	return nil
}

// holdsNoWork reports whether every consumer of st has caught up (nothing
// pending, nothing awaiting an ack), no schedule is pending, and nothing
// waits for a consumer that does not exist.
func holdsNoWork(ctx context.Context, st jetstream.Stream, s subjects.Subjects) (bool, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.Prefix()+".schedule.>"))
	if err != nil {
		return false, err
	}
	if len(info.State.Subjects) > 0 {
		return false, nil
	}
	consumers := 0
	for ci := range st.ListConsumers(ctx).Info() {
		consumers++
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			return false, nil
		}
	}
	return consumers > 0 || info.State.Msgs == 0, nil
}

// scheduledStage is the Scheduled stage of pipeline whose stream is named
// name, if there is one.
func scheduledStage(s subjects.Subjects, pipeline []Spec, name string) (string, bool) {
	for _, st := range internalStages(pipeline) {
		if st.Scheduled && s.StageStream(st.Name) == name {
			return st.Name, true
		}
	}
	return "", false
}

// timersStage is the Scheduled stage of pipeline whose timers stream is
// named name, if there is one.
func timersStage(s subjects.Subjects, pipeline []Spec, name string) (string, bool) {
	for _, st := range internalStages(pipeline) {
		if st.Scheduled && s.TimersStream(st.Name) == name {
			return st.Name, true
		}
	}
	return "", false
}

// apiTimeout bounds one JetStream API call of retryJS.
const apiTimeout = 2 * time.Second

// retryJS calls f with an apiTimeout context until it succeeds, fails for
// a reason waiting does not fix, or ctx ends. A JetStream API call that
// finds no leader gets no answer at all until its context ends (a cluster
// right after its start, or electing one), or "no responders", or a 503:
// those are retried.
func retryJS(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, apiTimeout)
		err := f(cctx)
		cancel()
		if err == nil || !unavailable(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// unavailable reports an error that says JetStream did not answer, not
// that it refused — or that it cannot place a stream's replicas because a
// server is down (10005), which a processor starting during an outage
// waits out.
func unavailable(err error) bool {
	return kvjs.Unanswered(err) || kvjs.NoPeers(err)
}

// discardOldest makes a full KV bucket drop its oldest messages instead of
// refusing writes (the client always creates buckets with DiscardNew). The
// activity bucket is shared by every tenant: refusing writes when one
// tenant's snapshots filled it made every stage's activity update fail, and
// every tenant's proposals end PROCESSING_FAILED after their retries.
func discardOldest(ctx context.Context, js jetstream.JetStream, stream string) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	if cfg.Discard == jetstream.DiscardOld {
		return nil
	}
	cfg.Discard = jetstream.DiscardOld
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// ActivityLinger is how long authorization's activity edit of a proposal
// it hands to dispatch waits for dispatch's (kvjs.Activity.Linger), so
// that the two are one write of the snapshot: dispatch's edit, with its
// result, ends the wait. Authorization does not wait for it (its input is
// acked at once); only the snapshot shows the permit that much later when
// dispatch is slower. Under a full pipeline (500 proposals in flight) the
// two come over half a second apart: at 500ms 10% of the bench's proposals
// shared one write, at 2s all of them.
const ActivityLinger = 2 * time.Second
