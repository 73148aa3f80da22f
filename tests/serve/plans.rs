//! Plan mode: the model investigates read-only, delivers a plan with `propose_plan`
//! (streamed as `plan_draft`s), and the user approves it or asks for a revision.

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call, usage};
use crate::common::serve::{Home, Serve, types};

fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "plan");
    (model, home)
}

/// A reply whose propose_plan arguments arrive in three pieces.
fn plan_reply(id: &str, title: &str, markdown: &str) -> Reply {
    let arguments = json!({"title": title, "markdown": markdown}).to_string();
    let (a, rest) = arguments.split_at(arguments.len() / 3);
    let (b, c) = rest.split_at(rest.len() / 2);
    Reply::Sse(vec![
        tool_call(0, id, "propose_plan", a),
        crate::common::mock::chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
        ),
        crate::common::mock::chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": c}}]}),
        ),
        finish("tool_calls"),
        usage(30, 20),
        Step::Done,
    ])
}

fn propose(serve: &mut Serve, model: &MockModel, markdown: &str) -> (String, Vec<Value>) {
    model.push(plan_reply("call_plan", "Add a test", markdown));
    serve.send(json!({"op": "user_message", "content": "plan a test"}));
    let events = serve.until_ready();
    let plan = events
        .iter()
        .find(|e| e["type"] == "proposed_plan")
        .unwrap_or_else(|| panic!("no proposed_plan in {events:#?}"));
    (plan["id"].as_str().unwrap().to_owned(), events)
}

#[test]
fn a_plan_streams_as_drafts_then_ends_the_turn() {
    let (model, home) = setup();
    let markdown = "# Plan\n1. Read the parser\n2. Add a test for \"empty\" input\n";
    let mut serve = Serve::ready(&home);
    let (id, events) = propose(&mut serve, &model, markdown);
    assert!(id.starts_with("plan-"), "{id}");
    let drafts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "plan_draft")
        .collect();
    assert!(drafts.len() >= 2, "{events:#?}");
    for draft in &drafts {
        assert_eq!(draft["id"], id.as_str());
    }
    let appended: String = drafts
        .iter()
        .map(|d| d["append"].as_str().unwrap())
        .collect();
    assert_eq!(appended, markdown);
    assert_eq!(drafts.last().unwrap()["title"], "Add a test");
    let tail: Vec<&str> = types(&events).into_iter().rev().take(4).collect();
    assert_eq!(tail, ["status", "context_usage", "usage", "proposed_plan"]);
    let plan = &events[events.len() - 4];
    assert_eq!(plan["title"], "Add a test");
    assert_eq!(plan["markdown"], markdown);
    assert_eq!(plan["status"], "pending");
    assert!(
        !types(&events).contains(&"tool_start"),
        "a plan is not a tool card"
    );
    assert_eq!(model.request_count(), 1, "the plan ends the turn");
    let request = &model.wait_requests(1)[0];
    let tools = request.tool_names();
    assert!(tools.contains(&"propose_plan"), "{tools:?}");

    serve.send(json!({"op": "command", "input": "/transcript"}));
    let transcript = serve.expect_one("transcript");
    let item = transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["role"] == "plan")
        .expect("plan item");
    assert_eq!(
        item,
        &json!({"role": "plan", "id": id, "title": "Add a test", "content": markdown, "status": "pending"})
    );
}

#[test]
fn approving_a_plan_switches_mode_and_implements_it() {
    let (model, home) = setup();
    let mut serve = Serve::ready(&home);
    let (id, _) = propose(&mut serve, &model, "1. do it");

    serve.send(json!({"op": "approve_plan", "id": "plan-nope", "decision": "approve"}));
    assert_eq!(
        serve.expect_one("error")["message"],
        "unknown plan id: plan-nope"
    );
    serve.send(json!({"op": "approve_plan", "id": id, "decision": "approve", "mode": "plan"}));
    serve.expect_one("error");

    model.push(text_reply(&["Implementing."]));
    serve.send(
        json!({"op": "approve_plan", "id": id, "decision": "approve", "feedback": "keep it small"}),
    );
    let events = serve.expect(&["proposed_plan", "status", "approval_mode", "user_message"]);
    assert_eq!(events[0]["id"], id.as_str());
    assert_eq!(events[0]["status"], "approved");
    assert_eq!(events[0]["markdown"], "1. do it");
    assert_eq!(events[1]["message"], "approval mode: auto-edit");
    assert_eq!(events[2]["mode"], "auto-edit");
    let content = events[3]["content"].as_str().unwrap();
    assert!(
        content.contains("approved") && content.contains("keep it small"),
        "{content}"
    );
    serve.until_ready();
    let request = &model.wait_requests(2)[1];
    let tools = request.tool_names();
    assert!(
        !tools.contains(&"propose_plan"),
        "no plans outside plan mode"
    );

    serve.send(json!({"op": "approve_plan", "id": id, "decision": "approve"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("already approved")
    );
}

#[test]
fn revising_keeps_plan_mode_and_asks_for_a_new_plan() {
    let (model, home) = setup();
    let mut serve = Serve::ready(&home);
    let (id, _) = propose(&mut serve, &model, "1. first idea");

    serve.send(json!({"op": "approve_plan", "id": id, "decision": "revise"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"].as_str().unwrap().contains("feedback"),
        "{error}"
    );

    model.push(plan_reply("call_2", "Add a test", "1. better idea"));
    serve
        .send(json!({"op": "command", "input": format!("/plan {id} revise cover the edge cases")}));
    let events = serve.expect(&["proposed_plan", "user_message"]);
    assert_eq!(events[0]["status"], "revising");
    let content = events[1]["content"].as_str().unwrap();
    assert!(content.contains("cover the edge cases"), "{content}");
    let rest = serve.until_ready();
    let new_plan = rest.iter().find(|e| e["type"] == "proposed_plan").unwrap();
    assert_ne!(new_plan["id"], id.as_str());
    assert_eq!(new_plan["markdown"], "1. better idea");
    let request = &model.wait_requests(2)[1];
    assert!(
        request.tool_names().contains(&"propose_plan"),
        "still in plan mode"
    );

    // The text form approves with a mode and notes.
    model.push(text_reply(&["ok"]));
    let new_id = new_plan["id"].as_str().unwrap().to_owned();
    serve.send(json!({"op": "command", "input": format!("/plan {new_id} approve auto go ahead")}));
    let events = serve.expect(&["proposed_plan", "status", "approval_mode", "user_message"]);
    assert_eq!(events[0]["status"], "approved");
    assert_eq!(events[2]["mode"], "auto");
    assert!(events[3]["content"].as_str().unwrap().contains("go ahead"));
    serve.until_ready();
}

#[test]
fn plan_mode_runs_read_only_tools() {
    let (model, home) = setup();
    std::fs::write(home.path().join("a.txt"), "x\n").unwrap();
    model.push(Reply::Sse(vec![
        tool_call(0, "c1", "read_file", r#"{"path":"a.txt"}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push(plan_reply("c2", "T", "plan"));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "look"}));
    let events = serve.until_ready();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["is_error"], false);
    assert!(types(&events).contains(&"proposed_plan"));
}
