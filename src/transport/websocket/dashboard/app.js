// The jucode dashboard: the daemon's WebSocket JSON-RPC API (docs/websocket.md), from
// the page the daemon serves. No build step, no dependencies. The token, when the
// server wants one, comes from the page's fragment (#token=...) and is sent as the
// subprotocol "bearer.<token>" (browsers cannot set an Authorization header).
"use strict";

const $ = (id) => document.getElementById(id);
// Every session this connection opened or attached to keeps its own view: the
// connection goes on receiving its updates, so switching back shows it as it is now.
const state = { ws: null, next: 1, pending: new Map(), current: null, views: new Map(), rows: [] };
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

// A session row reads: its title; when it last changed and its state, once; its folder.
function rowState(s) {
  if (s.broken) return "broken";
  if (!s.live) return "saved";
  const clients = s.clients === 1 ? "1 client" : `${s.clients} clients`;
  return `${s.state} · ${clients}`;
}

function when(ms) {
  const at = new Date(ms);
  if (Number.isNaN(at.getTime())) return "";
  const today = new Date().toDateString() === at.toDateString();
  return today ? at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : at.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" });
}

const titleOf = (s) => (s && s.title) || "(new session)";

async function refresh() {
  const list = await call("session/list", {});
  state.rows = list.sessions;
  const ul = $("sessions");
  ul.replaceChildren();
  for (const s of list.sessions) {
    const li = document.createElement("li");
    li.dataset.session = s.sessionId;
    li.dataset.state = rowState(s);
    li.className = s.sessionId === state.current ? "active" : "";
    li.innerHTML = `<strong></strong><small class="meta"></small><small class="cwd"></small>`;
    li.querySelector("strong").textContent = s.broken ? `(broken) ${s.broken}` : titleOf(s);
    li.querySelector(".meta").textContent = [when(s.updatedAt), rowState(s)].filter(Boolean).join(" · ");
    li.querySelector(".cwd").textContent = s.cwd || "";
    li.title = s.cwd || "";
    li.onclick = () => attach(s.sessionId);
    ul.append(li);
  }
  const current = list.sessions.find((s) => s.sessionId === state.current);
  if (current) $("title").textContent = titleOf(current);
}

// The view of session `id`, made on first use.
function view(id) {
  let v = state.views.get(id);
  if (!v) {
    const el = document.createElement("div");
    el.className = "session-view";
    el.dataset.session = id;
    el.hidden = id !== state.current;
    $("stream").append(el);
    v = { el, cards: new Map(), messages: new Map(), approvals: new Map(), state: null, stopReason: null, usage: "", mode: null };
    state.views.set(id, v);
  }
  return v;
}

function show(id, title) {
  state.current = id;
  for (const [sid, v] of state.views) v.el.hidden = sid !== id;
  const v = view(id);
  $("title").textContent = title || titleOf(state.rows.find((s) => s.sessionId === id));
  $("title").dataset.session = id;
  showState(v);
  $("usage").textContent = v.usage;
  if (v.mode) showMode(v.mode);
  for (const li of $("sessions").children) li.className = li.dataset.session === id ? "active" : "";
  for (const el of [$("prompt"), $("send"), $("cancel")]) el.disabled = false;
}

async function attach(sessionId) {
  if (state.current === sessionId) return;
  const known = state.views.has(sessionId);
  show(sessionId);
  if (known) return;
  const result = await call("session/attach", { sessionId });
  opened(sessionId, result);
}

function opened(sessionId, result) {
  const v = view(sessionId);
  v.mode = result.modes.currentModeId;
  if (!v.state) v.state = result.state;
  if (state.current === sessionId) { showMode(v.mode); showState(v); }
  return refresh();
}

// "New" asks where: a folder typed in, or one of the folders recent sessions ran in.
function recentFolders() {
  const seen = new Set();
  return [...state.rows].sort((a, b) => b.updatedAt - a.updatedAt).map((s) => s.cwd).filter((cwd) => cwd && !seen.has(cwd) && seen.add(cwd)).slice(0, 8);
}

function askFolder() {
  const folders = recentFolders();
  const current = state.rows.find((s) => s.sessionId === state.current);
  $("new-cwd").value = (current && current.cwd) || folders[0] || "";
  $("new-error").textContent = "";
  const list = $("recent-dirs");
  list.replaceChildren();
  for (const cwd of folders) {
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.cwd = cwd;
    b.textContent = cwd;
    b.onclick = () => newSession(cwd);
    list.append(b);
  }
  $("new-dialog").showModal();
  $("new-cwd").focus();
}

async function newSession(cwd) {
  if (!cwd.startsWith("/")) { $("new-error").textContent = "give an absolute folder, such as /home/me/project"; return; }
  let result;
  try { result = await call("session/new", { cwd }); } catch (err) { $("new-error").textContent = err.message; return; }
  $("new-dialog").close();
  show(result.sessionId, "(new session)");
  await opened(result.sessionId, result);
}

function showState(v) {
  const s = $("state");
  s.textContent = v.state ? v.state + (v.stopReason ? ` (${v.stopReason})` : "") : "";
  if (v.state) s.dataset.state = v.state; else delete s.dataset.state;
}

function showMode(mode) {
  const select = $("mode");
  if (!select.options.length) for (const m of MODES) select.add(new Option(m, m));
  select.value = mode;
}

function add(v, className, text) {
  const div = document.createElement("div");
  div.className = "msg " + className;
  div.textContent = text;
  v.el.append(div);
  if (!v.el.hidden) div.scrollIntoView({ block: "end" });
  return div;
}

function chunk(v, kind, update) {
  const key = update.messageId;
  let div = v.messages.get(key);
  if (!div) { div = add(v, kind, ""); v.messages.set(key, div); }
  div.textContent += update.content.text;
}

function card(v, update) {
  let el = v.cards.get(update.toolCallId);
  if (!el) {
    el = document.createElement("div");
    el.className = "tool";
    el.dataset.call = update.toolCallId;
    el.innerHTML = `<header class="row"><span class="title"></span><span class="status"></span></header><pre></pre>`;
    v.cards.set(update.toolCallId, el);
    v.el.append(el);
  }
  if (update.title) el.querySelector(".title").textContent = `${update.kind || "tool"} · ${update.title}`;
  if (update.status) { const s = el.querySelector(".status"); s.textContent = update.status; s.className = "status " + update.status; el.dataset.status = update.status; }
  for (const c of update.content || []) {
    if (c.type === "content") el.querySelector("pre").textContent = c.content.text;
    if (c.type === "diff") el.querySelector("pre").textContent = `${c.path}\n- ${c.oldText ?? "(new file)"}\n+ ${c.newText}`;
  }
  if (!v.el.hidden) el.scrollIntoView({ block: "end" });
}

function onNotification(message) {
  if (message.method === "$/cancel_request") {
    for (const v of state.views.values()) {
      for (const [call, a] of v.approvals) if (a.request === message.params.requestId) { a.el.remove(); v.approvals.delete(call); }
    }
    return;
  }
  if (message.method !== "session/update") return;
  const id = message.params.sessionId;
  const v = view(id);
  const current = id === state.current;
  const u = message.params.update;
  switch (u.sessionUpdate) {
    case "user_message": add(v, "user", u.content.text); break;
    case "agent_message_chunk": chunk(v, "agent", u); break;
    case "agent_thought_chunk": chunk(v, "thought", u); break;
    case "tool_call_update": card(v, u); break;
    case "tool_call_content_chunk": { const el = v.cards.get(u.toolCallId); if (el) el.querySelector("pre").textContent += u.content.text; break; }
    case "state_update": {
      v.state = u.state; v.stopReason = u.stopReason;
      if (current) showState(v);
      // The list shows each session's state and title: a turn's end changes them.
      if (u.state === "idle") refresh();
      break;
    }
    case "usage_update":
      v.usage = `context ${u.used}/${u.size} · in ${u.inputTokens ?? "–"} out ${u.outputTokens ?? "–"} · $${u.cost.amount.toFixed(4)}`;
      if (current) $("usage").textContent = v.usage;
      break;
    case "current_mode_update": v.mode = u.currentModeId; if (current) showMode(v.mode); break;
    case "permission_resolved": { const a = v.approvals.get(u.toolCallId); if (a) { a.el.remove(); v.approvals.delete(u.toolCallId); } break; }
    case "notice": add(v, "notice " + u.level, u.message); break;
    case "plan": add(v, "agent", u.entries.map((e) => `[${e.status}] ${e.content}`).join("\n")); break;
  }
}

function onRequest(message) {
  if (message.method !== "session/request_permission") {
    state.ws.send(JSON.stringify({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: "Method not found" } }));
    return;
  }
  const p = message.params;
  const v = view(p.sessionId);
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
    b.onclick = () => { respond(message.id, { outcome: { outcome: "selected", optionId: option.optionId } }); el.remove(); v.approvals.delete(p.toolCall.toolCallId); };
    el.append(b);
  }
  v.approvals.set(p.toolCall.toolCallId, { el, request: message.id });
  v.el.append(el);
  if (!v.el.hidden) el.scrollIntoView({ block: "end" });
}

$("composer").onsubmit = async (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || !state.current) return;
  $("prompt").value = "";
  await call("session/prompt", { sessionId: state.current, prompt: [{ type: "text", text }] });
};
$("cancel").onclick = () => state.current && call("session/cancel", { sessionId: state.current });
$("new-session").onclick = () => askFolder();
$("new-form").onsubmit = (event) => { event.preventDefault(); newSession($("new-cwd").value.trim()); };
$("new-cancel").onclick = () => $("new-dialog").close();
$("refresh").onclick = () => refresh();
$("mode").onchange = () => state.current && call("session/set_mode", { sessionId: state.current, modeId: $("mode").value });
connect();
