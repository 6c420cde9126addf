package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Hops is the raw chain's length: Portcullis's five stages.
const Hops = 5

// rawPrefix names the raw chain's streams and subjects.
const rawPrefix = "benchraw"

// Raw runs the raw five-hop chain on the server at url. bodyBytes sizes
// its messages. It removes its streams afterwards.
func Raw(ctx context.Context, url string, bodyBytes int, o Options) (Side, error) {
	o.defaults()
	hopConn, err := nats.Connect(url)
	if err != nil {
		return Side{}, err
	}
	defer hopConn.Close()
	client, err := nats.Connect(url)
	if err != nil {
		return Side{}, err
	}
	defer client.Close()
	hopJS, err := jetstream.New(hopConn, jetstream.WithPublishAsyncMaxPending(4*o.Window))
	if err != nil {
		return Side{}, err
	}
	clientJS, err := jetstream.New(client, jetstream.WithPublishAsyncMaxPending(max(o.Window, o.Rate)))
	if err != nil {
		return Side{}, err
	}
	stream := func(i int) string { return fmt.Sprintf("BENCH_RAW_%d", i) }
	subject := func(i int) string { return fmt.Sprintf("%s.%d", rawPrefix, i) }
	for i := 1; i <= Hops; i++ {
		if err := createStream(ctx, hopJS, stream(i), subject(i), o); err != nil {
			return Side{}, fmt.Errorf("bench: raw stream: %w", err)
		}
		defer hopJS.DeleteStream(context.Background(), stream(i))
	}

	var cur atomic.Pointer[tracker]
	done := rawPrefix + ".done"
	sub, err := client.Subscribe(done, func(m *nats.Msg) {
		if t := cur.Load(); t != nil {
			t.end(string(m.Data), true)
		}
	})
	if err != nil {
		return Side{}, err
	}
	defer sub.Unsubscribe()
	if err := client.Flush(); err != nil {
		return Side{}, err
	}

	for i := 1; i <= Hops; i++ {
		cons, err := retryConsumer(ctx, hopJS, stream(i), o)
		if err != nil {
			return Side{}, fmt.Errorf("bench: raw consumer: %w", err)
		}
		next := i + 1
		cc, err := cons.Consume(func(m jetstream.Msg) {
			id := m.Headers().Get("Bench-Id")
			if next > Hops {
				// The last hop ends the message as a stage publishes an
				// outcome: a core publish, then the ack.
				_ = hopConn.Publish(done, []byte(id))
				_ = m.Ack()
				return
			}
			out := nats.NewMsg(subject(next))
			out.Data = m.Data()
			out.Header.Set("Bench-Id", id)
			out.Header.Set(jetstream.MsgIDHeader, id+"/"+strconv.Itoa(next))
			f, err := hopJS.PublishMsgAsync(out)
			if err != nil {
				_ = m.Nak()
				return
			}
			go func() {
				select {
				case <-f.Ok():
					_ = m.Ack()
				case <-f.Err():
					_ = m.Nak()
				}
			}()
		}, jetstream.PullMaxMessages(256))
		if err != nil {
			return Side{}, err
		}
		defer cc.Stop()
	}

	body := make([]byte, bodyBytes)
	for i := range body {
		body[i] = 'x'
	}
	publish := func(id string) error {
		m := nats.NewMsg(subject(1))
		m.Data = body
		m.Header.Set("Bench-Id", id)
		m.Header.Set(jetstream.MsgIDHeader, id+"/1")
		_, err := clientJS.PublishMsgAsync(m)
		return err
	}

	return o.runSide(ctx, "raw", &cur, nil, func(latency bool, i int) string {
		if latency {
			return "l" + strconv.Itoa(i)
		}
		return "t" + strconv.Itoa(i)
	}, func(_ bool, _ int, id string) error { return publish(id) })
}

// createStream makes a stream of the raw chain's settings (and the
// floor's): limits retention on file, a two-minute duplicate window.
func createStream(ctx context.Context, js jetstream.JetStream, name, subject string, o Options) error {
	// A cluster that just elected its meta leader may not place a
	// replicated stream at once: a few tries.
	return retry(ctx, func(ctx context.Context) error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{subject}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: max(1, o.Replicas),
		})
		return err
	})
}

// retry calls f with a 5s context up to 10 times while it fails.
func retry(ctx context.Context, f func(context.Context) error) error {
	var err error
	for range 10 {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = f(c)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}
