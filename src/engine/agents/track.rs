//! Whose turn a [`TurnContext`] runs, and where that turn's output goes.
//!
//! The turn loop and the tool calls are written once, for both tracks: they reach
//! their conversation through [`Track::store`] and emit through the methods here. On
//! the session's own track everything is as it always was (events go to clients, the
//! conversation is the session's). On an agent's, the conversation is the agent's own
//! and events go through [`super::Agents::observe`], under the same lock as the change
//! they announce.

use std::sync::Arc;
use std::time::Instant;

use crate::engine::conversation::store::{EntryId, Store};
use crate::engine::conversation::tokens;
use crate::engine::shared::Shared;
use crate::engine::turn::{TurnContext, TurnEnd};
use crate::protocol::{Event, SessionStatus, TurnUsage};

/// The path of the session's own agent: every subagent's id starts with it.
pub const ROOT: &str = "/root";

/// Most events one change of an agent's turn turns into (the event itself when it
/// goes on to clients, a lifecycle notice, `agent_runs`).
const ROOM: usize = 3;

#[derive(Clone)]
pub enum Track {
    /// The session's own conversation.
    Main,
    Agent(Arc<AgentLink>),
}

/// What a subagent's turn needs to know about itself.
pub struct AgentLink {
    /// Its path, `/root/<task_name>`.
    pub id: String,
    /// 1 for the session's subagents, 2 for theirs, ...
    pub depth: u32,
    /// The session turn it works for: edits it makes are checkpointed there, so
    /// `/checkout` of that turn puts them back too.
    pub parent_turn: Option<EntryId>,
}

impl Track {
    /// The conversation this track reads and extends.
    pub fn store<'s>(&self, shared: &'s mut Shared) -> &'s mut Store {
        match self {
            Track::Main => &mut shared.store,
            Track::Agent(link) => &mut shared.agents.conversation(&link.id).store,
        }
    }

    /// The text of the reply this track streams right now.
    pub fn streaming<'s>(&self, shared: &'s mut Shared) -> &'s mut Option<String> {
        match self {
            Track::Main => &mut shared.streaming,
            Track::Agent(link) => &mut shared.agents.conversation(&link.id).streaming,
        }
    }

    pub fn is_main(&self) -> bool {
        matches!(self, Track::Main)
    }

    /// `subagent_id` of the approval requests and deferred actions of this track.
    pub fn subagent_id(&self) -> Option<String> {
        match self {
            Track::Main => None,
            Track::Agent(link) => Some(link.id.clone()),
        }
    }

    /// Its path: [`ROOT`] for the session's own turns.
    pub fn path(&self) -> &str {
        match self {
            Track::Main => ROOT,
            Track::Agent(link) => &link.id,
        }
    }

    pub fn depth(&self) -> u32 {
        match self {
            Track::Main => 0,
            Track::Agent(link) => link.depth,
        }
    }
}

impl TurnContext {
    /// Emits one event of this turn (an agent's is recorded instead, see the module).
    pub(in crate::engine) async fn emit(&self, event: Event) {
        match &self.track {
            Track::Main => self.emitter.emit(event).await,
            Track::Agent(_) => self.emit_with(|_| (Some(event), ())).await,
        }
    }

    /// [`crate::engine::emitter::Emitter::emit_with`] for this turn's track.
    pub(in crate::engine) async fn emit_with<R>(
        &self,
        change: impl FnOnce(&mut Shared) -> (Option<Event>, R),
    ) -> R {
        let Track::Agent(link) = &self.track else {
            return self.emitter.emit_with(change).await;
        };
        self.emitter
            .emit_many_with(ROOM, |shared| {
                let (event, result) = change(shared);
                let events = match event {
                    Some(event) => shared.agents.observe(&link.id, event, Instant::now()),
                    None => Vec::new(),
                };
                (events, result)
            })
            .await
    }

    /// The session's `status`: only its own turns say what it is doing.
    pub(in crate::engine) async fn status(&self, status: SessionStatus) {
        if self.track.is_main() {
            self.emitter.status(status).await;
        }
    }

    /// The usage of one model request: an agent's counts in its `tokens` (and in the
    /// session's next `usage`); the session's own is summed by the turn.
    pub(in crate::engine) async fn count_usage(&self, usage: &TurnUsage) {
        let Track::Agent(link) = &self.track else {
            return;
        };
        let cost = tokens::cost(usage, &self.model.info);
        self.emitter
            .emit_many_with(1, |shared| {
                let events = shared
                    .agents
                    .add_usage(&link.id, usage, cost, Instant::now());
                (events, ())
            })
            .await;
    }

    /// The turn whose checkpoints this turn's edits join.
    pub(in crate::engine) fn checkpoint_turn(&self) -> Option<EntryId> {
        match &self.track {
            Track::Main => self.turn.get().cloned(),
            Track::Agent(link) => link.parent_turn.clone(),
        }
    }

    /// A subagent's conversation past the context limit: it is short-lived, so it is
    /// not compacted; it fails once the next request does not fit the window.
    pub(in crate::engine) async fn agent_overflow(&self, tokens: u64) -> Option<TurnEnd> {
        let window = self.model.info.context_window;
        if tokens <= window {
            return None;
        }
        self.emit(Event::error(format!(
            "the subagent's conversation no longer fits in the model's context window ({tokens} tokens of {window})"
        )))
        .await;
        Some(TurnEnd::Failed)
    }
}
