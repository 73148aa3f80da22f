//! Model turns against the mock model server: streaming, tools, usage, failures.

use serde_json::{Value, json};

use crate::common::mock::{
    self, Gate, MockModel, Reply, Step, finish, reasoning, text, text_reply, tool_call, tool_reply,
    usage,
};
use crate::common::serve::{Home, Serve, joined, types};

fn setup(extra: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), extra);
    (model, home)
}

#[test]
fn a_streamed_turn_in_the_specified_order() {
    let (model, home) = setup("input_price = 1.0\ncached_input_price = 0.5\noutput_price = 2.0");
    model.push(Reply::Sse(vec![
        reasoning("Let me "),
        reasoning("think."),
        text("Hello"),
        text(", world"),
        finish("stop"),
        usage(100, 20),
        Step::Done,
    ]));
    let mut serve = Serve::ready(&home);
    let session = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user("say hello");
    let events = serve.until_ready();
    assert_eq!(
        types(&events),
        [
            "user_message",
            "status",
            "connecting",
            "thinking_start",
            "reasoning_delta",
            "reasoning_delta",
            "assistant_start",
            "assistant_delta",
            "assistant_delta",
            "usage",
            "context_usage",
            "status"
        ]
    );
    assert_eq!(events[0]["content"], "say hello");
    assert!(events[0].get("files").is_none() && events[0].get("images").is_none());
    assert_eq!(joined(&events, "reasoning_delta"), "Let me think.");
    assert_eq!(joined(&events, "assistant_delta"), "Hello, world");
    assert_eq!(events[1]["message"], "streaming");
    assert_eq!(events[9]["input_tokens"], 100);
    assert_eq!(events[9]["cached_input_tokens"], 50);
    assert_eq!(events[9]["output_tokens"], 20);
    assert_eq!(events[9]["reasoning_tokens"], 4);
    let context = &events[10];
    assert_eq!(context["tokenizer"], "o200k");
    assert!(context["tokens"].as_u64().unwrap() > 50, "{context}");
    let cost = context["cost"].as_f64().unwrap();
    let expected = (50.0 * 1.0 + 50.0 * 0.5 + 20.0 * 2.0) / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
    assert_eq!(events[11]["message"], "ready");
    for event in &events {
        assert_eq!(event["session"], session.as_str());
    }

    let requests = model.wait_requests(1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.header("authorization"), Some("Bearer test-key"));
    assert_eq!(request.body["model"], "mock-1");
    assert_eq!(request.body["stream"], true);
    assert_eq!(request.body["stream_options"]["include_usage"], true);
    assert_eq!(request.messages()[0]["role"], "system");
    assert_eq!(
        request.last_message(),
        &json!({"role": "user", "content": "say hello"})
    );
    let tools = request.tool_names();
    for name in ["read_file", "list_dir", "grep"] {
        assert!(tools.contains(&name), "{tools:?}");
    }

    // The second turn carries the first, and the cost accumulates.
    model.push(text_reply(&["again"]));
    serve.user("once more");
    let events = serve.until_ready();
    let context = events
        .iter()
        .find(|e| e["type"] == "context_usage")
        .unwrap();
    assert!((context["cost"].as_f64().unwrap() - 2.0 * expected).abs() < 1e-12);
    let second = &model.wait_requests(2)[1];
    let roles = second.roles();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(second.messages()[2]["content"], "Hello, world");
}

#[test]
fn tool_calls_run_and_their_results_go_back_to_the_model() {
    let (model, home) = setup("");
    std::fs::write(home.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    model.push(Reply::Sse(vec![
        text("Looking."),
        tool_call(0, "call_a", "read_file", r#"{"path":"notes.txt"}"#),
        tool_call(1, "call_b", "grep", r#"{"pattern":"be.a"}"#),
        tool_call(2, "call_c", "read_file", r#"{"path":"missing.txt"}"#),
        tool_call(3, "call_d", "list_dir", r#"{"path": "#),
        tool_call(4, "call_e", "launch_rockets", "{}"),
        finish("tool_calls"),
        usage(10, 5),
        Step::Done,
    ]));
    model.push(text_reply(&["Done."]));
    let mut serve = Serve::ready(&home);
    serve.user("read my notes");
    let events = serve.until_ready();
    assert_eq!(
        types(&events),
        [
            "user_message",
            "status",
            "connecting",
            "thinking_start",
            "assistant_start",
            "assistant_delta",
            "tool_start",
            "tool_output",
            "tool_start",
            "tool_output",
            "tool_start",
            "tool_output",
            "tool_start",
            "tool_output",
            "tool_start",
            "tool_output",
            "connecting",
            "thinking_start",
            "assistant_start",
            "assistant_delta",
            "usage",
            "context_usage",
            "status"
        ]
    );
    let outputs: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_output")
        .collect();
    assert_eq!(outputs[0]["call_id"], "call_a");
    assert_eq!(outputs[0]["name"], "read_file");
    assert_eq!(outputs[0]["is_error"], false);
    let read = outputs[0]["output"].as_str().unwrap();
    assert!(read.contains("alpha") && read.contains("beta"), "{read}");
    assert_eq!(outputs[1]["is_error"], false);
    assert!(
        outputs[1]["output"]
            .as_str()
            .unwrap()
            .contains("notes.txt:2:beta")
    );
    assert_eq!(outputs[2]["is_error"], true);
    assert_eq!(
        outputs[3]["is_error"], true,
        "unparseable arguments: {}",
        outputs[3]
    );
    assert_eq!(outputs[4]["is_error"], true);
    assert!(
        outputs[4]["output"]
            .as_str()
            .unwrap()
            .contains("unknown tool")
    );
    // Usage covers both requests of the turn.
    let usage = events.iter().find(|e| e["type"] == "usage").unwrap();
    assert_eq!(usage["input_tokens"], 110);
    assert_eq!(usage["output_tokens"], 25);

    let second = &model.wait_requests(2)[1];
    let messages = second.messages();
    let assistant = &messages[messages.len() - 6];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"].as_array().unwrap().len(), 5);
    assert_eq!(assistant["tool_calls"][0]["id"], "call_a");
    let results: Vec<&Value> = messages[messages.len() - 5..].iter().collect();
    for (result, id) in results
        .iter()
        .zip(["call_a", "call_b", "call_c", "call_d", "call_e"])
    {
        assert_eq!(result["role"], "tool");
        assert_eq!(result["tool_call_id"], id);
    }
    assert!(results[0]["content"].as_str().unwrap().contains("alpha"));
}

#[test]
fn transient_failures_are_retried_before_anything_is_shown() {
    let (model, home) = setup("");
    model.push(Reply::Status {
        code: 503,
        body: r#"{"error":{"message":"overloaded"}}"#.into(),
        headers: vec![("retry-after".into(), "0".into())],
    });
    model.push(Reply::Sse(vec![Step::Cut]));
    model.push(text_reply(&["fine"]));
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.until_ready();
    assert_eq!(
        types(&events),
        [
            "user_message",
            "status",
            "connecting",
            "retrying",
            "thinking_start",
            "retrying",
            "thinking_start",
            "assistant_start",
            "assistant_delta",
            "usage",
            "context_usage",
            "status"
        ]
    );
    assert_eq!(events[1]["message"], "streaming");
    assert_eq!(events[3]["attempt"], 1);
    // A user waiting on a retry learns why.
    let reason = events[3]["message"].as_str().unwrap();
    assert!(
        reason.contains("503") && reason.contains("overloaded"),
        "{reason}"
    );
    assert_eq!(events[5]["attempt"], 2);
    assert!(
        !events[5]["message"].as_str().unwrap().is_empty(),
        "{:?}",
        events[5]
    );
    assert_eq!(events[11]["message"], "ready");
    assert_eq!(model.request_count(), 3);
}

#[test]
fn a_stream_cut_after_output_ends_the_turn_with_an_error() {
    let (model, home) = setup("");
    // The cut waits until the client has shown the delta, so it cannot overtake it.
    let shown = Gate::new();
    model.push(Reply::Sse(vec![
        text("partial"),
        Step::Wait(shown.clone()),
        Step::Cut,
    ]));
    model.push(text_reply(&["next turn"]));
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    serve.expect(&[
        "user_message",
        "status",
        "connecting",
        "thinking_start",
        "assistant_start",
        "assistant_delta",
    ]);
    shown.open();
    let events = serve.expect(&["error", "status"]);
    assert_eq!(events[1]["message"], "ready");
    assert_eq!(model.request_count(), 1, "no retry once output was shown");
    // The session keeps working and remembers what was shown.
    serve.user("again");
    serve.until_ready();
    let second = &model.wait_requests(2)[1];
    let messages = second.messages();
    assert_eq!(messages[messages.len() - 2]["content"], "partial");
}

#[test]
fn permanent_failures_end_the_turn_with_the_providers_message() {
    let (model, home) = setup("");
    model.push(Reply::Status {
        code: 401,
        body:
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#
                .into(),
        headers: vec![],
    });
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.expect(&["user_message", "status", "connecting", "error", "status"]);
    let message = events[3]["message"].as_str().unwrap();
    assert!(message.contains("Incorrect API key provided"), "{message}");
    assert!(message.contains("401"), "{message}");
    assert_eq!(events[4]["message"], "ready");
    assert_eq!(model.request_count(), 1);
}

#[test]
fn retries_give_up_after_max_retries() {
    let (model, home) = setup("max_retries = 2");
    for _ in 0..3 {
        model.push(Reply::Status {
            code: 500,
            body: "boom".into(),
            headers: vec![],
        });
    }
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.until_ready();
    assert_eq!(
        types(&events),
        [
            "user_message",
            "status",
            "connecting",
            "retrying",
            "retrying",
            "error",
            "status"
        ]
    );
    assert!(events[5]["message"].as_str().unwrap().contains("boom"));
    assert!(events[3]["message"].as_str().unwrap().contains("500"));
    assert_eq!(model.request_count(), 3);
}

#[test]
fn an_idle_stream_times_out_and_is_retried() {
    let (model, home) = setup("stream_idle_timeout_secs = 0.3");
    let never = Gate::new();
    model.push(Reply::Sse(vec![Step::Wait(never)]));
    model.push(text_reply(&["awake"]));
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.until_ready();
    assert_eq!(
        types(&events)[..6],
        [
            "user_message",
            "status",
            "connecting",
            "thinking_start",
            "retrying",
            "thinking_start"
        ]
    );
    let reason = events[4]["message"].as_str().unwrap();
    assert!(reason.contains("sent nothing for 0.3 s"), "{reason}");
    assert_eq!(joined(&events, "assistant_delta"), "awake");
}

#[test]
fn end_of_stream_after_finish_reason_without_done_is_complete() {
    let (model, home) = setup("");
    model.push(Reply::Sse(vec![text("ok"), finish("stop"), usage(3, 1)]));
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.until_ready();
    assert!(!types(&events).contains(&"retrying"), "{events:#?}");
    assert!(!types(&events).contains(&"error"), "{events:#?}");
    assert_eq!(events.last().unwrap()["message"], "ready");
}

#[test]
fn odd_chunks_do_not_break_the_stream() {
    let (model, home) = setup("");
    model.push(Reply::Sse(vec![
        Step::Raw(": keep-alive comment\n\n".into()),
        Step::Raw("data: {not json}\n\n".into()),
        mock::chunk(json!({"role": "assistant"})),
        mock::chunk(json!({"content": null})),
        text("fine"),
        finish("stop"),
        Step::Done,
    ]));
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.until_ready();
    assert_eq!(joined(&events, "assistant_delta"), "fine");
    assert_eq!(events.last().unwrap()["message"], "ready");
}

#[test]
fn replay_script_plays_scripted_replies() {
    let home = Home::new();
    std::fs::write(home.path().join("hello.txt"), "from disk\n").unwrap();
    std::fs::write(
        home.path().join("script.jsonl"),
        concat!(
            r#"{"reasoning":"hmm","text":"Reading it.","tool_calls":[{"name":"read_file","arguments":{"path":"hello.txt"}}],"usage":{"prompt_tokens":10,"completion_tokens":5},"chunk":3}"#,
            "\n",
            r#"{"text":"It says: from disk","usage":{"prompt_tokens":20,"completion_tokens":6}}"#,
            "\n"
        ),
    )
    .unwrap();
    home.write_config(
        "model = \"scripted/any\"\n[providers.scripted]\nkind = \"replay\"\nscript = \"script.jsonl\"\n",
    );
    let mut serve = Serve::ready(&home);
    serve.user("what is in hello.txt?");
    let events = serve.until_ready();
    assert_eq!(joined(&events, "reasoning_delta"), "hmm");
    assert_eq!(
        joined(&events, "assistant_delta"),
        "Reading it.It says: from disk"
    );
    let chunks: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "assistant_delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(chunks[..4], ["Rea", "din", "g i", "t."]);
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert!(output["output"].as_str().unwrap().contains("from disk"));
    let usage = events.iter().find(|e| e["type"] == "usage").unwrap();
    assert_eq!(usage["input_tokens"], 30);
    assert_eq!(usage["output_tokens"], 11);
    assert_eq!(events.last().unwrap()["message"], "ready");
}

#[test]
fn the_offline_demo_streams_reasoning_text_and_a_tool_call() {
    let home = Home::new();
    let mut serve = Serve::ready(&home);
    serve.next();
    serve.user("hello");
    let events = serve.until_ready();
    let kinds = types(&events);
    for expected in [
        "user_message",
        "status",
        "connecting",
        "thinking_start",
        "reasoning_delta",
        "assistant_start",
        "assistant_delta",
        "tool_start",
        "tool_output",
        "usage",
        "context_usage",
    ] {
        assert!(kinds.contains(&expected), "{expected} missing: {kinds:?}");
    }
    assert_eq!(events.last().unwrap()["message"], "ready");
}

#[test]
#[should_panic(expected = "scripted reply was never requested")]
fn the_mock_fails_a_test_that_leaves_a_reply_unused() {
    let model = MockModel::start();
    model.push(text_reply(&["never asked for"]));
}

#[test]
#[should_panic(expected = "requests nobody scripted a reply for")]
fn the_mock_fails_a_test_on_an_unscripted_request() {
    let (model, home) = setup("max_retries = 0");
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    let events = serve.until_ready();
    assert!(types(&events).contains(&"error"), "{events:#?}");
    drop(serve);
    drop(model);
}

#[test]
fn each_tool_describes_its_calls_on_tool_start_and_in_the_transcript() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    std::fs::write(home.path().join("notes.txt"), "a\n").unwrap();
    model.push(tool_reply(
        "r1",
        "read_file",
        json!({"path": "notes.txt", "offset": 1}),
    ));
    model.push(text_reply(&["read it"]));
    let mut serve = Serve::ready(&home);
    serve.user("read the notes");
    let turn = serve.until_ready();
    let start = turn.iter().find(|e| e["type"] == "tool_start").unwrap();
    let path = home.path().join("notes.txt").display().to_string();
    assert_eq!(start["title"], format!("Read {path}"), "{start}");
    assert_eq!(start["kind"], "read");
    assert_eq!(start["path"], path);
    assert_eq!(start["line"], 1);
    assert_eq!(start["activity"], "Reading notes.txt");

    // The history keeps the card (not the status line), also after a restart.
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    let id = turn
        .iter()
        .find_map(|e| e["session"].as_str())
        .unwrap()
        .to_owned();
    let mut again = Serve::builder(&home).arg("--session").arg(&id).start();
    again.skip_startup();
    again.send(json!({"op": "command", "input": "/transcript"}));
    let transcript = again.expect_one("transcript");
    let tool = transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool["title"], format!("Read {path}"), "{tool}");
    assert_eq!(tool["kind"], "read");
    assert!(tool.get("activity").is_none(), "{tool}");
}
