// A Portcullis host: proposes the SPEC §2.1 action, checks the approval it
// is asked for against its own fingerprint, approves (or declines) it, and
// follows the outcome to the end.
//
//   npm run host                          propose, approve, expect CONFIRMED (exit 0)
//   npm run host -- --decline             propose, decline, expect DENIED/APPROVAL_DECLINED (exit 0)
//   npm run host -- --last <proposal_id>  print the last stored outcome of a proposal
//   npm run host -- --nkey host.nk        log in and sign with the seed `processor keygen host` wrote
//   npm run host -- --help
//
// Environment: NATS_URL (default nats://127.0.0.1:4222), PORTCULLIS_HOST
// (host name, default demo-host), PORTCULLIS_HOST_SEED_FILE (as --nkey: sign
// and log in with this nkey; without either everything is sent unsigned,
// which only `processor run --dev` admits), PORTCULLIS_PREFIX (default
// actions).
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";

import {
  DEFAULT_URL,
  HEADER_HOST_KEY,
  HEADER_SIGNATURE,
  HOST_PATTERN,
  PROPOSAL_ID_PATTERN,
  Subjects,
  connectAs,
  connectError,
  decodeOutcome,
  refusal,
  describeOutcome,
  env,
  errorText,
  lastOutcome,
  loadSeed,
  signedHeaders,
  type Identity,
  type Outcome,
} from "./client.ts";
import { fingerprint, groundLocally, type Fingerprint, type Proposal } from "./fingerprint.ts";

const usage = `usage: npm run host -- [options]

  --host NAME         host name <h> (default: $PORTCULLIS_HOST or demo-host)
  --proposal FILE     the proposal to send (default: ../proposal.json); proposal_id and
                      context.delivery.delivery_id are replaced by fresh ones
  --id PROPOSAL_ID    use this proposal_id instead of a fresh one
  --new-intent        add "request_id": <proposal_id> to the payload: a new intent, so the
                      provider is called again (an identical intent is dispatched only once)
  --decline           decline instead of approving; expect DENIED/APPROVAL_DECLINED
  --timeout SECONDS   how long to wait for each outcome (default 45)
  --last PROPOSAL_ID  only print the last stored outcome of that proposal (direct get)
  --nkey FILE         the host's nkey seed (\`processor keygen host --out FILE\`): log in with
                      it and sign every body (default: $PORTCULLIS_HOST_SEED_FILE; neither:
                      unsigned, which only \`processor run --dev\` admits)

environment: NATS_URL (default ${DEFAULT_URL}; nats://, tls://, ws:// or wss://),
PORTCULLIS_HOST_SEED_FILE (as --nkey), PORTCULLIS_PREFIX (subject prefix, default actions)`;

function fail(message: string, code = 1): never {
  console.error(`host: ${message}`);
  process.exit(code);
}

const { values: args } = (() => {
  try {
    return parseArgs({
      options: {
        host: { type: "string" },
        proposal: { type: "string" },
        id: { type: "string" },
        "new-intent": { type: "boolean", default: false },
        decline: { type: "boolean", default: false },
        timeout: { type: "string" },
        last: { type: "string" },
        nkey: { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
      allowPositionals: false,
    });
  } catch (err) {
    return fail(`${errorText(err)}\n${usage}`, 2);
  }
})();
if (args.help) {
  console.log(usage);
  process.exit(0);
}

const h = args.host ?? env("PORTCULLIS_HOST") ?? "demo-host";
if (!HOST_PATTERN.test(h)) fail(`host name ${JSON.stringify(h)} does not match ${HOST_PATTERN}`, 2);
const timeoutSeconds = Number(args.timeout ?? "45");
if (!Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0) fail("--timeout takes a positive number of seconds", 2);
const timeoutMs = timeoutSeconds * 1000;
for (const given of [args.id, args.last]) {
  if (given !== undefined && !PROPOSAL_ID_PATTERN.test(given)) {
    fail(`proposal_id ${JSON.stringify(given)} does not match ${PROPOSAL_ID_PATTERN}`, 2);
  }
}
const url = env("NATS_URL") ?? DEFAULT_URL;
const subj = (() => {
  try {
    return new Subjects(env("PORTCULLIS_PREFIX") ?? "actions");
  } catch (err) {
    return fail(errorText(err), 2);
  }
})();

const seedFile = args.nkey ?? env("PORTCULLIS_HOST_SEED_FILE");
let id: Identity | null = null;
if (seedFile !== undefined) {
  try {
    id = loadSeed(seedFile);
  } catch (err) {
    fail(errorText(err), 2);
  }
}

let nc: NatsConnection;
try {
  nc = await connectAs(`portcullis-example-host ${h}`, url, id);
} catch (err) {
  fail(connectError(url, err, "PORTCULLIS_HOST_SEED_FILE", id));
}
process.once("SIGINT", () => {
  void nc.close().finally(() => process.exit(130));
});

if (id === null) {
  console.log(`host ${h}: connected to ${url} anonymously (no --nkey or PORTCULLIS_HOST_SEED_FILE)`);
} else {
  console.log(`host ${h}: connected to ${url} as ${id.publicKey}`);
}

/** What to do about a permissions violation: this login is not host h's. */
const mayNot =
  id === null
    ? `this login may not act as host ${h}; pass --nkey FILE, the seed of host ${h}'s key`
    : `${id.publicKey} may not act as host ${h}: is it the public_key of the host "${h}" block (--host NAME, --nkey FILE)?`;

/** Signature headers for body, or undefined when unsigned. */
function sign(body: Uint8Array): MsgHdrs | undefined {
  return id === null ? undefined : signedHeaders(id, body);
}

// --last: the last outcome stored for a proposal, by direct get.
async function printLast(proposalID: string): Promise<number> {
  const last = await lastOutcome(nc, subj, h, proposalID, 5000);
  if (last === null) {
    console.log(`no outcome stored on ${subj.outcome(h, proposalID)}`);
    return 1;
  }
  console.log(`last outcome of ${h}/${proposalID} (${subj.outcomesStream()} sequence ${last.sequence}, ${last.time}):`);
  console.log(`  ${describeOutcome(last.outcome)}`);
  console.log(JSON.stringify(last.outcome, null, 2));
  return 0;
}

// Outcomes arriving on the live subscription, handed out one at a time.
class OutcomeQueue {
  private readonly queue: Outcome[] = [];
  private waiter: ((o: Outcome | null) => void) | null = null;

  push(o: Outcome): void {
    if (this.waiter !== null) {
      const w = this.waiter;
      this.waiter = null;
      w(o);
    } else {
      this.queue.push(o);
    }
  }

  /** The next outcome, or null after ms without one. */
  next(ms: number): Promise<Outcome | null> {
    const o = this.queue.shift();
    if (o !== undefined) return Promise.resolve(o);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        resolve(null);
      }, ms);
      this.waiter = (x) => {
        clearTimeout(timer);
        resolve(x);
      };
    });
  }
}

async function propose(): Promise<number> {
  const proposalFile = args.proposal ?? new URL("../proposal.json", import.meta.url);
  const proposal = JSON.parse(readFileSync(proposalFile, "utf8")) as Proposal;
  const proposalID = args.id ?? `ts-${Date.now().toString(36)}-${randomBytes(4).toString("hex")}`;
  proposal.proposal_id = proposalID;
  // A fresh delivery id: the same (host, delivery_id) again is a repeat,
  // answered with the recorded outcome and nothing else.
  proposal.context.delivery.delivery_id = `delivery:${randomUUID()}`;
  if (args["new-intent"]) {
    const payload = proposal.intent.payload;
    if (typeof payload !== "object" || payload === null || Array.isArray(payload)) fail("--new-intent needs an object payload", 2);
    payload["request_id"] = proposalID;
  }

  // What this host expects to approve: the referent grounding will pick and
  // the fingerprint of the intent bound to it.
  if (id === null) {
    console.log(
      "sending UNSIGNED messages: only `processor run --dev` (admission.allow_unsigned) admits them; a configured\n" +
        "  processor drops them with the incident event ADMISSION_UNAUTHENTICATED and publishes no outcome",
    );
  } else {
    console.log(`signing every body with ${id.publicKey} (headers ${HEADER_HOST_KEY}, ${HEADER_SIGNATURE})`);
  }

  const referent = groundLocally(proposal);
  const mine: Fingerprint | null = referent === null ? null : fingerprint(proposal, referent);
  if (mine === null) {
    console.log("this proposal does not ground locally to exactly one candidate: it will not be approved");
  } else {
    console.log(`expected: referent ${referent}, fingerprint ${mine.fingerprint}`);
  }

  // Subscribe first, and flush so that the server has the subscription
  // before anything can be published on it.
  const outcomeSubject = subj.outcome(h, proposalID);
  const outcomes = new OutcomeQueue();
  let refused: string | null = null;
  nc.subscribe(outcomeSubject, {
    callback: (err, msg) => {
      if (err !== null) {
        refused = refusal(err, mayNot) ?? `subscription: ${err.message}`;
        return;
      }
      try {
        outcomes.push(decodeOutcome(msg.data));
      } catch (e) {
        console.error(`host: ignored a message on ${outcomeSubject}: ${errorText(e)}`);
      }
    },
  });
  // The server refuses a forbidden subscription before it answers the
  // flush: once it returns, a refusal is known (outcomes could never come).
  await nc.flush();
  if (refused !== null) throw new Error(refused);
  console.log(`subscribed to ${outcomeSubject}`);

  const js = jetstream(nc);
  await publish(js, subj.proposal(h), proposal, subj.proposalsStreams(h), `proposal ${proposalID}`);

  const seen = new Set<string>();
  const key = (o: Outcome) => `${o.kind}|${o.at_ms}|${o.receipt?.receipt_id ?? ""}`;

  // The next outcome: live, or, when the subscription stays silent, the
  // last one the stream holds if this host has not seen it (it may have
  // been published while the connection was down). Silence is checked every
  // few seconds, up to --timeout.
  const next = async (): Promise<Outcome> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left = deadline - Date.now();
      const live = await outcomes.next(Math.max(1, Math.min(left, 5000)));
      if (live !== null) return live;
      const stored = await lastOutcome(nc, subj, h, proposalID, 5000);
      if (stored !== null && !seen.has(key(stored.outcome))) {
        console.log(`(no live outcome; read it from ${subj.outcomesStream()} by direct get, stream sequence ${stored.sequence})`);
        return stored.outcome;
      }
      if (Date.now() >= deadline) break;
      console.log(`(still waiting: no live outcome, nothing new in ${subj.outcomesStream()})`);
    }
    throw new Error(
      `no new outcome for ${h}/${proposalID} within ${timeoutSeconds}s` +
        (id === null ? "" : ` (a message that fails authentication gets no outcome: is ${id.publicKey} host ${h}'s key?)`),
    );
  };

  let answered = false;
  for (;;) {
    const o = await next();
    if (seen.has(key(o))) continue; // already read from the stream
    seen.add(key(o));
    if (o.proposal_id !== proposalID) throw new Error(`outcome for another proposal: ${o.proposal_id}`);
    console.log(`outcome: ${describeOutcome(o)}`);

    if (o.kind === "NEEDS_APPROVAL" && !answered) {
      const approval = o.approval;
      if (approval === null) throw new Error("NEEDS_APPROVAL without approval");
      if (mine === null) throw new Error("cannot check this approval against a fingerprint of our own: not answering it");
      if (approval.fingerprint !== mine.fingerprint || o.fingerprint !== mine.fingerprint || o.referent !== referent) {
        throw new Error(
          `approval asked for ${approval.fingerprint} (referent ${o.referent}), but this host proposed ${mine.fingerprint} ` +
            `(referent ${referent}): not answering it`,
        );
      }
      console.log(`approval asked: "${approval.summary}", fingerprint matches ours; expires ${new Date(approval.expires_at_ms).toISOString()}`);
      answered = true;
      const actor = proposal.context.actor.actor_ref;
      if (args.decline) {
        const decline = { schema: "actions.decline.v1", proposal_id: proposalID, intent_fingerprint: mine.fingerprint, declined_by: actor };
        await publish(js, subj.grant(h), decline, subj.grantsStreams(h), `decline by ${actor}`);
      } else {
        const now = Date.now();
        const grant = {
          schema: "actions.grant.v1",
          proposal_id: proposalID,
          intent_fingerprint: mine.fingerprint,
          authorized_by: actor,
          authorization_method: "manual",
          authentication_assurance: "biometric",
          issued_at_ms: now,
          expires_at_ms: now + 5 * 60 * 1000,
          max_external_spend: proposal.intent.external_spend,
        };
        await publish(js, subj.grant(h), grant, subj.grantsStreams(h), `grant by ${actor} (manual, biometric, 5 min)`);
      }
      continue;
    }

    if (o.kind === "FAILED_BEFORE_DISPATCH" && o.incidents.some((i) => i.code === "ADAPTER_UNAVAILABLE")) {
      console.log(`hint: nobody served ${subj.providerDispatch(proposal.intent.provider.trim().toLowerCase())}; start the connector (npm run connector)`);
    }
    if (!o.terminal) continue;

    if (args.decline) {
      const ok = o.kind === "DENIED" && o.incidents.some((i) => i.code === "APPROVAL_DECLINED");
      console.log(ok ? "done: declined, nothing dispatched" : `done: expected DENIED/APPROVAL_DECLINED, got ${o.kind}`);
      return ok ? 0 : 1;
    }
    const ok = o.kind === "CONFIRMED";
    console.log(ok ? "done: CONFIRMED" : `done: expected CONFIRMED, got ${o.kind}`);
    return ok ? 0 : 1;
  }
}

/** Publishes body with JetStream: the PubAck proves the stream stored it. */
async function publish(js: JetStreamClient, subject: string, message: object, streams: string[], what: string): Promise<void> {
  const body = new TextEncoder().encode(JSON.stringify(message));
  const hdrs = sign(body);
  // Nats-Msg-Id: a hash of the (signed) body, which nobody else can guess;
  // a retried publish of the same bytes is then dropped as a duplicate.
  const msgID = createHash("sha256").update(body).digest("hex");
  try {
    const ack = await js.publish(subject, body, { msgID, timeout: 5000, ...(hdrs === undefined ? {} : { headers: hdrs }) });
    if (!streams.includes(ack.stream)) throw new Error(`stored in ${ack.stream}, expected ${streams.join(" or ")}`);
    console.log(`sent ${what} on ${subject}${hdrs === undefined ? " (unsigned)" : " (signed)"}: stored in ${ack.stream} sequence ${ack.seq}${ack.duplicate ? " (duplicate)" : ""}`);
  } catch (err) {
    const refused = refusal(err, mayNot);
    if (refused !== null) throw new Error(`publishing ${what}: ${refused}`);
    const text = errorText(err);
    const hint = /no responders|503/i.test(text) ? ` (no stream captures ${subject}: is \`processor run --dev\` running?)` : "";
    throw new Error(`publishing ${what} on ${subject}: ${text}${hint}`);
  }
}

// Run (last: the class above must be initialized first).
const exitCode = await (args.last !== undefined ? printLast(args.last) : propose()).catch((err: unknown) => {
  console.error(`host: ${errorText(err)}`);
  return 1;
});
await nc.close();
process.exit(exitCode);
