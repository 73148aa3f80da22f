//! MCP elicitation end to end: the test server's `ask` tool sends `elicitation/create`,
//! the client sees `elicitation_request`, and its answer (checked against the schema,
//! defaults filled in) reaches the server, which echoes it as the tool's output.

use serde_json::{Value, json};

use crate::common::mcp::server_toml;
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::{Home, Serve};

/// A session whose model called `ask` and whose client now sees the request; `answered`:
/// the model gets to reply after the tool's result.
fn asking(answered: bool) -> (MockModel, Home, Serve, Value) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "manual");
    home.append_config(&server_toml("notes", &["--elicit"], ""));
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("notes", "connected");
    model.push(tool_reply("call_1", "mcp__notes__ask", json!({})));
    if answered {
        model.push(text_reply(&["done"]));
    }
    serve.user("ask me");
    let request = serve.until("elicitation_request").pop().unwrap();
    (model, home, serve, request)
}

fn output_of(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["type"] == "tool_output")
        .and_then(|e| e["output"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn an_accepted_answer_gets_the_schema_defaults() {
    let (_model, _home, mut serve, request) = asking(true);
    assert_eq!(request["server"], "notes");
    assert_eq!(request["message"], "Who are you?");
    assert_eq!(request["schema"]["properties"]["color"]["default"], "green");
    let id = request["id"].as_str().unwrap().to_owned();
    serve.send(json!({"op": "elicitation_response", "id": id, "action": "accept", "content": {"name": "Ada"}}));
    let resolved = serve.expect_one("elicitation_resolved");
    assert_eq!(
        (&resolved["id"], &resolved["action"]),
        (&json!(id), &json!("accept"))
    );
    let events = serve.until_ready();
    assert_eq!(
        output_of(&events),
        r#"action=accept content={"color":"green","name":"Ada"}"#
    );
}

#[test]
fn a_wrong_answer_is_an_error_and_the_request_stays_open() {
    let (_model, _home, mut serve, request) = asking(true);
    let id = request["id"].as_str().unwrap().to_owned();
    for (content, expected) in [
        (json!({"color": "red"}), "missing required field(s): name"),
        (
            json!({"name": "Ada", "age": 300}),
            "field \"age\": 300 is above the maximum 150",
        ),
        (
            json!({"name": "Ada", "color": "blue"}),
            "field \"color\": \"blue\" is not one of",
        ),
    ] {
        serve.send(
            json!({"op": "elicitation_response", "id": id, "action": "accept", "content": content}),
        );
        let error = serve.expect_one("error");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("elicitation_response {id}: {expected}")),
            "{message}"
        );
    }
    serve.send(json!({"op": "elicitation_response", "id": id, "action": "decline", "content": {"name": "x"}}));
    let error = serve.expect_one("error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .ends_with("content goes only with accept")
    );
    // Still open: a right answer now goes through.
    serve.send(json!({"op": "elicitation_response", "id": id, "action": "accept", "content": {"name": "Bo", "color": "red", "age": 7}}));
    serve.expect_one("elicitation_resolved");
    let events = serve.until_ready();
    assert_eq!(
        output_of(&events),
        r#"action=accept content={"age":7,"color":"red","name":"Bo"}"#
    );
    serve.send(json!({"op": "elicitation_response", "id": id, "action": "cancel"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("no elicitation request is open")
    );
}

#[test]
fn decline_and_cancel_reach_the_server() {
    for action in ["decline", "cancel"] {
        let (_model, _home, mut serve, request) = asking(true);
        let id = request["id"].as_str().unwrap().to_owned();
        serve.send(json!({"op": "elicitation_response", "id": id, "action": action}));
        let resolved = serve.expect_one("elicitation_resolved");
        assert_eq!(resolved["action"], action);
        let events = serve.until_ready();
        assert_eq!(output_of(&events), format!("action={action} content=null"));
    }
}

#[test]
fn an_interrupt_cancels_the_request() {
    let (_model, _home, mut serve, request) = asking(false);
    serve.send(json!({"op": "interrupt"}));
    let events = serve.until("elicitation_resolved");
    let resolved = events.last().unwrap();
    assert_eq!(resolved["id"], request["id"]);
    assert_eq!(resolved["action"], "cancel");
}

#[test]
fn an_unattended_session_declines() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "manual");
    home.append_config(&server_toml("notes", &["--elicit"], ""));
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("notes", "connected");
    serve.send(json!({"op": "set_attended", "attended": false}));
    serve.until("attended");
    model.push(tool_reply("call_1", "mcp__notes__ask", json!({})));
    model.push(text_reply(&["done"]));
    serve.user("ask me");
    let events = serve.until_ready();
    assert!(events.iter().all(|e| e["type"] != "elicitation_request"));
    assert_eq!(output_of(&events), "action=decline content=null");
}
