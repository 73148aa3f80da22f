//! A link to one serve-protocol session, for the servers that translate it (`jucode
//! acp`, the WebSocket server): through the daemon, or hosted in this process.
//!
//! Each link is one session on its own connection. Through the daemon that is a socket
//! connection of its own (`open` or `attach`, like the shim), so every line on it is
//! that session's and the daemon's per-client rules apply unchanged: answers to this
//! link's ops come back on this link only, a late attach gets a snapshot first,
//! approvals are first-come among all the session's clients, and closing the
//! connection detaches. In process (`--in-process`) the link owns the session's engine
//! channels, and attaching loads a saved session and asks it for the same snapshot.
//!
//! A link delivers the session's events, parsed, as [`LinkEvent`]s on a bounded channel
//! the server gives it (one channel for all of a connection's sessions), and ends with
//! [`Incoming::Closed`]. Dropping a [`Link`] closes it: the daemon detaches it; a
//! session in process ends.

mod daemon;
mod local;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::protocol::{DaemonEvent, Event, Op, SessionInfo, encode_line};
pub use local::Local;

/// How long opening or attaching may take before the link gives up: the daemon may be
/// starting, and a saved session may be long to load, but it must not hang a client.
pub const OPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Where sessions run.
#[derive(Clone)]
pub enum Backend {
    /// In the daemon at this socket; `start`: start one when none answers (a client
    /// process), or not (the daemon's own WebSocket server, which must never start a
    /// second daemon while the first is stopping).
    Daemon { socket: PathBuf, start: bool },
    /// In this process.
    InProcess(Arc<Local>),
}

/// What a link asks for.
#[derive(Debug, Clone)]
pub enum Target {
    /// A new session in `cwd`.
    Open {
        cwd: PathBuf,
        env: HashMap<String, String>,
        /// An `[engines.<name>]` entry (daemon only).
        engine: Option<String>,
    },
    /// An existing session (live, or saved and loaded): its snapshot comes first.
    Attach {
        id: String,
        env: HashMap<String, String>,
    },
}

/// One thing a session sent.
#[derive(Debug)]
pub enum Incoming {
    /// The link asked for with this tag is up: the first item of every link, before
    /// the session's first event.
    Opened {
        tag: u64,
        link: Link,
    },
    Event(Box<Event>),
    /// The link ended: the session closed, the link detached, or the connection was
    /// lost. Nothing follows.
    Closed(String),
}

#[derive(Debug)]
pub struct LinkEvent {
    pub session: String,
    pub incoming: Incoming,
}

/// The sending side of a link to a running session.
pub struct Link {
    pub session: String,
    sender: Sender,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("session", &self.session)
            .finish()
    }
}

enum Sender {
    Daemon(mpsc::Sender<Bytes>),
    Local {
        inputs: mpsc::Sender<crate::engine::Input>,
        /// Set while the forwarder skips lines until the snapshot asked for.
        resyncing: Arc<std::sync::atomic::AtomicBool>,
    },
}

impl Link {
    /// `session/close` of both servers: cancel, then free. The interrupt ends a running
    /// turn; the quit ends the session, or detaches when other clients still watch it.
    pub async fn close_session(&self) {
        self.send(Op::Interrupt { index: None }).await;
        self.send(Op::Shutdown).await;
    }

    /// Sends an op; false when the link has ended.
    pub async fn send(&self, op: Op) -> bool {
        match &self.sender {
            Sender::Daemon(lines) => lines.send(encode_line(&op)).await.is_ok(),
            Sender::Local { inputs, .. } => {
                let input = crate::engine::Input::Op {
                    client: crate::engine::SOLE_CLIENT,
                    op,
                };
                inputs.send(input).await.is_ok()
            }
        }
    }

    /// Asks for a fresh snapshot: what comes next is the session's state now (startup
    /// batch, transcript, ...), then live events; events before it are skipped.
    pub async fn resync(&self) -> bool {
        match &self.sender {
            Sender::Daemon(lines) => {
                let attach = crate::protocol::DaemonOp::Attach {
                    session: self.session.clone(),
                    env: HashMap::new(),
                };
                lines.send(encode_line(&attach)).await.is_ok()
            }
            Sender::Local { inputs, resyncing } => {
                resyncing.store(true, std::sync::atomic::Ordering::SeqCst);
                let snapshot = crate::engine::Input::Snapshot {
                    token: local::SNAPSHOT,
                };
                inputs.send(snapshot).await.is_ok()
            }
        }
    }
}

impl Backend {
    /// Opens or attaches. On success the link's first item on `events` is
    /// [`Incoming::Opened`] with `tag` (carrying the [`Link`]), and the session's events
    /// follow it, so a server never sees an event of a session it does not know yet.
    /// `Err` says why, for the client; nothing was sent then.
    pub async fn connect(
        &self,
        target: Target,
        events: mpsc::Sender<LinkEvent>,
        tag: u64,
    ) -> Result<(), String> {
        let connecting = async {
            match self {
                Backend::Daemon { socket, start } => {
                    daemon::connect(socket, *start, target, events, tag).await
                }
                Backend::InProcess(local) => local.connect(target, events, tag).await,
            }
        };
        tokio::time::timeout(OPEN_TIMEOUT, connecting)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "the session did not start within {} s",
                    OPEN_TIMEOUT.as_secs()
                ))
            })
    }

    /// The sessions one could attach to: running ones first, then saved ones.
    pub async fn list(&self) -> Result<Vec<SessionInfo>, String> {
        match self {
            Backend::Daemon { socket, start } => daemon::list(socket, *start).await,
            Backend::InProcess(local) => local.list().await,
        }
    }
}

/// One line of a session as an [`Incoming`]; `None` for lines a translator has no use
/// for (daemon answers it did not ask for, events of a newer build it cannot read).
fn parse_line(line: &[u8]) -> Option<Incoming> {
    if let Ok(event) = serde_json::from_slice::<Event>(line) {
        return Some(Incoming::Event(Box::new(event)));
    }
    match serde_json::from_slice::<DaemonEvent>(line) {
        Ok(DaemonEvent::SessionClosed { reason, .. }) => {
            let why = serde_json::to_value(reason)
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default();
            Some(Incoming::Closed(format!("the session ended ({why})")))
        }
        Ok(DaemonEvent::Detached { .. }) => Some(Incoming::Closed("detached".into())),
        _ => {
            tracing::debug!(line = %String::from_utf8_lossy(line).trim_end(), "ignored a line");
            None
        }
    }
}
