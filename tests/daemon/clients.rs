//! The shim against in-process serve, several clients on one session, several sessions
//! on one connection, slow clients.

use std::io::Read;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::daemon::{DaemonGuard, Raw};
use crate::common::mock::{Gate, MockModel, Reply, Step, finish, text, text_reply, usage};
use crate::common::serve::{Home, Serve, types};

fn replay_home(script: &str) -> Home {
    let home = Home::new();
    std::fs::write(home.path().join("script.jsonl"), script).unwrap();
    std::fs::write(home.path().join("notes.txt"), "alpha\nbeta\n").unwrap();
    home.write_config(
        "model = \"scripted/m\"\n[providers.scripted]\nkind = \"replay\"\nscript = \"script.jsonl\"\n",
    );
    home
}

/// Replaces what legitimately differs between two runs: ids, timestamps and the
/// temporary home directory.
fn normalize(event: Value, home: &str) -> Value {
    let mut event: Value =
        serde_json::from_str(&event.to_string().replace(home, "<home>")).unwrap();
    if let Some(object) = event.as_object_mut() {
        for key in ["session", "session_id"] {
            if object.contains_key(key) {
                object.insert(key.into(), json!("<session>"));
            }
        }
    }
    event
}

/// Runs the same ops through a serve process; returns every stdout line, normalized.
fn transcript_of(mut serve: Serve, home: &Home, ops: &[Value]) -> Vec<Value> {
    let mut events = vec![serve.next()];
    events.extend(serve.until("mcp_servers"));
    for op in ops {
        serve.send(op.clone());
        if op["op"] == "user_message" {
            events.extend(serve.until_ready());
        } else {
            events.push(serve.next());
        }
    }
    serve.send(json!({"op": "shutdown"}));
    events.extend(serve.rest());
    assert_eq!(serve.wait().code(), Some(0));
    let home = home.path().display().to_string();
    events.into_iter().map(|e| normalize(e, &home)).collect()
}

#[test]
fn the_shim_prints_exactly_what_in_process_serve_prints() {
    let script = concat!(
        r#"{"reasoning":"let me read","text":"Reading.","tool_calls":[{"name":"read_file","arguments":{"path":"notes.txt"}}],"usage":{"prompt_tokens":10,"completion_tokens":5}}"#,
        "\n",
        r#"{"text":"It says alpha, beta.","usage":{"prompt_tokens":20,"completion_tokens":6}}"#,
        "\n",
        r#"{"text":"Second turn.","usage":{"prompt_tokens":30,"completion_tokens":2}}"#,
        "\n",
    );
    let ops = [
        json!({"op": "user_message", "content": "what is in notes.txt?"}),
        json!({"op": "command", "input": "/help"}),
        json!({"op": "command", "input": "/model"}),
        json!({"op": "bogus"}),
        json!({"op": "user_message", "content": "and now?", "files": ["/tmp/x.log"]}),
        json!({"op": "command", "input": "/transcript"}),
    ];
    // One home for both runs: the prompt names the working directory, so a different
    // path would change token counts. Each session replays the script from its start.
    let home = replay_home(script);
    let in_process = transcript_of(Serve::start(&home), &home, &ops);
    let _guard = DaemonGuard(&home);
    let through_daemon = transcript_of(Serve::shim(&home).start(), &home, &ops);
    assert!(in_process.len() > 20);
    pretty_assertions::assert_eq!(in_process, through_daemon);
}

#[test]
fn two_shims_get_two_sessions_on_one_daemon() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let mut a = Serve::shim(&home).start();
    let a_batch = a.skip_startup();
    let mut b = Serve::shim(&home).start();
    let b_batch = b.skip_startup();
    assert_ne!(a_batch[0]["session_id"], b_batch[0]["session_id"]);
    let status = home.daemon_status().expect("a daemon answers");
    assert_eq!(status["sessions"], 2);
    assert_eq!(
        status["clients"], 3,
        "two shims and the status query itself"
    );
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["socket"], home.socket().display().to_string());
    assert!(status["pid"].as_u64().unwrap() > 0);
    assert!(status["uptime_ms"].as_u64().is_some());
}

/// A mock-model home whose first reply holds until `gate` opens.
fn gated_home(gate: &Gate) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    model.push(Reply::Sse(vec![
        text("Working"),
        Step::Wait(gate.clone()),
        text(" on it."),
        finish("stop"),
        usage(10, 3),
        Step::Done,
    ]));
    (model, home)
}

#[test]
fn a_late_client_sees_the_conversation_and_the_live_turn() {
    let gate = Gate::new();
    let (model, home) = gated_home(&gate);
    let _guard = DaemonGuard(&home);
    let mut first = Serve::shim(&home).start();
    let batch = first.skip_startup();
    let session = batch[0]["session_id"].as_str().unwrap().to_owned();
    first.send(json!({"op": "user_message", "content": "do it"}));
    first.until("assistant_delta");
    first.send(json!({"op": "user_message", "content": "queued one"}));
    first.expect(&["pending_messages", "status"]);

    let mut second = Serve::shim(&home).arg("--session").arg(&session).start();
    let hello = second.next();
    assert_eq!(hello["type"], "hello");
    let snapshot = second.until("status");
    assert_eq!(
        types(&snapshot),
        [
            "startup",
            "model_status",
            "command_list",
            "approval_mode",
            "mcp_servers",
            "transcript",
            "pending_messages",
            "status"
        ]
    );
    assert_eq!(snapshot[0]["session_id"], session.as_str());
    let items = snapshot[5]["items"].as_array().unwrap();
    assert_eq!(items[0], json!({"role": "user", "content": "do it"}));
    assert_eq!(items[1], json!({"role": "assistant", "content": "Working"}));
    assert_eq!(snapshot[6]["messages"], json!(["queued one"]));
    assert_eq!(snapshot[7]["message"], "queued: 1");

    // Live from here on, for both clients; the second may drive the session too.
    model.push(text_reply(&["second answer"]));
    gate.open();
    for client in [&mut first, &mut second] {
        let rest = client.until_ready();
        let delta: String = rest
            .iter()
            .filter(|e| e["type"] == "assistant_delta")
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(delta, " on it.");
        assert_eq!(rest.last().unwrap()["message"], "ready");
        let next = client.until_ready();
        assert_eq!(next.last().unwrap()["message"], "ready");
        assert!(
            next.iter()
                .any(|e| e["type"] == "user_message" && e["content"] == "queued one")
        );
    }
    model.push(text_reply(&["third"]));
    second.send(json!({"op": "user_message", "content": "from the second client"}));
    let seen = first.until_ready();
    assert!(
        seen.iter()
            .any(|e| e["content"] == "from the second client")
    );
}

#[test]
fn the_turn_goes_on_when_its_sender_leaves() {
    let gate = Gate::new();
    let (_model, home) = gated_home(&gate);
    let _guard = DaemonGuard(&home);
    let mut first = Serve::shim(&home).start();
    let session = first.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    first.send(json!({"op": "user_message", "content": "long job"}));
    first.until("assistant_delta");
    first.close_stdin();
    assert_eq!(first.wait().code(), Some(0));

    let mut later = Serve::shim(&home).arg("--session").arg(&session).start();
    later.next();
    let snapshot = later.until("status");
    assert_eq!(snapshot.last().unwrap()["message"], "streaming");
    gate.open();
    let rest = later.until_ready();
    assert_eq!(rest.last().unwrap()["message"], "ready");
}

#[test]
fn approvals_are_first_come_and_everyone_learns_the_answer() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    model.push(Reply::Sse(vec![
        crate::common::mock::tool_call(0, "c1", "bash", r#"{"command":"touch ok.txt"}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push(text_reply(&["done"]));
    let _guard = DaemonGuard(&home);
    let mut first = Serve::shim(&home).start();
    let session = first.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    first.send(json!({"op": "user_message", "content": "go"}));
    first.until("approval_request");
    let mut second = Serve::shim(&home).arg("--session").arg(&session).start();
    second.next();
    let snapshot = second.until("status");
    let request = snapshot
        .iter()
        .find(|e| e["type"] == "approval_request")
        .expect("open request");
    assert_eq!(request["call_id"], "c1");

    second.send(json!({"op": "approve", "call_id": "c1", "decision": "allow"}));
    for client in [&mut first, &mut second] {
        let resolved = client.until("approval_resolved");
        assert_eq!(resolved.last().unwrap()["call_id"], "c1");
    }
    first.send(json!({"op": "approve", "call_id": "c1", "decision": "deny"}));
    let error = first.until("error");
    assert!(
        error.last().unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("c1")
    );
    second.until_ready();
    assert!(home.path().join("ok.txt").exists());
}

#[test]
fn one_connection_multiplexes_two_sessions() {
    let home = Home::new();
    // A configured model: no demo notice trails the startup batches.
    home.write_config("model = \"replay/demo\"\n");
    let _guard = DaemonGuard(&home);
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    let mut raw = Raw::connect(&home);
    let a = raw.open(home.path());
    let b = raw.open(home.path());
    assert_ne!(a, b);
    // No session field: the most recently opened session (b).
    raw.send(json!({"op": "agent_runs"}));
    let event = raw.next();
    assert_eq!(event["type"], "agent_runs");
    assert_eq!(event["session"], b.as_str());
    raw.send(json!({"op": "agent_runs", "session": a}));
    assert_eq!(raw.next()["session"], a.as_str());

    raw.send(json!({"op": "sessions"}));
    let listing = raw.next();
    assert_eq!(listing["type"], "sessions");
    let sessions = listing["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    for entry in sessions {
        assert_eq!(entry["cwd"], home.path().display().to_string());
        assert_eq!(entry["clients"], 1);
        assert!(entry["state"].is_string());
    }

    raw.send(json!({"op": "agent_runs", "session": "no-such-session"}));
    let error = raw.next();
    assert_eq!(error["type"], "error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no-such-session")
    );
    raw.send(json!({"op": "attach", "session": "no-such-session"}));
    assert_eq!(raw.next()["type"], "error");

    raw.send(json!({"op": "close", "session": a}));
    let closed = raw.until("session_closed", Some(&a));
    assert_eq!(closed.last().unwrap()["session"], a.as_str());
    raw.send(json!({"op": "agent_runs", "session": a}));
    assert_eq!(raw.next()["type"], "error");
}

#[test]
fn a_client_that_never_reads_is_cut_off_without_slowing_the_others() {
    let deltas = 20_000;
    let home = replay_home(&format!(
        "{{\"text\":\"{}\",\"chunk\":1}}\n",
        "y".repeat(deltas)
    ));
    // Small limits keep the test fast: the stalled client overflows after 2000 lines.
    home.append_config("[daemon]\nmax_client_lines = 2000\n");
    let _guard = DaemonGuard(&home);
    let mut reader = Serve::shim(&home).start();
    let session = reader.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut stalled = Raw::connect(&home);
    stalled.send(json!({"op": "attach", "session": session}));
    stalled.until("status", None);
    // From here the stalled client reads nothing.
    reader.send(json!({"op": "user_message", "content": "stream"}));
    let events = reader.until_ready();
    let received = events
        .iter()
        .filter(|e| e["type"] == "assistant_delta")
        .count();
    assert_eq!(received, deltas, "the reading client got every delta");
    // The stalled client was disconnected with a final error line saying why.
    stalled
        .stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = String::new();
    let _ = stalled.stream.read_to_string(&mut rest);
    let last = rest.lines().last().expect("some output before the cut");
    let last: Value = serde_json::from_str(last).expect("the last line is whole JSON");
    assert_eq!(last["type"], "error", "{last}");
    assert!(
        last["message"].as_str().unwrap().contains("behind"),
        "{last}"
    );
    assert!(rest.lines().count() < deltas, "it did not get everything");
}

#[test]
fn ops_sent_before_eof_are_all_answered() {
    let home = Home::new();
    home.write_config("model = \"replay/demo\"\n");
    let _guard = DaemonGuard(&home);
    let mut serve = Serve::shim(&home).start();
    serve.skip_startup();
    for _ in 0..3 {
        serve.send(json!({"op": "agent_runs"}));
    }
    // The last line has no newline: it still counts, as in process.
    serve.send_bytes(br#"{"op":"command","input":"/transcript"}"#);
    serve.close_stdin();
    let rest = serve.rest();
    assert_eq!(
        types(&rest),
        ["agent_runs", "agent_runs", "agent_runs", "transcript"],
        "{rest:#?}"
    );
    assert_eq!(serve.wait().code(), Some(0));
    // The session goes on in the daemon.
    assert_eq!(home.daemon_status().unwrap()["sessions"], 1);
}
