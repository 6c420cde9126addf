package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/natserr"
)

// Envelopes is kv.Envelopes on JetStream streams: each host's envelopes in
// a stream of its own (Stream), bounded by the host's budget and refusing
// new messages when full — so that one host filling its own cannot refuse
// another's — one message per key (MaxMsgsPerSubject 1), each sealed for
// its subject. engine.StreamConfigs makes the streams.
type Envelopes struct {
	JS   jetstream.JetStream
	Seal EnvelopeSealer
	// Stream is the stream that keeps host's envelopes; Subject the
	// subject of key in it.
	Stream  func(host string) string
	Subject func(host, key string) string
	// Legacy, if set, names where an earlier version kept the envelope of
	// (host, key) (one stream every host shared): Get reads it there when
	// the host's own stream has none, and Drop drops it there too, until
	// that stream is empty and gone.
	Legacy func(host, key string) (stream, subject string)

	streams sync.Map // name → jetstream.Stream
}

var _ kv.Envelopes = (*Envelopes)(nil)

// EnvelopeSealer seals a kept envelope for its subject and checks it when
// read back (the processor's seal.Sealer), and makes its message id
// unguessable.
type EnvelopeSealer interface {
	Seal(subject string, body []byte, hdr nats.Header)
	Check(subject string, body []byte, hdr nats.Header) bool
	MsgID(id string) string
}

// Keep publishes data, sealed, on (host, key)'s subject of host's stream.
func (e *Envelopes) Keep(ctx context.Context, host, key string, data []byte, msgID string) error {
	subject := e.Subject(host, key)
	m := nats.NewMsg(subject)
	m.Data = data
	e.Seal.Seal(subject, data, m.Header)
	m.Header.Set(jetstream.MsgIDHeader, e.Seal.MsgID(msgID))
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		if StreamFull(err) {
			return fmt.Errorf("%w: %w", kv.ErrBudget, err)
		}
		return fmt.Errorf("kv: keep an envelope: %w", natserr.Classify(err))
	}
	return nil
}

// Get reads the last message on (host, key)'s subject: from host's
// stream, else from Legacy's. A message without a valid seal is not
// believed (ErrNotKept).
func (e *Envelopes) Get(ctx context.Context, host, key string) ([]byte, int64, error) {
	data, at, err := e.get(ctx, e.Stream(host), e.Subject(host, key))
	if e.Legacy != nil && !errors.Is(err, kv.ErrForged) && (errors.Is(err, kv.ErrNotKept) || errors.Is(err, jetstream.ErrStreamNotFound)) {
		stream, subject := e.Legacy(host, key)
		data, at, err = e.get(ctx, stream, subject)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, kv.ErrNotKept
	}
	return data, at, err
}

func (e *Envelopes) get(ctx context.Context, stream, subject string) ([]byte, int64, error) {
	st, err := e.stream(ctx, stream)
	if err != nil {
		return nil, 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, kv.ErrNotKept
	}
	if err != nil {
		return nil, 0, fmt.Errorf("kv: read a kept envelope: %w", err)
	}
	if !e.Seal.Check(subject, m.Data, m.Header) {
		return nil, 0, fmt.Errorf("%w: %w", kv.ErrNotKept, kv.ErrForged)
	}
	return m.Data, m.Time.UnixMilli(), nil
}

// Drop purges (host, key)'s subject from host's stream, and from Legacy's
// while that stream exists.
func (e *Envelopes) Drop(ctx context.Context, host, key string) error {
	if err := e.purge(ctx, e.Stream(host), e.Subject(host, key)); err != nil {
		return err
	}
	if e.Legacy == nil {
		return nil
	}
	stream, subject := e.Legacy(host, key)
	if err := e.purge(ctx, stream, subject); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return nil
}

func (e *Envelopes) purge(ctx context.Context, stream, subject string) error {
	st, err := e.stream(ctx, stream)
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
	if err != nil {
		return fmt.Errorf("kv: drop a kept envelope: %w", err)
	}
	return nil
}

// stream is a handle of the named stream, looked up once.
func (e *Envelopes) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if st, ok := e.streams.Load(name); ok {
		return st.(jetstream.Stream), nil
	}
	st, err := e.JS.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("kv: stream %s: %w", name, err)
	}
	e.streams.Store(name, st)
	return st, nil
}

// StreamFull reports a publish a stream refused because it is full
// (natserr.StreamFull: kv.ErrFull). Waiting does not make room in a
// stream only its own readers empty.
func StreamFull(err error) bool { return natserr.StreamFull(err) }

// StreamMessages is kv.StreamMessages on the stream named Stream.
type StreamMessages struct {
	JS     jetstream.JetStream
	Stream string
}

var _ kv.StreamMessages = (*StreamMessages)(nil)

// Message reads the message at seq by a get from the stream's leader.
func (s *StreamMessages) Message(ctx context.Context, seq uint64) ([]byte, error) {
	stream, err := s.JS.Stream(ctx, s.Stream)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", natserr.Classify(err))
	}
	m, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, kv.ErrNotKept
	}
	if err != nil {
		return nil, natserr.Classify(err)
	}
	return m.Data, nil
}
