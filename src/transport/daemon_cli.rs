//! `jucode daemon`: the daemon in the foreground, and the small clients behind
//! `jucode daemon start | stop | status`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::config::Profile;
use crate::host::EngineHost;
use crate::protocol::{BUILD_ID, DaemonEvent, DaemonOp, DaemonStatus, VERSION, encode_line};

/// Runs the daemon until SIGTERM, SIGINT or a `daemon_stop` op; then stops gracefully.
/// `server_flags` (`--server-config`) and `[websocket]` say whether and where its
/// WebSocket server listens.
pub fn run_foreground(
    profile: Profile,
    socket: &Path,
    server_flags: Option<crate::transport::websocket::ServerFlags>,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("jucode-daemon")
        .build()?;
    let loaded = crate::config::LoadedConfig::load(&profile.config_path());
    for problem in &loaded.problems {
        tracing::error!("{problem}");
    }
    let limits = loaded.config.daemon;
    let websocket = match crate::transport::websocket::configured(&profile, server_flags.as_ref()) {
        Ok(websocket) => websocket,
        Err(why) => {
            // The daemon serves its socket all the same; only the exposure is refused.
            tracing::error!("{why}; the WebSocket server is not started");
            eprintln!("jucode: {why}; the WebSocket server is not started");
            None
        }
    };
    runtime.block_on(async move {
        let mut options = jucode_daemon::DaemonOptions::new(socket).with_systemd_listener()?;
        options.version = VERSION.to_owned();
        options.build = BUILD_ID.to_owned();
        if let Some(lines) = limits.max_client_lines {
            options.client_limits.max_lines = lines.max(1);
        }
        if let Some(bytes) = limits.max_client_bytes {
            options.client_limits.max_bytes = bytes.max(1024);
        }
        if let Some(clients) = limits.max_clients {
            options.max_clients = clients.max(1);
        }
        let host = Arc::new(EngineHost::new(profile));
        let web_stop = tokio_util::sync::CancellationToken::new();
        let (listening, ready) = tokio::sync::oneshot::channel();
        options.on_listening = Some(listening);
        let backend = crate::transport::link::Backend::Daemon {
            socket: socket.to_path_buf(),
            start: false,
        };
        let stop = web_stop.clone();
        let shown_socket = socket.display().to_string();
        tokio::spawn(async move {
            if ready.await.is_err() {
                return;
            }
            // Someone who started a daemon by hand is watching its terminal, not its log.
            eprintln!("jucode daemon: listening on {shown_socket}");
            let Some(config) = websocket else {
                return;
            };
            match crate::transport::websocket::bind(&config).await {
                Ok(listener) => {
                    if let Ok(address) = listener.local_addr() {
                        eprintln!(
                            "{}",
                            crate::transport::websocket::announcement(&config, address)
                        );
                    }
                    crate::transport::websocket::serve(listener, config, backend, stop).await;
                }
                Err(err) => {
                    eprintln!(
                        "jucode daemon: the WebSocket server cannot listen on {}:{}: {err}",
                        config.host, config.port
                    );
                    tracing::error!(
                        %err,
                        host = %config.host,
                        port = config.port,
                        "the WebSocket server cannot listen"
                    );
                }
            }
        });
        let served = jucode_daemon::run(host, options, stop_signal()).await;
        web_stop.cancel();
        // Sessions have ended; their files' writers finish what they were given.
        crate::sessions::flush_all(std::time::Duration::from_secs(10)).await;
        served
    })
}

/// `jucode sessions rm --force`: asks the daemon at `socket` to close session `id` (its
/// running turn stops, its clients get `session_closed`). Returns once the daemon has
/// taken the request; the session's file is released a moment later, when its writer
/// has finished.
pub fn close_session(socket: &Path, id: &str) -> Result<(), String> {
    block_on(async {
        let stream = jucode_daemon::connect(socket)
            .await
            .map_err(|err| format!("no jucode daemon answers at {}: {err}", socket.display()))?;
        let (reader, mut writer) = tokio::io::split(stream);
        let mut reader = BufReader::new(reader);
        let close = DaemonOp::Close {
            session: Some(id.to_owned()),
        };
        writer
            .write_all(&encode_line(&close))
            .await
            .map_err(|err| format!("cannot talk to the daemon: {err}"))?;
        let wait = super::shim::HELLO_TIMEOUT;
        let answer = tokio::time::timeout(wait, async {
            let mut line = Vec::new();
            loop {
                line.clear();
                let read = reader
                    .read_until(b'\n', &mut line)
                    .await
                    .map_err(|err| format!("cannot read from the daemon: {err}"))?;
                if read == 0 {
                    return Err("the daemon closed the connection".to_owned());
                }
                match serde_json::from_slice(&line) {
                    Ok(DaemonEvent::Info { session, .. }) if session.as_deref() == Some(id) => {
                        return Ok(());
                    }
                    Ok(DaemonEvent::Error { message, .. }) => return Err(message),
                    _ => {}
                }
            }
        })
        .await;
        answer.unwrap_or_else(|_| {
            Err(format!(
                "the daemon did not answer close within {} s",
                wait.as_secs()
            ))
        })
    })
}

fn print_status(status: &DaemonStatus) -> Result<u8, String> {
    super::stdio::print_stdout(&format!("{}\n", status_json(status)))
        .map(|()| 0)
        .map_err(|err| format!("cannot write to stdout: {err}"))
}

/// What to do when `jucode daemon` finds another daemon holding this profile's socket
/// (`err`, whose message names the socket): the running one keeps serving, and its
/// WebSocket server is whatever its own config said when it started.
pub fn already_running_advice(err: &std::io::Error, profile: &Profile) -> String {
    format!(
        "{err}.\n  To run this daemon instead: `jucode daemon stop`, then run this command again \
         (sessions of the running daemon are saved and can be resumed).\n  To have every daemon \
         serve the WebSocket and the dashboard, set `port` in the [websocket] table of {} \
         (docs/websocket.md); the daemon `jucode serve` starts then serves it too.",
        profile.config_path().display()
    )
}

/// Completes on SIGTERM or SIGINT. SIGHUP is ignored: a daemon started from a terminal
/// must outlive it.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            std::future::pending::<()>().await;
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = int.recv() => return,
                _ = hup.recv() => tracing::info!("ignoring SIGHUP"),
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `jucode daemon start`: starts one unless one answers; prints its status.
pub fn start(socket: &Path) -> Result<u8, String> {
    block_on(async {
        // A daemon killed a moment ago may still hold its socket while the kernel tears
        // it down: it accepts, then resets. Such a daemon is gone; the next attempt
        // starts a new one.
        let mut attempts = 0;
        let status = loop {
            attempts += 1;
            let stream =
                jucode_daemon::connect_or_start(socket, || super::shim::start_daemon(socket))
                    .await
                    .map_err(|err| {
                        format!("cannot start the daemon at {}: {err}", socket.display())
                    })?;
            match ask_status(stream).await {
                Ok(status) => break status,
                Err(why) if attempts < 3 => {
                    tracing::debug!(%why, "the daemon went away before answering; again");
                    tokio::time::sleep(Duration::from_millis(20 * attempts)).await;
                }
                Err(why) => return Err(why),
            }
        };
        print_status(&status)
    })
}

/// `jucode daemon stop`: asks the daemon to stop and waits until it no longer answers.
/// A socket-activated daemon is only waited for until it closes the connection: its
/// socket unit would answer (and start it again) on the next connection.
pub fn stop(socket: &Path) -> Result<u8, String> {
    block_on(async {
        let stream = match jucode_daemon::connect(socket).await {
            Ok(stream) => stream,
            Err(_) => {
                eprintln!("no jucode daemon is running at {}", socket.display());
                return Ok(0);
            }
        };
        let (reader, mut writer) = tokio::io::split(stream);
        let mut reader = BufReader::new(reader);
        let mut ops = encode_line(&DaemonOp::DaemonStatus).to_vec();
        ops.extend_from_slice(&encode_line(&DaemonOp::DaemonStop));
        writer
            .write_all(&ops)
            .await
            .map_err(|err| format!("cannot talk to the daemon: {err}"))?;
        // The daemon closes every connection as its last act.
        let mut socket_activated = false;
        let mut line = Vec::new();
        while reader
            .read_until(b'\n', &mut line)
            .await
            .is_ok_and(|n| n > 0)
        {
            if let Ok(DaemonEvent::DaemonStatus(status)) = serde_json::from_slice(&line) {
                socket_activated = status.socket_activated;
            }
            line.clear();
        }
        if socket_activated {
            eprintln!(
                "jucode daemon stopped; its systemd socket unit will start it again on the next connection (stop both with `systemctl --user stop jucode.socket jucode.service`)"
            );
            return Ok(0);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while jucode_daemon::connect(socket).await.is_ok() {
            if Instant::now() > deadline {
                return Err(format!(
                    "the daemon at {} is still answering after daemon_stop",
                    socket.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        eprintln!("jucode daemon stopped");
        Ok(0)
    })
}

/// `jucode daemon status`: prints `{pid, version, build, socket, sessions, clients,
/// uptime_ms, socket_activated}`; exits 1 when no daemon answers.
pub fn status(socket: &Path) -> Result<u8, String> {
    block_on(async {
        match jucode_daemon::connect(socket).await {
            Ok(stream) => print_status(&ask_status(stream).await?),
            Err(err) => {
                eprintln!("no jucode daemon answers at {}: {err}", socket.display());
                Ok(1)
            }
        }
    })
}

/// The status as printed: the `daemon_status` event without its `type`.
fn status_json(status: &DaemonStatus) -> String {
    serde_json::to_string(status).unwrap_or_default()
}

/// Asks a daemon for its status; every read is bounded, so a daemon that accepts but
/// never answers is reported instead of hanging the command.
async fn ask_status(stream: jucode_daemon::Stream) -> Result<DaemonStatus, String> {
    let (reader, mut writer) = tokio::io::split(stream);
    let mut reader = BufReader::new(reader);
    writer
        .write_all(&encode_line(&DaemonOp::DaemonStatus))
        .await
        .map_err(|err| format!("cannot talk to the daemon: {err}"))?;
    let wait = super::shim::HELLO_TIMEOUT;
    let answer = tokio::time::timeout(wait, async {
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = reader
                .read_until(b'\n', &mut line)
                .await
                .map_err(|err| format!("cannot read from the daemon: {err}"))?;
            if read == 0 {
                return Err("the daemon closed the connection".to_owned());
            }
            if let Ok(DaemonEvent::DaemonStatus(status)) = serde_json::from_slice(&line) {
                return Ok(status);
            }
        }
    })
    .await;
    answer.unwrap_or_else(|_| {
        Err(format!(
            "the daemon did not answer daemon_status within {} s",
            wait.as_secs()
        ))
    })
}

fn block_on<T>(future: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start: {err}"))?
        .block_on(future)
}
