package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/internal/approvals"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/journal"
	"github.com/portcullis/portcullis/internal/leaderkv"
	"github.com/portcullis/portcullis/stages/admission"
	"github.com/portcullis/portcullis/subjects"
)

// DuplicateWindow is the Nats-Msg-Id dedupe window. Durable dedupe
// (delivery ids, receipts) lives in Pebble; this window absorbs
// republishing after a crash or a lost ack.
const DuplicateWindow = 10 * time.Minute

// headerAllowance is what an ingress message may carry beyond its body
// (signature headers, a Nats-Msg-Id): the streams' MaxMsgSize counts both.
const headerAllowance = 4096

// StreamConfigs lists every stream of a configuration. Limits retention
// with MaxAge is the replayable choice (ENGINEERING.md): stages read with
// their own durable consumers and nothing is deleted by acks. Every stream
// is bounded in bytes, with a discard policy chosen by what it holds:
//   - ingress (proposals, grants) refuses new messages when full, so the
//     host's publish fails and nothing accepted is ever dropped;
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
// is re-read from the authorization stream when its grant arrives.
//
// pipeline's internal stages each get a stream; nil: Pipeline(). With a
// replicated journal (store.journal) the list also holds the streams of
// the buckets a cluster shares — the journal's (journal.Bucket), the
// approvals' (approvals.Bucket, records kept for ApprovalsHorizon),
// the admission records' (admission.Bucket) and the operator
// nonces' (admin.NonceBucket) — and the Scheduled stages take their
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
			Retention:   jetstream.LimitsPolicy,
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
		return cfg
	}
	history := func(cfg jetstream.StreamConfig) jetstream.StreamConfig {
		cfg.AllowDirect = true // hosts and operators read it with direct gets (SPEC §2.8)
		return cfg
	}
	out := []jetstream.StreamConfig{
		ingress(mk(s.ProposalsStream(), "Portcullis ingress: proposals from hosts", lim.IngressMaxBytes, jetstream.DiscardNew, s.Proposals())),
		ingress(mk(s.GrantsStream(), "Portcullis ingress: standalone grants and declines", lim.IngressMaxBytes, jetstream.DiscardNew, s.Grants())),
		history(mk(s.OutcomesStream(), "Portcullis outcomes, one subject per proposal", lim.HistoryMaxBytes, jetstream.DiscardOld, s.Outcomes())),
		history(mk(s.IncidentsStream(), "Portcullis value-free incident events", lim.HistoryMaxBytes, jetstream.DiscardOld, s.Incidents())),
	}
	for _, st := range internalStages(pipeline) {
		if !st.Scheduled {
			out = append(out, mk(s.StageStream(st.Name), "Portcullis hand-off to the "+st.Name+" stage", lim.StageMaxBytes, jetstream.DiscardNew, s.StageAll(st.Name)))
			continue
		}
		out = append(out, mk(s.StageStream(st.Name), "Portcullis hand-off to the "+st.Name+" stage", lim.StageMaxBytes, jetstream.DiscardNew,
			s.StageKind(st.Name, subjects.KindProposal)))
		timers := mk(s.TimersStream(st.Name), "Portcullis durable timers of the "+st.Name+" stage", lim.StageMaxBytes, jetstream.DiscardNew,
			s.StageKind(st.Name, subjects.KindTimer))
		if c.ReplicatedJournal() {
			timers = scheduled(s, st.Name, timers)
		}
		out = append(out, timers)
	}
	if c.ReplicatedJournal() {
		proposals, _ := c.RetentionHorizons()
		out = append(out, journal.Bucket(s.JournalBucket(), c.NATS.Replicas).Stream(),
			approvals.Bucket(s.ApprovalsBucket(), c.NATS.Replicas, ApprovalsHorizon(c)).Stream(),
			admission.Bucket(s.AdmissionBucket(), c.NATS.Replicas, proposals).Stream(),
			admin.NonceBucket(s.NonceBucket(), c.NATS.Replicas).Stream())
	}
	return out
}

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
	kv, _, err := ensureStreams(ctx, js, s, c, Pipeline(), nil)
	return kv, err
}

// ensureStreams creates or updates every stream of pipeline and the
// activity bucket. It returns the Scheduled stages whose stream an earlier
// version gave message schedules (legacyScheduled): they run without a
// timers stream. log (nil: none) hears of each.
func ensureStreams(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, c *config.Config, pipeline []Spec, log *slog.Logger) (jetstream.KeyValue, map[string]bool, error) {
	legacy := map[string]bool{}
	for _, st := range internalStages(pipeline) {
		if !st.Scheduled {
			continue
		}
		err := retryJS(ctx, func(ctx context.Context) error {
			stream, err := js.Stream(ctx, s.StageStream(st.Name))
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			legacy[st.Name] = stream.CachedInfo().Config.AllowMsgSchedules
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("engine: stream %s: %w", s.StageStream(st.Name), err)
		}
		if legacy[st.Name] && log != nil {
			log.Error("stream made with message schedules by an earlier version: it keeps the stage's timers and drops its oldest hand-offs when full; recreate it while it is empty to lift that",
				"stream", s.StageStream(st.Name))
		}
	}
	for _, cfg := range StreamConfigs(s, c, pipeline) {
		if stage, ok := scheduledStage(s, pipeline, cfg.Name); ok && legacy[stage] {
			cfg = legacyScheduled(s, stage, cfg)
		} else if stage, ok := timersStage(s, pipeline, cfg.Name); ok && legacy[stage] {
			continue
		}
		err := retryJS(ctx, func(ctx context.Context) error {
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
		if err != nil {
			return nil, nil, fmt.Errorf("engine: stream %s: %w", cfg.Name, err)
		}
	}
	var kv jetstream.KeyValue
	err := retryJS(ctx, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, ActivityConfig(s, c))
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("engine: bucket %s: %w", s.ActivityBucket(), err)
	}
	if err := retryJS(ctx, func(ctx context.Context) error { return discardOldest(ctx, js, "KV_"+s.ActivityBucket()) }); err != nil {
		return nil, nil, fmt.Errorf("engine: bucket %s: %w", s.ActivityBucket(), err)
	}
	return kv, legacy, nil
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
	return leaderkv.Unanswered(err) || leaderkv.NoPeers(err)
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
