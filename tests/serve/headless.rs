//! `jucode --headless`: one turn, serve's event lines, the turn's outcome as exit code.

use serde_json::{Value, json};

use crate::common::mock::{Gate, MockModel, Reply, Step, text, text_reply, tool_reply};
use crate::common::serve::{Home, Serve, types};

fn setup(mode: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), mode);
    (model, home)
}

/// Every line to EOF, each a valid event; the exit code.
fn finish(mut run: Serve) -> (Vec<Value>, Option<i32>) {
    let mut events = Vec::new();
    while let Some(line) = run.next_line() {
        let event: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("stdout line is not JSON ({err}): {line}"));
        crate::common::schema::assert_event(&event);
        events.push(event);
    }
    let code = run.wait().code();
    (events, code)
}

fn headless(home: &Home, args: &[&str]) -> Serve {
    let mut all = vec!["--headless"];
    all.extend_from_slice(args);
    Serve::command(home, &all).start()
}

#[test]
fn a_completed_turn_exits_0_with_serve_s_events() {
    let (model, home) = setup("manual");
    model.push(text_reply(&["Hello", " there"]));
    let (events, code) = finish(headless(&home, &["say", "hello"]));
    assert_eq!(code, Some(0));
    let kinds = types(&events);
    assert_eq!(
        kinds[..6],
        [
            "hello",
            "startup",
            "model_status",
            "command_list",
            "approval_mode",
            "mcp_servers"
        ]
    );
    let user = events.iter().find(|e| e["type"] == "user_message").unwrap();
    assert_eq!(user["content"], "say hello");
    assert_eq!(events.last().unwrap()["type"], "status");
    assert_eq!(events.last().unwrap()["message"], "ready");
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "assistant_delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "Hello there");
    // The same lines as serve: the session is saved like any other.
    let id = events[1]["session_id"].as_str().unwrap();
    model.push(text_reply(&["again"]));
    let (events, code) = finish(headless(&home, &["--session", id, "and again"]));
    assert_eq!(code, Some(0));
    assert_eq!(events[1]["session_id"], id);
    let request = model.wait_requests(2).pop().unwrap();
    let texts: Vec<&str> = request.messages()[1..]
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(texts, ["say hello", "Hello there", "and again"]);
}

#[test]
fn the_prompt_comes_from_stdin_when_absent() {
    let (model, home) = setup("manual");
    model.push(text_reply(&["ok"]));
    let mut run = headless(&home, &[]);
    run.send_raw("summarise\nthis file");
    run.close_stdin();
    let (events, code) = finish(run);
    assert_eq!(code, Some(0));
    let user = events.iter().find(|e| e["type"] == "user_message").unwrap();
    assert_eq!(user["content"], "summarise\nthis file");
    model.wait_requests(1);
}

#[test]
fn a_failed_turn_exits_1() {
    let (model, home) = setup("manual");
    model.push(Reply::Status {
        code: 401,
        body: json!({"error": {"message": "bad key"}}).to_string(),
        headers: Vec::new(),
    });
    let (events, code) = finish(headless(&home, &["hi"]));
    assert_eq!(code, Some(1));
    assert!(events.iter().any(|e| e["type"] == "error"), "{events:#?}");
    assert_eq!(events.last().unwrap()["message"], "ready");
}

#[test]
fn gated_calls_are_deferred_and_the_run_still_exits_0() {
    let (model, home) = setup("manual");
    let dir = tempfile::tempdir().unwrap();
    model.push(tool_reply(
        "call_1",
        "bash",
        json!({"command": "touch made"}),
    ));
    model.push(text_reply(&["I asked to run it."]));
    let (events, code) = finish(
        Serve::command(&home, &["--headless", "make a file"])
            .cwd(dir.path())
            .start(),
    );
    assert_eq!(code, Some(0));
    assert!(
        events.iter().any(|e| e["type"] == "action_deferred"),
        "{events:#?}"
    );
    assert!(!events.iter().any(|e| e["type"] == "approval_request"));
    assert!(
        !dir.path().join("made").exists(),
        "a gated call never runs unasked"
    );
    model.wait_requests(2);

    // A mode that allows it runs it.
    model.push(tool_reply(
        "call_2",
        "bash",
        json!({"command": "touch made"}),
    ));
    model.push(text_reply(&["done"]));
    let (events, code) = finish(
        Serve::command(
            &home,
            &[
                "--headless",
                "--approval-mode",
                "full-access",
                "make a file",
            ],
        )
        .cwd(dir.path())
        .start(),
    );
    assert_eq!(code, Some(0));
    assert!(dir.path().join("made").exists(), "{events:#?}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "approval_mode" && e["mode"] == "full-access")
    );
    model.wait_requests(4);
}

#[test]
fn sigint_interrupts_the_turn_and_exits_130() {
    let (model, home) = setup("manual");
    let never = Gate::new();
    model.push(Reply::Sse(vec![text("partial"), Step::Wait(never.clone())]));
    let mut run = headless(&home, &["a long answer please"]);
    run.until("assistant_delta");
    let pid = nix::unistd::Pid::from_raw(run.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let (events, code) = finish(run);
    assert_eq!(code, Some(130));
    assert_eq!(
        events.last().unwrap()["message"],
        "interrupted",
        "{events:#?}"
    );
    never.open();
}

#[test]
fn bad_arguments_say_why() {
    let home = Home::new();
    let (events, code) = finish(headless(&home, &["--model", "nope/x", "hi"]));
    assert_eq!(code, Some(2));
    assert_eq!(types(&events), ["hello", "error"]);
    assert!(
        events[1]["message"]
            .as_str()
            .unwrap()
            .contains("--model nope/x")
    );
    let (events, code) = finish(headless(&home, &["--session", "no-such-id", "hi"]));
    assert_eq!(code, Some(2));
    assert_eq!(types(&events), ["hello", "error"]);
    let (events, code) = finish(Serve::command(&home, &["--chat", "hi"]).start());
    assert_eq!(code, Some(2), "--chat needs --headless");
    assert!(events.is_empty());
}

#[test]
fn a_config_that_cannot_be_used_exits_2_and_runs_nothing() {
    let model = MockModel::start();
    let home = Home::new();
    let good = format!(
        "model = \"mock/m\"\n[providers.mock]\nkind = \"openai\"\nbase_url = \"{}\"\n",
        model.base_url()
    );
    let broken = [
        (
            "a syntax error",
            "model = \"mock/m\n".to_owned(),
            "config error",
        ),
        (
            "an unknown key",
            format!("colour = \"blue\"\n{good}"),
            "colour",
        ),
        (
            "a provider that does not exist",
            good.replace("model = \"mock/m\"", "model = \"mokc/m\""),
            "did you mean `mock`?",
        ),
    ];
    for (what, config, says) in broken {
        home.write_config(&config);
        let (events, code) = finish(headless(&home, &["hi"]));
        assert_eq!(code, Some(2), "{what}: {events:#?}");
        assert_eq!(events[0]["type"], "hello", "{what}");
        let errors: Vec<&str> = events[1..]
            .iter()
            .map(|e| {
                assert_eq!(e["type"], "error", "{what}: only errors follow hello: {e}");
                e["message"].as_str().unwrap()
            })
            .collect();
        assert!(
            errors.iter().any(|e| e.contains(says)),
            "{what}: {errors:#?}"
        );
    }
    assert_eq!(model.requests().len(), 0, "no request reached the model");
    // The same file without its mistake runs.
    home.write_config(&good);
    model.push(text_reply(&["fine"]));
    let (_, code) = finish(headless(&home, &["hi"]));
    assert_eq!(code, Some(0));
}

#[test]
fn the_demo_s_call_ids_stay_unique_in_a_session_across_resumes() {
    // Each process's demo counts its calls from call_1; a resumed session goes on from
    // the highest its conversation has.
    let home = Home::new();
    let mut ids = Vec::new();
    let mut session = None::<String>;
    for round in 0..3 {
        let mut args = vec!["look around"];
        if let Some(id) = &session {
            args = vec!["--session", id, "look again"];
        }
        let (events, code) = finish(headless(&home, &args));
        assert_eq!(code, Some(0), "round {round}: {events:#?}");
        session.get_or_insert_with(|| {
            let startup = events.iter().find(|e| e["type"] == "startup").unwrap();
            startup["session_id"].as_str().unwrap().to_owned()
        });
        for event in events.iter().filter(|e| e["type"] == "tool_start") {
            ids.push(event["call_id"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(ids, ["call_1", "call_2", "call_3"]);
    // The file says the same.
    let path = crate::common::serve::session_file(home.path(), session.as_deref().unwrap());
    let text = std::fs::read_to_string(path).unwrap();
    let mut in_file = Vec::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line).unwrap();
        if let Some(calls) = entry.get("tool_calls").and_then(Value::as_array) {
            in_file.extend(calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()));
        }
    }
    assert_eq!(in_file, ids, "{text}");
}
