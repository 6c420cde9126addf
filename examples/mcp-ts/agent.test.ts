// An independent MCP client — the official TypeScript SDK — driving
// `processor mcp --dev` over stdio against a running `processor run --dev`,
// as a desktop agent would (ci.sh starts both; PROCESSOR names the binary,
// NATS_URL the processor's NATS server). It plays the user answering
// elicitations.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema, type ElicitResult } from "@modelcontextprotocol/sdk/types.js";

const processor = process.env["PROCESSOR"];
const natsURL = process.env["NATS_URL"];

type Answer = (message: string) => ElicitResult;

// Every client (and so every `processor mcp` it started) is closed at the
// end, also after a failed assertion, so that a failure cannot hang the run.
const clients: Client[] = [];
after(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
});

async function agent(answer: Answer | null): Promise<{ client: Client; asked: string[] }> {
  assert.ok(processor && natsURL, "set PROCESSOR and NATS_URL (ci.sh does)");
  const asked: string[] = [];
  const client = new Client(
    { name: "ts-agent", version: "1.0.0" },
    { capabilities: answer ? { elicitation: {} } : {} },
  );
  if (answer) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      const message = req.params.message;
      asked.push(message);
      return answer(message);
    });
  }
  const transport = new StdioClientTransport({ command: processor, args: ["mcp", "--dev", "--url", natsURL], stderr: "inherit" });
  await client.connect(transport);
  clients.push(client);
  return { client, asked };
}

interface Result {
  status: string;
  kind?: string;
  code?: string;
  receipt_id?: string;
  proposal_id?: string;
  summary?: string;
  record?: { referent: string; summary?: string };
  what_to_do: string;
  candidates?: { choice: string; summary: string }[];
  clarification?: string;
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<{ r: Result; isError: boolean }> {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 60_000 });
  return { r: res.structuredContent as unknown as Result, isError: res.isError === true };
}

const unique = `${Date.now()}`; // a fresh intent per run: the same dev data directory may be reused

test("lists the demo tools", { timeout: 90_000 }, async () => {
  const { client } = await agent(null);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), ["adjust_stock", "portcullis_status", "restart_service"]);
  await client.close();
});

test("an unambiguous action ends CONFIRMED; repeated, the same receipt", { timeout: 90_000 }, async () => {
  const { client } = await agent(null);
  const args = { target: "Lumber: Cedar-8ft-GradeB", payload: { quantity: Number(unique.slice(-3)) + 1 } };
  const first = await call(client, "adjust_stock", args);
  assert.equal(first.r.status, "confirmed", JSON.stringify(first.r));
  assert.ok(first.r.receipt_id);
  const again = await call(client, "adjust_stock", args);
  assert.equal(again.r.receipt_id, first.r.receipt_id);
  assert.notEqual(again.r.proposal_id, first.r.proposal_id);
  await client.close();
});

test("every tool declares an outputSchema, and the SDK checks each result against it", { timeout: 90_000 }, async () => {
  const { client } = await agent(null);
  const { tools } = await client.listTools();
  for (const t of tools) {
    assert.ok(t.outputSchema, `${t.name} declares no outputSchema`);
  }
  await client.close();
});

test("the user's words for a record ground to it (docs/agents.md's table)", { timeout: 90_000 }, async () => {
  const { client } = await agent(null);
  const { r } = await call(client, "adjust_stock", { target: "cedar grade A boards", payload: { quantity: 20 } });
  assert.equal(r.status, "confirmed", JSON.stringify(r));
  assert.equal(r.record?.referent, "sku-1001");
  await client.close();
});

test("an ambiguous target without elicitation lists the candidates and a token; only the user's choice with it confirms", { timeout: 90_000 }, async () => {
  const { client } = await agent(null);
  const args: Record<string, unknown> = { target: "lumber: pine-8ft", payload: { quantity: 5 } };
  const { r, isError } = await call(client, "adjust_stock", args);
  assert.equal(r.status, "needs_clarification", JSON.stringify(r));
  assert.equal(isError, false);
  assert.deepEqual(r.candidates?.map((c) => c.choice), ["sku-2001", "sku-2002"]);
  assert.ok(r.clarification);
  // A choice without the clarification's token is the model's, not the user's.
  const alone = await call(client, "adjust_stock", { ...args, choice: "sku-2001" });
  assert.equal(alone.r.status, "bad_arguments", JSON.stringify(alone.r));
  assert.equal(alone.isError, true);
  const picked = await call(client, "adjust_stock", { ...args, choice: "sku-2001", clarification: r.clarification });
  assert.equal(picked.r.status, "confirmed", JSON.stringify(picked.r));
  assert.equal(picked.r.record?.referent, "sku-2001");
  await client.close();
});

test("an approval asked by elicitation names the record picked: accepted ends CONFIRMED, declined ends DENIED", { timeout: 90_000 }, async () => {
  const yes = await agent((m) =>
    m.includes("Which one")
      ? { action: "accept", content: { target: "payments API — staging (svc:payments-staging)" } }
      : { action: "accept", content: { approve: true } },
  );
  const accepted = await call(yes.client, "restart_service", { target: "payments API", payload: { reason: `ts ${unique}` } });
  assert.equal(accepted.r.status, "confirmed", JSON.stringify(accepted.r));
  assert.equal(accepted.r.record?.referent, "svc:payments-staging");
  assert.equal(yes.asked.length, 2);
  assert.match(yes.asked[1] ?? "", /payments API — staging \(svc:payments-staging\)/);
  await yes.client.close();

  // An answer that is not exactly {"approve": true} approves nothing.
  const loose = await agent((m) => (m.includes("Which one") ? { action: "cancel" } : { action: "accept", content: {} }));
  const parked = await call(loose.client, "restart_service", { target: "search API", payload: { reason: `loose ${unique}` } });
  assert.equal(parked.r.status, "pending_approval", JSON.stringify(parked.r));
  await loose.client.close();

  const no = await agent(() => ({ action: "decline" }));
  const declined = await call(no.client, "restart_service", { target: "search API", payload: { reason: `ts ${unique}` } });
  assert.equal(declined.r.status, "denied");
  assert.equal(declined.r.code, "APPROVAL_DECLINED");
  assert.equal(declined.isError, true);
  await no.client.close();
});

test("without elicitation an approval stays pending; no tool approves it", { timeout: 90_000 }, async () => {
  const { client } = await agent(null);
  const { r } = await call(client, "restart_service", { target: "search API", payload: { reason: `pending ${unique}` } });
  assert.equal(r.status, "pending_approval", JSON.stringify(r));
  const status = await call(client, "portcullis_status", { proposal_id: r.proposal_id });
  assert.equal(status.r.status, "pending_approval");
  await client.close();
});

test("a model setting the tenant gets a tool error; nothing is sent", { timeout: 90_000 }, async () => {
  const { client } = await agent(null);
  const { r, isError } = await call(client, "adjust_stock", { target: "x", payload: { quantity: 1 }, tenant_ref: "tenant:other" });
  assert.equal(isError, true);
  assert.equal(r.status, "bad_arguments");
  assert.match(r.what_to_do, /tenant_ref: not an argument/);
  await client.close();
});
