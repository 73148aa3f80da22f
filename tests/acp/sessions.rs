//! Several sessions: two at once, load with replay, resume without, list, close.

use serde_json::json;

use crate::common::acp::{Acp, kinds, updates};
use crate::common::daemon::DaemonGuard;
use crate::common::mock::{MockModel, text_reply};
use crate::common::serve::Home;

fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    (model, home)
}

fn turn(acp: &mut Acp, session: &str, text: &str) -> Vec<serde_json::Value> {
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    messages
}

fn two_sessions(in_process: bool) {
    let (model, home) = setup();
    let _daemon = DaemonGuard(&home);
    let mut acp = Acp::start(&home, in_process);
    acp.initialize(json!({}));
    let one = acp.new_session(home.path());
    let two = acp.new_session(home.path());
    assert_ne!(one, two);
    model.push(text_reply(&["first"]));
    model.push(text_reply(&["second"]));
    let a = acp.request(
        "session/prompt",
        json!({"sessionId": one, "prompt": [{"type": "text", "text": "a"}]}),
    );
    let b = acp.request(
        "session/prompt",
        json!({"sessionId": two, "prompt": [{"type": "text", "text": "b"}]}),
    );
    acp.response(a);
    acp.response(b);
    let text_of = |session: &str| -> String {
        acp.seen
            .iter()
            .filter(|m| m["params"]["sessionId"] == session)
            .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .map(|m| {
                m["params"]["update"]["content"]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    let (one_text, two_text) = (text_of(&one), text_of(&two));
    assert!(
        (one_text == "first" && two_text == "second")
            || (one_text == "second" && two_text == "first"),
        "{one_text:?} {two_text:?}"
    );

    // Listed, newest first; then closed, and gone for prompts.
    let list = acp.call("session/list", json!({}));
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&one.as_str()) && ids.contains(&two.as_str()),
        "{list}"
    );
    let row = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == one)
        .unwrap();
    assert_eq!(row["cwd"], home.path().display().to_string());
    assert!(row["updatedAt"].as_str().unwrap().ends_with('Z'), "{row}");
    assert_eq!(
        acp.call("session/close", json!({"sessionId": one})),
        json!({})
    );
    let err = acp.call_err(
        "session/prompt",
        json!({"sessionId": one, "prompt": [{"type": "text", "text": "x"}]}),
    );
    assert_eq!(err["code"], -32002);
    assert!(acp.finish().success());
}

#[test]
fn two_sessions_at_once_through_the_daemon() {
    two_sessions(false);
}

#[test]
fn two_sessions_at_once_in_process() {
    two_sessions(true);
}

fn load_replays_and_resume_does_not(in_process: bool) {
    let (model, home) = setup();
    let _daemon = DaemonGuard(&home);
    let session = {
        let mut acp = Acp::start(&home, in_process);
        acp.initialize(json!({}));
        let session = acp.new_session(home.path());
        model.push(text_reply(&["the answer"]));
        turn(&mut acp, &session, "the question");
        assert!(acp.finish().success());
        session
    };
    let mut acp = Acp::start(&home, in_process);
    acp.initialize(json!({}));
    let id = acp.request(
        "session/load",
        json!({"sessionId": session, "cwd": home.path(), "mcpServers": []}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    let result = &messages.last().unwrap()["result"];
    assert_eq!(result["modes"]["currentModeId"], "manual");
    let replayed = updates(&messages);
    let kinds = kinds(&replayed);
    let user = kinds
        .iter()
        .position(|k| k == "user_message_chunk")
        .expect("the user message");
    let agent = kinds
        .iter()
        .position(|k| k == "agent_message_chunk")
        .expect("the reply");
    assert!(user < agent, "{kinds:?}");
    assert_eq!(replayed[user]["content"]["text"], "the question");
    assert_eq!(replayed[agent]["content"]["text"], "the answer");
    // It goes on where it was.
    model.push(text_reply(&["more"]));
    turn(&mut acp, &session, "and then?");
    let request = model.requests().last().unwrap().clone();
    let said: Vec<String> = request
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(said.iter().any(|text| text == "the question"), "{said:?}");
    assert!(acp.finish().success());

    let mut acp = Acp::start(&home, in_process);
    acp.initialize(json!({}));
    let id = acp.request(
        "session/resume",
        json!({"sessionId": session, "cwd": home.path(), "mcpServers": []}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    assert!(
        messages.last().unwrap().get("result").is_some(),
        "{messages:?}"
    );
    assert!(
        updates(&messages).is_empty(),
        "resume replays nothing: {messages:?}"
    );
    let err = acp.call_err(
        "session/load",
        json!({"sessionId": "0193aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee", "cwd": home.path(), "mcpServers": []}),
    );
    assert_eq!(err["code"], -32002);
}

#[test]
fn load_replays_and_resume_does_not_through_the_daemon() {
    load_replays_and_resume_does_not(false);
}

#[test]
fn load_replays_and_resume_does_not_in_process() {
    load_replays_and_resume_does_not(true);
}

/// `session/list` shows a broken session file (in its title and `_meta`), and a
/// sessions path that is a file is an error, not an empty list: in process and through
/// the daemon, whose `error` answer the link reports.
fn broken_files_are_listed(in_process: bool) {
    let home = Home::new();
    let _daemon = DaemonGuard(&home);
    let folder = home.path().join("sessions/-somewhere");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("broken-empty.jsonl"), "").unwrap();
    let mut acp = Acp::start(&home, in_process);
    acp.initialize(json!({}));
    let list = acp.call("session/list", json!({}));
    let row = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == "broken-empty")
        .unwrap_or_else(|| panic!("not listed: {list}"))
        .clone();
    let why = row["_meta"]["broken"].as_str().unwrap_or_default();
    assert!(why.ends_with("broken-empty.jsonl is empty"), "{row}");
    assert!(row["title"].as_str().unwrap().contains("is empty"), "{row}");

    std::fs::remove_dir_all(home.path().join("sessions")).unwrap();
    std::fs::write(home.path().join("sessions"), "a file").unwrap();
    let err = acp.call_err("session/list", json!({}));
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("sessions is not a directory"),
        "{err}"
    );
    assert!(acp.finish().success());
}

#[test]
fn broken_files_are_listed_through_the_daemon() {
    broken_files_are_listed(false);
}

#[test]
fn broken_files_are_listed_in_process() {
    broken_files_are_listed(true);
}
