//! `jucode serve` through the daemon: a tiny proxy between this process's stdio and one
//! session of the daemon.
//!
//! The shim runs no engine code. It connects (starting the daemon when none answers)
//! and checks the daemon's `hello` (`connect`), prints its own `hello` (exactly
//! in-process serve's), opens or attaches a session, then copies bytes both ways:
//! stdin to the socket unparsed (the daemon frames and routes lines), socket to stdout
//! line by line, flushing whenever nothing more is buffered. Its stdout is therefore
//! the session's event stream exactly as `serve --in-process` writes it.
//!
//! How it ends mirrors in-process serve:
//!
//! - a quit op (`shutdown`, `/quit`, `/exit`): stdin is forwarded up to it and no
//!   further (in process nothing after it is read, see `stdin`). The daemon delivers
//!   the session's last events and closes the connection; the shim exits 0 at EOF.
//! - stdin's end: the shim sends `detach`, which the daemon answers (`detached`) after
//!   every event of the ops sent before it; the shim exits 0 on it. A session that ends
//!   meanwhile answers with `session_closed` instead, which ends the shim too.
//!
//! The socket lines decide nothing else: they are printed as they come, whatever came
//! first, so no order of ops, EOF and startup can make the shim wait for a line that
//! is not coming (a connection lost any other way is an `error` event and exit 1).

pub(crate) mod connect;
mod stdin;

use std::io::Write;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use connect::{ConnectError, ReadHalf, WriteHalf, connect_checked};
pub use connect::{HELLO_TIMEOUT, start_daemon};
use stdin::StdinChunk;

use crate::protocol::{CloseReason, DaemonEvent, DaemonOp, OpenOp, encode_line};

/// What the shim asks the daemon for.
#[derive(Debug, Clone)]
pub enum Target {
    /// A new session in `cwd` (the chats directory for chat sessions).
    Open {
        cwd: PathBuf,
        chat: bool,
        /// An `[engines.<name>]` entry to run the session on.
        engine: Option<String>,
    },
    /// An existing session, by id.
    Attach(String),
}

/// How a shim ended.
pub enum Outcome {
    /// It ran; the process exits with this code: 0 when the session or the client
    /// ended normally, 1 when the daemon went away, 2 when it refused the session.
    Exited(i32),
    /// No daemon could be reached or started, and nothing was printed yet: the caller
    /// may run the session in process instead.
    Unreachable(String),
}

/// `session`, when given, is told the id of the session the shim serves, at its first
/// `startup` and after every `/resume` (`serve --server-config` pins its WebSocket
/// server to it).
pub fn serve_via_daemon(
    socket: &Path,
    target: Target,
    session: Option<tokio::sync::watch::Sender<Option<String>>>,
) -> Outcome {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return Outcome::Unreachable(format!("cannot start: {err}")),
    };
    runtime.block_on(run(socket, target, session))
}

async fn run(
    socket: &Path,
    target: Target,
    announce: Option<tokio::sync::watch::Sender<Option<String>>>,
) -> Outcome {
    let (reader, writer) = match connect_checked(socket).await {
        Ok(parts) => parts,
        Err(ConnectError::Unreachable(message)) => return Outcome::Unreachable(message),
        Err(ConnectError::Refused(message)) => return Outcome::Exited(fail(None, &message)),
    };
    Outcome::Exited(relay(socket, target, reader, writer, announce).await)
}

/// Where the shim is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Forwarding both ways.
    Running,
    /// A quit op went out: the daemon closes the connection after the session's last
    /// events.
    Quitting,
    /// stdin ended and `detach` went out: `detached` (or `session_closed`) ends it.
    Detaching,
}

async fn relay(
    socket: &Path,
    target: Target,
    reader: ReadHalf,
    mut writer: WriteHalf,
    announce: Option<tokio::sync::watch::Sender<Option<String>>>,
) -> i32 {
    let mut stdout = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let hello = crate::protocol::hello_line();
    if stdout
        .write_all(&hello)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 0;
    }
    let request = match &target {
        Target::Open { cwd, chat, engine } => DaemonOp::Open(OpenOp {
            cwd: Some(cwd.clone()),
            chat: *chat,
            env: std::env::vars().collect(),
            engine: engine.clone(),
        }),
        // The environment goes along in case the daemon must load the session.
        Target::Attach(session) => DaemonOp::Attach {
            session: session.clone(),
            env: std::env::vars().collect(),
        },
    };
    if let Err(err) = writer.write_all(&encode_line(&request)).await {
        return fail(
            None,
            &format!("lost the jucode daemon at {}: {err}", socket.display()),
        );
    }

    let (chunks_tx, mut chunks) = mpsc::channel::<StdinChunk>(16);
    stdin::spawn(chunks_tx);
    let mut reader = reader;
    let mut line = Vec::with_capacity(4096);
    let mut session: Option<String> = None;
    let mut stage = Stage::Running;
    loop {
        tokio::select! {
            chunk = chunks.recv(), if stage == Stage::Running => {
                let sent = match chunk {
                    Some(StdinChunk::Data(bytes)) => writer.write_all(&bytes).await,
                    Some(StdinChunk::Quit(bytes)) => {
                        stage = Stage::Quitting;
                        writer.write_all(&bytes).await
                    }
                    end => {
                        // A front-end closing its pipe leaves the session running in the
                        // daemon. Detach explicitly (a local socket has no half-close):
                        // the answer comes after every event of the ops sent before.
                        stage = Stage::Detaching;
                        let mut detach = Vec::new();
                        if matches!(end, Some(StdinChunk::End { unterminated: true })) {
                            // The last line counts (as in process) and must not run
                            // into the detach.
                            detach.push(b'\n');
                        }
                        detach.extend_from_slice(&encode_line(&DaemonOp::Detach { session: None }));
                        writer.write_all(&detach).await
                    }
                };
                if sent.is_err() {
                    break;
                }
            }
            read = reader.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                match Seen::of(&line) {
                    // A `/resume` of another session brings its startup batch: from
                    // then on that is the shim's session.
                    Seen::Startup(id) => {
                        if let Some(announce) = &announce {
                            announce.send_replace(Some(id.clone()));
                        }
                        session = Some(id);
                    }
                    Seen::Error if session.is_none() => {
                        let _ = stdout.write_all(&line).and_then(|()| stdout.flush());
                        return 2;
                    }
                    Seen::Detached if stage == Stage::Detaching => {
                        let _ = stdout.flush();
                        return 0;
                    }
                    Seen::Closed(reason) => {
                        // After our own quit or detach, the end is expected (in-process
                        // serve prints nothing then); otherwise someone else closed it,
                        // or the daemon is going away.
                        if stage != Stage::Running {
                            let _ = stdout.flush();
                            return 0;
                        }
                        let _ = stdout.write_all(&line).and_then(|()| stdout.flush());
                        if reason == CloseReason::DaemonStopping {
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
                if stdout.write_all(&line).is_err() {
                    return 0;
                }
                line.clear();
                if reader.buffer().is_empty() && stdout.flush().is_err() {
                    return 0;
                }
            }
        }
    }
    let _ = stdout.flush();
    if stage != Stage::Running {
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

/// The few lines the shim acts on.
#[derive(Debug, PartialEq)]
enum Seen {
    Startup(String),
    /// An `error`. Before the session's first line (`startup`, of its startup batch or
    /// snapshot) it can only be the daemon refusing the open or attach.
    Error,
    /// The session was closed for everyone.
    Closed(CloseReason),
    /// The daemon confirmed the `detach`.
    Detached,
    Other,
}

impl Seen {
    /// Cheap: event lines start with their type, so most lines are dismissed on a
    /// prefix without being parsed.
    fn of(line: &[u8]) -> Seen {
        let starts = |ty: &str| line.starts_with(format!("{{\"type\":\"{ty}\"").as_bytes());
        if starts("startup") {
            #[derive(serde::Deserialize)]
            struct Startup {
                session_id: String,
            }
            return match serde_json::from_slice::<Startup>(line) {
                Ok(startup) => Seen::Startup(startup.session_id),
                Err(_) => Seen::Other,
            };
        }
        if !(starts("error") || starts("session_closed") || starts("detached")) {
            return Seen::Other;
        }
        match serde_json::from_slice::<DaemonEvent>(line) {
            Ok(DaemonEvent::Error { .. }) => Seen::Error,
            Ok(DaemonEvent::SessionClosed { reason, .. }) => Seen::Closed(reason),
            Ok(DaemonEvent::Detached { .. }) => Seen::Detached,
            _ => Seen::Other,
        }
    }
}

/// Reports a failure the way a front-end reads it (an `error` event on stdout, `type`
/// first like every line), and on stderr for people.
fn fail(session: Option<&str>, message: &str) -> i32 {
    let line = DaemonEvent::error(message, session).line();
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&line).and_then(|()| stdout.flush());
    eprintln!("jucode: {message}");
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_that_matter_are_recognised() {
        let startup = br#"{"type":"startup","version":"0","session_id":"s1","session":"s1"}"#;
        assert_eq!(Seen::of(startup), Seen::Startup("s1".into()));
        assert_eq!(
            Seen::of(br#"{"type":"error","message":"unknown session: x","session":"x"}"#),
            Seen::Error
        );
        assert_eq!(
            Seen::of(br#"{"type":"session_closed","session":"s1","reason":"closed"}"#),
            Seen::Closed(CloseReason::Closed)
        );
        assert_eq!(
            Seen::of(br#"{"type":"session_closed","session":"s1","reason":"daemon_stopping"}"#),
            Seen::Closed(CloseReason::DaemonStopping)
        );
        assert_eq!(
            Seen::of(br#"{"type":"detached","session":"s1"}"#),
            Seen::Detached
        );
        assert_eq!(
            Seen::of(br#"{"type":"assistant_delta","delta":"{\"type\":\"detached\"}"}"#),
            Seen::Other
        );
    }

    #[test]
    fn failures_put_type_first() {
        let line = DaemonEvent::error("gone", Some("s1")).line();
        assert_eq!(
            &line[..],
            b"{\"type\":\"error\",\"message\":\"gone\",\"session\":\"s1\"}\n"
        );
    }
}
