// The jucode dashboard: the daemon's WebSocket JSON-RPC API (docs/websocket.md), from
// the page the daemon serves. No build step, no dependencies. The token, when the
// server wants one, comes from the page's fragment (#token=...) and is sent as the
// subprotocol "bearer.<token>" (browsers cannot set an Authorization header).
"use strict";

const $ = (id) => document.getElementById(id);
const state = { ws: null, next: 1, pending: new Map(), current: null, cards: new Map(), messages: new Map(), approvals: new Map() };
const MODES = ["manual", "plan", "auto-edit", "auto", "full-access"];

function connect() {
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  const protocols = token ? ["jucode", "bearer." + token] : ["jucode"];
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/`, protocols);
  state.ws = ws;
  ws.onopen = async () => {
    setConnection("connected");
    const init = await call("initialize", {});
    setConnection(`${init.info.title} ${init.info.version}`);
    await refresh();
  };
  ws.onclose = (event) => setConnection(`disconnected (${event.code}${event.reason ? ": " + event.reason : ""})`);
  ws.onmessage = (event) => {
    let message;
    try { message = JSON.parse(event.data); } catch { return; }
    if (message.method && message.id !== undefined) return onRequest(message);
    if (message.method) return onNotification(message);
    const waiter = state.pending.get(message.id);
    if (!waiter) return;
    state.pending.delete(message.id);
    if (message.error) waiter.reject(new Error(message.error.message)); else waiter.resolve(message.result);
  };
}

function setConnection(text) { $("connection").textContent = text; document.body.dataset.connection = text; }

function call(method, params) {
  const id = state.next++;
  state.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
  return new Promise((resolve, reject) => state.pending.set(id, { resolve, reject }));
}

function respond(id, result) { state.ws.send(JSON.stringify({ jsonrpc: "2.0", id, result })); }

async function refresh() {
  const list = await call("session/list", {});
  const ul = $("sessions");
  ul.replaceChildren();
  for (const s of list.sessions) {
    const li = document.createElement("li");
    li.dataset.session = s.sessionId;
    li.className = s.sessionId === state.current ? "active" : "";
    li.innerHTML = `<strong></strong><small></small>`;
    li.querySelector("strong").textContent = s.broken ? `(broken) ${s.broken}` : s.title || "(new session)";
    li.querySelector("small").textContent = `${s.status} · ${s.state} · ${s.cwd || ""}`;
    li.onclick = () => attach(s.sessionId);
    ul.append(li);
  }
}

function reset(sessionId, title) {
  state.current = sessionId;
  state.cards.clear(); state.messages.clear(); state.approvals.clear();
  $("stream").replaceChildren();
  $("title").textContent = title || sessionId;
  $("title").dataset.session = sessionId;
  for (const el of [$("prompt"), $("send"), $("cancel")]) el.disabled = false;
}

async function attach(sessionId) {
  if (state.current === sessionId) return;
  reset(sessionId);
  const result = await call("session/attach", { sessionId });
  showMode(result.modes.currentModeId);
  await refresh();
}

async function newSession() {
  const result = await call("session/new", {});
  reset(result.sessionId);
  showMode(result.modes.currentModeId);
  await refresh();
}

function showMode(mode) {
  const select = $("mode");
  if (!select.options.length) for (const m of MODES) select.add(new Option(m, m));
  select.value = mode;
}

function add(className, text) {
  const div = document.createElement("div");
  div.className = "msg " + className;
  div.textContent = text;
  $("stream").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function chunk(kind, update) {
  const key = update.messageId;
  let div = state.messages.get(key);
  if (!div) { div = add(kind, ""); state.messages.set(key, div); }
  div.textContent += update.content.text;
}

function card(update) {
  let el = state.cards.get(update.toolCallId);
  if (!el) {
    el = document.createElement("div");
    el.className = "tool";
    el.dataset.call = update.toolCallId;
    el.innerHTML = `<header class="row"><span class="title"></span><span class="status"></span></header><pre></pre>`;
    state.cards.set(update.toolCallId, el);
    $("stream").append(el);
  }
  if (update.title) el.querySelector(".title").textContent = `${update.kind || "tool"} · ${update.title}`;
  if (update.status) { const s = el.querySelector(".status"); s.textContent = update.status; s.className = "status " + update.status; el.dataset.status = update.status; }
  for (const c of update.content || []) {
    if (c.type === "content") el.querySelector("pre").textContent = c.content.text;
    if (c.type === "diff") el.querySelector("pre").textContent = `${c.path}\n- ${c.oldText ?? "(new file)"}\n+ ${c.newText}`;
  }
  el.scrollIntoView({ block: "end" });
}

function onNotification(message) {
  if (message.method === "$/cancel_request") {
    for (const [call, a] of state.approvals) if (a.request === message.params.requestId) { a.el.remove(); state.approvals.delete(call); }
    return;
  }
  if (message.method !== "session/update" || message.params.sessionId !== state.current) return;
  const u = message.params.update;
  switch (u.sessionUpdate) {
    case "user_message": add("user", u.content.text); break;
    case "agent_message_chunk": chunk("agent", u); break;
    case "agent_thought_chunk": chunk("thought", u); break;
    case "tool_call_update": card(u); break;
    case "tool_call_content_chunk": { const el = state.cards.get(u.toolCallId); if (el) el.querySelector("pre").textContent += u.content.text; break; }
    case "state_update": {
      const s = $("state"); s.textContent = u.state + (u.stopReason ? ` (${u.stopReason})` : ""); s.dataset.state = u.state;
      // The list shows each session's state and title: a turn's end changes them.
      if (u.state === "idle") refresh();
      break;
    }
    case "usage_update": $("usage").textContent = `context ${u.used}/${u.size} · in ${u.inputTokens ?? "–"} out ${u.outputTokens ?? "–"} · $${u.cost.amount.toFixed(4)}`; break;
    case "current_mode_update": showMode(u.currentModeId); break;
    case "permission_resolved": { const a = state.approvals.get(u.toolCallId); if (a) { a.el.remove(); state.approvals.delete(u.toolCallId); } break; }
    case "notice": add("notice " + u.level, u.message); break;
    case "plan": add("agent", u.entries.map((e) => `[${e.status}] ${e.content}`).join("\n")); break;
  }
}

function onRequest(message) {
  if (message.method !== "session/request_permission") {
    state.ws.send(JSON.stringify({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: "Method not found" } }));
    return;
  }
  const p = message.params;
  const el = document.createElement("div");
  el.className = "approval";
  el.dataset.call = p.toolCall.toolCallId;
  const title = document.createElement("div");
  title.textContent = `Allow ${p.toolCall.kind || "this call"}: ${p.toolCall.title}?`;
  el.append(title);
  for (const option of p.options) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = option.name;
    b.dataset.option = option.optionId;
    b.onclick = () => { respond(message.id, { outcome: { outcome: "selected", optionId: option.optionId } }); el.remove(); state.approvals.delete(p.toolCall.toolCallId); };
    el.append(b);
  }
  state.approvals.set(p.toolCall.toolCallId, { el, request: message.id });
  $("stream").append(el);
  el.scrollIntoView({ block: "end" });
}

$("composer").onsubmit = async (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || !state.current) return;
  $("prompt").value = "";
  await call("session/prompt", { sessionId: state.current, prompt: [{ type: "text", text }] });
};
$("cancel").onclick = () => state.current && call("session/cancel", { sessionId: state.current });
$("new-session").onclick = () => newSession();
$("refresh").onclick = () => refresh();
$("mode").onchange = () => state.current && call("session/set_mode", { sessionId: state.current, modeId: $("mode").value });
connect();
