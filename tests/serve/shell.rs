//! The bash tool end to end: streamed progress, timeouts and interrupts that take the
//! whole process tree down.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call};
use crate::common::serve::{Home, Serve};

fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "full-access");
    (model, home)
}

fn bash(id: &str, arguments: Value) -> Reply {
    Reply::Sse(vec![
        tool_call(0, id, "bash", &arguments.to_string()),
        finish("tool_calls"),
        Step::Done,
    ])
}

/// Whether the process whose pid is in `file` has exited (gone, or a zombie waiting to
/// be reaped). Waits up to two seconds for the kill to land.
fn exited(file: &Path) -> bool {
    let pid = std::fs::read_to_string(file).expect("pid file");
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let state = std::fs::read_to_string(&stat)
            .ok()
            .and_then(|text| text.rsplit(')').next().map(|rest| rest.trim().to_owned()));
        match state {
            None => return true,
            Some(state) if state.starts_with('Z') || state.starts_with('X') => return true,
            Some(_) if Instant::now() > deadline => return false,
            Some(_) => std::thread::yield_now(),
        }
    }
}

#[test]
fn a_slow_command_streams_tool_updates() {
    let (model, home) = setup();
    model.push(bash(
        "c1",
        json!({"command": "for i in 1 2 3 4; do echo tick $i; sleep 0.3; done"}),
    ));
    model.push(text_reply(&["done"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until("tool_output");
    let updates: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_update")
        .collect();
    assert!(updates.len() >= 2, "{events:#?}");
    assert!(
        updates.len() <= 8,
        "coalesced, not one per line: {}",
        updates.len()
    );
    for update in &updates {
        assert_eq!(update["call_id"], "c1");
        assert_eq!(update["name"], "bash");
    }
    let streamed: String = updates
        .iter()
        .map(|u| u["output"].as_str().unwrap())
        .collect();
    assert!(streamed.starts_with("tick 1\n"), "{streamed:?}");
    let output = events.last().unwrap();
    assert_eq!(output["is_error"], false);
    let text = output["output"].as_str().unwrap();
    assert!(text.starts_with("exit code: 0"), "{text}");
    assert!(text.contains("tick 4"), "{text}");
    serve.until_ready();
}

#[test]
fn a_timeout_kills_the_whole_process_tree() {
    let (model, home) = setup();
    model.push(bash(
        "c1",
        json!({
            "command": "sh -c 'echo $$ > grandchild.pid; exec sleep 100' & sleep 100",
            "timeout_ms": 700
        }),
    ));
    model.push(text_reply(&["ok"]));
    let mut serve = Serve::ready(&home);
    let started = Instant::now();
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until("tool_output");
    let output = events.last().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(output["is_error"], true);
    assert!(
        output["output"].as_str().unwrap().contains("timed out"),
        "{output}"
    );
    assert!(exited(&home.path().join("grandchild.pid")));
    serve.until_ready();
}

#[test]
fn interrupt_kills_a_running_command_and_its_children() {
    let (model, home) = setup();
    model.push(bash(
        "c1",
        json!({"command": "sh -c 'echo $$ > child.pid; exec sleep 100' & echo started; wait"}),
    ));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("tool_update");
    let started = Instant::now();
    serve.send(json!({"op": "interrupt"}));
    let events = serve.expect(&["tool_output", "info", "status"]);
    assert_eq!(events[0]["call_id"], "c1");
    assert_eq!(events[0]["output"], "interrupted by the user");
    assert_eq!(events[2]["message"], "interrupted");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(exited(&home.path().join("child.pid")));
}
