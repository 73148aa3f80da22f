//! Subagents' transcripts and records: the transcript limits, ids and argument checks,
//! nesting up to `[agents] max_depth`, and finished agents saved with the session.

use serde_json::{Value, json};

use super::agents::{agent_runs, calls, marker, setup, spawn, transcript_of, until_ready_split};
use crate::common::mock::text_reply;
use crate::common::serve::Serve;

#[test]
fn a_long_transcript_is_kept_within_its_limits() {
    let (model, home) = setup("");
    let big: String = (1..=150)
        .map(|n| format!("line {n} of the big file\n"))
        .collect();
    std::fs::write(home.path().join("big.txt"), &big).unwrap();
    let reads: Vec<(String, Value)> = (0..70)
        .map(|n| (format!("r{n}"), json!({"path": "big.txt"})))
        .collect();
    let reads: Vec<(&str, &str, Value)> = reads
        .iter()
        .map(|(id, args)| (id.as_str(), "read_file", args.clone()))
        .collect();
    let mut more: Vec<(String, &str, Value)> = vec![(
        "g1".to_owned(),
        "grep",
        json!({"pattern": "x".repeat(5000)}),
    )];
    more.extend((0..250).map(|n| (format!("l{n}"), "list_dir", json!({"path": "."}))));
    let more: Vec<(&str, &str, Value)> = more
        .iter()
        .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
        .collect();
    model.push(calls(
        &[("s1", "spawn_agent", spawn("reader", "Read it all", false))],
        (10, 1),
    ));
    model.push_for(&marker("/root/reader"), calls(&reads, (10, 1)));
    model.push_for(&marker("/root/reader"), calls(&more, (10, 1)));
    model.push_for(&marker("/root/reader"), text_reply(&["Read it all."]));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    serve.user("read");
    serve.until_ready();
    let items = transcript_of(&mut serve, "/root/reader");
    assert!(items.len() <= 300, "{} items", items.len());
    assert_eq!(items[0], json!({"role": "user", "content": "Read it all"}));
    assert_eq!(
        items[1],
        json!({"role": "assistant", "content": "… earlier steps trimmed"})
    );
    assert_eq!(
        items.last().unwrap(),
        &json!({"role": "assistant", "content": "Read it all."})
    );
    let text_bytes: usize = items
        .iter()
        .map(|item| {
            ["content", "input", "output"]
                .iter()
                .filter_map(|key| item[*key].as_str())
                .map(str::len)
                .sum::<usize>()
        })
        .sum();
    assert!(text_bytes <= 256 * 1024, "{text_bytes} bytes");
    for item in items.iter().filter(|item| item["role"] == "tool") {
        assert!(item["input"].as_str().unwrap().len() <= 4096, "{item}");
        assert!(item["output"].as_str().unwrap().len() <= 4096, "{item}");
    }
    let grep = items.iter().find(|item| item["call_id"] == "g1").unwrap();
    let input = grep["input"].as_str().unwrap();
    assert!(input.len() == 4096 && input.ends_with('…') && input.starts_with("{\"pattern\":\"xxx"));
    let read = items
        .iter()
        .find(|item| item["name"] == "read_file")
        .expect("the newest reads are kept");
    let output = read["output"].as_str().unwrap();
    assert_eq!(output.len(), 4096);
    assert!(output.starts_with('…'), "output keeps its end");
    assert!(
        output.trim_end().ends_with("line 150 of the big file"),
        "{}",
        &output[output.len() - 80..]
    );
    // The latest 298 steps are there, the oldest reads gave way.
    let tools = items.iter().filter(|item| item["role"] == "tool").count();
    assert_eq!(tools, 297);
}

#[test]
fn spawn_arguments_and_ids_are_checked() {
    let (model, home) = setup("");
    model.push(calls(
        &[
            ("s1", "spawn_agent", json!({"task_name": "x"})),
            ("s2", "spawn_agent", spawn("Look Up", "one", true)),
            ("s3", "spawn_agent", spawn("look up", "two", true)),
            (
                "s4",
                "spawn_agent",
                json!({"task_name": "m", "prompt": "p", "model": "nope/none"}),
            ),
            (
                "m1",
                "message_agent",
                json!({"agent_id": "/root/other", "content": "hi"}),
            ),
            (
                "w1",
                "wait_agents",
                json!({"agent_ids": ["/root/look-up", "/root/look-up-2"]}),
            ),
            (
                "m2",
                "message_agent",
                json!({"agent_id": "/root/look-up", "content": "hi"}),
            ),
            ("c1", "close_agent", json!({"agent_id": "/root/look-up"})),
        ],
        (10, 1),
    ));
    model.push_for(&marker("/root/look-up"), text_reply(&["first"]));
    model.push_for(&marker("/root/look-up-2"), text_reply(&["second"]));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    serve.user("spawn");
    let (events, _) = until_ready_split(&mut serve);
    let output = |id: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool_output" && e["call_id"] == id)
            .unwrap_or_else(|| panic!("no output for {id}: {events:#?}"))
            .clone()
    };
    assert_eq!(output("s1")["is_error"], true);
    assert!(
        output("s2")["output"]
            .as_str()
            .unwrap()
            .contains("/root/look-up ")
    );
    assert!(
        output("s3")["output"]
            .as_str()
            .unwrap()
            .contains("/root/look-up-2 ")
    );
    assert_eq!(output("s4")["is_error"], true);
    assert_eq!(
        output("m1")["output"],
        "/root/other is not one of your subagents"
    );
    assert_eq!(
        output("w1")["output"],
        "[/root/look-up is completed]\nfirst\n\n[/root/look-up-2 is completed]\nsecond"
    );
    assert_eq!(output("m2")["is_error"], true);
    assert_eq!(
        output("c1")["output"],
        "/root/look-up is completed: it was not running."
    );
}

#[test]
fn subagents_nest_as_deep_as_max_depth_allows() {
    let (model, home) = setup("");
    home.append_config("[agents]\nmax_depth = 2\n");
    model.push(calls(
        &[("s1", "spawn_agent", spawn("outer", "Delegate", false))],
        (10, 1),
    ));
    model.push_for(
        &marker("/root/outer"),
        calls(
            &[("s2", "spawn_agent", spawn("inner", "Do it", false))],
            (10, 1),
        ),
    );
    model.push_for(&marker("/root/outer/inner"), text_reply(&["inner done"]));
    model.push_for(&marker("/root/outer"), text_reply(&["outer done"]));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    serve.user("nest");
    let (events, _) = until_ready_split(&mut serve);
    let inner = events
        .iter()
        .find(|e| e["type"] == "subagent_lifecycle" && e["path"] == "/root/outer/inner")
        .unwrap();
    assert_eq!(inner["tool_use_id"], "s2");
    let requests = model.requests();
    let tools_of = |id: &str| {
        requests
            .iter()
            .find(|r| r.system().contains(&marker(id)))
            .unwrap()
            .tool_names()
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>()
    };
    assert!(tools_of("/root/outer").contains(&"spawn_agent".to_owned()));
    assert!(!tools_of("/root/outer/inner").contains(&"spawn_agent".to_owned()));
    let ids: Vec<Value> = agent_runs(&mut serve)
        .iter()
        .map(|a| a["id"].clone())
        .collect();
    assert_eq!(ids, [json!("/root/outer"), json!("/root/outer/inner")]);

    // With max_depth 0 there are no subagents at all.
    let (model, home) = setup("");
    home.append_config("[agents]\nmax_depth = 0\n");
    model.push(text_reply(&["alone"]));
    let mut serve = Serve::ready(&home);
    serve.user("hi");
    serve.until_ready();
    assert!(!model.requests()[0].tool_names().contains(&"spawn_agent"));
}

#[test]
fn finished_subagents_are_saved_with_the_session() {
    let (model, home) = setup("");
    model.push(calls(
        &[("s1", "spawn_agent", spawn("saver", "Save me", false))],
        (10, 1),
    ));
    model.push_for(&marker("/root/saver"), text_reply(&["saved"]));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    let session = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user("save");
    serve.until_ready();
    let before = agent_runs(&mut serve);
    let items = transcript_of(&mut serve, "/root/saver");
    serve.send(json!({"op": "shutdown"}));
    serve.rest();

    let mut again = Serve::builder(&home).arg("--session").arg(&session).start();
    again.skip_startup();
    again.send(json!({"op": "agent_runs"}));
    let runs = again.until("agent_runs").pop().unwrap()["agents"].clone();
    assert_eq!(runs, json!(before));
    assert_eq!(transcript_of(&mut again, "/root/saver"), items);
}
