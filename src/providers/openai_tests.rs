//! Tests of the OpenAI client: body encoding, status classification, and whole
//! requests against a loopback HTTP server written here, so nothing leaves the machine.

use std::sync::Arc;

use futures_util::StreamExt;
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::engine::{FinishReason, ImageData, Retry, ToolCall, ToolSpec};
use crate::protocol::TurnUsage;

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest::from_messages("gpt-test", "Be brief.", messages, Vec::new())
}

#[test]
fn body_of_a_plain_request() {
    let body = request_body(&request(vec![user("hi")]), true);
    assert_eq!(
        body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
    let mut bare = request(vec![user("hi")]);
    bare.system = std::sync::Arc::from("");
    let body = request_body(&bare, false);
    assert_eq!(body["messages"], json!([{"role": "user", "content": "hi"}]));
    assert!(body.get("stream_options").is_none());
}

#[test]
fn body_with_images_tools_calls_and_results() {
    let mut req = request(vec![
        Message::User {
            text: "what is this?".into(),
            images: vec![ImageData {
                mime: "image/png",
                base64: Arc::from("iVBOR"),
            }],
        },
        Message::Assistant {
            provider_items: None,
            text: String::new(),
            reasoning: "secret thoughts".into(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"a"}"#.into(),
            }],
        },
        Message::Tool {
            call_id: "call_1".into(),
            name: "read_file".into(),
            output: "contents".into(),
            is_error: false,
            card: Default::default(),
        },
        Message::Assistant {
            provider_items: None,
            text: "Done.".into(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
        },
    ]);
    req.tools = vec![ToolSpec {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }];
    req.reasoning_effort = Some("high".into());
    let body = request_body(&req, true);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}},
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "contents"},
            {"role": "assistant", "content": "Done."},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {
            "name": "read_file",
            "description": "Reads a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        }}])
    );
    assert_eq!(body["reasoning_effort"], json!("high"));
    assert!(!body.to_string().contains("secret thoughts"));
}

#[test]
fn statuses_are_classified() {
    let err = classify_status(
        401,
        None,
        r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#,
    );
    assert_eq!(
        err,
        ModelError::fatal("HTTP 401: Incorrect API key provided")
    );
    let err = classify_status(
        429,
        Some(Duration::from_secs(2)),
        r#"{"error":"slow down"}"#,
    );
    assert_eq!(
        err,
        ModelError::transient("HTTP 429: slow down", Some(Duration::from_secs(2)))
    );
    let err = classify_status(503, None, r#"{"message":"upstream busy"}"#);
    assert_eq!(err, ModelError::transient("HTTP 503: upstream busy", None));
    let err = classify_status(529, None, "");
    assert_eq!(err.retry, Retry::After(None));
    assert_eq!(
        classify_status(502, None, "").message,
        "HTTP 502: Bad Gateway"
    );
    let err = classify_status(400, None, "  <html>bad request</html>\n");
    assert_eq!(err, ModelError::fatal("HTTP 400: <html>bad request</html>"));
    let long = "x".repeat(5000);
    assert!(classify_status(404, None, &long).message.len() < 600);
    for status in [408, 409, 425, 500, 504] {
        assert!(matches!(
            classify_status(status, None, "").retry,
            Retry::After(_)
        ));
    }
    for status in [400, 403, 404, 413, 422] {
        assert_eq!(classify_status(status, None, "").retry, Retry::Never);
    }
}

#[test]
fn retry_after_forms() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 06 Nov 1994 08:49:37
    let headers = |pairs: &[(&'static str, &'static str)]| {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    };
    assert_eq!(retry_after(&headers(&[]), now), None);
    assert_eq!(
        retry_after(&headers(&[("retry-after", "3")]), now),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        retry_after(&headers(&[("retry-after", "1.5")]), now),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        retry_after(
            &headers(&[("retry-after", "9"), ("retry-after-ms", "250")]),
            now
        ),
        Some(Duration::from_millis(250))
    );
    assert_eq!(
        retry_after(
            &headers(&[("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT")]),
            now
        ),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        retry_after(
            &headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]),
            now
        ),
        Some(Duration::ZERO),
        "a date in the past means now"
    );
    assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
    assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
}

fn user(text: &str) -> Message {
    Message::User {
        text: text.into(),
        images: Vec::new(),
    }
}

/// A one-request HTTP server: answers with `response` and hands back what it received.
async fn serve_once(response: String) -> (String, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1/", listener.local_addr().unwrap());
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
        socket.write_all(response.as_bytes()).await.unwrap();
        socket.shutdown().await.unwrap();
        String::from_utf8(received).unwrap()
    });
    (base_url, server)
}

fn sse_response(payloads: &[&str]) -> String {
    let body: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}")
}

#[tokio::test]
async fn streams_a_reply_from_a_loopback_server() {
    let (base_url, server) = serve_once(sse_response(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"list_dir","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
        "[DONE]",
    ]))
    .await;
    let headers = BTreeMap::from([("X-Title".to_owned(), "jucode-test".to_owned())]);
    let client = OpenAiClient::new("local", &base_url)
        .api_key(Some("sk-test".into()))
        .headers(&headers);
    let stream = client.stream(&request(vec![user("hello")])).await.unwrap();
    let events: Vec<_> = stream.map(Result::unwrap).collect().await;
    assert_eq!(
        events,
        vec![
            ModelEvent::TextDelta("Hi".into()),
            ModelEvent::ToolCallDelta {
                index: 0,
                name: Some("list_dir".into()),
                arguments: "{}".into(),
            },
            ModelEvent::ToolCall(ToolCall {
                id: "c1".into(),
                name: "list_dir".into(),
                arguments: "{}".into(),
            }),
            ModelEvent::Usage(TurnUsage {
                input_tokens: 3,
                output_tokens: 2,
                ..TurnUsage::default()
            }),
            ModelEvent::Finished(FinishReason::ToolCalls),
        ]
    );

    let received = server.await.unwrap();
    let (head, body) = received.split_once("\r\n\r\n").unwrap();
    let head = head.to_lowercase();
    assert!(
        head.starts_with("post /v1/chat/completions http/1.1"),
        "{head}"
    );
    assert!(head.contains("authorization: bearer sk-test"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    assert!(head.contains("accept: text/event-stream"), "{head}");
    assert!(head.contains("x-title: jucode-test"), "{head}");
    let body: Value = serde_json::from_str(body).unwrap();
    assert_eq!(body, request_body(&request(vec![user("hello")]), true));
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let (base_url, server) = serve_once(sse_response(&[
        r#"{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}"#,
    ]))
    .await;
    let client = OpenAiClient::new("vllm", &base_url).include_usage(false);
    let events: Vec<_> = client
        .stream(&request(vec![user("x")]))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(events.len(), 2, "{events:?}");
    let received = server.await.unwrap().to_lowercase();
    assert!(!received.contains("authorization"), "{received}");
    assert!(!received.contains("stream_options"), "{received}");
}

#[tokio::test]
async fn overload_is_transient_with_retry_after() {
    let body = r#"{"error":{"message":"overloaded, sorry"}}"#;
    let (base_url, _server) = serve_once(format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let err = OpenAiClient::new("p", &base_url)
        .stream(&request(vec![user("x")]))
        .await
        .err()
        .unwrap();
    assert_eq!(err.retry, Retry::After(Some(Duration::ZERO)));
    assert_eq!(err.message, "HTTP 503: overloaded, sorry");
}

#[tokio::test]
async fn bad_key_is_fatal_with_the_provider_message() {
    let body =
        r#"{"error":{"message":"Incorrect API key provided: sk-bad","code":"invalid_api_key"}}"#;
    let (base_url, _server) = serve_once(format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let err = OpenAiClient::new("p", &base_url)
        .api_key(Some("sk-bad".into()))
        .stream(&request(vec![user("x")]))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err,
        ModelError::fatal("HTTP 401: Incorrect API key provided: sk-bad")
    );
}

#[tokio::test]
async fn cut_stream_and_refused_connection_are_transient() {
    let (base_url, _server) = serve_once(sse_response(&[
        r#"{"choices":[{"delta":{"content":"par"}}]}"#,
    ]))
    .await;
    let items: Vec<_> = OpenAiClient::new("p", &base_url)
        .stream(&request(vec![user("x")]))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(items[0], Ok(ModelEvent::TextDelta("par".into())));
    assert!(matches!(&items[1], Err(err) if err.retry == Retry::After(None)));
    assert_eq!(items.len(), 2);

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let err = OpenAiClient::new("p", &format!("http://{addr}/v1"))
        .stream(&request(vec![user("x")]))
        .await
        .err()
        .unwrap();
    assert_eq!(err.retry, Retry::After(None), "{}", err.message);
    assert_eq!(
        err.message.matches("/v1/chat/completions").count(),
        1,
        "the URL is named once: {}",
        err.message
    );
    assert!(err.message.contains("refused"), "{}", err.message);
}

#[tokio::test]
async fn unusable_client_fails_at_once() {
    let client = OpenAiClient::new("openai", "http://127.0.0.1:9").unusable("no API key");
    let err = client.stream(&request(Vec::new())).await.err().unwrap();
    assert_eq!(err, ModelError::fatal("no API key"));
    let headers = BTreeMap::from([("bad header".to_owned(), "v".to_owned())]);
    let err = OpenAiClient::new("x", "http://127.0.0.1:9")
        .headers(&headers)
        .stream(&request(Vec::new()))
        .await
        .err()
        .unwrap();
    assert!(err.message.contains("[providers.x]"), "{}", err.message);
    assert_eq!(err.retry, Retry::Never);
}

#[tokio::test]
async fn unterminated_last_event_is_not_lost() {
    let (base_url, _server) = serve_once(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n\
         data: {}\n\ndata: [DONE]",
        r#"{"choices":[{"delta":{"content":"hi"}}]}"#
    ))
    .await;
    let items: Vec<_> = OpenAiClient::new("p", &base_url)
        .stream(&request(vec![user("x")]))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(
        items,
        vec![
            Ok(ModelEvent::TextDelta("hi".into())),
            Ok(ModelEvent::Finished(FinishReason::Stop)),
        ]
    );
}

#[tokio::test]
async fn a_non_streamed_json_reply_is_accepted() {
    let body = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"whole","tool_calls":[{"id":"c9","type":"function","function":{"name":"list_dir","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":4,"completion_tokens":1}}"#;
    let (base_url, _server) = serve_once(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let items: Vec<_> = OpenAiClient::new("p", &base_url)
        .stream(&request(vec![user("x")]))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(items[0], ModelEvent::TextDelta("whole".into()));
    assert!(items.contains(&ModelEvent::ToolCall(ToolCall {
        id: "c9".into(),
        name: "list_dir".into(),
        arguments: "{}".into(),
    })));
    assert_eq!(
        items.last(),
        Some(&ModelEvent::Finished(FinishReason::ToolCalls))
    );
}

#[tokio::test]
async fn mistral_parts_in_a_non_streamed_reply() {
    let body = r#"{"object":"chat.completion","model":"magistral-small","choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Count the letters."}]},{"type":"text","text":"Five."}]},"finish_reason":"stop"}]}"#;
    let (base_url, _server) = serve_once(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let items: Vec<_> = OpenAiClient::new("mistral", &base_url)
        .stream(&request(vec![user("x")]))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        items,
        vec![
            ModelEvent::ReasoningDelta("Count the letters.".into()),
            ModelEvent::TextDelta("Five.".into()),
            ModelEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[tokio::test]
async fn a_streamed_refusal_is_the_reply() {
    let (base_url, _server) = serve_once(sse_response(&[
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"refusal":"Not something I can do."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ]))
    .await;
    let items: Vec<_> = OpenAiClient::new("openai", &base_url)
        .stream(&request(vec![user("x")]))
        .await
        .unwrap()
        .map(Result::unwrap)
        .collect()
        .await;
    assert_eq!(
        items,
        vec![
            ModelEvent::TextDelta("Not something I can do.".into()),
            ModelEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[test]
fn a_reply_of_only_provider_items_is_not_sent_as_an_empty_message() {
    let items = crate::engine::ProviderItems {
        api: "openai-responses".into(),
        provider: "openai".into(),
        model: "gpt-x".into(),
        items: vec![crate::engine::ProviderItem {
            after_calls: 0,
            json: "{\"type\":\"reasoning\"}".into(),
        }],
    };
    let body = request_body(
        &request(vec![
            Message::User {
                text: "hi".into(),
                images: vec![],
            },
            Message::Assistant {
                text: String::new(),
                reasoning: "thought".into(),
                tool_calls: vec![],
                provider_items: Some(std::sync::Arc::new(items)),
            },
            Message::User {
                text: "again".into(),
                images: vec![],
            },
        ]),
        true,
    );
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "user"]);
}

#[test]
fn a_prompt_too_long_for_the_window_asks_for_compaction() {
    let openai = r#"{"error": {"message": "This model's maximum context length is 128000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}"#;
    let anthropic = r#"{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}"#;
    for body in [openai, anthropic] {
        let error = classify_status(400, None, body);
        assert_eq!(error.retry, Retry::Compact, "{body}");
        assert!(error.message.starts_with("HTTP 400: "), "{}", error.message);
    }
    let other = r#"{"error": {"message": "bad tool schema", "code": "invalid_value"}}"#;
    assert_eq!(classify_status(400, None, other).retry, Retry::Never);
}
