//! The translation rules on event sequences.

use serde_json::{Value, json};

use super::*;
use crate::protocol::UserMessageEvent;

/// What the real tool says of a call of `name` with `args` (in `/p`).
fn told(name: &str, args: &serde_json::Value) -> crate::protocol::CallCard {
    let mut tools = crate::engine::ToolRegistry::new();
    crate::tools::register_all(&mut tools);
    let tool = tools.get(name).expect("a built-in tool");
    tool.describe(args, std::path::Path::new("/p"))
}

fn startup() -> Event {
    Event::Startup {
        version: "0".into(),
        session_id: "0193abcd-0000".into(),
        profile_dir: "/h".into(),
        config_path: "/h/config.toml".into(),
        cwd: "/p".into(),
        model: "mock/m".into(),
        context_window: 1000,
        sandbox: None,
    }
}

fn run(dialect: Dialect, events: &[Event]) -> Vec<Output> {
    let mut translator = Translator::new(dialect);
    events
        .iter()
        .flat_map(|event| translator.handle(event))
        .collect()
}

fn updates(outputs: &[Output]) -> Vec<Value> {
    outputs
        .iter()
        .filter_map(|output| match output {
            Output::Update(update) => Some(serde_json::to_value(update).unwrap()),
            _ => None,
        })
        .collect()
}

fn status(status: SessionStatus) -> Event {
    Event::status(status)
}

fn turn() -> Vec<Event> {
    vec![
        startup(),
        Event::UserMessage(UserMessageEvent {
            content: "hi".into(),
            ..Default::default()
        }),
        status(SessionStatus::Streaming),
        Event::Connecting,
        Event::ReasoningDelta { delta: "hm".into() },
        Event::AssistantStart,
        Event::AssistantDelta { delta: "a".into() },
        Event::AssistantDelta { delta: "b".into() },
        Event::ToolStart {
            call_id: "c1".into(),
            name: "bash".into(),
            arguments: Some(json!({"command": "ls"})),
            card: told("bash", &json!({"command": "ls"})),
        },
        Event::ToolUpdate {
            call_id: "c1".into(),
            name: "bash".into(),
            output: "x\n".into(),
        },
        Event::ToolOutput {
            call_id: "c1".into(),
            name: "bash".into(),
            output: "exit code: 0\nx\n".into(),
            is_error: false,
        },
        Event::AssistantStart,
        Event::AssistantDelta { delta: "c".into() },
        Event::Usage(TurnUsage {
            input_tokens: 10,
            cached_input_tokens: 2,
            cache_write_input_tokens: 4,
            output_tokens: 3,
            reasoning_tokens: 1,
        }),
        Event::ContextUsage {
            tokens: 42,
            tokenizer: "o200k".into(),
            cost: 0.5,
        },
        status(SessionStatus::Ready),
    ]
}

#[test]
fn an_acp_turn_has_stable_message_ids_and_closes_its_card() {
    let outputs = run(Dialect::Acp, &turn());
    let updates = updates(&outputs);
    let kinds: Vec<&str> = updates
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "agent_thought_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "tool_call_update",
            "agent_message_chunk",
            "usage_update"
        ]
    );
    assert_eq!(updates[1]["messageId"], updates[2]["messageId"]);
    assert_ne!(updates[2]["messageId"], updates[6]["messageId"]);
    assert_eq!(updates[3]["kind"], "execute");
    assert_eq!(updates[3]["title"], "ls");
    assert_eq!(updates[3]["status"], "in_progress");
    assert_eq!(updates[3]["rawInput"], json!({"command": "ls"}));
    assert_eq!(updates[5]["status"], "completed");
    assert_eq!(
        updates[7],
        json!({"sessionUpdate":"usage_update","used":42,"size":1000,"cost":{"amount":0.5,"currency":"USD"}})
    );
    assert_eq!(
        outputs.last(),
        Some(&Output::Ended(TurnEnd {
            stop: StopReason::EndTurn,
            error: None
        }))
    );
}

#[test]
fn a_dashboard_turn_reports_states_chunks_and_real_tokens() {
    let updates = updates(&run(Dialect::Dashboard, &turn()));
    let kinds: Vec<&str> = updates
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message",
            "state_update",
            "agent_thought_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call_update",
            "tool_call_content_chunk",
            "tool_call_content_chunk",
            "tool_call_update",
            "agent_message_chunk",
            "usage_update",
            "state_update"
        ]
    );
    assert_eq!(updates[1]["state"], "running");
    assert_eq!(updates[5]["status"], "in_progress");
    // The dashboards' four kinds, kept by the closing update.
    assert_eq!(updates[5]["kind"], "command");
    assert_eq!(updates[8]["kind"], "command");
    // The streamed output, then what of the result it did not show (not all twice).
    assert_eq!(updates[6]["content"]["text"], "x\n");
    assert_eq!(updates[7]["content"]["text"], "exit code: 0\n");
    assert_eq!(updates[8]["status"], "completed");
    assert_eq!(updates[5]["toolCallId"], updates[8]["toolCallId"]);
    assert_eq!(updates[10]["inputTokens"], 10);
    assert_eq!(updates[10]["cachedInputTokens"], 2);
    assert_eq!(updates[10]["cacheWriteInputTokens"], 4);
    assert_eq!(updates[10]["outputTokens"], 3);
    assert_eq!(updates[10]["reasoningTokens"], 1);
    assert_eq!(
        updates[11],
        json!({"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"})
    );
}

#[test]
fn stop_reasons() {
    let end = |events: Vec<Event>| {
        run(Dialect::Acp, &events)
            .into_iter()
            .find_map(|output| match output {
                Output::Ended(end) => Some(end),
                _ => None,
            })
            .unwrap()
    };
    let streaming = || vec![startup(), status(SessionStatus::Streaming)];
    let mut cut = streaming();
    cut.extend([
        Event::reply_stopped(crate::protocol::ReplyStop::MaxTokens),
        status(SessionStatus::Ready),
    ]);
    assert_eq!(end(cut).stop, StopReason::MaxTokens);
    let mut refused = streaming();
    refused.extend([
        Event::reply_stopped(crate::protocol::ReplyStop::Refusal),
        status(SessionStatus::Ready),
    ]);
    assert_eq!(end(refused).stop, StopReason::Refusal);
    // The words alone decide nothing: an `info` that reads the same is a notice.
    let mut lookalike = streaming();
    lookalike.extend([
        Event::info(crate::protocol::notices::REPLY_CUT_OFF),
        status(SessionStatus::Ready),
    ]);
    assert_eq!(end(lookalike).stop, StopReason::EndTurn);
    let mut failed = streaming();
    failed.extend([
        Event::error("model request failed: HTTP 400"),
        status(SessionStatus::Ready),
    ]);
    let failed = end(failed);
    assert_eq!(failed.stop, StopReason::Error);
    assert_eq!(
        failed.error.as_deref(),
        Some("model request failed: HTTP 400")
    );
    let mut interrupted = streaming();
    interrupted.push(status(SessionStatus::Interrupted));
    assert_eq!(end(interrupted).stop, StopReason::Cancelled);
}

#[test]
fn approvals_ask_and_close_and_an_ended_session_closes_everything() {
    let mut translator = Translator::new(Dialect::Dashboard);
    translator.handle(&startup());
    translator.handle(&status(SessionStatus::Streaming));
    translator.handle(&Event::ToolStart {
        call_id: "c1".into(),
        name: "edit_file".into(),
        arguments: Some(json!({"path": "a.rs", "old_string": "x", "new_string": "y"})),
        card: told(
            "edit_file",
            &json!({"path": "a.rs", "old_string": "x", "new_string": "y"}),
        ),
    });
    let asked = translator.handle(&Event::ApprovalRequest {
        call_id: "c1".into(),
        name: "edit_file".into(),
        summary: "edit a.rs (+1 -1)".into(),
        subagent_id: None,
        hunks: None,
    });
    let Output::Ask { ask, .. } = &asked[0] else {
        panic!("{asked:?}")
    };
    let ask = serde_json::to_value(ask).unwrap();
    assert_eq!(ask["toolCall"]["title"], "edit a.rs (+1 -1)");
    assert_eq!(ask["toolCall"]["kind"], "write");
    assert_eq!(
        ask["toolCall"]["content"][0],
        json!({"type":"diff","path":"/p/a.rs","oldText":"x","newText":"y"})
    );
    let ids: Vec<&str> = ask["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    assert_eq!(updates(&asked)[0]["state"], "requires_action");
    let ended = translator.end("the session ended");
    let closed = updates(&ended);
    assert_eq!(closed[0]["status"], "failed");
    assert!(ended.contains(&Output::Closed {
        call_id: "c1".into(),
        resolution: Resolution::Interrupted
    }));
    assert_eq!(closed.last().unwrap()["stopReason"], "cancelled");
    assert!(translator.end("again").is_empty());
}

#[test]
fn a_transcript_is_replayed_once() {
    let mut translator = Translator::new(Dialect::Acp);
    translator.handle(&startup());
    translator.replay_next_transcript = true;
    let transcript = Event::Transcript {
        items: vec![
            crate::protocol::TranscriptItem::User(UserMessageEvent {
                content: "q".into(),
                ..Default::default()
            }),
            crate::protocol::TranscriptItem::Assistant {
                content: "a".into(),
            },
            crate::protocol::TranscriptItem::Tool {
                call_id: "c".into(),
                name: "read_file".into(),
                output: "1\tx".into(),
                is_error: false,
                card: Default::default(),
            },
        ],
    };
    let replayed = updates(&translator.handle(&transcript));
    let kinds: Vec<&str> = replayed
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["user_message_chunk", "agent_message_chunk", "tool_call"]
    );
    assert_eq!(replayed[2]["status"], "completed");
    assert!(translator.handle(&transcript).is_empty());
}

#[test]
fn elicitation_requests_are_declined_in_both_dialects() {
    for dialect in [Dialect::Acp, Dialect::Dashboard] {
        let mut translator = Translator::new(dialect);
        translator.handle(&startup());
        let out = translator.handle(&Event::ElicitationRequest {
            id: "elicit_1".into(),
            server: "notes".into(),
            message: "Who are you?".into(),
            schema: json!({"type": "object", "properties": {}}),
        });
        assert_eq!(
            out,
            [Output::Op(crate::protocol::Op::ElicitationResponse {
                id: "elicit_1".into(),
                action: crate::protocol::ElicitationAction::Decline,
                content: None,
            })]
        );
    }
}

#[test]
fn a_dashboard_reads_every_result_as_chunks_and_a_failed_turn_as_refusal() {
    let mut events = vec![
        startup(),
        status(SessionStatus::Streaming),
        Event::ToolStart {
            call_id: "r1".into(),
            name: "read_file".into(),
            arguments: Some(json!({"path": "a.rs"})),
            card: told("read_file", &json!({"path": "a.rs"})),
        },
        Event::ToolOutput {
            call_id: "r1".into(),
            name: "read_file".into(),
            output: "fn main() {}".into(),
            is_error: false,
        },
        Event::ToolStart {
            call_id: "w1".into(),
            name: "write_file".into(),
            arguments: Some(json!({"path": "b.rs", "content": ""})),
            card: told("write_file", &json!({"path": "b.rs", "content": ""})),
        },
        Event::ToolOutput {
            call_id: "w1".into(),
            name: "write_file".into(),
            output: "wrote b.rs".into(),
            is_error: false,
        },
    ];
    events.extend([
        Event::error("model request failed: HTTP 400"),
        status(SessionStatus::Ready),
    ]);
    let dashboard = updates(&run(Dialect::Dashboard, &events));
    let chunk = |id: &str| {
        dashboard
            .iter()
            .find(|u| u["sessionUpdate"] == "tool_call_content_chunk" && u["toolCallId"] == id)
            .map(|u| u["content"]["text"].clone())
    };
    assert_eq!(chunk("r1"), Some(json!("fn main() {}")));
    assert_eq!(chunk("w1"), Some(json!("wrote b.rs")));
    let kinds: Vec<&Value> = dashboard
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .map(|u| &u["kind"])
        .collect();
    assert_eq!(
        kinds,
        [
            &json!("read"),
            &json!("read"),
            &json!("write"),
            &json!("write")
        ]
    );
    assert_eq!(
        dashboard.last().unwrap(),
        &json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "refusal",
            "message": "model request failed: HTTP 400"})
    );
    // ACP keeps its own kinds, and no chunks.
    let acp = updates(&run(Dialect::Acp, &events));
    assert!(
        acp.iter()
            .all(|u| u["sessionUpdate"] != "tool_call_content_chunk")
    );
    assert_eq!(acp[0]["kind"], "read");
    assert!(
        acp.iter()
            .filter(|u| u["sessionUpdate"] == "tool_call")
            .any(|u| u["kind"] == "edit")
    );
}
