//! The native model APIs end to end (Anthropic Messages, OpenAI Responses) against the
//! loopback mock: provider-bound items kept, saved and resent only where they belong,
//! `pause_turn` continued within the turn, a session moving between the three APIs.

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, text_reply};
use crate::common::serve::{Home, Serve, session_file};

/// An Anthropic Messages SSE body from its events (each JSON carries its `type`).
fn messages_sse(events: &[Value]) -> Reply {
    let body: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect();
    Reply::Sse(vec![Step::Raw(body)])
}

fn block(index: u64, block: Value, deltas: &[Value]) -> Vec<Value> {
    let mut events =
        vec![json!({"type": "content_block_start", "index": index, "content_block": block})];
    events.extend(
        deltas
            .iter()
            .map(|delta| json!({"type": "content_block_delta", "index": index, "delta": delta})),
    );
    events.push(json!({"type": "content_block_stop", "index": index}));
    events
}

fn anthropic_reply(blocks: Vec<Vec<Value>>, stop: &str) -> Reply {
    let mut events = vec![json!({"type": "message_start", "message": {"id": "msg_1",
        "role": "assistant", "content": [], "usage": {"input_tokens": 10,
        "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 1}}})];
    events.extend(blocks.into_iter().flatten());
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop},
        "usage": {"output_tokens": 5}}),
    );
    events.push(json!({"type": "message_stop"}));
    messages_sse(&events)
}

fn anthropic_text(index: u64, text: &str) -> Vec<Value> {
    block(
        index,
        json!({"type": "text", "text": ""}),
        &[json!({"type": "text_delta", "text": text})],
    )
}

/// A config with an Anthropic provider `claude` and a Chat Completions one `mock` on
/// the same mock server; the session starts on `claude/claude-x`.
fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    let url = model.base_url();
    home.write_config(&format!(
        "model = \"claude/claude-x\"\n\
         [providers.claude]\nkind = \"anthropic\"\nbase_url = \"{url}\"\napi_key = \"k\"\n\
         retry_base_delay_ms = 1\n\
         [providers.mock]\nkind = \"openai\"\nbase_url = \"{url}\"\napi_key = \"k\"\n"
    ));
    (model, home)
}

fn thinking_block() -> Value {
    json!({"type": "thinking", "thinking": "Read it first.", "signature": "c2lnbmF0dXJl"})
}

/// The content of the request's message `index` (Messages shape).
fn content(request: &crate::common::mock::Recorded, index: usize) -> Value {
    request.body["messages"][index]["content"].clone()
}

#[test]
fn signed_thinking_is_resent_after_a_restart_and_dropped_on_another_api() {
    let (model, home) = setup();
    std::fs::write(home.path().join("notes.txt"), "alpha\n").unwrap();
    model.push(anthropic_reply(
        vec![
            block(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                &[
                    json!({"type": "thinking_delta", "thinking": "Read it "}),
                    json!({"type": "thinking_delta", "thinking": "first."}),
                    json!({"type": "signature_delta", "signature": "c2lnbmF0dXJl"}),
                ],
            ),
            block(
                1,
                json!({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}),
                &[json!({"type": "input_json_delta", "partial_json": "{\"path\":\"notes.txt\"}"})],
            ),
        ],
        "tool_use",
    ));
    model.push(anthropic_reply(
        vec![anthropic_text(0, "It says alpha.")],
        "end_turn",
    ));
    let mut serve = Serve::ready(&home);
    let id = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user("read notes.txt");
    let events = serve.until_ready();
    assert!(!events.iter().any(|e| e["type"] == "error"), "{events:#?}");
    let second = &model.wait_requests(2)[1];
    assert_eq!(
        content(second, 1),
        json!([thinking_block(),
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "notes.txt"}}])
    );
    serve.close_stdin();
    serve.wait();
    drop(serve);
    let file = std::fs::read_to_string(session_file(home.path(), &id)).unwrap();
    assert!(file.contains("provider_items"), "{file}");

    // After a restart the blocks come from the session file, byte for byte the same.
    model.push(anthropic_reply(vec![anthropic_text(0, "Yes.")], "end_turn"));
    let mut serve = Serve::builder(&home).arg("--session").arg(&id).start();
    serve.skip_startup();
    serve.user("sure?");
    serve.until_ready();
    let third = &model.wait_requests(3)[2];
    assert_eq!(content(third, 1), content(second, 1));
    let prefix = serde_json::to_string(&second.body["messages"][1]).unwrap();
    assert_eq!(
        serde_json::to_string(&third.body["messages"][1]).unwrap(),
        prefix
    );

    // On Chat Completions the conversation carries over, the signed thinking does not.
    serve.send(json!({"op": "command", "input": "/model mock/mock-1"}));
    serve.expect_one("model_status");
    model.push(text_reply(&["Still alpha."]));
    serve.user("and now?");
    let events = serve.until_ready();
    assert!(!events.iter().any(|e| e["type"] == "error"), "{events:#?}");
    let fourth = &model.wait_requests(4)[3];
    let body = fourth.body.to_string();
    assert!(!body.contains("c2lnbmF0dXJl"), "{body}");
    assert!(
        body.contains("It says alpha.") && body.contains("notes.txt"),
        "{body}"
    );
    assert_eq!(
        fourth.roles()[..5],
        ["system", "user", "assistant", "tool", "assistant"]
    );
}

#[test]
fn pause_turn_continues_within_the_same_turn() {
    let (model, home) = setup();
    let search = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
        "input": {"query": "rust"}});
    model.push(anthropic_reply(
        vec![
            anthropic_text(0, "Searching. "),
            block(
                1,
                json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
                &[json!({"type": "input_json_delta", "partial_json": "{\"query\":\"rust\"}"})],
            ),
        ],
        "pause_turn",
    ));
    model.push(anthropic_reply(
        vec![anthropic_text(0, "Found it.")],
        "end_turn",
    ));
    let mut serve = Serve::ready(&home);
    serve.user("search rust");
    let events = serve.until_ready();
    let readies = events
        .iter()
        .filter(|e| e["type"] == "status" && e["message"] == "ready")
        .count();
    assert_eq!(readies, 1, "{events:#?}");
    let second = &model.wait_requests(2)[1];
    let messages = second.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(messages[1]["role"], "assistant");
    let blocks = messages[1]["content"].as_array().unwrap();
    assert_eq!(blocks[0], search);
    assert_eq!(blocks[1]["text"], "Searching. ");
}
