//! Queueing, steering, unqueueing and interrupts while a turn is in flight. Turns are
//! held open with gates the test opens, so every step is ordered by events, not time.

use serde_json::json;

use crate::common::mock::{
    Gate, MockModel, Reply, Step, finish, text, text_reply, tool_call, usage,
};
use crate::common::serve::{Home, Serve, joined, types};

fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    (model, home)
}

/// A reply that streams `first`, waits for `gate`, then finishes with `rest`.
fn gated_reply(first: &str, gate: &Gate, rest: &str) -> Reply {
    Reply::Sse(vec![
        text(first),
        Step::Wait(gate.clone()),
        text(rest),
        finish("stop"),
        usage(10, 2),
        Step::Done,
    ])
}

/// Starts a turn and reads up to its first assistant delta.
fn start_turn(serve: &mut Serve, content: &str) {
    serve.user(content);
    serve.expect(&[
        "user_message",
        "status",
        "connecting",
        "thinking_start",
        "assistant_start",
        "assistant_delta",
    ]);
}

#[test]
fn messages_sent_during_a_turn_are_queued_and_start_by_themselves() {
    let (model, home) = setup();
    let gate = Gate::new();
    model.push(gated_reply("one", &gate, "!"));
    model.push(text_reply(&["two"]));
    model.push(text_reply(&["three"]));
    let mut serve = Serve::ready(&home);
    start_turn(&mut serve, "first");

    serve.user("second");
    let events = serve.expect(&["pending_messages", "status"]);
    assert_eq!(events[0]["messages"], json!(["second"]));
    assert_eq!(events[1]["message"], "queued: 1");
    serve.user("third");
    let events = serve.expect(&["pending_messages", "status"]);
    assert_eq!(events[0]["messages"], json!(["second", "third"]));
    assert_eq!(events[1]["message"], "queued: 2");

    gate.open();
    let first = serve.until_ready();
    assert_eq!(first.last().unwrap()["message"], "ready");
    let pending = serve.expect_one("pending_messages");
    assert_eq!(pending["messages"], json!(["third"]));
    let second = serve.until_ready();
    assert_eq!(second[0]["type"], "user_message");
    assert_eq!(second[0]["content"], "second");
    assert_eq!(joined(&second, "assistant_delta"), "two");
    let pending = serve.expect_one("pending_messages");
    assert_eq!(pending["messages"], json!([]));
    let third = serve.until_ready();
    assert_eq!(third[0]["content"], "third");
    assert_eq!(third.last().unwrap()["message"], "ready");
    assert_eq!(model.request_count(), 3);
}

#[test]
fn unqueue_takes_a_message_back() {
    let (model, home) = setup();
    let gate = Gate::new();
    model.push(gated_reply("one", &gate, "!"));
    let mut serve = Serve::ready(&home);
    start_turn(&mut serve, "first");
    serve.user("b");
    serve.expect(&["pending_messages", "status"]);
    serve.send(json!({"op": "user_message", "content": "c", "files": ["/tmp/c.log"]}));
    serve.expect(&["pending_messages", "status"]);
    serve.user("d");
    serve.expect(&["pending_messages", "status"]);

    serve.send(json!({"op": "unqueue", "index": -1}));
    let events = serve.expect(&["pending_messages", "unqueued"]);
    assert_eq!(events[0]["messages"], json!(["b", "c"]));
    assert_eq!(events[1]["content"], "d");
    assert_eq!(events[1]["images"], json!([]));
    assert!(events[1].get("files").is_none());

    serve.send(json!({"op": "unqueue", "index": 1}));
    let events = serve.expect(&["pending_messages", "unqueued"]);
    assert_eq!(events[0]["messages"], json!(["b"]));
    assert_eq!(events[1]["content"], "c");
    assert_eq!(events[1]["files"], json!(["/tmp/c.log"]));

    serve.send(json!({"op": "unqueue"}));
    let events = serve.expect(&["pending_messages", "unqueued"]);
    assert_eq!(events[0]["messages"], json!([]));
    assert_eq!(events[1]["content"], "b");

    // Nothing left: a no-op, so the next event answers the next op.
    serve.send(json!({"op": "unqueue"}));
    serve.send(json!({"op": "unqueue", "index": 5}));
    serve.send(json!({"op": "agent_runs"}));
    serve.expect_one("agent_runs");
    gate.open();
    let rest = serve.until_ready();
    assert_eq!(rest.last().unwrap()["message"], "ready");
}

#[test]
fn a_steered_message_is_read_before_the_next_request() {
    let (model, home) = setup();
    std::fs::write(home.path().join("a.txt"), "A\n").unwrap();
    let gate = Gate::new();
    model.push(Reply::Sse(vec![
        text("checking"),
        Step::Wait(gate.clone()),
        tool_call(0, "call_1", "read_file", r#"{"path":"a.txt"}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push(text_reply(&["ok, steered"]));
    let mut serve = Serve::ready(&home);
    start_turn(&mut serve, "read a");
    serve.user("also mind b");
    serve.expect(&["pending_messages", "status"]);
    serve.send(json!({"op": "steer", "index": -1}));
    let events = serve.expect(&["status", "pending_messages"]);
    assert_eq!(events[0]["message"], "steering");
    assert_eq!(events[1]["messages"], json!([]));
    gate.open();
    let events = serve.until_ready();
    assert_eq!(
        types(&events)[..6],
        [
            "tool_start",
            "tool_output",
            "user_message",
            "status",
            "connecting",
            "thinking_start"
        ]
    );
    assert_eq!(events[3]["message"], "streaming", "steering is over");
    assert_eq!(events[2]["content"], "also mind b");
    assert_eq!(events.last().unwrap()["message"], "ready");
    let second = &model.wait_requests(2)[1];
    let messages = second.messages();
    assert_eq!(messages[messages.len() - 2]["role"], "tool");
    assert_eq!(
        messages[messages.len() - 1],
        json!({"role": "user", "content": "also mind b"})
    );
    assert_eq!(
        model.request_count(),
        2,
        "the steered message made no turn of its own"
    );
}

#[test]
fn a_message_steered_too_late_runs_as_the_next_turn() {
    let (model, home) = setup();
    let gate = Gate::new();
    model.push(gated_reply("final answer", &gate, "."));
    model.push(text_reply(&["second turn"]));
    let mut serve = Serve::ready(&home);
    start_turn(&mut serve, "first");
    serve.user("late");
    serve.expect(&["pending_messages", "status"]);
    serve.send(json!({"op": "steer"}));
    serve.expect(&["status", "pending_messages"]);
    gate.open();
    let first = serve.until_ready();
    assert_eq!(first.last().unwrap()["message"], "ready");
    let next = serve.until_ready();
    assert!(types(&next).contains(&"user_message"));
    let message = next.iter().find(|e| e["type"] == "user_message").unwrap();
    assert_eq!(message["content"], "late");
    assert_eq!(joined(&next, "assistant_delta"), "second turn");
}

#[test]
fn steer_is_a_no_op_when_idle_or_out_of_range() {
    let (model, home) = setup();
    let gate = Gate::new();
    model.push(gated_reply("x", &gate, "y"));
    model.push(text_reply(&["q answered"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "steer"}));
    serve.send(json!({"op": "interrupt"}));
    start_turn(&mut serve, "first");
    serve.send(json!({"op": "steer"}));
    serve.user("q");
    serve.expect(&["pending_messages", "status"]);
    serve.send(json!({"op": "steer", "index": 3}));
    serve.send(json!({"op": "agent_runs"}));
    serve.expect_one("agent_runs");
    gate.open();
    serve.until_ready();
    // The queued message was not steered: it runs as the next turn.
    let next = serve.until_ready();
    assert!(next.iter().any(|e| e["content"] == "q"), "{next:#?}");
}

#[test]
fn interrupt_stops_the_turn_at_once_and_the_queue_still_runs() {
    let (model, home) = setup();
    let never = Gate::new();
    model.push(gated_reply("partial", &never, "never sent"));
    model.push(text_reply(&["queued one"]));
    let mut serve = Serve::ready(&home);
    start_turn(&mut serve, "first");
    serve.user("next");
    serve.expect(&["pending_messages", "status"]);
    serve.send(json!({"op": "interrupt"}));
    let events = serve.expect(&["info", "status", "pending_messages", "user_message"]);
    assert_eq!(events[0]["message"], "request interrupted");
    assert_eq!(events[1]["message"], "interrupted");
    assert_eq!(events[2]["messages"], json!([]));
    assert_eq!(events[3]["content"], "next");
    let rest = serve.until_ready();
    assert_eq!(joined(&rest, "assistant_delta"), "queued one");
    // The interrupted turn's partial text is part of the conversation.
    let second = &model.wait_requests(2)[1];
    let roles = second.roles();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(second.messages()[2]["content"], "partial");
}

#[test]
fn interrupt_with_index_sends_that_message_next() {
    let (model, home) = setup();
    let never = Gate::new();
    model.push(gated_reply("partial", &never, "never"));
    model.push(text_reply(&["chosen"]));
    model.push(text_reply(&["then b"]));
    let mut serve = Serve::ready(&home);
    start_turn(&mut serve, "first");
    serve.user("b");
    serve.expect(&["pending_messages", "status"]);
    serve.user("c");
    serve.expect(&["pending_messages", "status"]);
    serve.send(json!({"op": "interrupt", "index": -1}));
    let events = serve.expect(&["info", "status", "pending_messages", "user_message"]);
    assert_eq!(events[2]["messages"], json!(["b"]));
    assert_eq!(events[3]["content"], "c");
    serve.until_ready();
    // "b" is still queued and follows.
    let pending = serve.expect_one("pending_messages");
    assert_eq!(pending["messages"], json!([]));
    let next = serve.expect_one("user_message");
    assert_eq!(next["content"], "b");
    serve.until_ready();
}

#[test]
fn interrupt_during_a_tool_call_answers_the_call() {
    let (model, home) = setup();
    let never = Gate::new();
    model.push(Reply::Sse(vec![
        tool_call(0, "call_1", "read_file", r#"{"path":"x"}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push(gated_reply("second request", &never, ""));
    model.push(text_reply(&["after"]));
    let mut serve = Serve::ready(&home);
    serve.user("go");
    serve.until("assistant_delta");
    serve.send(json!({"op": "interrupt"}));
    serve.expect(&["info", "status"]);
    serve.user("again");
    serve.until_ready();
    let third = &model.wait_requests(3)[2];
    let roles = third.roles();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"]
    );
}
