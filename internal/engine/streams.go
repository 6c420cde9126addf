package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/subjects"
)

// Retention of Portcullis's streams. Limits retention with MaxAge is the
// replayable choice (ENGINEERING.md): stages read with their own durable
// consumers, nothing is deleted by acks.
const (
	// StreamMaxAge keeps every stream's messages a week, and at least twice
	// the approval TTL: a parked proposal is re-read from its stream when
	// its grant arrives.
	StreamMaxAge = 7 * 24 * time.Hour
	// DuplicateWindow is the Nats-Msg-Id dedupe window. Durable dedupe
	// (delivery ids, receipts) lives in Pebble; this window absorbs
	// republishing after a crash or a lost ack.
	DuplicateWindow = 10 * time.Minute
)

// StreamConfigs lists every stream for a prefix.
func StreamConfigs(s subjects.Subjects, replicas int, approvalTTL time.Duration) []jetstream.StreamConfig {
	maxAge := max(StreamMaxAge, 2*approvalTTL)
	mk := func(name, desc string, subj ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    subj,
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      maxAge,
			Duplicates:  DuplicateWindow,
			Replicas:    replicas,
			Discard:     jetstream.DiscardOld,
		}
	}
	out := []jetstream.StreamConfig{
		mk(s.ProposalsStream(), "Portcullis ingress: proposals from hosts", s.Proposals()),
		mk(s.GrantsStream(), "Portcullis ingress: standalone grants", s.Grants()),
		mk(s.OutcomesStream(), "Portcullis outcomes, one subject per proposal", s.Outcomes()),
		mk(s.IncidentsStream(), "Portcullis value-free incident events", s.Incidents()),
	}
	for _, st := range []string{subjects.StageGrounding, subjects.StageAuthorization, subjects.StageDispatch, subjects.StageReconciliation} {
		out = append(out, mk(s.StageStream(st), "Portcullis hand-off to the "+st+" stage", s.StageAll(st)))
	}
	return out
}

// EnsureStreams creates or updates every stream and the activity bucket.
// It is idempotent: every start runs it.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, replicas int, approvalTTL time.Duration) (jetstream.KeyValue, error) {
	for _, cfg := range StreamConfigs(s, replicas, approvalTTL) {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("processor: stream %s: %w", cfg.Name, err)
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      s.ActivityBucket(),
		Description: "Portcullis value-free activity snapshot per intent fingerprint",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("processor: bucket %s: %w", s.ActivityBucket(), err)
	}
	return kv, nil
}
