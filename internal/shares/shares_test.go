package shares_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/shares"
	"github.com/portcullis/portcullis/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func connect(t *testing.T) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(testenv.Connect(t, testenv.StartServer(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// held sums, by share, the bytes (subject and body) of what stream holds.
func held(t *testing.T, js jetstream.JetStream, stream string, share func(*jetstream.RawStreamMsg) string) map[string]int {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		out[share(m)] += len(m.Subject) + len(m.Data)
	}
	return out
}

func run(t *testing.T, l *shares.Ledger) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestSharesBySubject: one host's flood of large messages is trimmed to
// its share, its oldest first, by filtered purges; another host's
// messages stay, and so does what names no share.
func TestSharesBySubject(t *testing.T) {
	js := connect(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}}); err != nil {
		t.Fatal(err)
	}
	const budget = 64 << 10
	run(t, &shares.Ledger{JS: js, Every: 100 * time.Millisecond, Streams: []shares.Stream{{
		Name: "OUT",
		Share: func(subject string, _ nats.Header) (string, bool) {
			parts := strings.Split(subject, ".")
			return parts[1], parts[1] != "old"
		},
		MaxBytes: budget, MaxMsgs: 1000,
		Filter: func(share string) string { return "out." + share + ".>" },
	}}})
	for i := range 3 {
		js.Publish(ctx, fmt.Sprintf("out.a.%d", i), []byte("a"))
		js.Publish(ctx, fmt.Sprintf("out.old.%d", i), []byte("old"))
	}
	big := []byte(strings.Repeat("b", 4<<10))
	for i := range 200 {
		if _, err := js.Publish(ctx, fmt.Sprintf("out.b.%03d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "b within its share", func() bool {
		return held(t, js, "OUT", func(m *jetstream.RawStreamMsg) string { return strings.Split(m.Subject, ".")[1] })["b"] <= budget
	})
	got := held(t, js, "OUT", func(m *jetstream.RawStreamMsg) string { return strings.Split(m.Subject, ".")[1] })
	if got["a"] == 0 || got["old"] == 0 || got["b"] < budget/2 {
		t.Errorf("held after b's flood: %v", got)
	}
	// b's newest stays.
	s, _ := js.Stream(ctx, "OUT")
	if _, err := s.GetLastMsgForSubject(ctx, "out.b.199"); err != nil {
		t.Errorf("b's newest: %v", err)
	}
	// A share bounded in messages too.
	for i := range 1200 {
		js.Publish(ctx, fmt.Sprintf("out.c.%04d", i), []byte("c"))
	}
	testenv.WaitFor(t, "c within its messages", func() bool {
		info, _ := s.Info(ctx, jetstream.WithSubjectFilter("out.c.>"))
		return len(info.State.Subjects) <= 1000
	})
}

// TestSharesByHeaderAndKey: shares named by a header, messages replaced
// under their keys (a KV bucket): a key's new value takes the old one's
// place in the count; the oldest keys of a share over its budget are
// deleted one by one.
func TestSharesByHeaderAndKey(t *testing.T) {
	js := connect(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KV", Subjects: []string{"kv.>"}, MaxMsgsPerSubject: 1, DenyDelete: true}); err != nil {
		t.Fatal(err)
	}
	const budget = 64 << 10
	run(t, &shares.Ledger{JS: js, Every: 100 * time.Millisecond, Streams: []shares.Stream{{
		Name: "KV",
		Share: func(_ string, hdr nats.Header) (string, bool) {
			v := hdr.Get("Share")
			return v, v != ""
		},
		Keyed:    true,
		MaxBytes: budget,
	}}})
	put := func(key, share string, n int) {
		m := nats.NewMsg("kv." + key)
		m.Data = []byte(strings.Repeat("x", n))
		m.Header.Set("Share", share)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	put("a1", "a", 100)
	// One key of b's, rewritten many times: it takes its last size only.
	for range 100 {
		put("b-same", "b", 4<<10)
	}
	time.Sleep(300 * time.Millisecond)
	byKey := func(m *jetstream.RawStreamMsg) string { return m.Header.Get("Share") }
	if got := held(t, js, "KV", byKey); got["b"] == 0 || got["a"] == 0 {
		t.Fatalf("a key rewritten was trimmed: %v", got)
	}
	for i := range 100 {
		put(fmt.Sprintf("b%03d", i), "b", 4<<10)
	}
	testenv.WaitFor(t, "b within its share", func() bool { return held(t, js, "KV", byKey)["b"] <= budget })
	s, _ := js.Stream(ctx, "KV")
	if _, err := s.GetLastMsgForSubject(ctx, "kv.a1"); err != nil {
		t.Errorf("a's key: %v", err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, "kv.b099"); err != nil {
		t.Errorf("b's newest key: %v", err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, "kv.b000"); err == nil {
		t.Errorf("b's oldest key stayed")
	}
}
