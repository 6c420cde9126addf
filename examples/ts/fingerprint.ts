// Fingerprint v2 (PROTOCOL.md §2.3), written from the
// documentation alone: the twelve-member object, JCS (RFC 8785) via the npm
// package `canonicalize`, SHA-256.
//
// A host computes it to check that the NEEDS_APPROVAL it is about to
// approve is for exactly the intent and target it proposed; the grant it
// sends names it in `intent_fingerprint`.
import canonicalize from "canonicalize";
import { createHash } from "node:crypto";

/** A JSON value as JSON.parse returns it. */
export type Json = null | boolean | number | string | Json[] | { [member: string]: Json };

export interface Spend {
  currency: string;
  amount_minor: number;
}

/** The value-free disclosure plan of an intent (SPEC §2.6). */
export interface DisclosurePlan {
  field_classes: string[];
  recipient: string;
  purpose: string;
  source: string;
  require_reauthentication?: boolean;
}

export interface Candidate {
  referent: string;
  source: string;
  attributes: { [member: string]: Json };
  evidence_refs: string[];
}

/** The parts of a proposal (SPEC §2.1) that this example reads. */
export interface Proposal {
  schema: string;
  proposal_id: string;
  context: {
    tenant: { tenant_ref: string; security_domain_ref: string };
    actor: { actor_ref: string; assurance: string };
    authorization: { scope_ref: string; policy_revision: string };
    provider: { account_ref: string };
    delivery: { delivery_id: string; source: string };
    host_invocation: { invocation_id: string };
  };
  intent: {
    provider: string;
    capability: string;
    operation: string;
    environment: string;
    payload?: Json;
    external_spend: Spend | null;
    protected_disclosure: DisclosurePlan | null;
    display: { summary: string };
  };
  grounding: {
    subject: Json;
    scope: string;
    observation_ref: string;
    candidates?: Candidate[];
    candidate_source?: string;
  };
  grant: Json;
  requester?: { [member: string]: string };
}

export const FINGERPRINT_SCHEMA = "actions.fingerprint.v2";

/** ASCII white space as Portcullis trims it: space, tab, CR, LF, VT, FF. */
const ASCII_SPACE = new Set([" ", "\t", "\r", "\n", "\v", "\f"]);

/** Trims ASCII white space only (not NBSP or other Unicode spaces). */
export function trimASCII(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && ASCII_SPACE.has(s.charAt(start))) start++;
  while (end > start && ASCII_SPACE.has(s.charAt(end - 1))) end--;
  return s.slice(start, end);
}

/** Lowercases A–Z only. (String.prototype.toLowerCase would map "İ" too.) */
export function lowerASCII(s: string): string {
  return s.replace(/[A-Z]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 32));
}

/** How provider, capability, operation and environment are normalized. */
export function normalizeName(s: string): string {
  return lowerASCII(trimASCII(s));
}

/** Default string sort = UTF-16 code units; the closed class names are ASCII. */
function normalizePlan(d: DisclosurePlan): { [member: string]: Json } {
  return {
    field_classes: [...d.field_classes].sort(),
    recipient: trimASCII(d.recipient),
    purpose: trimASCII(d.purpose),
    source: d.source,
    require_reauthentication: d.require_reauthentication === true,
  };
}

/** The object that is hashed: all twelve members, always present. */
export function fingerprintObject(p: Proposal, referent: string): { [member: string]: Json } {
  const i = p.intent;
  return {
    schema: FINGERPRINT_SCHEMA,
    tenant_ref: p.context.tenant.tenant_ref,
    security_domain_ref: p.context.tenant.security_domain_ref,
    actor_ref: p.context.actor.actor_ref,
    provider: normalizeName(i.provider),
    capability: normalizeName(i.capability),
    operation: normalizeName(i.operation),
    environment: normalizeName(i.environment),
    referent, // exactly as sent: no trimming, case change or Unicode normalization
    payload: i.payload === undefined ? null : i.payload,
    protected_disclosure: i.protected_disclosure == null ? null : normalizePlan(i.protected_disclosure),
    external_spend:
      i.external_spend == null
        ? null
        : { currency: i.external_spend.currency, amount_minor: i.external_spend.amount_minor },
  };
}

/** RFC 8785 canonical JSON. Throws for what JCS cannot represent (NaN, Infinity). */
export function jcs(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new Error("JCS: value has no JSON form");
  return text;
}

/** "sha256:" + lowercase hex SHA-256 of the UTF-8 bytes of text. */
export function sha256(text: string): string {
  return "sha256:" + createHash("sha256").update(text, "utf8").digest("hex");
}

export interface Fingerprint {
  /** The JCS text that was hashed. */
  canonical: string;
  /** "sha256:<64 hex>": what approval.fingerprint and a grant's intent_fingerprint carry. */
  fingerprint: string;
  /** The 64 hex digits alone: what providers receive as idempotency_key. */
  idempotency_key: string;
}

/**
 * The fingerprint of a proposal grounded to referent. The proposal must be
 * parsed with JSON.parse (numbers as doubles); Portcullis refuses payload
 * numbers a double cannot hold exactly, so every admitted payload has one
 * canonical form.
 */
export function fingerprint(p: Proposal, referent: string): Fingerprint {
  const canonical = jcs(fingerprintObject(p, referent));
  const fp = sha256(canonical);
  return { canonical, fingerprint: fp, idempotency_key: fp.slice("sha256:".length) };
}

/**
 * Grounding's comparison form (PROTOCOL.md §3, Grounding rule 5): NFKC, trim
 * Unicode white space (the White_Space property), collapse white-space runs
 * to one space, full Unicode lowercase, NFKC again.
 */
export function normalizeResource(s: string): string {
  const spaced = s
    .normalize("NFKC")
    .split(/\p{White_Space}+/u)
    .filter((w) => w !== "")
    .join(" ");
  return spaced.toLowerCase().normalize("NFKC");
}

/**
 * The referent grounding will pick from inline candidates, or null where it
 * would not ground (no candidates, a missing discriminator, zero or several
 * matches). A host uses it to know which target it is approving; it does not
 * replace the processor's rules (scope, limits), which the outcome reports.
 */
export function groundLocally(p: Proposal): string | null {
  const subject = p.grounding.subject;
  const candidates = p.grounding.candidates;
  if (typeof subject !== "string" || candidates === undefined) return null;
  const want = normalizeResource(subject);
  if (want === "") return null;
  const matches: string[] = [];
  for (const c of candidates) {
    const resource = c.attributes["resource"];
    if (typeof resource !== "string" || resource === "") return null;
    if (normalizeResource(resource) === want) matches.push(c.referent);
  }
  return matches.length === 1 ? (matches[0] ?? null) : null;
}
