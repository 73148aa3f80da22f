//! Sessions on other agents the daemon hosts (`[engines.NAME]`, `open` with `engine`):
//! here an ACP agent, which is jucode's own `jucode acp --in-process` on a second
//! profile whose model is the loopback mock. The front-end sees the serve protocol.

use serde_json::{Value, json};

use crate::common::daemon::{DaemonGuard, Raw};
use crate::common::mock::{Gate, MockModel, Step, finish, text, text_reply, tool_reply};
use crate::common::serve::{Home, Serve, joined, last_message, startup_id, types};

/// A daemon home whose `[engines.self]` runs `jucode acp --in-process` on `agent_home`.
fn hosting(agent_home: &Home, extra: &str) -> Home {
    let home = Home::new();
    home.write_config(&format!(
        "[engines.self]\nkind = \"acp\"\ncommand = \"{}\"\nargs = [\"acp\", \"--in-process\"]\nenv = {{ JUCODE_HOME = \"{}\" }}\n{extra}",
        env!("CARGO_BIN_EXE_jucode"),
        agent_home.path().display()
    ));
    home
}

fn agent(model: &MockModel, mode: &str) -> Home {
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), mode);
    home
}

fn held_reply(gate: &Gate, first: &str, rest: &str) -> crate::common::mock::Reply {
    crate::common::mock::Reply::Sse(vec![
        text(first),
        Step::Wait(gate.clone()),
        text(rest),
        finish("stop"),
        Step::Done,
    ])
}

fn open(home: &Home) -> (Serve, String) {
    let mut serve = Serve::shim(home).arg("--engine").arg("self").start();
    let startup = serve.until("status");
    let id = startup_id(&startup);
    (serve, id)
}

#[test]
fn a_turn_on_an_acp_agent_streams_as_the_serve_protocol() {
    let model = MockModel::start();
    let agent_home = agent(&model, "manual");
    let home = hosting(&agent_home, "");
    let _guard = DaemonGuard(&home);
    model.push(text_reply(&["Hello", " there"]));

    let mut serve = Serve::shim(&home).arg("--engine").arg("self").start();
    let startup = serve.until("status");
    assert_eq!(
        types(&startup),
        [
            "hello",
            "startup",
            "model_status",
            "command_list",
            "approval_mode",
            "engine_caps",
            "session_options",
            "tool_provider",
            "status"
        ]
    );
    let caps = &startup[5];
    assert_eq!(caps["engine"], "self");
    assert_eq!(caps["kind"], "acp");
    assert_eq!(
        caps["agent"],
        format!("jucode {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(caps["images"], true);
    assert_eq!(startup[2]["model"], "mock/mock-1");
    let mode = &startup[6]["options"][0];
    assert_eq!(mode["id"], "mode");
    assert_eq!(mode["value"], "manual");

    serve.user("hi");
    let turn = serve.until_ready();
    // The agent may announce its commands after the startup batch went out.
    let seen: Vec<&str> = types(&turn)
        .into_iter()
        .filter(|kind| *kind != "command_list")
        .collect();
    assert_eq!(seen.first(), Some(&"user_message"), "{seen:?}");
    assert!(seen.contains(&"assistant_start"), "{seen:?}");
    assert_eq!(joined(&turn, "assistant_delta"), "Hello there");
    let requests = model.wait_requests(1);
    assert_eq!(requests[0].last_message()["content"], "hi");

    // What the session does not offer on this engine is said, and the session goes on.
    serve.send(json!({"op": "agent_runs"}));
    let message = last_message(&serve.until("error"));
    assert!(
        message.contains("agent_runs is not available on engine self (acp)"),
        "{message}"
    );
    serve.send(json!({"op": "set_session_option", "id": "nothing", "value": "x"}));
    let message = last_message(&serve.until("error"));
    assert!(
        message.contains("has no session option nothing"),
        "{message}"
    );
    assert!(message.contains("mode"), "{message}");

    model.push(text_reply(&["Again"]));
    serve.user("once more");
    let turn = serve.until_ready();
    assert_eq!(joined(&turn, "assistant_delta"), "Again", "{turn:?}");
    let requests = model.wait_requests(2);
    let roles = requests[1].roles();
    assert_eq!(
        roles.iter().filter(|role| **role == "user").count(),
        2,
        "{roles:?}"
    );
}

#[test]
fn approvals_reach_the_client_and_are_answered_through_the_agent() {
    let model = MockModel::start();
    let agent_home = agent(&model, "manual");
    let home = hosting(&agent_home, "");
    let _guard = DaemonGuard(&home);
    let work = tempfile::tempdir().unwrap();
    let denied = work.path().join("denied.txt");
    let allowed = work.path().join("allowed.txt");
    model.push(tool_reply(
        "w1",
        "write_file",
        json!({"path": denied.display().to_string(), "content": "no\n"}),
    ));
    model.push(text_reply(&["Not written."]));
    model.push(tool_reply(
        "w2",
        "write_file",
        json!({"path": allowed.display().to_string(), "content": "yes\n"}),
    ));
    model.push(text_reply(&["Written."]));

    let mut serve = Serve::shim(&home)
        .arg("--engine")
        .arg("self")
        .cwd(work.path())
        .start();
    serve.until("status");
    serve.user("write one");
    let asked = serve.until("approval_request");
    let request = asked.last().unwrap().clone();
    assert!(
        request["summary"]
            .as_str()
            .unwrap_or("")
            .contains("denied.txt")
            || request["name"]
                .as_str()
                .unwrap_or("")
                .contains("denied.txt"),
        "{request}"
    );
    let call_id = request["call_id"].as_str().unwrap().to_owned();
    serve.send(json!({"op": "approve", "call_id": call_id, "decision": "deny"}));
    let turn = serve.until_ready();
    assert!(
        types(&turn).contains(&"approval_resolved"),
        "{:?}",
        types(&turn)
    );
    assert!(types(&turn).contains(&"tool_output"), "{:?}", types(&turn));
    assert!(!denied.exists());
    assert_eq!(joined(&turn, "assistant_delta"), "Not written.");

    serve.user("write another");
    let asked = serve.until("approval_request");
    let call_id = asked.last().unwrap()["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // An answer to no pending call is an error, and the real one still works.
    serve.send(json!({"op": "approve", "call_id": "nope", "decision": "allow"}));
    serve.until("error");
    serve.send(json!({"op": "approve", "call_id": call_id, "decision": "allow"}));
    let turn = serve.until_ready();
    assert_eq!(joined(&turn, "assistant_delta"), "Written.", "{turn:?}");
    assert_eq!(std::fs::read_to_string(&allowed).unwrap(), "yes\n");
}

#[test]
fn interrupt_queue_and_a_late_joiner_on_a_hosted_session() {
    let model = MockModel::start();
    let agent_home = agent(&model, "manual");
    let home = hosting(&agent_home, "");
    let _guard = DaemonGuard(&home);
    let gate = Gate::new();
    model.push(held_reply(&gate, "Working", " on it"));
    model.push(text_reply(&["Second answer"]));

    let (mut first, id) = open(&home);
    first.user("first");
    first.until("assistant_delta");
    first.user("second");
    let queued = first.until("pending_messages");
    assert_eq!(
        queued.last().unwrap()["messages"][0],
        "second",
        "{queued:?}"
    );

    // A second client attaches mid-turn: its snapshot has the turn so far and the queue.
    let mut second = Serve::shim(&home).arg("--session").arg(&id).start();
    let snapshot = second.until("status");
    let kinds = types(&snapshot);
    for expected in [
        "startup",
        "engine_caps",
        "session_options",
        "transcript",
        "pending_messages",
    ] {
        assert!(
            kinds.contains(&expected),
            "{expected} missing from {kinds:?}"
        );
    }
    let transcript = snapshot
        .iter()
        .find(|event| event["type"] == "transcript")
        .unwrap();
    assert!(transcript.to_string().contains("first"), "{transcript}");
    assert_eq!(joined(&snapshot, "assistant_delta"), "Working");

    // Interrupting with the queued message's index stops the turn and sends it next.
    first.send(json!({"op": "interrupt", "index": 0}));
    let stopped = first.until_status("interrupted");
    assert!(
        stopped
            .iter()
            .any(|event| event["type"] == "info" && event["message"] == "request interrupted"),
        "{:?}",
        types(&stopped)
    );
    gate.open();
    let next = first.until_ready();
    assert_eq!(joined(&next, "assistant_delta"), "Second answer");
    let watched = second.until_ready();
    assert!(
        types(&watched).contains(&"user_message"),
        "{:?}",
        types(&watched)
    );
    assert_eq!(joined(&watched, "assistant_delta"), "Second answer");
}

#[test]
fn a_hosted_session_is_resumed_after_the_daemon_restarts() {
    let model = MockModel::start();
    let agent_home = agent(&model, "manual");
    let home = hosting(&agent_home, "");
    let _guard = DaemonGuard(&home);
    model.push(text_reply(&["Remembered"]));
    let (mut serve, id) = open(&home);
    serve.user("remember the word teapot");
    serve.until_ready();
    // Listed with its engine, running and saved.
    let mut raw = Raw::connect(&home);
    raw.send(json!({"op": "sessions"}));
    let listing = raw.next();
    let entry = listing["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["session"] == id.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{listing}"));
    assert_eq!(entry["engine"], "self", "{entry}");
    assert_eq!(entry["live"], true, "{entry}");
    drop(raw);
    serve.send(json!({"op": "command", "input": "/resume"}));
    let view = serve.until("resume_view");
    let items = view.last().unwrap()["items"].as_array().unwrap().clone();
    let item = items
        .iter()
        .find(|item| item["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{items:?}"));
    assert_eq!(item["engine"], "self", "{item}");
    assert_eq!(item["active"], true, "{item}");
    serve.close_stdin();
    assert_eq!(serve.wait().code(), Some(0));
    assert_eq!(home.jucode(&["daemon", "stop"]).status.code(), Some(0));

    let listed = home.jucode(&["sessions"]);
    let listing = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(listing.contains(&id), "{listing}");
    assert!(listing.contains("(on self)"), "{listing}");

    model.push(text_reply(&["Teapot"]));
    let mut serve = Serve::shim(&home).arg("--session").arg(&id).start();
    let snapshot = serve.until("status");
    assert!(
        types(&snapshot).contains(&"engine_caps"),
        "{:?}",
        types(&snapshot)
    );
    let transcript = snapshot
        .iter()
        .find(|event| event["type"] == "transcript")
        .expect("the conversation so far");
    assert!(transcript.to_string().contains("teapot"), "{transcript}");
    serve.user("which word?");
    assert_eq!(joined(&serve.until_ready(), "assistant_delta"), "Teapot");
    // The agent continued its own conversation: the model saw the first exchange.
    let requests = model.wait_requests(2);
    let history = requests[1].messages();
    let text: String = history.iter().map(Value::to_string).collect();
    assert!(text.contains("teapot"), "{text}");
}

#[test]
fn a_missing_or_broken_engine_is_a_clear_error() {
    let agent_home = Home::new();
    let home = hosting(
        &agent_home,
        "[engines.missing]\nkind = \"acp\"\ncommand = \"/nonexistent/agent-binary\"\n\
         [engines.dies]\nkind = \"acp\"\ncommand = \"sh\"\nargs = [\"-c\", \"echo it went wrong >&2; exit 3\"]\n\
         [engines.mute]\nkind = \"acp\"\ncommand = \"sleep\"\nargs = [\"30\"]\nstartup_timeout_ms = 300\n\
         [engines.codex]\nkind = \"codex\"\nenv = { PATH = \"/nonexistent\" }\n",
    );
    let _guard = DaemonGuard(&home);
    let cases = [
        ("missing", vec!["/nonexistent/agent-binary"]),
        (
            "dies",
            vec!["`sh`", "exited with status 3", "it went wrong"],
        ),
        ("mute", vec!["`sleep`", "initialize", "0.3 s"]),
        // The default command, not on that PATH.
        ("codex", vec!["engine codex (`codex`)", "cannot start"]),
        ("nowhere", vec!["no engine nowhere", "self"]),
    ];
    for (engine, words) in cases {
        let mut serve = Serve::shim(&home).arg("--engine").arg(engine).start();
        let events = serve.rest();
        let error = events
            .iter()
            .find(|event| event["type"] == "error")
            .unwrap_or_else(|| panic!("no error for {engine}: {events:?}"));
        let message = error["message"].as_str().unwrap_or_default();
        for word in words {
            assert!(
                message.contains(word),
                "{engine}: {word:?} not in {message}"
            );
        }
        assert_eq!(serve.wait().code(), Some(2), "{engine}");
    }
}
