package adapters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// NATS calls a provider connector by core NATS request-reply on
// `<prefix>.provider.<name>.dispatch` and `….reconcile` (SPEC §4).
type NATS struct {
	name      string
	nc        *nats.Conn
	dispatch  string
	reconcile string
	timeout   time.Duration
}

// NewNATS returns the nats adapter of provider name. A timeout ≤ 0 means
// DefaultTimeout.
func NewNATS(name string, nc *nats.Conn, subj subjects.Subjects, timeout time.Duration) (*NATS, error) {
	if nc == nil {
		return nil, fmt.Errorf("adapters: provider %q: the nats adapter needs a connection", name)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &NATS{
		name:      name,
		nc:        nc,
		dispatch:  subj.ProviderDispatch(name),
		reconcile: subj.ProviderReconcile(name),
		timeout:   timeout,
	}, nil
}

// Kind implements Adapter.
func (a *NATS) Kind() string { return KindNATS }

// Dispatch implements Adapter.
func (a *NATS) Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
	body, err := encodeDispatch(a.name, &req)
	if err != nil {
		return schema.AdapterReply{}, err
	}
	return a.request(ctx, MethodDispatch, a.dispatch, body)
}

// Reconcile implements Adapter.
func (a *NATS) Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
	body, err := encodeReconcile(a.name, &req)
	if err != nil {
		return schema.AdapterReply{}, err
	}
	return a.request(ctx, MethodReconcile, a.reconcile, body)
}

// preSendErrors are returned by nats.go only from checks made before a
// message is written to the connection's buffer (nats.go's publish and the
// response-subscription set-up): nothing was sent. ErrConnectionClosed is
// not among them because a request also returns it when the connection
// closes while waiting for the reply, after sending.
var preSendErrors = []error{
	nats.ErrMaxPayload,
	nats.ErrBadSubject,
	nats.ErrReconnectBufExceeded,
	nats.ErrConnectionDraining,
	nats.ErrHeadersNotSupported,
	nats.ErrInvalidConnection,
	nats.ErrInvalidContext,
}

func (a *NATS) request(ctx context.Context, method, subject string, body []byte) (schema.AdapterReply, error) {
	if err := ctx.Err(); err != nil {
		return schema.AdapterReply{}, notSent(a.name, method, err)
	}
	// A connection that is already closed cannot send. (If it closes
	// between here and the publish, the error below is classified as
	// unknown: safe, only less precise.)
	if a.nc.IsClosed() {
		return schema.AdapterReply{}, notSent(a.name, method, nats.ErrConnectionClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	msg, err := a.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return schema.AdapterReply{}, a.classify(ctx, method, err)
	}
	reply, err := DecodeReply(msg.Data, method == MethodReconcile)
	if err != nil {
		return schema.AdapterReply{}, fmt.Errorf("adapters: %s %s: %w", a.name, method, err)
	}
	return reply, nil
}

func (a *NATS) classify(ctx context.Context, method string, err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		// The server answered for the subject: no subscriber got the message.
		return fmt.Errorf("adapters: %s %s: %w: no responders", a.name, method, ErrNotInvoked)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("adapters: %s %s: %w after %s", a.name, method, ErrTimeout, a.timeout)
	}
	for _, pre := range preSendErrors {
		if errors.Is(err, pre) {
			return fmt.Errorf("adapters: %s %s: %w: %w", a.name, method, ErrNotInvoked, err)
		}
	}
	// Cancelled after sending, disconnected while waiting, …: unknown.
	return fmt.Errorf("adapters: %s %s: outcome unknown: %w", a.name, method, err)
}
