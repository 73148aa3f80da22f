//! The session's goal (`/goal`, `update_goal`, continuing on its own, the budget) and
//! its step list (`update_plan`, the `plan` event, the transcript), also after resuming.

use serde_json::{Value, json};

use super::agents::{calls, setup};
use crate::common::mock::{Reply, Step, finish, text, text_reply, usage};
use crate::common::serve::{Serve, types};

fn goal_of(event: &Value) -> &Value {
    assert_eq!(event["type"], "goal", "{event}");
    &event["goal"]
}

/// A text reply with this usage.
fn said(words: &str, tokens: (u64, u64)) -> Reply {
    Reply::Sse(vec![
        text(words),
        finish("stop"),
        usage(tokens.0, tokens.1),
        Step::Done,
    ])
}

#[test]
fn a_goal_starts_at_once_continues_on_its_own_and_ends_when_achieved() {
    let (model, home) = setup("");
    model.push(said("Step one done.", (100, 20)));
    model.push(calls(
        &[(
            "g1",
            "update_goal",
            json!({"status": "achieved", "summary": "shipped"}),
        )],
        (50, 5),
    ));
    model.push(said("All done.", (60, 6)));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "command", "input": "/goal ship the parser --budget 100000"}));
    let set = serve.expect_one("goal");
    let goal = goal_of(&set);
    assert_eq!(goal["objective"], "ship the parser");
    assert_eq!(goal["status"], "active");
    assert_eq!(goal["token_budget"], 100000);
    assert_eq!(goal["tokens_used"], 0);
    assert_eq!(goal["time_used_seconds"], 0);
    let created = goal["created_at"].as_u64().unwrap();
    assert!(created > 1_700_000_000_000);
    assert_eq!(goal["updated_at"], created);

    let first = serve.until_ready();
    assert_eq!(first[0]["type"], "user_message");
    assert_eq!(
        first[0]["content"],
        "Work toward this goal: ship the parser"
    );
    let tail: Vec<&str> = types(&first).into_iter().rev().take(4).collect();
    assert_eq!(tail, ["status", "goal", "context_usage", "usage"]);
    let after_first = goal_of(&first[first.len() - 2]).clone();
    assert_eq!(after_first["tokens_used"], 120);
    assert_eq!(after_first["status"], "active");

    // It goes on by itself.
    let second = serve.until_ready();
    assert_eq!(second[0]["type"], "user_message");
    assert!(
        second[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Continue working toward the goal: ship the parser"),
        "{second:#?}"
    );
    let goals: Vec<&Value> = second.iter().filter(|e| e["type"] == "goal").collect();
    assert_eq!(goals.len(), 2, "at the change and at the turn's end");
    assert_eq!(goals[0]["goal"]["status"], "achieved");
    assert_eq!(goals[1]["goal"]["status"], "achieved");
    assert_eq!(goals[1]["goal"]["tokens_used"], 120 + 55 + 66);

    let requests = model.wait_requests(3);
    assert!(
        requests[0].system().contains("# Goal"),
        "the goal is in the context"
    );
    assert!(requests[0].system().contains("ship the parser"));
    assert!(requests[0].tool_names().contains(&"update_goal"));
    assert!(requests[0].tool_names().contains(&"update_plan"));
    assert!(
        !requests[2].tool_names().contains(&"update_goal"),
        "achieved"
    );
    // Nothing more: no request is scripted, and the mock would fail on one.
    serve.send(json!({"op": "command", "input": "/goal"}));
    let shown = serve.expect_one("goal");
    assert_eq!(goal_of(&shown)["status"], "achieved");
    serve.send(json!({"op": "command", "input": "/goal clear"}));
    assert_eq!(serve.expect_one("goal")["goal"], Value::Null);
    serve.send(json!({"op": "command", "input": "/goal"}));
    assert_eq!(serve.expect_one("goal")["goal"], Value::Null);
}

#[test]
fn a_goal_stops_when_its_budget_is_used_up() {
    let (model, home) = setup("");
    model.push(said("one", (100, 20)));
    model.push(said("two", (100, 20)));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "command", "input": "/goal count to ten --budget 150"}));
    serve.expect_one("goal");
    let first = serve.until_ready();
    let goal = goal_of(&first[first.len() - 2]);
    assert_eq!(
        (goal["tokens_used"].as_u64(), goal["status"].as_str()),
        (Some(120), Some("active"))
    );
    let second = serve.until_ready();
    let goal = goal_of(&second[second.len() - 2]);
    assert_eq!(goal["tokens_used"], 240);
    assert_eq!(goal["status"], "budget_exhausted");
    // No third turn: a message of the user's is the next thing to run.
    model.push(text_reply(&["hi"]));
    serve.user("hello");
    let third = serve.until_ready();
    assert_eq!(third[0]["content"], "hello");
    let goal = goal_of(&third[third.len() - 2]);
    assert_eq!(goal["tokens_used"], 240, "not a turn of the goal's");
    assert_eq!(model.request_count(), 3);
}

#[test]
fn a_goal_set_during_a_turn_follows_it_and_can_be_cleared() {
    let (model, home) = setup("");
    let gate = crate::common::mock::Gate::new();
    model.push(Reply::Sse(vec![
        text("busy"),
        Step::Wait(gate.clone()),
        finish("stop"),
        usage(100, 20),
        Step::Done,
    ]));
    model.push(calls(
        &[(
            "g1",
            "update_goal",
            json!({"status": "blocked", "summary": "needs a key"}),
        )],
        (10, 1),
    ));
    model.push(said("I need an API key.", (10, 1)));
    let mut serve = Serve::ready(&home);
    serve.user("first");
    serve.until("assistant_delta");
    serve.send(json!({"op": "command", "input": "/goal"}));
    assert_eq!(serve.expect_one("goal")["goal"], Value::Null);
    serve.send(json!({"op": "command", "input": "/goal deploy it"}));
    assert_eq!(goal_of(&serve.expect_one("goal"))["status"], "active");
    gate.open();
    let first = serve.until_ready();
    let goal = goal_of(&first[first.len() - 2]);
    assert_eq!(goal["tokens_used"], 0, "it started before the goal");
    let second = serve.until_ready();
    assert!(
        second[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Continue working")
    );
    let goal = goal_of(&second[second.len() - 2]);
    assert_eq!(goal["status"], "blocked");
    serve.send(json!({"op": "command", "input": "/goal --budget 5"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("usage: /goal")
    );
}

#[test]
fn update_plan_emits_plan_and_is_kept_in_the_transcript_and_the_session() {
    let (model, home) = setup("");
    let plan = json!([
        {"step": "Read the parser", "status": "completed"},
        {"step": "Fix the bug", "status": "in_progress"},
        {"step": "Add a test", "status": "pending"}
    ]);
    model.push(calls(
        &[
            (
                "p1",
                "update_plan",
                json!({"plan": plan, "explanation": "found it"}),
            ),
            (
                "p2",
                "update_plan",
                json!({"plan": [{"step": "x", "status": "done"}]}),
            ),
        ],
        (10, 1),
    ));
    model.push(text_reply(&["Planned."]));
    let mut serve = Serve::ready(&home);
    let session = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user("plan it");
    let events = serve.until_ready();
    let at = events.iter().position(|e| e["type"] == "plan").unwrap();
    assert_eq!(
        types(&events[at - 1..at + 2]),
        ["tool_start", "plan", "tool_output"]
    );
    assert_eq!(events[at]["plan"], plan);
    assert_eq!(events[at + 1]["output"], "Plan updated.");
    let refused = events
        .iter()
        .find(|e| e["type"] == "tool_output" && e["call_id"] == "p2")
        .unwrap();
    assert_eq!(refused["is_error"], true);
    assert_eq!(events.iter().filter(|e| e["type"] == "plan").count(), 1);

    serve.send(json!({"op": "command", "input": "/transcript"}));
    let items = serve.expect_one("transcript")["items"].clone();
    let item = items
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["role"] == "plan_steps")
        .unwrap()
        .clone();
    assert_eq!(
        item,
        json!({"role": "plan_steps", "plan": plan, "explanation": "found it"})
    );
    // Scripted before the goal is set: setting it starts its first turn at once.
    model.push(calls(
        &[(
            "g1",
            "update_goal",
            json!({"status": "achieved", "summary": "done"}),
        )],
        (10, 1),
    ));
    model.push(text_reply(&["ok"]));
    serve.send(json!({"op": "command", "input": "/goal keep going"}));
    serve.expect_one("goal");
    serve.until_ready();
    serve.send(json!({"op": "shutdown"}));
    serve.rest();

    // Resumed, the session has its step list and its goal back.
    let mut again = Serve::builder(&home).arg("--session").arg(&session).start();
    again.skip_startup();
    again.send(json!({"op": "command", "input": "/goal"}));
    let goal = again.until("goal").pop().unwrap();
    assert_eq!(goal["goal"]["objective"], "keep going");
    assert_eq!(goal["goal"]["status"], "achieved");
    again.send(json!({"op": "command", "input": "/transcript"}));
    let items = again.until("transcript").pop().unwrap()["items"].clone();
    assert!(items.as_array().unwrap().contains(&item));
}

#[test]
fn moving_to_another_branch_shows_its_step_list() {
    let (model, home) = setup("");
    model.push(text_reply(&["hi"]));
    let plan = json!([{"step": "Only step", "status": "in_progress"}]);
    model.push(calls(
        &[("p1", "update_plan", json!({"plan": plan}))],
        (10, 1),
    ));
    model.push(text_reply(&["planned"]));
    let mut serve = Serve::ready(&home);
    serve.user("one");
    serve.until_ready();
    serve.user("two");
    serve.until_ready();
    serve.send(json!({"op": "command", "input": "/tree"}));
    let nodes = serve.expect_one("tree_view")["nodes"].clone();
    let first = nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["label"].as_str().unwrap().starts_with("one"))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    serve.send(json!({"op": "command", "input": format!("/tree {first}")}));
    let events = serve.expect(&["transcript", "plan"]);
    assert_eq!(events[1]["plan"], json!([]), "that branch has no step list");
    // Moving where the list stays the same says nothing more.
    serve.send(json!({"op": "command", "input": format!("/tree {first}")}));
    serve.expect_one("transcript");
    serve.send(json!({"op": "command", "input": "/goal"}));
    serve.expect_one("goal");
}
