//! Going back: `/resume` (another saved conversation), `/tree` (an earlier point of
//! this one), `/checkout` (an earlier point, with the files as they were then).
//!
//! None of them rewrites anything: moving appends a branch entry after the point moved
//! to, so the session file records the move and the old path stays in `/tree`. They
//! wait for the running turn to end (an error says so) rather than race it.

use std::sync::{Arc, Mutex};

use super::Session;
use crate::engine::conversation::store::{EntryBody, FileBefore, Prepared, Store};
use crate::engine::emitter::Output;
use crate::engine::shared::Emitter;
use crate::engine::shared::Shared;
use crate::protocol::{Event, ResumeItem};

impl Session {
    /// The running turn, if any, refuses navigation: said to the asker.
    async fn idle_or_refuse(&self, what: &str) -> bool {
        if self.turn.is_none() {
            return true;
        }
        self.reply_error(format!(
            "{what} waits for the running turn: interrupt it, or try again when it ends"
        ))
        .await;
        false
    }

    pub(super) async fn resume_view(&mut self) {
        let library = self.params.library.clone();
        let cwd = self.params.cwd.clone();
        let listed = tokio::task::spawn_blocking(move || library.list(&cwd))
            .await
            .unwrap_or_else(|err| Err(format!("internal error while listing: {err}")));
        let mut saved = match listed {
            Ok(saved) => saved,
            Err(message) => return self.reply_error(message).await,
        };
        let current = self.params.session_id.clone();
        // This session's file may not be written yet (its writer works in the
        // background): it is listed anyway, as the newest, once it said something.
        let first = self
            .emitter
            .change(|shared| shared.store.first_user_message());
        if let Some(first) = first
            && !saved.iter().any(|saved| saved.id == current)
        {
            saved.insert(
                0,
                crate::engine::ports::library::Saved {
                    id: current.clone(),
                    label: crate::engine::conversation::store::first_line(&first, 80),
                    updated: crate::engine::conversation::store::now_ms(),
                    broken: None,
                    engine: None,
                },
            );
        }
        let items = resume_items(saved, &current);
        self.reply(Event::ResumeView { items }).await;
    }

    /// Continues saved session `id` in this session's place: a new startup batch for
    /// it, and its transcript. In the daemon the host moves the client instead (a
    /// session's id is its address there), so only its own id reaches the engine.
    pub(super) async fn resume(&mut self, id: &str) {
        if id == self.params.session_id {
            let message = format!("this is session {id} already");
            self.reply(Event::info(message)).await;
            return;
        }
        if self.in_daemon {
            self.reply_error("resume another session by attaching to it: {\"op\":\"attach\",\"session\":\"<id>\"}")
                .await;
            return;
        }
        if !self.idle_or_refuse("/resume").await {
            return;
        }
        let library = self.params.library.clone();
        let wanted = id.to_owned();
        let opened = tokio::task::spawn_blocking(move || library.open(&wanted))
            .await
            .unwrap_or_else(|err| Err(format!("internal error: {err}")));
        let mut params = match opened {
            Ok(params) => params,
            Err(message) => {
                self.reply_error(message).await;
                return;
            }
        };
        let (entries, mut warnings) = params.saved.take().unwrap_or_default();
        let store = match Store::load(entries, params.journal.clone()) {
            Ok((store, more)) => {
                warnings.extend(more);
                store
            }
            Err(err) => {
                self.reply_error(format!("cannot continue session {id}: {err}"))
                    .await;
                return;
            }
        };
        // Its subagents stop, recorded in its file; the file gets its last sync; then
        // everything that belonged to it (its queue, approvals, deferred actions) goes.
        self.agents.shutdown().await;
        let shown = self.trace();
        self.emitter.change(|shared| shared.store.journal().sync());
        let (mode, sandbox_mode) = self
            .emitter
            .change(|shared| (shared.mode, shared.sandbox.mode));
        // The session's sandbox mode goes on; the places it may write are the new cwd's.
        let mut sandbox = params.sandbox.clone();
        sandbox.mode = sandbox_mode;
        let shared = Arc::new(Mutex::new(Shared::new(mode, sandbox, store)));
        self.emitter = self.emitter.for_session(&params.session_id, shared);
        params.clients = None;
        // Its MCP servers are its own: the old ones stop, the new ones start.
        self.params.mcp.shutdown().await;
        self.params = params;
        self.system_prompt = Arc::from(self.params.project.system_prompt());
        self.agents = crate::engine::agents::Hub::new(
            self.params.catalog.clone(),
            self.params.agents_max_depth,
            self.system_prompt.clone(),
        );
        self.mcp = super::mcp::Announced::new(self.params.mcp.as_ref());
        self.resumed = true;
        self.base_tokens = None;
        self.queue.clear();
        let (recovered, again) = self.recover_calls();
        warnings.extend(recovered);
        self.keep_load_notices(&warnings);
        self.emit_startup().await;
        self.params.mcp.start();
        let problems = self.params.project.problems();
        self.emit_startup_notices(problems, warnings).await;
        let items = self.transcript_items();
        self.emitter.emit_transcript(&items).await;
        self.announce_trace(shown).await;
        self.resume_turn(again);
    }

    pub(super) async fn tree_view(&mut self) {
        let nodes = self.emitter.change(|shared| shared.store.tree_nodes());
        self.reply(Event::TreeView { nodes }).await;
    }

    /// `/tree <id>`: the conversation continues after node `id` (the end of that turn,
    /// or that point); what follows it stays on its own branch.
    pub(super) async fn move_to(&mut self, id: &str) {
        if !self.idle_or_refuse("/tree").await {
            return;
        }
        let shown = self.trace();
        let moved = self.emitter.change(|shared| {
            let store = &mut shared.store;
            let entry = store
                .get(id)
                .cloned()
                .ok_or_else(|| format!("unknown node: {id} (see /tree)"))?;
            let target = if entry.starts_turn() {
                store.turn_end(id).unwrap_or_else(|| entry.id.clone())
            } else if matches!(
                entry.body,
                EntryBody::Session(_) | EntryBody::Branch { .. } | EntryBody::Compaction { .. }
            ) {
                entry.id.clone()
            } else {
                return Err(format!(
                    "{id} is not a point to continue from: pick a node of /tree"
                ));
            };
            let label = format!(
                "Continued from: {}",
                entry.label().unwrap_or_else(|| id.to_owned())
            );
            store.move_to(&target)?;
            store.append(Prepared::counted(EntryBody::Branch { label }, 0));
            Ok(store.transcript_items())
        });
        match moved {
            Ok(items) => {
                self.base_tokens = None;
                self.saved_point().await;
                self.emitter.emit_transcript(&items).await;
                self.announce_trace(shown).await;
            }
            Err(message) => self.reply_error(message).await,
        }
    }

    pub(super) async fn checkpoint_view(&mut self) {
        let items = self
            .emitter
            .change(|shared| shared.store.checkpoint_items());
        self.reply(Event::CheckpointView { items }).await;
    }

    /// `/checkout <turn>`: puts back every file that turn and the later ones changed,
    /// as it was before that turn (removing files they created), and continues the
    /// conversation from before it; the turn's message comes back for editing.
    pub(super) async fn checkout(&mut self, turn: &str) {
        if !self.idle_or_refuse("/checkout").await {
            return;
        }
        let found = self.emitter.change(|shared| {
            let store = &shared.store;
            let entry = store.get(turn).filter(|entry| entry.starts_turn()).cloned();
            let entry = entry.ok_or_else(|| {
                format!("unknown turn: {turn} (see /checkout for the turns that changed files)")
            })?;
            let checkpoints = store
                .checkpoints_since(turn)
                .ok_or_else(|| format!("turn {turn} is not on the current branch"))?;
            Ok::<_, String>((entry, checkpoints))
        });
        let (entry, checkpoints) = match found {
            Ok(found) => found,
            Err(message) => return self.reply_error(message).await,
        };
        let files: Vec<FileBefore> = checkpoints
            .iter()
            .flat_map(|checkpoint| match &checkpoint.body {
                EntryBody::Checkpoint { files, .. } => files.iter().rev().cloned().collect(),
                _ => Vec::new(),
            })
            .collect();
        let restored = tokio::task::spawn_blocking(move || restore(&files))
            .await
            .unwrap_or_else(|err| (0, vec![format!("internal error: {err}")]));
        let (count, failures) = restored;
        for failure in failures {
            self.emitter.error(failure).await;
        }
        let (content, label) = match &entry.body {
            EntryBody::User { shown, .. } => (shown.content.clone(), entry.label()),
            _ => (String::new(), None),
        };
        let parent = entry.parent.clone();
        let shown = self.trace();
        let items = self.emitter.change(|shared| {
            let store = &mut shared.store;
            if let Some(parent) = parent {
                let _ = store.move_to(&parent);
            }
            let label = format!(
                "Checked out: the files as before \"{}\"",
                label.unwrap_or_default()
            );
            store.append(Prepared::counted(EntryBody::Branch { label }, 0));
            store.transcript_items()
        });
        self.base_tokens = None;
        self.saved_point().await;
        self.emitter
            .info(format!(
                "restored {count} file{} as they were before that turn",
                if count == 1 { "" } else { "s" }
            ))
            .await;
        self.emitter.emit_transcript(&items).await;
        self.announce_trace(shown).await;
        self.reply(Event::FillInput { content }).await;
    }
}

/// Writes each file back (or removes it), in order; the last state written for a path
/// wins. Returns how many paths were restored and what failed.
fn restore(files: &[FileBefore]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut paths = std::collections::HashSet::new();
    for file in files {
        let result = match &file.content {
            Some(bytes) => file
                .path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::write(&file.path, bytes)),
            None => match std::fs::remove_file(&file.path) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
        };
        match result {
            Ok(()) => {
                paths.insert(file.path.clone());
            }
            Err(err) => failures.push(format!("could not restore {}: {err}", file.path.display())),
        }
    }
    (paths.len(), failures)
}

impl Emitter {
    /// An emitter for another session on the same output (after `/resume`).
    pub fn for_session(&self, id: &str, shared: Arc<Mutex<Shared>>) -> Emitter {
        Emitter::new(Output::new(id, self.sender()), shared)
    }
}

/// The `/resume` picker's rows: each saved session with its date, `current` marked.
pub fn resume_items(
    saved: Vec<crate::engine::ports::library::Saved>,
    current: &str,
) -> Vec<ResumeItem> {
    saved
        .into_iter()
        .map(|saved| {
            let date = chrono::DateTime::from_timestamp_millis(saved.updated as i64)
                .map(|at| at.format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_default();
            ResumeItem {
                active: saved.id == current,
                label: format!("{} ({date})", saved.label),
                id: saved.id,
                broken: saved.broken,
                engine: saved.engine,
            }
        })
        .collect()
}
