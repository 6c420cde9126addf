// Package client is the Go client of Portcullis for integrators: hosts that
// propose consequential actions and follow their outcomes, and the
// connectors, protected-profile resolvers and candidate sources the
// processor calls. It speaks the wire contract of SPEC §1–§4 over NATS, and
// does the things an integration must not get wrong: its own login and
// inbox, signatures over the exact bytes sent, subscribing before
// publishing, reading missed outcomes from the outcome stream, strict
// replies, and protected values that do not linger.
//
// # Connecting
//
// Every role logs in with its own nkey and receives replies only under its
// own inbox prefix _INBOX.<public key> (SPEC §2.8). Connect does both:
//
//	nc, err := client.Connect(url, hostSeed)
//
// # Hosts
//
// A Host (NewHost) proposes for one configured `host "<h>"` block and signs
// with its key:
//
//	host, err := client.NewHost(nc, client.HostConfig{Name: "frontdesk", Key: hostSeed})
//	tr, err := host.Propose(ctx, &proposal)          // subscribe, publish, PubAck
//	defer tr.Stop()
//	o, err := tr.Await(ctx, client.Kinds(schema.KindNeedsApproval))
//	want, _ := client.Fingerprint(&proposal, "sku-1001") // what you expect to approve
//	_, err = host.Grant(ctx, o, client.GrantOptions{AuthorizedBy: "actor:demo",
//		Assurance: schema.AssuranceBiometric, ExpectFingerprint: want})
//	o, err = tr.Await(ctx, client.Terminal)           // CONFIRMED, DENIED, …
//
// Outcomes arrive live on `<prefix>.outcomes.<h>.<proposal_id>`; when the
// subscription stays silent, Tracker.Await reads the last stored outcome
// from the outcome stream by direct get (Host.Last), the only JetStream
// request a host may make besides publishing.
//
// To do the same thing twice on purpose, make the intents differ (a request
// id in the payload): an identical intent has the same fingerprint, and a
// fingerprint is dispatched at most once.
//
// # Serving the processor
//
// ServeConnector (provider dispatch and reconcile), ServeResolver
// (protected disclosure) and ServeCandidateSource (grounding candidates)
// subscribe in a queue group, decode requests strictly, run a small handler
// interface with bounded concurrency, and answer exactly the reply schema
// the processor decodes; each documents what it answers when the handler
// fails. Drain stops them gracefully.
//
// # Errors
//
// Errors wrap the sentinel errors (ErrNoOutcome, ErrPublishRefused,
// ErrTimeout, ErrEnded, ErrInvalid, ErrNotParked, ErrFingerprintMismatch);
// test them with errors.Is. Error texts name subjects, ids and codes, never
// payloads or protected values.
package client
