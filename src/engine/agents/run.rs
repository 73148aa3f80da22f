//! One subagent's task: its turns, from its task to its final state.
//!
//! It runs its task as a turn; when messages from its parent arrived too late for that
//! turn to read them, another turn reads them, and so on. Its final state (completed,
//! errored, or how it was stopped) and answer are recorded, announced and persisted in
//! one step; only then do waiters learn it finished.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::{AgentLink, Hub, Task, Track};
use crate::engine::conversation::store::{EntryBody, Prepared, Store};
use crate::engine::ports::model::{Message, ResolvedModel};
use crate::engine::ports::tools::ToolRegistry;
use crate::engine::shared::Emitter;
use crate::engine::turn::{self, SteerInbox, TurnContext, TurnEnd};
use crate::protocol::{AgentState, ApprovalMode, UserInput};

/// Everything a new subagent starts with.
pub struct Spawn {
    pub link: AgentLink,
    pub task: String,
    pub model: ResolvedModel,
    pub effort: Option<String>,
    /// Its parent's mode when it was spawned (it can only loosen, as a turn's).
    pub mode: ApprovalMode,
    pub emitter: Emitter,
    pub tools: ToolRegistry,
    pub cwd: PathBuf,
    pub env: Arc<HashMap<String, String>>,
    pub session_id: String,
    /// Its parent's client delegation: an editor serves a subagent's files and commands
    /// as it does the session's.
    pub delegation: crate::engine::delegate::Delegation,
}

/// Starts agent `spawn.link.id`, recorded already (see `Agents::spawn`).
pub fn start(hub: &Arc<Hub>, spawn: Spawn) {
    hub.ensure_pusher(&spawn.emitter);
    let id = spawn.link.id.clone();
    let cancel = CancellationToken::new();
    let inbox = SteerInbox::default();
    // Spawned under the lock, so that stopping agents always finds this one's handle;
    // the task itself takes the lock only as it ends.
    let mut tasks = hub.tasks();
    let handle = tokio::spawn(run(hub.clone(), spawn, cancel.clone(), inbox.clone()));
    tasks.insert(
        id,
        Task {
            cancel,
            handle: Some(handle),
            inbox,
            stop_as: AgentState::Interrupted,
        },
    );
}

/// A new agent's conversation: empty, kept in memory only (the session file keeps its
/// transcript when it finishes).
pub fn new_store(id: &str, cwd: PathBuf, model: &ResolvedModel) -> Store {
    Store::new(
        crate::engine::conversation::store::SessionMeta {
            id: id.to_owned(),
            cwd,
            model: model.full_name(),
            created: crate::engine::conversation::store::now_ms(),
            chat: false,
            engine: None,
        },
        Arc::new(crate::engine::conversation::store::NoJournal),
    )
}

async fn run(hub: Arc<Hub>, spawn: Spawn, cancel: CancellationToken, inbox: SteerInbox) {
    let link = Arc::new(spawn.link);
    let id = link.id.clone();
    let system: Arc<str> = Arc::from(system_prompt(&hub.system(), &id));
    let plan_system: Arc<str> = Arc::from(format!(
        "{system}\n\n{}",
        crate::engine::conversation::prompt::PLAN_MODE.trim_end()
    ));
    // A subagent's messages are its parent's, not the user's: no prompt hooks.
    let project: Arc<dyn crate::engine::ports::project::Project> =
        Arc::new(crate::engine::ports::project::NoProject {
            prompt: String::new(),
        });
    let mut input = UserInput::text(spawn.task);
    let end = loop {
        let ctx = TurnContext {
            emitter: spawn.emitter.clone(),
            model: spawn.model.clone(),
            reasoning_effort: spawn.effort.clone(),
            system: system.clone(),
            plan_system: plan_system.clone(),
            project: project.clone(),
            tools: spawn.tools.clone(),
            cwd: spawn.cwd.clone(),
            env: spawn.env.clone(),
            session_id: spawn.session_id.clone(),
            mode: spawn.mode,
            steer: inbox.clone(),
            cancel: cancel.clone(),
            turn: OnceLock::new(),
            checkpointed: Mutex::new(HashSet::new()),
            base: OnceLock::new(),
            pending_write: Mutex::new(None),
            track: Track::Agent(link.clone()),
            agents: hub.clone(),
            delegation: spawn.delegation.clone(),
        };
        let outcome = turn::run(ctx, input).await;
        // A message that came as the turn ended starts another one.
        let next = inbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        match (outcome.end, next) {
            (TurnEnd::Completed, Some(next)) => input = next,
            (end, _) => break end,
        }
    };
    let state = match end {
        TurnEnd::Completed => AgentState::Completed,
        TurnEnd::Failed => AgentState::Errored,
        TurnEnd::Interrupted => hub
            .tasks()
            .get(&id)
            .map_or(AgentState::Interrupted, |task| task.stop_as),
    };
    spawn
        .emitter
        .emit_many_with(2, |shared| {
            let answer = (state == AgentState::Completed)
                .then(|| final_answer(&shared.agents.conversation(&id).store));
            let Some((events, saved)) = shared.agents.finish(&id, state, answer, Instant::now())
            else {
                return (Vec::new(), ());
            };
            shared
                .store
                .append(Prepared::counted(EntryBody::Agent(Box::new(saved)), 0));
            (events, ())
        })
        .await;
    hub.tasks().remove(&id);
    hub.finished.send_modify(|count| *count += 1);
}

/// The agent's last reply with text: what its parent gets.
fn final_answer(store: &Store) -> String {
    store
        .branch()
        .iter()
        .rev()
        .find_map(|entry| match &entry.body {
            EntryBody::Assistant(Message::Assistant { text, .. }) if !text.trim().is_empty() => {
                Some(text.trim().to_owned())
            }
            _ => None,
        })
        .unwrap_or_else(|| "(the subagent finished without a final answer)".to_owned())
}

/// The session's prompt, and what a subagent must know of its role. The id line also
/// lets a test's mock model tell agents' requests apart.
fn system_prompt(session: &str, id: &str) -> String {
    format!(
        "{session}\n\n# You are a subagent\n\n\
         Your agent id is {id}.\n\
         Another agent (your parent) gave you a task: the first user message. Work on it \
         with your tools, then end with a final answer. Your final answer is returned to \
         your parent as the result of your task, so make it complete and self-contained; \
         the user does not see it directly. Your parent may send you more messages while \
         you work. In plan mode you may only read: report what you found, and what you \
         would change, in your final answer."
    )
}
