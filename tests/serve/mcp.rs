//! MCP servers end to end, against the test server of `tests/mcp_server/`: states as
//! they connect and fail, tool calls through the scripted model, gating, prompt
//! commands, list changes, crashes and hung servers.

use serde_json::{Value, json};

use crate::common::mcp::{server, server_toml};
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::{Home, Serve};

fn setup(mode: &str, servers: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), mode);
    home.append_config(servers);
    (model, home)
}

/// A session whose `notes` test server is connected (and its prompt listed).
fn connected(mode: &str, extra: &str) -> (MockModel, Home, Serve) {
    let (model, home) = setup(mode, &format!("{}{extra}", server_toml("notes", &[], "")));
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("notes", "connected");
    serve.until("command_list");
    (model, home, serve)
}

fn outputs(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_output")
        .collect()
}

const NOTES_TOOLS: [&str; 8] = [
    "mcp__notes__read_note",
    "mcp__notes__write_note",
    "mcp__notes__whoami",
    "mcp__notes__picture",
    "mcp__notes__fail",
    "mcp__notes__sleep",
    "mcp__notes__crash",
    "mcp__notes__add_tool",
];

#[test]
fn servers_connect_in_the_background_and_report_their_state() {
    let servers = [
        server_toml("notes", &[], ""),
        server_toml("slow", &["--delay-ms", "1500"], ""),
        server_toml("broken", &["--fail-start"], ""),
        server_toml("off", &[], "enabled = false"),
    ]
    .concat();
    let (_model, home) = setup("manual", &servers);
    let mut serve = Serve::start(&home);
    let batch = serve.skip_startup();
    // The startup batch never waits for a server: all of them are still connecting.
    let view = batch.last().unwrap();
    let states: Vec<(&str, &str, &str)> = view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["state"].as_str().unwrap(),
                s["transport"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("broken", "connecting", "stdio"),
            ("notes", "connecting", "stdio"),
            ("off", "disabled", "stdio"),
            ("slow", "connecting", "stdio"),
        ]
    );
    assert!(
        view["servers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["tools"] == json!([]))
    );

    // Each settles on its own; the order in which they do is theirs.
    let broken = serve.wait_server("broken", "failed");
    let error = broken["error"].as_str().unwrap();
    assert!(
        error.contains("exited during the handshake (exit status: 2)")
            && error.contains("cannot start: the test asked me to fail"),
        "{error}"
    );
    let notes = serve.wait_server("notes", "connected");
    assert_eq!(notes["tools"], json!(NOTES_TOOLS));
    assert!(notes.get("error").is_none(), "{notes}");
    let slow = serve.wait_server("slow", "connected");
    assert_eq!(slow["tools"].as_array().unwrap().len(), NOTES_TOOLS.len());
    assert_eq!(serve.wait_server("broken", "failed"), broken);

    // Prompts are commands, with their arguments: the last command_list has both
    // servers' (it may have come with either server's connection).
    let has_slow = |event: &Value| {
        event["type"] == "command_list"
            && event["commands"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["command"] == "/slow:review")
    };
    let list = match serve
        .seen
        .iter()
        .rev()
        .find(|e| e["type"] == "command_list")
    {
        Some(last) if has_slow(last) => last.clone(),
        _ => loop {
            let event = serve.until("command_list").pop().unwrap();
            if has_slow(&event) {
                break event;
            }
        },
    };
    let review = list["commands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["command"] == "/notes:review")
        .unwrap();
    assert_eq!(
        review,
        &json!({"command": "/notes:review", "marker": "mcp", "args": "<path> [focus]", "description": "Review a file"})
    );
    assert!(
        list["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["command"] == "/mcp" && c["marker"].is_null())
    );

    // Enabling a failed server retries it.
    serve.send(json!({"op": "mcp_toggle", "name": "broken", "enabled": true}));
    assert_eq!(
        serve.until_server("broken", "connecting")["state"],
        "connecting"
    );
    serve.until_server("broken", "failed");
}

#[test]
fn a_tool_call_goes_to_the_server_and_its_result_back_to_the_model() {
    let (model, home, mut serve) = connected("manual", "");
    std::fs::write(home.path().join("a.note"), "hello from a").unwrap();
    model.push(tool_reply(
        "call_1",
        "mcp__notes__read_note",
        json!({"name": "a"}),
    ));
    model.push(tool_reply("call_2", "mcp__notes__picture", json!({})));
    model.push(tool_reply("call_3", "mcp__notes__fail", json!({})));
    model.push(text_reply(&["done"]));
    serve.user("read note a");
    let events = serve.until_ready();
    let outputs = outputs(&events);
    assert_eq!(outputs.len(), 3, "{events:#?}");
    assert_eq!(outputs[0]["name"], "mcp__notes__read_note");
    assert_eq!(outputs[0]["output"], "note a: hello from a");
    assert_eq!(outputs[0]["is_error"], false);
    assert_eq!(
        outputs[1]["output"],
        "a red pixel\n[image image/png, 70 B attached]\nstructured content: {\"height\":1,\"width\":1}"
    );
    assert_eq!(outputs[2]["output"], "it failed on purpose");
    assert_eq!(outputs[2]["is_error"], true);
    assert!(
        events.iter().all(|e| e["type"] != "approval_request"),
        "read-only tools run"
    );

    let requests = model.requests();
    let offered = requests[0].tool_names();
    for name in NOTES_TOOLS {
        assert!(offered.contains(&name), "{offered:?}");
    }
    assert!(offered.contains(&"read_file"), "{offered:?}");
    let last = requests[1].last_message();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["content"], "note a: hello from a");
    // The image follows the reply's results, in a user message the model can see.
    let after_picture = requests[2].messages();
    let image = after_picture.last().unwrap();
    assert_eq!(image["role"], "user");
    let url = image["content"][1]["image_url"]["url"].as_str().unwrap();
    assert!(url.starts_with("data:image/png;base64,iVBOR"), "{url}");
    assert_eq!(after_picture[after_picture.len() - 2]["role"], "tool");
}

#[test]
fn tools_that_change_things_ask_and_plan_mode_runs_only_read_only_ones() {
    let (model, home, mut serve) = connected("manual", "");
    model.push(tool_reply(
        "call_1",
        "mcp__notes__write_note",
        json!({"name": "b", "text": "B"}),
    ));
    model.push(text_reply(&["ok"]));
    serve.user("write it");
    let request = serve.until("approval_request").pop().unwrap();
    assert_eq!(request["name"], "mcp__notes__write_note");
    assert_eq!(
        request["summary"],
        "notes › write_note {\"name\":\"b\",\"text\":\"B\"}"
    );
    serve.send(json!({"op": "approve", "call_id": "call_1", "decision": "allow"}));
    let events = serve.until_ready();
    assert_eq!(outputs(&events)[0]["output"], "wrote b");
    assert_eq!(
        std::fs::read_to_string(home.path().join("b.note")).unwrap(),
        "B"
    );

    serve.send(json!({"op": "set_approval_mode", "mode": "plan"}));
    serve.until("approval_mode");
    model.push(tool_reply(
        "call_2",
        "mcp__notes__write_note",
        json!({"name": "c", "text": "C"}),
    ));
    model.push(tool_reply(
        "call_3",
        "mcp__notes__read_note",
        json!({"name": "b"}),
    ));
    model.push(text_reply(&["planned"]));
    serve.user("plan it");
    let events = serve.until_ready();
    let outputs = outputs(&events);
    assert_eq!(outputs[0]["is_error"], true);
    assert!(
        outputs[0]["output"].as_str().unwrap().contains("plan mode"),
        "{}",
        outputs[0]
    );
    assert!(!home.path().join("c.note").exists());
    assert_eq!(outputs[1]["output"], "note b: B");
    assert_eq!(outputs[1]["is_error"], false);
}

#[test]
fn prompts_are_slash_commands_with_named_or_positional_arguments() {
    let (model, _home, mut serve) = connected("manual", "");
    model.push(text_reply(&["reviewed"]));
    serve.send(json!({"op": "command", "input": "/notes:review src/a.rs focus=speed"}));
    let events = serve.until_ready();
    let echo = events.iter().find(|e| e["type"] == "user_message").unwrap();
    assert_eq!(echo["content"], "Please review src/a.rs, focusing on speed");
    assert_eq!(
        model.requests()[0].last_message()["content"],
        "Please review src/a.rs, focusing on speed"
    );

    model.push(text_reply(&["again"]));
    serve.send(json!({"op": "command", "input": "/notes:review \"my file.rs\""}));
    let events = serve.until_ready();
    let echo = events.iter().find(|e| e["type"] == "user_message").unwrap();
    assert_eq!(echo["content"], "Please review my file.rs");

    for (input, error) in [
        (
            "/notes:review",
            "/notes:review: missing path (usage: /notes:review <path> [focus])",
        ),
        (
            "/notes:nope",
            "unknown command: /notes:nope (server notes offers no such prompt, or is not connected; try /mcp)",
        ),
        (
            "/other:review",
            "unknown command: /other:review (try /help)",
        ),
    ] {
        serve.send(json!({"op": "command", "input": input}));
        let event = serve.expect_one("error");
        assert_eq!(event["message"], error);
    }
}

#[test]
fn a_changed_tool_list_changes_the_offered_tools() {
    let (model, _home, mut serve) = connected("manual", "");
    model.push(tool_reply("call_1", "mcp__notes__add_tool", json!({})));
    model.push(text_reply(&["added"]));
    serve.user("add a tool");
    let events = serve.until_ready();
    assert_eq!(outputs(&events)[0]["output"], "added extra");
    let seen = events.iter().any(|e| {
        e["type"] == "mcp_servers"
            && server(e, "notes").is_some_and(|s| {
                s["tools"]
                    .as_array()
                    .unwrap()
                    .contains(&json!("mcp__notes__extra"))
            })
    });
    if !seen {
        let notes = serve.until("mcp_servers").pop().unwrap();
        let tools = &server(&notes, "notes").unwrap()["tools"];
        assert!(
            tools
                .as_array()
                .unwrap()
                .contains(&json!("mcp__notes__extra")),
            "{tools}"
        );
    }
    model.push(tool_reply("call_2", "mcp__notes__extra", json!({})));
    model.push(text_reply(&["ran"]));
    serve.user("use it");
    let events = serve.until_ready();
    assert_eq!(outputs(&events)[0]["output"], "extra ran");
    assert!(
        model.requests()[2]
            .tool_names()
            .contains(&"mcp__notes__extra")
    );
}

#[test]
fn a_crashed_server_is_failed_with_its_reason_and_can_be_retried() {
    let (model, _home, mut serve) = connected("manual", "");
    model.push(tool_reply("call_1", "mcp__notes__crash", json!({})));
    model.push(text_reply(&["it crashed"]));
    serve.user("crash it");
    let events = serve.until_ready();
    let output = outputs(&events)[0];
    assert_eq!(output["is_error"], true);
    assert!(
        output["output"]
            .as_str()
            .unwrap()
            .contains("MCP server notes"),
        "{output}"
    );
    let failed = events
        .iter()
        .filter(|e| e["type"] == "mcp_servers")
        .filter_map(|e| server(e, "notes"))
        .find(|s| s["state"] == "failed")
        .cloned()
        .unwrap_or_else(|| serve.until_server("notes", "failed"));
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("the server exited (exit status: 3)")
            && error.contains("crashing on purpose"),
        "{error}"
    );
    assert_eq!(failed["tools"], json!([]));

    serve.send(json!({"op": "command", "input": "/mcp retry notes"}));
    serve.until_server("notes", "connecting");
    serve.until_server("notes", "connected");
    serve.send(json!({"op": "command", "input": "/mcp retry nope"}));
    assert_eq!(
        serve.until("error").pop().unwrap()["message"],
        "unknown MCP server: nope (configured: notes)"
    );
}

#[test]
fn a_hung_server_never_blocks_a_turn_and_timeouts_bound_it() {
    let servers = [
        server_toml("hung", &["--hang"], "timeout_ms = 60000"),
        server_toml("stuck", &["--hang"], "timeout_ms = 300"),
        server_toml("notes", &[], "timeout_ms = 2000"),
    ]
    .concat();
    let (model, home) = setup("manual", &servers);
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    let stuck = serve.wait_server("stuck", "failed");
    assert_eq!(
        stuck["error"],
        "no answer to the MCP handshake within 300 ms (timeout_ms)"
    );
    serve.wait_server("notes", "connected");

    // `hung` is still connecting: the turn goes on without its tools.
    model.push(tool_reply(
        "call_1",
        "mcp__notes__sleep",
        json!({"ms": 60000}),
    ));
    model.push(text_reply(&["gave up"]));
    serve.user("wait");
    let events = serve.until_ready();
    let output = outputs(&events)[0];
    assert_eq!(
        output["output"],
        "MCP server notes did not answer the call to sleep within 2000 ms (timeout_ms)"
    );
    assert_eq!(output["is_error"], true);
    let requests = model.requests();
    let offered = requests[0].tool_names();
    assert!(
        offered.iter().all(|name| !name.starts_with("mcp__hung__")),
        "{offered:?}"
    );
    serve.send(json!({"op": "mcp_list"}));
    let view = serve.until("mcp_servers").pop().unwrap();
    assert_eq!(server(&view, "hung").unwrap()["state"], "connecting");
}

#[test]
fn servers_die_with_their_session() {
    let (model, _home, mut serve) = connected("manual", "");
    model.push(tool_reply("call_1", "mcp__notes__whoami", json!({})));
    model.push(text_reply(&["ok"]));
    serve.user("who");
    let events = serve.until_ready();
    let output = outputs(&events)[0]["output"].as_str().unwrap().to_owned();
    let pid: i32 = output.rsplit("pid=").next().unwrap().parse().unwrap();
    serve.send(json!({"op": "shutdown"}));
    assert_eq!(serve.wait().code(), Some(0));
    // jucode stopped it before exiting: nothing is left to reap it later.
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    assert!(!alive, "the server {pid} outlived its session");
}
