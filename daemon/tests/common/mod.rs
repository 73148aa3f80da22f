//! A fake host and a line client for driving a real daemon over a real socket.
//!
//! The fake session numbers every event it emits (`seq`), so tests can tell a lost or
//! duplicated line from the right stream. Its ops:
//!
//! - `{"op":"echo","text":T}` → `{"type":"echo","text":T,"seq":N,"session":ID}`
//! - `{"op":"status","message":M}` → a `status` event
//! - `{"op":"ask","text":T}` → `{"type":"answer","text":T,...}` for the asking client
//!   only (a host reply)
//! - `{"op":"watchers"}` → `{"type":"watchers","count":N}`: the clients attached, as the
//!   daemon reports them to the session
//! - `{"op":"tick","count":C,"size":B}` → C `tick` events padded to about B bytes,
//!   handling input between ticks (so a snapshot can land in the middle)
//! - anything else → `{"type":"got","line":<raw line>}`; a non-JSON line → `error`
//! - a snapshot request → one `{"type":"snapshot","seq":<last seq>}` line
//! - input closed → `{"type":"bye"}`, then the output closes
//! - `{"op":"stubborn"}` → from then on, the output never closes (a hung engine)
//! - `shutdown`, `/quit`, `/exit` are quits (never forwarded)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use jucode_daemon::{ClientInput, DaemonOptions, Host, HostOutput, Hosted, OpenParams};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How long any expected event may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

pub const HELLO: &str = r#"{"type":"hello","protocol":2,"version":"test"}"#;

#[derive(Default)]
pub struct FakeHost {
    next: AtomicU64,
}

impl Host for FakeHost {
    type Input = ClientInput;
    type Output = HostOutput;

    fn hello(&self) -> Bytes {
        Bytes::from(format!("{HELLO}\n"))
    }

    async fn open(&self, params: OpenParams) -> Result<Hosted<ClientInput, HostOutput>, String> {
        if params.cwd.as_deref() == Some(Path::new("/refused")) {
            return Err("no such project".into());
        }
        if let Some(id) = &params.resume {
            return Err(format!("unknown session: {id}"));
        }
        let id = format!("s{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (input, inputs) = mpsc::channel(64);
        let (outputs, output) = mpsc::channel(64);
        let cwd = params.cwd.clone();
        let chat = params.chat;
        tokio::spawn(FakeSession::new(id.clone(), outputs).run(params, inputs));
        Ok(Hosted {
            id,
            input,
            output,
            cwd,
            chat,
            engine: None,
        })
    }

    async fn saved_sessions(&self) -> Result<Vec<jucode_daemon::SavedSession>, String> {
        Ok(Vec::new())
    }

    fn intercept(&self, op: &str, line: &[u8]) -> jucode_daemon::Intercept {
        use jucode_daemon::Intercept;
        let quit = match op {
            "shutdown" => true,
            "command" => serde_json::from_slice::<Value>(line).is_ok_and(|op| {
                matches!(op["input"].as_str().map(str::trim), Some("/quit" | "/exit"))
            }),
            _ => false,
        };
        if quit {
            Intercept::Quit
        } else {
            Intercept::Forward
        }
    }
}

struct FakeSession {
    id: String,
    seq: u64,
    out: mpsc::Sender<HostOutput>,
}

impl FakeSession {
    fn new(id: String, out: mpsc::Sender<HostOutput>) -> Self {
        Self { id, seq: 0, out }
    }

    async fn emit(&mut self, mut event: Value) {
        self.seq += 1;
        event["seq"] = json!(self.seq);
        event["session"] = json!(self.id);
        let mut line = serde_json::to_vec(&event).unwrap();
        line.push(b'\n');
        let _ = self.out.send(HostOutput::Line(Bytes::from(line))).await;
    }

    /// A `status` event, told to the daemon as the session's new state, as the engine
    /// does.
    async fn emit_status(&mut self, message: &str) {
        self.seq += 1;
        let line = format!(
            "{{\"type\":\"status\",\"message\":{},\"seq\":{},\"session\":{}}}\n",
            json!(message),
            self.seq,
            json!(self.id)
        );
        let _ = self
            .out
            .send(HostOutput::Status {
                line: Bytes::from(line),
                state: message.into(),
            })
            .await;
    }

    async fn run(mut self, params: OpenParams, mut inputs: mpsc::Receiver<ClientInput>) {
        let cwd = params.cwd.as_ref().map(|c| c.display().to_string());
        let env_x = params.env.get("X").cloned();
        self.emit(json!({"type":"startup","cwd":cwd,"chat":params.chat,"env_x":env_x}))
            .await;
        self.emit_status("ready").await;
        let mut ticks_left = 0u64;
        let mut stubborn = false;
        let mut pad = String::new();
        loop {
            let input = if ticks_left > 0 {
                match inputs.try_recv() {
                    Ok(input) => Some(input),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        ticks_left -= 1;
                        self.emit(json!({"type":"tick","pad":pad})).await;
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            } else {
                inputs.recv().await
            };
            let Some(input) = input else { break };
            match input {
                ClientInput::Barrier { token } => {
                    let _ = self.out.send(HostOutput::Barrier { token }).await;
                }
                ClientInput::Snapshot { token } => {
                    let line = format!(
                        "{{\"type\":\"snapshot\",\"seq\":{},\"session\":\"{}\"}}\n",
                        self.seq, self.id
                    );
                    let _ = self
                        .out
                        .send(HostOutput::Snapshot {
                            token,
                            lines: vec![Bytes::from(line)],
                        })
                        .await;
                }
                ClientInput::Line { client, line } => {
                    let Ok(op) = serde_json::from_slice::<Value>(&line) else {
                        self.emit(json!({"type":"error","message":"invalid command"}))
                            .await;
                        continue;
                    };
                    match op["op"].as_str() {
                        Some("echo") => {
                            self.emit(json!({"type":"echo","text":op["text"]})).await;
                        }
                        Some("status") => {
                            let message = op["message"].as_str().unwrap_or("").to_owned();
                            self.emit_status(&message).await;
                        }
                        Some("stubborn") => stubborn = true,
                        Some("ask") => {
                            let line = format!(
                                "{{\"type\":\"answer\",\"text\":{},\"session\":\"{}\"}}\n",
                                op["text"], self.id
                            );
                            let reply = HostOutput::Reply {
                                client,
                                line: Bytes::from(line),
                            };
                            let _ = self.out.send(reply).await;
                        }
                        Some("watchers") => {
                            let count = *params.clients.borrow();
                            self.emit(json!({"type":"watchers","count":count})).await;
                        }
                        Some("tick") => {
                            ticks_left = op["count"].as_u64().unwrap_or(0);
                            pad = "x".repeat(op["size"].as_u64().unwrap_or(0) as usize);
                        }
                        _ => {
                            let raw = String::from_utf8_lossy(&line).into_owned();
                            self.emit(json!({"type":"got","line":raw})).await;
                        }
                    }
                }
            }
        }
        self.emit(json!({"type":"bye"})).await;
        if stubborn {
            std::future::pending::<()>().await;
        }
    }
}

/// A daemon serving a [`FakeHost`] in this test's runtime.
pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestDaemon {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut DaemonOptions)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run").join("daemon.sock");
        let mut options = DaemonOptions::new(&socket);
        tweak(&mut options);
        let (stop, stopped) = oneshot::channel::<()>();
        let host = Arc::new(FakeHost::default());
        let task = tokio::spawn(jucode_daemon::run(host, options, async move {
            let _ = stopped.await;
        }));
        let daemon = Self {
            dir,
            socket,
            stop: Some(stop),
            task: Some(task),
        };
        // Ready once it accepts a connection.
        let mut probe = daemon.client().await;
        probe.expect_hello().await;
        daemon
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.socket).await
    }

    /// Triggers the graceful stop and waits for `run` to return.
    pub async fn stop(mut self) -> std::io::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        self.join().await
    }

    /// Waits for `run` to return (after `daemon_stop`).
    pub async fn join(&mut self) -> std::io::Result<()> {
        let task = self.task.take().unwrap();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("daemon did not stop")
            .unwrap()
    }
}

/// A client speaking lines over the socket.
pub struct Client {
    lines: tokio::io::Lines<BufReader<Box<dyn AsyncRead + Unpin + Send>>>,
    write: Box<dyn AsyncWrite + Unpin + Send>,
}

impl Client {
    /// Connects, retrying while the daemon is still binding (bounded by [`WAIT`]).
    pub async fn connect(socket: &Path) -> Client {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match UnixStream::connect(socket).await {
                Ok(stream) => return Client::from_stream(stream),
                Err(err) if tokio::time::Instant::now() < deadline => {
                    let _ = err;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(err) => panic!("cannot connect to {}: {err}", socket.display()),
            }
        }
    }

    pub fn from_stream(stream: impl AsyncRead + AsyncWrite + Send + 'static) -> Client {
        let (read, write) = tokio::io::split(stream);
        Client {
            lines: BufReader::new(Box::new(read) as Box<dyn AsyncRead + Unpin + Send>).lines(),
            write: Box::new(write),
        }
    }

    pub async fn send(&mut self, line: &str) {
        self.send_bytes(line.as_bytes()).await;
    }

    pub async fn send_bytes(&mut self, line: &[u8]) {
        self.write.write_all(line).await.unwrap();
        self.write.write_all(b"\n").await.unwrap();
    }

    pub async fn send_json(&mut self, value: Value) {
        self.send(&value.to_string()).await;
    }

    /// Closes the sending side (the daemon sees EOF) but keeps reading.
    pub async fn shutdown_write(&mut self) {
        self.write.shutdown().await.unwrap();
    }

    /// The next raw line; panics on EOF or timeout.
    pub async fn next_raw(&mut self) -> String {
        match tokio::time::timeout(WAIT, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => panic!("unexpected EOF"),
            Ok(Err(err)) => panic!("read failed: {err}"),
            Err(_) => panic!("no line within {WAIT:?}"),
        }
    }

    pub async fn next(&mut self) -> Value {
        let line = self.next_raw().await;
        serde_json::from_str(&line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}"))
    }

    /// The next line, which must be of event `kind`.
    pub async fn expect(&mut self, kind: &str) -> Value {
        let event = self.next().await;
        assert_eq!(event["type"], kind, "expected a {kind} event, got {event}");
        event
    }

    pub async fn expect_hello(&mut self) {
        assert_eq!(self.next_raw().await, HELLO);
    }

    /// Reads lines until EOF, returning them.
    pub async fn read_to_eof(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            match tokio::time::timeout(WAIT, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => lines.push(line),
                Ok(Ok(None)) | Ok(Err(_)) => return lines,
                Err(_) => panic!("no EOF within {WAIT:?}; got {} lines", lines.len()),
            }
        }
    }

    pub async fn expect_eof(&mut self) {
        let rest = self.read_to_eof().await;
        assert!(rest.is_empty(), "expected EOF, got {rest:?}");
    }

    /// Opens a session and reads its startup batch; returns its id.
    pub async fn open(&mut self) -> String {
        self.send(r#"{"op":"open","cwd":"/work"}"#).await;
        let startup = self.expect("startup").await;
        let status = self.expect("status").await;
        assert_eq!(status["message"], "ready");
        startup["session"].as_str().unwrap().to_owned()
    }

    /// Sends `echo` and waits for it to come back on this connection.
    pub async fn echo(&mut self, session: &str, text: &str) -> Value {
        self.send_json(json!({"op":"echo","text":text,"session":session}))
            .await;
        let event = self.expect("echo").await;
        assert_eq!(event["text"], text);
        assert_eq!(event["session"], session);
        event
    }

    /// Attaches and returns the snapshot.
    pub async fn attach(&mut self, session: &str) -> Value {
        self.send_json(json!({"op":"attach","session":session}))
            .await;
        let snapshot = self.expect("snapshot").await;
        assert_eq!(snapshot["session"], session);
        snapshot
    }

    pub async fn sessions(&mut self) -> Vec<Value> {
        self.send(r#"{"op":"sessions"}"#).await;
        let answer = self.expect("sessions").await;
        answer["sessions"].as_array().unwrap().clone()
    }

    pub async fn daemon_status(&mut self) -> Value {
        self.send(r#"{"op":"daemon_status"}"#).await;
        self.expect("daemon_status").await
    }
}
