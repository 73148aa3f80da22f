//! Tools that change things, behind approvals: the mode table cell by cell, answers and
//! their validation, partial hunks, unattended sessions and deferred actions.

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call};
use crate::common::serve::{Home, Serve, types};

fn setup(mode: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), mode);
    // The approval table alone; with a sandbox, auto-edit runs the commands it contains
    // (`tests/serve/sandbox.rs`).
    home.append_config("[sandbox]\nmode = \"off\"\n");
    (model, home)
}

/// A reply making one tool call.
fn call(id: &str, name: &str, arguments: Value) -> Reply {
    Reply::Sse(vec![
        tool_call(0, id, name, &arguments.to_string()),
        finish("tool_calls"),
        Step::Done,
    ])
}

/// Sends a message and reads up to (and including) the first event of one of `stops`.
fn until_any(serve: &mut Serve, stops: &[&str]) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let event = serve.next();
        let stop = stops.iter().any(|s| event["type"] == *s);
        events.push(event);
        if stop {
            return events;
        }
    }
}

#[derive(Debug, PartialEq)]
enum Cell {
    Run,
    Ask,
    Refused,
}

/// Runs one call in a fresh session in `mode`; when it asks, denies it and checks that
/// nothing ran.
fn cell(mode: &str, name: &str, arguments: Value, ran: impl Fn(&Home) -> bool) -> Cell {
    let (model, home) = setup(mode);
    model.push(call("call_1", name, arguments));
    model.push(text_reply(&["done"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = until_any(&mut serve, &["approval_request", "tool_output"]);
    let last = events.last().unwrap().clone();
    if last["type"] == "approval_request" {
        serve.send(json!({"op": "approve", "call_id": "call_1", "decision": "deny"}));
        let rest = serve.until_ready();
        let output = rest.iter().find(|e| e["type"] == "tool_output").unwrap();
        assert_eq!(output["is_error"], true);
        assert!(
            output["output"].as_str().unwrap().contains("denied"),
            "{output}"
        );
        assert!(!ran(&home), "a denied {name} call ran in {mode}");
        return Cell::Ask;
    }
    serve.until_ready();
    if last["is_error"] == true && last["output"].as_str().unwrap().contains("plan mode") {
        assert!(!ran(&home), "a refused {name} call ran in {mode}");
        return Cell::Refused;
    }
    Cell::Run
}

/// A row of the mode table: what the call is, how to make it, how to tell it ran, and
/// the expected cell for manual, plan, auto-edit, auto and full-access.
type Row = (
    &'static str,
    Box<dyn Fn() -> (&'static str, Value)>,
    Box<dyn Fn(&Home) -> bool>,
    [Cell; 5],
);

#[test]
fn every_cell_of_the_mode_table() {
    let outside = tempfile::tempdir().unwrap();
    let outside_file = outside.path().join("out.txt");
    let modes = ["manual", "plan", "auto-edit", "auto", "full-access"];
    use Cell::*;
    let rows: Vec<Row> = vec![
        (
            "read-only tool",
            Box::new(|| ("read_file", json!({"path": "config.toml"}))),
            Box::new(|_| true),
            [Run, Run, Run, Run, Run],
        ),
        (
            "read-only shell",
            Box::new(|| {
                (
                    "bash",
                    json!({"command": "ls -la && cat config.toml | wc -l"}),
                )
            }),
            Box::new(|_| true),
            [Run, Run, Run, Run, Run],
        ),
        (
            "edit inside cwd",
            Box::new(|| ("write_file", json!({"path": "new.txt", "content": "hi\n"}))),
            Box::new(|home: &Home| home.path().join("new.txt").exists()),
            [Ask, Refused, Run, Run, Run],
        ),
        (
            "edit outside cwd",
            Box::new({
                let path = outside_file.display().to_string();
                move || ("write_file", json!({"path": path.clone(), "content": "x"}))
            }),
            Box::new({
                let path = outside_file.clone();
                move |_: &Home| path.exists()
            }),
            [Ask, Refused, Ask, Ask, Run],
        ),
        (
            "other shell",
            Box::new(|| ("bash", json!({"command": "touch made.txt"}))),
            Box::new(|home: &Home| home.path().join("made.txt").exists()),
            [Ask, Refused, Ask, Run, Run],
        ),
        (
            "dangerous shell",
            Box::new(|| {
                (
                    "bash",
                    json!({"command": "git push --force origin main; touch pushed.txt"}),
                )
            }),
            Box::new(|home: &Home| home.path().join("pushed.txt").exists()),
            [Ask, Refused, Ask, Ask, Run],
        ),
    ];
    for (row, make, ran, expected) in &rows {
        for (mode, want) in modes.iter().zip(expected) {
            let _ = std::fs::remove_file(&outside_file);
            let (name, arguments) = make();
            let got = cell(mode, name, arguments, ran);
            assert_eq!(&got, want, "{row} in {mode}");
        }
    }
}

#[test]
fn allow_always_and_the_allowlist() {
    let (model, home) = setup("manual");
    model.push(call("c1", "bash", json!({"command": "echo one > one.txt"})));
    model.push(call("c2", "bash", json!({"command": "echo two > two.txt"})));
    model.push(text_reply(&["done"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until("approval_request");
    let request = events.last().unwrap();
    assert_eq!(request["call_id"], "c1");
    assert_eq!(request["name"], "bash");
    assert_eq!(request["summary"], "echo one > one.txt");
    assert!(request["subagent_id"].is_null());
    assert!(request["hunks"].is_null());
    serve.send(json!({"op": "approve", "call_id": "c1", "decision": "allow", "always": true}));
    let resolved = serve.expect_one("approval_resolved");
    assert_eq!(resolved["call_id"], "c1");
    assert_eq!(resolved["decision"], "allow");
    let rest = serve.until_ready();
    // The second bash call ran without asking.
    assert!(!types(&rest).contains(&"approval_request"), "{rest:#?}");
    assert_eq!(
        std::fs::read_to_string(home.path().join("one.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join("two.txt")).unwrap(),
        "two\n"
    );
}

#[test]
fn answers_are_validated_and_leave_the_request_open() {
    let (model, home) = setup("manual");
    std::fs::write(home.path().join("f.txt"), "a\nb\nc\n").unwrap();
    model.push(call("c1", "bash", json!({"command": "touch t.txt"})));
    model.push(call(
        "c2",
        "edit_file",
        json!({"path": "f.txt", "old_string": "b", "new_string": "B"}),
    ));
    model.push(text_reply(&["done"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("approval_request");
    let bad = [
        json!({"op": "approve", "call_id": "nope", "decision": "allow"}),
        json!({"op": "approve", "call_id": "c1", "decision": "maybe"}),
        json!({"op": "approve", "call_id": "c1", "decision": "allow", "hunks": ["f0h0"]}),
        json!({"op": "command", "input": "/approve c1"}),
    ];
    for op in bad {
        serve.send(op.clone());
        let error = serve.expect_one("error");
        assert!(error["message"].is_string(), "{op}");
    }
    // Still open: a valid answer goes through, via the slash command.
    serve.send(json!({"op": "command", "input": "/approve c1 allow"}));
    serve.expect_one("approval_resolved");
    let events = serve.until("approval_request");
    assert!(home.path().join("t.txt").exists());
    let request = events.last().unwrap();
    assert_eq!(request["call_id"], "c2");
    let hunks = request["hunks"].as_array().expect("edit hunks");
    assert_eq!(hunks.len(), 1);
    assert_eq!(hunks[0]["id"], "f0h0");
    assert_eq!(hunks[0]["file"], "f.txt");
    for op in [
        json!({"op": "approve", "call_id": "c2", "decision": "allow", "always": true, "hunks": ["f0h0"]}),
        json!({"op": "approve", "call_id": "c2", "decision": "allow", "hunks": ["f0h7"]}),
        json!({"op": "approve", "call_id": "c2", "decision": "allow", "hunks": []}),
    ] {
        serve.send(op.clone());
        serve.expect_one("error");
    }
    serve.send(json!({"op": "approve", "call_id": "c2", "decision": "allow", "hunks": ["f0h0"]}));
    serve.expect_one("approval_resolved");
    serve.send(json!({"op": "approve", "call_id": "c2", "decision": "allow"}));
    // The allowed call may already be running (and end) meanwhile.
    let second = serve.until("error").pop().unwrap();
    assert!(
        second["message"].as_str().unwrap().contains("c2"),
        "{second}"
    );
    serve.until_ready();
    assert_eq!(
        std::fs::read_to_string(home.path().join("f.txt")).unwrap(),
        "a\nB\nc\n"
    );
}

#[test]
fn partial_hunks_apply_exactly_the_approved_change() {
    let (model, home) = setup("manual");
    let original: String = (1..=40).map(|n| format!("line {n}\n")).collect();
    std::fs::write(home.path().join("big.txt"), &original).unwrap();
    let changed = original
        .replace("line 3\n", "line three\n")
        .replace("line 35\n", "line thirty-five\n");
    model.push(call(
        "c1",
        "write_file",
        json!({"path": "big.txt", "content": changed}),
    ));
    model.push(text_reply(&["done"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until("approval_request");
    let hunks = events.last().unwrap()["hunks"].as_array().unwrap().clone();
    assert_eq!(hunks.len(), 2, "{hunks:#?}");
    let second = hunks[1]["id"].as_str().unwrap().to_owned();
    assert!(hunks[1]["lines"].to_string().contains("+line thirty-five"));
    serve.send(json!({"op": "approve", "call_id": "c1", "decision": "allow", "hunks": [second]}));
    serve.until_ready();
    let expected = original.replace("line 35\n", "line thirty-five\n");
    assert_eq!(
        std::fs::read(home.path().join("big.txt")).unwrap(),
        expected.into_bytes()
    );
}

#[test]
fn interrupt_clears_pending_approvals() {
    let (model, home) = setup("manual");
    model.push(call("c1", "bash", json!({"command": "touch never.txt"})));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("approval_request");
    serve.send(json!({"op": "interrupt"}));
    // The request and the tool card are closed before `info` and `status`, and
    // nothing of the turn follows those two.
    let events = serve.expect(&["approval_resolved", "tool_output", "info", "status"]);
    assert_eq!(events[0]["call_id"], "c1");
    assert_eq!(events[0]["decision"], "interrupted");
    assert_eq!(events[1]["call_id"], "c1");
    assert_eq!(events[1]["is_error"], true);
    assert_eq!(events[1]["output"], "interrupted by the user");
    assert_eq!(events[2]["message"], "request interrupted");
    assert_eq!(events[3]["message"], "interrupted");
    serve.send(json!({"op": "approve", "call_id": "c1", "decision": "allow"}));
    serve.expect_one("error");
    assert!(!home.path().join("never.txt").exists());
}

#[test]
fn unattended_sessions_defer_and_decisions_come_back_as_messages() {
    let (model, home) = setup("manual");
    model.push(call("c1", "bash", json!({"command": "echo ran > ran.txt"})));
    model.push(call("c2", "bash", json!({"command": "echo ran > ran.txt"})));
    model.push(call("c3", "bash", json!({"command": "touch denied.txt"})));
    model.push(text_reply(&["waiting"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "set_attended", "attended": false}));
    assert_eq!(serve.expect_one("attended")["attended"], false);
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until_ready();
    let deferred: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "action_deferred")
        .collect();
    assert_eq!(
        deferred.len(),
        2,
        "the identical second call reuses the first: {events:#?}"
    );
    let first = deferred[0];
    let id = first["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("act-"));
    assert_eq!(first["call_id"], "c1");
    assert_eq!(first["name"], "bash");
    assert_eq!(first["arguments"], json!({"command": "echo ran > ran.txt"}));
    assert_eq!(first["summary"], "echo ran > ran.txt");
    assert_eq!(first["cwd"], home.path().display().to_string());
    assert!(first["subagent_id"].is_null());
    assert!(first["digest"].as_str().unwrap().len() >= 8);
    assert!(first["created_at"].as_u64().unwrap() > 1_600_000_000_000);
    assert_eq!(first["session_id"], serve.seen[1]["session_id"]);
    let outputs: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_output")
        .collect();
    for output in &outputs {
        assert_eq!(output["is_error"], false);
        assert!(
            output["output"]
                .as_str()
                .unwrap()
                .contains("submitted for confirmation")
        );
    }
    assert!(!home.path().join("ran.txt").exists());
    let denied_id = deferred[1]["id"].as_str().unwrap().to_owned();

    serve.send(json!({"op": "decide_action", "action": "act-0-nothing", "decision": "allow"}));
    serve.expect_one("error");

    model.push(text_reply(&["noted"]));
    serve.send(json!({"op": "decide_action", "action": id, "decision": "allow"}));
    let decided = serve.expect_one("action_decided");
    assert_eq!(decided["id"], id.as_str());
    assert_eq!(decided["decision"], "allow");
    assert_eq!(decided["is_error"], false);
    assert!(decided["output"].as_str().unwrap().contains("exit code: 0"));
    assert_eq!(
        std::fs::read_to_string(home.path().join("ran.txt")).unwrap(),
        "ran\n"
    );
    let message = serve.expect_one("user_message");
    assert!(message["content"].as_str().unwrap().contains(&id));
    serve.until_ready();

    serve.send(json!({"op": "decide_action", "action": id, "decision": "deny"}));
    serve.expect_one("error");

    model.push(text_reply(&["ok"]));
    serve.send(json!({"op": "decide_action", "action": denied_id, "decision": "deny"}));
    let decided = serve.expect_one("action_decided");
    assert_eq!(decided["decision"], "deny");
    assert!(decided["output"].is_null());
    let message = serve.expect_one("user_message");
    assert!(message["content"].as_str().unwrap().contains("denied"));
    serve.until_ready();
    assert!(!home.path().join("denied.txt").exists());

    // The same calls again reuse the decisions: the allowed one runs, the denied one not.
    model.push(call("c4", "bash", json!({"command": "echo ran > ran.txt"})));
    model.push(call("c5", "bash", json!({"command": "touch denied.txt"})));
    model.push(text_reply(&["done"]));
    serve.send(json!({"op": "user_message", "content": "again"}));
    let events = serve.until_ready();
    assert!(!types(&events).contains(&"action_deferred"), "{events:#?}");
    let outputs: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_output")
        .collect();
    assert!(
        outputs[0]["output"]
            .as_str()
            .unwrap()
            .contains("exit code: 0")
    );
    assert_eq!(outputs[1]["is_error"], true);
    assert!(!home.path().join("denied.txt").exists());
}

#[test]
fn waiting_requests_become_deferred_when_the_session_turns_unattended() {
    let (model, home) = setup("manual");
    model.push(call("c1", "bash", json!({"command": "touch later.txt"})));
    model.push(text_reply(&["fine"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("approval_request");
    serve.send(json!({"op": "set_attended", "attended": false}));
    let events = serve.expect(&[
        "attended",
        "approval_resolved",
        "action_deferred",
        "tool_output",
    ]);
    assert_eq!(events[1]["call_id"], "c1");
    assert_eq!(events[1]["decision"], "deferred");
    assert_eq!(events[2]["call_id"], "c1");
    assert!(
        events[3]["output"]
            .as_str()
            .unwrap()
            .contains("submitted for confirmation")
    );
    serve.until_ready();
    assert!(!home.path().join("later.txt").exists());
}

#[test]
fn a_running_turns_gating_only_loosens() {
    // Looser mid-turn: the next call of the running turn runs without asking.
    let (model, home) = setup("manual");
    model.push(call("c1", "bash", json!({"command": "touch one.txt"})));
    model.push(call("c2", "bash", json!({"command": "touch two.txt"})));
    model.push(text_reply(&["done"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("approval_request");
    serve.send(json!({"op": "set_approval_mode", "mode": "auto"}));
    serve.expect(&["status", "approval_mode"]);
    serve.send(json!({"op": "approve", "call_id": "c1", "decision": "allow"}));
    let events = serve.until_ready();
    assert!(!types(&events).contains(&"approval_request"), "{events:#?}");
    assert!(home.path().join("two.txt").exists());

    // Stricter mid-turn: the running turn keeps its looser mode; the next turn asks.
    let (model, home) = setup("auto");
    let gate = crate::common::mock::Gate::new();
    model.push(Reply::Sse(vec![
        crate::common::mock::text("working"),
        Step::Wait(gate.clone()),
        tool_call(0, "c1", "bash", r#"{"command":"touch one.txt"}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push(text_reply(&["done"]));
    model.push(call("c2", "bash", json!({"command": "touch two.txt"})));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("assistant_delta");
    serve.send(json!({"op": "set_approval_mode", "mode": "manual"}));
    serve.expect(&["status", "approval_mode"]);
    gate.open();
    let events = serve.until_ready();
    assert!(!types(&events).contains(&"approval_request"), "{events:#?}");
    assert!(home.path().join("one.txt").exists());
    serve.send(json!({"op": "user_message", "content": "again"}));
    let events = serve.until("approval_request");
    assert_eq!(events.last().unwrap()["call_id"], "c2");
}

#[test]
fn the_session_ending_closes_its_cards() {
    let (model, home) = setup("manual");
    model.push(call("c1", "bash", json!({"command": "touch never.txt"})));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("approval_request");
    // stdin's end ends an in-process session: the open request and its tool card are
    // closed before the process exits.
    serve.close_stdin();
    let rest = serve.rest();
    assert_eq!(
        types(&rest),
        ["approval_resolved", "tool_output"],
        "{rest:#?}"
    );
    assert_eq!(rest[0]["decision"], "interrupted");
    assert_eq!(rest[1]["call_id"], "c1");
    assert_eq!(rest[1]["is_error"], true);
    assert_eq!(serve.wait().code(), Some(0));
    assert!(!home.path().join("never.txt").exists());
}
