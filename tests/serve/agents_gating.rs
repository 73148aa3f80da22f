//! A subagent's gated calls take the parent's path: the same approval requests (with
//! `subagent_id`), answers, hunks, allowlist, deferred actions and approval modes,
//! plan mode included.

use serde_json::{Value, json};

use super::agents::{calls, marker, setup, spawn, until_ready_split};
use crate::common::mock::{Reply, text_reply};
use crate::common::serve::{Home, Serve};

fn in_mode(mode: &str) -> (crate::common::mock::MockModel, Home) {
    let (model, home) = setup("");
    home.prepend_config(&format!("approval_mode = \"{mode}\"\n"));
    (model, home)
}

/// Reads events until one of type `ty`; returns it.
fn next_of(serve: &mut Serve, ty: &str) -> Value {
    serve.until(ty).pop().unwrap()
}

fn one_call(id: &str, name: &str, arguments: Value) -> Reply {
    calls(&[(id, name, arguments)], (10, 1))
}

#[test]
fn a_subagents_edit_is_approved_hunk_by_hunk_and_always_allows_its_tool() {
    let (model, home) = in_mode("manual");
    let lines: Vec<String> = (1..=20).map(|n| format!("l{n}")).collect();
    std::fs::write(home.path().join("f.txt"), lines.join("\n") + "\n").unwrap();
    let old = lines[..12].join("\n");
    let mut changed = lines[..12].to_vec();
    changed[0] = "L1".into();
    changed[11] = "L12".into();
    let agent = marker("/root/editor");
    model.push(one_call(
        "s1",
        "spawn_agent",
        spawn("editor", "Edit f.txt", false),
    ));
    model.push_for(
        &agent,
        one_call(
            "e1",
            "edit_file",
            json!({"path": "f.txt", "old_string": old, "new_string": changed.join("\n")}),
        ),
    );
    model.push_for(
        &agent,
        one_call("b1", "bash", json!({"command": "echo one > one.txt"})),
    );
    model.push_for(
        &agent,
        one_call("b2", "bash", json!({"command": "echo two > two.txt"})),
    );
    model.push_for(&agent, text_reply(&["edited"]));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    serve.user("edit");

    let request = next_of(&mut serve, "approval_request");
    assert_eq!(request["call_id"], "e1");
    assert_eq!(request["name"], "edit_file");
    assert_eq!(request["subagent_id"], "/root/editor");
    let hunks = request["hunks"].as_array().unwrap();
    assert_eq!(hunks.len(), 2, "{request}");
    assert_eq!(hunks[0]["id"], "f0h0");
    // A milestone of the agent's: announced at once.
    let [progress, runs] = &serve.expect(&["subagent_lifecycle", "agent_runs"])[..] else {
        unreachable!()
    };
    assert_eq!(progress["status"], "progress");
    assert_eq!(
        progress["message"],
        "waiting for approval: edit f.txt (+2 -2)"
    );
    assert_eq!(
        runs["agents"][0]["activity"],
        "Waiting for approval: edit f.txt (+2 -2)"
    );
    // Answers are validated exactly as for the parent's requests.
    serve.send(json!({"op": "approve", "call_id": "e1", "decision": "allow", "hunks": ["nope"]}));
    serve.expect_one("error");
    serve.send(json!({"op": "approve", "call_id": "e1", "decision": "allow", "hunks": ["f0h0"]}));
    let resolved = next_of(&mut serve, "approval_resolved");
    assert_eq!(resolved["decision"], "allow");

    let request = next_of(&mut serve, "approval_request");
    assert_eq!(request["call_id"], "b1");
    assert_eq!(request["subagent_id"], "/root/editor");
    serve.send(json!({"op": "command", "input": "/approve b1 allow always"}));
    let (events, _) = until_ready_split(&mut serve);
    assert!(
        !events.iter().any(|e| e["type"] == "approval_request"),
        "the second bash call ran without asking: {events:#?}"
    );
    let spawned = events
        .iter()
        .find(|e| e["type"] == "tool_output" && e["call_id"] == "s1")
        .unwrap();
    assert_eq!(spawned["output"], "edited");

    let text = std::fs::read_to_string(home.path().join("f.txt")).unwrap();
    assert!(text.starts_with("L1\nl2\n"), "{text}");
    assert!(text.contains("\nl12\n") && !text.contains("L12"), "{text}");
    assert!(home.path().join("one.txt").exists() && home.path().join("two.txt").exists());
}

#[test]
fn a_subagents_call_can_be_denied_or_deferred() {
    let (model, home) = in_mode("manual");
    model.push(one_call(
        "s1",
        "spawn_agent",
        spawn("first", "Touch it", false),
    ));
    model.push_for(
        &marker("/root/first"),
        one_call("b1", "bash", json!({"command": "touch denied.txt"})),
    );
    model.push_for(&marker("/root/first"), text_reply(&["it was denied"]));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    serve.user("one");
    let request = next_of(&mut serve, "approval_request");
    assert_eq!(request["subagent_id"], "/root/first");
    serve.send(json!({"op": "approve", "call_id": "b1", "decision": "deny"}));
    serve.until_ready();
    assert!(!home.path().join("denied.txt").exists());
    serve.send(json!({"op": "subagent_transcript", "agent_id": "/root/first"}));
    let items = serve.expect_one("subagent_transcript")["items"].clone();
    let tool = &items[1];
    assert_eq!(tool["is_error"], true);
    assert!(
        tool["output"].as_str().unwrap().contains("denied"),
        "{tool}"
    );

    // Nobody watching: the subagent's call becomes a deferred action.
    serve.send(json!({"op": "set_attended", "attended": false}));
    serve.expect_one("attended");
    model.push(one_call(
        "s2",
        "spawn_agent",
        spawn("second", "Deploy", false),
    ));
    model.push_for(
        &marker("/root/second"),
        one_call("b2", "bash", json!({"command": "touch deployed.txt"})),
    );
    model.push_for(&marker("/root/second"), text_reply(&["submitted"]));
    model.push(text_reply(&["ok"]));
    serve.user("two");
    let deferred = next_of(&mut serve, "action_deferred");
    assert_eq!(deferred["subagent_id"], "/root/second");
    assert_eq!(deferred["call_id"], "b2");
    assert_eq!(
        deferred["arguments"],
        json!({"command": "touch deployed.txt"})
    );
    serve.until_ready();
    assert!(!home.path().join("deployed.txt").exists());
    serve.send(json!({"op": "subagent_transcript", "agent_id": "/root/second"}));
    let items = serve.expect_one("subagent_transcript")["items"].clone();
    assert!(
        items[1]["output"]
            .as_str()
            .unwrap()
            .starts_with("submitted for confirmation"),
        "{items}"
    );
}

/// What becomes of a subagent's `touch` in `mode`: `run`, `ask` or `refused`.
fn other_shell_in(mode: &str) -> &'static str {
    let (model, home) = in_mode(mode);
    // The approval table alone: a sandbox would let auto-edit run the command
    // (`tests/serve/sandbox.rs`).
    home.append_config("[sandbox]\nmode = \"off\"\n");
    model.push(one_call(
        "s1",
        "spawn_agent",
        spawn("toucher", "Touch", false),
    ));
    model.push_for(
        &marker("/root/toucher"),
        one_call("b1", "bash", json!({"command": "touch made.txt"})),
    );
    model.push_for(&marker("/root/toucher"), text_reply(&["done"]));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    serve.user("go");
    let mut asked = false;
    loop {
        let event = serve.next();
        if event["type"] == "approval_request" {
            asked = true;
            serve.send(json!({"op": "approve", "call_id": "b1", "decision": "deny"}));
        }
        if event["type"] == "status" && event["message"] == "ready" {
            break;
        }
    }
    let requests = model.requests();
    let agent = requests
        .iter()
        .find(|r| r.system().contains(&marker("/root/toucher")))
        .unwrap();
    assert!(
        !agent.tool_names().contains(&"propose_plan"),
        "plans are the parent's"
    );
    if mode == "plan" {
        assert!(requests[0].tool_names().contains(&"propose_plan"));
        assert!(requests[0].tool_names().contains(&"spawn_agent"));
    }
    serve.send(json!({"op": "subagent_transcript", "agent_id": "/root/toucher"}));
    let items = serve.expect_one("subagent_transcript")["items"].clone();
    let output = items[1]["output"].as_str().unwrap().to_owned();
    match (asked, home.path().join("made.txt").exists()) {
        (true, false) => "ask",
        (false, true) => "run",
        (false, false) if output.contains("plan mode") => "refused",
        other => panic!("{mode}: {other:?}, {output}"),
    }
}

#[test]
fn a_subagent_is_gated_by_the_sessions_mode_and_inherits_plan_mode() {
    for (mode, expected) in [
        ("manual", "ask"),
        ("plan", "refused"),
        ("auto-edit", "ask"),
        ("auto", "run"),
        ("full-access", "run"),
    ] {
        assert_eq!(other_shell_in(mode), expected, "{mode}");
    }
}
