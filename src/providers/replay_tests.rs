use std::time::Instant;

use futures_util::StreamExt;
use pretty_assertions::assert_eq;

use super::*;
use crate::engine::Retry;

fn request(messages: Vec<Message>) -> ChatRequest {
    ChatRequest::from_messages("demo", "You are jucode.", messages, Vec::new())
}

fn user(text: &str) -> Message {
    Message::User {
        text: text.into(),
        images: Vec::new(),
    }
}

async fn events(
    client: &ReplayClient,
    request: &ChatRequest,
) -> Result<Vec<ModelEvent>, ModelError> {
    let stream = client.stream(request).await?;
    stream.collect::<Vec<_>>().await.into_iter().collect()
}

fn script(lines: &str) -> (tempfile::TempDir, ReplayClient) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replies.jsonl");
    std::fs::write(&path, lines).unwrap();
    (dir, ReplayClient::from_script(path))
}

#[test]
fn split_respects_char_boundaries() {
    let pieces: Vec<_> = split("héllo wörld ✓🙂", 4).collect();
    assert_eq!(pieces, vec!["héll", "o wö", "rld ", "✓🙂"]);
    assert_eq!(split("abc", 0).collect::<Vec<_>>(), vec!["abc"]);
    assert_eq!(split("", 4).count(), 0);
}

#[test]
fn script_parsing_skips_blank_lines_and_names_bad_ones() {
    let path = Path::new("/p/s.jsonl");
    let replies = parse_script(
        path,
        "{\"text\":\"a\"}\n\n  \n{\"error\":\"x\",\"retryable\":true}\n",
    )
    .unwrap();
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0].text.as_deref(), Some("a"));
    assert!(replies[1].retryable);

    let err = parse_script(path, "{\"text\":\"a\"}\n\n{\"txet\":\"typo\"}\n").unwrap_err();
    assert_eq!(err.retry, Retry::Never);
    assert!(
        err.message.starts_with("replay script /p/s.jsonl line 3: "),
        "{}",
        err.message
    );
    assert!(err.message.contains("txet"), "{}", err.message);
    let err = parse_script(path, "not json").unwrap_err();
    assert!(err.message.contains("line 1"), "{}", err.message);
}

#[tokio::test]
async fn events_come_in_order() {
    let (_dir, client) = script(concat!(
        r#"{"reasoning":"think","text":"héllo wörld","chunk":3,"tool_calls":[{"name":"read_file","arguments":{"path":"a"}},{"name":"shell","arguments":"{\"command\":\"ls\"}","id":"mine"},{"name":"noop"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"cached_tokens":4,"reasoning_tokens":1}}"#,
        "\n",
        r#"{"text":"second","tool_calls":[{"name":"noop"}]}"#,
        "\n",
    ));
    let all = events(&client, &request(vec![user("hi")])).await.unwrap();
    // Arguments stream as deltas (by call index) before the complete calls.
    let mut streamed: Vec<(Option<String>, String)> = vec![(None, String::new()); 3];
    for event in &all {
        if let ModelEvent::ToolCallDelta {
            index,
            name,
            arguments,
        } = event
        {
            if name.is_some() {
                streamed[*index].0.clone_from(name);
            }
            streamed[*index].1.push_str(arguments);
        }
    }
    assert_eq!(
        streamed[0],
        (Some("read_file".into()), r#"{"path":"a"}"#.into())
    );
    assert_eq!(
        streamed[1],
        (Some("shell".into()), r#"{"command":"ls"}"#.into())
    );
    assert_eq!(streamed[2], (Some("noop".into()), "{}".into()));
    let got: Vec<ModelEvent> = all
        .into_iter()
        .filter(|event| !matches!(event, ModelEvent::ToolCallDelta { .. }))
        .collect();
    let call = |id: &str, name: &str, arguments: &str| {
        ModelEvent::ToolCall(ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        })
    };
    assert_eq!(
        got,
        vec![
            ModelEvent::ReasoningDelta("thi".into()),
            ModelEvent::ReasoningDelta("nk".into()),
            ModelEvent::TextDelta("hél".into()),
            ModelEvent::TextDelta("lo ".into()),
            ModelEvent::TextDelta("wör".into()),
            ModelEvent::TextDelta("ld".into()),
            call("call_1", "read_file", r#"{"path":"a"}"#),
            call("mine", "shell", r#"{"command":"ls"}"#),
            call("call_2", "noop", "{}"),
            ModelEvent::Usage(TurnUsage {
                input_tokens: 10,
                cached_input_tokens: 4,
                cache_write_input_tokens: 0,
                output_tokens: 5,
                reasoning_tokens: 1,
            }),
            ModelEvent::Finished(FinishReason::ToolCalls),
        ]
    );
    let got = events(&client, &request(vec![user("hi")])).await.unwrap();
    assert_eq!(
        got[3],
        call("call_3", "noop", "{}"),
        "ids stay unique per client"
    );
}

#[tokio::test]
async fn zero_delay_is_immediate_and_text_only_stops() {
    let (_dir, client) = script(&format!(
        "{{\"text\":\"{}\",\"chunk\":1}}\n",
        "x".repeat(2000)
    ));
    let started = Instant::now();
    let got = events(&client, &request(Vec::new())).await.unwrap();
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(got.len(), 2001);
    assert_eq!(got.last(), Some(&ModelEvent::Finished(FinishReason::Stop)));
}

#[tokio::test]
async fn delay_paces_the_deltas() {
    let (_dir, client) = script("{\"text\":\"abcdef\",\"chunk\":2,\"delay_ms\":20}\n");
    let started = Instant::now();
    let got = events(&client, &request(Vec::new())).await.unwrap();
    assert_eq!(got.len(), 4);
    assert!(
        started.elapsed() >= Duration::from_millis(40),
        "two pauses between three deltas"
    );
}

#[tokio::test]
async fn error_lines_and_exhaustion() {
    let (_dir, client) = script(concat!(
        r#"{"error":"overloaded","retryable":true}"#,
        "\n",
        r#"{"error":"bad request"}"#,
        "\n",
        r#"{"text":"ok"}"#,
        "\n",
    ));
    let req = request(Vec::new());
    assert_eq!(
        events(&client, &req).await.unwrap_err(),
        ModelError::transient("overloaded", None)
    );
    assert_eq!(
        events(&client, &req).await.unwrap_err(),
        ModelError::fatal("bad request")
    );
    assert!(events(&client, &req).await.is_ok());
    let err = events(&client, &req).await.unwrap_err();
    assert_eq!(err.retry, Retry::Never);
    assert!(
        err.message
            .contains("replies.jsonl has no reply left: it had 3 replies"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn unreadable_script_names_the_path() {
    let client = ReplayClient::from_script("/definitely/not/here.jsonl");
    let err = events(&client, &request(Vec::new())).await.unwrap_err();
    assert_eq!(err.retry, Retry::Never);
    assert!(
        err.message.contains("/definitely/not/here.jsonl"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn demo_cycles_between_a_tool_call_and_an_explanation() {
    let client = ReplayClient::demo();
    let mut messages = vec![user("what is in here?")];
    let first = events(&client, &request(messages.clone())).await.unwrap();
    assert!(matches!(first[0], ModelEvent::ReasoningDelta(_)));
    let calls: Vec<_> = first
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "list_dir");
    assert_eq!(calls[0].arguments, r#"{"path":"."}"#);
    assert_eq!(
        first.last(),
        Some(&ModelEvent::Finished(FinishReason::ToolCalls))
    );
    let Some(ModelEvent::Usage(usage)) = first.iter().rev().nth(1) else {
        panic!("usage before Finished: {first:?}");
    };
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0);

    messages.push(Message::Assistant {
        provider_items: None,
        text: "Let me look at the project first.".into(),
        reasoning: String::new(),
        tool_calls: calls.clone(),
    });
    messages.push(Message::Tool {
        call_id: calls[0].id.clone(),
        name: "list_dir".into(),
        output: "Cargo.toml\nsrc/\n".into(),
        is_error: false,
        card: Default::default(),
    });
    let second = events(&client, &request(messages.clone())).await.unwrap();
    let text: String = second
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.contains("offline replay demo"), "{text}");
    assert!(text.contains("list_dir"), "{text}");
    assert!(text.contains("docs/configuration.md"), "{text}");
    assert_eq!(
        second.last(),
        Some(&ModelEvent::Finished(FinishReason::Stop))
    );

    messages.push(user("again"));
    let third = events(&client, &request(messages)).await.unwrap();
    assert!(
        third
            .iter()
            .any(|e| matches!(e, ModelEvent::ToolCall(c) if c.name == "list_dir"))
    );
}
