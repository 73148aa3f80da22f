//! Terminals (`surface`, `term_*`, docs/daemon-protocol.md): a hosted engine's own TUI
//! on a pseudo-terminal the daemon owns, shared by every client. The engine here is
//! jucode's own `jucode acp --in-process` on the loopback mock, whose `tui` is the small
//! deterministic TUI of `tui.py` (full-screen, redraws on every key and resize, quits on
//! `q` or Ctrl-D, or hangs when asked). Synchronisation is on events and on what the
//! screen shows, never on sleeping.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::common::daemon::{DaemonGuard, Raw, SETTLE, kill_daemon_and_wait_gone};
use crate::common::mock::{Gate, MockModel, Step, finish, text, text_reply};
use crate::common::serve::{Home, Serve, last_message};

fn tui_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/daemon/tui.py")
}

/// A daemon home whose `[engines.self]` is `jucode acp` on the mock, with the test TUI
/// (marked in its environment by `mark`, so its processes can be found) and `extra` keys.
struct Hosting {
    _model: MockModel,
    _agent_home: Home,
    home: Home,
    work: tempfile::TempDir,
    mark: String,
}

fn hosting(model: MockModel, extra: &str) -> Hosting {
    hosting_with(model, extra, "")
}

/// [`hosting`] with top-level tables of the daemon's config (`[daemon]`).
fn hosting_with(model: MockModel, extra: &str, tables: &str) -> Hosting {
    let agent_home = Home::new();
    agent_home.mock_config_in_mode(&model.base_url(), "manual");
    let home = Home::new();
    let mark = format!("{}", uuid_like());
    home.write_config(&format!(
        "[engines.self]\nkind = \"acp\"\ncommand = \"{}\"\nargs = [\"acp\", \"--in-process\"]\n\
         tui = \"python3\"\ntui_args = [\"{}\", \"{{session}}\"]\n{extra}\n\
         env = {{ JUCODE_HOME = \"{}\", TUI_MARK = \"{mark}\" }}\n{tables}",
        env!("CARGO_BIN_EXE_jucode"),
        tui_script().display(),
        agent_home.path().display()
    ));
    let started = home.jucode(&["daemon", "start"]);
    assert!(started.status.success(), "{started:?}");
    Hosting {
        _model: model,
        _agent_home: agent_home,
        home,
        work: tempfile::tempdir().unwrap(),
        mark,
    }
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

impl Hosting {
    /// A client with a new session on the engine; its id.
    fn open(&self) -> (Raw, String) {
        let mut client = Raw::connect(&self.home);
        let mut env: HashMap<String, String> = std::env::vars().collect();
        env.insert(
            "JUCODE_HOME".to_owned(),
            self.home.path().display().to_string(),
        );
        client.send(json!({"op": "open", "cwd": self.work.path(), "engine": "self", "env": env}));
        let startup = client.until("startup", None).pop().unwrap();
        let id = startup["session_id"].as_str().unwrap().to_owned();
        client.until_status("ready", &id);
        (client, id)
    }

    /// Processes carrying this hosting's mark: the TUI and its child (and the agent).
    fn marked(&self, what: &str) -> Vec<u32> {
        let needle = format!("TUI_MARK={}", self.mark);
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let marked = environ
                .split(|byte| *byte == 0)
                .any(|var| var == needle.as_bytes());
            if marked && String::from_utf8_lossy(&cmdline).contains(what) {
                found.push(pid);
            }
        }
        found
    }

    fn tui_processes(&self) -> Vec<u32> {
        let mut found = self.marked("tui.py");
        found.extend(self.marked("sleep"));
        found
    }
}

/// What a client knows of the terminal: the screen as its output draws it.
struct Screen {
    id: String,
    seq: u64,
    parser: vt100::Parser,
}

impl Screen {
    fn new(id: &str, cols: u16, rows: u16) -> Screen {
        Screen {
            id: id.to_owned(),
            seq: 0,
            parser: vt100::Parser::new(
                std::num::NonZeroU16::new(rows).unwrap(),
                std::num::NonZeroU16::new(cols).unwrap(),
                0,
            ),
        }
    }

    /// Takes one event: output in order (numbered one by one), a resize.
    fn take(&mut self, event: &Value) {
        match event["type"].as_str() {
            Some("term_output") => {
                assert_eq!(event["id"], self.id.as_str(), "{event}");
                let seq = event["seq"].as_u64().unwrap();
                assert_eq!(seq, self.seq + 1, "output out of order: {event}");
                self.seq = seq;
                let data = base64::engine::general_purpose::STANDARD
                    .decode(event["data"].as_str().unwrap())
                    .unwrap();
                self.parser.process(&data);
            }
            Some("surface") if event["surface"] == "terminal" => {
                let terminal = &event["terminal"];
                self.parser.set_size(
                    std::num::NonZeroU16::new(terminal["rows"].as_u64().unwrap() as u16).unwrap(),
                    std::num::NonZeroU16::new(terminal["cols"].as_u64().unwrap() as u16).unwrap(),
                );
            }
            _ => {}
        }
    }

    fn text(&self) -> String {
        self.parser.screen().contents()
    }

    /// Reads `client`'s events until the screen shows `wanted`.
    fn until_shows(&mut self, client: &mut Raw, wanted: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        while !self.text().contains(wanted) {
            let event = client.next();
            self.take(&event);
            seen.push(event);
        }
        seen
    }
}

fn keys(text: &str) -> Value {
    json!({"op": "term_input", "data": base64::engine::general_purpose::STANDARD.encode(text)})
}

/// Asks for the terminal and reads until it is there: its screen, as this client
/// sees it.
fn to_terminal(client: &mut Raw, session: &str) -> Screen {
    client.send(json!({"op": "surface", "to": "terminal"}));
    let surface = client.until("surface", Some(session)).pop().unwrap();
    assert_eq!(surface["surface"], "terminal", "{surface}");
    let terminal = &surface["terminal"];
    Screen::new(
        terminal["id"].as_str().unwrap(),
        terminal["cols"].as_u64().unwrap() as u16,
        terminal["rows"].as_u64().unwrap() as u16,
    )
}

#[test]
fn a_tui_is_shared_by_its_clients_and_the_conversation_comes_back() {
    let model = MockModel::start();
    model.push(text_reply(&["Hello before"]));
    let hosting = hosting(model, "");
    let _guard = DaemonGuard(&hosting.home);
    let (mut a, id) = hosting.open();
    a.send(json!({"op": "user_message", "content": "hi"}));
    a.until_status("ready", &id);

    // The command and the op do the same; the TUI runs on the agent's conversation.
    a.send(json!({"op": "command", "input": "/terminal"}));
    let surface = a.until("surface", Some(&id)).pop().unwrap();
    let terminal = &surface["terminal"];
    assert_eq!(
        (terminal["cols"].as_u64(), terminal["rows"].as_u64()),
        (Some(80), Some(24))
    );
    let mut screen_a = Screen::new(terminal["id"].as_str().unwrap(), 80, 24);
    screen_a.until_shows(&mut a, "keys");
    assert!(
        screen_a.text().contains("size 80x24"),
        "{}",
        screen_a.text()
    );
    assert!(screen_a.text().starts_with("TUI "), "{}", screen_a.text());

    // What the structured view cannot do meanwhile is said.
    a.send(json!({"op": "user_message", "content": "not now"}));
    let message = last_message(&a.until("error", Some(&id)));
    assert!(message.contains("is on self's TUI"), "{message}");

    // Resize: the client that used the terminal last decides, every client is told.
    a.send(json!({"op": "term_resize", "cols": 100, "rows": 30}));
    let resized = a.until("surface", Some(&id)).pop().unwrap();
    assert_eq!(resized["terminal"]["cols"], 100);
    screen_a.take(&resized);
    screen_a.until_shows(&mut a, "size 100x30");

    // Keys that are not base64 are an error; a size past the bounds is clamped.
    a.send(json!({"op": "term_input", "data": "not base64!"}));
    let message = last_message(&a.until("error", Some(&id)));
    assert!(message.contains("not base64"), "{message}");
    a.send(json!({"op": "term_resize", "cols": 60000, "rows": 60000}));
    let huge = a.until("surface", Some(&id)).pop().unwrap();
    assert_eq!(
        (
            huge["terminal"]["cols"].as_u64(),
            huge["terminal"]["rows"].as_u64()
        ),
        (Some(500), Some(200))
    );
    screen_a.take(&huge);
    screen_a.until_shows(&mut a, "size 500x200");
    a.send(json!({"op": "term_resize", "cols": 100, "rows": 30}));
    let back = a.until("surface", Some(&id)).pop().unwrap();
    screen_a.take(&back);
    screen_a.until_shows(&mut a, "size 100x30");

    // Input from one client reaches the TUI; both see what it draws.
    a.send(keys("ab"));
    screen_a.until_shows(&mut a, "keys ab");

    // A late joiner's snapshot is the screen as the output so far drew it.
    let mut b = Raw::connect(&hosting.home);
    b.send(json!({"op": "attach", "session": id}));
    let snapshot = b.until("term_snapshot", Some(&id));
    let surface = snapshot
        .iter()
        .rev()
        .find(|event| event["type"] == "surface")
        .expect("surface in the snapshot");
    assert_eq!(surface["terminal"]["id"], screen_a.id.as_str());
    let snap = snapshot.last().unwrap();
    assert_eq!(
        (snap["cols"].as_u64(), snap["rows"].as_u64()),
        (Some(100), Some(30))
    );
    let seq = snap["seq"].as_u64().unwrap();
    // `a` may be behind the snapshot; it catches up to the same output.
    while screen_a.seq < seq {
        let event = a.next();
        screen_a.take(&event);
    }
    assert_eq!(screen_a.seq, seq, "a has seen output beyond the snapshot's");
    let mut screen_b = Screen::new(&screen_a.id, 100, 30);
    screen_b.seq = seq;
    screen_b.parser.process(
        &base64::engine::general_purpose::STANDARD
            .decode(snap["screen"].as_str().unwrap())
            .unwrap(),
    );
    assert_eq!(screen_b.text(), screen_a.text());
    assert_eq!(
        screen_b.parser.screen().cursor_position(),
        screen_a.parser.screen().cursor_position()
    );
    assert!(screen_b.parser.screen().cell(2, 0).unwrap().inverse());

    // Input from the second client; both see it, in order, after the snapshot.
    b.send(keys("c"));
    screen_b.until_shows(&mut b, "keys abc");
    screen_a.until_shows(&mut a, "keys abc");

    // Back to chat: the TUI is asked to quit as its user would, the agent resumes,
    // every client gets `surface chat` and the transcript.
    a.send(json!({"op": "surface", "to": "chat"}));
    for client in [&mut a, &mut b] {
        let events = client.until("transcript", Some(&id));
        let info = events
            .iter()
            .find(|event| event["type"] == "info")
            .expect("the TUI's exit is said");
        assert!(
            info["message"]
                .as_str()
                .unwrap()
                .contains("exited with status 0"),
            "{info}"
        );
        let back = events
            .iter()
            .find(|event| event["type"] == "surface")
            .expect("surface chat");
        assert_eq!(back["surface"], "chat", "{back}");
        assert!(back.get("terminal").is_none(), "{back}");
        // The agent's replay of its conversation adds nothing the session had already.
        let items = events.last().unwrap()["items"].as_array().unwrap().clone();
        let roles: Vec<&str> = items
            .iter()
            .filter_map(|item| item["role"].as_str())
            .collect();
        assert_eq!(roles, ["user", "assistant"], "{items:?}");
        assert_eq!(items[0]["content"], "hi", "{items:?}");
    }
    let deadline = std::time::Instant::now() + SETTLE;
    while !hosting.tui_processes().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the TUI outlived its terminal"
        );
        std::thread::yield_now();
    }

    // No terminal now: its input is an error; the structured view works again.
    a.send(keys("x"));
    let message = last_message(&a.until("error", Some(&id)));
    assert!(message.contains("no terminal"), "{message}");
    hosting._model.push(text_reply(&["Hello after"]));
    a.send(json!({"op": "user_message", "content": "again"}));
    let turn = a.until_status("ready", &id);
    assert!(
        turn.iter()
            .any(|event| event["type"] == "assistant_delta" && event["delta"] == "Hello after"),
        "{turn:#?}"
    );
}

#[test]
fn the_conversation_moves_at_the_turn_boundary_and_back_when_the_tui_exits() {
    let model = MockModel::start();
    let gate = Gate::new();
    model.push(crate::common::mock::Reply::Sse(vec![
        text("first"),
        Step::Wait(gate.clone()),
        text(" part"),
        finish("stop"),
        Step::Done,
    ]));
    let hosting = hosting(model, "");
    let _guard = DaemonGuard(&hosting.home);
    let (mut a, id) = hosting.open();
    a.send(json!({"op": "user_message", "content": "go"}));
    a.until("assistant_delta", Some(&id));
    a.send(json!({"op": "surface", "to": "terminal"}));
    let info = a.until("info", Some(&id)).pop().unwrap();
    assert!(
        info["message"]
            .as_str()
            .unwrap()
            .contains("when the running turn ends"),
        "{info}"
    );
    gate.open();
    let events = a.until("surface", Some(&id));
    let ready = events
        .iter()
        .position(|event| event["type"] == "status" && event["message"] == "ready")
        .expect("the turn ended first");
    assert!(ready < events.len() - 1);
    let surface = events.last().unwrap();
    let mut screen = Screen::new(
        surface["terminal"]["id"].as_str().unwrap(),
        surface["terminal"]["cols"].as_u64().unwrap() as u16,
        surface["terminal"]["rows"].as_u64().unwrap() as u16,
    );
    screen.until_shows(&mut a, "keys");

    // The TUI quits by itself (its user pressed `q`): back to chat.
    a.send(keys("q"));
    let events = a.until("transcript", Some(&id));
    assert!(
        events
            .iter()
            .any(|event| event["type"] == "surface" && event["surface"] == "chat"),
        "{events:#?}"
    );
    let items = &events.last().unwrap()["items"];
    assert_eq!(items[1]["role"], "assistant", "{items}");
}

#[test]
fn a_tui_that_hangs_on_quit_is_killed_after_the_grace_period() {
    let hosting = hosting(MockModel::start(), "tui_grace_ms = 300");
    // The hanging TUI ignores its quit keys, SIGHUP and SIGTERM.
    let config = std::fs::read_to_string(hosting.home.path().join("config.toml")).unwrap();
    hosting
        .home
        .write_config(&config.replace("TUI_MARK =", "TUI_HANG = \"1\", TUI_MARK ="));
    let _guard = DaemonGuard(&hosting.home);
    let (mut a, id) = hosting.open();
    let mut screen = to_terminal(&mut a, &id);
    screen.until_shows(&mut a, "keys");
    assert!(!hosting.tui_processes().is_empty());
    a.send(json!({"op": "surface", "to": "chat"}));
    let events = a.until("transcript", Some(&id));
    let killed = events
        .iter()
        .find(|event| event["type"] == "info")
        .expect("the kill is said");
    assert!(
        killed["message"]
            .as_str()
            .unwrap()
            .contains("did not quit within 300 ms: it was killed"),
        "{killed}"
    );
    assert!(
        events
            .iter()
            .any(|event| event["type"] == "surface" && event["surface"] == "chat"),
        "{events:#?}"
    );
    // Its child went with it.
    let deadline = std::time::Instant::now() + SETTLE;
    while !hosting.tui_processes().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the hung TUI or its child survived: {:?}",
            hosting.tui_processes()
        );
        std::thread::yield_now();
    }
}

#[test]
fn no_tui_outlives_its_session_or_the_daemon() {
    let hosting = hosting(MockModel::start(), "");
    let _guard = DaemonGuard(&hosting.home);
    // The session is closed while on its terminal.
    let (mut a, id) = hosting.open();
    let mut screen = to_terminal(&mut a, &id);
    screen.until_shows(&mut a, "keys");
    assert!(!hosting.tui_processes().is_empty());
    a.send(json!({"op": "close", "session": id}));
    let deadline = std::time::Instant::now() + SETTLE;
    while !hosting.tui_processes().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the TUI outlived its session: {:?}",
            hosting.tui_processes()
        );
        std::thread::yield_now();
    }
    // The daemon is killed while another is on its terminal.
    let (mut b, id) = hosting.open();
    let mut screen = to_terminal(&mut b, &id);
    screen.until_shows(&mut b, "keys");
    kill_daemon_and_wait_gone(&hosting.home, "the TUI", || hosting.tui_processes());
}

#[test]
fn surface_is_an_error_where_there_is_no_tui() {
    // jucode's own session.
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    let _guard = DaemonGuard(&home);
    let mut own = Serve::shim(&home).start();
    own.skip_startup();
    own.send(json!({"op": "surface", "to": "terminal"}));
    let message = last_message(&own.until("error"));
    assert!(
        message.contains("jucode's own engine has no TUI"),
        "{message}"
    );
    own.send(json!({"op": "command", "input": "/terminal"}));
    let message = last_message(&own.until("error"));
    assert!(
        message.contains("jucode's own engine has no TUI"),
        "{message}"
    );
    own.send(keys("x"));
    let message = last_message(&own.until("error"));
    assert!(message.contains("has no terminal"), "{message}");

    // An ACP engine whose entry names no `tui`.
    let agent_home = Home::new();
    agent_home.mock_config_in_mode(&model.base_url(), "manual");
    let hosted = Home::new();
    hosted.write_config(&format!(
        "[engines.self]\nkind = \"acp\"\ncommand = \"{}\"\nargs = [\"acp\", \"--in-process\"]\nenv = {{ JUCODE_HOME = \"{}\" }}\n",
        env!("CARGO_BIN_EXE_jucode"),
        agent_home.path().display()
    ));
    let _hosted_guard = DaemonGuard(&hosted);
    let mut serve = Serve::shim(&hosted).arg("--engine").arg("self").start();
    serve.until("status");
    serve.send(json!({"op": "surface", "to": "terminal"}));
    let message = last_message(&serve.until("error"));
    assert!(
        message.contains("has no TUI") && message.contains("`tui`"),
        "{message}"
    );
    serve.send(keys("x"));
    let message = last_message(&serve.until("error"));
    assert!(message.contains("no terminal"), "{message}");
    serve.send(json!({"op": "term_input", "data": "%%%"}));
    let message = last_message(&serve.until("error"));
    assert!(message.contains("no terminal"), "{message}");
}

#[test]
fn a_client_that_does_not_read_the_terminal_is_cut_off_and_the_others_get_it_all() {
    // Small limits keep the test fast: the stalled client is cut off 4 MiB behind. The
    // reading one never is: the session is paced at half that, and a burst past it is at
    // most 256 chunks of 4 KiB.
    let hosting = hosting_with(
        MockModel::start(),
        "",
        "[daemon]\nmax_client_bytes = 4194304\n",
    );
    // More than the limit and what the socket's buffers hold: some 9 MB of events.
    let config = std::fs::read_to_string(hosting.home.path().join("config.toml")).unwrap();
    hosting
        .home
        .write_config(&config.replace("TUI_MARK =", "TUI_FLOOD_LINES = \"500000\", TUI_MARK ="));
    let _guard = DaemonGuard(&hosting.home);
    let (mut a, id) = hosting.open();
    let mut screen = to_terminal(&mut a, &id);
    screen.until_shows(&mut a, "keys");
    let mut stalled = Raw::connect(&hosting.home);
    stalled.send(json!({"op": "attach", "session": id}));
    stalled.until("term_snapshot", Some(&id));
    // From here the stalled client reads nothing; the TUI floods the terminal.
    a.send(keys("F"));
    screen.until_shows(&mut a, "keys flooded");
    stalled
        .stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stalled.stream, &mut rest);
    let last = rest.lines().last().expect("some output before the cut");
    let last: Value = serde_json::from_str(last).expect("the last line is whole JSON");
    assert_eq!(last["type"], "error", "{last}");
    assert!(
        last["message"].as_str().unwrap().contains("behind"),
        "{last}"
    );
}
