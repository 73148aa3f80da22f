//! Sessions a stopped process left halfway (issue 17, items 1–3): a call killed while
//! it ran, or while it waited for approval, and session files that cannot be loaded.
//! The mock model is as strict as OpenAI: a request with an unanswered call is a 400.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::daemon::{DaemonGuard, Raw};
use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call};
use crate::common::serve::{EVENT_TIMEOUT, Home, Serve, session_file};

fn setup(mode: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), mode);
    (model, home)
}

fn bash_call(id: &str, command: &str) -> Reply {
    let arguments = json!({ "command": command }).to_string();
    Reply::Sse(vec![
        tool_call(0, id, "bash", &arguments),
        finish("tool_calls"),
        Step::Done,
    ])
}

/// Waits (bounded) until the session file holds `needle`: the engine writes it a
/// moment after the event that announced it.
fn file_holds(path: &Path, needle: &str) {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never held {needle}: {text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill_9(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
}

/// The tool message the model read for `call_id` in `request`.
fn tool_message<'a>(request: &'a crate::common::mock::Recorded, call_id: &str) -> &'a Value {
    request
        .messages()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool message for {call_id}: {:#?}", request.messages()))
}

/// The orphaned `sleep` of a killed session, stopped so it outlives no test.
struct Orphan(&'static str);

impl Drop for Orphan {
    fn drop(&mut self) {
        let _ = std::process::Command::new("pkill")
            .args(["-f", self.0])
            .status();
    }
}

/// Starts a session, sends `message`, and kill -9s it once `event` came and the
/// session file holds `written`; returns the session id and file.
fn killed_after(home: &Home, message: &str, event: &str, written: &str) -> (String, PathBuf) {
    let mut serve = Serve::ready(home);
    let id = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user(message);
    serve.until(event);
    let path = session_file(home.path(), &id);
    file_holds(&path, written);
    serve.child.kill().unwrap();
    serve.wait();
    (id, path)
}

#[test]
fn a_call_killed_while_it_ran_is_answered_on_resume_and_the_session_goes_on() {
    let (model, home) = setup("full-access");
    let _orphan = Orphan("sleep 41.5");
    model.push(bash_call("call_run", "sleep 41.5"));
    let (id, path) = killed_after(&home, "run it", "tool_start", "\"tool_calls\"");

    let mut serve = Serve::builder(&home).arg("--session").arg(&id).start();
    let batch = serve.skip_startup();
    assert!(!batch.iter().any(|e| e["type"] == "error"), "{batch:#?}");
    let notice = serve.next();
    assert_eq!(notice["type"], "info", "{notice}");
    let message = notice["message"].as_str().unwrap();
    assert!(
        message.contains("`bash` (call_run)") && message.contains("interrupted"),
        "{message}"
    );
    // The answer is in the file, before anything else happens.
    file_holds(
        &path,
        "interrupted: the session stopped before this call finished",
    );
    model.push(text_reply(&["carrying on"]));
    serve.user("and now?");
    let turn = serve.until_ready();
    assert!(!turn.iter().any(|e| e["type"] == "error"), "{turn:#?}");
    let request = model.requests().pop().unwrap();
    let answer = tool_message(&request, "call_run");
    assert_eq!(
        answer["content"],
        "interrupted: the session stopped before this call finished"
    );
    // A second resume finds nothing to repair: the answer was written once.
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.matches("\"call_id\":\"call_run\"").count(),
        1,
        "{text}"
    );
    let mut serve = Serve::builder(&home).arg("--session").arg(&id).start();
    serve.skip_startup();
    serve.send(json!({"op": "command", "input": "/transcript"}));
    let transcript = serve.until("transcript");
    assert!(
        !transcript.iter().any(|e| e["type"] == "info"),
        "{transcript:#?}"
    );
}

#[test]
fn a_call_waiting_for_approval_when_killed_is_asked_again_and_runs_once_allowed() {
    let (model, home) = setup("manual");
    model.push(bash_call("call_ask", "touch approved.txt"));
    let (id, _) = killed_after(
        &home,
        "make the file",
        "approval_request",
        "\"state\":\"asked\"",
    );
    let marker = home.path().join("approved.txt");
    assert!(!marker.exists());

    model.push(text_reply(&["the file is there"]));
    let mut serve = Serve::builder(&home).arg("--session").arg(&id).start();
    serve.skip_startup();
    let asked = serve.until("approval_request");
    let notice = asked
        .iter()
        .find(|e| e["type"] == "info")
        .expect("a notice");
    assert!(
        notice["message"]
            .as_str()
            .unwrap()
            .contains("waited for approval: it is asked again"),
        "{notice}"
    );
    assert_eq!(asked.last().unwrap()["call_id"], "call_ask");
    assert!(
        asked
            .iter()
            .any(|e| e["type"] == "status" && e["message"] == "streaming"),
        "{asked:#?}"
    );
    assert!(!marker.exists(), "it must not run before it is allowed");
    serve.send(json!({"op": "approve", "call_id": "call_ask", "decision": "allow"}));
    let rest = serve.until_ready();
    let output = rest.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["is_error"], false, "{output}");
    assert!(marker.exists(), "the allowed call ran");
    let request = model.requests().pop().unwrap();
    assert_eq!(
        tool_message(&request, "call_ask")["content"],
        output["output"]
    );
    // It answered once: a later resume repairs nothing and asks nothing.
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    let mut serve = Serve::builder(&home).arg("--session").arg(&id).start();
    serve.skip_startup();
    serve.send(json!({"op": "command", "input": "/transcript"}));
    let shown = serve.until("transcript");
    assert!(
        !shown
            .iter()
            .any(|e| e["type"] == "approval_request" || e["type"] == "info"),
        "{shown:#?}"
    );
}

#[test]
fn a_call_waiting_for_approval_is_deferred_when_the_resumed_session_is_unattended() {
    let (model, home) = setup("manual");
    model.push(bash_call("call_defer", "touch deferred.txt"));
    let (id, _) = killed_after(
        &home,
        "make the file",
        "approval_request",
        "\"state\":\"asked\"",
    );

    // Headless: nobody can answer, so the waiting call becomes a deferred action; the
    // stopped turn ends, then the new prompt runs.
    model.push(text_reply(&["waiting for the user"]));
    model.push(text_reply(&["hello again"]));
    let mut run = Serve::command(&home, &["--headless", "--session", &id, "hello"]).start();
    let mut events = Vec::new();
    while let Some(line) = run.next_line() {
        events.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert_eq!(run.wait().code(), Some(0), "{events:#?}");
    let deferred = events
        .iter()
        .find(|e| e["type"] == "action_deferred")
        .unwrap_or_else(|| panic!("no deferred action: {events:#?}"));
    assert_eq!(deferred["call_id"], "call_defer");
    assert!(!home.path().join("deferred.txt").exists());
    let requests = model.requests();
    let resumed = &requests[requests.len() - 2];
    let result = tool_message(resumed, "call_defer");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("submitted for confirmation"),
        "{result}"
    );
    // The prompt's own turn ran after it, and is the one headless reported.
    let last = requests.last().unwrap();
    assert_eq!(last.last_message()["content"], "hello");
}

#[test]
fn a_daemon_killed_during_a_tool_call_leaves_a_session_that_resumes() {
    let (model, home) = setup("full-access");
    let _guard = DaemonGuard(&home);
    let _orphan = Orphan("sleep 42.5");
    model.push(bash_call("call_d", "sleep 42.5"));
    let mut serve = Serve::shim(&home).start();
    let id = serve.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    serve.user("run it");
    serve.until("tool_start");
    let path = session_file(home.path(), &id);
    file_holds(&path, "\"tool_calls\"");
    let pid = home.daemon_status().unwrap()["pid"].as_u64().unwrap();
    kill_9(pid as u32);
    serve.wait();
    drop(serve);

    // Every client that attaches is told what loading did, not only the first.
    let started = home.jucode(&["daemon", "start"]);
    assert_eq!(started.status.code(), Some(0), "{started:?}");
    let mut first = Raw::connect(&home);
    first.send(json!({"op": "attach", "session": id}));
    let snapshot = first.until("status", Some(&id));
    let notices: Vec<&str> = snapshot
        .iter()
        .filter(|e| e["type"] == "info")
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        notices.iter().any(|m| m.contains("`bash` (call_d)")),
        "{snapshot:#?}"
    );
    let mut second = Raw::connect(&home);
    second.send(json!({"op": "attach", "session": id}));
    let again = second.until("status", Some(&id));
    assert!(
        again.iter().any(|e| e["type"] == "info"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains("`bash` (call_d)")),
        "{again:#?}"
    );
    model.push(text_reply(&["still here"]));
    first.send(json!({"op": "user_message", "content": "next", "session": id}));
    let turn = first.until_status("ready", &id);
    assert!(!turn.iter().any(|e| e["type"] == "error"), "{turn:#?}");
    let request = model.requests().pop().unwrap();
    assert_eq!(
        tool_message(&request, "call_d")["content"],
        "interrupted: the session stopped before this call finished"
    );
}

/// A session with one completed turn, ended; returns its id and file.
fn saved_session(home: &Home, model: &MockModel) -> (String, PathBuf) {
    model.push(text_reply(&["noted"]));
    let mut serve = Serve::ready(home);
    let id = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user("remember this");
    serve.until_ready();
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    let path = session_file(home.path(), &id);
    (id, path)
}

#[test]
fn a_session_file_that_cannot_be_loaded_is_refused_and_left_as_it_is() {
    let (model, home) = setup("manual");
    let (id, path) = saved_session(&home, &model);
    let original = std::fs::read(&path).unwrap();
    let first_end = original.iter().position(|&b| b == b'\n').unwrap();
    let corrupt = [b"{not json".as_slice(), &original[first_end..]].concat();
    for (what, bytes) in [("empty", Vec::new()), ("corrupt first line", corrupt)] {
        std::fs::write(&path, &bytes).unwrap();
        let mut serve = Serve::builder(&home).arg("--session").arg(&id).start();
        assert_eq!(serve.next()["type"], "hello");
        let error = serve.next();
        assert_eq!(error["type"], "error", "{what}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("cannot be continued") && message.contains("left as it is"),
            "{what}: {message}"
        );
        assert_eq!(serve.wait().code(), Some(2), "{what}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{what}: the file changed"
        );

        // Through the daemon: an error naming the session, and the file untouched.
        let _guard = DaemonGuard(&home);
        assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
        let mut raw = Raw::connect(&home);
        raw.send(json!({"op": "attach", "session": id}));
        let answer = raw.next();
        assert_eq!(answer["type"], "error", "{what}: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap()
                .contains("cannot be continued"),
            "{what}: {answer}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{what}: the daemon wrote"
        );
    }
}
