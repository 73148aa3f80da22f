//! Helpers for tests that go through the daemon: shims, raw socket clients, and a guard
//! that stops the daemon a test started.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::serve::{EVENT_TIMEOUT, Home, Serve, ServeBuilder};

impl Home {
    pub fn socket(&self) -> PathBuf {
        self.path().join("daemon.sock")
    }

    /// Runs `jucode <args>` to completion in this home.
    pub fn jucode(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_jucode"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.path())
            .env("JUCODE_HOME", self.path())
            .current_dir(self.path())
            .output()
            .expect("run jucode")
    }

    /// `jucode daemon status` as JSON, or `None` when no daemon answers.
    pub fn daemon_status(&self) -> Option<Value> {
        let output = self.jucode(&["daemon", "status"]);
        if !output.status.success() {
            return None;
        }
        serde_json::from_slice(&output.stdout).ok()
    }
}

/// Stops the daemon of a home when the test ends, whatever happened.
pub struct DaemonGuard<'a>(pub &'a Home);

impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.jucode(&["daemon", "stop"]);
    }
}

impl Serve {
    /// `jucode serve` through the daemon of `home`.
    pub fn shim(home: &Home) -> ServeBuilder<'_> {
        Serve::builder(home).without_in_process()
    }
}

/// A client speaking to the daemon socket directly, as a multiplexing front-end would.
pub struct Raw {
    pub stream: UnixStream,
    reader: BufReader<UnixStream>,
    pub seen: Vec<Value>,
}

impl Raw {
    pub fn connect(home: &Home) -> Raw {
        let stream = UnixStream::connect(home.socket()).expect("connect to the daemon");
        stream
            .set_read_timeout(Some(EVENT_TIMEOUT))
            .expect("read timeout");
        let reader = BufReader::new(stream.try_clone().expect("clone stream"));
        let mut raw = Raw {
            stream,
            reader,
            seen: Vec::new(),
        };
        let hello = raw.next();
        assert_eq!(hello["type"], "hello", "{hello}");
        raw
    }

    pub fn send(&mut self, op: Value) {
        writeln!(self.stream, "{op}").expect("write op");
    }

    pub fn next(&mut self) -> Value {
        let mut line = String::new();
        let read = self.reader.read_line(&mut line).unwrap_or_else(|err| {
            panic!(
                "no line from the daemon ({err}); seen so far: {:#?}",
                self.seen
            )
        });
        assert!(
            read > 0,
            "the daemon closed the connection; seen: {:#?}",
            self.seen
        );
        let value: Value =
            serde_json::from_str(&line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}"));
        super::schema::assert_event(&value);
        self.seen.push(value.clone());
        value
    }

    /// Reads until an event of type `ty` (for session `session`, when given).
    pub fn until(&mut self, ty: &str, session: Option<&str>) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = self.next();
            let done =
                event["type"] == ty && session.is_none_or(|s| event["session"].as_str() == Some(s));
            events.push(event);
            if done {
                return events;
            }
        }
    }

    /// Reads until a `status` with this message for `session`.
    pub fn until_status(&mut self, message: &str, session: &str) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = self.next();
            let done = event["type"] == "status"
                && event["message"] == message
                && event["session"] == session;
            events.push(event);
            if done {
                return events;
            }
        }
    }

    /// Reads until the connection closes; returns the raw lines.
    pub fn rest(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return lines,
                Ok(_) => lines.push(line),
            }
        }
    }

    /// Opens a session in `cwd`; returns its id.
    pub fn open(&mut self, cwd: &std::path::Path) -> String {
        self.send(serde_json::json!({"op": "open", "cwd": cwd, "chat": false, "env": {}}));
        let startup = self.until("startup", None).pop().expect("startup");
        let mut batch = vec![startup];
        batch.extend(self.until("mcp_servers", None));
        batch[0]["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no startup: {batch:#?}"))
            .to_owned()
    }
}

/// A short bound for conditions that settle at once (used as a failure bound only).
pub const SETTLE: Duration = Duration::from_secs(10);

/// An agent CLI nobody here wrote, installed from npm by `.ci/install-agent NAME` into
/// `target/<dir>` or named by the environment variable `var`; or why it is not there.
pub fn npm_agent(var: &str, dir: &str, program: &str, install: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .join(dir)
            .join("node_modules/.bin")
            .join(program)
    });
    if !path.exists() {
        return Err(format!(
            "{program} is not installed at {} (run `bash .ci/install-agent {install}`, or set {var})",
            path.display()
        ));
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(path),
        _ => Err("node is not installed".to_owned()),
    }
}

/// Kills the home's daemon with SIGKILL, then waits (15 s at most) until `running`
/// finds none of what it looks for: what the daemon started must not outlive it.
pub fn kill_daemon_and_wait_gone(home: &Home, what: &str, running: impl Fn() -> Vec<u32>) {
    assert!(!running().is_empty(), "{what} runs");
    let pid = home.daemon_status().unwrap()["pid"].as_u64().unwrap();
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !running().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} outlived the daemon: {:?}",
            running()
        );
        std::thread::yield_now();
    }
}
