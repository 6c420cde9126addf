// Package client is the Go client of Portcullis for integrators: hosts that
// propose consequential actions and follow their outcomes, and the
// connectors, protected-profile resolvers and candidate sources the
// processor calls. It speaks the wire contract of PROTOCOL.md (at the
// repository's root; "SPEC §2.7" here is its section 2.7) over NATS, and
// does the things an integration must not get wrong: its own login and
// inbox, signatures over the exact bytes sent, subscribing before
// publishing, reading missed outcomes from the outcome stream, strict
// replies, and protected values that do not linger.
//
// # Connecting
//
// Every role logs in with its own nkey and receives replies only under its
// own inbox prefix _INBOX.<public key> (SPEC §2.8); a host signs with the
// key it logs in with. Connect takes that identity once and does all
// three; LoadSeed reads the seed file `processor keygen <role> --out FILE`
// wrote:
//
//	seed, err := client.LoadSeed("frontdesk.nk")
//	nc, err := client.Connect(url, seed)
//
// Connect refuses at once, with a typed error, what would otherwise only
// time out: a URL that is not NATS (ErrNotNATS), a login the server
// refuses (ErrLoginRefused: an anonymous login where one is required, a
// key that is no role's), options that would log in as another identity
// than the one that signs (ErrIdentityMismatch). On a Conn, a publish or
// direct get the server refuses (a permissions violation, which NATS
// reports only asynchronously) ends at once with ErrPublishRefused.
//
// # Hosts
//
// A Host (NewHost) proposes for one configured `host "<h>"` block and signs
// with its connection's key:
//
//	host, err := client.NewHost(nc, client.HostConfig{Name: "frontdesk"})
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
// fingerprint is dispatched at most once. A proposal of an intent an
// earlier proposal dispatched gets that dispatch's receipt with
// Outcome.RecordedEarlier set: tell the user it was done already, not
// that it was just done.
//
// # Serving the processor
//
// ServeConnector (provider dispatch and reconcile), ServeResolver
// (protected disclosure) and ServeCandidateSource (grounding candidates),
// given the role's connection (nc.Conn), subscribe in a queue group, decode requests strictly, run a small handler
// interface with bounded concurrency, and answer exactly the reply schema
// the processor decodes; each documents what it answers when the handler
// fails. Drain stops them gracefully.
//
// # Errors
//
// Errors wrap the sentinel errors (ErrNoOutcome, ErrPublishRefused,
// ErrTimeout, ErrEnded, ErrInvalid, ErrNotParked, ErrFingerprintMismatch,
// ErrLoginRefused, ErrIdentityMismatch, ErrNotNATS); test them with
// errors.Is. Error texts name subjects, ids, keys and codes, never
// payloads or protected values.
//
// A proposal the processor refuses for authentication gets no outcome at
// all (SPEC §2.7: nothing proves the host sent it), only an incident event
// hosts cannot read. Tracker.Await, giving up on a proposal of which no
// outcome ever arrived, says so: its error wraps ErrTimeout and
// ErrNoOutcome and names the likely cause (sent unsigned, or signed by a
// key that is not the host block's).
//
// It owns the integrator's side of the wire: signing, subjects, decoding of
// outcomes and of the processor's requests. It imports the wire packages
// (schema, subjects, fingerprint) and the key, trust and disclosure helpers
// only: never a stage, a store, the engine or the configuration — an
// integrator's binary carries none of the processor.
package client
