//! A session on a disk that fills up, fails its writes with EIO, turns read-only, loses
//! its directory or is slow: it says it cannot save, goes on in memory, keeps trying,
//! and once the disk works again its file holds every turn it acknowledged, whole lines,
//! nothing before them damaged.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call, usage};
use crate::common::serve::{Home, Serve, session_file};
use crate::mounts::{Tmpfs, check_file, user_messages};
#[cfg(target_os = "linux")]
use crate::passthrough::{Failing, Passthrough};

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

struct Setup<F> {
    model: MockModel,
    home: Home,
    profile: PathBuf,
    project: PathBuf,
    /// The profile's file system (dropped, so unmounted, before the home is removed).
    fs: F,
}

/// A profile directory on the file system `mount` makes of `profile` (in a new home):
/// `None` where it cannot be mounted (it said why).
fn setup_on<F>(mount: impl FnOnce(&Home, &Path) -> Option<F>) -> Option<Setup<F>> {
    let model = MockModel::start();
    let home = Home::new();
    let profile = home.path().join("profile");
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).expect("a project directory");
    let fs = mount(&home, &profile)?;
    write_config(&profile, &model);
    Some(Setup {
        model,
        home,
        profile,
        project,
        fs,
    })
}

fn setup(size: &str) -> Option<Setup<Tmpfs>> {
    setup_on(|_, profile| Tmpfs::mount(profile, size))
}

/// The profile on a FUSE pass-through of a directory beside it.
#[cfg(target_os = "linux")]
fn setup_passthrough() -> Option<Setup<Passthrough>> {
    setup_on(|home, profile| Passthrough::mount(&home.path().join("backing"), profile))
}

/// A message big enough that its line cannot fit in what is left of a page.
fn big(word: &str) -> String {
    format!("{word} {}", "x".repeat(6000))
}

/// A disk that stops taking writes and takes them again, as the scenarios ask.
trait Fault {
    fn break_down(&self);
    fn mend(&self);
}

/// A tmpfs filled to the last byte, then freed.
struct Full<'a> {
    fs: &'a Tmpfs,
    filler: std::cell::RefCell<Option<PathBuf>>,
}

impl<'a> Full<'a> {
    fn of(fs: &'a Tmpfs) -> Self {
        Full {
            fs,
            filler: std::cell::RefCell::new(None),
        }
    }
}

impl Fault for Full<'_> {
    fn break_down(&self) {
        *self.filler.borrow_mut() = Some(self.fs.fill());
    }

    fn mend(&self) {
        if let Some(filler) = self.filler.borrow_mut().take() {
            std::fs::remove_file(filler).expect("free the disk");
        }
    }
}

/// Every write, `fsync`, creation and truncation failing with EIO, then working again.
#[cfg(target_os = "linux")]
impl Fault for Passthrough {
    fn break_down(&self) {
        self.fail(Failing::Writes);
    }

    fn mend(&self) {
        self.fail(Failing::Nothing);
    }
}

#[test]
fn a_full_disk_during_a_turn_a_compaction_and_a_checkout_loses_nothing_acknowledged() {
    let Some(setup) = setup("512k") else {
        return;
    };
    loses_nothing_acknowledged(&setup, &Full::of(&setup.fs));
}

#[cfg(target_os = "linux")]
#[test]
fn failing_writes_during_a_turn_a_compaction_and_a_checkout_lose_nothing_acknowledged() {
    let Some(setup) = setup_passthrough() else {
        return;
    };
    loses_nothing_acknowledged(&setup, &setup.fs);
}

/// The disk breaks down during a turn, during `/compact` and during `/checkout`: each
/// time an `error` says the session cannot be saved and keeps trying, the work completes
/// in memory, and once the disk is mended an `info` says it is saved again. After
/// `kill -9` the file holds every acknowledged turn, after the bytes that were on disk
/// before, and the session resumes from it.
fn loses_nothing_acknowledged<F>(setup: &Setup<F>, fault: &dyn Fault) {
    let Setup {
        model,
        home,
        profile,
        project,
        ..
    } = setup;
    let (home, profile, project) = (home, profile.as_path(), project.as_path());
    model.push(write_reply("c1", "a.txt", "turn one\n"));
    model.push(text_reply(&["one done"]));
    let mut serve = start(home, profile, project, &[]);
    let id = session_id(&serve);
    serve.user("one");
    serve.until_ready();
    let before = std::fs::read(session_file(profile, &id)).expect("the file after turn one");

    // A turn on a broken disk: said once, the turn goes on, in memory.
    fault.break_down();
    model.push(text_reply(&["two done"]));
    serve.user(&big("two"));
    until_message(&mut serve, "error", "keeps trying to save");
    fault.mend();
    model.push(text_reply(&["three done"]));
    serve.user("three");
    // Said within the turn, before its closing status.
    until_message(&mut serve, "info", "saved again");
    serve.until_ready();

    // A compaction on a broken disk.
    fault.break_down();
    model.push(text_reply(&[&big("SUMMARY")]));
    serve.send(json!({"op": "command", "input": "/compact"}));
    until_message(&mut serve, "error", "keeps trying to save");
    fault.mend();
    model.push(text_reply(&["four done"]));
    serve.user("four");
    until_message(&mut serve, "info", "saved again");
    serve.until_ready();

    // A checkout while the disk is broken: the files come back all the same, and its
    // entry is saved with the rest once the disk works.
    let turns = {
        serve.send(json!({"op": "command", "input": "/checkout"}));
        serve.expect_one("checkpoint_view")
    };
    let first = turns["items"][0]["id"].as_str().expect("a turn").to_owned();
    fault.break_down();
    model.push(text_reply(&["five done"]));
    serve.user(&big("five"));
    until_message(&mut serve, "error", "keeps trying to save");
    serve.send(json!({"op": "command", "input": format!("/checkout {first}")}));
    until_message(&mut serve, "info", "restored 1 file");
    assert!(!project.join("a.txt").exists());
    fault.mend();
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
    let path = session_file(profile, &id);
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
    let mut serve = start(home, profile, project, &["--session", &id]);
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

/// Writes that land but every `fsync` failing: the turns are acknowledged all the same
/// (written, which is what a `kill -9` needs), the failure is said and lasts until an
/// `fsync` works (never "saved again" while the disk cannot make anything durable),
/// and the lines since the last good `fsync` are written again in their place (the
/// file cut back first), never twice.
#[cfg(target_os = "linux")]
#[test]
fn a_failing_fsync_is_said_until_one_works_and_duplicates_no_line() {
    let Some(Setup {
        model,
        home,
        profile,
        project,
        fs,
    }) = setup_passthrough()
    else {
        return;
    };
    let mut serve = start(&home, &profile, &project, &[]);
    let id = session_id(&serve);
    model.push(text_reply(&["one done"]));
    turn(&mut serve, "one");
    let mut acked = vec!["one".to_owned()];
    let said = |events: &[Value], ty: &str, text: &str| {
        events.iter().any(|event| {
            event["type"] == ty
                && event["message"]
                    .as_str()
                    .is_some_and(|message| message.contains(text))
        })
    };

    fs.fail(Failing::Fsync);
    let mut failing = Vec::new();
    // The failure of a turn's `fsync` is said at the latest at the next turn's end.
    for n in 0..3 {
        if said(&failing, "error", "keeps trying to save") {
            break;
        }
        let content = format!("while fsync fails {n}");
        model.push(text_reply(&["done"]));
        failing.extend(turn(&mut serve, &content));
        acked.push(content);
    }
    assert!(
        said(&failing, "error", "keeps trying to save"),
        "{failing:#?}"
    );
    assert!(
        !said(&failing, "info", "saved again"),
        "nothing is saved while no fsync works: {failing:#?}"
    );

    fs.fail(Failing::Nothing);
    model.push(text_reply(&["done"]));
    let mended = turn(&mut serve, "mended");
    acked.push("mended".to_owned());
    assert!(said(&mended, "info", "saved again"), "{mended:#?}");

    serve.child.kill().expect("kill -9");
    serve.wait();
    let lines = check_file(&session_file(&profile, &id));
    assert_eq!(user_messages(&lines), acked);
}

/// `jucode daemon <action>` for the daemon of `profile`.
fn daemon(profile: &Path, action: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_jucode"))
        .args(["daemon", action])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", profile)
        .env("JUCODE_HOME", profile)
        .output()
        .expect("run jucode daemon")
}

/// Stops the daemon of a profile when the test ends, whatever happened.
struct StopDaemon<'a>(&'a Path);

impl Drop for StopDaemon<'_> {
    fn drop(&mut self) {
        let _ = daemon(self.0, "stop");
    }
}

/// The daemon's log on the full disk (the profile's `logs/daemon.log`, written at
/// every request at `debug`): the daemon keeps serving and its session keeps the
/// promises above, the log goes on once there is room, and it holds whole lines only,
/// with a line saying how many events were lost.
#[test]
fn a_full_disk_while_the_daemon_writes_its_log() {
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
    let _stop = StopDaemon(&profile);
    let mut serve = Serve::shim(&home)
        .cwd(&project)
        .env("JUCODE_HOME", &profile.display().to_string())
        .env("RUST_LOG", "debug")
        .start();
    serve.skip_startup();
    let id = session_id(&serve);
    let log = profile.join("logs/daemon.log");
    model.push(text_reply(&["one done"]));
    turn(&mut serve, "one");
    let said = |events: &[Value], ty: &str, text: &str| {
        events.iter().any(|event| {
            event["type"] == ty
                && event["message"]
                    .as_str()
                    .is_some_and(|message| message.contains(text))
        })
    };

    let filler = fs.fill();
    // The log's last page too (a tmpfs charges whole pages), with newlines, then 100
    // bytes freed: the next event (the writer's error, logged) fits only in part.
    let full = {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("the log");
        while file.write(b"\n").is_ok_and(|written| written == 1) {}
        let len = file.metadata().expect("the log").len() - 100;
        file.set_len(len).expect("room for part of a line");
        len
    };
    model.push(text_reply(&["two done"]));
    let two = turn(&mut serve, &big("two"));
    assert!(said(&two, "error", "keeps trying to save"), "{two:#?}");
    let status = daemon(&profile, "status");
    assert!(status.status.success(), "the daemon answers: {status:?}");
    let text = std::fs::read(&log).expect("the log");
    assert!(
        text.ends_with(b"\n"),
        "no part of a refused event is left in the log: {:?}",
        String::from_utf8_lossy(&text[text.len().saturating_sub(300)..])
    );

    std::fs::remove_file(&filler).expect("free the disk");
    model.push(text_reply(&["three done"]));
    let three = turn(&mut serve, "three");
    assert!(said(&three, "info", "saved again"), "{three:#?}");
    let text = std::fs::read_to_string(&log).expect("the log");
    let after = text
        .get(usize::try_from(full).expect("a length")..)
        .unwrap_or_default()
        .trim_start_matches('\n');
    assert!(after.ends_with('\n'), "whole lines: {after}");
    assert!(
        after.starts_with("jucode: ") && after.contains("log events could not be written"),
        "the log goes on, and says how many events were lost: {after}"
    );

    let pid = serde_json::from_slice::<Value>(&daemon(&profile, "status").stdout)
        .expect("the daemon's status")["pid"]
        .as_u64()
        .expect("its pid");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill -9");
    assert!(killed.success());
    drop(serve);
    let lines = check_file(&session_file(&profile, &id));
    let users = user_messages(&lines);
    assert_eq!(users.len(), 3, "{users:?}");
    assert!(users[1].starts_with("two "));
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
