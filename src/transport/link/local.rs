//! Links to sessions hosted in this process (`jucode acp --in-process`), built exactly
//! as `serve --in-process` and the daemon build theirs (`host::build_session`).
//!
//! Attaching loads the saved session and asks it for a snapshot, skipping what it
//! emits before the snapshot (its own startup batch), so a client sees what a daemon
//! client attaching sees. A session already running in this process is not attached a
//! second time (its one link owns it; [`super::Link::resync`] asks it for a fresh
//! snapshot instead).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::BytesMut;
use tokio::sync::mpsc;

use super::{Incoming, Link, LinkEvent, Sender, Target, parse_line};
use crate::config::Profile;
use crate::engine::{Input, Outbound};
use crate::host::SessionOptions;
use crate::protocol::SessionInfo;

/// The token of the one snapshot a loaded session is asked for.
pub(super) const SNAPSHOT: u64 = 1;

pub struct Local {
    profile: Profile,
    /// Sessions running in this process now.
    live: Arc<Mutex<HashSet<String>>>,
}

impl Local {
    pub fn new(profile: Profile) -> Self {
        Self {
            profile,
            live: Arc::default(),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) async fn connect(
        &self,
        target: Target,
        events: mpsc::Sender<LinkEvent>,
        tag: u64,
    ) -> Result<(), String> {
        let (options, attaching) = match target {
            Target::Open {
                engine: Some(engine),
                ..
            } => {
                return Err(format!(
                    "engine {engine} is hosted by the daemon only; this server runs sessions in its own process"
                ));
            }
            Target::Open {
                cwd,
                env,
                engine: None,
            } => (options(cwd, env, None), false),
            Target::Attach { id, env } => {
                if self.live().contains(&id) {
                    return Err(format!("session {id} is already open on this connection"));
                }
                (options(std::path::PathBuf::from("/"), env, Some(id)), true)
            }
        };
        let profile = self.profile.clone();
        let params =
            tokio::task::spawn_blocking(move || crate::host::build_session(&profile, options))
                .await
                .map_err(|err| format!("internal error while opening: {err}"))??;
        let session = params.session_id.clone();
        let (outbound, output) = mpsc::channel(crate::engine::EVENT_QUEUE);
        let handle = crate::engine::spawn(params, outbound);
        if attaching
            && handle
                .inputs
                .send(Input::Snapshot { token: SNAPSHOT })
                .await
                .is_err()
        {
            return Err(format!("session {session} ended while loading"));
        }
        self.live().insert(session.clone());
        let live = self.live.clone();
        let resyncing = Arc::new(std::sync::atomic::AtomicBool::new(attaching));
        let link = Link {
            session: session.clone(),
            sender: Sender::Local {
                inputs: handle.inputs,
                resyncing: resyncing.clone(),
            },
        };
        let opened = LinkEvent {
            session: session.clone(),
            incoming: Incoming::Opened { tag, link },
        };
        tokio::spawn(forward(opened, output, events, resyncing, move |id| {
            live.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(id);
        }));
        Ok(())
    }

    pub(super) async fn list(&self) -> Result<Vec<SessionInfo>, String> {
        let dir = self.profile.dir.clone();
        let saved = tokio::task::spawn_blocking(move || crate::sessions::list(&dir, None))
            .await
            .unwrap_or_else(|err| Err(format!("internal error while listing: {err}")))?;
        let live = self.live().clone();
        let mut rows: Vec<SessionInfo> = saved
            .into_iter()
            .map(|saved| {
                let live = live.contains(&saved.id);
                SessionInfo {
                    clients: usize::from(live),
                    state: if live { "live" } else { "saved" }.to_owned(),
                    live,
                    session: saved.id,
                    cwd: saved.cwd.map(|cwd| cwd.display().to_string()),
                    chat: saved.chat,
                    engine: saved.engine,
                    created_at: saved.created,
                    // As the daemon lists them: a broken file has no message to show.
                    label: saved.broken.is_none().then_some(saved.label),
                    updated: saved.updated,
                    broken: saved.broken,
                }
            })
            .collect();
        // Running sessions first, as the daemon lists them.
        rows.sort_by_key(|row| !row.live);
        Ok(rows)
    }
}

fn options(
    cwd: std::path::PathBuf,
    env: HashMap<String, String>,
    resume: Option<String>,
) -> SessionOptions {
    SessionOptions {
        cwd,
        chat: false,
        env,
        resume,
        by: crate::sessions::Runner::Acp,
        model: None,
        approval_mode: None,
    }
}

/// Moves a session's output to the link's events until the session ends.
async fn forward(
    opened: LinkEvent,
    mut output: mpsc::Receiver<Outbound>,
    events: mpsc::Sender<LinkEvent>,
    resyncing: Arc<std::sync::atomic::AtomicBool>,
    ended: impl FnOnce(&str),
) {
    use std::sync::atomic::Ordering;
    let session = opened.session.clone();
    if events.send(opened).await.is_err() {
        ended(&session);
        return;
    }
    let send = |incoming| LinkEvent {
        session: session.clone(),
        incoming,
    };
    'session: while let Some(item) = output.recv().await {
        let lines: Vec<bytes::Bytes> = match item {
            Outbound::Line(line) | Outbound::Status { line, .. } | Outbound::Reply { line, .. }
                if !resyncing.load(Ordering::SeqCst) =>
            {
                vec![line]
            }
            Outbound::Snapshot { lines, .. } => {
                resyncing.store(false, Ordering::SeqCst);
                // Segments whose concatenation is whole lines.
                let mut joined = BytesMut::new();
                for segment in lines {
                    joined.extend_from_slice(&segment);
                }
                joined
                    .as_ref()
                    .split(|byte| *byte == b'\n')
                    .filter(|line| !line.is_empty())
                    .map(bytes::Bytes::copy_from_slice)
                    .collect()
            }
            _ => continue,
        };
        for line in lines {
            if let Some(incoming) = parse_line(&line)
                && events.send(send(incoming)).await.is_err()
            {
                break 'session;
            }
        }
    }
    ended(&session);
    let _ = events
        .send(send(Incoming::Closed("the session ended".into())))
        .await;
}
