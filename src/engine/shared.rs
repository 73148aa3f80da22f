//! The part of a session's state that both the session task and its running turn touch.
//!
//! It sits behind one mutex, held only for short synchronous changes (never across an
//! await), and is changed together with the event that announces the change (see
//! [`super::emitter::Emitter::emit_with`]) so that a late-joining client's snapshot and
//! the live stream agree exactly.

use std::collections::BTreeSet;

use tokio::sync::oneshot;

use super::agents::record::Agents;
use super::builtin::goal::state::GoalState;
use super::conversation::store::Store;
use super::emitter;
use super::ports::tools::{Hunk, Sandbox};
use super::turn::deferred::DeferredActions;
use crate::protocol::{ApprovalMode, Event, SessionStatus};

/// The session's emitter: its output, and the lock of its [`Shared`] state.
pub type Emitter = emitter::Emitter<Shared>;

impl Emitter {
    /// Emits a `status` and remembers it as the session's current status.
    pub async fn status(&self, status: SessionStatus) {
        self.emit_with(|shared| {
            shared.status = status.clone();
            (Some(Event::status(status)), ())
        })
        .await;
    }
}

pub struct Shared {
    /// The conversation (the active branch is what the model reads next).
    pub store: Store,
    /// Text of the reply streaming right now, so a client attaching mid-reply sees it.
    pub streaming: Option<String>,
    /// Open approval requests, oldest first.
    pub approvals: Vec<PendingApproval>,
    /// The last `status` message; `streaming` while a turn runs.
    pub status: SessionStatus,
    /// The session's approval mode (a running turn may use a looser one; see
    /// `super::turn::approvals`).
    pub mode: ApprovalMode,
    /// Tools the user allowed for the rest of the session (`approve` with `always`).
    pub allowlist: BTreeSet<String>,
    /// Whether a client is watching; unattended sessions defer instead of asking.
    pub attended: bool,
    /// The session is unattended only because its last client left (not because a
    /// client said so): the next client to attach makes it attended again.
    pub unattended_by_leaving: bool,
    pub deferred: DeferredActions,
    /// The session's subagents: their rows, transcripts and running conversations.
    pub agents: Agents,
    pub goal: GoalState,
    /// The sandbox commands run in; a change applies to the next command.
    pub sandbox: Sandbox,
    /// The last request of the session's own turns whose prompt the provider counted.
    pub measured: Option<Measured>,
}

/// A prompt's real size: what `provider/model` counted for a request whose conversation
/// ended at entry `tail`.
#[derive(Debug, Clone)]
pub struct Measured {
    pub provider: String,
    pub model: String,
    pub tail: crate::engine::conversation::store::EntryId,
    pub tokens: u64,
}

impl Shared {
    pub fn new(mode: ApprovalMode, sandbox: Sandbox, store: Store) -> Self {
        Self {
            sandbox,
            agents: Agents::from_store(&store),
            goal: GoalState::from_store(&store),
            store,
            streaming: None,
            approvals: Vec::new(),
            status: SessionStatus::Ready,
            mode,
            allowlist: BTreeSet::new(),
            attended: true,
            unattended_by_leaving: false,
            deferred: DeferredActions::default(),
            measured: None,
        }
    }

    /// A turn of the session (or a compaction) starts.
    pub fn turn_starts(&mut self) {
        self.agents.new_turn();
        self.goal.turn_starts(std::time::Instant::now());
    }

    /// Removes and returns the open approval with this call id.
    pub fn take_approval(&mut self, call_id: &str) -> Option<PendingApproval> {
        let position = self
            .approvals
            .iter()
            .position(|pending| pending.call_id == call_id)?;
        Some(self.approvals.remove(position))
    }
}

/// An approval request waiting for an answer.
pub struct PendingApproval {
    pub call_id: String,
    pub name: String,
    pub summary: String,
    pub hunks: Option<Vec<Hunk>>,
    /// The subagent whose call it is; `None` for the session's own.
    pub subagent_id: Option<String>,
    /// Where the answer goes: the turn waiting on this call.
    pub answer: oneshot::Sender<Answer>,
}

/// What the turn waiting on an approval request is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Run the call; with `hunks`, apply only those.
    Allow {
        hunks: Option<Vec<String>>,
    },
    Deny,
    /// The session turned unattended: record the call as a deferred action.
    Defer,
}
