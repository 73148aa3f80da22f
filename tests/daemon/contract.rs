//! The guarantees a front-end builds on, through the daemon: bad input never acts,
//! answers reach only the client that asked, every card opened is closed, the
//! connection bound.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::daemon::{DaemonGuard, Raw, SETTLE};
use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call};
use crate::common::serve::{EVENT_TIMEOUT, Home};

/// A home whose sessions run `mock/mock-1` in manual mode, with the daemon running.
fn manual_home(model: &MockModel) -> Home {
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "manual");
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    home
}

fn bash_call(id: &str, command: &str) -> Reply {
    Reply::Sse(vec![
        tool_call(0, id, "bash", &json!({ "command": command }).to_string()),
        finish("tool_calls"),
        Step::Done,
    ])
}

#[test]
fn json_arrays_on_the_socket_never_act() {
    let home = Home::new();
    home.write_config("model = \"replay/demo\"\n");
    let _guard = DaemonGuard(&home);
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    // With no session, the daemon answers itself.
    let mut bare = Raw::connect(&home);
    bare.send(json!(["daemon_stop", null]));
    let error = bare.next();
    assert_eq!(
        error["message"],
        "invalid command: expected a JSON object with a string \"op\" field"
    );
    assert!(error.get("session").is_none());

    let mut raw = Raw::connect(&home);
    let session = raw.open(home.path());
    for line in [
        json!(["daemon_stop", null]),
        json!(["close", session]),
        json!(["detach"]),
        json!(["shutdown"]),
    ] {
        raw.send(line.clone());
        let error = raw.next();
        assert_eq!(error["type"], "error", "{line}");
        assert_eq!(
            error["message"], "invalid command: expected a JSON object with a string \"op\" field",
            "{line}"
        );
    }
    // Nothing acted: the daemon runs and the session is still there, attached.
    raw.send(json!({"op": "sessions"}));
    let listing = raw.next();
    assert_eq!(listing["sessions"][0]["session"], session.as_str());
    assert_eq!(listing["sessions"][0]["clients"], 1);
    assert!(home.daemon_status().is_some());
}

#[test]
fn answers_reach_only_the_client_that_asked() {
    let model = MockModel::start();
    let home = manual_home(&model);
    let _guard = DaemonGuard(&home);
    let mut a = Raw::connect(&home);
    let session = a.open(home.path());
    let mut b = Raw::connect(&home);
    b.send(json!({"op": "attach", "session": session}));
    b.until("status", Some(&session));

    // B's mistakes and B's views are B's alone.
    for (op, answer) in [
        (json!({"op": "dance"}), "error"),
        (json!(["shutdown"]), "error"),
        (
            json!({"op": "approve", "call_id": "nope", "decision": "allow"}),
            "error",
        ),
        (json!({"op": "command", "input": "/frobnicate"}), "error"),
        (json!({"op": "command", "input": "/help"}), "info"),
        (json!({"op": "command", "input": "/model"}), "model_view"),
        (
            json!({"op": "command", "input": "/transcript"}),
            "transcript",
        ),
        (json!({"op": "agent_runs"}), "agent_runs"),
        (
            json!({"op": "subagent_transcript", "agent_id": "/root/x"}),
            "subagent_transcript",
        ),
        (json!({"op": "mcp_list"}), "mcp_servers"),
    ] {
        b.send(op.clone());
        let event = b.next();
        assert_eq!(event["type"], answer, "{op} answered with {event}");
        assert_eq!(event["session"], session.as_str(), "{event}");
    }
    // Had any of those reached A, they would be queued before A's own answer.
    a.send(json!({"op": "agent_runs"}));
    assert_eq!(a.next()["type"], "agent_runs", "seen by A: {:#?}", a.seen);

    // State changes reach everyone.
    b.send(json!({"op": "set_approval_mode", "mode": "auto-edit"}));
    for client in [&mut a, &mut b] {
        let status = client.next();
        assert_eq!(status["message"], "approval mode: auto-edit");
        assert_eq!(client.next()["type"], "approval_mode");
    }
    b.send(json!({"op": "set_approval_mode", "mode": "manual"}));
    for client in [&mut a, &mut b] {
        client.until("approval_mode", Some(&session));
    }

    // First answer wins for everyone; a second answer is an error for its sender only.
    model.push(bash_call("c1", "touch first.txt"));
    model.push(text_reply(&["done"]));
    a.send(json!({"op": "user_message", "content": "go"}));
    for client in [&mut a, &mut b] {
        client.until("approval_request", Some(&session));
    }
    a.send(json!({"op": "approve", "call_id": "c1", "decision": "allow"}));
    for client in [&mut a, &mut b] {
        let resolved = client.until("approval_resolved", Some(&session));
        assert_eq!(resolved.last().unwrap()["decision"], "allow");
    }
    b.send(json!({"op": "approve", "call_id": "c1", "decision": "deny"}));
    let b_rest = b.until("error", Some(&session));
    assert!(
        b_rest.last().unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("c1")
    );
    let a_rest = a.until_status("ready", &session);
    assert!(
        !a_rest.iter().any(|e| e["type"] == "error"),
        "B's error reached A: {a_rest:#?}"
    );
    b.until_status("ready", &session);
    assert!(home.path().join("first.txt").exists());
}

#[test]
fn closing_a_session_closes_its_cards_first() {
    let model = MockModel::start();
    let home = manual_home(&model);
    let _guard = DaemonGuard(&home);
    model.push(bash_call("c1", "touch never.txt"));
    let mut a = Raw::connect(&home);
    let session = a.open(home.path());
    a.send(json!({"op": "user_message", "content": "go"}));
    a.until("approval_request", Some(&session));
    let mut other = Raw::connect(&home);
    other.send(json!({"op": "close", "session": session}));
    let rest = a.until("session_closed", Some(&session));
    let kinds: Vec<&str> = rest.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["approval_resolved", "tool_output", "session_closed"],
        "{rest:#?}"
    );
    assert_eq!(rest[0]["decision"], "interrupted");
    assert_eq!(rest[2]["reason"], "closed");
    assert!(!home.path().join("never.txt").exists());
}

#[test]
fn a_client_leaving_others_keeps_approvals_open_and_the_last_one_defers_them() {
    let model = MockModel::start();
    let home = manual_home(&model);
    let _guard = DaemonGuard(&home);
    model.push(bash_call("c1", "touch later.txt"));
    model.push(text_reply(&["noted"]));
    let mut a = Raw::connect(&home);
    let session = a.open(home.path());
    let mut b = Raw::connect(&home);
    b.send(json!({"op": "attach", "session": session}));
    b.until("status", Some(&session));
    a.send(json!({"op": "user_message", "content": "go"}));
    a.until("approval_request", Some(&session));
    b.until("approval_request", Some(&session));

    // B leaves; A still watches, so the request stays open for A.
    b.send(json!({"op": "detach"}));
    b.until("detached", Some(&session));
    a.send(json!({"op": "agent_runs"}));
    assert_eq!(a.next()["type"], "agent_runs", "{:#?}", a.seen);

    // A leaves too: nobody can answer, so the request becomes a deferred action and the
    // turn goes on.
    a.send(json!({"op": "detach"}));
    a.until("detached", Some(&session));
    wait_for_state(&home, &session, "ready");
    assert!(!home.path().join("later.txt").exists());
    let second = &model.wait_requests(2)[1];
    let result = second.last_message()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(result.contains("submitted for confirmation"), "{result}");

    // Whoever attaches next sees the action waiting for a decision, and can decide it.
    let mut c = Raw::connect(&home);
    c.send(json!({"op": "attach", "session": session}));
    let snapshot = c.until("status", Some(&session));
    let deferred = snapshot
        .iter()
        .find(|e| e["type"] == "action_deferred")
        .unwrap_or_else(|| panic!("no deferred action in {snapshot:#?}"));
    assert_eq!(deferred["call_id"], "c1");
    let id = deferred["id"].as_str().unwrap().to_owned();
    model.push(text_reply(&["thanks"]));
    c.send(json!({"op": "decide_action", "action": id, "decision": "allow"}));
    let decided = c.until("action_decided", Some(&session));
    assert_eq!(decided.last().unwrap()["decision"], "allow");
    c.until_status("ready", &session);
    assert!(home.path().join("later.txt").exists());
}

/// Waits (bounded) until the daemon reports `state` for the session: how a test knows
/// a detached session has moved on, since no client receives its events.
fn wait_for_state(home: &Home, session: &str, state: &str) {
    let mut raw = Raw::connect(home);
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        raw.send(json!({"op": "sessions"}));
        let listing = raw.next();
        let current = listing["sessions"]
            .as_array()
            .and_then(|all| all.iter().find(|s| s["session"] == session))
            .map(|s| s["state"].clone());
        if current == Some(Value::from(state)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "session {session} never reached {state:?}: {current:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A connection that got its `hello`, retrying while the daemon is full.
fn connect_when_free(home: &Home) -> UnixStream {
    let deadline = Instant::now() + SETTLE;
    loop {
        let stream = UnixStream::connect(home.socket()).expect("connect");
        stream.set_read_timeout(Some(SETTLE)).unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        if line.contains("\"hello\"") {
            return stream;
        }
        assert!(line.contains("too many connections"), "{line}");
        assert!(Instant::now() < deadline, "no free slot: {line}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_daemon_bounds_its_connections() {
    let home = Home::new();
    home.write_config("model = \"replay/demo\"\n[daemon]\nmax_clients = 2\n");
    let _guard = DaemonGuard(&home);
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    // `daemon start`'s own probe connection may still hold a slot for a moment (the
    // daemon frees it when it reads the EOF): wait for the slots, do not race them.
    let first = connect_when_free(&home);
    let second = connect_when_free(&home);
    let third = UnixStream::connect(home.socket()).expect("connect");
    third.set_read_timeout(Some(SETTLE)).unwrap();
    let mut lines = BufReader::new(&third).lines();
    let refusal: Value =
        serde_json::from_str(&lines.next().expect("a line").expect("read")).expect("JSON");
    crate::common::schema::assert_event(&refusal);
    assert_eq!(refusal["type"], "error");
    assert!(
        refusal["message"]
            .as_str()
            .unwrap()
            .contains("at most 2 clients"),
        "{refusal}"
    );
    assert!(lines.next().is_none(), "then the connection closes");
    // A freed slot is usable again.
    drop(first);
    let deadline = Instant::now() + SETTLE;
    loop {
        let mut stream = UnixStream::connect(home.socket()).expect("connect");
        stream.set_read_timeout(Some(SETTLE)).unwrap();
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).unwrap();
        if line.contains("\"hello\"") {
            let _ = stream.write_all(b"{\"op\":\"sessions\"}\n");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot never came back: {line}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(second);
}
