//! Tests of the Responses client: the recorded streams of `shared/streams/responses`
//! (what their `expected.json` says, however the bytes are split), request bodies (the
//! stateless round trip: reasoning items resent before their calls, without ids), the
//! terminal events and their failure codes, and one whole request over loopback.

use std::sync::Arc;

use futures_util::{StreamExt, stream};
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::engine::{ImageData, ProviderItem, ProviderItems, Retry, ToolSpec};

/// An SSE body from events (each JSON carries its `type`, used as the event name).
fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|event| format!("event: {}\ndata: {event}\n\n", str_of(event.get("type"))))
        .collect()
}

async fn run(body: String, split: usize) -> Vec<Result<ModelEvent, ModelError>> {
    let bytes = body.into_bytes();
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(split.max(1))
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

fn calls_of(events: &[Result<ModelEvent, ModelError>]) -> Vec<ToolCall> {
    events
        .iter()
        .flatten()
        .filter_map(|event| match event {
            ModelEvent::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .collect()
}

fn completed(usage: Value) -> Value {
    json!({"type": "response.completed", "response": {"status": "completed", "usage": usage}})
}

#[tokio::test]
async fn recorded_streams_give_what_expected_json_says() {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(folder) = manifest
        .ancestors()
        .map(|dir| dir.join("shared/streams/responses"))
        .find(|dir| dir.join("expected.json").is_file())
    else {
        eprintln!("skipped: no shared/streams/responses beside the checkout");
        return;
    };
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("expected.json")).unwrap())
            .unwrap();
    for (name, want) in expected.as_object().unwrap() {
        let body = std::fs::read_to_string(folder.join(format!("{name}.sse"))).unwrap();
        // Through the client over loopback, each event sent as recorded: the same events.
        let (base, server) = crate::providers::tests::serve_events(&body).await;
        let client =
            ResponsesClient::new("openai", &format!("{base}/v1")).api_key(Some("k".into()));
        let over_http: Vec<_> = client
            .stream(&request(vec![Message::User {
                text: "hi".into(),
                images: vec![],
            }]))
            .await
            .unwrap()
            .collect()
            .await;
        let received = server.await.unwrap();
        assert!(received.starts_with("POST /v1/responses "), "{received}");
        assert_eq!(over_http, run(body.clone(), body.len()).await, "{name}");
        for split in [3, 61, 997, body.len()] {
            let events = run(body.clone(), split).await;
            let (text, reasoning) = text_of(&events);
            assert_eq!(text, want["text"].as_str().unwrap(), "{name} split {split}");
            let summary: Vec<&str> = want["reasoning_summary"]
                .as_array()
                .unwrap()
                .iter()
                .map(|part| part.as_str().unwrap())
                .collect();
            assert_eq!(reasoning, summary.join("\n\n"), "{name}");
            let calls: Vec<Value> = calls_of(&events)
                .iter()
                .map(|call| {
                    let arguments: Value = serde_json::from_str(&call.arguments).unwrap();
                    if arguments.get("input").is_some_and(Value::is_string) && arguments.as_object().unwrap().len() == 1 {
                        json!({"call_id": call.id, "name": call.name, "input": arguments["input"], "custom": true})
                    } else {
                        json!({"call_id": call.id, "name": call.name, "arguments": arguments})
                    }
                })
                .collect();
            assert_eq!(Value::Array(calls), want["calls"], "{name}");
            // Reasoning items kept with the `.done` item's encrypted content, no ids.
            let items = items_of(&events);
            for item in &items {
                assert!(item.get("id").is_none(), "{name}: {item}");
            }
            // Each reasoning item with encrypted content is kept, with that of `.done`.
            let kept: Vec<u64> = want
                .get("reasoning_encrypted_len")
                .and_then(Value::as_u64)
                .filter(|len| *len > 0)
                .into_iter()
                .collect();
            let got: Vec<u64> = items
                .iter()
                .filter(|item| item["type"] == "reasoning")
                .map(|item| item["encrypted_content"].as_str().unwrap().len() as u64)
                .collect();
            assert_eq!(got, kept, "{name}: {items:?}");
            // Each message item is kept too, with its phase, standing for the text.
            let phases: Vec<&Value> = items
                .iter()
                .filter(|item| item["type"] == "message")
                .map(|item| &item["phase"])
                .filter(|phase| !phase.is_null())
                .collect();
            let want_phases: Vec<&Value> = want
                .get("phases")
                .and_then(Value::as_array)
                .map(|phases| phases.iter().collect())
                .unwrap_or_default();
            if !want_phases.is_empty() {
                assert_eq!(phases, want_phases, "{name}");
            }
            let messages = items
                .iter()
                .filter(|item| item["type"] == "message")
                .count();
            let want_messages = want["items"]
                .as_str()
                .unwrap_or("")
                .split_whitespace()
                .filter(|kind| *kind == "message")
                .count();
            assert_eq!(messages, want_messages, "{name}");
            if want["status"] == "failed" {
                match events.last() {
                    Some(Err(err)) => {
                        assert_eq!(err.retry, Retry::Never, "{name}");
                        let message = want["response_error"]["message"].as_str().unwrap();
                        assert!(err.message.contains(message), "{name}: {}", err.message);
                    }
                    other => panic!("{name}: expected an error, got {other:?}"),
                }
                continue;
            }
            let usage = &want["usage"];
            let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap();
            assert!(
                events.contains(&Ok(ModelEvent::Usage(TurnUsage {
                    input_tokens: count("/input_tokens"),
                    cached_input_tokens: count("/input_tokens_details/cached_tokens"),
                    cache_write_input_tokens: 0,
                    output_tokens: count("/output_tokens"),
                    reasoning_tokens: count("/output_tokens_details/reasoning_tokens"),
                }))),
                "{name}: {events:?}"
            );
            let reason = if want["calls"].as_array().unwrap().is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            assert_eq!(
                events.last(),
                Some(&Ok(ModelEvent::Finished(reason))),
                "{name}"
            );
        }
    }
}

/// Events correlated by `output_index`, whatever their item ids say; the `.done`
/// reasoning item is the one kept; a refusal is shown; calls come between items in order.
#[tokio::test]
async fn parallel_calls_by_output_index_with_rotating_ids() {
    let body = sse(&[
        json!({"type": "response.created", "response": {}}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"id": "rs_a", "type": "reasoning", "summary": [], "encrypted_content": "early"}}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "item_id": "x1", "delta": "Plan"}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 1, "item_id": "x2", "delta": "More"}),
        json!({"type": "response.output_item.done", "output_index": 0,
            "item": {"id": "x3", "type": "reasoning", "status": "completed", "summary": [{"type": "summary_text", "text": "Plan"}], "encrypted_content": "final"}}),
        json!({"type": "response.output_item.added", "output_index": 1,
            "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": ""}}),
        json!({"type": "response.output_item.added", "output_index": 2,
            "item": {"id": "fc_2", "type": "function_call", "call_id": "call_2", "name": "grep", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2, "item_id": "y1", "delta": "{\"pattern\":"}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "y2", "delta": "{\"path\":\"a\"}"}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2, "item_id": "y3", "delta": "\"b\"}"}),
        json!({"type": "response.output_item.done", "output_index": 1,
            "item": {"id": "y4", "type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}"}}),
        json!({"type": "response.output_item.done", "output_index": 2,
            "item": {"id": "y5", "type": "function_call", "call_id": "call_2", "name": "grep", "arguments": ""}}),
        json!({"type": "response.output_item.added", "output_index": 3,
            "item": {"id": "ws", "type": "web_search_call", "status": "in_progress"}}),
        json!({"type": "response.output_item.done", "output_index": 3,
            "item": {"id": "ws2", "type": "web_search_call", "status": "completed", "action": {"query": "q"}}}),
        json!({"type": "response.refusal.delta", "output_index": 4, "item_id": "m", "delta": "I can't."}),
        json!({"type": "brand.new.event", "output_index": 9}),
        completed(
            json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 3}}),
        ),
    ]);
    for split in [1, 11, body.len()] {
        let events = run(body.clone(), split).await;
        let (text, reasoning) = text_of(&events);
        assert_eq!(text, "I can't.");
        assert_eq!(reasoning, "Plan\n\nMore");
        assert_eq!(
            calls_of(&events),
            vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a\"}".into()
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "grep".into(),
                    arguments: "{\"pattern\":\"b\"}".into()
                },
            ]
        );
        assert_eq!(
            items_of(&events),
            vec![
                json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan"}], "encrypted_content": "final"}),
                json!({"type": "web_search_call", "action": {"query": "q"}}),
            ]
        );
        let order: Vec<&str> = events
            .iter()
            .flatten()
            .filter_map(|event| match event {
                ModelEvent::ToolCall(_) => Some("call"),
                ModelEvent::ProviderItem { .. } => Some("item"),
                _ => None,
            })
            .collect();
        assert_eq!(order, ["item", "call", "call", "item"]);
        assert_eq!(
            &events[events.len() - 2..],
            &[
                Ok(ModelEvent::Usage(TurnUsage {
                    input_tokens: 10,
                    cached_input_tokens: 4,
                    cache_write_input_tokens: 0,
                    output_tokens: 7,
                    reasoning_tokens: 3,
                })),
                Ok(ModelEvent::Finished(FinishReason::ToolCalls)),
            ]
        );
    }
}

#[tokio::test]
async fn incomplete_failed_and_cut_streams() {
    for (reason, finish) in [
        ("max_output_tokens", FinishReason::Length),
        ("content_filter", FinishReason::ContentFilter),
    ] {
        let body = sse(&[
            json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hal"}),
            json!({"type": "response.incomplete", "response": {"status": "incomplete",
                "incomplete_details": {"reason": reason}, "usage": {"input_tokens": 5, "output_tokens": 9}}}),
        ]);
        let events = run(body, 64).await;
        assert_eq!(
            events.last(),
            Some(&Ok(ModelEvent::Finished(finish))),
            "{reason}"
        );
        assert!(events.contains(&Ok(ModelEvent::Usage(TurnUsage {
            input_tokens: 5,
            cached_input_tokens: 0,
            cache_write_input_tokens: 0,
            output_tokens: 9,
            reasoning_tokens: 0,
        }))));
    }
    let failed = |code: &str, message: &str| {
        sse(&[
            json!({"type": "response.failed", "response": {"status": "failed",
            "error": {"code": code, "message": message}}}),
        ])
    };
    let cases = [
        (
            failed(
                "rate_limit_exceeded",
                "Rate limit reached for gpt-5. Please try again in 1.5s. Visit ...",
            ),
            Retry::After(Some(Duration::from_millis(1500))),
        ),
        (
            failed("rate_limit_exceeded", "Please try again in 20ms."),
            Retry::After(Some(Duration::from_millis(20))),
        ),
        (
            failed("insufficient_quota", "You exceeded your current quota"),
            Retry::Never,
        ),
        (
            failed(
                "context_length_exceeded",
                "Your input exceeds the context window",
            ),
            Retry::Compact,
        ),
        (
            failed("server_error", "An error occurred"),
            Retry::After(None),
        ),
        // No terminal event at all: cut short, worth another attempt.
        (
            sse(&[
                json!({"type": "response.output_text.delta", "output_index": 0, "delta": "par"}),
            ]),
            Retry::After(None),
        ),
    ];
    for (body, retry) in cases {
        let events = run(body.clone(), 64).await;
        match events.last() {
            Some(Err(err)) => assert_eq!(err.retry, retry, "{body}: {}", err.message),
            other => panic!("{body}: expected an error, got {other:?}"),
        }
    }
    let events = run(failed("context_length_exceeded", "too long"), 64).await;
    assert!(
        matches!(events.last(), Some(Err(err)) if err.message.contains("/compact")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_refusal_is_shown_and_ends_as_a_refusal() {
    let streamed = sse(&[
        json!({"type": "response.refusal.delta", "output_index": 0, "delta": "I can't help with that."}),
        completed(json!({"input_tokens": 1, "output_tokens": 1})),
    ]);
    let whole = sse(&[
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message",
            "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}}),
        completed(json!({"input_tokens": 1, "output_tokens": 1})),
    ]);
    for (body, text) in [(streamed, "I can't help with that."), (whole, "No.")] {
        let events = run(body, 64).await;
        assert_eq!(text_of(&events).0, text);
        assert_eq!(
            events.last(),
            Some(&Ok(ModelEvent::Finished(FinishReason::ContentFilter)))
        );
    }
}

#[tokio::test]
async fn a_message_sent_only_as_its_finished_item_is_shown() {
    let body = sse(&[
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message",
            "role": "assistant", "content": [{"type": "output_text", "text": "Whole."}]}}),
        completed(json!({"input_tokens": 1, "output_tokens": 1})),
    ]);
    let events = run(body, 64).await;
    assert_eq!(text_of(&events).0, "Whole.");
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

fn reasoning_item(content: &str) -> Value {
    json!({"type": "reasoning", "summary": [], "encrypted_content": content})
}

fn conversation(provider: &str, model: &str, api: &str) -> Vec<Message> {
    let items = vec![
        ProviderItem {
            after_calls: 0,
            json: Arc::from(reasoning_item("enc-1").to_string()),
        },
        ProviderItem {
            after_calls: 1,
            json: Arc::from(reasoning_item("enc-2").to_string()),
        },
    ];
    vec![
        Message::User {
            text: "look".into(),
            images: vec![ImageData {
                mime: "image/png",
                base64: "iVBO".into(),
            }],
        },
        Message::Assistant {
            text: "Reading.".into(),
            reasoning: "summary".into(),
            tool_calls: vec![call("call_1"), call("call_2")],
            provider_items: Some(Arc::new(ProviderItems {
                api: api.into(),
                provider: provider.into(),
                model: model.into(),
                items,
            })),
        },
        Message::Tool {
            call_id: "call_1".into(),
            name: "read_file".into(),
            output: "one".into(),
            is_error: false,
            card: Default::default(),
        },
        Message::Tool {
            call_id: "call_2".into(),
            name: "read_file".into(),
            output: "two".into(),
            is_error: true,
            card: Default::default(),
        },
    ]
}

fn request(messages: Vec<Message>) -> ChatRequest {
    let mut request =
        ChatRequest::from_messages("gpt-x", "Be brief.", messages, vec![tool("read_file")]);
    request.provider = "openai".into();
    request.reasoning_effort = Some("high".into());
    request.cache_key = Some("session-1".into());
    request
}

#[test]
fn body_is_stateless_with_reasoning_items_before_their_calls() {
    let body = request_body(&request(conversation("openai", "gpt-x", API)), false);
    assert_eq!(body["model"], json!("gpt-x"));
    assert_eq!(body["instructions"], json!("Be brief."));
    assert_eq!(body["store"], json!(false));
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(body["tool_choice"], json!("auto"));
    assert_eq!(body["parallel_tool_calls"], json!(true));
    assert_eq!(body["prompt_cache_key"], json!("session-1"));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "read_file", "description": "read_file tool",
            "parameters": {"type": "object", "properties": {}}, "strict": false}])
    );
    assert_eq!(
        body["input"],
        json!([
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO"}]},
            reasoning_item("enc-1"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]},
            {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}"},
            reasoning_item("enc-2"),
            {"type": "function_call", "call_id": "call_2", "name": "read_file", "arguments": "{\"path\":\"a\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "one"},
            {"type": "function_call_output", "call_id": "call_2", "output": "two"},
        ])
    );
    // Another model's, provider's or API's items are dropped, never converted.
    for (provider, model, api) in [
        ("openai", "gpt-y", API),
        ("other", "gpt-x", API),
        ("openai", "gpt-x", "anthropic"),
    ] {
        let body = request_body(&request(conversation(provider, model, api)), false);
        assert!(
            !body.to_string().contains("enc-"),
            "{provider} {model} {api}"
        );
        assert_eq!(body["input"].as_array().unwrap().len(), 6);
    }
    // Without a key or an effort, neither is sent, nor `include` (which models that do
    // not reason refuse).
    let mut plain = request(conversation("openai", "gpt-x", API));
    plain.cache_key = None;
    plain.reasoning_effort = None;
    let body = request_body(&plain, false);
    assert!(body.get("prompt_cache_key").is_none() && body.get("reasoning").is_none());
    assert!(body.get("include").is_none());
    assert_eq!(body["store"], json!(false));
}

#[test]
fn own_message_items_stand_for_the_text_with_their_phase() {
    let commentary = json!({"type": "message", "role": "assistant", "phase": "commentary",
        "content": [{"type": "output_text", "annotations": [], "text": "Checking."}]});
    let reasoning = reasoning_item("enc-1");
    let messages = vec![
        Message::User {
            text: "is 8 prime?".into(),
            images: vec![],
        },
        Message::Assistant {
            text: "Checking.".into(),
            reasoning: String::new(),
            tool_calls: vec![call("call_1")],
            provider_items: Some(Arc::new(ProviderItems {
                api: API.into(),
                provider: "openai".into(),
                model: "gpt-x".into(),
                items: [&reasoning, &commentary]
                    .into_iter()
                    .map(|item| ProviderItem {
                        after_calls: 0,
                        json: Arc::from(item.to_string()),
                    })
                    .collect(),
            })),
        },
    ];
    let body = request_body(&request(messages), false);
    assert_eq!(
        body["input"].as_array().unwrap()[1..],
        [
            reasoning,
            commentary,
            json!({"type": "function_call", "call_id": "call_1", "name": "read_file",
                "arguments": "{\"path\":\"a\"}"}),
        ]
    );
}

#[tokio::test]
async fn a_whole_request_over_loopback() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = sse(&[
        json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi."}),
        completed(json!({"input_tokens": 3, "output_tokens": 1})),
    ]);
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        // Read the head, then the body its content-length announces.
        let (head_end, length) = loop {
            let n = socket.read(&mut buffer).await.unwrap();
            request.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&request);
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap();
                break (end + 4, length);
            }
        };
        while request.len() < head_end + length {
            let n = socket.read(&mut buffer).await.unwrap();
            request.extend_from_slice(&buffer[..n]);
        }
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(answer.as_bytes()).await.unwrap();
        String::from_utf8(request).unwrap()
    });
    let client =
        ResponsesClient::new("openai", &format!("http://{addr}/v1")).api_key(Some("sk-1".into()));
    let events: Vec<_> = client
        .stream(&request(vec![Message::User {
            text: "hi".into(),
            images: vec![],
        }]))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(text_of(&events).0, "Hi.");
    let request = server.await.unwrap();
    assert!(request.starts_with("POST /v1/responses "), "{request}");
    assert!(
        request
            .to_ascii_lowercase()
            .contains("authorization: bearer sk-1"),
        "{request}"
    );
    let (_, body) = request.split_once("\r\n\r\n").unwrap();
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body["store"], json!(false));
}

#[test]
fn a_used_up_quota_is_not_retried_though_it_comes_as_a_429() {
    let quota = r#"{"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "code": "insufficient_quota"}}"#;
    let error = status_error(429, Some(Duration::from_secs(1)), quota);
    assert_eq!(error.retry, Retry::Never);
    assert_eq!(error.message, "HTTP 429: You exceeded your current quota.");
    let limited = r#"{"error": {"message": "Rate limit reached.", "code": "rate_limit_exceeded"}}"#;
    let error = status_error(429, Some(Duration::from_secs(1)), limited);
    assert_eq!(error.retry, Retry::After(Some(Duration::from_secs(1))));
}

#[test]
fn apply_patch_is_offered_in_place_of_the_edit_tools_and_its_calls_go_back_as_custom_calls() {
    let patch = "*** Begin Patch\n*** Delete File: a\n*** End Patch";
    let messages = vec![
        Message::User {
            text: "patch it".into(),
            images: Vec::new(),
        },
        Message::Assistant {
            text: String::new(),
            reasoning: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "call_p".into(),
                    name: "apply_patch".into(),
                    arguments: json!({ "input": patch }).to_string(),
                },
                call("call_r"),
            ],
            provider_items: None,
        },
        Message::Tool {
            call_id: "call_p".into(),
            name: "apply_patch".into(),
            output: "Success.".into(),
            is_error: false,
            card: Default::default(),
        },
        Message::Tool {
            call_id: "call_r".into(),
            name: "read_file".into(),
            output: "text".into(),
            is_error: false,
            card: Default::default(),
        },
    ];
    let mut request = request(messages);
    request.tools = vec![tool("read_file"), tool("edit_file"), tool("write_file")];
    request.freeform_tools = vec![FreeformTool {
        name: "apply_patch".into(),
        description: "Patch files.".into(),
        grammar: "start: \"x\"",
        replaces: &["edit_file", "write_file"],
    }];
    let body = request_body(&request, true);
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_file", "apply_patch"]);
    assert_eq!(
        body["tools"][1],
        json!({"type": "custom", "name": "apply_patch", "description": "Patch files.",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"x\""}})
    );
    let input = body["input"].as_array().unwrap();
    assert_eq!(
        input[1],
        json!({"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch", "input": patch})
    );
    assert_eq!(input[2]["type"], "function_call");
    assert_eq!(
        input[3],
        json!({"type": "custom_tool_call_output", "call_id": "call_p", "output": "Success."})
    );
    assert_eq!(input[4]["type"], "function_call_output");

    // A model not trained on it, or a request without both edit tools, keeps the JSON
    // tools, and the same call goes back as a function call.
    let plain = request_body(&request, false);
    assert_eq!(plain["tools"].as_array().unwrap().len(), 3);
    assert_eq!(plain["input"][1]["type"], "function_call");
    request.tools.retain(|tool| tool.name != "write_file");
    let partial = request_body(&request, true);
    assert!(
        partial["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|tool| tool["type"] == "function")
    );
}
