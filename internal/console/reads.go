package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// What the console reads of JetStream, all of it allowed to an operator
// (SPEC §2.8) and none of it through a consumer: stream info, and direct
// gets of the outcome and incident streams and the activity bucket — the
// last message for a subject, and batches of the next messages for a
// subject filter from a sequence or a time (the server's batched direct
// get: one request, up to a batch of answers, then an end-of-batch status).

// readTimeout bounds one read.
const readTimeout = 10 * time.Second

// storedMsg is one message read from a stream.
type storedMsg struct {
	Subject string
	Seq     uint64
	Time    time.Time
	Data    []byte
}

// errNoMessage is a direct get that found nothing.
var errNoMessage = errors.New("console: no such message")

// batchRequest is a batched direct get (nats-server's JSApiMsgGetRequest).
type batchRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	Batch     int        `json:"batch"`
	MaxBytes  int        `json:"max_bytes,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

// maxBatchBytes bounds one batch's bytes (the server stops early at it).
const maxBatchBytes = 4 << 20

// batch reads up to req.Batch messages of stream. An empty result is not
// an error.
func (c *Console) batch(ctx context.Context, stream string, req batchRequest) ([]storedMsg, error) {
	if req.MaxBytes == 0 {
		req.MaxBytes = maxBatchBytes
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	inbox := c.nc.NewRespInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return nil, err
	}
	var out []storedMsg
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("console: read %s: %w", stream, err)
		}
		switch m.Header.Get("Status") {
		case "":
		case "204": // end of batch
			return out, nil
		case "404":
			return out, nil
		default:
			return nil, fmt.Errorf("console: read %s: status %s %s", stream, m.Header.Get("Status"), m.Header.Get("Description"))
		}
		sm, err := stored(m)
		if err != nil {
			return nil, fmt.Errorf("console: read %s: %w", stream, err)
		}
		out = append(out, sm)
		if len(out) > req.Batch {
			return nil, fmt.Errorf("console: read %s: more answers than asked for", stream)
		}
	}
}

// stored reads a direct get answer's headers.
func stored(m *nats.Msg) (storedMsg, error) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return storedMsg{}, errors.New("a direct get answer without a sequence")
	}
	ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return storedMsg{Subject: m.Header.Get(jetstream.SubjectHeader), Seq: seq, Time: ts, Data: m.Data}, nil
}

// last reads the last message on subject of stream (errNoMessage: none).
func (c *Console) last(ctx context.Context, stream, subject string) (storedMsg, error) {
	m, err := c.nc.RequestWithContext(ctx, subjects.DirectGetLast(stream, subject), nil)
	if err != nil {
		return storedMsg{}, fmt.Errorf("console: read %s: %w", stream, err)
	}
	switch m.Header.Get("Status") {
	case "":
		return stored(m)
	case "404":
		return storedMsg{}, errNoMessage
	}
	return storedMsg{}, fmt.Errorf("console: read %s: status %s %s", stream, m.Header.Get("Status"), m.Header.Get("Description"))
}

// lastSeq is a stream's first and last sequence (stream info).
func (c *Console) seqs(ctx context.Context, stream string) (first, last uint64, err error) {
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, fmt.Errorf("console: stream %s: %w", stream, err)
	}
	st := s.CachedInfo().State
	return st.FirstSeq, st.LastSeq, nil
}

// recentIncidents reads the last incident events of the stream, oldest
// first.
func (c *Console) recentIncidents() ([]schema.IncidentEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	stream := c.subj.IncidentsStream()
	first, last, err := c.seqs(ctx, stream)
	if err != nil || last == 0 {
		return nil, err
	}
	start := max(first, last-min(last, recentIncidents-1))
	msgs, err := c.batch(ctx, stream, batchRequest{Seq: start, Batch: recentIncidents})
	if err != nil {
		return nil, err
	}
	var out []schema.IncidentEvent
	for _, m := range msgs {
		var e schema.IncidentEvent
		if schema.Decode(m.Data, &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// activity reads an intent's activity snapshot from the bucket (found
// false: none).
func (c *Console) activity(ctx context.Context, fp string) (*schema.Activity, bool, error) {
	bucket := c.subj.ActivityBucket()
	m, err := c.last(ctx, "KV_"+bucket, "$KV."+bucket+"."+schema.FingerprintKey(fp))
	if errors.Is(err, errNoMessage) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if m.Data == nil || len(m.Data) == 0 {
		return nil, false, nil // a delete marker
	}
	var a schema.Activity
	if err := schema.Decode(m.Data, &a); err != nil {
		return nil, false, fmt.Errorf("console: activity snapshot: %w", err)
	}
	return &a, true, nil
}

// lastOutcome reads the last outcome of a proposal (found false: none).
func (c *Console) lastOutcome(ctx context.Context, ref schema.ProposalRef) (*schema.Outcome, bool, error) {
	m, err := c.last(ctx, c.subj.OutcomesStream(), c.subj.Outcome(ref.Host, ref.ProposalID))
	if errors.Is(err, errNoMessage) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var o schema.Outcome
	if err := schema.Decode(m.Data, &o); err != nil {
		return nil, false, nil
	}
	o.Host = ref.Host
	return &o, true, nil
}
