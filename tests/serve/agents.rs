//! Subagents against the scripted model: each agent's replies are routed by the id
//! line of its system prompt. Foreground and background spawns, their events and
//! transcripts, the transcript limits, concurrency, interrupts and steering, and how
//! often `agent_runs` is pushed.

use std::time::Instant;

use serde_json::{Value, json};

use crate::common::mock::{
    Gate, MockModel, Reply, Step, finish, reasoning, text, text_reply, tool_call, usage,
};
use crate::common::serve::{Home, Serve, types};

pub fn setup(extra: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), extra);
    (model, home)
}

/// What routes an agent's requests in the mock: the id line of its system prompt.
pub fn marker(id: &str) -> String {
    format!("Your agent id is {id}.")
}

/// A reply making these tool calls (`(id, name, arguments)`), in one message.
pub fn calls(calls: &[(&str, &str, Value)], tokens: (u64, u64)) -> Reply {
    let mut steps: Vec<Step> = calls
        .iter()
        .enumerate()
        .map(|(index, (id, name, arguments))| {
            tool_call(index as u32, id, name, &arguments.to_string())
        })
        .collect();
    steps.extend([finish("tool_calls"), usage(tokens.0, tokens.1), Step::Done]);
    Reply::Sse(steps)
}

pub fn spawn(task_name: &str, prompt: &str, background: bool) -> Value {
    json!({"task_name": task_name, "prompt": prompt, "background": background})
}

/// The events up to `status: ready`, without the `agent_runs` pushed while agents
/// work (how many there are depends on timing), and those too.
pub fn until_ready_split(serve: &mut Serve) -> (Vec<Value>, Vec<Value>) {
    let events = serve.until_ready();
    events.into_iter().partition(|e| e["type"] != "agent_runs")
}

pub fn transcript_of(serve: &mut Serve, id: &str) -> Vec<Value> {
    serve.send(json!({"op": "subagent_transcript", "agent_id": id}));
    let answer = serve.expect_one("subagent_transcript");
    assert_eq!(answer["agent_id"], id);
    assert!(answer.get("error").is_none(), "{answer}");
    answer["items"].as_array().unwrap().clone()
}

pub fn agent_runs(serve: &mut Serve) -> Vec<Value> {
    serve.send(json!({"op": "agent_runs"}));
    let runs = serve.expect_one("agent_runs");
    assert_eq!(runs["workflows"], json!([]));
    runs["agents"].as_array().unwrap().clone()
}

#[test]
fn a_foreground_subagent_answers_its_spawn_call() {
    // Priced so that the cost counts input tokens one for one.
    let (model, home) = setup("input_price = 1000000.0");
    std::fs::write(home.path().join("a.txt"), "x\n").unwrap();
    model.push(calls(
        &[(
            "call_spawn",
            "spawn_agent",
            spawn("lister", "List the files", false),
        )],
        (50, 10),
    ));
    model.push_for(
        &marker("/root/lister"),
        Reply::Sse(vec![
            reasoning("look"),
            tool_call(0, "a1", "list_dir", r#"{"path":"."}"#),
            finish("tool_calls"),
            usage(30, 5),
            Step::Done,
        ]),
    );
    model.push_for(
        &marker("/root/lister"),
        Reply::Sse(vec![
            text("Found "),
            text("a.txt"),
            finish("stop"),
            usage(40, 6),
            Step::Done,
        ]),
    );
    model.push(text_reply(&["Done."]));
    let mut serve = Serve::ready(&home);
    serve.user("what is here?");
    let (events, pushed) = until_ready_split(&mut serve);
    assert_eq!(
        types(&events),
        [
            "user_message",
            "status",
            "connecting",
            "thinking_start",
            "tool_start",
            "subagent_lifecycle",
            "subagent_lifecycle",
            "tool_output",
            "connecting",
            "thinking_start",
            "assistant_start",
            "assistant_delta",
            "usage",
            "context_usage",
            "status"
        ],
        "the agent's own calls are not the parent's cards: {events:#?}"
    );
    let started = &events[5];
    assert_eq!(
        started,
        &json!({"type": "subagent_lifecycle", "path": "/root/lister", "status": "started",
                "message": "List the files", "label": "lister", "model": "mock/mock-1",
                "tool_use_id": "call_spawn", "session": started["session"]})
    );
    let completed = &events[6];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["message"], "Found a.txt");
    let output = &events[7];
    assert_eq!(output["call_id"], "call_spawn");
    assert_eq!(output["output"], "Found a.txt");
    assert_eq!(output["is_error"], false);
    // agent_runs at spawn and at the end (both at once), maybe one in between.
    assert!((2..=3).contains(&pushed.len()), "{pushed:#?}");
    assert_eq!(pushed[0]["agents"][0]["state"], "running");
    let last = &pushed[pushed.len() - 1]["agents"][0];
    assert_eq!(last["state"], "completed");
    // Subagent tokens count in the session's usage and cost.
    let usage = &events[12];
    assert_eq!(usage["input_tokens"], 50 + 100 + 30 + 40);
    assert_eq!(usage["output_tokens"], 10 + 20 + 5 + 6);
    assert_eq!(events[13]["cost"].as_f64().unwrap(), 220.0);

    let runs = agent_runs(&mut serve);
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    let started_at = run["started_at"].as_u64().unwrap();
    assert!(started_at > 1_700_000_000_000, "{run}");
    assert!(run["duration_ms"].is_u64());
    assert_eq!(
        run,
        &json!({"id": "/root/lister", "label": "lister", "model": "mock/mock-1",
                "effort": null, "state": "completed", "started_at": started_at,
                "duration_ms": run["duration_ms"], "tokens": 81, "tool_calls": 1,
                "prompt": "List the files", "result": "Found a.txt", "error": null,
                "type": "subagent", "tool_use_id": "call_spawn", "activity": null})
    );
    let items = transcript_of(&mut serve, "/root/lister");
    let listing = items[2]["output"].as_str().unwrap().to_owned();
    assert!(listing.contains("a.txt"), "{listing}");
    assert_eq!(
        items,
        [
            json!({"role": "user", "content": "List the files"}),
            json!({"role": "reasoning", "content": "look"}),
            json!({"role": "tool", "call_id": "a1", "name": "list_dir", "input": "{\"path\":\".\"}",
                   "output": listing, "running": false, "is_error": false}),
            json!({"role": "assistant", "content": "Found a.txt"}),
        ]
    );
    serve.send(json!({"op": "subagent_transcript", "agent_id": "/root/nobody"}));
    let unknown = serve.expect_one("subagent_transcript");
    assert_eq!(unknown["error"], "unknown agent: /root/nobody");
    assert!(unknown.get("items").is_none());

    let requests = model.requests();
    let agent = requests
        .iter()
        .find(|r| r.system().contains(&marker("/root/lister")))
        .unwrap();
    let tools = agent.tool_names();
    assert!(tools.contains(&"list_dir"), "{tools:?}");
    for parent_only in ["spawn_agent", "update_plan", "wait_agents"] {
        assert!(!tools.contains(&parent_only), "depth 1 of 1: {tools:?}");
    }
    assert_eq!(
        agent.messages()[1],
        json!({"role": "user", "content": "List the files"})
    );
    let parent = &requests[0];
    assert!(parent.tool_names().contains(&"spawn_agent"));
    assert!(!parent.system().contains("Your agent id"));
    let last = requests.last().unwrap().last_message().clone();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["content"], "Found a.txt");
}

#[test]
fn background_subagents_stream_at_once_and_are_waited_for() {
    let (model, home) = setup("");
    let gates = [Gate::new(), Gate::new()];
    model.push(calls(
        &[
            ("s1", "spawn_agent", spawn("alpha", "Do A", true)),
            ("s2", "spawn_agent", spawn("beta", "Do B", true)),
        ],
        (10, 1),
    ));
    model.push(calls(&[("w1", "wait_agents", json!({}))], (10, 1)));
    for (name, gate) in ["alpha", "beta"].iter().zip(&gates) {
        let upper = name.to_uppercase();
        model.push_for(
            &marker(&format!("/root/{name}")),
            Reply::Sse(vec![
                text(&format!("{upper} one")),
                Step::Wait(gate.clone()),
                text(" two"),
                finish("stop"),
                usage(10, 2),
                Step::Done,
            ]),
        );
    }
    model.push(text_reply(&["Both done."]));
    let mut serve = Serve::ready(&home);
    serve.user("do both");
    // Both agents are writing their replies while both replies are held open.
    let mut seen = Vec::new();
    loop {
        let event = serve.next();
        seen.push(event.clone());
        if event["type"] != "agent_runs" {
            continue;
        }
        let agents = event["agents"].as_array().unwrap();
        let writing = agents
            .iter()
            .filter(|a| a["activity"] == "Writing a reply")
            .count();
        if agents.len() == 2 && writing == 2 {
            break;
        }
    }
    let outputs: Vec<&Value> = seen.iter().filter(|e| e["type"] == "tool_output").collect();
    assert_eq!(outputs.len(), 2, "the spawns returned at once: {seen:#?}");
    assert_eq!(
        outputs[0]["output"],
        "Started subagent /root/alpha in the background. Collect its answer with wait_agents."
    );
    for gate in &gates {
        gate.open();
    }
    let (events, _) = until_ready_split(&mut serve);
    let waited = events
        .iter()
        .find(|e| e["type"] == "tool_output" && e["call_id"] == "w1")
        .unwrap();
    assert_eq!(
        waited["output"],
        "[/root/alpha is completed]\nALPHA one two\n\n[/root/beta is completed]\nBETA one two"
    );
    let lifecycle: Vec<(&str, &str)> = seen
        .iter()
        .chain(&events)
        .filter(|e| e["type"] == "subagent_lifecycle")
        .map(|e| (e["path"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(lifecycle.len(), 4, "{lifecycle:?}");
    assert_eq!(
        lifecycle[..2],
        [("/root/alpha", "started"), ("/root/beta", "started")]
    );
    assert!(lifecycle[2..].contains(&("/root/alpha", "completed")));
    assert!(lifecycle[2..].contains(&("/root/beta", "completed")));
}

#[test]
fn agent_runs_is_pushed_at_most_twice_a_second_while_agents_work() {
    let (model, home) = setup("");
    let gate = Gate::new();
    let listings: Vec<(String, &str, Value)> = (0..40)
        .map(|n| (format!("l{n}"), "list_dir", json!({"path": "."})))
        .collect();
    let listings: Vec<(&str, &str, Value)> = listings
        .iter()
        .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
        .collect();
    model.push(calls(
        &[("s1", "spawn_agent", spawn("busy", "Look around", true))],
        (10, 1),
    ));
    model.push(text_reply(&["Started it."]));
    model.push_for(&marker("/root/busy"), calls(&listings, (10, 1)));
    model.push_for(
        &marker("/root/busy"),
        Reply::Sse(vec![
            Step::Wait(gate.clone()),
            text("done"),
            finish("stop"),
            Step::Done,
        ]),
    );
    let mut serve = Serve::ready(&home);
    serve.user("start it");
    // From the spawn on, count the pushes: those right after a lifecycle notice go at
    // once; the others are rate limited, and the last of them shows all 40 calls while
    // the agent's second reply is still held open.
    let mut start = None;
    let mut after_lifecycle = false;
    let mut limited = 0u32;
    loop {
        let event = serve.next();
        match event["type"].as_str().unwrap() {
            "subagent_lifecycle" => {
                start.get_or_insert_with(Instant::now);
                after_lifecycle = true;
                continue;
            }
            "agent_runs" if after_lifecycle => after_lifecycle = false,
            "agent_runs" => {
                limited += 1;
                let run = &event["agents"][0];
                assert_eq!(run["state"], "running");
                if run["tool_calls"] == 40 {
                    break;
                }
            }
            _ => {}
        }
    }
    let elapsed = start.unwrap().elapsed().as_secs_f64();
    assert!(
        f64::from(limited) <= 2.0 * elapsed + 1.0,
        "{limited} rate-limited pushes in {elapsed:.2} s"
    );
    model.wait_until("the agent's second request", |requests| {
        requests
            .iter()
            .filter(|r| r.system().contains(&marker("/root/busy")))
            .count()
            == 2
    });
    gate.open();
    // The agent finishes on its own after the turn ended: announced at once.
    loop {
        let event = serve.next();
        if event["type"] == "subagent_lifecycle" {
            assert_eq!(event["status"], "completed");
            break;
        }
    }
    let runs = serve.expect_one("agent_runs");
    assert_eq!(runs["agents"][0]["state"], "completed");
    assert_eq!(runs["agents"][0]["tool_calls"], 40);
}

#[test]
fn an_interrupt_stops_the_turn_and_closes_its_subagents() {
    let (model, home) = setup("");
    let gate = Gate::new();
    model.push(calls(
        &[("s1", "spawn_agent", spawn("slow", "Take your time", false))],
        (10, 1),
    ));
    model.push_for(
        &marker("/root/slow"),
        Reply::Sse(vec![text("Thinking"), Step::Wait(gate.clone()), Step::Done]),
    );
    let mut serve = Serve::ready(&home);
    serve.user("go slowly");
    // The agent is writing its reply (the push that says so comes within half a second).
    loop {
        let event = serve.next();
        if event["type"] == "agent_runs" && event["agents"][0]["activity"] == "Writing a reply" {
            break;
        }
    }
    serve.send(json!({"op": "interrupt"}));
    let events = serve.until_status("interrupted");
    let tail: Vec<&str> = types(&events).into_iter().rev().take(2).collect();
    assert_eq!(tail, ["status", "info"]);
    let closed = events
        .iter()
        .position(|e| e["type"] == "subagent_lifecycle" && e["status"] == "interrupted")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(events[closed]["path"], "/root/slow");
    let runs = &events[closed + 1];
    assert_eq!(runs["type"], "agent_runs");
    assert_eq!(runs["agents"][0]["state"], "interrupted");
    let card = events
        .iter()
        .find(|e| e["type"] == "tool_output" && e["call_id"] == "s1")
        .unwrap();
    assert_eq!(card["output"], "interrupted by the user");
    let runs = agent_runs(&mut serve);
    assert_eq!(runs[0]["state"], "interrupted");
    assert!(runs[0]["activity"].is_null());
    let items = transcript_of(&mut serve, "/root/slow");
    assert_eq!(
        items,
        [
            json!({"role": "user", "content": "Take your time"}),
            json!({"role": "assistant", "content": "Thinking"}),
        ]
    );
    gate.open();
}

#[test]
fn a_steered_message_reaches_the_parent_while_its_subagent_keeps_going() {
    let (model, home) = setup("");
    let parent_gate = Gate::new();
    let agent_gate = Gate::new();
    model.push(calls(
        &[("s1", "spawn_agent", spawn("helper", "Help out", true))],
        (10, 1),
    ));
    model.push(Reply::Sse(vec![
        Step::Wait(parent_gate.clone()),
        tool_call(0, "w1", "wait_agents", r#"{"agent_ids":["/root/helper"]}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push_for(
        &marker("/root/helper"),
        Reply::Sse(vec![
            Step::Wait(agent_gate.clone()),
            text("helped"),
            finish("stop"),
            Step::Done,
        ]),
    );
    model.push(text_reply(&["thanks"]));
    let mut serve = Serve::ready(&home);
    serve.user("start");
    model.wait_until("both requests", |requests| requests.len() == 3);
    serve.user("also check the docs");
    serve.send(json!({"op": "steer"}));
    serve.until_status("steering");
    parent_gate.open();
    agent_gate.open();
    let (events, _) = until_ready_split(&mut serve);
    let steered = events
        .iter()
        .find(|e| e["type"] == "user_message")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(steered["content"], "also check the docs");
    let lifecycle: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "subagent_lifecycle")
        .collect();
    assert_eq!(lifecycle.len(), 1);
    assert_eq!(
        lifecycle[0]["status"], "completed",
        "the subagent kept going"
    );
    let last = model.requests().last().unwrap().clone();
    let texts: Vec<String> = last.messages().iter().map(|m| m.to_string()).collect();
    assert!(
        texts.iter().any(|m| m.contains("also check the docs")),
        "{texts:#?}"
    );
    assert!(texts.iter().any(|m| m.contains("helped")), "{texts:#?}");
    // The agent never read the steered message.
    let agent = model
        .requests()
        .into_iter()
        .find(|r| r.system().contains(&marker("/root/helper")))
        .unwrap();
    assert_eq!(agent.messages().len(), 2);
}

#[test]
fn a_running_subagent_reads_messages_and_can_be_closed() {
    let (model, home) = setup("");
    let talk = Gate::new();
    let hold = Gate::new();
    let closing = Gate::new();
    model.push(calls(
        &[
            ("s1", "spawn_agent", spawn("talker", "Talk", true)),
            ("s2", "spawn_agent", spawn("quitter", "Quit", true)),
            (
                "m1",
                "message_agent",
                json!({"agent_id": "/root/talker", "content": "also X"}),
            ),
        ],
        (10, 1),
    ));
    // The parent closes the quitter once it is at work.
    model.push(Reply::Sse(vec![
        Step::Wait(closing.clone()),
        tool_call(0, "c1", "close_agent", r#"{"agent_id":"/root/quitter"}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push(calls(
        &[("w1", "wait_agents", json!({"agent_ids": ["/root/talker"]}))],
        (10, 1),
    ));
    model.push_for(
        &marker("/root/talker"),
        Reply::Sse(vec![
            Step::Wait(talk.clone()),
            tool_call(0, "t1", "list_dir", r#"{"path":"."}"#),
            finish("tool_calls"),
            Step::Done,
        ]),
    );
    model.push_for(&marker("/root/talker"), text_reply(&["did X"]));
    model.push_for(
        &marker("/root/quitter"),
        Reply::Sse(vec![Step::Wait(hold.clone()), Step::Done]),
    );
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    serve.user("talk");
    model.wait_until("the quitter's request", |requests| {
        requests
            .iter()
            .any(|r| r.system().contains(&marker("/root/quitter")))
    });
    closing.open();
    let mut events = serve.until("tool_output");
    while events.last().unwrap()["call_id"] != "c1" {
        events.extend(serve.until("tool_output"));
    }
    talk.open();
    events.extend(serve.until_ready());
    let output = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_output" && e["call_id"] == id)
            .unwrap()["output"]
            .clone()
    };
    assert_eq!(
        output("m1"),
        "Sent to /root/talker: it reads the message before its next step."
    );
    assert_eq!(output("c1"), "Closed /root/quitter.");
    assert_eq!(output("w1"), "[/root/talker is completed]\ndid X");
    let notices: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["type"] == "subagent_lifecycle" && e["status"] != "started")
        .map(|e| (e["path"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    // The message may be read before the first request or the second.
    assert_eq!(notices.len(), 3, "{notices:?}");
    assert!(
        notices.contains(&("/root/quitter", "closed")),
        "{notices:?}"
    );
    assert_eq!(notices[2], ("/root/talker", "completed"));
    assert!(
        notices.contains(&("/root/talker", "progress")),
        "{notices:?}"
    );
    let runs = agent_runs(&mut serve);
    assert_eq!(runs[1]["state"], "closed");
    let requests = model.requests();
    let talker: Vec<_> = requests
        .iter()
        .filter(|r| r.system().contains(&marker("/root/talker")))
        .collect();
    assert!(
        talker[1]
            .messages()
            .iter()
            .any(|m| m["content"] == "also X")
    );
    let items = transcript_of(&mut serve, "/root/talker");
    assert!(
        items.contains(&json!({"role": "user", "content": "also X"})),
        "{items:#?}"
    );
    hold.open();
}
