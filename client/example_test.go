package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/schema"
)

// A host proposes, checks the approval it is asked for against its own
// fingerprint, grants it, and follows the outcome to the end. (The
// processor here is an in-process test deployment with NATS authentication
// on; its provider "demo" confirms every dispatch.)
func ExampleHost() {
	url, seed, stop := exampleProcessor()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Log in as host "frontdesk" (replies under its own inbox); the host
	// signs with the same key.
	nc, err := client.Connect(url, seed)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	host, err := client.NewHost(nc, client.HostConfig{Name: "frontdesk"})
	if err != nil {
		log.Fatal(err)
	}

	p := lumber("prop-7f3a") // the SPEC §2.1 proposal as a schema.Proposal
	tr, err := host.Propose(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Stop()

	parked, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval))
	if errors.Is(err, client.ErrEnded) {
		fmt.Println("ended without asking for approval:", parked.Kind)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	// Approve only what we computed ourselves: this intent, grounded to
	// the candidate we expect.
	mine, err := client.Fingerprint(p, "sku-1001")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(parked.Kind, parked.Approval.Summary)
	_, err = host.Grant(ctx, parked, client.GrantOptions{
		AuthorizedBy:      p.Context.Actor.ActorRef,
		Assurance:         schema.AssuranceBiometric,
		ExpectFingerprint: mine,
	})
	if err != nil {
		log.Fatal(err)
	}
	done, err := tr.Await(ctx, client.Terminal)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Kind, done.EffectTruth, done.Receipt.Status)

	// Later, or from another process: the last stored outcome. The stream
	// may store an outcome a moment after subscribers received it live.
	last, err := host.Last(ctx, "prop-7f3a")
	for i := 0; err == nil && last.Kind != done.Kind && i < 50; i++ {
		time.Sleep(20 * time.Millisecond)
		last, err = host.Last(ctx, "prop-7f3a")
	}
	fmt.Println(last.Kind, err)
	// Output:
	// NEEDS_APPROVAL Add 20 boards of cedar 8ft grade A
	// CONFIRMED PRESENT confirmed
	// CONFIRMED <nil>
}

// The fingerprint a host approves binds the tenant, actor, operation,
// payload and the grounded referent. To do the same thing twice on
// purpose, make the intents differ: an identical intent is dispatched at
// most once.
func ExampleFingerprint() {
	p := &schema.Proposal{
		Schema:     schema.SchemaProposal,
		ProposalID: "prop-7f3a",
		Context: schema.Context{
			Tenant: schema.TenantContext{TenantRef: "tenant:demo", SecurityDomainRef: "security-domain:demo"},
			Actor:  schema.ActorContext{ActorRef: "actor:demo", Assurance: "host-session"},
		},
		Intent: schema.Intent{
			Provider: "inventory", Capability: "inventory.adjust", Operation: "adjust_stock", Environment: "test",
			Payload: jsontext.Value(`{"quantity":20}`),
		},
	}
	fp, _ := client.Fingerprint(p, "sku-1001")
	fmt.Println(fp)

	again := *p
	again.Intent.Payload = jsontext.Value(`{"quantity":20,"request_id":"r-2"}`)
	fp2, _ := client.Fingerprint(&again, "sku-1001")
	fmt.Println(fp2 == fp)
	// Output:
	// sha256:5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446
	// false
}

// stock is a provider connector's handler: it adjusts stock once per
// idempotency key and says what it knows when asked to reconcile.
type stock struct{}

func (stock) Dispatch(ctx context.Context, req schema.DispatchRequest) (schema.AdapterReply, error) {
	if req.Referent == "sku-9999" {
		// The stock service failed after the write may have happened:
		// the Connector answers indeterminate, never a failure.
		return schema.AdapterReply{}, errors.New("stock service: connection reset")
	}
	// … apply the adjustment with req.IdempotencyKey as the dedupe key …
	return schema.AdapterReply{
		Outcome:          schema.ReplyConfirmed,
		ProviderActionID: "adj-" + req.IdempotencyKey[:8],
		EvidenceRefs:     []string{"ledger:" + req.IdempotencyKey[:8]},
	}, nil
}

func (stock) Reconcile(ctx context.Context, req schema.ReconcileRequest) (schema.AdapterReply, error) {
	// … look req.IdempotencyKey up in the ledger, read-only …
	return schema.AdapterReply{Outcome: schema.ReplyIndeterminate}, nil
}

// A connector serves the dispatch and reconcile requests of its providers.
// (Here the example plays the processor too, on a server without
// authentication, to show the replies.)
func ExampleServeConnector() {
	url, stop := exampleServer()
	defer stop()
	nc, err := client.Connect(url, nil) // a real connector logs in with its own seed
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	c, err := client.ServeConnector(nc.Conn, client.ConnectorConfig{Providers: []string{"inventory"}}, stock{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Drain(context.Background())

	// The processor's side: one dispatch request per intent.
	for _, referent := range []string{"sku-1001", "sku-9999"} {
		body := schema.MustMarshal(schema.DispatchRequest{
			Schema:         schema.SchemaDispatch,
			Fingerprint:    "sha256:5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446",
			IdempotencyKey: "5a6883578c195c2db4563345d2872d693c6dfabca09b1ae4918d1cd00103e446",
			Target: schema.Target{
				Provider:    "inventory",
				Capability:  "inventory.adjust",
				Operation:   "adjust_stock",
				Environment: "test",
				Referent:    referent,
			},
			Payload:    jsontext.Value(`{"quantity":20}`),
			NotAfterMs: time.Now().Add(7 * time.Second).UnixMilli(),
		})
		reply, err := nc.Request("actions.provider.inventory.dispatch", body, 5*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(reply.Data))
	}
	// Output:
	// {"outcome":"confirmed","provider_action_id":"adj-5a688357","evidence_refs":["ledger:5a688357"]}
	// {"outcome":"indeterminate","error_code":"connector.handler_error"}
}

// A protected-profile resolver supplies values and the assurance of this
// disclosure; the Resolver echoes the bindings the processor checks.
func ExampleServeResolver() {
	seed, err := client.LoadSeed("resolver.nk") // written by `processor keygen resolver --out resolver.nk`
	if err != nil {
		log.Fatal(err)
	}
	defer seed.Wipe()
	nc, err := client.Connect(nats.DefaultURL, seed)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	r, err := client.ServeResolver(nc.Conn, client.ResolverConfig{},
		client.DisclosureFunc(func(ctx context.Context, req schema.DisclosureRequest) (client.Disclosure, error) {
			// Look the user up by what your host knows of this intent (for
			// example, the fingerprint it approved) and ask for
			// reauthentication when req.RequireReauthentication.
			if req.Source != schema.SourceFictionalTestFixture {
				return client.Disclosure{}, client.Refuse("profiles.no_profile")
			}
			values := map[string]jsontext.Value{}
			for _, class := range req.FieldClasses {
				switch class {
				case schema.ClassBirthDate:
					values[class] = jsontext.Value(`"1990-02-28"`)
				case schema.ClassLegalIdentity:
					values[class] = jsontext.Value(`{"given_name":"Ada","family_name":"Example"}`)
				default:
					return client.Disclosure{}, client.Refuse("profiles.class_not_held")
				}
			}
			return client.Disclosure{AuthenticationAssurance: schema.AssuranceBiometric, Values: values}, nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Drain(context.Background())
	// … serve until shutdown …
}

// A candidate source answers grounding with the bounded candidates for a
// subject in a security domain.
func ExampleServeCandidateSource() {
	seed, err := client.LoadSeed("catalog.nk") // written by `processor keygen source --out catalog.nk`
	if err != nil {
		log.Fatal(err)
	}
	defer seed.Wipe()
	nc, err := client.Connect(nats.DefaultURL, seed)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	s, err := client.ServeCandidateSource(nc.Conn, client.SourceConfig{Name: "catalog"},
		client.CandidateFunc(func(ctx context.Context, req client.CandidateRequest) (client.CandidateReply, error) {
			// … search the catalog of req.Scope for req.Subject …
			return client.CandidateReply{
				Candidates: []schema.Candidate{{
					Referent:     "sku-1001",
					Source:       "authoritative",
					Attributes:   jsontext.Value(`{"resource":"Lumber: Cedar-8ft-GradeA"}`),
					EvidenceRefs: []string{"catalog:12#sku-1001"},
				}},
				ObservationRef: "catalog:12",
			}, nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Drain(context.Background())
	// … serve until shutdown …
}
