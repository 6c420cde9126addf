package engine

import (
	"context"
	"fmt"
	"time"

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

// StreamConfigs lists every stream of a configuration. Limits retention
// with MaxAge is the replayable choice (ENGINEERING.md): stages read with
// their own durable consumers and nothing is deleted by acks. Every stream
// is bounded in bytes, with a discard policy chosen by what it holds:
//   - ingress (proposals, grants) refuses new messages when full, so the
//     host's publish fails and nothing accepted is ever dropped;
//   - stage streams refuse too: the stage's hand-off is retried and, after
//     its bounded retries, its proposal ends PROCESSING_FAILED;
//   - history (outcomes, incidents) drops its oldest messages.
//
// MaxAge is at least twice the approval TTL: a parked proposal's envelope
// is re-read from the authorization stream when its grant arrives.
//
// pipeline's internal stages each get a stream; nil: Pipeline().
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
		out = append(out, mk(s.StageStream(st), "Portcullis hand-off to the "+st+" stage", lim.StageMaxBytes, jetstream.DiscardNew, s.StageAll(st)))
	}
	return out
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
// and the activity bucket. It is idempotent: every start runs it.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, c *config.Config) (jetstream.KeyValue, error) {
	return ensureStreams(ctx, js, s, c, Pipeline())
}

func ensureStreams(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, c *config.Config, pipeline []Spec) (jetstream.KeyValue, error) {
	for _, cfg := range StreamConfigs(s, c, pipeline) {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("engine: stream %s: %w", cfg.Name, err)
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, ActivityConfig(s, c))
	if err != nil {
		return nil, fmt.Errorf("engine: bucket %s: %w", s.ActivityBucket(), err)
	}
	if err := discardOldest(ctx, js, "KV_"+s.ActivityBucket()); err != nil {
		return nil, fmt.Errorf("engine: bucket %s: %w", s.ActivityBucket(), err)
	}
	return kv, nil
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
