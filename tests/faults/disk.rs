//! A session on a disk that fills up, turns read-only, loses its directory or is slow:
//! it says it cannot save, goes on in memory, keeps trying, and once the disk works again
//! its file holds every turn it acknowledged, whole lines, nothing before them damaged.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call, usage};
use crate::common::serve::{Home, Serve, session_file};
use crate::mounts::{Tmpfs, check_file, user_messages};

/// A profile directory at `profile` with a config for `model`.
fn write_config(profile: &Path, model: &MockModel) {
    std::fs::write(
        profile.join("config.toml"),
        format!(
            "model = \"mock/mock-1\"\napproval_mode = \"full-access\"\n\
             [providers.mock]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"k\"\n\
             retry_base_delay_ms = 1\n",
            model.base_url()
        ),
    )
    .expect("write the config");
}

fn start(home: &Home, profile: &Path, project: &Path, args: &[&str]) -> Serve {
    let mut builder = Serve::builder(home)
        .cwd(project)
        .env("JUCODE_HOME", &profile.display().to_string());
    for arg in args {
        builder = builder.arg(arg);
    }
    let mut serve = builder.start();
    serve.skip_startup();
    serve
}

fn session_id(serve: &Serve) -> String {
    serve.seen[1]["session_id"]
        .as_str()
        .expect("a session id in the startup batch")
        .to_owned()
}

/// Reads on until an event of `ty` whose message contains `text` (it may come before or
/// after the turn's closing status); returns everything read.
fn until_message(serve: &mut Serve, ty: &str, text: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let event = serve.next();
        let found = event["type"] == ty
            && event["message"]
                .as_str()
                .is_some_and(|message| message.contains(text));
        seen.push(event);
        if found {
            return seen;
        }
    }
}

/// Sends a user message and reads until its turn's closing status (whatever came
/// before it).
fn turn(serve: &mut Serve, content: &str) -> Vec<Value> {
    serve.user(content);
    let mut seen = Vec::new();
    loop {
        let event = serve.next();
        let echoed = event["type"] == "user_message" && event["content"] == content;
        seen.push(event);
        if echoed {
            break;
        }
    }
    seen.extend(serve.until_ready());
    seen
}

fn write_reply(id: &str, path: &str, content: &str) -> Reply {
    Reply::Sse(vec![
        tool_call(
            0,
            id,
            "write_file",
            &json!({"path": path, "content": content}).to_string(),
        ),
        finish("tool_calls"),
        usage(10, 2),
        Step::Done,
    ])
}

struct Setup {
    model: MockModel,
    home: Home,
    profile: PathBuf,
    project: PathBuf,
    fs: Tmpfs,
}

fn setup(size: &str) -> Option<Setup> {
    let model = MockModel::start();
    let home = Home::new();
    let profile = home.path().join("profile");
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).expect("a project directory");
    let fs = Tmpfs::mount(&profile, size)?;
    write_config(&profile, &model);
    Some(Setup {
        model,
        home,
        profile,
        project,
        fs,
    })
}

/// A message big enough that its line cannot fit in what is left of a page.
fn big(word: &str) -> String {
    format!("{word} {}", "x".repeat(6000))
}

#[test]
fn a_full_disk_during_a_turn_a_compaction_and_a_checkout_loses_nothing_acknowledged() {
    let Some(Setup {
        model,
        home,
        profile,
        project,
        fs,
    }) = setup("512k")
    else {
        return;
    };
    model.push(write_reply("c1", "a.txt", "turn one\n"));
    model.push(text_reply(&["one done"]));
    let mut serve = start(&home, &profile, &project, &[]);
    let id = session_id(&serve);
    serve.user("one");
    serve.until_ready();
    let before = std::fs::read(session_file(&profile, &id)).expect("the file after turn one");

    // A turn on a full disk: said once, the turn goes on, in memory.
    let filler = fs.fill();
    model.push(text_reply(&["two done"]));
    serve.user(&big("two"));
    until_message(&mut serve, "error", "keeps trying to save");
    std::fs::remove_file(&filler).expect("free the disk");
    model.push(text_reply(&["three done"]));
    serve.user("three");
    // Said within the turn, before its closing status.
    until_message(&mut serve, "info", "saved again");
    serve.until_ready();

    // A compaction on a full disk.
    let filler = fs.fill();
    model.push(text_reply(&[&big("SUMMARY")]));
    serve.send(json!({"op": "command", "input": "/compact"}));
    until_message(&mut serve, "error", "keeps trying to save");
    std::fs::remove_file(&filler).expect("free the disk");
    model.push(text_reply(&["four done"]));
    serve.user("four");
    until_message(&mut serve, "info", "saved again");
    serve.until_ready();

    // A checkout while the disk is full: the files come back all the same, and its
    // entry is saved with the rest once there is room.
    let turns = {
        serve.send(json!({"op": "command", "input": "/checkout"}));
        serve.expect_one("checkpoint_view")
    };
    let first = turns["items"][0]["id"].as_str().expect("a turn").to_owned();
    let filler = fs.fill();
    model.push(text_reply(&["five done"]));
    serve.user(&big("five"));
    until_message(&mut serve, "error", "keeps trying to save");
    serve.send(json!({"op": "command", "input": format!("/checkout {first}")}));
    until_message(&mut serve, "info", "restored 1 file");
    assert!(!project.join("a.txt").exists());
    std::fs::remove_file(&filler).expect("free the disk");
    model.push(text_reply(&["six done"]));
    let six = turn(&mut serve, "six");
    assert!(
        six.iter().any(|event| event["type"] == "info"
            && event["message"]
                .as_str()
                .is_some_and(|message| message.contains("saved again"))),
        "saving works again within the turn: {six:?}"
    );

    // kill -9: everything acknowledged is in the file, after what was there before.
    serve.child.kill().expect("kill -9");
    serve.wait();
    drop(serve);
    let path = session_file(&profile, &id);
    let bytes = std::fs::read(&path).expect("the file");
    assert!(
        bytes.starts_with(&before),
        "what was on disk before is untouched"
    );
    let lines = check_file(&path);
    let users = user_messages(&lines);
    assert_eq!(users.len(), 6, "{users:?}");
    assert_eq!(users[0], "one");
    assert!(users[1].starts_with("two "));
    assert_eq!(&users[2..4], ["three", "four"]);
    assert!(users[4].starts_with("five "));
    assert_eq!(users[5], "six");
    assert!(lines.iter().any(|line| line["kind"] == "compaction"));
    assert!(lines.iter().any(|line| line["kind"] == "branch"));

    // And the session continues from it.
    let mut serve = start(&home, &profile, &project, &["--session", &id]);
    assert!(
        !serve.seen.iter().any(|event| event["type"] == "error"),
        "{:#?}",
        serve.seen
    );
    serve.send(json!({"op": "command", "input": "/transcript"}));
    let transcript = serve.expect_one("transcript");
    assert!(transcript.to_string().contains("six done"), "{transcript}");
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
}

#[test]
fn a_read_only_file_system_then_writable_again() {
    let Some(Setup {
        model,
        home,
        profile,
        project,
        fs,
    }) = setup("1m")
    else {
        return;
    };
    let mut serve = start(&home, &profile, &project, &[]);
    let id = session_id(&serve);
    fs.remount("ro");
    model.push(text_reply(&["one done"]));
    serve.user("one");
    until_message(&mut serve, "error", "keeps trying to save");
    fs.remount("rw");
    model.push(text_reply(&["two done"]));
    serve.user("two");
    until_message(&mut serve, "info", "saved again");
    serve.child.kill().expect("kill -9");
    serve.wait();
    let lines = check_file(&session_file(&profile, &id));
    assert_eq!(user_messages(&lines), ["one", "two"]);
}

#[test]
fn a_profile_directory_removed_while_running_is_written_again() {
    let model = MockModel::start();
    let home = Home::new();
    let profile = home.path().join("profile");
    let project = home.path().join("project");
    std::fs::create_dir_all(&profile).expect("a profile");
    std::fs::create_dir_all(&project).expect("a project");
    write_config(&profile, &model);
    let mut serve = start(&home, &profile, &project, &[]);
    let id = session_id(&serve);
    model.push(text_reply(&["one done"]));
    serve.user("one");
    serve.until_ready();
    std::fs::remove_dir_all(profile.join("sessions")).expect("remove the sessions");
    model.push(text_reply(&["two done"]));
    serve.user("two");
    until_message(&mut serve, "error", "was removed while the session ran");
    model.push(text_reply(&["three done"]));
    turn(&mut serve, "three");
    serve.child.kill().expect("kill -9");
    serve.wait();
    let lines = check_file(&session_file(&profile, &id));
    assert_eq!(user_messages(&lines), ["one", "two", "three"]);
    // Its lock was taken again: a second process is refused.
    let mut other = Serve::builder(&home)
        .cwd(&project)
        .env("JUCODE_HOME", &profile.display().to_string())
        .arg("--session")
        .arg(&id)
        .start();
    other.skip_startup();
    assert!(
        !other.seen.iter().any(|event| event["type"] == "error"),
        "the killed process's lock is free: {:#?}",
        other.seen
    );
    other.send(json!({"op": "shutdown"}));
    other.rest();
}

/// A disk whose `fsync` hangs (the writer's test hook, `JUCODE_TEST_FSYNC_DELAY_MS`):
/// turns still stream and end, one after another, and what they wrote is in the file.
#[test]
fn a_hung_fsync_stalls_no_turn() {
    let model = MockModel::start();
    let home = Home::new();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).expect("a project");
    write_config(home.path(), &model);
    let mut serve = Serve::builder(&home)
        .cwd(&project)
        .env("JUCODE_TEST_FSYNC_DELAY_MS", "120000")
        .start();
    serve.skip_startup();
    let id = session_id(&serve);
    for turn in ["one", "two", "three"] {
        model.push(text_reply(&["streamed ", "while ", "fsync ", "hangs"]));
        serve.user(turn);
        let events = serve.until_ready();
        let deltas = events
            .iter()
            .filter(|event| event["type"] == "assistant_delta")
            .count();
        assert!(deltas >= 1, "{events:#?}");
    }
    serve.child.kill().expect("kill -9");
    serve.wait();
    let lines = check_file(&session_file(home.path(), &id));
    assert_eq!(user_messages(&lines), ["one", "two", "three"]);
}
