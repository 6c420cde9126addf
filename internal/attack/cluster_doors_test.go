package attack_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/subjects"
)

// On a cluster (SPEC §6, §2.8) the shared buckets — journal, approvals,
// admission records, nonces — and the schedule subjects of the
// authorization and reconciliation stages are the processors' alone: a
// host, an operator, a connector and a resolver can neither write, read,
// purge nor subscribe to them, and nothing they tried is stored.
func TestClusterStateIsTheProcessorsAlone(t *testing.T) {
	env := testenv.New(t, testenv.Clustered(), testenv.WithAuth())
	s := env.Subjects
	buckets := []string{s.JournalBucket(), s.ApprovalsBucket(), s.AdmissionBucket(), s.NonceBucket()}
	var publish, subscribe []string
	for _, b := range buckets {
		stream := "KV_" + b
		publish = append(publish,
			"$KV."+b+".forged",
			"$JS.API.DIRECT.GET."+stream,
			"$JS.API.DIRECT.GET."+stream+".$KV."+b+".forged",
			"$JS.API.STREAM.MSG.GET."+stream,
			"$JS.API.STREAM.PURGE."+stream,
			"$JS.API.STREAM.INFO."+stream,
			"$JS.API.CONSUMER.CREATE."+stream,
		)
		subscribe = append(subscribe, "$KV."+b+".>")
	}
	for _, stage := range []string{subjects.StageAuthorization, subjects.StageReconciliation} {
		publish = append(publish, s.Schedule(stage, "forged"))
		subscribe = append(subscribe, s.Schedules(stage))
	}
	roles := map[string]nkeys.KeyPair{"host": env.Host, "operator": env.Operator, "connector": env.Connector, "resolver": env.Resolver}
	for name, kp := range roles {
		t.Run(name, func(t *testing.T) {
			nc, v := dial(t, env, kp)
			for _, subject := range publish {
				if err := nc.Publish(subject, []byte(`{"forged":true}`)); err != nil {
					t.Fatal(err)
				}
				v.wait(t, subject)
			}
			for _, subject := range subscribe {
				if _, err := nc.SubscribeSync(subject); err != nil {
					t.Fatal(err)
				}
				v.wait(t, subject)
			}
		})
	}
	for _, b := range buckets {
		kv, err := env.JS.KeyValue(context.Background(), b)
		if err != nil {
			t.Fatalf("bucket %s: %v", b, err)
		}
		if _, err := kv.Get(context.Background(), "forged"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("bucket %s holds a forged key: %v", b, err)
		}
	}
}
