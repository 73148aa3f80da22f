//! Every listing of saved sessions shows a broken file, with why, and they agree (issue
//! 17, item 4): `jucode sessions`, the daemon's `sessions`, `/resume` through the daemon
//! and in process. A sessions path that cannot be listed is an error in each of them,
//! never an empty list.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::common::daemon::{DaemonGuard, Raw};
use crate::common::mock::{MockModel, text_reply};
use crate::common::serve::{Home, Serve};

/// A saved session with one turn, made in process; its id and project folder.
fn saved_session(home: &Home, model: &MockModel) -> (String, PathBuf) {
    model.push(text_reply(&["noted"]));
    let mut serve = Serve::ready(home);
    let id = serve.seen[1]["session_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    serve.user("a good one");
    serve.until_ready();
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    let sessions = home.path().join("sessions");
    for project in std::fs::read_dir(&sessions).expect("a sessions directory") {
        let folder = project.expect("entry").path();
        if folder.join(format!("{id}.jsonl")).exists() {
            return (id, folder);
        }
    }
    panic!("no file for session {id}");
}

/// The broken files planted, each with a part of the reason every listing must give.
fn plant(folder: &std::path::Path) -> Vec<(&'static str, &'static str)> {
    let write = |id: &str, text: &[u8]| {
        std::fs::write(folder.join(format!("{id}.jsonl")), text).expect("plant")
    };
    write("broken-empty", b"");
    write("broken-corrupt", b"{\"id\":\"e1\",\"kind\":\"sess\n");
    write(
        "broken-headless",
        b"{\"id\":\"e2\",\"parent\":\"e1\",\"kind\":\"user\",\"content\":\"x\",\"text\":\"x\"}\n",
    );
    let mut planted = vec![
        ("broken-empty", "is empty"),
        ("broken-corrupt", "does not start with a session header"),
        ("broken-headless", "does not start with a session header"),
    ];
    if nix::unistd::geteuid().is_root() {
        println!("NOTE: an unreadable session file is not tried: root reads any file");
    } else {
        use std::os::unix::fs::PermissionsExt;
        write("broken-unreadable", b"{}\n");
        let path = folder.join("broken-unreadable.jsonl");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        planted.push(("broken-unreadable", "cannot be read"));
    }
    planted
}

fn resume_items(serve: &mut Serve) -> Vec<Value> {
    serve.send(json!({"op": "command", "input": "/resume"}));
    let view = serve.until("resume_view").pop().expect("a resume_view");
    view["items"].as_array().cloned().unwrap_or_default()
}

/// `rows` (keyed by `key`) list every planted file as broken, with why, and `good` not.
fn check_rows(what: &str, rows: &[Value], key: &str, good: &str, planted: &[(&str, &str)]) {
    let row = |id: &str| {
        rows.iter()
            .find(|row| row[key] == id)
            .unwrap_or_else(|| panic!("{what}: {id} is not listed: {rows:#?}"))
    };
    assert!(row(good).get("broken").is_none(), "{what}: {rows:#?}");
    for (id, why) in planted {
        let broken = row(id)["broken"].as_str().unwrap_or_default();
        assert!(
            broken.contains(why) && broken.contains(&format!("{id}.jsonl")),
            "{what}: {id}: {broken:?}"
        );
    }
}

#[test]
fn broken_session_files_are_listed_with_why_by_every_listing() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    let _guard = DaemonGuard(&home);
    let (good, folder) = saved_session(&home, &model);
    let planted = plant(&folder);

    let listing = home.jucode(&["sessions"]);
    assert_eq!(listing.status.code(), Some(0), "{listing:?}");
    let text = String::from_utf8_lossy(&listing.stdout);
    assert!(
        text.contains(&good) && text.contains("a good one"),
        "{text}"
    );
    for (id, why) in &planted {
        let at = text
            .find(id)
            .unwrap_or_else(|| panic!("{id} is not listed: {text}"));
        let entry: String = text[at..].lines().take(2).collect::<Vec<_>>().join("\n");
        assert!(entry.contains("broken") && entry.contains(why), "{entry}");
    }

    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    let mut raw = Raw::connect(&home);
    raw.send(json!({"op": "sessions"}));
    let answer = raw.next();
    assert_eq!(answer["type"], "sessions", "{answer}");
    let rows = answer["sessions"].as_array().cloned().unwrap_or_default();
    check_rows("sessions", &rows, "session", &good, &planted);
    let empty = rows.iter().find(|row| row["session"] == "broken-empty");
    assert_eq!(empty.map(|row| &row["live"]), Some(&json!(false)));
    assert_eq!(empty.map(|row| &row["label"]), Some(&Value::Null));

    // `/resume` in a daemon session, and in process: the same rows.
    let mut shim = Serve::shim(&home).start();
    shim.skip_startup();
    check_rows(
        "/resume (daemon)",
        &resume_items(&mut shim),
        "id",
        &good,
        &planted,
    );
    let mut serve = Serve::ready(&home);
    check_rows("/resume", &resume_items(&mut serve), "id", &good, &planted);
}

#[test]
fn a_sessions_path_that_is_a_file_is_an_error_in_every_listing() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    let _guard = DaemonGuard(&home);
    std::fs::write(home.path().join("sessions"), "not a directory").expect("write");
    let said = |text: &str| text.contains("sessions is not a directory");

    let listing = home.jucode(&["sessions"]);
    assert_eq!(listing.status.code(), Some(2), "{listing:?}");
    let stderr = String::from_utf8_lossy(&listing.stderr);
    assert!(said(&stderr), "{stderr}");
    assert!(!stderr.contains("no saved sessions"), "{stderr}");

    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    let mut raw = Raw::connect(&home);
    raw.send(json!({"op": "sessions"}));
    let answer = raw.next();
    assert_eq!(answer["type"], "error", "{answer}");
    assert!(
        said(answer["message"].as_str().unwrap_or_default()),
        "{answer}"
    );

    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "command", "input": "/resume"}));
    let error = serve.expect_one("error");
    assert!(
        said(error["message"].as_str().unwrap_or_default()),
        "{error}"
    );
}
