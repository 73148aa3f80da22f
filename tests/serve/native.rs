//! The native model APIs end to end (Anthropic Messages, OpenAI Responses) against the
//! loopback mock: provider-bound items kept, saved and resent only where they belong,
//! `pause_turn` continued within the turn, a session moving between the three APIs.

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, messages_sse, text_reply};
use crate::common::serve::{Home, Serve, session_file};

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
    // The server tool is shown, never run by jucode.
    let info = events
        .iter()
        .find(|e| e["type"] == "info")
        .expect("an info for the server tool");
    assert_eq!(
        info["message"],
        "web_search (run by the provider): {\"query\":\"rust\"}"
    );
    assert!(
        !events.iter().any(|e| e["type"] == "tool_start"),
        "{events:#?}"
    );
    let second = &model.wait_requests(2)[1];
    let messages = second.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(messages[1]["role"], "assistant");
    // Sent back as it came, in its order.
    let blocks = messages[1]["content"].as_array().unwrap();
    // The breakpoint is on the text, the last block of a kind the API caches.
    assert_eq!(
        blocks[0],
        json!({"type": "text", "text": "Searching. ", "cache_control": {"type": "ephemeral"}})
    );
    assert_eq!(blocks[1], search);
    assert_eq!(blocks.len(), 2);
}

/// A Responses SSE body from its events.
fn responses_reply(events: Vec<Value>) -> Reply {
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

fn responses_completed() -> Value {
    json!({"type": "response.completed", "response": {"status": "completed",
        "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2}}}})
}

fn responses_text(text: &str) -> Reply {
    responses_reply(vec![
        json!({"type": "response.output_text.delta", "output_index": 0, "item_id": "m1", "delta": text}),
        responses_completed(),
    ])
}

#[test]
fn a_session_moves_from_messages_to_responses_to_chat_completions() {
    let (model, home) = setup();
    let url = model.base_url();
    home.append_config(&format!(
        "[providers.resp]\nkind = \"openai-responses\"\nbase_url = \"{url}\"\napi_key = \"k\"\n\
         reasoning_efforts = [\"low\", \"medium\", \"high\"]\n"
    ));
    std::fs::write(home.path().join("notes.txt"), "alpha\n").unwrap();
    // Messages: signed thinking and a call.
    model.push(anthropic_reply(
        vec![
            block(
                0,
                json!({"type": "thinking", "thinking": "Read it first.", "signature": "c2lnbmF0dXJl"}),
                &[],
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
    serve.user("read notes.txt");
    serve.until_ready();

    // Responses: the conversation carries over as items, the thinking does not; its own
    // reasoning goes back, encrypted, before the call it led to.
    serve.send(json!({"op": "command", "input": "/model resp/gpt-x"}));
    serve.expect_one("model_status");
    model.push(responses_reply(vec![
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0,
            "summary_index": 0, "delta": "Check again."}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "status": "completed",
            "summary": [{"type": "summary_text", "text": "Check again."}], "encrypted_content": "ENC-1"}}),
        json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"id": "fc_1", "type": "function_call", "call_id": "call_9", "name": "read_file", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 1,
            "item_id": "rotated", "delta": "{\"path\":\"notes.txt\"}"}),
        json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"id": "rotated-2", "type": "function_call", "call_id": "call_9", "name": "read_file",
            "arguments": "{\"path\":\"notes.txt\"}"}}),
        responses_completed(),
    ]));
    model.push(responses_text("Still alpha."));
    serve.user("again");
    let events = serve.until_ready();
    assert!(!events.iter().any(|e| e["type"] == "error"), "{events:#?}");
    let context = events
        .iter()
        .find(|e| e["type"] == "context_usage")
        .unwrap();
    assert_eq!(context["tokenizer"], "provider+o200k");
    // 20 counted by Responses for the last request, plus the reply since.
    assert!(
        (21..40).contains(&context["tokens"].as_u64().unwrap()),
        "{context}"
    );
    let requests = model.wait_requests(4);
    let (first, second) = (&requests[2], &requests[3]);
    assert!(first.path.ends_with("/responses"), "{}", first.path);
    assert_eq!(first.body["store"], json!(false));
    assert_eq!(
        first.body["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    assert_eq!(
        first.body["include"],
        json!(["reasoning.encrypted_content"])
    );
    assert!(first.body["prompt_cache_key"].is_string(), "{}", first.body);
    let text = first.body["input"].to_string();
    assert!(!text.contains("c2lnbmF0dXJl"), "{text}");
    let kinds = |request: &crate::common::mock::Recorded| -> Vec<String> {
        request.body["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                let kind = item["type"].as_str().unwrap().to_owned();
                match item["role"].as_str() {
                    Some(role) => format!("{kind}:{role}"),
                    None => kind,
                }
            })
            .collect()
    };
    assert_eq!(
        kinds(first),
        [
            "message:user",
            "function_call",
            "function_call_output",
            "message:assistant",
            "message:user"
        ]
    );
    assert_eq!(
        kinds(second)[5..],
        ["reasoning", "function_call", "function_call_output"]
    );
    let input = second.body["input"].as_array().unwrap();
    assert_eq!(
        input[5],
        json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "Check again."}],
            "encrypted_content": "ENC-1"})
    );
    assert_eq!(input[6]["call_id"], input[7]["call_id"]);

    // Chat Completions: text, calls and results carry over; no provider item does.
    serve.send(json!({"op": "command", "input": "/model mock/mock-1"}));
    serve.expect_one("model_status");
    model.push(text_reply(&["Alpha, yes."]));
    serve.user("last time");
    let events = serve.until_ready();
    assert!(!events.iter().any(|e| e["type"] == "error"), "{events:#?}");
    // Chat Completions servers' usage is not trusted for the context: estimated.
    let context = events
        .iter()
        .find(|e| e["type"] == "context_usage")
        .unwrap();
    assert_eq!(context["tokenizer"], "o200k");
    let last = &model.wait_requests(5)[4];
    assert!(last.path.ends_with("/chat/completions"), "{}", last.path);
    let body = last.body.to_string();
    assert!(
        !body.contains("ENC-1") && !body.contains("c2lnbmF0dXJl"),
        "{body}"
    );
    assert_eq!(
        last.roles(),
        [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
            "user"
        ]
    );
}

#[test]
fn the_built_in_openai_provider_speaks_responses() {
    let model = MockModel::start();
    let home = Home::new();
    model.push(responses_text("Hello."));
    let mut serve = Serve::builder(&home)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &model.base_url())
        .start();
    serve.skip_startup();
    serve.user("hi");
    let events = serve.until_ready();
    assert!(!events.iter().any(|e| e["type"] == "error"), "{events:#?}");
    let request = &model.wait_requests(1)[0];
    assert!(request.path.ends_with("/responses"), "{}", request.path);
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.body["model"], "gpt-5.5");
    assert_eq!(request.body["reasoning"]["summary"], "auto");
}

#[test]
fn a_known_claude_thinks_by_effort_and_its_cache_writes_are_counted_and_priced() {
    let model = MockModel::start();
    let home = Home::new();
    let url = model.base_url();
    home.write_config(&format!(
        "model = \"claude/claude-sonnet-4-5\"\n\
         [providers.claude]\nkind = \"anthropic\"\nbase_url = \"{url}\"\napi_key = \"k\"\n"
    ));
    let mut events = vec![json!({"type": "message_start", "message": {"id": "msg_1",
        "role": "assistant", "content": [], "usage": {"input_tokens": 1000,
        "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 4000,
        "output_tokens": 1}}})];
    events.extend(anthropic_text(0, "Hi."));
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 100}}),
    );
    events.push(json!({"type": "message_stop"}));
    model.push(messages_sse(&events));
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.until_ready();
    let request = &model.wait_requests(1)[0];
    assert_eq!(request.body["max_tokens"], 64000);
    assert_eq!(
        request.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 16384})
    );
    let usage = events.iter().find(|e| e["type"] == "usage").unwrap();
    assert_eq!(usage["input_tokens"], 7000);
    assert_eq!(usage["cached_input_tokens"], 2000);
    assert_eq!(usage["cache_write_input_tokens"], 4000);
    let context = events
        .iter()
        .find(|e| e["type"] == "context_usage")
        .unwrap();
    // The context starts from the provider's own count of the prompt, plus an estimate
    // of the reply added since.
    assert_eq!(context["tokenizer"], "provider+o200k");
    let tokens = context["tokens"].as_u64().unwrap();
    assert!((7001..7020).contains(&tokens), "{context}");
    // Sonnet 4.5: $3 input, $0.30 cache read, $3.75 cache write, $15 output.
    let expected = (1000.0 * 3.0 + 2000.0 * 0.3 + 4000.0 * 3.75 + 100.0 * 15.0) / 1e6;
    let cost = context["cost"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}

/// `../shared/streams/<api>/<name>.sse` and its `expected.json` entry, when that folder
/// is beside the checkout (others' recordings are read there, never copied in).
fn recorded(api: &str, name: &str) -> Option<(String, Value)> {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let folder = manifest
        .ancestors()
        .map(|dir| dir.join("shared/streams").join(api))
        .find(|dir| dir.join("expected.json").is_file())?;
    let body = std::fs::read_to_string(folder.join(format!("{name}.sse"))).ok()?;
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("expected.json")).ok()?).ok()?;
    Some((body, expected[name].clone()))
}

#[test]
fn a_recorded_reply_with_two_signed_thinking_blocks_is_resent_verbatim() {
    let Some((body, want)) = recorded("anthropic", "aibridge_sonnet4_two_thinking_tool") else {
        eprintln!("skipped: no shared/streams/anthropic beside the checkout");
        return;
    };
    // The signatures as recorded, to compare byte for byte.
    let signatures: Vec<String> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .filter(|event| event["delta"]["type"] == "signature_delta")
        .map(|event| event["delta"]["signature"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(signatures.len(), 2);
    let (model, home) = setup();
    model.push(Reply::Sse(vec![Step::Raw(body)]));
    model.push(anthropic_reply(
        vec![anthropic_text(0, "Done.")],
        "end_turn",
    ));
    let mut serve = Serve::ready(&home);
    serve.user("read foo");
    let events = serve.until_ready();
    let reasoning: String = events
        .iter()
        .filter(|e| e["type"] == "reasoning_delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let thinking = want["thinking"].as_array().unwrap();
    let texts: Vec<&str> = thinking
        .iter()
        .map(|t| t["text"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, texts.concat());
    let second = &model.wait_requests(2)[1];
    let content = content(second, 1);
    let blocks = content.as_array().unwrap();
    assert_eq!(blocks.len(), 3, "{content}");
    for ((block, want), signature) in blocks.iter().zip(thinking).zip(&signatures) {
        assert_eq!(block["type"], "thinking");
        assert_eq!(block["thinking"], want["text"]);
        assert_eq!(block["signature"], signature.as_str());
        assert_eq!(
            block["signature"].as_str().unwrap().len() as u64,
            want["signature_len"].as_u64().unwrap()
        );
    }
    let call = &want["tool_calls"][0];
    assert_eq!(blocks[2]["type"], "tool_use");
    assert_eq!(blocks[2]["id"], call["id"]);
    assert_eq!(blocks[2]["input"], call["input"]);
}

#[test]
fn a_recorded_reasoning_item_goes_back_before_its_call() {
    let Some((body, want)) = recorded("responses", "vercel_gpt51codexmax_reasoning_tool") else {
        eprintln!("skipped: no shared/streams/responses beside the checkout");
        return;
    };
    let model = MockModel::start();
    let home = Home::new();
    model.push(Reply::Sse(vec![Step::Raw(body)]));
    model.push(responses_text("The product is 570."));
    let mut serve = Serve::builder(&home)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &model.base_url())
        .start();
    serve.skip_startup();
    serve.user("compute");
    let events = serve.until_ready();
    let reasoning: String = events
        .iter()
        .filter(|e| e["type"] == "reasoning_delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, want["reasoning_summary"][0].as_str().unwrap());
    let second = &model.wait_requests(2)[1];
    let input = second.body["input"].as_array().unwrap();
    let kinds: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
    let encrypted = input[1]["encrypted_content"].as_str().unwrap();
    assert_eq!(
        encrypted.len() as u64,
        want["reasoning_encrypted_len"].as_u64().unwrap()
    );
    assert!(input[1].get("id").is_none(), "{}", input[1]);
    let call = &want["calls"][0];
    assert_eq!(input[2]["call_id"], call["call_id"]);
    assert_eq!(input[3]["call_id"], call["call_id"]);
    let arguments: Value = serde_json::from_str(input[2]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, call["arguments"]);
}

#[test]
fn claude_s_text_editor_edits_through_jucode_s_edit_file() {
    let model = MockModel::start();
    let home = Home::new();
    let url = model.base_url();
    home.write_config(&format!(
        "model = \"claude/claude-sonnet-4-5\"\napproval_mode = \"auto-edit\"\n\
         [providers.claude]\nkind = \"anthropic\"\nbase_url = \"{url}\"\napi_key = \"k\"\n"
    ));
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let input = json!({"command": "str_replace", "path": "notes.txt", "old_str": "beta",
        "new_str": "gamma"});
    model.push(anthropic_reply(
        vec![block(
            0,
            json!({"type": "tool_use", "id": "toolu_e", "name": "str_replace_based_edit_tool", "input": {}}),
            &[json!({"type": "input_json_delta", "partial_json": input.to_string()})],
        )],
        "tool_use",
    ));
    model.push(anthropic_reply(
        vec![anthropic_text(0, "Edited.")],
        "end_turn",
    ));
    let mut serve = Serve::builder(&home).cwd(project.path()).start();
    serve.skip_startup();
    serve.user("replace beta");
    let events = serve.until_ready();
    let start = events.iter().find(|e| e["type"] == "tool_start").unwrap();
    assert_eq!(start["name"], "edit_file", "{start}");
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["is_error"], false, "{output}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("notes.txt")).unwrap(),
        "alpha\ngamma\n"
    );
    let requests = model.wait_requests(2);
    let tools = requests[0].body["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["type"] == "text_editor_20250728"
                && t["name"] == "str_replace_based_edit_tool"),
        "{tools:?}"
    );
    assert!(
        !tools
            .iter()
            .any(|t| t["name"] == "edit_file" || t["name"] == "write_file")
    );
    // The model reads its call back as it made it.
    let call = &content(&requests[1], 1)[0];
    assert_eq!(call["name"], "str_replace_based_edit_tool");
    assert_eq!(call["input"], input);
}

#[test]
fn a_prompt_the_provider_finds_too_long_is_compacted_and_sent_again() {
    let model = MockModel::start();
    let home = Home::new();
    let url = model.base_url();
    home.write_config(&format!(
        "model = \"resp/gpt-x\"\n\
         [providers.resp]\nkind = \"openai-responses\"\nbase_url = \"{url}\"\napi_key = \"k\"\n\
         context_window = 20000\nretry_base_delay_ms = 1\n"
    ));
    model.push(responses_text("Noted."));
    model.push(responses_reply(vec![
        json!({"type": "response.failed", "response": {
        "status": "failed", "error": {"code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model."}}}),
    ]));
    model.push(responses_text("Summary of the notes."));
    model.push(responses_text("Here is the answer."));
    let mut serve = Serve::ready(&home);
    serve.user(&"note ".repeat(6000));
    serve.until_ready();
    serve.user("and now?");
    let events = serve.until_ready();
    assert!(!events.iter().any(|e| e["type"] == "error"), "{events:#?}");
    for kind in ["compaction_start", "compaction_end", "retrying"] {
        assert!(
            events.iter().any(|e| e["type"] == kind),
            "{kind}: {events:#?}"
        );
    }
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "assistant_delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Here is the answer.");
    // The request sent again carries the summary, not the long turn.
    let requests = model.wait_requests(4);
    let again = requests[3].body["input"].to_string();
    assert!(again.contains("Summary of the notes."), "{again}");
    assert!(!again.contains(&"note ".repeat(100)), "{again}");
    assert!(
        requests[1].body["input"]
            .to_string()
            .contains(&"note ".repeat(100))
    );
}

#[test]
fn gpt_5_patches_files_with_apply_patch_through_jucode_s_approvals_and_hunks() {
    let model = MockModel::start();
    let home = Home::new();
    let url = model.base_url();
    home.write_config(&format!(
        "model = \"oa/gpt-5.1\"\n\
         [providers.oa]\nkind = \"openai-responses\"\nbase_url = \"{url}\"\napi_key = \"k\"\n"
    ));
    let project = tempfile::tempdir().unwrap();
    let old: String = (1..=20).map(|n| format!("line {n}\n")).collect();
    std::fs::write(project.path().join("a.txt"), &old).unwrap();
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-line 2\n+two\n@@\n-line 19\n+nineteen\n\
                 *** Add File: b.txt\n+bee\n*** End Patch\n";
    model.push(responses_reply(vec![
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_p", "name": "apply_patch", "input": ""}}),
        json!({"type": "response.custom_tool_call_input.delta", "output_index": 0, "item_id": "ctc_1", "delta": &patch[..40]}),
        json!({"type": "response.custom_tool_call_input.delta", "output_index": 0, "item_id": "ctc_1", "delta": &patch[40..]}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_p", "name": "apply_patch", "input": patch}}),
        responses_completed(),
    ]));
    model.push(responses_text("Patched."));
    let mut serve = Serve::builder(&home).cwd(project.path()).start();
    serve.skip_startup();
    serve.user("patch it");
    let request = serve.until("approval_request").pop().unwrap();
    assert_eq!(request["name"], "apply_patch", "{request}");
    assert_eq!(
        request["summary"],
        "patch: edit a.txt (+2 -2), add b.txt (+1 -0)"
    );
    let ids: Vec<&str> = request["hunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hunk| hunk["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["f0h0", "f0h1", "f1h0"]);
    // Only the second hunk of the first file, and the new file.
    serve.send(
        json!({"op": "approve", "call_id": "call_p", "decision": "allow",
        "hunks": ["f0h1", "f1h0"]}),
    );
    let events = serve.until_ready();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["is_error"], false, "{output}");
    assert_eq!(
        std::fs::read_to_string(project.path().join("a.txt")).unwrap(),
        old.replace("line 19\n", "nineteen\n")
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("b.txt")).unwrap(),
        "bee\n"
    );
    let requests = model.wait_requests(2);
    let tools = requests[0].body["tools"].as_array().unwrap();
    assert!(
        tools.iter().any(|t| t["type"] == "custom"
            && t["name"] == "apply_patch"
            && t["format"]["syntax"] == "lark"),
        "{tools:?}"
    );
    assert!(
        !tools
            .iter()
            .any(|t| t["name"] == "edit_file" || t["name"] == "write_file")
    );
    // The model reads back the call it wrote and the answer, as custom items.
    let input = requests[1].body["input"].as_array().unwrap();
    let call = input
        .iter()
        .find(|i| i["type"] == "custom_tool_call")
        .unwrap();
    assert_eq!(call["input"], patch);
    let answer = input
        .iter()
        .find(|i| i["type"] == "custom_tool_call_output")
        .unwrap();
    assert_eq!(answer["call_id"], "call_p");
    assert!(
        answer["output"]
            .as_str()
            .unwrap()
            .starts_with("Success. Updated the following files:\nM a.txt\nA b.txt"),
        "{answer}"
    );
}
