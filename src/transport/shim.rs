//! `jucode serve` through the daemon: a tiny proxy between this process's stdio and one
//! session of the daemon.
//!
//! The shim runs no engine code. It connects (starting the daemon when none answers),
//! checks the daemon's `hello`, forwards it, opens or attaches a session, then copies
//! bytes both ways: stdin to the socket unparsed (the daemon frames and routes lines),
//! socket to stdout line by line, flushing whenever nothing more is buffered. Its stdout
//! is therefore the session's event stream exactly as `serve --in-process` writes it.
//!
//! It watches just enough to end well: the quit ops it forwards (`shutdown`, `/quit`,
//! `/exit`) and stdin's end make the daemon's closing of the connection expected (exit
//! 0); a connection lost any other way is reported as an `error` event (exit 1).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::engine::commands;
use crate::protocol::{PROTOCOL_VERSION, VERSION};

/// What the shim asks the daemon for.
#[derive(Debug, Clone)]
pub enum Target {
    /// A new session in `cwd` (the chats directory for chat sessions).
    Open { cwd: PathBuf, chat: bool },
    /// An existing session, by id.
    Attach(String),
}

/// Exit codes: 0 when the session or the client ended normally, 1 when the daemon
/// could not be reached or went away, 2 when it refused the session.
pub fn serve_via_daemon(socket: &Path, target: Target) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return Outcome::Unreachable(format!("cannot start: {err}")),
    };
    runtime.block_on(run(socket, target))
}

/// How a shim ended.
pub enum Outcome {
    /// It ran; the process exits with this code.
    Exited(i32),
    /// No daemon could be reached or started, and nothing was printed yet: the caller
    /// may run the session in process instead.
    Unreachable(String),
}

enum ConnectError {
    Unreachable(String),
    /// A daemon answered but must not be used (another protocol or version).
    Refused(String),
}

async fn run(socket: &Path, target: Target) -> Outcome {
    let (reader, writer, hello) = match connect_checked(socket).await {
        Ok(parts) => parts,
        Err(ConnectError::Unreachable(message)) => return Outcome::Unreachable(message),
        Err(ConnectError::Refused(message)) => return Outcome::Exited(fail(None, &message)),
    };
    Outcome::Exited(relay(socket, target, reader, writer, hello).await)
}

async fn relay(
    socket: &Path,
    target: Target,
    reader: ReadHalf,
    mut writer: WriteHalf,
    hello: Vec<u8>,
) -> i32 {
    let mut stdout = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    if stdout
        .write_all(&hello)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 0;
    }
    let request = match &target {
        Target::Open { cwd, chat } => serde_json::json!({
            "op": "open",
            "cwd": cwd,
            "chat": chat,
            "env": std::env::vars().collect::<std::collections::BTreeMap<_, _>>(),
        }),
        Target::Attach(session) => serde_json::json!({"op": "attach", "session": session}),
    };
    let mut line = request.to_string().into_bytes();
    line.push(b'\n');
    if let Err(err) = writer.write_all(&line).await {
        return fail(
            None,
            &format!("lost the jucode daemon at {}: {err}", socket.display()),
        );
    }

    let (chunks_tx, mut chunks) = mpsc::channel::<StdinChunk>(16);
    spawn_stdin_reader(chunks_tx);
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut event = Vec::with_capacity(4096);
    let mut session: Option<String> = None;
    let mut ending = false;
    let mut stdin_open = true;
    let mut ends_line = true;
    loop {
        tokio::select! {
            chunk = chunks.recv(), if stdin_open => match chunk {
                Some(StdinChunk::Data(bytes, quits)) => {
                    ending |= quits;
                    ends_line = bytes.last() == Some(&b'\n');
                    if writer.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                Some(StdinChunk::End) | None => {
                    // A front-end closing its pipe leaves the session running in the
                    // daemon. Detach explicitly (a local socket has no half-close): the
                    // answer comes after every event of the ops sent before, so those
                    // are all printed first.
                    stdin_open = false;
                    ending = true;
                    // A last line without its newline still counts (as in process), and
                    // must not run into the detach.
                    let detach: &[u8] = if ends_line { b"{\"op\":\"detach\"}\n" } else { b"\n{\"op\":\"detach\"}\n" };
                    if writer.write_all(detach).await.is_err() {
                        break;
                    }
                }
            },
            read = reader.read_until(b'\n', &mut event) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                match inspect(&event, session.as_deref()) {
                    Seen::Startup(id) => session = Some(id),
                    Seen::Refused if session.is_none() => {
                        let _ = stdout.write_all(&event).and_then(|()| stdout.flush());
                        return 2;
                    }
                    Seen::Detached if !stdin_open => {
                        let _ = stdout.flush();
                        return 0;
                    }
                    Seen::Closed { daemon_stopping } => {
                        // After our own quit, the close is the expected end (in-process
                        // serve prints nothing then); otherwise someone else closed it,
                        // or the daemon is going away.
                        if ending {
                            let _ = stdout.flush();
                            return 0;
                        }
                        let _ = stdout.write_all(&event).and_then(|()| stdout.flush());
                        if daemon_stopping {
                            drop(stdout);
                            return fail(
                                session.as_deref(),
                                &format!("the jucode daemon at {} is stopping; the session has ended", socket.display()),
                            );
                        }
                        return 0;
                    }
                    _ => {}
                }
                if stdout.write_all(&event).is_err() {
                    return 0;
                }
                event.clear();
                if reader.buffer().is_empty() && stdout.flush().is_err() {
                    return 0;
                }
            }
        }
    }
    let _ = stdout.flush();
    if ending {
        return 0;
    }
    drop(stdout);
    fail(
        session.as_deref(),
        &format!(
            "the jucode daemon at {} closed the connection unexpectedly; the session may still be running in it (reconnect with `jucode serve --session ID`)",
            socket.display()
        ),
    )
}

type ReadHalf = tokio::io::ReadHalf<jucode_daemon::Stream>;
type WriteHalf = tokio::io::WriteHalf<jucode_daemon::Stream>;

/// Connects (starting a daemon if none runs) and reads its `hello`. A daemon of another
/// version is replaced when it hosts no session, and refused otherwise: a shim never
/// talks to a daemon whose protocol it does not know to be its own.
async fn connect_checked(socket: &Path) -> Result<(ReadHalf, WriteHalf, Vec<u8>), ConnectError> {
    let mut replaced = false;
    for attempt in 0..3 {
        let stream = jucode_daemon::connect_or_start(socket, || start_daemon(socket))
            .await
            .map_err(|err| {
                ConnectError::Unreachable(format!(
                    "cannot reach the jucode daemon at {}: {err}",
                    socket.display()
                ))
            })?;
        let (reader, mut writer) = tokio::io::split(stream);
        let mut reader = BufReader::new(reader);
        let mut hello = Vec::new();
        let read = reader.read_until(b'\n', &mut hello).await;
        if !matches!(read, Ok(n) if n > 0) {
            // A daemon dying just as we connected (its listener outlives its last
            // accept by a moment): connect again, which starts a new one if need be.
            if attempt < 2 {
                tracing::info!(
                    ?read,
                    "the daemon closed the connection before hello; retrying"
                );
                continue;
            }
            return Err(ConnectError::Unreachable(format!(
                "the jucode daemon at {} did not say hello: {}",
                socket.display(),
                read.err()
                    .map_or("it closed the connection".to_owned(), |err| err.to_string())
            )));
        }
        let value: Value = serde_json::from_slice(&hello).unwrap_or(Value::Null);
        if value["type"] != "hello" || value["protocol"] != PROTOCOL_VERSION {
            return Err(ConnectError::Refused(format!(
                "the jucode daemon at {} speaks protocol {} but this jucode speaks {PROTOCOL_VERSION}; stop it with `jucode daemon stop` or use `jucode serve --in-process`",
                socket.display(),
                value["protocol"]
            )));
        }
        let version = value["version"].as_str().unwrap_or("?").to_owned();
        if version == VERSION {
            if !reader.buffer().is_empty() {
                return Err(ConnectError::Refused(
                    "the jucode daemon sent data before it was asked".to_owned(),
                ));
            }
            return Ok((reader.into_inner(), writer, hello));
        }
        let sessions = daemon_sessions(&mut reader, &mut writer).await;
        if !replaced && sessions == Some(0) {
            replaced = true;
            tracing::info!(%version, "replacing an idle daemon of another version");
            let _ = writer.write_all(b"{\"op\":\"daemon_stop\"}\n").await;
            // Its closing of the connection says it is gone.
            let mut rest = Vec::new();
            while reader
                .read_until(b'\n', &mut rest)
                .await
                .is_ok_and(|n| n > 0)
            {
                rest.clear();
            }
            continue;
        }
        return Err(ConnectError::Refused(format!(
            "the jucode daemon at {} runs version {version} with {} session(s), but this is jucode {VERSION}; stop it with `jucode daemon stop` (its sessions end) or run `jucode serve --in-process`",
            socket.display(),
            sessions.map_or("an unknown number of".to_owned(), |n| n.to_string())
        )));
    }
    Err(ConnectError::Refused(format!(
        "the jucode daemon at {} could not be replaced by this version",
        socket.display()
    )))
}

async fn daemon_sessions(reader: &mut BufReader<ReadHalf>, writer: &mut WriteHalf) -> Option<u64> {
    writer
        .write_all(b"{\"op\":\"daemon_status\"}\n")
        .await
        .ok()?;
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).await.ok()? == 0 {
            return None;
        }
        let value: Value = serde_json::from_slice(&line).ok()?;
        if value["type"] == "daemon_status" {
            return value["sessions"].as_u64();
        }
    }
}

/// Starts `jucode daemon` detached: its own process group (terminal signals do not
/// reach it), no stdio, logs under the profile.
pub fn start_daemon(socket: &Path) -> std::io::Result<()> {
    let exe = std::env::current_exe()?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("daemon")
        .arg("--socket")
        .arg(socket)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command.spawn().map(drop)
}

enum Seen {
    Startup(String),
    /// An `error` before any session started: the daemon refused the open or attach.
    Refused,
    /// Our session was closed for everyone.
    Closed {
        daemon_stopping: bool,
    },
    /// The daemon confirmed our `detach`.
    Detached,
    Other,
}

/// Looks at the few event lines the shim cares about. Cheap: event lines start with
/// their type, so most lines are dismissed on a prefix.
fn inspect(line: &[u8], session: Option<&str>) -> Seen {
    let interesting = |ty: &str| line.starts_with(format!("{{\"type\":\"{ty}\"").as_bytes());
    if session.is_none() && interesting("startup") {
        let value: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        if let Some(id) = value["session_id"].as_str() {
            return Seen::Startup(id.to_owned());
        }
    }
    if session.is_none() && interesting("error") {
        return Seen::Refused;
    }
    if interesting("session_closed") || interesting("detached") {
        let value: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
        if value["session"].as_str() == session {
            if value["type"] == "detached" {
                return Seen::Detached;
            }
            return Seen::Closed {
                daemon_stopping: value["reason"] == "daemon_stopping",
            };
        }
    }
    Seen::Other
}

enum StdinChunk {
    /// Bytes to forward, and whether a quit op ended a line in them.
    Data(Vec<u8>, bool),
    End,
}

fn spawn_stdin_reader(chunks: mpsc::Sender<StdinChunk>) {
    let spawned = std::thread::Builder::new()
        .name("stdin-forward".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            let mut scanner = QuitScanner::default();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let quits = scanner.feed(&buf[..n]);
                        if chunks
                            .blocking_send(StdinChunk::Data(buf[..n].to_vec(), quits))
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = chunks.blocking_send(StdinChunk::End);
        });
    if let Err(err) = spawned {
        tracing::error!(%err, "cannot start the stdin thread");
    }
}

/// Finds quit ops in the byte stream without buffering long lines: quit ops are tiny,
/// so any line longer than [`QuitScanner::MAX`] is skipped unexamined.
#[derive(Default)]
struct QuitScanner {
    line: Vec<u8>,
    too_long: bool,
}

impl QuitScanner {
    const MAX: usize = 4096;

    fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut quits = false;
        for &byte in bytes {
            if byte == b'\n' {
                quits |= !self.too_long && is_quit_line(&self.line);
                self.line.clear();
                self.too_long = false;
            } else if !self.too_long {
                if self.line.len() == Self::MAX {
                    self.too_long = true;
                    self.line.clear();
                } else {
                    self.line.push(byte);
                }
            }
        }
        quits
    }
}

fn is_quit_line(line: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    match value["op"].as_str() {
        Some("shutdown") => true,
        Some("command") => value["input"].as_str().is_some_and(commands::is_quit),
        _ => false,
    }
}

/// Reports a failure the way a front-end reads it (an `error` event on stdout), and
/// on stderr for people.
fn fail(session: Option<&str>, message: &str) -> i32 {
    let mut event = serde_json::json!({"type": "error", "message": message});
    if let Some(session) = session {
        event["session"] = Value::from(session);
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{event}").and_then(|()| stdout.flush());
    eprintln!("jucode: {message}");
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quit_ops_are_found_across_chunks_and_long_lines_skipped() {
        let mut scanner = QuitScanner::default();
        assert!(!scanner.feed(b"{\"op\":\"user_message\",\"content\":\"/quit\"}\n{\"op\":\"shut"));
        assert!(scanner.feed(b"down\"}\n"));
        assert!(scanner.feed(b"{\"op\":\"command\",\"input\":\" /exit \"}\n"));
        assert!(!scanner.feed(b"{\"op\":\"command\",\"input\":\"/quit now\"}\n"));
        let long = format!("{{\"op\":\"shutdown\",\"pad\":\"{}\"}}\n", "x".repeat(5000));
        assert!(
            !scanner.feed(long.as_bytes()),
            "long lines are never quit ops"
        );
        assert!(scanner.line.capacity() <= QuitScanner::MAX);
    }

    #[test]
    fn inspect_recognises_the_lines_that_matter() {
        let startup = br#"{"type":"startup","version":"0","session_id":"s1","session":"s1"}"#;
        assert!(matches!(inspect(startup, None), Seen::Startup(id) if id == "s1"));
        assert!(matches!(
            inspect(br#"{"type":"error","message":"unknown session: x"}"#, None),
            Seen::Refused
        ));
        assert!(matches!(
            inspect(
                br#"{"type":"error","message":"x","session":"s1"}"#,
                Some("s1")
            ),
            Seen::Other
        ));
        assert!(matches!(
            inspect(
                br#"{"type":"session_closed","session":"s1","reason":"closed"}"#,
                Some("s1")
            ),
            Seen::Closed {
                daemon_stopping: false
            }
        ));
        assert!(matches!(
            inspect(
                br#"{"type":"session_closed","session":"s1","reason":"daemon_stopping"}"#,
                Some("s1")
            ),
            Seen::Closed {
                daemon_stopping: true
            }
        ));
        assert!(matches!(
            inspect(br#"{"type":"detached","session":"s1"}"#, Some("s1")),
            Seen::Detached
        ));
        assert!(matches!(
            inspect(br#"{"type":"session_closed","session":"s2"}"#, Some("s1")),
            Seen::Other
        ));
    }
}
