// A provider connector for provider "inventory" (SPEC §4): Portcullis's
// nats adapter sends it core NATS requests on
// actions.provider.inventory.dispatch and .reconcile and waits for one reply.
//
//   npm run connector
//
// --nkey FILE, or PORTCULLIS_CONNECTOR_SEED_FILE: log in with this nkey, as a
// `connector` block's public_key (neither: anonymously, which only
// `processor run --dev` accepts). Environment: NATS_URL (default
// nats://127.0.0.1:4222), PORTCULLIS_PROVIDER (default inventory),
// PORTCULLIS_PREFIX (default actions).
//
// It "adjusts stock" by remembering the idempotency key: a real connector
// passes the key to its system of record, which does the work at most once
// per key. It prints one line per request and never a payload value (nor
// protected-disclosure values, which a dispatch may carry).
//
// It never acts on a dispatch request that arrives after its not_after_ms
// (SPEC §4: the end of the processor's lease, unix ms, read against this
// host's clock): it answers failed_before_dispatch with error_code
// NOT_AFTER_PASSED, which is the truth — nothing was done — and which the
// processor recognizes. Keep this host's clock within the processors'
// approval.clock_skew (default 30s) of theirs (NTP): reconciliation trusts
// an "absent" answer only once not_after_ms plus that skew has passed.
import { parseArgs } from "node:util";

import type { Msg, NatsConnection } from "@nats-io/transport-node";

import { DEFAULT_URL, Subjects, connectAs, connectError, env, errorText, loadSeed, refusal, type Identity } from "./client.ts";

const usage = `usage: npm run connector [-- --nkey FILE]

  --nkey FILE   the connector's nkey seed (\`processor keygen connector --out FILE\`) to log in with
                (default: $PORTCULLIS_CONNECTOR_SEED_FILE; neither: anonymous, which only
                \`processor run --dev\` accepts)

environment: NATS_URL (default ${DEFAULT_URL}; nats://, tls://, ws:// or wss://),
PORTCULLIS_CONNECTOR_SEED_FILE (as --nkey), PORTCULLIS_PROVIDER (default inventory),
PORTCULLIS_PREFIX (default actions)`;

function fail(message: string, code = 1): never {
  console.error(`connector: ${message}`);
  process.exit(code);
}

let nkeyFlag: string | undefined;
try {
  const { values } = parseArgs({ options: { help: { type: "boolean", short: "h", default: false }, nkey: { type: "string" } }, strict: true });
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  nkeyFlag = values.nkey;
} catch (err) {
  fail(`${errorText(err)}\n${usage}`, 2);
}

const provider = env("PORTCULLIS_PROVIDER") ?? "inventory";
if (!/^[a-z0-9][a-z0-9_-]{0,63}$/.test(provider)) fail(`provider name ${JSON.stringify(provider)} is not valid`, 2);
const url = env("NATS_URL") ?? DEFAULT_URL;
let subj: Subjects;
try {
  subj = new Subjects(env("PORTCULLIS_PREFIX") ?? "actions");
} catch (err) {
  fail(errorText(err), 2);
}
const seedFile = nkeyFlag ?? env("PORTCULLIS_CONNECTOR_SEED_FILE");
let id: Identity | null = null;
if (seedFile !== undefined) {
  try {
    id = loadSeed(seedFile);
  } catch (err) {
    fail(errorText(err), 2);
  }
}

/** The reply of SPEC §4: outcome, and optionally provider_action_id, evidence_refs, error_code. */
interface Reply {
  outcome: "confirmed" | "acknowledged" | "rejected" | "failed_before_dispatch" | "indeterminate";
  provider_action_id?: string;
  evidence_refs?: string[];
  error_code?: string;
}

/** What this connector did, per idempotency key (in memory: a demo's system of record). */
const done = new Map<string, Reply>();

type Fields = Record<string, unknown>;

/**
 * Decodes a request: a JSON object with the expected schema, a 64-hex
 * idempotency key and the matching fingerprint, and the string members
 * named. Returns an error text instead when it is not one.
 */
function decode(msg: Msg, schema: string, strings: string[]): Fields | string {
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(msg.data));
  } catch {
    return "not JSON";
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return "not a JSON object";
  const f = v as Fields;
  if (f["schema"] !== schema) return `schema is not ${schema}`;
  const key = f["idempotency_key"];
  if (typeof key !== "string" || !/^[0-9a-f]{64}$/.test(key)) return "idempotency_key is not 64 hex digits";
  if (f["fingerprint"] !== `sha256:${key}`) return "fingerprint does not match idempotency_key";
  for (const s of strings) {
    if (typeof f[s] !== "string") return `${s} is not a string`;
  }
  return f;
}

/** The reply to a dispatch that came after its not_after_ms: nothing was done (SPEC §4). */
const LATE: Reply = { outcome: "failed_before_dispatch", error_code: "NOT_AFTER_PASSED" };

/** not_after_ms as a positive integer, or null when the request has none (malformed). */
function notAfter(f: Fields): number | null {
  const v = f["not_after_ms"];
  return typeof v === "number" && Number.isSafeInteger(v) && v > 0 ? v : null;
}

/** A request member for a log line: a plain name, or "?" (never raw text that could forge lines). */
function name(v: unknown): string {
  return typeof v === "string" && /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(v) ? v : "?";
}

function respond(msg: Msg, reply: Reply): void {
  if (!msg.respond(JSON.stringify(reply))) console.error("connector: a request without a reply subject (not from Portcullis?)");
}

function dispatch(msg: Msg): void {
  const req = decode(msg, "actions.dispatch.v1", ["provider", "capability", "operation", "environment", "referent"]);
  if (typeof req === "string") {
    // Nothing was done: say so, with a code of our own.
    console.log(`dispatch  malformed request (${req}) -> rejected`);
    respond(msg, { outcome: "rejected", error_code: "inventory.malformed_request" });
    return;
  }
  const deadline = notAfter(req);
  if (deadline === null) {
    console.log("dispatch  malformed request (no not_after_ms) -> rejected");
    respond(msg, { outcome: "rejected", error_code: "inventory.malformed_request" });
    return;
  }
  const key = req["idempotency_key"] as string;
  const key8 = key.slice(0, 8);
  const what = `${name(req["capability"])}/${name(req["operation"])} env=${name(req["environment"])} key=${key8}`;
  const now = Date.now();
  if (now > deadline) {
    // The processor's lease on this request has ended: another processor
    // may already have concluded that the dispatch was interrupted. Never
    // act on it, whatever it asks.
    console.log(`dispatch  ${what}: LATE by ${now - deadline}ms (after not_after_ms) -> failed_before_dispatch NOT_AFTER_PASSED, not applied`);
    respond(msg, LATE);
    return;
  }
  if (req["provider"] !== provider) {
    console.log(`dispatch  ${what}: for provider ${name(req["provider"])}, not ${provider} -> rejected`);
    respond(msg, { outcome: "rejected", error_code: "inventory.wrong_provider" });
    return;
  }
  const before = done.get(key);
  if (before !== undefined) {
    // Portcullis dispatches a fingerprint at most once, so this never
    // happens; were it to, the key makes the repeat harmless: same answer,
    // no second effect.
    console.log(`dispatch  ${what}: REPEATED idempotency key (Portcullis should never send one twice); not applied again -> ${before.outcome}`);
    respond(msg, before);
    return;
  }
  const disclosure = req["protected_disclosure"];
  const classes =
    typeof disclosure === "object" && disclosure !== null && Array.isArray((disclosure as Fields)["field_classes"])
      ? ` disclosure=${((disclosure as Fields)["field_classes"] as unknown[]).length} classes`
      : "";
  const reply: Reply = { outcome: "confirmed", provider_action_id: `inv-${key8}`, evidence_refs: [`inventory:${key8}`] };
  done.set(key, reply);
  console.log(`dispatch  ${what}${classes} -> confirmed ${reply.provider_action_id}`);
  respond(msg, reply);
}

function reconcile(msg: Msg): void {
  const req = decode(msg, "actions.reconcile.v1", ["attempt_id"]);
  if (typeof req === "string") {
    console.log(`reconcile malformed request (${req}) -> indeterminate`);
    respond(msg, { outcome: "indeterminate", error_code: "inventory.malformed_request" });
    return;
  }
  const key = req["idempotency_key"] as string;
  const key8 = key.slice(0, 8);
  const before = done.get(key);
  if (before === undefined) {
    // Read-only: say what we know. This demo's memory does not survive a
    // restart, so "not in memory" proves nothing either way; a real
    // connector asks its system of record and answers confirmed (present)
    // or rejected (absent).
    console.log(`reconcile key=${key8} attempt=${name(req["attempt_id"])}: not in this connector's memory -> indeterminate`);
    respond(msg, { outcome: "indeterminate" });
    return;
  }
  console.log(`reconcile key=${key8} attempt=${name(req["attempt_id"])} -> confirmed ${before.provider_action_id ?? ""}`);
  respond(msg, { outcome: "confirmed", ...(before.provider_action_id === undefined ? {} : { provider_action_id: before.provider_action_id }), evidence_refs: [`inventory:${key8}`] });
}

let nc: NatsConnection;
try {
  nc = await connectAs(`portcullis-example-connector ${provider}`, url, id);
} catch (err) {
  fail(connectError(url, err, "PORTCULLIS_CONNECTOR_SEED_FILE", id));
}

// A queue group: several connector processes share the requests, each
// request going to exactly one of them. "portcullis" is the Go client's
// default (client.DefaultQueue), so Go and TypeScript processes of one
// connector share the load too.
const queue = "portcullis";
const mayNot =
  id === null
    ? `this login may not serve provider ${provider}; pass --nkey FILE, the seed of the connector block that lists it`
    : `${id.publicKey} may not serve provider ${provider}: is it the public_key of a connector block whose providers list ${provider}?`;
let refused: string | null = null;
let ready = false;
const serve = (subject: string, handle: (msg: Msg) => void) =>
  nc.subscribe(subject, {
    queue,
    callback: (err, msg) => {
      if (err !== null) {
        refused ??= refusal(err, mayNot) ?? `${subject}: ${err.message}`;
        if (ready) console.error(`connector: ${refusal(err, mayNot) ?? `${subject}: ${err.message}`}`);
        return;
      }
      try {
        handle(msg);
      } catch (e) {
        // No reply: Portcullis times out and treats the call as
        // indeterminate (it never assumes a failure after sending).
        console.error(`connector: ${subject}: ${errorText(e)}`);
      }
    },
  });
serve(subj.providerDispatch(provider), dispatch);
serve(subj.providerReconcile(provider), reconcile);
// The server refuses a forbidden subscription before it answers the flush:
// once it returns, a refusal is known, and this connector can serve nothing.
await nc.flush();
if (refused !== null) {
  await nc.close();
  fail(refused);
}
ready = true;
console.log(
  `connector ready: serving ${subj.providerDispatch(provider)} and .reconcile (queue ${queue}) on ${url}, ` +
    (id === null ? "anonymous (only `processor run --dev` accepts that)" : `logged in as ${id.publicKey}`),
);

const stop = () => {
  void nc.drain().finally(() => process.exit(0));
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
void nc.closed().then((err) => {
  if (err) fail(`connection closed: ${errorText(err)}`);
});
