//! The session's subagents as clients see them: each one's row of `agent_runs`, its
//! transcript, and (while it runs) its conversation; and when `agent_runs` is pushed.
//!
//! [`Agents`] lives in the session's `Shared` state, so a change to an agent and the
//! event announcing it are one step under the session's lock, and a late joiner's
//! snapshot shows every agent exactly as the live events continue from.
//!
//! A subagent's turn emits the same events as the session's own turns; they are
//! diverted here ([`Agents::observe`]) instead of reaching clients: they become its
//! transcript items and its activity. Only what concerns the user directly (approval
//! requests and their resolution, deferred actions) goes on to clients, with
//! `subagent_id` set.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::activity;
use super::items::Items;
use crate::engine::conversation::store::{EntryBody, SavedAgent, Store, first_line};
use crate::engine::ports::model::Message;
use crate::protocol::{AgentRun, AgentState, Event, LifecycleStatus, SubagentItem, TurnUsage};

/// `agent_runs` is pushed at most this often while agents work (lifecycle changes are
/// pushed at once, whenever they happen).
pub const PUSH_INTERVAL: Duration = Duration::from_millis(500);

/// Agents of earlier turns that stay listed and readable.
pub const KEPT_EARLIER: usize = 24;

/// Agents running at once in a session; a spawn beyond it is refused (the model is
/// told to wait for some first).
pub const MAX_RUNNING: usize = 16;

/// Agents one turn may spawn: together with [`KEPT_EARLIER`], this bounds the records.
pub const MAX_PER_TURN: usize = 64;

/// Longest `prompt`, `result` and `error` in `agent_runs` (the whole text is in the
/// agent's transcript, and the parent's tool result); rows are pushed often.
const MAX_VIEW_TEXT: usize = 4 * 1024;

/// A running agent's conversation: what its model reads next.
pub struct Conversation {
    pub store: Store,
    /// The reply streaming right now (see `Shared::streaming`).
    pub streaming: Option<String>,
}

struct Record {
    run: AgentRun,
    items: Items,
    /// While it runs: since when, for `duration_ms`.
    started: Option<Instant>,
    /// Spawned before the running turn (such records are pruned beyond
    /// [`KEPT_EARLIER`]).
    earlier: bool,
    /// The last `error` its turn reported.
    error: Option<String>,
    /// Its whole final answer (`run.result` is cut for the view).
    answer: Option<String>,
}

#[derive(Default)]
pub struct Agents {
    /// Oldest first.
    records: Vec<Record>,
    conversations: HashMap<String, Conversation>,
    /// When `agent_runs` was last pushed.
    pushed: Option<Instant>,
    /// A change since then waits to be pushed.
    dirty: bool,
    /// Wakes the task that pushes `agent_runs` when a change has to wait.
    wake: Arc<Notify>,
    /// Subagents' token usage not reported in a `usage` event yet, and its cost.
    unreported: TurnUsage,
    unreported_cost: f64,
}

/// What a spawn creates: the agent's row as it starts, and its conversation.
pub struct NewAgent {
    pub run: AgentRun,
    pub store: Store,
}

impl Agents {
    /// The agents a saved session recorded (the latest record of each, the
    /// [`KEPT_EARLIER`] most recent), all of earlier turns.
    pub fn from_store(store: &Store) -> Self {
        let mut agents = Self::default();
        for entry in store.entries() {
            let EntryBody::Agent(saved) = &entry.body else {
                continue;
            };
            agents
                .records
                .retain(|record| record.run.id != saved.run.id);
            agents.records.push(Record {
                run: saved.run.clone(),
                items: Items::from_saved(saved.items.clone()),
                started: None,
                earlier: true,
                error: saved.run.error.clone(),
                answer: saved.run.result.clone(),
            });
        }
        agents.prune();
        agents
    }

    /// What the task pushing `agent_runs` waits on.
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// A turn of the session starts: the agents so far belong to earlier turns, and
    /// only the most recent of those that finished stay.
    pub fn new_turn(&mut self) {
        for record in &mut self.records {
            record.earlier = true;
        }
        self.prune();
    }

    fn prune(&mut self) {
        let finished = |record: &Record| record.started.is_none();
        let mut earlier = self
            .records
            .iter()
            .filter(|record| record.earlier && finished(record))
            .count();
        self.records.retain(|record| {
            if earlier > KEPT_EARLIER && record.earlier && finished(record) {
                earlier -= 1;
                return false;
            }
            true
        });
    }

    /// `base` made unique among the agents listed (`/root/x`, `/root/x-2`, ...).
    pub fn unique_id(&self, base: &str) -> String {
        let taken = |id: &str| self.records.iter().any(|record| record.run.id == id);
        if !taken(base) {
            return base.to_owned();
        }
        (2..)
            .map(|n| format!("{base}-{n}"))
            .find(|id| !taken(id))
            .unwrap_or_else(|| base.to_owned())
    }

    /// Records a new running agent; the events announce it (`subagent_lifecycle`,
    /// then `agent_runs`). `Err`: a limit refuses it, said for the model.
    pub fn spawn(&mut self, new: NewAgent, now: Instant) -> Result<Vec<Event>, String> {
        let running = self.records.iter().filter(|r| r.started.is_some()).count();
        if running >= MAX_RUNNING {
            return Err(format!(
                "{MAX_RUNNING} subagents are running already: wait for some of them (wait_agents) or close them first"
            ));
        }
        if self.records.iter().filter(|r| !r.earlier).count() >= MAX_PER_TURN {
            return Err(format!(
                "this turn spawned {MAX_PER_TURN} subagents already: finish with the ones you have"
            ));
        }
        let NewAgent { mut run, store } = new;
        let id = run.id.clone();
        let task = run.prompt.clone();
        run.prompt = cap(&task);
        let started = lifecycle(&run, LifecycleStatus::Started, first_line(&task, 200));
        self.records.push(Record {
            run,
            items: Items::default(),
            started: Some(now),
            earlier: false,
            error: None,
            answer: None,
        });
        self.conversations.insert(
            id,
            Conversation {
                store,
                streaming: None,
            },
        );
        Ok(vec![started, self.push(now)])
    }

    /// A running agent's conversation. Never missing while its turn runs; should a
    /// record be gone, a fresh one keeps the turn going harmlessly.
    pub fn conversation(&mut self, id: &str) -> &mut Conversation {
        // Looked up by `&str` first: this runs for every delta an agent streams.
        if !self.conversations.contains_key(id) {
            let store = Store::new(
                crate::engine::conversation::store::SessionMeta {
                    id: id.to_owned(),
                    cwd: Default::default(),
                    model: String::new(),
                    created: 0,
                    chat: false,
                    engine: None,
                },
                Arc::new(crate::engine::conversation::store::NoJournal),
            );
            let fresh = Conversation {
                store,
                streaming: None,
            };
            self.conversations.insert(id.to_owned(), fresh);
        }
        self.conversations
            .get_mut(id)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }

    /// One event of agent `id`'s turn: recorded in its transcript and activity. Returns
    /// what clients get: the event itself when it concerns them (approvals, deferred
    /// actions), a lifecycle notice at a milestone, and `agent_runs` when its row
    /// changed and may be pushed now.
    pub fn observe(&mut self, id: &str, event: Event, now: Instant) -> Vec<Event> {
        let mut out = Vec::new();
        let Some(record) = self.records.iter_mut().find(|r| r.run.id == id) else {
            if matches!(
                event,
                Event::ApprovalRequest { .. }
                    | Event::ApprovalResolved { .. }
                    | Event::ActionDeferred { .. }
            ) {
                out.push(event);
            }
            return out;
        };
        let mut changed = false;
        let mut milestone = None;
        let mut set = |record: &mut Record, activity: &str| {
            if record.run.activity.as_deref() != Some(activity) {
                record.run.activity = Some(activity.to_owned());
                changed = true;
            }
        };
        match event {
            Event::UserMessage(shown) => {
                // The first is its task; later ones come from its parent.
                if !record.items.is_empty() {
                    milestone = Some(format!(
                        "read a message from its parent: {}",
                        first_line(&shown.content, 120)
                    ));
                }
                record.items.user(shown.content);
            }
            Event::Connecting => set(record, activity::WAITING_FOR_MODEL),
            Event::ReasoningDelta { delta } => {
                set(record, activity::THINKING);
                record.items.reasoning_delta(&delta);
            }
            Event::AssistantStart => {
                set(record, activity::WRITING);
                record.items.assistant_start();
            }
            Event::AssistantDelta { delta } => record.items.assistant_delta(&delta),
            Event::Retrying { .. } => set(record, activity::RETRYING),
            Event::ToolStart {
                call_id,
                name,
                card,
                ..
            } => {
                let input = self
                    .conversations
                    .get(id)
                    .and_then(|conversation| call_arguments(&conversation.store, &call_id))
                    .unwrap_or_default();
                record.run.tool_calls += 1;
                set(record, &activity::of_card(&name, &card));
                record.items.tool_start(call_id, name, &input);
                changed = true;
            }
            Event::ToolUpdate {
                call_id, output, ..
            } => record.items.tool_update(&call_id, &output),
            Event::ToolOutput {
                call_id,
                output,
                is_error,
                ..
            } => record.items.tool_end(&call_id, &output, is_error),
            Event::ApprovalRequest { ref summary, .. } => {
                let waiting = activity::waiting_for_approval(summary);
                milestone = Some(format!(
                    "waiting for approval: {}",
                    first_line(summary, 120)
                ));
                set(record, &waiting);
                out.push(event);
            }
            Event::ApprovalResolved { .. } | Event::ActionDeferred { .. } => out.push(event),
            Event::Error { message } => record.error = Some(message),
            _ => {}
        }
        if let Some(message) = milestone {
            out.push(lifecycle(&record.run, LifecycleStatus::Progress, message));
            out.push(self.push(now));
        } else if changed {
            out.extend(self.changed(now));
        }
        out
    }

    /// Usage of one of agent `id`'s model requests (and its cost at its model's
    /// prices): counted in its `tokens` and kept for the session's next `usage`.
    pub fn add_usage(
        &mut self,
        id: &str,
        usage: &TurnUsage,
        cost: f64,
        now: Instant,
    ) -> Vec<Event> {
        self.unreported.add(usage);
        self.unreported_cost += cost;
        let Some(record) = self.records.iter_mut().find(|r| r.run.id == id) else {
            return Vec::new();
        };
        record.run.tokens += usage.input_tokens + usage.output_tokens;
        self.changed(now).into_iter().collect()
    }

    /// The subagents' usage since the last call, and its cost.
    pub fn take_usage(&mut self) -> (TurnUsage, f64) {
        let usage = std::mem::take(&mut self.unreported);
        (usage, std::mem::take(&mut self.unreported_cost))
    }

    /// Agent `id` stopped: its final state, answer or error. Returns the events that
    /// say so and what to persist. Its conversation is dropped; its transcript stays.
    pub fn finish(
        &mut self,
        id: &str,
        state: AgentState,
        result: Option<String>,
        now: Instant,
    ) -> Option<(Vec<Event>, SavedAgent)> {
        self.conversations.remove(id);
        let record = self.records.iter_mut().find(|r| r.run.id == id)?;
        let elapsed = record.started.take().map(|since| now.duration_since(since));
        record.run.duration_ms = elapsed.map_or(record.run.duration_ms, |d| d.as_millis() as u64);
        record.run.state = state;
        record.run.activity = None;
        let (status, message) = match state {
            AgentState::Completed => {
                let answer = result.unwrap_or_default();
                record.run.result = Some(cap(&answer));
                let message = first_line(&answer, 200);
                record.answer = Some(answer);
                (LifecycleStatus::Completed, message)
            }
            AgentState::Errored => {
                let error = record
                    .error
                    .clone()
                    .unwrap_or_else(|| "the subagent stopped without an answer".to_owned());
                record.run.error = Some(cap(&error));
                (LifecycleStatus::Errored, first_line(&error, 200))
            }
            AgentState::Closed => (LifecycleStatus::Closed, "closed by its parent".to_owned()),
            _ => (LifecycleStatus::Interrupted, "interrupted".to_owned()),
        };
        let saved = SavedAgent {
            run: record.run.clone(),
            items: record.items.to_vec(),
        };
        let notice = lifecycle(&record.run, status, message);
        Some((vec![notice, self.push(now)], saved))
    }

    /// `agent_runs` now, and it was pushed now.
    fn push(&mut self, now: Instant) -> Event {
        self.pushed = Some(now);
        self.dirty = false;
        self.runs_event(now)
    }

    /// A row changed: pushed now if the last push is old enough, else later.
    fn changed(&mut self, now: Instant) -> Option<Event> {
        if self
            .pushed
            .is_none_or(|at| now.duration_since(at) >= PUSH_INTERVAL)
        {
            return Some(self.push(now));
        }
        if !self.dirty {
            self.dirty = true;
            self.wake.notify_one();
        }
        None
    }

    /// When the change waiting to be pushed may go; `None` when nothing waits.
    pub fn due(&self) -> Option<Instant> {
        self.dirty.then(|| {
            self.pushed
                .map_or_else(Instant::now, |at| at + PUSH_INTERVAL)
        })
    }

    /// The waiting change's `agent_runs`, if one still waits and its time has come.
    pub fn flush(&mut self, now: Instant) -> Option<Event> {
        let due = self.due()?;
        (now >= due).then(|| self.push(now))
    }

    /// The `agent_runs` event of every agent listed, oldest first.
    pub fn runs_event(&self, now: Instant) -> Event {
        let agents = self
            .records
            .iter()
            .map(|record| {
                let mut run = record.run.clone();
                if let Some(since) = record.started {
                    run.duration_ms = now.duration_since(since).as_millis() as u64;
                }
                run
            })
            .collect();
        Event::AgentRuns {
            workflows: Vec::new(),
            agents,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn transcript(&self, id: &str) -> Option<Vec<SubagentItem>> {
        self.find(id).map(|record| record.items.to_vec())
    }

    pub fn state(&self, id: &str) -> Option<AgentState> {
        self.find(id).map(|record| record.run.state)
    }

    /// The ids of the agents listed under `path` (its descendants), oldest first, with
    /// their states.
    pub fn under(&self, path: &str) -> Vec<(String, AgentState)> {
        self.records
            .iter()
            .filter(|record| is_under(&record.run.id, path))
            .map(|record| (record.run.id.clone(), record.run.state))
            .collect()
    }

    /// What the model is told of agent `id`: its state and, unless `brief`, its whole
    /// answer or error.
    pub fn report(&self, id: &str, brief: bool) -> String {
        let Some(record) = self.find(id) else {
            return format!("{id}: unknown agent");
        };
        let run = &record.run;
        let state = match run.state {
            AgentState::Pending | AgentState::Running => "running",
            AgentState::Completed => "completed",
            AgentState::Errored => "errored",
            AgentState::Interrupted => "interrupted",
            AgentState::Closed => "closed",
        };
        if brief {
            return format!("{id} is {state}");
        }
        match run.state {
            AgentState::Completed => record.answer.clone().unwrap_or_default(),
            AgentState::Errored => format!(
                "{id} errored: {}",
                record
                    .error
                    .as_deref()
                    .unwrap_or("it stopped without an answer")
            ),
            AgentState::Pending | AgentState::Running => format!(
                "{id} is still running ({})",
                run.activity.as_deref().unwrap_or("working")
            ),
            _ => format!("{id} is {state}"),
        }
    }

    fn find(&self, id: &str) -> Option<&Record> {
        self.records.iter().find(|record| record.run.id == id)
    }
}

/// `id` is a descendant of `path` (`/root/a/b` of `/root/a`, every agent of `/root`).
pub fn is_under(id: &str, path: &str) -> bool {
    id.strip_prefix(path)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The arguments of call `call_id` in the latest replies of a conversation.
fn call_arguments(store: &Store, call_id: &str) -> Option<String> {
    store
        .branch()
        .iter()
        .rev()
        .take(8)
        .find_map(|entry| match &entry.body {
            EntryBody::Assistant(Message::Assistant { tool_calls, .. }) => tool_calls
                .iter()
                .find(|call| call.id == call_id)
                .map(|call| call.arguments.clone()),
            _ => None,
        })
}

fn lifecycle(run: &AgentRun, status: LifecycleStatus, message: String) -> Event {
    Event::SubagentLifecycle {
        path: run.id.clone(),
        status,
        message,
        label: run.label.clone(),
        model: run.model.clone(),
        tool_use_id: run.tool_use_id.clone(),
    }
}

/// `text` within [`MAX_VIEW_TEXT`] bytes, keeping its start.
fn cap(text: &str) -> String {
    if text.len() <= MAX_VIEW_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_VIEW_TEXT - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
