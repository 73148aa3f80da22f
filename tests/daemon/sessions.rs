//! Sessions that last, through the daemon: listed live and saved, loaded again on
//! attach (also after the daemon was killed), unloaded when idle, one writer per file,
//! `/resume` moving a client.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::daemon::{DaemonGuard, Raw};
use crate::common::mock::{MockModel, text_reply};
use crate::common::serve::{EVENT_TIMEOUT, Home, Serve};

fn home_with(model: &MockModel, daemon: &str) -> Home {
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    if !daemon.is_empty() {
        home.append_config(&format!("[daemon]\n{daemon}\n"));
    }
    home
}

/// The `sessions` rows, by asking on a fresh connection.
fn sessions(home: &Home) -> Vec<Value> {
    let mut raw = Raw::connect(home);
    raw.send(json!({"op": "sessions"}));
    raw.next()["sessions"].as_array().unwrap().clone()
}

fn row(home: &Home, id: &str) -> Option<Value> {
    sessions(home).into_iter().find(|row| row["session"] == id)
}

/// Waits (bounded) for a condition the daemon reaches on its own.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + EVENT_TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A shim session with one completed turn; returns its id after the shim left.
fn one_turn(home: &Home, model: &MockModel, message: &str) -> String {
    model.push(text_reply(&["noted"]));
    let mut serve = Serve::shim(home).start();
    let id = serve.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    serve.user(message);
    serve.until_ready();
    serve.close_stdin();
    assert_eq!(serve.wait().code(), Some(0));
    id
}

#[test]
fn sessions_are_listed_live_and_saved_and_survive_a_killed_daemon() {
    let model = MockModel::start();
    let home = home_with(&model, "");
    let _guard = DaemonGuard(&home);
    let id = one_turn(&home, &model, "remember the milk");
    let live = row(&home, &id).expect("listed");
    assert_eq!(live["live"], true);
    assert_eq!(live["label"], "remember the milk");
    assert_eq!(live["state"], "ready");

    // kill -9 the daemon: the session is on disk, listed as saved by the next one.
    let pid = home.daemon_status().unwrap()["pid"].as_u64().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
    eventually("the daemon is gone", || home.daemon_status().is_none());
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    let saved = row(&home, &id).expect("still listed");
    assert_eq!(saved["live"], false);
    assert_eq!(saved["state"], "saved");
    assert_eq!(saved["label"], "remember the milk");

    // Attaching loads it and the conversation goes on.
    let mut serve = Serve::shim(&home).arg("--session").arg(&id).start();
    serve.next();
    let snapshot = serve.until("status");
    let transcript = snapshot.iter().find(|e| e["type"] == "transcript").unwrap();
    assert_eq!(
        transcript["items"][0],
        json!({"role": "user", "content": "remember the milk"})
    );
    model.push(text_reply(&["the milk, yes"]));
    serve.user("what was it?");
    serve.until_ready();
    let request = model.requests().pop().unwrap();
    let contents: Vec<&str> = request.messages()[1..]
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(contents, ["remember the milk", "noted", "what was it?"]);

    // The human listing.
    let listing = home.jucode(&["sessions"]);
    let text = String::from_utf8_lossy(&listing.stdout);
    assert!(
        text.contains(&id) && text.contains("remember the milk"),
        "{text}"
    );
}

#[test]
fn one_writer_per_session_file() {
    let model = MockModel::start();
    let home = home_with(&model, "");
    let _guard = DaemonGuard(&home);
    model.push(text_reply(&["ok"]));
    let mut held = Serve::shim(&home).start();
    let id = held.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    held.user("hold it");
    held.until_ready();
    // An in-process serve of the same session is told who holds it.
    let mut other = Serve::builder(&home).arg("--session").arg(&id).start();
    assert_eq!(other.next()["type"], "hello");
    let error = other.next();
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("open in the jucode daemon"), "{message}");
    assert!(
        message.contains(&format!("jucode serve --session {id}")),
        "{message}"
    );
    assert_eq!(other.wait().code(), Some(2));
    // And `sessions rm` refuses to delete it, saying how to close it.
    let rm = home.jucode(&["sessions", "rm", &id]);
    assert_eq!(rm.status.code(), Some(1));
    let said = String::from_utf8_lossy(&rm.stderr);
    assert!(
        said.contains(&format!("jucode sessions rm --force {id}")),
        "{said}"
    );
    assert!(!said.contains("attach"), "{said}");
    let file = crate::common::serve::session_file(home.path(), &id);
    assert!(file.exists());
    // `--force` closes it in the daemon first: its client is told, the file is gone.
    let rm = home.jucode(&["sessions", "rm", "--force", &id]);
    assert_eq!(rm.status.code(), Some(0), "{rm:?}");
    assert!(String::from_utf8_lossy(&rm.stdout).contains(&format!("removed session {id}")));
    assert!(!file.exists());
    let closed = held.until("session_closed");
    assert_eq!(closed.last().unwrap()["reason"], "closed");
    assert_eq!(held.wait().code(), Some(0));
    let gone = home.jucode(&["sessions", "rm", "--force", &id]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("unknown session"));
}

#[test]
fn idle_sessions_unload_and_load_again_on_attach() {
    let model = MockModel::start();
    let home = home_with(&model, "idle_unload_secs = 1");
    let _guard = DaemonGuard(&home);
    let id = one_turn(&home, &model, "a short chat");
    eventually("the idle session unloads", || {
        row(&home, &id).is_some_and(|row| row["live"] == false)
    });
    assert_eq!(home.daemon_status().unwrap()["sessions"], 0);
    let mut raw = Raw::connect(&home);
    raw.send(json!({"op": "attach", "session": id}));
    let snapshot = raw.until("status", Some(&id));
    assert!(
        snapshot
            .iter()
            .any(|e| e["type"] == "transcript" && e["items"][0]["content"] == "a short chat")
    );
    assert_eq!(row(&home, &id).unwrap()["live"], true);
}

#[test]
fn resume_moves_the_client_to_another_session() {
    let model = MockModel::start();
    let home = home_with(&model, "");
    let _guard = DaemonGuard(&home);
    let saved = one_turn(&home, &model, "the saved one");
    let mut serve = Serve::shim(&home).start();
    let current = serve.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    serve.send(json!({"op": "command", "input": format!("/resume {saved}")}));
    let snapshot = serve.until("status");
    assert_eq!(snapshot[0]["type"], "startup", "{snapshot:#?}");
    assert_eq!(snapshot[0]["session_id"], saved.as_str());
    assert!(
        !snapshot.iter().any(|e| e["type"] == "detached"),
        "a move is not a detach: {snapshot:#?}"
    );
    model.push(text_reply(&["back again"]));
    serve.user("continuing");
    let turn = serve.until_ready();
    assert!(turn.iter().all(|e| e["session"] == saved.as_str()));
    serve.close_stdin();
    assert_eq!(serve.wait().code(), Some(0));
    // The session it left is still there for others.
    assert_eq!(row(&home, &current).unwrap()["clients"], 0);
    // An unknown id changes nothing.
    let mut raw = Raw::connect(&home);
    raw.send(json!({"op": "attach", "session": current}));
    raw.until("status", Some(&current));
    raw.send(json!({"op": "command", "input": "/resume nowhere"}));
    let error = raw.next();
    assert_eq!(error["type"], "error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("unknown session")
    );
}

#[test]
fn trust_is_asked_once_and_answered_for_every_client() {
    let model = MockModel::start();
    let home = home_with(&model, "");
    let _guard = DaemonGuard(&home);
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join("AGENTS.md"), "PROJECT RULES").unwrap();
    let mut first = Raw::connect(&home);
    let id = first.open(&root);
    let prompt = first.next();
    assert_eq!(prompt["type"], "trust_prompt", "{prompt}");
    assert_eq!(prompt["repo_root"], root.display().to_string());

    // A late joiner is asked too, in its snapshot.
    let mut second = Raw::connect(&home);
    second.send(json!({"op": "attach", "session": id}));
    let snapshot = second.until("status", Some(&id));
    assert!(
        snapshot.iter().any(|e| e["type"] == "trust_prompt"),
        "{snapshot:#?}"
    );

    first.send(json!({"op": "command", "input": "/trust yes", "session": id}));
    let trusted = format!("trusted {}", root.display());
    for client in [&mut first, &mut second] {
        let events = client.until_status(&trusted, &id);
        assert!(
            events.iter().any(|e| e["type"] == "command_list"),
            "{events:#?}"
        );
    }
    let mut third = Raw::connect(&home);
    third.send(json!({"op": "attach", "session": id}));
    let snapshot = third.until("status", Some(&id));
    assert!(
        !snapshot.iter().any(|e| e["type"] == "trust_prompt"),
        "{snapshot:#?}"
    );

    model.push(text_reply(&["ok"]));
    first.send(json!({"op": "user_message", "content": "hi", "session": id}));
    first.until_status("ready", &id);
    let request = model.wait_requests(1).pop().unwrap();
    let system = request.messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.contains("PROJECT RULES"), "{system}");
}
