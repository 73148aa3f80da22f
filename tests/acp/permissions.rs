//! Tool calls: cards that always close, permission round trips, and approvals answered
//! by another client of the same daemon session.

use serde_json::{Value, json};

use crate::common::acp::{Acp, updates};
use crate::common::daemon::DaemonGuard;
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::{Home, Serve};

fn setup(mode: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), mode);
    (model, home)
}

fn prompt(acp: &mut Acp, session: &str, text: &str) -> i64 {
    acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
    )
}

fn tool_updates(messages: &[Value], call: &str) -> Vec<Value> {
    updates(messages)
        .into_iter()
        .filter(|u| u["toolCallId"] == call)
        .collect()
}

#[test]
fn a_read_runs_to_completed_with_kind_title_and_location() {
    let (model, home) = setup("manual");
    std::fs::write(home.path().join("notes.txt"), "one\ntwo\n").unwrap();
    model.push(tool_reply(
        "call_1",
        "read_file",
        json!({"path": "notes.txt"}),
    ));
    model.push(text_reply(&["read it"]));
    let mut acp = Acp::start(&home, true);
    acp.initialize(json!({}));
    let session = acp.new_session(home.path());
    let id = prompt(&mut acp, &session, "read notes");
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    let cards = tool_updates(&messages, "call_1");
    assert_eq!(cards[0]["sessionUpdate"], "tool_call");
    assert_eq!(cards[0]["kind"], "read");
    let path = home.path().join("notes.txt").display().to_string();
    assert_eq!(cards[0]["title"], format!("Read {path}"));
    assert_eq!(cards[0]["locations"][0]["path"], path);
    assert_eq!(cards[0]["rawInput"], json!({"path": "notes.txt"}));
    let last = cards.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert!(
        last["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("two")
    );
}

#[test]
fn permission_allow_and_reject_round_trips() {
    let (model, home) = setup("manual");
    let _daemon = DaemonGuard(&home);
    model.push(tool_reply(
        "call_1",
        "write_file",
        json!({"path": "a.txt", "content": "A\n"}),
    ));
    model.push(text_reply(&["wrote"]));
    model.push(tool_reply(
        "call_2",
        "write_file",
        json!({"path": "b.txt", "content": "B\n"}),
    ));
    model.push(text_reply(&["denied"]));
    let mut acp = Acp::start(&home, false);
    acp.initialize(json!({}));
    let session = acp.new_session(home.path());

    let id = prompt(&mut acp, &session, "write a");
    let ask = acp.agent_request("session/request_permission");
    assert_eq!(ask["params"]["sessionId"], session);
    assert_eq!(ask["params"]["toolCall"]["toolCallId"], "call_1");
    assert_eq!(ask["params"]["toolCall"]["kind"], "edit");
    let diff = &ask["params"]["toolCall"]["content"][0];
    assert_eq!(diff["type"], "diff");
    assert_eq!(diff["newText"], "A\n");
    assert_eq!(diff["oldText"], Value::Null);
    let kinds: Vec<&str> = ask["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    acp.respond(
        &ask["id"],
        json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(home.path().join("a.txt")).unwrap(),
        "A\n"
    );
    let cards = tool_updates(&acp.seen, "call_1");
    assert_eq!(cards.last().unwrap()["status"], "completed");
    // Our own answer closes the request: no $/cancel_request for it.
    assert!(!acp.seen.iter().any(|m| m["method"] == "$/cancel_request"));

    let id = prompt(&mut acp, &session, "write b");
    let ask = acp.agent_request("session/request_permission");
    acp.respond(
        &ask["id"],
        json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    assert!(!home.path().join("b.txt").exists());
    let cards = tool_updates(&messages, "call_2");
    assert_eq!(cards.last().unwrap()["status"], "failed");
}

#[test]
fn an_approval_answered_in_serve_cancels_the_editor_request() {
    let (model, home) = setup("manual");
    let _daemon = DaemonGuard(&home);
    model.push(tool_reply(
        "call_1",
        "bash",
        json!({"command": "echo hi > out.txt"}),
    ));
    model.push(text_reply(&["done"]));
    let mut acp = Acp::start(&home, false);
    acp.initialize(json!({}));
    let session = acp.new_session(home.path());
    let id = prompt(&mut acp, &session, "run it");
    let ask = acp.agent_request("session/request_permission");
    assert_eq!(ask["params"]["toolCall"]["kind"], "execute");

    // The same session, attached from `jucode serve --session`.
    let mut serve = Serve::shim(&home).arg("--session").arg(&session).start();
    let startup = serve.until("startup");
    assert_eq!(startup.last().unwrap()["session_id"], session);
    serve.until("approval_request");
    serve.send(json!({"op": "approve", "call_id": "call_1", "decision": "allow"}));
    let cancel = acp.until(|m| m["method"] == "$/cancel_request");
    assert_eq!(cancel["params"]["requestId"], ask["id"]);
    // The editor answers the withdrawn request as cancelled; nothing breaks.
    acp.send(json!({"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -32800, "message": "cancelled"}}));
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    assert!(home.path().join("out.txt").exists());
    let cards = tool_updates(&acp.seen, "call_1");
    assert_eq!(cards.last().unwrap()["status"], "completed");
    serve.until_ready();
}

#[test]
fn cancel_closes_an_open_permission_and_its_card() {
    let (model, home) = setup("manual");
    model.push(tool_reply("call_1", "bash", json!({"command": "touch x"})));
    let mut acp = Acp::start(&home, true);
    acp.initialize(json!({}));
    let session = acp.new_session(home.path());
    let id = prompt(&mut acp, &session, "go");
    let ask = acp.agent_request("session/request_permission");
    acp.notify("session/cancel", json!({"sessionId": session}));
    // As the spec asks of clients: pending permission requests answered cancelled.
    acp.respond(&ask["id"], json!({"outcome": {"outcome": "cancelled"}}));
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(
        messages.last().unwrap()["result"],
        json!({"stopReason": "cancelled"})
    );
    let cards = tool_updates(&acp.seen, "call_1");
    assert_eq!(cards.last().unwrap()["status"], "failed");
    assert!(!home.path().join("x").exists());
}
