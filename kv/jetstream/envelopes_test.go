package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/internal/seal"
	"github.com/portcullis/portcullis/internal/testenv"
	"github.com/portcullis/portcullis/kv"
	kvjs "github.com/portcullis/portcullis/kv/jetstream"
)

// TestEnvelopesPerHost: each host keeps its envelopes in a stream of its
// own; one whose budget is spent is refused (kv.ErrBudget) while another
// host keeps its; an envelope without the processor's seal is not
// believed; what an earlier version kept in the stream every host shared
// is read and dropped there.
func TestEnvelopesPerHost(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartServer(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const budget = 64 << 10
	for _, h := range []string{"a", "b"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEPT_" + h, Subjects: []string{"kept." + h + ".>"},
			MaxBytes: budget, Discard: jetstream.DiscardNew, MaxMsgsPerSubject: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LEGACY", Subjects: []string{"legacy.>"}}); err != nil {
		t.Fatal(err)
	}
	sealer, err := seal.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	e := &kvjs.Envelopes{JS: js, Seal: sealer,
		Stream:  func(h string) string { return "KEPT_" + h },
		Subject: func(h, key string) string { return "kept." + h + "." + key },
		Legacy:  func(h, key string) (string, string) { return "LEGACY", "legacy." + h + "." + key },
	}
	big := []byte(strings.Repeat("x", 20<<10))
	kept := 0
	for i := range 10 {
		err := e.Keep(ctx, "b", string(rune('a'+i)), big, "id-"+string(rune('a'+i)))
		if errors.Is(err, kv.ErrBudget) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		kept++
	}
	if kept == 0 || kept >= 10 {
		t.Fatalf("host b kept %d envelopes of 20 KiB in a budget of 64 KiB", kept)
	}
	// b's budget is spent; a's is whole.
	if err := e.Keep(ctx, "a", "p1", big, "a-1"); err != nil {
		t.Fatalf("host a refused while b's budget is spent: %v", err)
	}
	if data, at, err := e.Get(ctx, "a", "p1"); err != nil || !bytes.Equal(data, big) || at == 0 {
		t.Fatalf("a's envelope: %d bytes at %d, %v", len(data), at, err)
	}
	// The same write again is one write (its message id), even when full.
	if err := e.Keep(ctx, "b", "a", big, "id-a"); err != nil {
		t.Errorf("the same envelope kept again: %v", err)
	}
	// Dropped, b has room again.
	if err := e.Drop(ctx, "b", "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Get(ctx, "b", "a"); !errors.Is(err, kv.ErrNotKept) || errors.Is(err, kv.ErrForged) {
		t.Errorf("a dropped envelope: %v", err)
	}
	if err := e.Keep(ctx, "b", "z", big, "id-z"); err != nil {
		t.Errorf("b refused after a drop made room: %v", err)
	}
	// Published without the seal: not believed.
	if _, err := js.Publish(ctx, "kept.a.forged", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Get(ctx, "a", "forged"); !errors.Is(err, kv.ErrNotKept) || !errors.Is(err, kv.ErrForged) {
		t.Errorf("an unsealed envelope: %v", err)
	}
	// Kept by an earlier version in the shared stream: read there, dropped
	// there.
	m := nats.NewMsg("legacy.a.old")
	m.Data = []byte("old")
	sealer.Seal(m.Subject, m.Data, m.Header)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if data, _, err := e.Get(ctx, "a", "old"); err != nil || string(data) != "old" {
		t.Fatalf("an envelope an earlier version kept: %q, %v", data, err)
	}
	if err := e.Drop(ctx, "a", "old"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Get(ctx, "a", "old"); !errors.Is(err, kv.ErrNotKept) {
		t.Errorf("dropped from the shared stream: %v", err)
	}
	// Without the shared stream (deleted once empty) nothing changes.
	if err := js.DeleteStream(ctx, "LEGACY"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.Get(ctx, "a", "gone"); !errors.Is(err, kv.ErrNotKept) {
		t.Errorf("no shared stream: %v", err)
	}
	if err := e.Drop(ctx, "a", "gone"); err != nil {
		t.Errorf("drop with no shared stream: %v", err)
	}
}

// StreamMessages reads a message by its sequence, and says ErrNotKept
// where the stream has none.
func TestStreamMessages(t *testing.T) {
	js, err := jetstream.New(testenv.Connect(t, testenv.StartServer(t, "")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "STAGE", Subjects: []string{"stage.>"}}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "stage.p", []byte("parked"))
	if err != nil {
		t.Fatal(err)
	}
	s := &kvjs.StreamMessages{JS: js, Stream: "STAGE"}
	if data, err := s.Message(ctx, ack.Sequence); err != nil || string(data) != "parked" {
		t.Fatalf("Message(%d) = %q, %v", ack.Sequence, data, err)
	}
	if _, err := s.Message(ctx, ack.Sequence+1); !errors.Is(err, kv.ErrNotKept) {
		t.Fatalf("Message of nothing: %v, want ErrNotKept", err)
	}
}
