//! One turn: the user's message, then model requests and tool calls until the model
//! answers without calling a tool.
//!
//! A turn runs as its own task so the session keeps taking ops (queue, steer,
//! interrupt) while it streams. It emits its events directly (no hop through the
//! session task on the delta path) and returns a [`TurnOutcome`]; the session task emits
//! the closing `usage` / `context_usage` / `status` lines, so "ready" always comes from
//! the one place that also decides what runs next.
//!
//! Interrupts arrive as a cancelled token. Every await that can take long selects on it,
//! and on cancellation the turn leaves the history consistent (each tool call answered,
//! partial text kept) before returning, so the next turn can continue the conversation.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attach;
use super::emitter::Emitter;
use super::history::History;
use super::model::{
    ChatRequest, FinishReason, ModelError, ModelEvent, ResolvedModel, Retry, ToolCall,
};
use super::tools::{ToolContext, ToolOutput, ToolRegistry};
use crate::protocol::{Event, TurnUsage, UserInput};

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
    pub tools: ToolRegistry,
    pub cwd: PathBuf,
    pub env: Arc<std::collections::HashMap<String, String>>,
    pub history: Arc<Mutex<History>>,
    pub steer: SteerInbox,
    pub cancel: CancellationToken,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// The model answered without tool calls.
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

/// What one model reply amounted to, also when it was cut short.
#[derive(Default)]
struct Reply {
    text: String,
    reasoning: String,
    tool_calls: Vec<ToolCall>,
    usage: TurnUsage,
    finish: Option<FinishReason>,
    /// True once any delta reached the client: from then on a failure cannot be retried
    /// transparently.
    shown: bool,
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

impl TurnContext {
    async fn run_loop(&self, first: UserInput, usage: &mut TurnUsage) -> TurnEnd {
        if !self.accept(first).await {
            return TurnEnd::Interrupted;
        }
        loop {
            if !self.read_steered().await {
                return TurnEnd::Interrupted;
            }
            let (mut reply, end) = self.sample().await;
            if end.is_some() {
                // Calls of a reply cut short may be incomplete and will never run.
                reply.tool_calls.clear();
            }
            usage.add(&reply.usage);
            let calls = reply.tool_calls.clone();
            let finish = reply.finish.clone();
            self.lock_history()
                .push_assistant(reply.text, reply.reasoning, reply.tool_calls);
            if let Some(end) = end {
                return end;
            }
            if calls.is_empty() {
                if finish == Some(FinishReason::Length) {
                    self.emitter
                        .info("the reply was cut off: the model reached its output token limit")
                        .await;
                }
                return TurnEnd::Completed;
            }
            if !self.run_tools(&calls).await {
                return TurnEnd::Interrupted;
            }
        }
    }

    /// Records and echoes one user message. False when interrupted meanwhile.
    async fn accept(&self, input: UserInput) -> bool {
        let prepared = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return false,
            prepared = attach::prepare(input, self.cwd.clone()) => prepared,
        };
        for notice in prepared.notices {
            self.emitter.info(notice).await;
        }
        self.lock_history()
            .push_user(prepared.message, prepared.shown.clone());
        self.emitter.emit(Event::UserMessage(prepared.shown)).await;
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
            if !self.accept(input).await {
                return false;
            }
        }
    }

    /// One model request with transparent retries. Returns the reply (possibly partial)
    /// and, when the turn must end here, how.
    async fn sample(&self) -> (Reply, Option<TurnEnd>) {
        self.emitter.emit(Event::Connecting).await;
        let request = self.build_request();
        let policy = self.model.retry;
        let mut attempt = 0;
        loop {
            let mut reply = Reply::default();
            let err = match self.attempt(&request, &mut reply).await {
                Ok(()) => return (reply, None),
                Err(AttemptError::Interrupted) => return (reply, Some(TurnEnd::Interrupted)),
                Err(AttemptError::Model(err)) => err,
            };
            let retry_after = match err.retry {
                Retry::After(after) if !reply.shown && attempt < policy.max_retries => after,
                _ => {
                    self.emitter
                        .error(format!("model request failed: {}", err.message))
                        .await;
                    return (reply, Some(TurnEnd::Failed));
                }
            };
            attempt += 1;
            tracing::info!(attempt, error = %err.message, "retrying model request");
            self.emitter.emit(Event::Retrying { attempt }).await;
            let backoff = policy.base_delay.saturating_mul(1 << (attempt - 1).min(16));
            let delay = retry_after.unwrap_or(backoff).min(MAX_RETRY_DELAY);
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return (Reply::default(), Some(TurnEnd::Interrupted)),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    fn build_request(&self) -> ChatRequest {
        let messages = self.lock_history().messages.clone();
        ChatRequest {
            model: self.model.model.clone(),
            system: self.system.to_string(),
            messages,
            tools: self.tools.specs(),
            reasoning_effort: self.reasoning_effort.clone(),
        }
    }

    async fn attempt(&self, request: &ChatRequest, reply: &mut Reply) -> Result<(), AttemptError> {
        let start = self.model.client.stream(request);
        let mut stream = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(AttemptError::Interrupted),
            started = start => started.map_err(AttemptError::Model)?,
        };
        self.emitter.emit(Event::ThinkingStart).await;
        let idle = self.model.retry.idle_timeout;
        let deadline = tokio::time::sleep(idle);
        tokio::pin!(deadline);
        loop {
            let item = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(AttemptError::Interrupted),
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
                    self.emitter.emit(Event::ReasoningDelta { delta }).await;
                }
                ModelEvent::TextDelta(delta) => {
                    if reply.text.is_empty() {
                        self.emitter.emit(Event::AssistantStart).await;
                    }
                    reply.shown = true;
                    reply.text.push_str(&delta);
                    self.emitter.emit(Event::AssistantDelta { delta }).await;
                }
                ModelEvent::ToolCallDelta { .. } => {}
                ModelEvent::ToolCall(call) => reply.tool_calls.push(call),
                ModelEvent::Usage(usage) => reply.usage = usage,
                ModelEvent::Finished(reason) => {
                    reply.finish = Some(reason);
                    return Ok(());
                }
            }
        }
    }

    /// Runs the calls of one reply in order. False when interrupted; every call still
    /// gets a result in the history so the conversation stays valid for the provider.
    async fn run_tools(&self, calls: &[ToolCall]) -> bool {
        for (done, call) in calls.iter().enumerate() {
            self.emitter
                .emit(Event::ToolStart {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                })
                .await;
            let outcome = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                outcome = self.run_tool(call) => Some(outcome),
            };
            let Some(outcome) = outcome else {
                let mut history = self.lock_history();
                for call in &calls[done..] {
                    history.push_tool_result(call, "interrupted by the user".into(), true);
                }
                return false;
            };
            self.lock_history()
                .push_tool_result(call, outcome.output.clone(), outcome.is_error);
            self.emitter
                .emit(Event::ToolOutput {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    output: outcome.output,
                    is_error: outcome.is_error,
                })
                .await;
        }
        true
    }

    async fn run_tool(&self, call: &ToolCall) -> ToolOutput {
        let Some(tool) = self.tools.get(&call.name) else {
            return ToolOutput::error(format!("unknown tool: {}", call.name));
        };
        let args = match parse_arguments(&call.arguments) {
            Ok(args) => args,
            Err(message) => return ToolOutput::error(format!("{}: {message}", call.name)),
        };
        let ctx = ToolContext {
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            cancel: self.cancel.child_token(),
            progress: Default::default(),
            hunks: None,
        };
        tool.run(args, ctx).await
    }

    fn lock_history(&self) -> std::sync::MutexGuard<'_, History> {
        // A poisoned lock means a panic elsewhere mid-append; the data is still the best
        // record of the conversation there is.
        self.history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn parse_arguments(raw: &str) -> Result<serde_json::Value, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(_) => Err("arguments must be a JSON object".to_owned()),
        Err(err) => Err(format!("arguments are not valid JSON ({err})")),
    }
}
