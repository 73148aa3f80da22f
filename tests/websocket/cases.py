"""Cases for the daemon's WebSocket server, with the real Python `websockets` client.

Run by `tests/websocket/main.rs`, which starts the daemon and scripts the model; the
case to run is the first argument. Every wait is bounded (WAIT seconds); a failed check
raises, and the exit code says so. Every message a client reads is validated against
the committed `docs/websocket.schema.json` (`$defs.ServerMessage`), and every result of
a method it called against that method's result schema. Env: WS_URL, WORKDIR, WS_SCHEMA,
WS_TOKEN (optional).
"""

import asyncio
import json
import os
import sys

import jsonschema
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

URL = os.environ["WS_URL"]
WORKDIR = os.environ.get("WORKDIR", "/")
TOKEN = os.environ.get("WS_TOKEN")
WAIT = 20

with open(os.environ["WS_SCHEMA"]) as f:
    SCHEMA = json.load(f)


def validator(ref):
    schema = {"$schema": SCHEMA["$schema"], "$defs": SCHEMA["$defs"], **ref}
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


SERVER_MESSAGE = validator({"$ref": "#/$defs/ServerMessage"})
RESULTS = {method: validator(spec["result"]) for method, spec in SCHEMA["methods"].items()}


def check(validator, message, what):
    errors = sorted(validator.iter_errors(message), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(f"{what} does not match docs/websocket.schema.json: {errors[0].message} at {list(errors[0].path)}\n{json.dumps(message)[:600]}")


class Client:
    """One dashboard: requests with ids, everything else kept in order."""

    def __init__(self, ws):
        self.ws = ws
        self.next = 1
        self.kept = []
        self.seen = []
        # Request id -> method, to check each answer's result.
        self.asked = {}

    async def read(self):
        try:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), WAIT))
        except asyncio.TimeoutError:
            last = self.seen[-1] if self.seen else None
            raise AssertionError(f"nothing for {WAIT}s after {len(self.seen)} messages; the last: {json.dumps(last)[:300]}")
        assert message["jsonrpc"] == "2.0", message
        check(SERVER_MESSAGE, message, "a message")
        method = self.asked.pop(message.get("id"), None) if "method" not in message else None
        if method in RESULTS and "result" in message:
            check(RESULTS[method], message["result"], f"the result of {method}")
        self.seen.append(message)
        return message

    async def until(self, pred):
        for i, message in enumerate(self.kept):
            if pred(message):
                return self.kept.pop(i)
        while True:
            message = await self.read()
            if pred(message):
                return message
            self.kept.append(message)

    async def call(self, method, params=None):
        rid = self.next
        self.next += 1
        self.asked[rid] = method
        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}))
        response = await self.until(lambda m: m.get("id") == rid and "method" not in m)
        return response

    async def result(self, method, params=None):
        response = await self.call(method, params)
        assert "result" in response, response
        return response["result"]

    async def update(self, pred):
        message = await self.until(lambda m: m.get("method") == "session/update" and pred(m["params"]["update"]))
        return message["params"]["update"]

    async def idle(self):
        return await self.update(lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "idle")


def headers():
    return {"Authorization": f"Bearer {TOKEN}"} if TOKEN else None


async def open_client(**kwargs):
    ws = await connect(URL, additional_headers=headers(), **kwargs)
    client = Client(ws)
    init = await client.result("initialize", {})
    assert init["info"]["name"] == "jucode", init
    return client


def prompt(sid, text):
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


async def every_method():
    c = await open_client()
    init = await c.result("initialize", {})
    assert init["protocolVersion"] == 2 and init["authMethods"] == [], init
    assert set(init["capabilities"]["session"]) >= {"list", "attach", "cancel", "close", "setMode"}
    created = await c.result("session/new", {"cwd": WORKDIR})
    sid = created["sessionId"]
    listed = await c.result("session/list", {})
    row = next(s for s in listed["sessions"] if s["sessionId"] == sid)
    assert row["cwd"] == WORKDIR and row["status"] == "active", row
    assert await c.result("session/prompt", prompt(sid, "hello")) == {}
    user = await c.update(lambda u: u["sessionUpdate"] == "user_message")
    assert user["content"]["text"] == "hello"
    await c.update(lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "running")
    idle = await c.idle()
    assert idle["stopReason"] == "end_turn", idle
    updates = [m["params"]["update"] for m in c.seen if m.get("method") == "session/update"]
    chunks = [u for u in updates if u["sessionUpdate"] == "agent_message_chunk"]
    assert "".join(u["content"]["text"] for u in chunks) == "Hello there", chunks
    assert len({u["messageId"] for u in chunks}) == 1, chunks
    usage = next(u for u in updates if u["sessionUpdate"] == "usage_update")
    assert usage["inputTokens"] == 100 and usage["outputTokens"] == 20, usage
    assert usage["cachedInputTokens"] == 50 and usage["reasoningTokens"] == 4, usage
    assert usage["used"] > 0 and usage["size"] > 0 and usage["cost"]["currency"] == "USD", usage
    assert await c.result("session/set_mode", {"sessionId": sid, "modeId": "auto"}) == {}
    mode = await c.update(lambda u: u["sessionUpdate"] == "current_mode_update" and u["currentModeId"] == "auto")
    bad = await c.call("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
    assert bad["error"]["code"] == -32602, bad
    unknown = await c.call("no/such/method", {})
    assert unknown["error"]["code"] == -32601, unknown
    await c.ws.send("{not json")
    parse = await c.until(lambda m: m.get("error", {}).get("code") == -32700)
    assert parse["id"] is None
    gone = await c.call("session/prompt", prompt("nope", "x"))
    assert gone["error"]["code"] == -32002, gone
    assert await c.result("session/close", {"sessionId": sid}) == {}
    await c.ws.close()
    del mode


async def two_dashboards_and_an_approval():
    a = await open_client()
    b = await open_client()
    sid = (await a.result("session/new", {"cwd": WORKDIR}))["sessionId"]
    attached = await b.result("session/attach", {"sessionId": sid})
    assert attached["sessionId"] == sid and attached["modes"]["currentModeId"] == "manual", attached
    assert await a.result("session/prompt", prompt(sid, "run it")) == {}
    asks = []
    for client in (a, b):
        ask = await client.until(lambda m: m.get("method") == "session/request_permission")
        assert ask["params"]["sessionId"] == sid
        assert ask["params"]["toolCall"]["toolCallId"] == "call_1"
        assert [o["kind"] for o in ask["params"]["options"]] == ["allow_once", "allow_always", "reject_once", "reject_always"]
        await client.update(lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "requires_action")
        asks.append(ask)
    # B answers; A's request is withdrawn, and both see it resolved.
    await b.ws.send(json.dumps({"jsonrpc": "2.0", "id": asks[1]["id"], "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}))
    cancel = await a.until(lambda m: m.get("method") == "$/cancel_request")
    assert cancel["params"]["requestId"] == asks[0]["id"], cancel
    for client in (a, b):
        resolved = await client.update(lambda u: u["sessionUpdate"] == "permission_resolved")
        assert resolved == {"sessionUpdate": "permission_resolved", "toolCallId": "call_1", "decision": "allow"}, resolved
        done = await client.update(lambda u: u["sessionUpdate"] == "tool_call_update" and u.get("status") in ("completed", "failed"))
        assert done["status"] == "completed" and done["toolCallId"] == "call_1", done
        assert (await client.idle())["stopReason"] == "end_turn"
    cards = [m["params"]["update"] for m in a.seen if m.get("method") == "session/update" and m["params"]["update"].get("toolCallId") == "call_1"]
    first = next(u for u in cards if u["sessionUpdate"] == "tool_call_update")
    assert first["status"] == "in_progress" and first["kind"] == "command", first
    assert first["title"] == "echo approved > approved.txt", first
    assert os.path.exists(os.path.join(WORKDIR, "approved.txt"))
    await a.ws.close()
    await b.ws.close()


async def cancel():
    c = await open_client()
    sid = (await c.result("session/new", {"cwd": WORKDIR}))["sessionId"]
    assert await c.result("session/prompt", prompt(sid, "take your time")) == {}
    await c.update(lambda u: u["sessionUpdate"] == "agent_message_chunk")
    assert await c.result("session/cancel", {"sessionId": sid}) == {}
    idle = await c.idle()
    assert idle["stopReason"] == "cancelled", idle
    # Cancelling an idle session answers, and says it is idle, cancelled.
    assert await c.result("session/cancel", {"sessionId": sid}) == {}
    idle = await c.idle()
    assert idle["stopReason"] == "cancelled", idle
    await c.ws.close()


async def origin_refused():
    try:
        await connect(URL, origin="http://evil.example", additional_headers=headers())
    except InvalidStatus as err:
        assert err.response.status_code == 403, err
    else:
        raise AssertionError("a page of another origin was let in")
    # The server's own origin is welcome.
    port = URL.rsplit(":", 1)[1].strip("/")
    ws = await connect(URL, origin=f"http://127.0.0.1:{port}", additional_headers=headers())
    await ws.close()


async def oversized_frame():
    c = await open_client()
    # The server stops reading at the frame's header and closes with 1009; the rest of
    # the frame may still be on its way, so the send itself may fail, and the close
    # frame may be overtaken by the reset of a socket closed with unread data.
    try:
        await c.ws.send("x" * (17 * 1024 * 1024))
        while True:
            await asyncio.wait_for(c.ws.recv(), WAIT)
    except ConnectionClosed as err:
        assert err.rcvd is None or err.rcvd.code == 1009, err
    # The server goes on.
    c = await open_client()
    await c.ws.close()


async def a_dashboard_that_never_reads():
    reader = await open_client()
    sid = (await reader.result("session/new", {"cwd": WORKDIR}))["sessionId"]
    stuck = await open_client(max_queue=1)
    await stuck.result("session/attach", {"sessionId": sid})
    # `stuck` reads nothing from now on; the session streams a long reply.
    assert await reader.result("session/prompt", prompt(sid, "a long answer")) == {}
    idle = await reader.idle()
    assert idle["stopReason"] == "end_turn", idle
    # The stuck one was cut off: draining what it has leads to the end of the stream.
    # The close frame (1008) comes last only when the socket had room for it: a client
    # that reads nothing may as well see its stream end in the middle of a frame.
    try:
        while True:
            await asyncio.wait_for(stuck.ws.recv(), WAIT)
    except ConnectionClosed as err:
        assert err.rcvd is None or err.rcvd.code == 1008, err
    await reader.ws.close()


async def token_required():
    try:
        await connect(URL)
    except InvalidStatus as err:
        assert err.response.status_code == 401, err
    else:
        raise AssertionError("a client without the token was let in")
    try:
        await connect(URL, additional_headers={"Authorization": "Bearer wrong"})
    except InvalidStatus as err:
        assert err.response.status_code == 401, err
    else:
        raise AssertionError("a wrong token was accepted")
    c = await open_client()
    await c.ws.close()
    # As a browser sends it: subprotocols, answered with "jucode".
    ws = await connect(URL, subprotocols=["jucode", f"bearer.{TOKEN}"])
    assert ws.subprotocol == "jucode", ws.subprotocol
    await ws.close()


async def drive_session():
    """Attaches to SESSION (the seed example's) and runs one turn in it."""
    sid = os.environ["SESSION"]
    c = await open_client()
    await c.result("session/attach", {"sessionId": sid})
    assert await c.result("session/prompt", prompt(sid, "look around")) == {}
    assert (await c.idle())["stopReason"] == "end_turn"
    await c.ws.close()


async def one_serve_session():
    """A `jucode serve --server-config` process's server: SESSION is all it serves."""
    sid = os.environ["SESSION"]
    c = await open_client()
    created = await c.result("session/new", {"cwd": WORKDIR})
    assert created["sessionId"] == sid, created
    listed = await c.result("session/list", {})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid], listed
    other = await c.call("session/attach", {"sessionId": "01a00000-0000-7000-8000-00000000abcd"})
    assert other["error"]["code"] == -32002 and sid in other["error"]["message"], other
    assert await c.result("session/prompt", prompt(sid, "from the dashboard")) == {}
    assert (await c.idle())["stopReason"] == "end_turn"
    # Closing only stops watching: the serve process's session goes on.
    assert await c.result("session/close", {"sessionId": sid}) == {}
    again = await c.result("session/attach", {"sessionId": sid})
    assert "modes" in again, again
    await c.ws.close()


CASES = {f.__name__: f for f in [every_method, two_dashboards_and_an_approval, cancel, origin_refused, oversized_frame, a_dashboard_that_never_reads, token_required, drive_session, one_serve_session]}

if __name__ == "__main__":
    name = sys.argv[1]
    asyncio.run(CASES[name]())
    print(f"PASS {name}")
