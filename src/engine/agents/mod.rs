//! Subagents: agents the model starts (`spawn_agent`) to work on part of a task with a
//! conversation of their own, the session's tools and its approval mode.
//!
//! A subagent's work is a turn like the session's own ([`super::turn`], with
//! [`super::turn::calls`] for its tool calls), run on its own *track* ([`Track::Agent`]): its
//! conversation is its own, and its events are diverted into its record (transcript,
//! activity; see [`record`]) instead of reaching clients. Its gated calls take exactly
//! the parent's path (the same approvals, allowlist, attended flag and deferred actions,
//! in the session's `Shared` state), so the user answers them like any other, told by
//! `subagent_id` whose call it is.
//!
//! Layout: `track.rs` (how a turn's output is routed by track), `run.rs` (an agent's
//! task, from spawn to its final state), `tools.rs` (`spawn_agent`, `message_agent`,
//! `wait_agents`, `close_agent`), `record.rs` (what clients are shown, and when
//! `agent_runs` is pushed), `items.rs` (a transcript within its limits), `activity.rs`.
//!
//! Each agent's id is its path: `/root/<task_name>` for the session's own, and under
//! its spawner's path for nested ones (`[agents] max_depth`, default 1, bounds the
//! nesting). An agent addresses only its own descendants (`/root` addresses all).

mod activity;
mod items;
pub(super) mod record;
mod run;
#[cfg(test)]
mod tests;
mod tools;
mod track;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::ports::model::ModelCatalog;
use super::shared::Emitter;
use super::turn::SteerInbox;
use crate::protocol::AgentState;

pub use record::is_under;
pub use tools::{CLOSE_AGENT, MESSAGE_AGENT, SPAWN_AGENT, WAIT_AGENTS, specs};
pub use track::{AgentLink, ROOT, Track};

/// Messages waiting for a subagent to read them; one more is refused.
const MAX_INBOX: usize = 16;

/// The session's subagent machinery outside the shared state: what spawning needs, the
/// agents' tasks, and the task pushing `agent_runs`.
pub struct Hub {
    catalog: Arc<dyn ModelCatalog>,
    max_depth: u32,
    /// The session's system prompt, which a subagent's starts from (it changes when the
    /// user trusts the project).
    system: Mutex<Arc<str>>,
    tasks: Mutex<HashMap<String, Task>>,
    /// Bumped whenever an agent reaches its final state (what waiting waits on).
    finished: watch::Sender<u64>,
    pusher: Mutex<Option<JoinHandle<()>>>,
    /// Stops the pusher (when the session ends, or the hub is dropped).
    stop: CancellationToken,
}

/// A running agent's task.
struct Task {
    cancel: CancellationToken,
    handle: Option<JoinHandle<()>>,
    /// Messages from its parent (`message_agent`), read before its next request.
    inbox: SteerInbox,
    /// The state it ends in if it is stopped: `interrupted`, or `closed` when its
    /// parent closed it.
    stop_as: AgentState,
}

/// How waiting for agents ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    /// None of them runs any more.
    Done,
    TimedOut,
    /// The waiting turn was interrupted.
    Cancelled,
}

impl Hub {
    pub fn new(catalog: Arc<dyn ModelCatalog>, max_depth: u32, system: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            catalog,
            max_depth,
            system: Mutex::new(system),
            tasks: Mutex::new(HashMap::new()),
            finished: watch::Sender::new(0),
            pusher: Mutex::new(None),
            stop: CancellationToken::new(),
        })
    }

    /// The system prompt agents spawned from now on start from.
    pub fn set_system(&self, system: Arc<str>) {
        *self.system.lock().unwrap_or_else(PoisonError::into_inner) = system;
    }

    fn system(&self) -> Arc<str> {
        self.system
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How deep agents may nest: the session's own turns are depth 0, and an agent at
    /// this depth cannot spawn.
    pub fn max_depth(&self) -> u32 {
        self.max_depth
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, Task>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether any agent runs.
    pub fn any_running(&self) -> bool {
        !self.tasks().is_empty()
    }

    /// Hands a message to running agent `id`: `Ok(false)` when it does not run, `Err`
    /// when its inbox is full (it has not read the earlier ones yet).
    fn message(&self, id: &str, input: crate::protocol::UserInput) -> Result<bool, String> {
        let tasks = self.tasks();
        let Some(task) = tasks.get(id) else {
            return Ok(false);
        };
        let mut inbox = task.inbox.lock().unwrap_or_else(PoisonError::into_inner);
        if inbox.len() >= MAX_INBOX {
            return Err(format!(
                "{id} has not read its last {MAX_INBOX} messages yet: wait for it before sending more"
            ));
        }
        inbox.push_back(input);
        Ok(true)
    }

    /// Stops agent `id` and its descendants, as `state`, and waits until they have
    /// recorded it.
    pub async fn close(&self, id: &str, state: AgentState) {
        self.stop_where(|agent| agent == id || is_under(agent, id), state)
            .await;
    }

    /// Stops every running agent as `state` and waits until they have recorded it.
    pub async fn close_all(&self, state: AgentState) {
        self.stop_where(|_| true, state).await;
    }

    async fn stop_where(&self, pick: impl Fn(&str) -> bool, state: AgentState) {
        let handles: Vec<JoinHandle<()>> = {
            let mut tasks = self.tasks();
            tasks
                .iter_mut()
                .filter(|(id, _)| pick(id))
                .filter_map(|(_, task)| {
                    task.stop_as = state;
                    task.cancel.cancel();
                    task.handle.take()
                })
                .collect()
        };
        for handle in handles {
            if let Err(err) = handle.await {
                tracing::error!(%err, "a subagent's task failed");
            }
        }
    }

    /// Waits until none of `ids` runs (as the session's state says), `timeout` passes,
    /// or `cancel` fires.
    pub async fn wait(
        &self,
        emitter: &Emitter,
        ids: &[String],
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Waited {
        let deadline = timeout.map(|timeout| tokio::time::Instant::now() + timeout);
        loop {
            // Subscribed before looking, so a finish in between is not missed.
            let mut finished = self.finished.subscribe();
            let running = emitter.change(|shared| {
                ids.iter().any(|id| {
                    matches!(
                        shared.agents.state(id),
                        Some(AgentState::Running | AgentState::Pending)
                    )
                })
            });
            if !running {
                return Waited::Done;
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Waited::Cancelled,
                () = sleep_until(deadline) => return Waited::TimedOut,
                _ = finished.changed() => {}
            }
        }
    }

    /// Starts the task that pushes `agent_runs` changes that had to wait, unless it
    /// runs already.
    fn ensure_pusher(&self, emitter: &Emitter) {
        let mut pusher = self.pusher.lock().unwrap_or_else(PoisonError::into_inner);
        if pusher.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let wake = emitter.change(|shared| shared.agents.wake());
        *pusher = Some(tokio::spawn(push_loop(
            emitter.clone(),
            wake,
            self.stop.clone(),
        )));
    }

    /// The session ends (or moves to another conversation): every agent stops, as
    /// interrupted, and the pusher with them.
    pub async fn shutdown(&self) {
        self.close_all(AgentState::Interrupted).await;
        self.stop.cancel();
        let pusher = self
            .pusher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(pusher) = pusher {
            let _ = pusher.await;
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // The pusher holds the session's output channel open; it must not outlive us.
        self.stop.cancel();
    }
}

/// Sleeps until `deadline`; never, without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Pushes `agent_runs` when a change had to wait for [`record::PUSH_INTERVAL`] since the
/// last push, so clients see the latest state within half a second.
async fn push_loop(emitter: Emitter, wake: Arc<Notify>, stop: CancellationToken) {
    loop {
        match emitter.change(|shared| shared.agents.due()) {
            None => tokio::select! {
                _ = stop.cancelled() => return,
                // A permit is stored if the change came before this wait: none is lost.
                _ = wake.notified() => {}
            },
            Some(due) => {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(due)) => {}
                }
                emitter
                    .emit_many_with(1, |shared| {
                        let now = std::time::Instant::now();
                        (shared.agents.flush(now).into_iter().collect(), ())
                    })
                    .await;
            }
        }
    }
}
