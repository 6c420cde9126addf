package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/kv/natserr"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// OutcomeStream is the outcome history's stream as the runner publishes
// to it (the engine adds its limits and replicas): it captures
// subjects.OutcomeRecords, stores each outcome under its public subject
// (subjects.Outcome) and republishes it there once stored; hosts and
// operators read it with direct gets (SPEC §2.8).
func OutcomeStream(s subjects.Subjects) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:             s.OutcomesStream(),
		Subjects:         []string{s.OutcomeRecords()},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: s.OutcomeRecords(), Destination: s.Outcomes()},
		RePublish:        &jetstream.RePublish{Source: s.Outcomes(), Destination: s.Outcomes()},
		AllowDirect:      true,
	}
}

// OutcomeHistory is kv.OutcomeHistory on the outcomes stream
// (OutcomeStream): an append is a publish on the proposal's record
// subject with Nats-Expected-Last-Subject-Sequence, stored under its
// public subject; Last reads that subject by a direct get (any replica)
// or from the stream's leader (STREAM.MSG.GET).
type OutcomeHistory struct {
	JS       jetstream.JetStream
	Subjects subjects.Subjects
}

var _ kv.OutcomeHistory = (*OutcomeHistory)(nil)

// Last reads the last message on ref's public outcome subject.
func (h *OutcomeHistory) Last(ctx context.Context, ref schema.ProposalRef, fromLeader bool) (kv.OutcomeEntry, bool, error) {
	prefix := apiPrefix(h.JS.Options())
	stream, subject := h.Subjects.OutcomesStream(), h.Subjects.Outcome(ref.Host, ref.ProposalID)
	if fromLeader {
		req, _ := json.Marshal(struct {
			LastBySubject string `json:"last_by_subj"`
		}{subject})
		m, err := h.JS.Conn().RequestWithContext(ctx, prefix+"STREAM.MSG.GET."+stream, req)
		if err != nil {
			return kv.OutcomeEntry{}, false, natserr.Classify(err)
		}
		var resp struct {
			Message *struct {
				Seq  uint64 `json:"seq"`
				Data []byte `json:"data"`
			} `json:"message"`
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			return kv.OutcomeEntry{}, false, err
		}
		switch {
		case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
			return kv.OutcomeEntry{}, false, nil
		case resp.Error != nil:
			return kv.OutcomeEntry{}, false, natserr.Classify(resp.Error)
		case resp.Message == nil:
			return kv.OutcomeEntry{}, false, errors.New("no message in the answer")
		}
		return kv.OutcomeEntry{Seq: resp.Message.Seq, Data: resp.Message.Data}, true, nil
	}
	m, err := h.JS.Conn().RequestWithContext(ctx, prefix+"DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return kv.OutcomeEntry{}, false, natserr.Classify(err)
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "404" {
		return kv.OutcomeEntry{}, false, nil
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return kv.OutcomeEntry{}, false, fmt.Errorf("status %q %s", m.Header.Get("Status"), m.Header.Get("Description"))
	}
	return kv.OutcomeEntry{Seq: seq, Data: m.Data}, true, nil
}

// Append publishes data on ref's record subject, expecting its public
// subject's last sequence at expect, and waits for the PubAck.
func (h *OutcomeHistory) Append(ctx context.Context, ref schema.ProposalRef, data []byte, msgID string, expect uint64) (uint64, bool, error) {
	m := nats.NewMsg(h.Subjects.OutcomeRecord(ref.Host, ref.ProposalID))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	ack, err := h.JS.PublishMsg(ctx, m)
	if err != nil {
		return 0, false, fmt.Errorf("publish %s: %w", m.Subject, natserr.Classify(err))
	}
	return ack.Sequence, ack.Duplicate, nil
}

// apiPrefix is the JetStream API prefix o names, ending in a dot.
func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
