//! Symbolic links in the profile are never followed (issue 17, item 5): a link planted
//! in place of a session file, its lock, a project folder or the daemon's lock is
//! refused with an error naming it, and what it points to is left as it was.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::daemon::DaemonGuard;
use crate::common::mock::{MockModel, text_reply};
use crate::common::serve::{Home, Serve};

fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    (model, home)
}

/// One in-process session in `cwd` with one turn; its id and file.
fn one_turn(home: &Home, model: &MockModel, cwd: &Path) -> (String, PathBuf) {
    model.push(text_reply(&["noted"]));
    let mut serve = Serve::builder(home).cwd(cwd).start();
    let id = serve.skip_startup()[0]["session_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    serve.user("remember this");
    serve.until_ready();
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    assert_eq!(serve.wait().code(), Some(0));
    let sessions = home.path().join("sessions");
    for project in std::fs::read_dir(&sessions).expect("a sessions directory") {
        let path = project.expect("entry").path().join(format!("{id}.jsonl"));
        if path.exists() {
            return (id, path);
        }
    }
    panic!("no file for session {id} under {}", sessions.display());
}

/// `serve --in-process --session id`: its error, after which it exits 2.
fn refused_resume(home: &Home, id: &str) -> String {
    let mut serve = Serve::builder(home).arg("--session").arg(id).start();
    assert_eq!(serve.next()["type"], "hello");
    let error = serve.next();
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(serve.wait().code(), Some(2));
    error["message"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_linked_session_file_or_lock_is_refused_and_its_target_kept() {
    let (model, home) = setup();
    let (id, path) = one_turn(&home, &model, home.path());
    // The attack: the session's file replaced by a link to a file elsewhere that looks
    // like a session (with a torn last line, which continuing it would have cut).
    let elsewhere = tempfile::tempdir().expect("temp");
    let victim = elsewhere.path().join("victim.jsonl");
    let mut planted = std::fs::read(&path).expect("read");
    planted.extend_from_slice(b"{\"torn");
    std::fs::write(&victim, &planted).expect("write");
    let saved = path.with_extension("saved");
    std::fs::rename(&path, &saved).expect("move");
    std::os::unix::fs::symlink(&victim, &path).expect("link");

    let message = refused_resume(&home, &id);
    assert!(
        message.contains(&format!("{} is a symbolic link", path.display())),
        "{message}"
    );
    assert!(message.contains("will not follow"), "{message}");
    assert_eq!(std::fs::read(&victim).expect("read"), planted, "untouched");
    // Listed as broken, with why.
    let listing = home.jucode(&["sessions"]);
    let text = String::from_utf8_lossy(&listing.stdout);
    assert!(
        text.contains(&id) && text.contains("is a symbolic link"),
        "{text}"
    );

    // The file back in place, its lock a link: refused the same way.
    std::fs::remove_file(&path).expect("unlink");
    std::fs::rename(&saved, &path).expect("move back");
    let lock = path.with_extension("lock");
    let precious = elsewhere.path().join("precious");
    std::fs::write(&precious, "precious").expect("write");
    std::fs::remove_file(&lock).expect("unlink the lock");
    std::os::unix::fs::symlink(&precious, &lock).expect("link");
    let message = refused_resume(&home, &id);
    assert!(
        message.contains(&format!("{} is a symbolic link", lock.display())),
        "{message}"
    );
    assert_eq!(
        std::fs::read_to_string(&precious).expect("read"),
        "precious"
    );

    // Through the daemon: the attach is refused, nothing written.
    let _guard = DaemonGuard(&home);
    let mut raw = {
        assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
        crate::common::daemon::Raw::connect(&home)
    };
    raw.send(json!({"op": "attach", "session": id}));
    let error = raw.until("error", None).pop().expect("an error");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|message| message.contains("is a symbolic link")),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(&precious).expect("read"),
        "precious"
    );
}

#[test]
fn a_linked_project_folder_gets_no_session_files() {
    let (model, home) = setup();
    let project = tempfile::tempdir().expect("temp");
    let cwd = project.path().canonicalize().expect("canonical");
    let (_, path) = one_turn(&home, &model, &cwd);
    let folder = path.parent().expect("its folder").to_path_buf();
    std::fs::remove_dir_all(&folder).expect("remove");
    let elsewhere = tempfile::tempdir().expect("temp");
    std::os::unix::fs::symlink(elsewhere.path(), &folder).expect("link");

    model.push(text_reply(&["fine"]));
    let mut serve = Serve::builder(&home).cwd(&cwd).start();
    serve.skip_startup();
    serve.user("hello");
    let turn = serve.until_ready();
    let said: Vec<&Value> = turn.iter().filter(|e| e["type"] == "error").collect();
    assert!(
        said.iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| { m.contains(&format!("{} is a symbolic link", folder.display())) })),
        "{turn:#?}"
    );
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    let created: Vec<_> = std::fs::read_dir(elsewhere.path())
        .expect("read")
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert!(
        created.is_empty(),
        "files made through the link: {created:?}"
    );
    // Listing does not read through it either: it names it.
    let listing = home.jucode(&["sessions"]);
    assert_eq!(listing.status.code(), Some(2), "{listing:?}");
    let said = String::from_utf8_lossy(&listing.stderr);
    assert!(said.contains("is a symbolic link"), "{said}");
}

#[test]
fn a_linked_daemon_lock_is_refused_and_its_target_kept() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let elsewhere = tempfile::tempdir().expect("temp");
    let precious = elsewhere.path().join("precious");
    std::fs::write(&precious, "precious").expect("write");
    let lock = home.path().join("daemon.sock.lock");
    std::os::unix::fs::symlink(&precious, &lock).expect("link");
    let start = home.jucode(&["daemon", "start"]);
    assert_ne!(start.status.code(), Some(0), "{start:?}");
    let said = String::from_utf8_lossy(&start.stderr);
    assert!(
        said.contains(&format!("{} is a symbolic link", lock.display())),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(&precious).expect("read"),
        "precious"
    );
}
