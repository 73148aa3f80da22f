//! Negotiation, bad input, a streamed turn, modes and config options, cancel.

use serde_json::json;

use crate::common::acp::{Acp, kinds, updates};
use crate::common::daemon::DaemonGuard;
use crate::common::mock::{Gate, MockModel, Reply, Step, finish, text, text_reply, usage};
use crate::common::serve::Home;

fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    (model, home)
}

#[test]
fn initialize_negotiates_and_bad_input_never_exits() {
    let (_model, home) = setup();
    let mut acp = Acp::start(&home, true);
    let init = acp.initialize(json!({}));
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["image"],
        true
    );
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["embeddedContext"],
        true
    );
    assert_eq!(
        init["agentCapabilities"]["sessionCapabilities"],
        json!({"list": {}, "resume": {}, "close": {}})
    );
    assert_eq!(init["authMethods"], json!([]));
    assert_eq!(init["agentInfo"]["name"], "jucode");
    // A version it does not speak: it answers with its own.
    let other = acp.call("initialize", json!({"protocolVersion": 7}));
    assert_eq!(other["protocolVersion"], 1);

    acp.send_raw("this is not json");
    let parse = acp.until(|m| m["error"]["code"] == -32700);
    assert_eq!(parse["id"], serde_json::Value::Null);
    // An id no float holds is echoed as it came, digit for digit.
    acp.send_raw(r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"no/such"}"#);
    let echoed = acp.next_raw();
    assert!(
        echoed.contains(r#""id":123456789012345678901234567890,"#),
        "{echoed}"
    );
    acp.send_raw(r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#);
    acp.until(|m| m["error"]["code"] == -32600);
    assert_eq!(acp.call_err("no/such/method", json!({}))["code"], -32601);
    assert_eq!(
        acp.call_err("session/new", json!({"cwd": "relative"}))["code"],
        -32602
    );
    assert_eq!(
        acp.call_err("session/new", json!({"cwd": 5}))["code"],
        -32602
    );
    assert_eq!(
        acp.call_err("session/prompt", json!({"sessionId": "nope", "prompt": []}))["code"],
        -32002
    );
    // Unknown notifications are ignored; the connection still works.
    acp.notify("no/such/notification", json!({}));
    let again = acp.initialize(json!({}));
    assert_eq!(again["protocolVersion"], 1);
    assert!(acp.finish().success());
}

#[test]
fn a_prompt_streams_with_one_message_id_and_ends_the_turn() {
    let (model, home) = setup();
    let _daemon = DaemonGuard(&home);
    model.push(Reply::Sse(vec![
        crate::common::mock::reasoning("thinking"),
        text("Hel"),
        text("lo"),
        finish("stop"),
        usage(100, 20),
        Step::Done,
    ]));
    let mut acp = Acp::start(&home, false);
    acp.initialize(json!({}));
    let session = acp.new_session(home.path());
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    let response = messages.last().unwrap();
    assert_eq!(response["result"], json!({"stopReason": "end_turn"}));
    assert!(
        messages
            .iter()
            .filter(|m| m["method"] == "session/update")
            .all(|m| m["params"]["sessionId"] == session)
    );
    let updates = updates(&messages);
    let chunks: Vec<_> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .collect();
    assert_eq!(chunks.len(), 2, "{updates:?}");
    assert_eq!(chunks[0]["messageId"], chunks[1]["messageId"]);
    let text: String = chunks
        .iter()
        .map(|c| c["content"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello");
    let thought = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "agent_thought_chunk")
        .expect("a thought chunk");
    assert_eq!(thought["content"]["text"], "thinking");
    let usage = updates
        .iter()
        .find(|u| u["sessionUpdate"] == "usage_update")
        .expect("usage_update");
    assert!(usage["used"].as_u64().unwrap() > 0, "{usage}");
    assert!(usage["size"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(usage["cost"]["currency"], "USD");
}

#[test]
fn modes_and_config_options() {
    let (_model, home) = setup();
    let mut acp = Acp::start(&home, true);
    acp.initialize(json!({}));
    let result = acp.call("session/new", json!({"cwd": home.path(), "mcpServers": []}));
    let session = result["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(result["modes"]["currentModeId"], "manual");
    let ids: Vec<&str> = result["modes"]["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["manual", "plan", "auto-edit", "auto", "full-access"]);
    let options = result["configOptions"].as_array().unwrap();
    assert_eq!(options[0]["id"], "model");
    assert_eq!(options[0]["category"], "model");
    assert_eq!(options[0]["currentValue"], "mock/mock-1");

    let set = acp.call(
        "session/set_mode",
        json!({"sessionId": session, "modeId": "auto-edit"}),
    );
    assert_eq!(set, json!({}));
    let update = acp.until(|m| m["params"]["update"]["sessionUpdate"] == "current_mode_update");
    assert_eq!(update["params"]["update"]["currentModeId"], "auto-edit");
    let err = acp.call_err(
        "session/set_mode",
        json!({"sessionId": session, "modeId": "yolo"}),
    );
    assert_eq!(err["code"], -32602);
    let err = acp.call_err(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "model", "value": "nope/x"}),
    );
    assert_eq!(err["code"], -32602);
    let err = acp.call_err(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "colour", "value": "red"}),
    );
    assert_eq!(err["code"], -32602);
    // The offline demo model is in every catalog.
    let set = acp.call(
        "session/set_config_option",
        json!({"sessionId": session, "configId": "model", "value": "replay/demo"}),
    );
    assert_eq!(set["configOptions"][0]["currentValue"], "replay/demo");
    let changed = acp.until(|m| m["params"]["update"]["sessionUpdate"] == "config_option_update");
    assert_eq!(
        changed["params"]["update"]["configOptions"][0]["currentValue"],
        "replay/demo"
    );
    if let Some(effort) = set["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "thought_level")
    {
        assert_eq!(effort["category"], "thought_level");
        let value = effort["options"].as_array().unwrap().last().unwrap()["value"].clone();
        let set = acp.call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "thought_level", "value": value}),
        );
        assert_eq!(set["configOptions"][1]["currentValue"], value);
    }
}

#[test]
fn cancel_interrupts_the_turn_and_answers_cancelled() {
    let (model, home) = setup();
    let gate = Gate::new();
    model.push(Reply::Sse(vec![
        text("partial"),
        Step::Wait(gate.clone()),
        text(" never"),
        finish("stop"),
        Step::Done,
    ]));
    let mut acp = Acp::start(&home, true);
    acp.initialize(json!({}));
    let session = acp.new_session(home.path());
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
    );
    acp.until(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk");
    acp.notify("session/cancel", json!({"sessionId": session}));
    let response = acp.response(id);
    assert_eq!(response["result"], json!({"stopReason": "cancelled"}));
    gate.open();
    model.forget_unused();
    // The session goes on.
    model.push(text_reply(&["again"]));
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "more"}]}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    assert!(kinds(&updates(&messages)).contains(&"agent_message_chunk".to_owned()));
}

#[test]
fn a_slash_command_prompt_answers_as_a_message() {
    let (_model, home) = setup();
    let mut acp = Acp::start(&home, true);
    acp.initialize(json!({}));
    let session = acp.new_session(home.path());
    let commands =
        acp.until(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update");
    let names: Vec<&str> = commands["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"help"), "{names:?}");
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "/help"}]}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    let help = updates(&messages)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "agent_message_chunk")
        .expect("the help text");
    assert!(help["content"]["text"].as_str().unwrap().contains("/model"));
    let err = acp.call_err(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "/quit"}]}),
    );
    assert_eq!(err["code"], -32602);
}
