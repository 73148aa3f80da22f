//! Drives the real `jucode` binary the way a front-end does: one JSON op per line on
//! stdin, events read line by line from stdout, in a private `JUCODE_HOME`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// How long any single expected event may take before the test fails. Generous: it is a
/// failure bound, never a synchronisation device.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp home"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(self.path().join("config.toml"), text).expect("write config");
    }

    /// [`Home::mock_config`] with a starting approval mode.
    pub fn mock_config_in_mode(&self, base_url: &str, mode: &str) {
        self.mock_config(base_url, "");
        self.prepend_config(&format!("approval_mode = \"{mode}\"\n"));
    }

    /// Adds top-level TOML before the existing config (tables must come last).
    pub fn prepend_config(&self, text: &str) {
        let config = std::fs::read_to_string(self.path().join("config.toml")).unwrap_or_default();
        self.write_config(&format!("{text}{config}"));
    }

    /// Adds TOML (tables) after the existing config.
    pub fn append_config(&self, text: &str) {
        let config = std::fs::read_to_string(self.path().join("config.toml")).unwrap_or_default();
        self.write_config(&format!("{config}{text}"));
    }

    /// A config whose default model is `mock/mock-1` on the given mock server, plus any
    /// extra TOML for the provider table.
    pub fn mock_config(&self, base_url: &str, extra: &str) {
        self.write_config(&format!(
            "model = \"mock/mock-1\"\n\
             [providers.mock]\n\
             kind = \"openai\"\n\
             base_url = \"{base_url}\"\n\
             api_key = \"test-key\"\n\
             retry_base_delay_ms = 1\n\
             {extra}\n"
        ));
    }
}

pub struct Serve {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every event read so far, for failure messages.
    pub seen: Vec<Value>,
}

pub struct ServeBuilder<'a> {
    home: &'a Home,
    args: Vec<String>,
    cwd: Option<PathBuf>,
    env: Vec<(String, String)>,
}

impl<'a> ServeBuilder<'a> {
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    /// Runs `serve` through the daemon instead of in process.
    pub fn without_in_process(mut self) -> Self {
        self.args.retain(|arg| arg != "--in-process");
        self
    }

    pub fn cwd(mut self, cwd: &Path) -> Self {
        self.cwd = Some(cwd.to_owned());
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn start(self) -> Serve {
        let mut command = Command::new(env!("CARGO_BIN_EXE_jucode"));
        command
            .args(&self.args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("JUCODE_HOME", self.home.path())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        command.current_dir(self.cwd.as_deref().unwrap_or(self.home.path()));
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn jucode");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Serve {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }
}

impl Serve {
    /// `jucode serve --in-process` in `home`.
    pub fn builder(home: &Home) -> ServeBuilder<'_> {
        ServeBuilder {
            home,
            args: vec!["serve".into(), "--in-process".into()],
            cwd: None,
            env: Vec::new(),
        }
    }

    pub fn start(home: &Home) -> Serve {
        Self::builder(home).start()
    }

    /// `jucode <args>` in `home`, driven like `serve` (for `--headless`).
    pub fn command<'a>(home: &'a Home, args: &[&str]) -> ServeBuilder<'a> {
        ServeBuilder {
            home,
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            cwd: None,
            env: Vec::new(),
        }
    }

    /// Starts, checks `hello`, and reads the startup batch up to `mcp_servers`.
    pub fn ready(home: &Home) -> Serve {
        let mut serve = Self::start(home);
        serve.skip_startup();
        serve
    }

    pub fn skip_startup(&mut self) -> Vec<Value> {
        let hello = self.next();
        assert_eq!(hello["type"], "hello", "{hello}");
        self.until("mcp_servers")
    }

    pub fn send(&mut self, op: Value) {
        self.send_raw(&op.to_string());
    }

    /// Sends a text-only `user_message`.
    pub fn user(&mut self, content: &str) {
        self.send(serde_json::json!({"op": "user_message", "content": content}));
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).expect("write op");
        stdin.write_all(b"\n").expect("write newline");
        stdin.flush().expect("flush");
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write bytes");
        stdin.flush().expect("flush");
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// The next raw line, or `None` at EOF.
    pub fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(EVENT_TIMEOUT) {
            Ok(line) => Some(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!(
                    "no event within {EVENT_TIMEOUT:?}; seen so far: {:#?}",
                    self.seen
                )
            }
        }
    }

    pub fn next(&mut self) -> Value {
        let line = self
            .next_line()
            .unwrap_or_else(|| panic!("stdout closed; seen so far: {:#?}", self.seen));
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("stdout line is not JSON ({err}): {line}"));
        super::schema::assert_event(&value);
        self.seen.push(value.clone());
        value
    }

    /// Reads events until one of type `ty`; returns them all, that one last.
    pub fn until(&mut self, ty: &str) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let event = self.next();
            let done = event["type"] == ty;
            got.push(event);
            if done {
                return got;
            }
        }
    }

    /// Reads events until a `status` with this message; returns them all, that one last.
    pub fn until_status(&mut self, message: &str) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let event = self.next();
            let done = event["type"] == "status" && event["message"] == message;
            got.push(event);
            if done {
                return got;
            }
        }
    }

    /// Reads the rest of a turn: events until `status: ready`.
    pub fn until_ready(&mut self) -> Vec<Value> {
        self.until_status("ready")
    }

    /// Reads exactly `types.len()` events and checks their types in order.
    pub fn expect(&mut self, types: &[&str]) -> Vec<Value> {
        let got: Vec<Value> = (0..types.len()).map(|_| self.next()).collect();
        let got_types: Vec<&str> = got
            .iter()
            .map(|e| e["type"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(got_types, types, "events: {got:#?}");
        got
    }

    /// Reads one event and checks its type.
    pub fn expect_one(&mut self, ty: &str) -> Value {
        self.expect(&[ty]).remove(0)
    }

    /// Waits for the process to exit (after stdin closed or a quit op).
    pub fn wait(&mut self) -> ExitStatus {
        use wait_timeout::ChildExt;
        // The reader thread keeps draining stdout, so the child never blocks on a pipe.
        self.child
            .wait_timeout(EVENT_TIMEOUT)
            .expect("wait for jucode")
            .unwrap_or_else(|| panic!("jucode did not exit within {EVENT_TIMEOUT:?}"))
    }

    /// Reads every remaining line until EOF.
    pub fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(line) = self.next_line() {
            if let Ok(value) = serde_json::from_str::<Value>(&line) {
                out.push(value);
            }
        }
        out
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Event types of a list, for compact assertions.
pub fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

/// The session id a startup batch names.
pub fn startup_id(events: &[Value]) -> String {
    events
        .iter()
        .find(|event| event["type"] == "startup")
        .and_then(|event| event["session_id"].as_str())
        .expect("a startup event")
        .to_owned()
}

/// The `message` of the last event of a list (an `error` awaited with `until`).
pub fn last_message(events: &[Value]) -> String {
    events
        .last()
        .and_then(|event| event["message"].as_str())
        .expect("an event with a message")
        .to_owned()
}

/// Concatenated `delta` fields of events of type `ty`.
pub fn joined(events: &[Value], ty: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == ty)
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

/// The session file of `id` under `profile`, in whichever project directory it is.
pub fn session_file(profile: &Path, id: &str) -> PathBuf {
    let dir = profile.join("sessions");
    for project in std::fs::read_dir(&dir).expect("a sessions directory") {
        let path = project
            .expect("a project directory")
            .path()
            .join(format!("{id}.jsonl"));
        if path.exists() {
            return path;
        }
    }
    panic!("no file for session {id} under {}", dir.display());
}
