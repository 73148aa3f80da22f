//! The real TUIs of Codex and Claude Code on a daemon terminal (`surface terminal`),
//! their model traffic on the loopback mock: the conversation moves to the TUI, a
//! message is typed in it and answered there, the TUI is asked to quit, and what was
//! said in it is in the structured transcript. The programs are the ones the hosting
//! tests use (`JUCODE_CODEX`, `JUCODE_CLAUDE`, or `.ci/run`'s installs); without them
//! the tests say why they skipped. What the TUI shows is read from a terminal model of
//! its output, and every wait is on an event or on the screen, bounded.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::common::daemon::DaemonGuard;
use crate::common::mock::{self, MockModel, Reply};
use crate::common::serve::Home;

/// How long a real TUI may take to show what a step waits for (a failure bound).
const SHOWN_WITHIN: Duration = Duration::from_secs(60);

/// A daemon client reading on a thread of its own, so a wait can end with what the
/// screen showed.
struct Client {
    stream: UnixStream,
    lines: mpsc::Receiver<Value>,
    session: String,
    seen: Vec<Value>,
}

impl Client {
    fn open(home: &Home, cwd: &Path, engine: &str) -> Client {
        let stream = UnixStream::connect(home.socket()).expect("connect");
        let reader = BufReader::new(stream.try_clone().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let Ok(value) = serde_json::from_str::<Value>(&line) else {
                    return;
                };
                crate::common::schema::assert_event(&value);
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        let mut client = Client {
            stream,
            lines,
            session: String::new(),
            seen: Vec::new(),
        };
        let mut env: HashMap<String, String> = std::env::vars().collect();
        env.insert("JUCODE_HOME".to_owned(), home.path().display().to_string());
        client.send(json!({"op": "open", "cwd": cwd, "engine": engine, "env": env}));
        let startup = client.until(|event| event["type"] == "startup");
        client.session = startup["session_id"].as_str().unwrap().to_owned();
        client.until(|event| event["type"] == "status" && event["message"] == "ready");
        client
    }

    /// A client attaching to `session` (loaded from its file when it is not running).
    fn attach(home: &Home, session: &str) -> Client {
        let stream = UnixStream::connect(home.socket()).expect("connect");
        let reader = BufReader::new(stream.try_clone().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let Ok(value) = serde_json::from_str::<Value>(&line) else {
                    return;
                };
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        let mut client = Client {
            stream,
            lines,
            session: session.to_owned(),
            seen: Vec::new(),
        };
        let mut env: HashMap<String, String> = std::env::vars().collect();
        env.insert("JUCODE_HOME".to_owned(), home.path().display().to_string());
        client.send(json!({"op": "attach", "session": session, "env": env}));
        client
    }

    fn send(&mut self, op: Value) {
        writeln!(self.stream, "{op}").unwrap();
    }

    fn next(&mut self, deadline: Instant) -> Option<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = self.lines.recv_timeout(left).ok()?;
        self.seen.push(event.clone());
        Some(event)
    }

    fn until(&mut self, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + SHOWN_WITHIN;
        loop {
            match self.next(deadline) {
                Some(event) if done(&event) => return event,
                Some(_) => {}
                None => panic!("not seen within {SHOWN_WITHIN:?}; seen: {:#?}", self.seen),
            }
        }
    }

    fn keys(&mut self, text: &str) {
        let data = base64::engine::general_purpose::STANDARD.encode(text);
        self.send(json!({"op": "term_input", "data": data}));
    }
}

/// The terminal as this client's output draws it.
struct Screen {
    parser: vt100::Parser,
}

impl Screen {
    fn text(&self) -> String {
        self.parser.screen().contents()
    }

    fn take(&mut self, event: &Value) {
        if event["type"] == "term_output" {
            let data = base64::engine::general_purpose::STANDARD
                .decode(event["data"].as_str().unwrap())
                .unwrap();
            self.parser.process(&data);
        }
    }

    /// Reads until the screen shows `wanted`; its text, or a panic showing it.
    fn until_shows(&mut self, client: &mut Client, wanted: &str) {
        let deadline = Instant::now() + SHOWN_WITHIN;
        while !self.text().contains(wanted) {
            match client.next(deadline) {
                Some(event) => self.take(&event),
                None => panic!(
                    "the TUI did not show {wanted:?} within {SHOWN_WITHIN:?}; its screen:\n{}",
                    self.text()
                ),
            }
        }
    }
}

/// The conversation moves to the TUI (at 120 x 40); its screen.
fn to_terminal(client: &mut Client) -> Screen {
    client.send(json!({"op": "term_resize", "cols": 120, "rows": 40}));
    client.send(json!({"op": "surface", "to": "terminal"}));
    let surface = client.until(|event| event["type"] == "surface");
    assert_eq!(surface["surface"], "terminal", "{surface}");
    assert_eq!(surface["terminal"]["cols"], 120, "{surface}");
    Screen {
        parser: vt100::Parser::new(
            std::num::NonZeroU16::new(40).unwrap(),
            std::num::NonZeroU16::new(120).unwrap(),
            0,
        ),
    }
}

/// Types a line into the TUI as a user does: the text, then Enter once it shows.
fn type_line(client: &mut Client, screen: &mut Screen, text: &str) {
    client.keys(text);
    screen.until_shows(client, text);
    client.keys("\r");
}

/// Back to chat; the transcript every client gets then.
fn back_to_chat(client: &mut Client, screen: &mut Screen) -> Value {
    client.send(json!({"op": "surface", "to": "chat"}));
    // It quits as asked, within the grace period (not killed).
    let deadline = Instant::now() + SHOWN_WITHIN;
    let quit = loop {
        let Some(event) = client.next(deadline) else {
            panic!("no quit; the screen:\n{}", screen.text());
        };
        screen.take(&event);
        if event["type"] == "info" && event["message"].as_str().unwrap_or("").contains("'s TUI") {
            break event;
        }
    };
    assert!(
        quit["message"]
            .as_str()
            .unwrap()
            .ends_with("'s TUI exited with status 0"),
        "{quit}; the screen:\n{}",
        screen.text()
    );
    let back = client.until(|event| event["type"] == "surface");
    assert_eq!(back["surface"], "chat", "{back}");
    client.until(|event| event["type"] == "transcript")
}

fn said_in(transcript: &Value, role: &str, text: &str) -> bool {
    transcript["items"].as_array().unwrap().iter().any(|item| {
        item["role"] == role
            && item["content"]
                .as_str()
                .is_some_and(|said| said.contains(text))
    })
}

// ---- Codex ----

fn codex_said(text: &str) -> Reply {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!("resp_tui_{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let item = format!("msg_{id}");
    mock::responses_sse(&[
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message",
            "id": item, "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "item_id": item, "output_index": 0,
            "content_index": 0, "delta": text}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message",
            "id": item, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text}]}}),
        json!({"type": "response.completed", "response": {"id": id, "status": "completed",
            "output": [], "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 128}}}),
    ])
}

/// A daemon (started) whose `[engines.codex]` runs `program` on the mock, with a home of
/// its own for Codex that trusts the working directory.
struct CodexHosting {
    model: MockModel,
    home: Home,
    work: tempfile::TempDir,
    _codex_home: tempfile::TempDir,
}

fn codex_hosting(program: &Path) -> CodexHosting {
    let model = MockModel::start();
    let codex_home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // The working directory is trusted, so the TUI asks nothing before it starts.
    std::fs::write(
        codex_home.path().join("config.toml"),
        format!(
            "[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
            work.path().display()
        ),
    )
    .unwrap();
    let home = Home::new();
    home.write_config(&format!(
        "[providers.mock]\nkind = \"openai-responses\"\nbase_url = \"{}\"\napi_key = \"sk-test\"\n\
         [engines.codex]\nkind = \"codex\"\ncommand = \"{}\"\nprovider = \"mock\"\ndefault_mode = \"manual\"\n\
         default_config_options = {{ model = \"gpt-test\" }}\n\
         env = {{ CODEX_HOME = \"{}\", HOME = \"{}\" }}\n",
        model.base_url(),
        program.display(),
        codex_home.path().display(),
        codex_home.path().display(),
    ));
    let started = home.jucode(&["daemon", "start"]);
    assert!(started.status.success(), "{started:?}");
    CodexHosting {
        model,
        home,
        work,
        _codex_home: codex_home,
    }
}

fn codex_or_skip() -> Option<std::path::PathBuf> {
    match crate::common::daemon::npm_agent("JUCODE_CODEX", "codex-npm", "codex", "codex") {
        Ok(program) => Some(program),
        Err(why) => {
            println!("SKIPPED: the Codex TUI test: {why}");
            None
        }
    }
}

#[test]
fn a_message_typed_in_codexs_tui_is_in_the_structured_transcript() {
    let Some(program) = codex_or_skip() else {
        return;
    };
    let fx = codex_hosting(&program);
    let (model, home, work) = (&fx.model, &fx.home, &fx.work);
    let _guard = DaemonGuard(home);

    // The TUI names its thread after its first message there.
    model.answer_every("task title", || codex_said("A title"));
    let mut client = Client::open(home, work.path(), "codex");
    chat_tui_chat(&mut client, model, codex_said);
}

/// The round trip both real TUIs make: a turn in chat, the move to the terminal (which
/// shows that turn), a message typed there and answered, the move back (the transcript
/// holds all of it), then a structured turn that goes on with the conversation.
fn chat_tui_chat(client: &mut Client, model: &MockModel, said: fn(&str) -> Reply) {
    model.push(said("Answered in chat"));
    client.send(json!({"op": "user_message", "content": "first in chat"}));
    client.until(|event| event["type"] == "status" && event["message"] == "ready");

    let mut screen = to_terminal(client);
    // The TUI shows the conversation it continues.
    screen.until_shows(client, "Answered in chat");
    model.push(said("Answered in the TUI"));
    type_line(client, &mut screen, "typed in the TUI");
    screen.until_shows(client, "Answered in the TUI");

    let transcript = back_to_chat(client, &mut screen);
    assert!(
        said_in(&transcript, "user", "first in chat"),
        "{transcript}"
    );
    assert!(
        said_in(&transcript, "user", "typed in the TUI"),
        "{transcript}"
    );
    assert!(
        said_in(&transcript, "assistant", "Answered in the TUI"),
        "{transcript}"
    );

    // The structured driver goes on with the conversation.
    model.push(said("Back in chat"));
    client.send(json!({"op": "user_message", "content": "after the TUI"}));
    client.until(|event| event["type"] == "assistant_delta");
    client.until(|event| event["type"] == "status" && event["message"] == "ready");
}

/// How often the transcript has a message of `role` containing `text`.
fn times_said(transcript: &Value, role: &str, text: &str) -> usize {
    transcript["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| {
            item["role"] == role
                && item["content"]
                    .as_str()
                    .is_some_and(|said| said.contains(text))
        })
        .count()
}

#[test]
fn what_was_said_in_codexs_tui_survives_a_killed_daemon() {
    let Some(program) = codex_or_skip() else {
        return;
    };
    let fx = codex_hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    fx.model
        .answer_every("task title", || codex_said("A title"));
    fx.model.push(codex_said("Answered in chat"));
    let mut client = Client::open(&fx.home, fx.work.path(), "codex");
    let session = client.session.clone();
    client.send(json!({"op": "user_message", "content": "first in chat"}));
    client.until(|event| event["type"] == "status" && event["message"] == "ready");
    let mut screen = to_terminal(&mut client);
    screen.until_shows(&mut client, "Answered in chat");
    fx.model.push(codex_said("Answered in the TUI"));
    type_line(&mut client, &mut screen, "typed in the TUI");
    screen.until_shows(&mut client, "Answered in the TUI");

    // The daemon dies with the conversation on the TUI, the TUI with it (its terminal
    // hangs up). The session, resumed, has what was said there, once.
    let pid = fx.home.daemon_status().unwrap()["pid"].as_u64().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + SHOWN_WITHIN;
    while fx.home.daemon_status().is_some() {
        assert!(Instant::now() < deadline, "the daemon did not go");
        std::thread::yield_now();
    }
    let started = fx.home.jucode(&["daemon", "start"]);
    assert!(started.status.success(), "{started:?}");
    let mut again = Client::attach(&fx.home, &session);
    let transcript = again.until(|event| event["type"] == "transcript");
    assert_eq!(
        times_said(&transcript, "user", "first in chat"),
        1,
        "{transcript}"
    );
    assert_eq!(
        times_said(&transcript, "user", "typed in the TUI"),
        1,
        "{transcript}"
    );
    assert_eq!(
        times_said(&transcript, "assistant", "Answered in the TUI"),
        1,
        "{transcript}"
    );
}

// ---- Claude Code ----

fn claude_said(text: &str) -> Reply {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!("msg_tui_{}", NEXT.fetch_add(1, Ordering::Relaxed));
    mock::messages_sse(&[
        json!({"type": "message_start", "message": {"id": id, "type": "message",
            "role": "assistant", "model": "claude-test", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 40, "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 7}}),
        json!({"type": "message_stop"}),
    ])
}

#[test]
fn a_message_typed_in_claude_codes_tui_is_in_the_structured_transcript() {
    let program = match crate::common::daemon::npm_agent(
        "JUCODE_CLAUDE",
        "claude-npm",
        "claude",
        "claude-code",
    ) {
        Ok(program) => program,
        Err(why) => {
            println!("SKIPPED: the Claude Code TUI test: {why}");
            return;
        }
    };
    let model = MockModel::start();
    let claude_home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // Claude Code's first-run questions (theme, trusting the folder) answered already.
    let settings = json!({
        "hasCompletedOnboarding": true,
        "theme": "dark",
        "projects": {work.path().display().to_string(): {
            "hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}},
    });
    std::fs::write(
        claude_home.path().join(".claude.json"),
        settings.to_string(),
    )
    .unwrap();
    let home = Home::new();
    let base = model.base_url();
    home.write_config(&format!(
        "[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}/v1\"\napi_key = \"sk-test\"\n\
         [engines.claude]\nkind = \"claude-code\"\ncommand = \"{}\"\nprovider = \"mock\"\n\
         env = {{ HOME = \"{}\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_AUTOUPDATER = \"1\" }}\n",
        base.trim_end_matches("/v1"),
        program.display(),
        claude_home.path().display()
    ));
    let started = home.jucode(&["daemon", "start"]);
    assert!(started.status.success(), "{started:?}");
    let _guard = DaemonGuard(&home);
    model.answer_every("Write the title", || claude_said("A title"));

    let mut client = Client::open(&home, work.path(), "claude");
    chat_tui_chat(&mut client, &model, claude_said);
}
