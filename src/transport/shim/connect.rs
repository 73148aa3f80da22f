//! Getting the shim a daemon it may use: connect (starting one when none answers), read
//! its `hello` within [`HELLO_TIMEOUT`], and make sure it runs this very build.
//!
//! A daemon of another version *or another build* (a `cargo install` of changed
//! sources keeps the version string) is replaced when it hosts no session, and refused
//! otherwise: a shim never hands a session to code it was not built with. Every read
//! of the daemon is bounded, so a daemon that accepts but never answers (stopped with
//! SIGSTOP, say) costs the user seconds, not a hung front-end.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::protocol::{BUILD_ID, DaemonEvent, DaemonOp, Hello, PROTOCOL_VERSION, VERSION};

/// How long the shim waits for the daemon's `hello` (and for its answer to
/// `daemon_status` when checking an old daemon) before giving up on it.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an idle old daemon gets to go away after `daemon_stop`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) type ReadHalf = BufReader<tokio::io::ReadHalf<jucode_daemon::Stream>>;
pub(crate) type WriteHalf = tokio::io::WriteHalf<jucode_daemon::Stream>;

pub(crate) enum ConnectError {
    /// No usable daemon, and nothing was printed: the caller may run the session in
    /// process instead.
    Unreachable(String),
    /// A daemon answered but must not be used (another protocol, or another build
    /// with sessions of its own).
    Refused(String),
}

/// Connects and checks the daemon; returns the connection just after its `hello`.
pub(crate) async fn connect_checked(socket: &Path) -> Result<(ReadHalf, WriteHalf), ConnectError> {
    let mut replaced = false;
    let mut attempt = 0;
    loop {
        attempt += 1;
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
        let first = match read_line(&mut reader).await {
            Ok(Some(line)) => line,
            Ok(None) if attempt < 3 => {
                // A daemon dying just as we connected (its listener outlives its last
                // accept by a moment): connect again, which starts a new one if need be.
                tracing::info!("the daemon closed the connection before hello; retrying");
                continue;
            }
            Ok(None) => {
                return Err(ConnectError::Unreachable(format!(
                    "the jucode daemon at {} closed the connection before saying hello",
                    socket.display()
                )));
            }
            Err(why) => {
                return Err(ConnectError::Unreachable(format!(
                    "the jucode daemon at {} {why}",
                    socket.display()
                )));
            }
        };
        let hello = match serde_json::from_slice::<Hello>(&first) {
            Ok(hello) => hello,
            Err(_) => {
                // The daemon refuses this connection (too many clients) with an error
                // line instead of `hello`.
                let why = match serde_json::from_slice::<DaemonEvent>(&first) {
                    Ok(DaemonEvent::Error { message, .. }) => message,
                    _ => format!(
                        "sent {:?} instead of hello",
                        String::from_utf8_lossy(&first).trim_end()
                    ),
                };
                return Err(ConnectError::Unreachable(format!(
                    "the jucode daemon at {}: {why}",
                    socket.display()
                )));
            }
        };
        if hello.protocol != PROTOCOL_VERSION {
            return Err(ConnectError::Refused(format!(
                "the jucode daemon at {} speaks protocol {} but this jucode speaks {PROTOCOL_VERSION}; stop it with `jucode daemon stop` or use `jucode serve --in-process`",
                socket.display(),
                hello.protocol
            )));
        }
        if hello.version == VERSION && hello.build.as_deref() == Some(BUILD_ID) {
            if !reader.buffer().is_empty() {
                return Err(ConnectError::Refused(
                    "the jucode daemon sent data before it was asked".to_owned(),
                ));
            }
            return Ok((reader, writer));
        }
        let other = describe(&hello);
        let sessions = daemon_sessions(&mut reader, &mut writer).await;
        if !replaced && sessions == Some(0) {
            replaced = true;
            tracing::info!(daemon = %other, "replacing an idle daemon of another build");
            let stop = crate::protocol::encode_line(&DaemonOp::DaemonStop);
            let _ = writer.write_all(&stop).await;
            // Its closing of the connection says it is gone.
            let gone = tokio::time::timeout(STOP_TIMEOUT, async {
                while let Ok(Some(_)) = read_line(&mut reader).await {}
            })
            .await;
            if gone.is_err() {
                return Err(ConnectError::Refused(format!(
                    "the jucode daemon at {} ({other}) did not stop within {} s; stop it with `jucode daemon stop`",
                    socket.display(),
                    STOP_TIMEOUT.as_secs()
                )));
            }
            continue;
        }
        return Err(ConnectError::Refused(match sessions {
            Some(count) => format!(
                "the jucode daemon at {} runs {other} with {count} session(s), but this is jucode {VERSION} ({BUILD_ID}); stop it with `jucode daemon stop` (its sessions end) or run `jucode serve --in-process`",
                socket.display()
            ),
            None => format!(
                "the jucode daemon at {} runs {other} and did not answer daemon_status within {} s, but this is jucode {VERSION} ({BUILD_ID}); stop it with `jucode daemon stop` or run `jucode serve --in-process`",
                socket.display(),
                HELLO_TIMEOUT.as_secs()
            ),
        }));
    }
}

/// `version 0.1.0 (build 1a2b…)` of a daemon's hello.
fn describe(hello: &Hello) -> String {
    match &hello.build {
        Some(build) => format!("version {} ({build})", hello.version),
        None => format!("version {} (an older build)", hello.version),
    }
}

/// One line, within [`HELLO_TIMEOUT`]; `None` at EOF. The error says what went wrong,
/// as the end of a sentence starting with the daemon's name.
async fn read_line(reader: &mut ReadHalf) -> Result<Option<Vec<u8>>, String> {
    let mut line = Vec::new();
    match tokio::time::timeout(HELLO_TIMEOUT, reader.read_until(b'\n', &mut line)).await {
        Err(_) => Err(format!(
            "did not answer within {} s",
            HELLO_TIMEOUT.as_secs()
        )),
        Ok(Err(err)) => Err(format!("could not be read: {err}")),
        Ok(Ok(0)) => Ok(None),
        Ok(Ok(_)) => Ok(Some(line)),
    }
}

/// How many sessions the daemon hosts, if it says within [`HELLO_TIMEOUT`].
async fn daemon_sessions(reader: &mut ReadHalf, writer: &mut WriteHalf) -> Option<usize> {
    let ask = crate::protocol::encode_line(&DaemonOp::DaemonStatus);
    writer.write_all(&ask).await.ok()?;
    loop {
        let line = read_line(reader).await.ok()??;
        // Older daemons' answers lack newer fields: read just what is needed.
        #[derive(serde::Deserialize)]
        struct Status {
            #[serde(rename = "type")]
            kind: String,
            sessions: Option<usize>,
        }
        if let Ok(status) = serde_json::from_slice::<Status>(&line)
            && status.kind == "daemon_status"
        {
            return status.sessions;
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
