// Regenerates the fingerprint test vectors with an implementation that
// shares no code with Portcullis: Node's JSON.parse and the npm package
// `canonicalize` (by an RFC 8785 author), plus SPEC §2.3 written out here.
//
//   cd fingerprint/testdata/gen && npm ci && node generate.mjs
//
// Go's tests (fingerprint/vectors_test.go, cmd/processor) read the two JSON
// files this writes; CI needs neither Node nor this script.
import canonicalize from 'canonicalize';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';

const sha256 = (s) => 'sha256:' + createHash('sha256').update(Buffer.from(s, 'utf8')).digest('hex');

// JCS vectors: JSON texts (as a Go or Python host would receive them).
// "exact": false marks numbers whose text denotes a value no IEEE-754 double
// holds: JCS still canonicalizes them (that is the RFC), but Portcullis's
// admission refuses such payloads, since two different amounts would share
// one fingerprint.
const jcs = [
  { name: 'rfc8785-3.2.2-sample', input: String.raw`{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`, exact: false },
  { name: 'rfc8785-3.2.3-sorting', input: String.raw`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}` },
  { name: 'numbers-forms', input: '[1.0, 1e21, 1e20, -0, -0.0, 0.1, 1e-7, 1e-6, 0.000001, 1E+2, 100e-2, -1.5, 2.50, 5e-324, 1.7976931348623157e308]' },
  { name: 'numbers-integers-in-range', input: '[0, -1, 9007199254740991, -9007199254740991, 9007199254740992, 18014398509481984, 1e15, 123456789]' },
  { name: 'numbers-integer-beyond-2^53', input: '[9007199254740993]', exact: false },
  { name: 'numbers-long-integer', input: '[12345678901234567890]', exact: false },
  { name: 'numbers-too-precise-fraction', input: '[1.0000000000000001]', exact: false },
  { name: 'numbers-0.1-long-form', input: '[0.1000000000000000055511151231257827]', exact: false },
  { name: 'numbers-exponent-large', input: '[1.5e300, -2e-300, 4.35e-12, 1e-7, 123e18, 1e21]' },
  { name: 'numbers-overflow', input: '[1e400]', exact: false, jcsFails: true },
  { name: 'numbers-underflow', input: '[1e-400]', exact: false },
  { name: 'keys-utf16-order', input: String.raw`{"\u00e9":1,"e":2,"E":3,"\u20ac":4,"\ud83d\ude00":5,"\ufb33":6,"\uffff":7,"":8,"a\u0000":9,"aa":10,"a":11,"\u0301e":12}` },
  { name: 'keys-surrogates-vs-bmp', input: String.raw`{"\ud800\udc00":"U+10000","\ue000":"U+E000","\ud7ff":"U+D7FF","\uff61":"U+FF61"}` },
  { name: 'string-escapes', input: String.raw`["\u0000\u0001\u0007\b\t\n\u000b\f\r\u000e\u001f", "\u007f\u0080\u00a0", "\u2028\u2029", "\/<>&'", "\"\\", "\ud83d\ude00", "caf\u00e9", "e\u0301", "\ufeff"]` },
  { name: 'literals-and-empty', input: '{"t":true,"f":false,"n":null,"o":{},"a":[],"s":""}' },
  { name: 'nested', input: String.raw`{"z":[{"b":2,"a":1,"c":{"y":[3,{"\u00e9":"x","e":"y"}],"x":null}}],"a":{"k":[[],[[]],{}],"j":"\u20ac"},"m":[1.50,{"n":-0}]}` },
  { name: 'whitespace-between-tokens', input: ' \n { "b" : [ 1 , 2 ] ,\t"a" : "x" } \r\n' },
  { name: 'bare-string', input: String.raw`"payments-api (production)"` },
  { name: 'bare-number', input: '4.50' },
];

const jcsOut = jcs.map(({ name, input, exact = true, jcsFails = false }) => {
  let canonical = null;
  try {
    canonical = canonicalize(JSON.parse(input));
  } catch (e) {
    if (!jcsFails) throw e;
  }
  if (jcsFails && canonical !== null) throw new Error(`${name}: expected canonicalize to fail`);
  return { name, input, exact, canonical, sha256: canonical === null ? null : sha256(canonical) };
});

// SPEC §2.3 (fingerprint v2), written independently of the Go code.
const name = (s) => s.trim().toLowerCase();
function fingerprintObject(p, referent) {
  const i = p.intent;
  let plan = null;
  if (i.protected_disclosure != null) {
    const d = i.protected_disclosure;
    plan = {
      field_classes: [...d.field_classes].sort(),
      recipient: d.recipient.trim(),
      purpose: d.purpose.trim(),
      source: d.source,
      require_reauthentication: d.require_reauthentication === true,
    };
  }
  const spend = i.external_spend == null ? null : { currency: i.external_spend.currency, amount_minor: i.external_spend.amount_minor };
  return {
    schema: 'actions.fingerprint.v2',
    tenant_ref: p.context.tenant.tenant_ref,
    security_domain_ref: p.context.tenant.security_domain_ref,
    actor_ref: p.context.actor.actor_ref,
    provider: name(i.provider),
    capability: name(i.capability),
    operation: name(i.operation),
    environment: name(i.environment),
    referent,
    payload: i.payload === undefined ? null : i.payload,
    protected_disclosure: plan,
    external_spend: spend,
  };
}

// proposals.json: each entry has either "proposal" (a JSON value) or
// "proposal_text" (the exact wire bytes, for number forms such as 1.0 or
// -0.0 that JSON.stringify would rewrite); the text is embedded verbatim in
// fingerprints.json, so that the Go tests decode those very bytes. "same_as"
// names an earlier vector that must have the same fingerprint; every other
// pair must differ.
const entries = JSON.parse(readFileSync(new URL('./proposals.json', import.meta.url), 'utf8'));
const raw = new Map(); // placeholder -> verbatim proposal text
const byName = new Map();
const fpOut = entries.map(({ name: n, description, referent, proposal, proposal_text, same_as = null }) => {
  if ((proposal === undefined) === (proposal_text === undefined)) throw new Error(`${n}: give exactly one of proposal, proposal_text`);
  if (byName.has(n)) throw new Error(`${n}: duplicate name`);
  let wire = proposal;
  if (proposal_text !== undefined) {
    wire = `\u0000proposal_text:${n}\u0000`;
    raw.set(JSON.stringify(wire), proposal_text);
    proposal = JSON.parse(proposal_text);
  }
  const object = fingerprintObject(proposal, referent);
  if (Object.keys(object).length !== 12) throw new Error(`${n}: fingerprint object has ${Object.keys(object).length} members`);
  const canonical = canonicalize(object);
  const fingerprint = sha256(canonical);
  const v = { name: n, description, same_as, referent, proposal: wire, canonical, fingerprint, idempotency_key: fingerprint.slice('sha256:'.length) };
  byName.set(n, v);
  return v;
});

// Equal fingerprints exactly where same_as says so.
const root = (v) => (v.same_as === null ? v.name : root(byName.get(v.same_as) ?? (() => { throw new Error(`${v.name}: same_as ${v.same_as} names no vector`); })()));
for (const a of fpOut) {
  for (const b of fpOut) {
    if (a === b) continue;
    const same = root(a) === root(b);
    if (same !== (a.fingerprint === b.fingerprint)) throw new Error(`${a.name} vs ${b.name}: fingerprints ${same ? 'differ' : 'coincide'}`);
  }
}

let fpText = JSON.stringify(fpOut, null, 2) + '\n';
for (const [placeholder, text] of raw) {
  if (fpText.split(placeholder).length !== 2) throw new Error('placeholder not unique');
  fpText = fpText.replace(placeholder, () => text);
}
// The embedded texts must leave the file valid JSON with the same proposals.
const back = JSON.parse(fpText);
back.forEach((v, k) => {
  const want = entries[k].proposal ?? JSON.parse(entries[k].proposal_text);
  if (JSON.stringify(v.proposal) !== JSON.stringify(want)) throw new Error(`${v.name}: proposal not embedded intact`);
});

writeFileSync(new URL('../jcs.json', import.meta.url), JSON.stringify(jcsOut, null, 2) + '\n');
writeFileSync(new URL('../fingerprints.json', import.meta.url), fpText);
console.log(`wrote ${jcsOut.length} JCS vectors and ${fpOut.length} fingerprints`);
