// What the host and the connector share: subject names, logging in with an
// nkey, signing bodies, reading outcomes.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

import { fromSeed, type KeyPair } from "@nats-io/nkeys";
import {
  connect,
  errors,
  headers,
  nkeyAuthenticator,
  type MsgHdrs,
  type NatsConnection,
  type NodeConnectionOptions,
} from "@nats-io/transport-node";

import type { Json, Spend } from "./fingerprint.ts";

export const DEFAULT_URL = "nats://127.0.0.1:4222";

/** Subjects and stream names of SPEC §1 and §2.8 for a subject prefix. */
export class Subjects {
  constructor(readonly prefix: string = "actions") {
    if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(prefix)) throw new Error(`invalid subject prefix ${JSON.stringify(prefix)}`);
  }
  proposal(h: string): string {
    return `${this.prefix}.proposals.${h}`;
  }
  grant(h: string): string {
    return `${this.prefix}.grants.${h}`;
  }
  outcome(h: string, proposalID: string): string {
    return `${this.prefix}.outcomes.${h}.${proposalID}`;
  }
  providerDispatch(provider: string): string {
    return `${this.prefix}.provider.${provider}.dispatch`;
  }
  providerReconcile(provider: string): string {
    return `${this.prefix}.provider.${provider}.reconcile`;
  }
  /** ACTIONS_OUTCOMES for the default prefix (dots and dashes become "_", upper case). */
  outcomesStream(): string {
    return this.prefix.replace(/[.-]/g, "_").toUpperCase() + "_OUTCOMES";
  }
  /**
   * The streams that may store host h's proposals: its own ingress stream
   * (its budget; ACTIONS_PROPOSALS_<h>), or the shared one a processor with
   * allow_unsigned keeps for local development.
   */
  proposalsStreams(h: string): string[] {
    const base = this.prefix.replace(/[.-]/g, "_").toUpperCase() + "_PROPOSALS";
    return [`${base}_${nameToken(h)}`, base];
  }
  /** The same for host h's grants and declines. */
  grantsStreams(h: string): string[] {
    const base = this.prefix.replace(/[.-]/g, "_").toUpperCase() + "_GRANTS";
    return [`${base}_${nameToken(h)}`, base];
  }
  /** The direct get of the last message on a subject: an empty request to this. */
  directGetLast(subject: string): string {
    return `$JS.API.DIRECT.GET.${this.outcomesStream()}.${subject}`;
  }
}

/**
 * A host name as a stream name token (subjects.NameToken): itself when it
 * is lower case, else lower-cased with 8 hex digits of its SHA-256, so that
 * names differing only in case do not share a stream.
 */
export function nameToken(h: string): string {
  const low = h.toLowerCase();
  if (low === h) return h;
  return low + "_" + createHash("sha256").update(h).digest("hex").slice(0, 8);
}

export const HOST_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
export const PROPOSAL_ID_PATTERN = /^[A-Za-z0-9_:-]{1,128}$/;

/** An nkey identity read from a seed file (one line, "SU…"). */
export interface Identity {
  keyPair: KeyPair;
  publicKey: string;
  seed: Uint8Array;
}

/** Reads a user nkey seed file. Errors name the file, never its content. */
export function loadSeed(path: string): Identity {
  const text = readFileSync(path, "utf8").trim();
  if (!/^SU[A-Z2-7]+$/.test(text)) {
    throw new Error(`${path}: not a user nkey seed (one line, SU…); make one with \`processor keygen host|connector --out FILE\``);
  }
  const seed = new TextEncoder().encode(text);
  const keyPair = fromSeed(seed);
  return { keyPair, publicKey: keyPair.getPublicKey(), seed };
}

/**
 * Connects to NATS. With an identity it logs in with its nkey
 * (challenge–response: the seed never leaves this process) and receives
 * replies — JetStream publish acks, request replies — under its own inbox
 * prefix _INBOX.<public key>, the only one its permissions allow (SPEC §2.8).
 * Without one it connects anonymously, which only `processor run --dev`
 * (nats.auth = false) accepts.
 */
export async function connectAs(name: string, url: string, id: Identity | null): Promise<NatsConnection> {
  checkURL(url);
  const opts: NodeConnectionOptions = { servers: url.split(","), name, maxReconnectAttempts: 10 };
  if (id !== null) {
    opts.authenticator = nkeyAuthenticator(id.seed);
    opts.inboxPrefix = `_INBOX.${id.publicKey}`;
  }
  return connect(opts);
}

/**
 * Refuses, at once, a server URL that is not NATS (an http:// address such
 * as the processor's metrics listener), which would only time out: each of
 * a comma-separated list is nats://, tls://, ws://, wss:// or host:port.
 */
export function checkURL(url: string): void {
  for (const one of url.split(",")) {
    const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(one.trim());
    if (m !== null && !["nats", "tls", "ws", "wss"].includes((m[1] ?? "").toLowerCase())) {
      throw new NotNATSError(`${one.trim()} is not a NATS server URL: give nats://host:port (tls://, ws:// and wss:// work too); the processor's /metrics address is HTTP, not NATS`);
    }
  }
}

/** A URL that is not NATS, refused before connecting. */
export class NotNATSError extends Error {}

/**
 * What NATS refused: for a permissions violation, the operation and
 * subject, with advice on which identity may do it; null for other errors.
 */
export function refusal(err: unknown, advice: string): string | null {
  if (!(err instanceof errors.PermissionViolationError)) return null;
  return `NATS refused to let this login ${err.operation === "publish" ? "publish on" : "subscribe to"} ${err.subject} (a permissions violation): ${advice}`;
}

export const HEADER_HOST_KEY = "Actions-Host-Key";
export const HEADER_SIGNATURE = "Actions-Signature";

/** Headers Actions-Host-Key and Actions-Signature: base64url ed25519 signature of exactly body. */
export function signedHeaders(id: Identity, body: Uint8Array): MsgHdrs {
  const h = headers();
  h.set(HEADER_HOST_KEY, id.publicKey);
  h.set(HEADER_SIGNATURE, Buffer.from(id.keyPair.sign(body)).toString("base64url"));
  return h;
}

export interface Incident {
  phase: string;
  code: string;
  dispatch_boundary: string;
}

export interface Receipt {
  receipt_id: string;
  fingerprint: string;
  idempotency_key: string;
  status: string;
  next_action: string;
  provider_action_id: string;
  evidence_refs: string[] | null;
  /** Absent when there is none (confirmed or acknowledged without a provider code). */
  error_code?: string;
  [member: string]: Json;
}

/** SPEC §2.4. */
export interface Outcome {
  schema: "actions.outcome.v1";
  proposal_id: string;
  kind: string;
  terminal: boolean;
  effect_truth: string;
  incidents: Incident[];
  fingerprint: string | null;
  referent: string | null;
  receipt: Receipt | null;
  approval: { fingerprint: string; summary: string; external_spend: Spend | null; expires_at_ms: number } | null;
  at_ms: number;
  /** true when the receipt came from the dispatch of an earlier proposal of
   * the same intent (SPEC §2.4): it was done already, not by this proposal.
   * Absent otherwise. */
  recorded_earlier?: true;
}

/** Decodes an outcome body, checking the members a host relies on. */
export function decodeOutcome(data: Uint8Array): Outcome {
  const v: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new Error("outcome: not a JSON object");
  const o = v as Record<string, unknown>;
  if (o["schema"] !== "actions.outcome.v1") throw new Error(`outcome: schema ${JSON.stringify(o["schema"])}`);
  if (typeof o["kind"] !== "string" || typeof o["terminal"] !== "boolean" || typeof o["proposal_id"] !== "string") {
    throw new Error("outcome: kind, terminal or proposal_id missing");
  }
  if (!Array.isArray(o["incidents"])) throw new Error("outcome: incidents missing");
  if ("recorded_earlier" in o && o["recorded_earlier"] !== true) throw new Error("outcome: recorded_earlier is true or absent");
  return v as Outcome;
}

/** One line for people: kind, truth, incidents, receipt. */
export function describeOutcome(o: Outcome): string {
  const parts = [`${o.kind} (${o.effect_truth}${o.terminal ? ", terminal" : ""})`];
  if (o.incidents.length > 0) parts.push("incidents " + o.incidents.map((i) => `${i.phase}/${i.code}[${i.dispatch_boundary}]`).join(" "));
  if (o.referent !== null) parts.push(`referent ${o.referent}`);
  if (o.receipt !== null) {
    const r = o.receipt;
    parts.push(`receipt ${r.receipt_id} status=${r.status} provider_action_id=${r.provider_action_id || "-"}`);
  }
  if (o.recorded_earlier === true) parts.push("recorded earlier (an earlier proposal of the same intent did it)");
  return parts.join("; ");
}

export interface StoredOutcome {
  outcome: Outcome;
  sequence: string;
  time: string;
}

/**
 * The last outcome of host h's proposal, read from the outcome stream by a
 * direct get (SPEC §2.8: an empty request to
 * $JS.API.DIRECT.GET.ACTIONS_OUTCOMES.<outcome subject>; the only JetStream
 * request besides publishing that a host may make). null when the stream
 * holds none.
 */
export async function lastOutcome(
  nc: NatsConnection,
  subj: Subjects,
  h: string,
  proposalID: string,
  timeoutMs: number,
): Promise<StoredOutcome | null> {
  const msg = await nc.request(subj.directGetLast(subj.outcome(h, proposalID)), undefined, { timeout: timeoutMs });
  const hdr = msg.headers;
  if (hdr !== undefined && hdr.code !== 0 && msg.data.length === 0) {
    if (hdr.code === 404) return null;
    throw new Error(`direct get: status ${hdr.code} ${hdr.description}`);
  }
  return {
    outcome: decodeOutcome(msg.data),
    sequence: hdr?.get("Nats-Sequence") ?? "",
    time: hdr?.get("Nats-Time-Stamp") ?? "",
  };
}

/** Why a connection failed, with what to do about it. */
export function connectError(url: string, err: unknown, seedVariable: string, id: Identity | null): string {
  const text = errorText(err);
  if (err instanceof NotNATSError) return text;
  if (err instanceof errors.AuthorizationError || /authorization|authentication/i.test(text)) {
    return id === null
      ? `${url} refused an anonymous login (${text}): this server requires NATS authentication; pass --nkey FILE (or set ${seedVariable}), the nkey seed of a configured role`
      : `${url} refused the login of ${id.publicKey} (${text}): is it the public_key of a configured role of this processor? Pass that role's seed with --nkey FILE`;
  }
  return `cannot connect to ${url}: ${text} (is \`processor run --dev\` (or your processor) running and listening there?)`;
}

/** Reads an optional environment variable; "" counts as unset. */
export function env(name: string): string | undefined {
  const v = process.env[name];
  return v === undefined || v === "" ? undefined : v;
}

/** The message of an error, for one log line. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
