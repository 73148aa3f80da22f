//! The agent trace through the daemon: a client attaching mid-turn sees the goal, the
//! step list and the running subagents in its snapshot, and the live events go on
//! from there for every client.

use serde_json::{Value, json};

use crate::common::daemon::DaemonGuard;
use crate::common::mock::{Gate, MockModel, Reply, Step, finish, text, text_reply, tool_call};
use crate::common::serve::{Home, Serve, types};

fn marker(id: &str) -> String {
    format!("Your agent id is {id}.")
}

fn one_reply(steps: Vec<Step>) -> Reply {
    let mut steps = steps;
    steps.extend([finish("tool_calls"), Step::Done]);
    Reply::Sse(steps)
}

#[test]
fn a_late_joiner_sees_the_goal_the_plan_and_the_running_agents() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    let _guard = DaemonGuard(&home);
    let gate = Gate::new();
    let plan = json!([
        {"step": "Split the work", "status": "completed"},
        {"step": "Collect the answers", "status": "in_progress"}
    ]);
    model.push(one_reply(vec![
        tool_call(0, "p1", "update_plan", &json!({"plan": plan}).to_string()),
        tool_call(
            1,
            "s1",
            "spawn_agent",
            r#"{"task_name":"worker","prompt":"Work","background":true}"#,
        ),
    ]));
    model.push(one_reply(vec![tool_call(0, "w1", "wait_agents", "{}")]));
    model.push(one_reply(vec![tool_call(
        0,
        "g1",
        "update_goal",
        r#"{"status":"achieved","summary":"done"}"#,
    )]));
    model.push(text_reply(&["Shipped."]));
    model.push_for(
        &marker("/root/worker"),
        Reply::Sse(vec![
            text("working"),
            Step::Wait(gate.clone()),
            text(" hard"),
            finish("stop"),
            Step::Done,
        ]),
    );

    let mut first = Serve::shim(&home).start();
    let session = first.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    first.send(json!({"op": "command", "input": "/goal ship it"}));
    first.until("plan");
    first.until("subagent_lifecycle");
    model.wait_until("the worker's request", |requests| {
        requests
            .iter()
            .any(|r| r.system().contains(&marker("/root/worker")))
    });

    let mut second = Serve::shim(&home).arg("--session").arg(&session).start();
    assert_eq!(second.next()["type"], "hello");
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
            "goal",
            "plan",
            "agent_runs",
            "status"
        ]
    );
    let goal = &snapshot[7]["goal"];
    assert_eq!(goal["objective"], "ship it");
    assert_eq!(goal["status"], "active");
    assert_eq!(snapshot[8]["plan"], plan);
    let agents = snapshot[9]["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0]["id"], "/root/worker");
    assert_eq!(agents[0]["state"], "running");
    assert_eq!(agents[0]["tool_use_id"], "s1");
    assert_eq!(snapshot[10]["message"], "streaming");
    let items = snapshot[5]["items"].as_array().unwrap();
    assert!(
        items.iter().any(|item| item["role"] == "plan_steps"),
        "{items:#?}"
    );

    // The late joiner reads the agent's work so far; the answer is its own.
    second.send(json!({"op": "subagent_transcript", "agent_id": "/root/worker"}));
    let transcript = second.until("subagent_transcript").pop().unwrap();
    assert_eq!(
        transcript["items"][0],
        json!({"role": "user", "content": "Work"})
    );

    gate.open();
    for client in [&mut first, &mut second] {
        let events = client.until_ready();
        let completed = events
            .iter()
            .find(|e| e["type"] == "subagent_lifecycle" && e["status"] == "completed")
            .unwrap_or_else(|| panic!("{events:#?}"));
        assert_eq!(completed["message"], "working hard");
        let goals: Vec<&Value> = events.iter().filter(|e| e["type"] == "goal").collect();
        assert_eq!(goals.last().unwrap()["goal"]["status"], "achieved");
        assert!(
            !events.iter().any(|e| e["type"] == "subagent_transcript"),
            "answers go to the asker only"
        );
    }
}
