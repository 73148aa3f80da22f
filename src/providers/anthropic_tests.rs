//! Tests of the Messages client: the stream parser on streams written here after the
//! shapes the API sends, request bodies (breakpoints, the cache-stable prefix), status
//! classification, and one whole request against a loopback server.

use futures_util::{StreamExt, stream};
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use std::sync::Arc;

use crate::config::{CacheSetting, Thinking};
use crate::engine::{ImageData, ProviderItem, ProviderItems, Retry, ToolSpec};

fn shape(max_tokens: u64, cache: CacheSetting) -> Shape {
    Shape {
        max_tokens,
        cache,
        thinking: Thinking::None,
        text_editor: false,
    }
}

/// An SSE body from `(event, data)` pairs.
fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

fn start(input: u64, cache_read: u64, cache_write: u64) -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_1", "role": "assistant",
            "content": [], "usage": {"input_tokens": input, "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_write, "output_tokens": 1}}}),
    )
}

fn block_start(index: u64, block: Value) -> (&'static str, Value) {
    (
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn delta(index: u64, delta: Value) -> (&'static str, Value) {
    (
        "content_block_delta",
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn stop(index: u64) -> (&'static str, Value) {
    (
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    )
}

fn message_delta(reason: &str, usage: Value) -> (&'static str, Value) {
    (
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage}),
    )
}

fn message_stop() -> (&'static str, Value) {
    ("message_stop", json!({"type": "message_stop"}))
}

fn ping() -> (&'static str, Value) {
    ("ping", json!({"type": "ping"}))
}

/// Every event of `body`, fed in chunks of `split` bytes, as the engine would see them.
async fn run(body: String, split: usize) -> Vec<Result<ModelEvent, ModelError>> {
    let bytes = body.into_bytes();
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(split)
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    reply(stream::iter(chunks)).collect().await
}

fn text_of(events: &[Result<ModelEvent, ModelError>]) -> (String, String) {
    let mut text = String::new();
    let mut reasoning = String::new();
    for event in events.iter().flatten() {
        match event {
            ModelEvent::TextDelta(delta) => text.push_str(delta),
            ModelEvent::ReasoningDelta(delta) => reasoning.push_str(delta),
            _ => {}
        }
    }
    (text, reasoning)
}

#[tokio::test]
async fn text_reply_with_pings_and_usage_split_anywhere() {
    let body = sse(&[
        start(10, 1000, 50),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Hello, "})),
        ping(),
        delta(0, json!({"type": "text_delta", "text": "wörld."})),
        stop(0),
        message_delta("end_turn", json!({"output_tokens": 12})),
        message_stop(),
    ]);
    for split in [1, 7, body.len()] {
        let events = run(body.clone(), split).await;
        assert_eq!(text_of(&events).0, "Hello, wörld.", "split {split}");
        let tail: Vec<_> = events.iter().rev().take(2).cloned().collect();
        assert_eq!(
            tail,
            vec![
                Ok(ModelEvent::Finished(FinishReason::Stop)),
                Ok(ModelEvent::Usage(TurnUsage {
                    input_tokens: 1060,
                    cached_input_tokens: 1000,
                    cache_write_input_tokens: 50,
                    output_tokens: 12,
                    reasoning_tokens: 0,
                })),
            ]
        );
    }
}

#[tokio::test]
async fn thinking_then_tool_call_with_split_input() {
    let body = sse(&[
        start(5, 0, 0),
        block_start(0, json!({"type": "thinking", "thinking": ""})),
        delta(0, json!({"type": "thinking_delta", "thinking": "Look at "})),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "the file."}),
        ),
        delta(0, json!({"type": "signature_delta", "signature": "c2ln"})),
        stop(0),
        block_start(1, json!({"type": "redacted_thinking", "data": "b3BhcXVl"})),
        stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}),
        ),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"path\": \"src/"}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "main.rs\"}"}),
        ),
        stop(2),
        block_start(
            3,
            json!({"type": "tool_use", "id": "toolu_2", "name": "list", "input": {}}),
        ),
        delta(3, json!({"type": "input_json_delta", "partial_json": ""})),
        stop(3),
        message_delta("tool_use", json!({"output_tokens": 40})),
        message_stop(),
    ]);
    let events: Vec<ModelEvent> = run(body, 13).await.into_iter().flatten().collect();
    let calls: Vec<&ToolCall> = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::ToolCall(call) => Some(call),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            &ToolCall {
                id: "toolu_1".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"src/main.rs\"}".into(),
            },
            &ToolCall {
                id: "toolu_2".into(),
                name: "list".into(),
                arguments: "{}".into(),
            },
        ]
    );
    let deltas: Vec<(usize, Option<String>, String)> = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::ToolCallDelta {
                index,
                name,
                arguments,
            } => Some((*index, name.clone(), arguments.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(deltas[0], (0, Some("read_file".into()), String::new()));
    assert_eq!(
        deltas.last(),
        Some(&(1, Some("list".into()), String::new()))
    );
    let reasoning: String = events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::ReasoningDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "Look at the file.");
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Finished(FinishReason::ToolCalls))
    );
}

#[tokio::test]
async fn stop_reasons_map_to_finish_reasons() {
    for (wire, reason) in [
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("model_context_window_exceeded", FinishReason::Length),
        ("refusal", FinishReason::ContentFilter),
        ("pause_turn", FinishReason::Paused),
        ("something_new", FinishReason::Other("something_new".into())),
    ] {
        let body = sse(&[
            start(1, 0, 0),
            message_delta(wire, json!({})),
            message_stop(),
        ]);
        let events = run(body, 64).await;
        assert_eq!(
            events.last(),
            Some(&Ok(ModelEvent::Finished(reason))),
            "{wire}"
        );
    }
}

#[tokio::test]
async fn a_refusal_shows_its_stop_details() {
    let body = sse(&[
        start(1, 0, 0),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "refusal",
                "stop_details": {"type": "refusal", "explanation": "policy says no"}}}),
        ),
        message_stop(),
    ]);
    let events = run(body, 64).await;
    assert!(text_of(&events).0.contains("policy says no"), "{events:?}");
}

#[tokio::test]
async fn message_delta_corrects_the_input_counts() {
    let body = sse(&[
        start(0, 0, 0),
        message_delta(
            "end_turn",
            json!({"input_tokens": 30, "cache_read_input_tokens": 70, "output_tokens": 5}),
        ),
        message_stop(),
    ]);
    let events = run(body, 64).await;
    assert!(events.contains(&Ok(ModelEvent::Usage(TurnUsage {
        input_tokens: 100,
        cached_input_tokens: 70,
        cache_write_input_tokens: 0,
        output_tokens: 5,
        reasoning_tokens: 0,
    }))));
}

#[tokio::test]
async fn unknown_and_server_tool_blocks_do_not_break_the_reply() {
    let body = sse(&[
        start(1, 0, 0),
        block_start(
            0,
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        ),
        delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "{\"query\":\"x\"}"}),
        ),
        stop(0),
        block_start(1, json!({"type": "web_search_tool_result", "content": []})),
        stop(1),
        block_start(2, json!({"type": "brand_new_block"})),
        delta(2, json!({"type": "brand_new_delta", "x": 1})),
        stop(2),
        ("future_event", json!({"type": "future_event"})),
        block_start(3, json!({"type": "text", "text": "Found it."})),
        stop(3),
        message_delta("end_turn", json!({"output_tokens": 3})),
        message_stop(),
    ]);
    let events = run(body, 64).await;
    assert_eq!(text_of(&events).0, "Found it.");
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, Ok(ModelEvent::ToolCall(_)))),
        "a server tool is never run by jucode: {events:?}"
    );
    assert_eq!(
        events.last(),
        Some(&Ok(ModelEvent::Finished(FinishReason::Stop)))
    );
}

#[tokio::test]
async fn overload_mid_stream_and_a_cut_stream_are_transient() {
    let body = sse(&[
        start(1, 0, 0),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let events = run(body, 64).await;
    match events.last() {
        Some(Err(err)) => {
            assert_eq!(err.retry, Retry::After(None));
            assert!(err.message.contains("Overloaded"), "{}", err.message);
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let body = sse(&[
        start(1, 0, 0),
        block_start(0, json!({"type": "text", "text": "partial"})),
    ]);
    let events = run(body, 64).await;
    assert!(
        matches!(events.last(), Some(Err(err)) if err.retry == Retry::After(None)),
        "{events:?}"
    );
    let body = sse(&[
        start(1, 0, 0),
        (
            "error",
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
        ),
    ]);
    let events = run(body, 64).await;
    assert!(matches!(events.last(), Some(Err(err)) if err.retry == Retry::Never));
}

#[tokio::test]
async fn a_second_message_start_is_an_error() {
    let body = sse(&[start(1, 0, 0), start(1, 0, 0), message_stop()]);
    let events = run(body, 64).await;
    assert!(matches!(events.last(), Some(Err(_))), "{events:?}");
}

#[test]
fn status_errors_honour_x_should_retry_and_retry_after() {
    let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let err = status_error(529, &HeaderMap::new(), body);
    assert_eq!(err.message, "HTTP 529: Overloaded");
    assert_eq!(err.retry, Retry::After(None));
    let mut headers = HeaderMap::new();
    headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
    let err = status_error(429, &headers, body);
    assert_eq!(err.retry, Retry::After(Some(Duration::from_millis(1500))));
    headers.insert("x-should-retry", HeaderValue::from_static("false"));
    assert_eq!(status_error(429, &headers, body).retry, Retry::Never);
    let mut headers = HeaderMap::new();
    headers.insert("x-should-retry", HeaderValue::from_static("true"));
    assert_eq!(status_error(400, &headers, body).retry, Retry::After(None));
    assert_eq!(
        status_error(400, &HeaderMap::new(), body).retry,
        Retry::Never
    );
}

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name} tool"),
        parameters: json!({"type": "object", "properties": {}}),
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "read_file".into(),
        arguments: "{\"path\":\"a\"}".into(),
    }
}

#[test]
fn body_places_three_breakpoints_and_merges_tool_results() {
    let messages = vec![
        Message::User {
            text: "look".into(),
            images: vec![ImageData {
                mime: "image/png",
                base64: "iVBO".into(),
            }],
        },
        Message::Assistant {
            provider_items: None,
            text: String::new(),
            reasoning: "hidden".into(),
            tool_calls: vec![call("t1"), call("t2")],
        },
        Message::Tool {
            call_id: "t1".into(),
            name: "read_file".into(),
            output: "one".into(),
            is_error: false,
            card: Default::default(),
        },
        Message::Tool {
            call_id: "t2".into(),
            name: "read_file".into(),
            output: "two".into(),
            is_error: true,
            card: Default::default(),
        },
    ];
    let request = ChatRequest::from_messages(
        "claude-x",
        "Be brief.",
        messages,
        vec![tool("a"), tool("b")],
    );
    let body = request_body(&request, &shape(1000, CacheSetting::FiveMinutes));
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(body["max_tokens"], json!(1000));
    assert_eq!(body["system"][0]["cache_control"], ephemeral);
    assert!(body["tools"][0].get("cache_control").is_none());
    assert_eq!(body["tools"][1]["cache_control"], ephemeral);
    assert_eq!(body["tools"][1]["input_schema"]["type"], json!("object"));
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[0]["content"][0],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}})
    );
    assert_eq!(
        messages[1]["content"][1],
        json!({"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "a"}})
    );
    assert_eq!(messages[2]["role"], json!("user"));
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "two", "is_error": true,
             "cache_control": ephemeral},
        ])
    );
    let marks = body.to_string().matches("cache_control").count();
    assert_eq!(marks, 3);
    let plain = request_body(&request, &shape(1000, CacheSetting::Off));
    assert!(!plain.to_string().contains("cache_control"));
}

/// The cache is only read when each request starts with exactly the bytes of the
/// previous one up to its last breakpoint; over a long session nothing may drift.
#[test]
fn twenty_turns_keep_a_byte_identical_prefix() {
    let mut messages = Vec::new();
    let mut previous: Option<String> = None;
    for turn in 0..20 {
        messages.push(Message::User {
            text: format!("question {turn}"),
            images: Vec::new(),
        });
        let mut request = ChatRequest::from_messages(
            "claude-x",
            "System prompt.",
            messages.clone(),
            vec![tool("read_file")],
        );
        request.provider = "anthropic".into();
        request.reasoning_effort = Some("medium".into());
        let thinking = Shape {
            thinking: Thinking::Budget,
            ..shape(4096, CacheSetting::FiveMinutes)
        };
        let body = request_body(&request, &thinking);
        // Every earlier reply's signed thinking is there, verbatim, before its call.
        for earlier in 0..turn {
            let block = json!({"type": "thinking", "thinking": format!("think {earlier}"),
                "signature": format!("sig{earlier}")});
            let assistant = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| {
                    m["content"]
                        .to_string()
                        .contains(&format!("answer {earlier}\""))
                })
                .unwrap();
            assert_eq!(assistant["content"][0], block, "turn {turn}");
        }
        if let Some(previous) = &previous {
            // What the previous request cached ends at its last breakpoint, on its
            // last message block; without that marker it must reappear unchanged.
            let mut previous: Value = serde_json::from_str(previous).unwrap();
            let before = previous["messages"].as_array_mut().unwrap();
            let last = before.last_mut().unwrap()["content"]
                .as_array_mut()
                .unwrap()
                .last_mut()
                .unwrap();
            assert!(
                last.as_object_mut()
                    .unwrap()
                    .remove("cache_control")
                    .is_some()
            );
            let now = body["messages"].as_array().unwrap();
            for (index, message) in before.iter().enumerate() {
                assert_eq!(
                    message.to_string(),
                    now[index].to_string(),
                    "turn {turn}: message {index} changed"
                );
            }
            for key in ["model", "system", "tools", "thinking"] {
                assert_eq!(previous[key].to_string(), body[key].to_string(), "{key}");
            }
        }
        let encoded = body.to_string();
        previous = Some(encoded);
        let block = json!({"type": "thinking", "thinking": format!("think {turn}"),
            "signature": format!("sig{turn}")});
        messages.push(Message::Assistant {
            provider_items: Some(Arc::new(ProviderItems {
                api: API.into(),
                provider: "anthropic".into(),
                model: "claude-x".into(),
                items: vec![kept(0, block)],
            })),
            text: format!("answer {turn}"),
            reasoning: String::new(),
            tool_calls: if turn % 3 == 0 {
                vec![call(&format!("c{turn}"))]
            } else {
                Vec::new()
            },
        });
        if turn % 3 == 0 {
            messages.push(Message::Tool {
                call_id: format!("c{turn}"),
                name: "read_file".into(),
                output: format!("output {turn}"),
                is_error: false,
                card: Default::default(),
            });
        }
    }
}

#[tokio::test]
async fn a_whole_request_over_loopback() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    let reply_body = sse(&[
        start(3, 0, 0),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "hi"})),
        stop(0),
        message_delta("end_turn", json!({"output_tokens": 1})),
        message_stop(),
    ]);
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "client closed before sending the whole request");
            received.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&received);
            if let Some(head_end) = text.find("\r\n\r\n") {
                let length = text[..head_end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if received.len() >= head_end + 4 + length {
                    break;
                }
            }
        }
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{reply_body}",
            reply_body.len()
        );
        socket.write_all(response.as_bytes()).await.unwrap();
        socket.shutdown().await.unwrap();
        String::from_utf8(received).unwrap()
    });
    let client = AnthropicClient::new("anthropic", &base_url).api_key(Some("sk-ant".into()));
    let request = ChatRequest::from_messages(
        "claude-x",
        "",
        vec![Message::User {
            text: "hello".into(),
            images: Vec::new(),
        }],
        Vec::new(),
    );
    let events: Vec<_> = client.stream(&request).await.unwrap().collect().await;
    assert_eq!(text_of(&events).0, "hi");
    let received = server.await.unwrap().to_lowercase();
    assert!(received.starts_with("post /v1/messages "), "{received}");
    assert!(received.contains("x-api-key: sk-ant\r\n"), "{received}");
    assert!(
        received.contains(&format!("anthropic-version: {ANTHROPIC_VERSION}\r\n")),
        "{received}"
    );
    assert!(!received.contains("authorization:"), "{received}");
}

/// The recorded streams of `../shared/streams/anthropic` (next to the checkout, not in
/// it: they are others' recordings and are not copied in). A clean clone has no such
/// folder, and the test then says it was skipped.
#[tokio::test]
async fn recorded_streams_give_what_expected_json_says() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(folder) = manifest
        .ancestors()
        .map(|dir| dir.join("shared/streams/anthropic"))
        .find(|dir| dir.join("expected.json").is_file())
    else {
        eprintln!("skipped: no shared/streams/anthropic beside the checkout");
        return;
    };
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("expected.json")).unwrap())
            .unwrap();
    for (name, want) in expected.as_object().unwrap() {
        let body = std::fs::read_to_string(folder.join(format!("{name}.sse"))).unwrap();
        // Through the client over loopback, each event sent as recorded: the same events.
        let (base, server) = crate::providers::tests::serve_events(&body).await;
        let client = AnthropicClient::new("anthropic", &base).api_key(Some("k".into()));
        let request = ChatRequest::from_messages(
            "claude-x",
            "",
            vec![Message::User {
                text: "hi".into(),
                images: vec![],
            }],
            vec![],
        );
        let over_http: Vec<_> = client.stream(&request).await.unwrap().collect().await;
        server.await.unwrap();
        assert_eq!(
            over_http,
            run(body.clone(), body.len().max(1)).await,
            "{name}"
        );
        for split in [5, 61, body.len().max(1)] {
            let events = run(body.clone(), split).await;
            let (text, reasoning) = text_of(&events);
            assert!(
                text.starts_with(want["text"].as_str().unwrap()),
                "{name}: {text}"
            );
            let thinking: String = want["thinking"]
                .as_array()
                .unwrap()
                .iter()
                .map(|block| block["text"].as_str().unwrap())
                .collect();
            assert_eq!(reasoning, thinking, "{name}");
            // Each thinking block is kept whole, with its signature, to be resent.
            let signatures: Vec<u64> = items_of(&events)
                .iter()
                .filter(|item| item["type"] == "thinking")
                .map(|item| item["signature"].as_str().unwrap().len() as u64)
                .collect();
            let want_signatures: Vec<u64> = want["thinking"]
                .as_array()
                .unwrap()
                .iter()
                .map(|block| block["signature_len"].as_u64().unwrap())
                .collect();
            assert_eq!(signatures, want_signatures, "{name}");
            let servers: Vec<Value> = items_of(&events)
                .into_iter()
                .filter(|item| item["type"] == "server_tool_use")
                .map(|item| json!({"id": item["id"], "name": item["name"], "input": item["input"]}))
                .collect();
            assert_eq!(Value::Array(servers), want["server_tools"], "{name}");
            let calls: Vec<Value> = events
                .iter()
                .flatten()
                .filter_map(|event| match event {
                    ModelEvent::ToolCall(call) => Some(json!({
                        "id": call.id,
                        "name": call.name,
                        "input": serde_json::from_str::<Value>(&call.arguments).unwrap(),
                    })),
                    _ => None,
                })
                .collect();
            assert_eq!(Value::Array(calls), want["tool_calls"], "{name}");
            if !want["error"].is_null() {
                assert!(
                    matches!(events.last(), Some(Err(err)) if err.retry != Retry::Never),
                    "{name}: {events:?}"
                );
                continue;
            }
            let usage = &want["usage"];
            let count = |key: &str| usage[key].as_u64().unwrap_or(0);
            let input = count("input_tokens")
                + count("cache_creation_input_tokens")
                + count("cache_read_input_tokens");
            assert!(
                events.contains(&Ok(ModelEvent::Usage(TurnUsage {
                    input_tokens: input,
                    cached_input_tokens: count("cache_read_input_tokens"),
                    cache_write_input_tokens: count("cache_creation_input_tokens"),
                    output_tokens: count("output_tokens"),
                    reasoning_tokens: 0,
                }))),
                "{name}: {events:?}"
            );
            let reason = match want["stop_reason"].as_str().unwrap() {
                "end_turn" => FinishReason::Stop,
                "tool_use" => FinishReason::ToolCalls,
                "refusal" => FinishReason::ContentFilter,
                other => panic!("{name}: unexpected stop reason {other}"),
            };
            assert_eq!(
                events.last(),
                Some(&Ok(ModelEvent::Finished(reason))),
                "{name}"
            );
        }
    }
}

#[test]
fn call_ids_of_other_providers_are_made_acceptable_consistently() {
    let messages = vec![
        Message::User {
            text: "go".into(),
            images: Vec::new(),
        },
        Message::Assistant {
            provider_items: None,
            text: "reading".into(),
            reasoning: String::new(),
            tool_calls: vec![ToolCall {
                id: "functions.read_file:0".into(),
                name: "read_file".into(),
                arguments: "not json".into(),
            }],
        },
        Message::Tool {
            call_id: "functions.read_file:0".into(),
            name: "read_file".into(),
            output: "text".into(),
            is_error: false,
            card: Default::default(),
        },
    ];
    let body = request_body(
        &ChatRequest::from_messages("claude-x", "", messages, Vec::new()),
        &shape(100, CacheSetting::Off),
    );
    assert!(body.get("system").is_none());
    assert_eq!(
        body["messages"][1]["content"][1],
        json!({"type": "tool_use", "id": "functions_read_file_0", "name": "read_file", "input": {}})
    );
    assert_eq!(
        body["messages"][2]["content"][0]["tool_use_id"],
        json!("functions_read_file_0")
    );
}

fn items_of(events: &[Result<ModelEvent, ModelError>]) -> Vec<Value> {
    events
        .iter()
        .flatten()
        .filter_map(|event| match event {
            ModelEvent::ProviderItem { api, json } => {
                assert_eq!(*api, API);
                Some(serde_json::from_str(json).unwrap())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn thinking_server_and_unknown_blocks_are_kept_whole_in_order() {
    let body = sse(&[
        start(5, 0, 0),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        delta(0, json!({"type": "thinking_delta", "thinking": "Look at "})),
        delta(0, json!({"type": "thinking_delta", "thinking": "it."})),
        delta(0, json!({"type": "signature_delta", "signature": "c2ln"})),
        stop(0),
        block_start(1, json!({"type": "redacted_thinking", "data": "b3BhcXVl"})),
        stop(1),
        block_start(
            2,
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "{\"query\":"}),
        ),
        delta(
            2,
            json!({"type": "input_json_delta", "partial_json": "\"x\"}"}),
        ),
        stop(2),
        block_start(
            3,
            json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result", "url": "u"}]}),
        ),
        stop(3),
        block_start(4, json!({"type": "text", "text": "Found."})),
        stop(4),
        block_start(
            5,
            json!({"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}),
        ),
        stop(5),
        block_start(6, json!({"type": "brand_new_block", "x": 1})),
        stop(6),
        message_delta("tool_use", json!({"output_tokens": 9})),
        message_stop(),
    ]);
    for split in [1, 17, body.len()] {
        let events = run(body.clone(), split).await;
        assert_eq!(
            items_of(&events),
            vec![
                json!({"type": "thinking", "thinking": "Look at it.", "signature": "c2ln"}),
                json!({"type": "redacted_thinking", "data": "b3BhcXVl"}),
                json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}}),
                json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result", "url": "u"}]}),
                json!({"type": "text", "text": "Found."}),
                json!({"type": "brand_new_block", "x": 1}),
            ],
            "split {split}"
        );
        // The unknown block came after the call: the engine sees it there.
        let order: Vec<&str> = events
            .iter()
            .flatten()
            .filter_map(|event| match event {
                ModelEvent::ToolCall(_) => Some("call"),
                ModelEvent::ProviderItem { .. } => Some("item"),
                _ => None,
            })
            .collect();
        assert_eq!(
            order,
            ["item", "item", "item", "item", "item", "call", "item"]
        );
        let notices: Vec<&ModelEvent> = events
            .iter()
            .flatten()
            .filter(|event| matches!(event, ModelEvent::Notice(_)))
            .collect();
        assert_eq!(
            notices,
            [&ModelEvent::Notice(
                "web_search (run by the provider): {\"query\":\"x\"}".into()
            )]
        );
    }
}

fn kept(after_calls: usize, block: Value) -> ProviderItem {
    ProviderItem {
        after_calls,
        json: Arc::from(block.to_string()),
    }
}

fn with_items(provider: &str, model: &str, api: &str, items: Vec<ProviderItem>) -> Message {
    Message::Assistant {
        text: "Reading.".into(),
        reasoning: "Look at it.".into(),
        tool_calls: vec![call("t1"), call("t2")],
        provider_items: Some(Arc::new(ProviderItems {
            api: api.into(),
            provider: provider.into(),
            model: model.into(),
            items,
        })),
    }
}

fn results() -> Vec<Message> {
    ["t1", "t2"]
        .into_iter()
        .map(|id| Message::Tool {
            call_id: id.into(),
            name: "read_file".into(),
            output: "x".into(),
            is_error: false,
            card: Default::default(),
        })
        .collect()
}

#[test]
fn own_blocks_are_resent_verbatim_before_their_calls_and_others_dropped() {
    let thinking = json!({"type": "thinking", "thinking": "Look at it.", "signature": "c2ln"});
    let redacted = json!({"type": "redacted_thinking", "data": "b3BhcXVl"});
    let between = json!({"type": "thinking", "thinking": "Now the second.", "signature": "c2lnMg"});
    let items = vec![
        kept(0, thinking.clone()),
        kept(0, redacted.clone()),
        kept(1, between.clone()),
    ];
    let mut messages = vec![Message::User {
        text: "read".into(),
        images: vec![],
    }];
    messages.push(with_items("anthropic", "claude-x", API, items.clone()));
    messages.extend(results());
    let mut request = ChatRequest::from_messages("claude-x", "", messages, vec![]);
    request.provider = "anthropic".into();
    let body = request_body(&request, &shape(1000, CacheSetting::FiveMinutes));
    let content = &body["messages"][1]["content"];
    assert_eq!(
        content,
        &json!([
            thinking,
            redacted,
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
            between,
            {"type": "tool_use", "id": "t2", "name": "read_file", "input": {"path": "a"}},
        ])
    );
    // Another model, another provider or another API's items: dropped, not converted.
    for (provider, model, api) in [
        ("anthropic", "claude-y", API),
        ("other", "claude-x", API),
        ("anthropic", "claude-x", "openai-responses"),
    ] {
        let mut messages = vec![Message::User {
            text: "read".into(),
            images: vec![],
        }];
        messages.push(with_items(provider, model, api, items.clone()));
        messages.extend(results());
        let mut request = ChatRequest::from_messages("claude-x", "", messages, vec![]);
        request.provider = "anthropic".into();
        let body = request_body(&request, &shape(1000, CacheSetting::FiveMinutes));
        let types: Vec<&str> = body["messages"][1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|block| block["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            ["text", "tool_use", "tool_use"],
            "{provider} {model} {api}"
        );
    }
}

#[test]
fn a_paused_reply_is_sent_back_as_the_last_assistant_turn_without_a_breakpoint_on_thinking() {
    let thinking = json!({"type": "thinking", "thinking": "t", "signature": "s"});
    let messages = vec![
        Message::User {
            text: "search".into(),
            images: vec![],
        },
        Message::Assistant {
            text: String::new(),
            reasoning: String::new(),
            tool_calls: vec![],
            provider_items: Some(Arc::new(ProviderItems {
                api: API.into(),
                provider: "anthropic".into(),
                model: "claude-x".into(),
                items: vec![kept(0, thinking.clone())],
            })),
        },
    ];
    let mut request = ChatRequest::from_messages("claude-x", "", messages, vec![]);
    request.provider = "anthropic".into();
    let body = request_body(&request, &shape(1000, CacheSetting::FiveMinutes));
    assert_eq!(body["messages"][1]["role"], json!("assistant"));
    assert_eq!(body["messages"][1]["content"], json!([thinking]));
    assert!(!body["messages"].to_string().contains("cache_control"));
}

#[test]
fn efforts_become_adaptive_thinking_a_budget_or_nothing() {
    let mut request = ChatRequest::from_messages(
        "claude-x",
        "",
        vec![Message::User {
            text: "hi".into(),
            images: vec![],
        }],
        vec![],
    );
    request.reasoning_effort = Some("high".into());
    fn with_on(request: &ChatRequest, thinking: Thinking, max_tokens: u64) -> Value {
        let shape = Shape {
            max_tokens,
            cache: CacheSetting::FiveMinutes,
            thinking,
            text_editor: false,
        };
        request_body(request, &shape)
    }
    let with = |thinking, max_tokens| with_on(&request, thinking, max_tokens);
    let adaptive = with(Thinking::Adaptive, 64_000);
    assert_eq!(adaptive["thinking"], json!({"type": "adaptive"}));
    assert_eq!(adaptive["output_config"], json!({"effort": "high"}));
    let budget = with(Thinking::Budget, 64_000);
    assert_eq!(
        budget["thinking"],
        json!({"type": "enabled", "budget_tokens": 32_768})
    );
    assert!(budget.get("output_config").is_none());
    // The budget stays below max_tokens, leaving room for the answer.
    let small = with(Thinking::Budget, 8_192);
    assert_eq!(small["thinking"]["budget_tokens"], json!(6_144));
    assert!(with(Thinking::Budget, 1_000).get("thinking").is_none());
    let none = with(Thinking::None, 64_000);
    assert!(none.get("thinking").is_none() && none.get("output_config").is_none());
    request.reasoning_effort = None;
    let unasked = with_on(&request, Thinking::Adaptive, 64_000);
    assert!(unasked.get("thinking").is_none());
}

#[test]
fn an_hour_long_cache_marks_every_breakpoint_with_its_ttl() {
    let request = ChatRequest::from_messages(
        "claude-x",
        "Be brief.",
        vec![Message::User {
            text: "hi".into(),
            images: vec![],
        }],
        vec![tool("a")],
    );
    let body = request_body(&request, &shape(100, CacheSetting::OneHour));
    let hour = json!({"type": "ephemeral", "ttl": "1h"});
    assert_eq!(body["system"][0]["cache_control"], hour);
    assert_eq!(body["tools"][0]["cache_control"], hour);
    assert_eq!(body["messages"][0]["content"][0]["cache_control"], hour);
}

#[test]
fn a_tool_loop_that_began_without_thinking_finishes_without_it() {
    let thinking = json!({"type": "thinking", "thinking": "t", "signature": "s"});
    let loop_of = |items: Vec<ProviderItem>| {
        let mut messages = vec![Message::User {
            text: "read".into(),
            images: vec![],
        }];
        messages.push(Message::Assistant {
            text: String::new(),
            reasoning: String::new(),
            tool_calls: vec![call("t1")],
            provider_items: Some(Arc::new(ProviderItems {
                api: API.into(),
                provider: "anthropic".into(),
                model: "claude-x".into(),
                items,
            })),
        });
        messages.push(Message::Tool {
            call_id: "t1".into(),
            name: "read_file".into(),
            output: "x".into(),
            is_error: false,
            card: Default::default(),
        });
        let mut request = ChatRequest::from_messages("claude-x", "", messages, vec![]);
        request.provider = "anthropic".into();
        request.reasoning_effort = Some("high".into());
        let shape = Shape {
            thinking: Thinking::Adaptive,
            ..shape(64_000, CacheSetting::FiveMinutes)
        };
        request_body(&request, &shape)
    };
    let signed = loop_of(vec![kept(0, thinking)]);
    assert_eq!(signed["thinking"], json!({"type": "adaptive"}));
    let unsigned = loop_of(vec![]);
    assert!(unsigned.get("thinking").is_none(), "{unsigned}");
    assert!(unsigned.get("output_config").is_none(), "{unsigned}");
}

fn editor_shape(text_editor: bool) -> Shape {
    Shape {
        text_editor,
        ..shape(1000, CacheSetting::Off)
    }
}

#[test]
fn claude_4_gets_its_text_editor_in_place_of_jucode_s_edit_tools() {
    let edit = ToolCall {
        id: "t1".into(),
        name: "edit_file".into(),
        arguments: r#"{"path":"a.rs","old_string":"x","new_string":"y"}"#.into(),
    };
    let write = ToolCall {
        id: "t2".into(),
        name: "write_file".into(),
        arguments: r#"{"path":"b.rs","content":"fn main() {}\n"}"#.into(),
    };
    let messages = vec![
        Message::User {
            text: "edit".into(),
            images: vec![],
        },
        Message::Assistant {
            text: String::new(),
            reasoning: String::new(),
            tool_calls: vec![edit, write],
            provider_items: None,
        },
    ];
    let all = vec![tool("read_file"), tool("edit_file"), tool("write_file")];
    let request = ChatRequest::from_messages("claude-x", "", messages.clone(), all);
    let body = request_body(&request, &editor_shape(true));
    assert_eq!(
        body["tools"],
        json!([
            {"name": "read_file", "description": "read_file tool",
             "input_schema": {"type": "object", "properties": {}}},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        ])
    );
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "tool_use", "id": "t1", "name": "str_replace_based_edit_tool",
             "input": {"command": "str_replace", "path": "a.rs", "old_str": "x", "new_str": "y"}},
            {"type": "tool_use", "id": "t2", "name": "str_replace_based_edit_tool",
             "input": {"command": "create", "path": "b.rs", "file_text": "fn main() {}\n"}},
        ])
    );
    // Not for a model without it, nor where jucode's edit tools are not offered.
    let plain = request_body(&request, &editor_shape(false));
    assert!(!plain.to_string().contains("str_replace_based_edit_tool"));
    let chat = ChatRequest::from_messages("claude-x", "", messages, vec![tool("read_file")]);
    let body = request_body(&chat, &editor_shape(true));
    assert!(!body.to_string().contains("str_replace_based_edit_tool"));
}

#[tokio::test]
async fn text_editor_calls_become_jucode_s_own() {
    let editor_call = |index: u64, id: &str, input: Value| {
        let mut events = vec![block_start(
            index,
            json!({"type": "tool_use", "id": id, "name": "str_replace_based_edit_tool", "input": {}}),
        )];
        events.push(delta(
            index,
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
        ));
        events.push(stop(index));
        events
    };
    let mut events = vec![start(1, 0, 0)];
    events.extend(editor_call(
        0,
        "t1",
        json!({"command": "str_replace", "path": "a.rs", "old_str": "x", "new_str": "y"}),
    ));
    events.extend(editor_call(
        1,
        "t2",
        json!({"command": "create", "path": "b.rs", "file_text": "hi\n"}),
    ));
    events.extend(editor_call(
        2,
        "t3",
        json!({"command": "view", "path": "a.rs", "view_range": [3, 5]}),
    ));
    events.extend(editor_call(
        3,
        "t4",
        json!({"command": "view", "path": "a.rs", "view_range": [3, -1]}),
    ));
    events.extend(editor_call(
        4,
        "t5",
        json!({"command": "insert", "path": "a.rs", "insert_line": 1, "insert_text": "z"}),
    ));
    events.push(message_delta("tool_use", json!({"output_tokens": 9})));
    events.push(message_stop());
    let events = run(sse(&events), 64).await;
    let calls: Vec<(String, Value)> = events
        .iter()
        .flatten()
        .filter_map(|event| match event {
            ModelEvent::ToolCall(call) => Some((
                call.name.clone(),
                serde_json::from_str(&call.arguments).unwrap(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "edit_file".to_owned(),
                json!({"path": "a.rs", "old_string": "x", "new_string": "y"})
            ),
            (
                "write_file".to_owned(),
                json!({"path": "b.rs", "content": "hi\n"})
            ),
            (
                "read_file".to_owned(),
                json!({"path": "a.rs", "offset": 3, "limit": 3})
            ),
            ("read_file".to_owned(), json!({"path": "a.rs", "offset": 3})),
            (
                "edit_file".to_owned(),
                json!({"path": "a.rs", "insert_line": 1, "new_string": "z"})
            ),
        ]
    );
}

#[tokio::test]
async fn text_blocks_keep_their_citations_and_go_back_in_place_of_the_text() {
    let citation = json!({"type": "web_search_result_location", "url": "https://example.com",
        "title": "Example", "cited_text": "Rust 2.0", "encrypted_index": "eyJ"});
    let body = sse(&[
        start(1, 0, 0),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Before. "})),
        stop(0),
        block_start(1, json!({"type": "text", "text": "", "citations": []})),
        delta(1, json!({"type": "citations_delta", "citation": citation})),
        delta(1, json!({"type": "text_delta", "text": "Rust 2.0 is out."})),
        stop(1),
        message_delta("end_turn", json!({"output_tokens": 3})),
        message_stop(),
    ]);
    let events = run(body, 16).await;
    assert_eq!(text_of(&events).0, "Before. Rust 2.0 is out.");
    let items = items_of(&events);
    assert_eq!(
        items,
        vec![
            json!({"type": "text", "text": "Before. "}),
            json!({"type": "text", "text": "Rust 2.0 is out.", "citations": [citation]}),
        ]
    );
    let messages = vec![
        Message::User {
            text: "news?".into(),
            images: vec![],
        },
        Message::Assistant {
            text: "Before. Rust 2.0 is out.".into(),
            reasoning: String::new(),
            tool_calls: vec![],
            provider_items: Some(Arc::new(ProviderItems {
                api: API.into(),
                provider: "anthropic".into(),
                model: "claude-x".into(),
                items: items.iter().map(|item| kept(0, item.clone())).collect(),
            })),
        },
        Message::User {
            text: "more".into(),
            images: vec![],
        },
    ];
    let mut request = ChatRequest::from_messages("claude-x", "", messages, vec![]);
    request.provider = "anthropic".into();
    let body = request_body(&request, &shape(1000, CacheSetting::Off));
    assert_eq!(body["messages"][1]["content"], Value::Array(items));
}
