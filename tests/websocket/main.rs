//! The daemon's WebSocket server with real clients: the Python `websockets` client (the
//! seed document's example script run as it is, and `cases.py`), and the dashboard page
//! in headless Chromium (`dashboard.rs`).
//!
//! The clients come from outside: `JUCODE_PYTHON` (a python3 with `websockets`, which
//! `.ci/run` installs), else `python3`. Without them a test says why it skipped.

#[path = "../common/mod.rs"]
mod common;

mod dashboard;
mod handshake;
mod python;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::serve::Home;

/// A free loopback port (bound and released: the daemon binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

/// A daemon of `home` in the foreground, with its WebSocket server.
pub struct WsDaemon<'a> {
    pub home: &'a Home,
    pub port: u16,
    child: Child,
}

impl<'a> WsDaemon<'a> {
    pub fn start(home: &'a Home, server_config: &str, port: u16, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_jucode"));
        command
            .args(["daemon", "--server-config", server_config])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("JUCODE_HOME", home.path())
            .current_dir(home.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(filter) = std::env::var_os("RUST_LOG") {
            command.env("RUST_LOG", filter);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("start the daemon");
        Self { home, port, child }
    }

    /// Waits (bounded) until the WebSocket port accepts connections.
    pub fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut pause = Duration::from_millis(5);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the WebSocket server did not listen"
            );
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// Stops the daemon and returns what it wrote on stderr.
    pub fn stop(mut self) -> String {
        use std::io::Read;
        use wait_timeout::ChildExt;
        let _ = self.home.jucode(&["daemon", "stop"]);
        if self
            .child
            .wait_timeout(Duration::from_secs(20))
            .ok()
            .flatten()
            .is_none()
        {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        stderr
    }
}

impl Drop for WsDaemon<'_> {
    fn drop(&mut self) {
        // A failed test shows what the daemon logged.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.home.path().join("logs/daemon.log"));
            eprintln!("the daemon's log:\n{}", log.unwrap_or_default());
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.home.jucode(&["daemon", "stop"]);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits (bounded) until the daemon of `home` answers.
pub fn wait_daemon(home: &Home) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut pause = Duration::from_millis(5);
    while home.daemon_status().is_none() {
        assert!(Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Says that a test skipped, and why, where a passing run shows it too: the test
/// harness captures `println!` and `eprintln!`, not writes to the stderr handle.
pub fn skipped(why: &str) {
    use std::io::Write;
    // The harness names each test's thread after the test.
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// A python3 with `websockets`, or why there is none.
pub fn python() -> Result<PathBuf, String> {
    let python = std::env::var_os("JUCODE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("python3"));
    match Command::new(&python)
        .args(["-c", "import websockets.asyncio.client, jsonschema"])
        .output()
    {
        Ok(out) if out.status.success() => Ok(python),
        Ok(_) => Err(format!(
            "{} has no `websockets` or `jsonschema` (.ci/install-websocket-clients installs both, as .ci/run does)",
            python.display()
        )),
        Err(_) => Err(format!("{} is not installed", python.display())),
    }
}

/// Runs a case of `cases.py`; fails the test with its output when it fails.
pub fn run_case(python: &Path, case: &str, env: &[(&str, String)]) {
    run_script(python, "cases.py", Some(case), env);
}

/// Runs a script of `tests/websocket/` the same way.
pub fn run_case_script(python: &Path, script: &str, env: &[(&str, String)]) {
    run_script(python, script, None, env);
}

fn run_script(python: &Path, script: &str, case: Option<&str>, env: &[(&str, String)]) {
    use wait_timeout::ChildExt;
    let mut command = Command::new(python);
    command
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/websocket")
                .join(script),
        )
        .args(case)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.env(
        "WS_SCHEMA",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/websocket.schema.json"),
    );
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("start python");
    if child
        .wait_timeout(Duration::from_secs(120))
        .expect("wait")
        .is_none()
    {
        let _ = child.kill();
    }
    let output = child.wait_with_output().expect("python output");
    assert!(
        output.status.success(),
        "{script} {case:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
