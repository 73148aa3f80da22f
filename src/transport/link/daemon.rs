//! A link through the daemon: one socket connection per session, opened like the
//! shim's (connect or start the daemon, check its `hello` and build).

use std::path::Path;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Incoming, Link, LinkEvent, Sender, Target, parse_line};
use crate::protocol::{DaemonEvent, DaemonOp, Event, OpenOp, SessionInfo, encode_line};
use crate::transport::shim::connect::{ConnectError, ReadHalf, WriteHalf, connect_checked};

/// Ops waiting to be written to one session's connection.
const OP_QUEUE: usize = 64;

async fn connection(socket: &Path, start: bool) -> Result<(ReadHalf, WriteHalf), String> {
    if start {
        return connect_checked(socket).await.map_err(|err| match err {
            ConnectError::Unreachable(message) | ConnectError::Refused(message) => message,
        });
    }
    // Only a running daemon of this very build.
    let stream = jucode_daemon::connect(socket)
        .await
        .map_err(|err| format!("the jucode daemon does not answer: {err}"))?;
    let (reader, writer) = tokio::io::split(stream);
    let mut reader = tokio::io::BufReader::new(reader);
    let mut line = Vec::new();
    let read = tokio::time::timeout(
        crate::transport::shim::HELLO_TIMEOUT,
        reader.read_until(b'\n', &mut line),
    )
    .await;
    let hello: Option<crate::protocol::Hello> = match read {
        Ok(Ok(n)) if n > 0 => serde_json::from_slice(&line).ok(),
        _ => None,
    };
    match hello {
        Some(hello) if hello.build.as_deref() == Some(crate::protocol::BUILD_ID) => {
            Ok((reader, writer))
        }
        _ => Err("the jucode daemon did not say hello as this build".into()),
    }
}

pub(super) async fn connect(
    socket: &Path,
    start: bool,
    target: Target,
    events: mpsc::Sender<LinkEvent>,
    tag: u64,
) -> Result<(), String> {
    let (mut reader, mut writer) = connection(socket, start).await?;
    let request = match target {
        Target::Open { cwd, env, engine } => DaemonOp::Open(OpenOp {
            cwd: Some(cwd),
            chat: false,
            env,
            engine,
        }),
        Target::Attach { id, env } => DaemonOp::Attach { session: id, env },
    };
    writer
        .write_all(&encode_line(&request))
        .await
        .map_err(|err| format!("lost the jucode daemon: {err}"))?;
    // The session's first line is its `startup` (of the startup batch or the
    // snapshot); an error before it is the daemon refusing.
    let mut line = Vec::with_capacity(4096);
    let (session, startup) = loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return Err("the jucode daemon closed the connection".into()),
            Ok(_) => {}
        }
        match parse_line(&line) {
            Some(Incoming::Event(event)) => match *event {
                Event::Startup { ref session_id, .. } => break (session_id.clone(), event),
                Event::Error { message } => return Err(message),
                _ => {}
            },
            Some(Incoming::Closed(why)) => return Err(why),
            Some(Incoming::Opened { .. }) | None => {}
        }
    };

    let (ops, mut queued) = mpsc::channel::<Bytes>(OP_QUEUE);
    let stop = CancellationToken::new();
    // The writer ends when the link is dropped, and then stops the reader too, so the
    // connection closes (the daemon detaches it) instead of lingering half open.
    tokio::spawn({
        let stop = stop.clone();
        async move {
            while let Some(line) = queued.recv().await {
                if writer.write_all(&line).await.is_err() {
                    break;
                }
            }
            stop.cancel();
        }
    });
    let link = Link {
        session: session.clone(),
        sender: Sender::Daemon(ops),
    };
    tokio::spawn({
        let session = session.clone();
        async move {
            for incoming in [Incoming::Opened { tag, link }, Incoming::Event(startup)] {
                let first = LinkEvent {
                    session: session.clone(),
                    incoming,
                };
                if events.send(first).await.is_err() {
                    return;
                }
            }
            let why = loop {
                line.clear();
                let read = tokio::select! {
                    () = stop.cancelled() => return,
                    read = reader.read_until(b'\n', &mut line) => read,
                };
                match read {
                    Ok(0) | Err(_) => {
                        break "the connection to the jucode daemon was lost".to_owned();
                    }
                    Ok(_) => {}
                }
                match parse_line(&line) {
                    Some(Incoming::Closed(why)) => break why,
                    Some(incoming) => {
                        let event = LinkEvent {
                            session: session.clone(),
                            incoming,
                        };
                        if events.send(event).await.is_err() {
                            return;
                        }
                    }
                    None => {}
                }
            };
            let _ = events
                .send(LinkEvent {
                    session,
                    incoming: Incoming::Closed(why),
                })
                .await;
        }
    });
    Ok(())
}

pub(super) async fn list(socket: &Path, start: bool) -> Result<Vec<SessionInfo>, String> {
    let (mut reader, mut writer) = connection(socket, start).await?;
    writer
        .write_all(&encode_line(&DaemonOp::Sessions))
        .await
        .map_err(|err| format!("lost the jucode daemon: {err}"))?;
    let answer = async {
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return Err("the jucode daemon closed the connection".to_owned()),
                Ok(_) => {}
            }
            match serde_json::from_slice(&line) {
                Ok(DaemonEvent::Sessions { sessions }) => return Ok(sessions),
                // The daemon could not list its saved sessions: that is the answer.
                Ok(DaemonEvent::Error {
                    message,
                    session: None,
                }) => return Err(message),
                _ => {}
            }
        }
    };
    tokio::time::timeout(crate::transport::shim::HELLO_TIMEOUT, answer)
        .await
        .unwrap_or_else(|_| Err("the jucode daemon did not list its sessions in time".into()))
}
