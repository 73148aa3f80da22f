//! One turn: the user's message, then model requests and tool calls until the model
//! answers without calling a tool (or delivers a plan).
//!
//! A turn runs as its own task so the session keeps taking ops (queue, steer,
//! interrupt, approve) while it streams. It emits its events directly (no hop through
//! the session task on the delta path) and returns a [`TurnOutcome`]; the session task
//! emits the closing `usage` / `context_usage` / `status` lines, so "ready" always comes
//! from the one place that also decides what runs next.
//!
//! Interrupts arrive as a cancelled token. Every await that can take long selects on it,
//! and on cancellation the turn leaves the history consistent (each tool call answered,
//! partial text kept) before returning, so the next turn can continue the conversation.
//! Tool calls, with their approvals, are in [`calls`].

pub(super) mod approvals;
pub(crate) mod attach;
pub(super) mod calls;
pub(super) mod deferred;
mod plan;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::agents::{Hub, Track};
use super::conversation::compaction;
use super::conversation::store::{EntryBody, EntryId, Prepared};
use super::conversation::tokens::{self, context_limit};
use super::ports::model::{
    ChatRequest, FinishReason, Message, ModelError, ModelEvent, ProviderItem, ProviderItems,
    ResolvedModel, Retry, ToolCall,
};
use super::ports::project::{HookEvent, Project};
use super::ports::tools::ToolRegistry;
use super::shared::Emitter;
use crate::protocol::{ApprovalMode, Event, ReplyStop, SessionStatus, TurnUsage, UserInput};
use calls::CallsOutcome;
pub(in crate::engine) use calls::tool_result;
use plan::{PROPOSE_PLAN, PlanDraft, propose_plan_spec};

/// Retry delays never exceed this, whatever `retry-after` says: a front-end would show
/// a frozen turn otherwise.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// Messages steered into a running turn, waiting for its next model request.
pub type SteerInbox = Arc<Mutex<VecDeque<UserInput>>>;

pub struct TurnContext {
    pub emitter: Emitter,
    pub model: ResolvedModel,
    pub reasoning_effort: Option<String>,
    pub system: Arc<str>,
    /// `system` with plan mode's addendum, for requests made in plan mode.
    pub plan_system: Arc<str>,
    /// For the `user_prompt_submit` hooks.
    pub project: Arc<dyn Project>,
    pub tools: ToolRegistry,
    pub cwd: PathBuf,
    pub env: Arc<HashMap<String, String>>,
    pub session_id: String,
    /// The approval mode when the turn started; its gating can only loosen from here.
    pub mode: ApprovalMode,
    pub steer: SteerInbox,
    pub cancel: CancellationToken,
    /// The user message that started the turn (once it is recorded).
    pub turn: std::sync::OnceLock<EntryId>,
    /// Files whose state before the turn is already recorded (see `calls.rs`).
    pub checkpointed: Mutex<std::collections::HashSet<PathBuf>>,
    /// Tokens of the system prompt and tool schemas, counted once per turn.
    pub base: std::sync::OnceLock<u64>,
    /// The write of the turn's user message, awaited before the reply is shown.
    pub pending_write: Mutex<Option<futures_util::future::BoxFuture<'static, ()>>>,
    /// Whose turn it is: the session's, or a subagent's (see `agents`).
    pub track: Track,
    /// The session's subagents.
    pub agents: Arc<Hub>,
    /// The client serving file access and commands, if any.
    pub delegation: super::delegate::Delegation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// The model answered without tool calls, or delivered a plan.
    Completed,
    /// A non-retryable failure; the `error` line has been emitted.
    Failed,
    Interrupted,
}

#[derive(Debug)]
pub struct TurnOutcome {
    pub end: TurnEnd,
    pub usage: TurnUsage,
}

/// What one model reply amounted to, also when it was cut short. Its text lives in the
/// shared state while it streams (so late joiners see it) and is collected at the end.
#[derive(Default)]
struct Reply {
    reasoning: String,
    tool_calls: Vec<ToolCall>,
    /// Opaque provider items, each with the number of calls before it, and the API.
    items: Vec<ProviderItem>,
    items_api: Option<&'static str>,
    usage: TurnUsage,
    finish: Option<FinishReason>,
    /// The last entry of the request this reply answers.
    tail: Option<EntryId>,
    /// True once any delta reached the client: from then on a failure cannot be retried
    /// transparently.
    shown: bool,
    /// `assistant_start` was sent for this reply.
    text_started: bool,
    /// Plans being written, by tool-call index.
    drafts: HashMap<usize, PlanDraft>,
}

enum AttemptError {
    Interrupted,
    Model(ModelError),
}

pub async fn run(ctx: TurnContext, first: UserInput) -> TurnOutcome {
    let mut usage = TurnUsage::default();
    let end = ctx.run_loop(first, &mut usage).await;
    TurnOutcome { end, usage }
}

/// The turn a stopped process left halfway, continued: `calls` (the reply's calls from
/// the one that was waiting for approval on) go through assessment and approval again,
/// then the model reads their results as if the process had never stopped.
pub async fn resume(ctx: TurnContext, calls: Vec<ToolCall>) -> TurnOutcome {
    let mut usage = TurnUsage::default();
    let turn = ctx.emitter.change(|shared| {
        shared
            .store
            .branch()
            .iter()
            .rev()
            .find(|entry| entry.starts_turn())
            .map(|entry| entry.id.clone())
    });
    if let Some(turn) = turn {
        let _ = ctx.turn.set(turn);
    }
    ctx.status(SessionStatus::Streaming).await;
    let end = match ctx.run_calls(&calls, &HashMap::new()).await {
        CallsOutcome::Continue => ctx.follow_up(&mut usage).await,
        CallsOutcome::PlanProposed => TurnEnd::Completed,
        CallsOutcome::Interrupted => TurnEnd::Interrupted,
    };
    TurnOutcome { end, usage }
}

/// `/compact`: summarise what there is, keeping the latest turns that fit.
pub async fn compact(ctx: TurnContext) -> TurnOutcome {
    let mut usage = TurnUsage::default();
    let end = match ctx.compact_now(&mut usage, true).await {
        CompactEnd::Done => TurnEnd::Completed,
        CompactEnd::Failed => TurnEnd::Failed,
        CompactEnd::Interrupted => TurnEnd::Interrupted,
    };
    TurnOutcome { end, usage }
}

enum CompactEnd {
    Done,
    Failed,
    Interrupted,
}

impl TurnContext {
    async fn run_loop(&self, first: UserInput, usage: &mut TurnUsage) -> TurnEnd {
        let prompt = first.content.clone();
        if !self.accept(first, false).await || !self.prompt_submitted(prompt).await {
            return TurnEnd::Interrupted;
        }
        // The message is on disk before anything of the reply is shown (see `attempt`):
        // a turn that dies with the process is still one the user can continue.
        let written = self
            .emitter
            .change(|shared| shared.store.journal().written());
        if let Ok(mut pending) = self.pending_write.lock() {
            *pending = Some(written);
        }
        self.follow_up(usage).await
    }

    /// Model requests and their calls until the model answers without calling a tool.
    async fn follow_up(&self, usage: &mut TurnUsage) -> TurnEnd {
        loop {
            if !self.read_steered().await {
                return TurnEnd::Interrupted;
            }
            let (mut reply, end) = self.sample(usage).await;
            if end.is_some() {
                // Calls of a reply cut short may be incomplete and will never run, and
                // the provider's items of a partial reply are never resent.
                reply.tool_calls.clear();
                reply.items.clear();
            }
            usage.add(&reply.usage);
            self.count_usage(&reply.usage).await;
            self.measured(&reply);
            let calls = reply.tool_calls.clone();
            let plan_ids: HashMap<String, String> = reply
                .tool_calls
                .iter()
                .enumerate()
                .filter_map(|(index, call)| {
                    let draft = reply.drafts.remove(&index)?;
                    Some((call.id.clone(), draft.id))
                })
                .collect();
            let items = reply
                .items_api
                .filter(|_| !reply.items.is_empty())
                .map(|api| {
                    Arc::new(ProviderItems {
                        api: api.to_owned(),
                        provider: self.model.provider.clone(),
                        model: self.model.model.clone(),
                        items: std::mem::take(&mut reply.items),
                    })
                });
            let recorded = self.record_reply(reply.reasoning, reply.tool_calls, items);
            if let Some(end) = end {
                return end;
            }
            if calls.is_empty() && reply.finish == Some(FinishReason::Paused) && recorded {
                // The model paused a long server-side run: the conversation goes back as
                // it is (with what it paused on) and the model carries on, in this turn.
                // A pause with nothing to send back would only repeat the request.
                continue;
            }
            if calls.is_empty() {
                match reply.finish {
                    Some(FinishReason::Length) => {
                        self.emit(Event::reply_stopped(ReplyStop::MaxTokens)).await;
                    }
                    Some(FinishReason::ContentFilter) => {
                        self.emit(Event::reply_stopped(ReplyStop::Refusal)).await;
                    }
                    _ => {}
                }
                return TurnEnd::Completed;
            }
            match self.run_calls(&calls, &plan_ids).await {
                CallsOutcome::Continue => {}
                CallsOutcome::PlanProposed => return TurnEnd::Completed,
                CallsOutcome::Interrupted => return TurnEnd::Interrupted,
            }
        }
    }

    /// Records and echoes one user message, then says the turn streams (again, after a
    /// steered message was read). False when interrupted meanwhile.
    async fn accept(&self, input: UserInput, steered: bool) -> bool {
        let prepared = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return false,
            prepared = attach::prepare(input, self.cwd.clone(), steered) => prepared,
        };
        for notice in prepared.notices {
            self.emit(Event::info(notice)).await;
        }
        let shown = prepared.shown;
        let entry = prepared.entry;
        let id = self
            .emit_with(|shared| {
                let entry = self.track.store(shared).append(entry);
                (Some(Event::UserMessage(shown)), entry.id.clone())
            })
            .await;
        if !steered {
            let _ = self.turn.set(id);
        }
        self.status(SessionStatus::Streaming).await;
        true
    }

    /// Runs the `user_prompt_submit` hooks and reports them; false when the turn was
    /// interrupted meanwhile (the hooks are stopped).
    async fn prompt_submitted(&self, prompt: String) -> bool {
        let payload = serde_json::json!({ "prompt": prompt });
        let runs = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return false,
            runs = self.project.run_hooks(HookEvent::UserPromptSubmit, payload) => runs,
        };
        for run in runs {
            for event in run.report() {
                self.emitter.emit(event).await;
            }
        }
        true
    }

    async fn read_steered(&self) -> bool {
        loop {
            let next = self
                .steer
                .lock()
                .ok()
                .and_then(|mut inbox| inbox.pop_front());
            let Some(input) = next else { return true };
            if !self.accept(input, true).await {
                return false;
            }
        }
    }

    /// The mode gating this turn's calls now: the looser of its start mode and the
    /// session's current one.
    pub(super) fn current_mode(&self) -> ApprovalMode {
        let current = self.emitter.change(|shared| shared.mode);
        approvals::effective_mode(self.mode, current)
    }

    /// Compacts the conversation now; events say how it went. Asked for (`/compact`),
    /// everything but the latest turn is summarised; needed (the context is full), the
    /// latest turns that fit in a quarter of the limit are kept too.
    async fn compact_now(&self, usage: &mut TurnUsage, asked: bool) -> CompactEnd {
        let plan = self.emitter.change(|shared| {
            let store = &shared.store;
            if asked {
                let latest = store
                    .branch()
                    .iter()
                    .rev()
                    .find(|entry| entry.starts_turn())
                    .map(|entry| entry.id.clone());
                compaction::plan(store, 0, latest.as_ref())
            } else {
                let keep = context_limit(self.model.info.context_window) / 4;
                compaction::plan(store, keep, self.turn.get())
            }
        });
        let Some(plan) = plan else {
            self.emitter.emit(Event::CompactionStart).await;
            self.emitter
                .emit(Event::CompactionFailed {
                    error: "nothing to compact yet: the conversation is only the latest turn"
                        .to_owned(),
                })
                .await;
            return CompactEnd::Failed;
        };
        match compaction::run(plan, &self.model, &self.emitter, &self.cancel).await {
            compaction::Outcome::Done {
                usage: spent,
                entry,
            } => {
                self.emitter
                    .emit_with(|shared| {
                        shared.store.append(*entry);
                        (Some(Event::CompactionEnd), ())
                    })
                    .await;
                usage.add(&spent);
                CompactEnd::Done
            }
            compaction::Outcome::Failed => CompactEnd::Failed,
            compaction::Outcome::Interrupted => CompactEnd::Interrupted,
        }
    }

    /// Tokens every request of this turn carries besides the conversation, counted once.
    fn base_tokens(&self) -> u64 {
        *self.base.get_or_init(|| {
            let tools = self.request_tools();
            tokens::count_base(&self.system, &tools)
        })
    }

    /// Tokens the next request would carry (entries never counted are counted here,
    /// outside the session's lock).
    fn next_request_tokens(&self) -> u64 {
        let conversation = self
            .emitter
            .change(|shared| self.track.store(shared).request());
        self.base_tokens() + conversation.iter().map(|entry| entry.tokens()).sum::<u64>()
    }

    /// Before a request: a conversation past the context limit is compacted first
    /// (`status: compacting` meanwhile); one that still does not fit the window ends the
    /// turn with an error, and the message that made it overflow is set aside, so later
    /// turns are not refused too.
    async fn fit_context(&self, usage: &mut TurnUsage) -> Option<TurnEnd> {
        let limit = context_limit(self.model.info.context_window);
        // Most requests are far below the limit: a bound that needs no tokenizer (bytes,
        // where nothing was counted yet) settles it without counting anything.
        let conversation = self
            .emitter
            .change(|shared| self.track.store(shared).request());
        let bound = (self.system.len() as u64)
            + self.tools_bound()
            + conversation
                .iter()
                .map(|entry| entry.tokens_at_most())
                .sum::<u64>();
        if bound <= limit || self.next_request_tokens() <= limit {
            return None;
        }
        if !self.track.is_main() {
            return self.agent_overflow(self.next_request_tokens()).await;
        }
        self.emitter.status(SessionStatus::Compacting).await;
        let compacted = self.compact_now(usage, false).await;
        if matches!(compacted, CompactEnd::Interrupted) {
            return Some(TurnEnd::Interrupted);
        }
        self.emitter.status(SessionStatus::Streaming).await;
        let tokens = self.next_request_tokens();
        let window = self.model.info.context_window;
        if tokens <= window {
            return None;
        }
        self.set_aside_turn();
        self.emitter
            .error(format!(
                "this turn does not fit in the model's context window ({tokens} tokens of {window}) even after compacting the conversation, so it was not sent; it was set aside (see /tree): send a shorter message, or attach large content as a file"
            ))
            .await;
        Some(TurnEnd::Failed)
    }

    /// Moves the conversation back to before this turn, marking the move.
    fn set_aside_turn(&self) {
        let Some(turn) = self.turn.get() else { return };
        self.emitter.change(|shared| {
            let store = &mut shared.store;
            let Some(parent) = store.get(turn).and_then(|entry| entry.parent.clone()) else {
                return;
            };
            if store.move_to(&parent).is_ok() {
                store.append(Prepared::counted(
                    EntryBody::Branch {
                        label: "A turn too large for the context window was set aside".to_owned(),
                    },
                    0,
                ));
            }
        });
    }

    /// One model request with transparent retries. Returns the reply (possibly partial)
    /// and, when the turn must end here, how.
    async fn sample(&self, usage: &mut TurnUsage) -> (Reply, Option<TurnEnd>) {
        if let Some(end) = self.fit_context(usage).await {
            return (Reply::default(), Some(end));
        }
        self.emit(Event::Connecting).await;
        let mut request = self.build_request();
        let policy = self.model.retry;
        let mut attempt = 0;
        let mut compacted = false;
        loop {
            let mut reply = Reply::default();
            let err = match self.attempt(&request, &mut reply).await {
                Ok(()) => {
                    reply.tail = request.conversation.last().map(|entry| entry.id.clone());
                    return (reply, None);
                }
                Err(AttemptError::Interrupted) => return (reply, Some(TurnEnd::Interrupted)),
                Err(AttemptError::Model(err)) => err,
            };
            let retry_after = match err.retry {
                Retry::After(after) if !reply.shown && attempt < policy.max_retries => after,
                // Too long by the provider's count (ours said it fits): compacted once, the
                // request goes again at once.
                Retry::Compact if !reply.shown && !compacted && self.track.is_main() => {
                    compacted = true;
                    self.emitter.status(SessionStatus::Compacting).await;
                    match self.compact_now(usage, false).await {
                        CompactEnd::Interrupted => return (reply, Some(TurnEnd::Interrupted)),
                        CompactEnd::Failed => {
                            self.emitter.status(SessionStatus::Streaming).await;
                            self.emit(Event::error(format!(
                                "model request failed: {}",
                                err.message
                            )))
                            .await;
                            return (reply, Some(TurnEnd::Failed));
                        }
                        CompactEnd::Done => {}
                    }
                    self.emitter.status(SessionStatus::Streaming).await;
                    request = self.build_request();
                    attempt += 1;
                    self.emit(Event::Retrying {
                        attempt,
                        message: format!("{} (the conversation was compacted)", err.message),
                    })
                    .await;
                    continue;
                }
                _ => {
                    self.emit(Event::error(format!(
                        "model request failed: {}",
                        err.message
                    )))
                    .await;
                    return (reply, Some(TurnEnd::Failed));
                }
            };
            attempt += 1;
            tracing::info!(attempt, error = %err.message, "retrying model request");
            self.emit(Event::Retrying {
                attempt,
                message: err.message.clone(),
            })
            .await;
            let backoff = policy.base_delay.saturating_mul(1 << (attempt - 1).min(16));
            let delay = retry_after.unwrap_or(backoff).min(MAX_RETRY_DELAY);
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return (Reply::default(), Some(TurnEnd::Interrupted)),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// The next request: the active branch's entries (reference counts, no copy).
    fn build_request(&self) -> ChatRequest {
        let conversation = self
            .emitter
            .change(|shared| self.track.store(shared).request());
        let tools = self.request_tools();
        ChatRequest {
            model: self.model.model.clone(),
            system: if self.current_mode() == ApprovalMode::Plan {
                self.plan_system.clone()
            } else {
                self.system.clone()
            },
            conversation,
            tools,
            reasoning_effort: self.reasoning_effort.clone(),
            provider: self.model.provider.clone(),
            cache_key: Some(self.session_id.clone()),
            // A freeform tool writes the disk itself; the JSON tools it would replace go
            // through the client that serves the files, when one does.
            freeform_tools: if self.delegation.serves_files() {
                Vec::new()
            } else {
                self.tools.freeform_tools()
            },
        }
    }

    /// At least the tokens of the tool schemas (their bytes).
    fn tools_bound(&self) -> u64 {
        self.request_tools()
            .iter()
            .map(|tool| {
                (tool.name.len() + tool.description.len() + tool.parameters.to_string().len())
                    as u64
            })
            .sum::<u64>()
            + 16
    }

    /// The tools offered in the next request.
    fn request_tools(&self) -> Vec<super::ports::model::ToolSpec> {
        let mut tools = self.tools.specs();
        tools.extend(self.builtin_specs());
        if self.current_mode() == ApprovalMode::Plan && self.track.is_main() {
            tools.push(propose_plan_spec());
        }
        tools
    }

    /// Remembers the real size of the prompt just answered, for `context_usage`.
    fn measured(&self, reply: &Reply) {
        let (Some(tail), true) = (&reply.tail, self.track.is_main()) else {
            return;
        };
        if reply.usage.input_tokens == 0 {
            return;
        }
        let measured = super::shared::Measured {
            provider: self.model.provider.clone(),
            model: self.model.model.clone(),
            tail: tail.clone(),
            tokens: reply.usage.input_tokens,
        };
        self.emitter
            .change(|shared| shared.measured = Some(measured));
    }

    /// Records the reply just streamed. Its text stays visible (as the streaming text)
    /// until the entry holding it is appended, in one step, so a snapshot taken in
    /// between still shows it; the tokens are counted outside the lock. False when there
    /// was nothing to record.
    fn record_reply(
        &self,
        reasoning: String,
        tool_calls: Vec<ToolCall>,
        provider_items: Option<Arc<ProviderItems>>,
    ) -> bool {
        let text = self
            .emitter
            .change(|shared| self.track.streaming(shared).clone().unwrap_or_default());
        if text.is_empty() && tool_calls.is_empty() && provider_items.is_none() {
            self.emitter
                .change(|shared| *self.track.streaming(shared) = None);
            return false;
        }
        let entry = Prepared::new(EntryBody::Assistant(Message::Assistant {
            text,
            reasoning,
            tool_calls,
            provider_items,
        }));
        self.emitter.change(|shared| {
            *self.track.streaming(shared) = None;
            self.track.store(shared).append(entry);
        });
        true
    }

    async fn attempt(&self, request: &ChatRequest, reply: &mut Reply) -> Result<(), AttemptError> {
        let start = self.model.client.stream(request);
        let mut stream = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(AttemptError::Interrupted),
            started = start => started.map_err(AttemptError::Model)?,
        };
        // The request went out at once; the first message's write (a new session's file
        // is created with it) had until the model answered to finish.
        let pending = self
            .pending_write
            .lock()
            .ok()
            .and_then(|mut pending| pending.take());
        if let Some(written) = pending {
            super::conversation::store::wait_written(written).await;
        }
        self.emit(Event::ThinkingStart).await;
        let idle = self.model.retry.idle_timeout;
        let deadline = tokio::time::sleep(idle);
        tokio::pin!(deadline);
        let mut names: HashMap<usize, String> = HashMap::new();
        // One waiter for the whole reply, not one registered and dropped per delta.
        let cancelled = self.cancel.cancelled();
        tokio::pin!(cancelled);
        loop {
            let item = tokio::select! {
                biased;
                _ = &mut cancelled => return Err(AttemptError::Interrupted),
                _ = &mut deadline => {
                    return Err(AttemptError::Model(ModelError::transient(
                        format!("the model sent nothing for {} s", idle.as_secs_f64()),
                        None,
                    )));
                }
                item = stream.next() => item,
            };
            deadline.as_mut().reset(Instant::now() + idle);
            let event = match item {
                None => {
                    return Err(AttemptError::Model(ModelError::transient(
                        "the model stream ended before the reply was complete",
                        None,
                    )));
                }
                Some(Err(err)) => return Err(AttemptError::Model(err)),
                Some(Ok(event)) => event,
            };
            match event {
                ModelEvent::ReasoningDelta(delta) => {
                    reply.shown = true;
                    reply.reasoning.push_str(&delta);
                    self.emit(Event::ReasoningDelta { delta }).await;
                }
                ModelEvent::TextDelta(delta) => self.stream_text(reply, delta).await,
                ModelEvent::ToolCallDelta {
                    index,
                    name,
                    arguments,
                } => {
                    if let Some(name) = name {
                        names.insert(index, name);
                    }
                    if names.get(&index).is_some_and(|name| name == PROPOSE_PLAN)
                        && self.track.is_main()
                    {
                        self.draft_plan(reply, index, &arguments).await;
                    }
                }
                ModelEvent::ToolCall(call) => reply.tool_calls.push(call),
                ModelEvent::Notice(text) => {
                    reply.shown = true;
                    self.emit(Event::info(text)).await;
                }
                ModelEvent::ProviderItem { api, json } => {
                    reply.items_api = Some(api);
                    reply.items.push(ProviderItem {
                        after_calls: reply.tool_calls.len(),
                        json: Arc::from(json),
                    });
                }
                ModelEvent::Usage(usage) => reply.usage = usage,
                ModelEvent::Finished(reason) => {
                    reply.finish = Some(reason);
                    return Ok(());
                }
            }
        }
    }

    async fn stream_text(&self, reply: &mut Reply, delta: String) {
        if !reply.text_started {
            reply.text_started = true;
            self.emit(Event::AssistantStart).await;
        }
        reply.shown = true;
        self.emit_with(|shared| {
            self.track
                .streaming(shared)
                .get_or_insert_with(String::new)
                .push_str(&delta);
            (Some(Event::AssistantDelta { delta }), ())
        })
        .await;
    }

    async fn draft_plan(&self, reply: &mut Reply, index: usize, fragment: &str) {
        let draft = reply.drafts.entry(index).or_default();
        if let Some((title, append)) = draft.push(fragment) {
            reply.shown = true;
            let id = draft.id.clone();
            self.emitter
                .emit(Event::PlanDraft { id, title, append })
                .await;
        }
    }
}
