package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/fingerprint"
	"github.com/portcullis/portcullis/schema"
	"github.com/portcullis/portcullis/subjects"
)

// Provider is the provider the bench's proposals name; its connector runs
// on the far side of NATS (config.Dev's nats provider).
const Provider = "inventory"

// Host is the host the bench proposes as (unsigned: a development
// configuration).
const Host = "bench"

// connector answers dispatches: acknowledged for a share of idempotency
// keys (reconciliation then verifies them), confirmed otherwise.
type connector struct{ ackBelow byte }

func (c connector) Dispatch(_ context.Context, r schema.DispatchRequest) (schema.AdapterReply, error) {
	out := schema.ReplyConfirmed
	if r.IdempotencyKey != "" && hexByte(r.IdempotencyKey) < c.ackBelow {
		out = schema.ReplyAcknowledged
	}
	return schema.AdapterReply{Outcome: out, ProviderActionID: "bench:" + r.IdempotencyKey[:16]}, nil
}

func (connector) Reconcile(_ context.Context, r schema.ReconcileRequest) (schema.AdapterReply, error) {
	return schema.AdapterReply{Outcome: schema.ReplyConfirmed, ProviderActionID: "bench:" + r.IdempotencyKey[:16]}, nil
}

func hexByte(s string) byte {
	var b byte
	for i := 0; i < 2 && i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		}
		b = b<<4 | c
	}
	return b
}

// Pipeline runs Portcullis end to end on the server or cluster at url,
// where processors of a development configuration (unsigned proposals
// admitted) with provider Provider on the nats adapter run on subjects
// subj. It returns the side and the size of its proposals.
func Pipeline(ctx context.Context, url string, subj subjects.Subjects, o Options) (Side, int, error) {
	o.defaults()
	nc, err := nats.Connect(url)
	if err != nil {
		return Side{}, 0, err
	}
	defer nc.Close()
	_, stop, err := serveConnector(url, subj, o.AckShare)
	if err != nil {
		return Side{}, 0, err
	}
	defer stop()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(o.Window, o.Rate)))
	if err != nil {
		return Side{}, 0, err
	}

	var cur atomic.Pointer[tracker]
	sub, err := nc.Subscribe(subj.Outcomes(), func(m *nats.Msg) {
		var out schema.Outcome
		if err := schema.Decode(m.Data, &out); err != nil || !out.Terminal {
			return
		}
		if t := cur.Load(); t != nil {
			t.end(out.ProposalID, out.Kind == schema.KindConfirmed)
		}
	})
	if err != nil {
		return Side{}, 0, err
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return Side{}, 0, err
	}

	latencyN := max(1, int(float64(o.Rate)*o.Duration.Seconds()))
	bodies := func(tag string, n int) ([][]byte, error) {
		out := make([][]byte, n)
		for i := range n {
			b, err := Proposal(fmt.Sprintf("%s-%06d", tag, i), o.PayloadBytes)
			if err != nil {
				return nil, err
			}
			out[i] = b
		}
		return out, nil
	}
	tp, err := bodies("t", o.Count)
	if err != nil {
		return Side{}, 0, err
	}
	lp, err := bodies("l", latencyN)
	if err != nil {
		return Side{}, 0, err
	}
	publish := func(id string, body []byte) error {
		_, err := js.PublishAsync(subj.Proposal(Host), body, jetstream.WithMsgID(id))
		return err
	}

	var side Side
	side.RSSReset = o.resetPeaks()
	stopMem := sampleMemory(o.OnHeapPeak)
	defer func() { stopMem() }()
	t := o.tracker(o.Count, o.Window)
	cur.Store(t)
	t.start()
	for i, b := range tp {
		id := fmt.Sprintf("t-%06d", i)
		if err := t.send(ctx, id); err != nil {
			return Side{}, 0, err
		}
		if err := publish(id, b); err != nil {
			return Side{}, 0, err
		}
	}
	if side.Throughput, err = t.wait(ctx, "portcullis throughput", o.Progress); err != nil {
		return Side{}, 0, err
	}
	t = o.tracker(latencyN, latencyN)
	cur.Store(t)
	t.start()
	if err := paced(ctx, latencyN, o.Rate, func(i int) error {
		id := fmt.Sprintf("l-%06d", i)
		if err := t.send(ctx, id); err != nil {
			return err
		}
		return publish(id, lp[i])
	}); err != nil {
		return Side{}, 0, err
	}
	if side.Latency, err = t.wait(ctx, "portcullis latency", o.Progress); err != nil {
		return Side{}, 0, err
	}
	side.PeakRSS, side.ServerPeakRSS = o.peaks()
	side.GoMemory = stopMem()
	stopMem = func() GoMemory { return GoMemory{} }
	return side, len(tp[0]), nil
}

// serveConnector runs the bench's connector for Provider on a connection
// of its own to url; stop stops it and closes the connection.
func serveConnector(url string, subj subjects.Subjects, ackShare float64) (*client.Connector, func(), error) {
	conn, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	srv, err := client.ServeConnector(conn, client.ConnectorConfig{
		Providers: []string{Provider}, Prefix: subj.Prefix(), MaxConcurrent: 256,
	}, connector{ackBelow: byte(ackShare * 256)})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return srv, func() { srv.Stop(); conn.Close() }, nil
}

// Proposal is the SPEC §2.1 lumber proposal for provider Provider, made a
// distinct intent by its id, its payload padded by pad bytes, with an
// inline grant for its fingerprint.
func Proposal(id string, pad int) ([]byte, error) {
	return ProposalOf(id, pad, "bench")
}

// ProposalOf is Proposal in tenant "tenant:<tenant>" and security domain
// "security-domain:<tenant>".
func ProposalOf(id string, pad int, tenant string) ([]byte, error) {
	payload := fmt.Sprintf(`{"quantity":20,"request_id":%q}`, id)
	if pad > 0 {
		payload = fmt.Sprintf(`{"quantity":20,"request_id":%q,"note":%q}`, id, strings.Repeat("x", pad))
	}
	p := schema.Proposal{
		Schema:     schema.SchemaProposal,
		ProposalID: id,
		Context: schema.Context{
			Tenant:         schema.TenantContext{TenantRef: "tenant:" + tenant, SecurityDomainRef: "security-domain:" + tenant},
			Actor:          schema.ActorContext{ActorRef: "actor:bench", Assurance: "host-session"},
			Authorization:  schema.AuthorizationContext{ScopeRef: "policy-scope:inventory", PolicyRevision: "policy:7"},
			Provider:       schema.ProviderContext{AccountRef: "inventory:bench"},
			Delivery:       schema.DeliveryContext{DeliveryID: "delivery:" + id, Source: "bench"},
			HostInvocation: schema.HostInvocation{InvocationID: "invocation:" + id},
		},
		Intent: schema.Intent{
			Provider: Provider, Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "test",
			Payload: []byte(payload),
			Display: schema.Display{Summary: "bench"},
		},
		Grounding: schema.Grounding{
			Subject: []byte(`"lumber: cedar-8ft-gradea"`), Scope: "security-domain:" + tenant, ObservationRef: "catalog:12",
			Candidates: []schema.Candidate{{Referent: "sku-1001", Source: "authoritative",
				Attributes: []byte(`{"resource":"Lumber: Cedar-8ft-GradeA"}`), EvidenceRefs: []string{"catalog:12#sku-1001"}}},
		},
	}
	fp, err := fingerprint.Of(&p, "sku-1001")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	p.Grant = &schema.Grant{
		Schema: schema.SchemaGrant, IntentFingerprint: fp.Fingerprint, AuthorizedBy: "actor:bench",
		AuthorizationMethod: schema.MethodManual, AuthenticationAssurance: schema.AssuranceBiometric,
		IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(time.Hour).UnixMilli(),
	}
	return schema.Marshal(p)
}
