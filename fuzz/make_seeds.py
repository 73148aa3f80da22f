#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from the tests,
the docs and the recorded streams. Run it from anywhere; it overwrites the seeds it
makes (named seed-*) and leaves every other corpus file alone.

The first byte of a seed of a target that reads a stream says how the bytes are cut into
reads (see `jucode::fuzzing::chunks`): 0x00 one read, 0xff a byte at a time, 0x03 and
three lengths, and so on."""
import ast
import base64
import json
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
STREAMS = os.path.join(os.path.dirname(ROOT), "shared", "streams")
if not os.path.isdir(STREAMS):
    STREAMS = "/work/shared/streams"
LIMIT = 4096


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    data = data[:LIMIT]
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seed-" + name), "wb") as out:
        out.write(data)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def cuts(data, how):
    """Prefixes the chunking control byte(s)."""
    if how == "whole":
        return b"\x00" + data
    if how == "bytes":
        return b"\xff" + data
    return b"\x03\x00\x07\x1f" + data


# serve ops: the op lines of the protocol docs and the tests' json!({...}) ops.
serve_lines = sorted(set(re.findall(r'\{"op":[^`\n]*\}', read("docs/serve-protocol.md"))))
serve_lines = [line for line in serve_lines if "..." not in line]
for i, line in enumerate(serve_lines):
    write("serve_ops", f"doc-{i:02}", cuts(line.encode() + b"\n", ["whole", "bytes", "cut"][i % 3]))
write("serve_ops", "mixed", cuts(b'{"op":"shutdown"}\r\n\n  \nnot json\n["shutdown"]\n{"op":5}\n{"op":"nope"}\n{"op":"user_message"}\n{"op":"user_message","content":"\xff\xfe"}\n{"op":"user_message","content":"hi"}', "cut"))

# daemon frames: the daemon's own ops, and lines for sessions.
daemon_lines = sorted(set(re.findall(r'\{"op":[^`\n]*\}', read("docs/daemon-protocol.md"))))
daemon_lines += [
    '{"op":"daemon_stop","session":7}',
    '{"op":"open","cwd":5}',
    '{"op":"user_message","content":"x","session":"s1"}',
    '{"op":5,"session":null}',
    '["daemon_stop",null]',
    '"open"',
]
for i, line in enumerate(daemon_lines):
    write("daemon_frames", f"op-{i:02}", cuts(line.encode() + b"\n", ["whole", "bytes", "cut"][i % 3]))
write("daemon_frames", "long", cuts(b"x" * 100 + b"\n" + b'{"op":"sessions"}' + b"y" * 70 + b"\r\n{}", "cut"))

# chat stream: the small recorded streams (whole, cut, a byte at a time).
small = []
for name in sorted(os.listdir(STREAMS)):
    path = os.path.join(STREAMS, name)
    if name.endswith(".sse") and os.path.getsize(path) < LIMIT - 8:
        small.append(name)
        with open(path, "rb") as f:
            body = f.read()
        hows = ["whole", "cut", "bytes"] if len(small) % 4 == 1 else ["whole"]
        for how in hows:
            write("chat_stream", f"{name[:-4]}-{how}", cuts(body, how))
with open(os.path.join(STREAMS, "openai_gpt4o_json_utf8.sse"), "rb") as f:
    body = f.read()
head = body[: body.rfind(b"\n\n", 0, LIMIT - 16) + 2]
write("chat_stream", "utf8-head-bytes", cuts(head, "bytes"))
write("chat_stream", "utf8-head-cut", cuts(head, "cut"))

# ACP: the messages an editor sends, in the order it sends them.
def rpc(method, params, id=None):
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    if id is not None:
        message["id"] = id
    return json.dumps(message)

acp = [
    rpc("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}}, 0),
    rpc("authenticate", {"methodId": "x"}, 1),
    rpc("session/new", {"cwd": "/tmp", "mcpServers": [{"name": "fs", "command": "/bin/true", "args": [], "env": []}]}, 2),
    rpc("session/new", {"cwd": "relative", "mcpServers": []}, 3),
    rpc("session/load", {"sessionId": "0193-abc", "cwd": "/tmp", "mcpServers": [{"type": "http", "name": "web", "url": "http://127.0.0.1:1/mcp", "headers": [{"name": "a", "value": "b"}]}]}, 4),
    rpc("session/resume", {"sessionId": "../etc", "cwd": "/tmp"}, 5),
    rpc("session/list", {"cwd": "/tmp"}, 6),
    rpc("session/prompt", {"sessionId": "s", "prompt": [{"type": "text", "text": "/help"}, {"type": "resource_link", "uri": "file:///tmp/a.rs", "name": "a.rs"}, {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}]}, 7),
    rpc("session/set_mode", {"sessionId": "s", "modeId": "auto-edit"}, 8),
    rpc("session/set_config_option", {"sessionId": "s", "configId": "model", "value": "mock/big"}, "nine"),
    rpc("session/close", {"sessionId": "s"}, 10),
    rpc("session/cancel", {"sessionId": "s"}),
    rpc("$/cancel_request", {"requestId": 7}),
    json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}),
    json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "no"}}),
    '{"jsonrpc":"2.0","id":{"a":1},"method":"initialize"}',
    '{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"nope"}',
    '[{"jsonrpc":"2.0","id":1,"method":"initialize"}]',
    '{"jsonrpc":"1.0","id":1,"method":"initialize"}',
    'not json',
]
write("acp_messages", "session", cuts(("\n".join(acp[:13]) + "\n").encode(), "whole"))
for i, line in enumerate(acp):
    write("acp_messages", f"msg-{i:02}", cuts(line.encode() + b"\n", ["whole", "cut"][i % 2]))

# WebSocket: an upgrade request, then masked client frames.
def frame(opcode, payload, fin=True, mask=b"\x01\x02\x03\x04"):
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked

upgrade = (
    "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:8765\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    "Sec-WebSocket-Protocol: jucode, bearer.secret\r\nOrigin: http://127.0.0.1:8765\r\n\r\n"
).encode()
texts = [rpc("initialize", {}, 1), rpc("session/list", {}, 2), rpc("session/new", {"cwd": "/tmp"}, 3), "not json", "[1]"]
frames = b"".join(frame(1, t.encode()) for t in texts)
write("websocket", "upgrade-texts", cuts(upgrade + frames, "whole"))
write("websocket", "upgrade-texts-cut", cuts(upgrade + frames, "cut"))
fragmented = frame(1, b'{"jsonrpc":"2.0",', fin=False) + frame(9, b"ping") + frame(0, b'"id":1,"method":"x"}') + frame(8, b"\x03\xe8bye")
write("websocket", "fragments-ping-close", cuts(upgrade + fragmented, "bytes"))
write("websocket", "binary", cuts(upgrade + frame(2, b"\x00\x01") + frame(1, b"\xff\xfe"), "whole"))
write("websocket", "page", cuts(b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n", "whole"))
write("websocket", "bad-head", cuts(b"GET / HTTP/1.1\r\nHost\r\n\r\n", "whole"))

# Session files: the doc's example and a line of every kind.
doc = read("docs/sessions.md")
example = "\n".join(re.findall(r'^\{"id":"e.*\}$', doc, re.M)) + "\n"
write("session_file", "doc-example", example)
header = '{"id":"e1","parent":null,"at":1,"tokens":0,"kind":"session","format":1,"session":"s","cwd":"/p","model":"m/m","created":1,"chat":false}'
kinds = [
    '{"id":"e2","parent":"e1","at":2,"tokens":3,"kind":"user","content":"hi","text":"hi","images":[{"mime":"image/png","data":"iVBORw0KGgo="}],"image_paths":["/a.png"],"files":["/b"],"steered":false}',
    '{"id":"e3","parent":"e2","at":3,"tokens":4,"kind":"assistant","text":"t","reasoning":"r","tool_calls":[{"id":"c1","name":"write_file","arguments":"{}"}]}',
    '{"id":"e4","parent":"e3","at":4,"tokens":0,"kind":"checkpoint","turn":"e2","files":[{"path":"/p/a","content":"YQ=="},{"path":"/p/b","content":null}]}',
    '{"id":"e5","parent":"e4","at":5,"tokens":2,"kind":"tool_result","call_id":"c1","name":"write_file","output":"ok","is_error":false}',
    '{"id":"e6","parent":"e5","at":6,"tokens":0,"kind":"plan","plan":"p1","title":"T","markdown":"# M","status":"pending"}',
    '{"id":"e7","parent":"e6","at":7,"tokens":0,"kind":"plan_status","plan":"p1","status":"approved"}',
    '{"id":"e8","parent":"e7","at":8,"tokens":9,"kind":"compaction","summary":"s","kept_from":"e5"}',
    '{"id":"e9","parent":"e2","at":9,"tokens":0,"kind":"branch","label":"back"}',
    '{"id":"e10","parent":"e9","at":10,"tokens":0,"kind":"steps","plan":[{"step":"a","status":"completed"}],"explanation":null}',
    '{"id":"e11","parent":"e10","at":11,"tokens":0,"kind":"goal","goal":{"objective":"o","status":"active","token_budget":null,"tokens_used":0,"time_used_seconds":0,"created_at":1,"updated_at":1}}',
    '{"id":"e12","parent":"e11","at":12,"tokens":0,"kind":"agent","agent":"/root/a","label":"a","model":"m/m","effort":null,"state":"completed","started_at":1,"duration_ms":5,"agent_tokens":7,"tool_calls":1,"prompt":"p","result":"r","error":null,"tool_use_id":"c9","items":[{"role":"user","content":"p"}]}',
]
write("session_file", "every-kind", header + "\n" + "\n".join(kinds) + "\n")
write("session_file", "torn-last", header + "\n" + kinds[0] + "\n" + kinds[1][:40])
write("session_file", "bad-lines", header + "\n\n{}\nnot json\n" + kinds[1] + "\n" + kinds[0] + "\n")
write("session_file", "no-header", kinds[0] + "\n")
write("session_file", "empty", "")

# Config: the TOML of the config tests and docs.
tests = read("src/config/tests.rs")
for i, text in enumerate(re.findall(r'r#"(.*?)"#', tests, re.S)):
    write("config", f"test-{i:02}", text)
for doc_name in ["docs/configuration.md", "docs/mcp.md", "docs/web.md", "docs/websocket.md", "docs/hooks.md"]:
    blocks = re.findall(r"```toml\n(.*?)```", read(doc_name), re.S)
    for i, text in enumerate(blocks):
        write("config", f"{os.path.basename(doc_name)[:-3]}-{i:02}", text)

# Edit hunks: a selection byte, old text, NUL, new text.
def numbered(n, eol="\n"):
    return "".join(f"line {k}{eol}" for k in range(1, n + 1))

pairs = [
    (numbered(10), numbered(10).replace("line 5\n", "line five\nline 5b\n")),
    (numbered(40, "\r\n"), numbered(40, "\r\n").replace("line 3\r\n", "THREE\r\n").replace("line 30\r\n", "")),
    ("a\nb", "a\nb\n"),
    ("", "new\n"),
    ("old\n", ""),
    ("x\ny\nz", "x\nY\nz"),
]
for i, (old, new) in enumerate(pairs):
    write("edit_hunks", f"pair-{i:02}", bytes([0b01010101 if i % 2 else 0xff]) + (old + "\0" + new).encode())

# Shell: every command line of the classifier's tests.
shell_tests = read("src/tools/shell/tests.rs")
commands = set()
for match in re.finditer(r'\(\s*("(?:[^"\\]|\\.)*")\s*,\s*[A-Z]', shell_tests):
    try:
        commands.add(ast.literal_eval(match.group(1)))
    except (ValueError, SyntaxError):
        pass
for i, command in enumerate(sorted(commands)):
    write("shell_class", f"test-{i:03}", command)
# Messages and Responses streams: written here after the shapes the APIs send (others'
# recordings in shared/streams are read by the tests where they are, never copied in).
def sse(events):
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()

def block(index, start, deltas):
    return ([{"type": "content_block_start", "index": index, "content_block": start}]
            + [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
            + [{"type": "content_block_stop", "index": index}])

message_start = {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": [],
                 "usage": {"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5, "output_tokens": 1}}}
def message_end(reason):
    return [{"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 7}},
            {"type": "message_stop"}]
messages = {
    "text": [message_start] + block(0, {"type": "text", "text": ""}, [{"type": "text_delta", "text": "Hello, w\u00f6rld."}])
        + [{"type": "ping"}] + message_end("end_turn"),
    "thinking-tool": [message_start]
        + block(0, {"type": "thinking", "thinking": "", "signature": ""},
                [{"type": "thinking_delta", "thinking": "Look "}, {"type": "thinking_delta", "thinking": "first."},
                 {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}])
        + block(1, {"type": "redacted_thinking", "data": "b3BhcXVl"}, [])
        + block(2, {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
                [{"type": "input_json_delta", "partial_json": ""}, {"type": "input_json_delta", "partial_json": "{\"path\":"},
                 {"type": "input_json_delta", "partial_json": "\"a.txt\"}"}])
        + message_end("tool_use"),
    "server-tool-pause": [message_start]
        + block(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                [{"type": "input_json_delta", "partial_json": "{\"query\":\"x\"}"}])
        + block(1, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}, [])
        + block(2, {"type": "brand_new_block"}, [{"type": "brand_new_delta"}])
        + message_end("pause_turn"),
    "refusal": [message_start, {"type": "message_delta", "delta": {"stop_reason": "refusal",
        "stop_details": {"type": "refusal", "explanation": "no"}}}, {"type": "message_stop"}],
    "overloaded": [message_start, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}],
    "cut": [message_start] + block(0, {"type": "text", "text": "partial"}, [])[:1],
    "two-starts": [message_start, message_start, {"type": "message_stop"}],
}
for i, (name, events) in enumerate(messages.items()):
    for how in (["whole", "cut", "bytes"] if i % 2 == 0 else ["whole", "cut"]):
        write("messages_stream", f"{name}-{how}", cuts(sse(events), how))

def completed(status="completed", **extra):
    response = {"status": status, "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 8},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2}}}
    response.update(extra)
    return {"type": "response." + status, "response": response}
responses = {
    "text": [{"type": "response.created", "response": {}},
             {"type": "response.output_text.delta", "output_index": 0, "item_id": "m", "delta": "Hi, w\u00f6rld."},
             completed()],
    "reasoning-call": [
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}},
        {"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "Plan."},
        {"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Plan."}], "encrypted_content": "gAAAAA=="}},
        {"type": "response.output_item.added", "output_index": 1, "item": {"id": "fc_1", "type": "function_call",
            "call_id": "call_1", "name": "read_file", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "rotated", "delta": "{\"path\":\"a\"}"},
        {"type": "response.output_item.done", "output_index": 1, "item": {"id": "rotated-2", "type": "function_call",
            "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}"}},
        completed()],
    "custom-call": [
        {"type": "response.output_item.added", "output_index": 0, "item": {"type": "custom_tool_call", "call_id": "call_2", "name": "exec", "input": ""}},
        {"type": "response.custom_tool_call_input.delta", "output_index": 0, "delta": "print(1)"},
        {"type": "response.output_item.done", "output_index": 0, "item": {"type": "custom_tool_call", "call_id": "call_2", "name": "exec", "input": "print(1)"}},
        {"type": "response.output_item.done", "output_index": 1, "item": {"type": "web_search_call", "id": "ws", "action": {}}},
        completed()],
    "incomplete": [{"type": "response.refusal.delta", "output_index": 0, "delta": "No."},
                   completed("incomplete", incomplete_details={"reason": "max_output_tokens"})],
    "failed": [{"type": "response.failed", "response": {"status": "failed", "error": {"code": "rate_limit_exceeded",
               "message": "Please try again in 1.5s."}}}],
    "error": [{"type": "error", "error": {"type": "insufficient_quota", "code": "insufficient_quota", "message": "quota"}}],
    "cut": [{"type": "response.output_text.delta", "output_index": 0, "delta": "par"}],
}
for i, (name, events) in enumerate(responses.items()):
    for how in (["whole", "cut", "bytes"] if i % 2 == 0 else ["whole", "cut"]):
        write("responses_stream", f"{name}-{how}", cuts(sse(events), how))

print({name: len(os.listdir(os.path.join(CORPUS, name))) for name in sorted(os.listdir(CORPUS))})
