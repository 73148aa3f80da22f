// An independent ACP client: the official TypeScript SDK (@agentclientprotocol/sdk)
// driving `jucode acp` through the scenario `tests/acp/sdk.rs` scripts the model for.
// Every step asserts; the first failure exits non-zero with its message. Run by the
// Rust test, never by hand against a real model.
//
// Env: JUCODE_BIN, ACP_SDK (the package directory), WORKDIR (the sessions' cwd), plus
// the environment jucode itself runs with (JUCODE_HOME, HOME, PATH).

import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import assert from "node:assert/strict";

const acp = await import(pathToFileURL(join(process.env.ACP_SDK, "dist/v1/stable/acp.js")).href);
const workdir = process.env.WORKDIR;
const child = spawn(process.env.JUCODE_BIN, ["acp", ...(process.argv.slice(2))], {
  stdio: ["pipe", "pipe", "inherit"],
  env: process.env,
});
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const updates = [];
const waiters = [];
const permissions = [];
const written = new Map();
const terminals = new Map();
let nextTerminal = 0;
// The answer each permission request gets, in order.
const answers = ["allow_once", "reject_once", "allow_once"];

function step(name) {
  console.log(`step: ${name}`);
}

const app = acp
  .client({ name: "jucode-sdk-test" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params);
    for (const waiter of [...waiters]) {
      if (waiter.pred()) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.resolve();
      }
    }
  })
  .onRequest("session/request_permission", async ({ params }) => {
    permissions.push(params);
    const optionId = answers.shift() ?? "reject_once";
    assert.ok(params.options.some((o) => o.optionId === optionId), JSON.stringify(params.options));
    return { outcome: { outcome: "selected", optionId } };
  })
  .onRequest("fs/read_text_file", async ({ params }) => {
    return { content: written.get(params.path) ?? "buffer text\n" };
  })
  .onRequest("fs/write_text_file", async ({ params }) => {
    written.set(params.path, params.content);
    return {};
  })
  .onRequest("terminal/create", async ({ params }) => {
    const id = `t${nextTerminal++}`;
    const proc = spawn(params.command, params.args ?? [], { cwd: params.cwd ?? workdir });
    const term = { output: "", exit: null };
    term.done = new Promise((resolve) => {
      proc.on("exit", (code, signal) => {
        term.exit = { exitCode: code, signal };
        resolve();
      });
    });
    proc.stdout.on("data", (d) => (term.output += d));
    proc.stderr.on("data", (d) => (term.output += d));
    term.proc = proc;
    terminals.set(id, term);
    return { terminalId: id };
  })
  .onRequest("terminal/wait_for_exit", async ({ params }) => {
    const term = terminals.get(params.terminalId);
    await term.done;
    return term.exit;
  })
  .onRequest("terminal/output", async ({ params }) => {
    const term = terminals.get(params.terminalId);
    return { output: term.output, truncated: false, exitStatus: term.exit };
  })
  .onRequest("terminal/kill", async ({ params }) => {
    terminals.get(params.terminalId)?.proc.kill();
    return {};
  })
  .onRequest("terminal/release", async ({ params }) => {
    terminals.delete(params.terminalId);
    return {};
  });

function updatesOf(sessionId, kind) {
  return updates
    .filter((u) => u.sessionId === sessionId && u.update.sessionUpdate === kind)
    .map((u) => u.update);
}

function prompt(ctx, sessionId, text) {
  return ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text }] });
}

// Resolves once an update makes `pred` true; fails after 20 s (a bound, not a pause).
function waitFor(pred, what) {
  if (pred()) return Promise.resolve();
  return new Promise((resolve, reject) => {
    waiters.push({ pred, resolve });
    setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 20000).unref();
  });
}

await app.connectWith(stream, async (ctx) => {
  step("initialize");
  const init = await ctx.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    clientInfo: { name: "jucode-sdk-test", version: "1" },
  });
  assert.equal(init.protocolVersion, 1);
  assert.equal(init.agentCapabilities.loadSession, true);
  assert.equal(init.agentCapabilities.promptCapabilities.image, true);

  step("session/new");
  const created = await ctx.request("session/new", { cwd: workdir, mcpServers: [] });
  const sid = created.sessionId;
  assert.ok(sid);
  assert.equal(created.modes.currentModeId, "manual");
  assert.equal(created.configOptions[0].category, "model");

  step("prompt with streaming");
  let done = await prompt(ctx, sid, "hello");
  assert.equal(done.stopReason, "end_turn");
  const chunks = updatesOf(sid, "agent_message_chunk");
  assert.equal(chunks.map((c) => c.content.text).join(""), "Hello there");
  assert.equal(new Set(chunks.map((c) => c.messageId)).size, 1);
  assert.ok(updatesOf(sid, "usage_update").length >= 1);

  step("a tool call to completed, permission allowed, the write through the editor");
  done = await prompt(ctx, sid, "write it");
  assert.equal(done.stopReason, "end_turn");
  assert.equal(permissions.length, 1);
  assert.equal(permissions[0].toolCall.kind, "edit");
  assert.equal(written.get(join(workdir, "new.txt")), "made by the model\n");
  let card = updatesOf(sid, "tool_call_update").filter((u) => u.toolCallId === "call_w1").pop();
  assert.equal(card.status, "completed");

  step("permission rejected");
  done = await prompt(ctx, sid, "write again");
  assert.equal(done.stopReason, "end_turn");
  assert.equal(permissions.length, 2);
  card = updatesOf(sid, "tool_call_update").filter((u) => u.toolCallId === "call_w2").pop();
  assert.equal(card.status, "failed");
  assert.ok(!written.has(join(workdir, "denied.txt")));

  step("a command in the editor's terminal");
  done = await prompt(ctx, sid, "run it");
  assert.equal(done.stopReason, "end_turn");
  card = updatesOf(sid, "tool_call_update").filter((u) => u.toolCallId === "call_b1").pop();
  assert.equal(card.status, "completed");
  assert.equal(card.content[0].type, "terminal");

  step("set_mode");
  assert.deepEqual(await ctx.request("session/set_mode", { sessionId: sid, modeId: "auto-edit" }), {});
  await waitFor(() => updatesOf(sid, "current_mode_update").some((u) => u.currentModeId === "auto-edit"), "current_mode_update");

  step("set_config_option");
  let set = await ctx.request("session/set_config_option", { sessionId: sid, configId: "model", value: "replay/demo" });
  assert.equal(set.configOptions[0].currentValue, "replay/demo");
  set = await ctx.request("session/set_config_option", { sessionId: sid, configId: "model", value: "mock/mock-1" });
  assert.equal(set.configOptions[0].currentValue, "mock/mock-1");

  step("cancel");
  const pending = prompt(ctx, sid, "take your time");
  await waitFor(() => updatesOf(sid, "agent_message_chunk").some((c) => c.content.text === "slow"), "the slow reply");
  await ctx.notify("session/cancel", { sessionId: sid });
  done = await pending;
  assert.equal(done.stopReason, "cancelled");

  step("two sessions at once");
  const other = (await ctx.request("session/new", { cwd: workdir, mcpServers: [] })).sessionId;
  const [a, b] = await Promise.all([prompt(ctx, sid, "one"), prompt(ctx, other, "two")]);
  assert.equal(a.stopReason, "end_turn");
  assert.equal(b.stopReason, "end_turn");
  assert.equal(updatesOf(other, "agent_message_chunk").map((c) => c.content.text).join(""), "same");

  step("list");
  const list = await ctx.request("session/list", {});
  const ids = list.sessions.map((s) => s.sessionId);
  assert.ok(ids.includes(sid) && ids.includes(other), JSON.stringify(list));

  step("close");
  assert.deepEqual(await ctx.request("session/close", { sessionId: other }), {});
  await assert.rejects(prompt(ctx, other, "gone"));

  step("load with replay");
  const before = updates.length;
  const loaded = await ctx.request("session/load", { sessionId: sid, cwd: workdir, mcpServers: [] });
  assert.equal(loaded.modes.currentModeId, "auto-edit");
  const replay = updates.slice(before).filter((u) => u.sessionId === sid).map((u) => u.update);
  const users = replay.filter((u) => u.sessionUpdate === "user_message_chunk").map((u) => u.content.text);
  assert.ok(users.includes("hello") && users.includes("write it"), JSON.stringify(users));
  assert.ok(replay.some((u) => u.sessionUpdate === "tool_call" && u.toolCallId === "call_w1"));
  done = await prompt(ctx, sid, "after load");
  assert.equal(done.stopReason, "end_turn");
  console.log("PASS");
});
child.stdin.end();
await new Promise((resolve) => child.on("exit", resolve));
