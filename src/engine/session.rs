//! The session task: owns one session's state and turns ops into events.
//!
//! Everything that changes what runs next (the queue, the running turn, the model, the
//! approval mode) lives in this one task and is changed only here, in op order. The
//! running turn is a separate task (see [`super::turn`]) so that ops keep flowing while
//! it streams; the two share only the conversation history and the steer inbox.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::commands::{self, Command};
use super::emitter::Emitter;
use super::history::History;
use super::model::{ModelCatalog, ResolvedModel};
use super::tokens;
use super::tools::ToolRegistry;
use super::turn::{self, SteerInbox, TurnContext, TurnEnd, TurnOutcome};
use crate::config::ApprovalMode;
use crate::protocol::{
    Event, EventLine, ModelStatus, ModelViewEntry, Op, UnqueuedEvent, UserInput, VERSION,
};

/// Everything needed to start a session; built by `crate::host`.
pub struct SessionParams {
    pub session_id: String,
    pub cwd: PathBuf,
    /// The session's environment: tools run with it (the client's, in the daemon).
    pub env: Arc<std::collections::HashMap<String, String>>,
    pub profile_dir: PathBuf,
    pub config_path: PathBuf,
    pub system_prompt: String,
    pub approval_mode: ApprovalMode,
    /// `reasoning_effort` from the config, applied when the model supports it.
    pub reasoning_effort: Option<String>,
    pub catalog: Arc<dyn ModelCatalog>,
    pub tools: ToolRegistry,
    /// Problems found while loading the config, reported as `error` at startup.
    pub startup_errors: Vec<String>,
}

/// One input line, as the transport decoded it.
#[derive(Debug)]
pub enum Input {
    Op(Op),
    /// A line that is not a valid op; carries the complete error message.
    Malformed(String),
}

/// Capacity of a session's inbound queue; a client that sends faster than the session
/// handles ops waits (stdio) rather than growing memory.
pub const INPUT_QUEUE: usize = 256;

pub struct SessionHandle {
    pub inputs: mpsc::Sender<Input>,
    /// Ends when the session ends: `shutdown`, `/quit`, `/exit`, or the input channel
    /// closing.
    pub task: JoinHandle<()>,
}

/// Starts a session; its startup batch is the first thing it emits.
pub fn spawn(params: SessionParams, events: mpsc::Sender<EventLine>) -> SessionHandle {
    let (inputs, rx) = mpsc::channel(INPUT_QUEUE);
    let task = tokio::spawn(async move {
        let mut session = Session::start(params, events).await;
        session.run(rx).await;
    });
    SessionHandle { inputs, task }
}

struct RunningTurn {
    cancel: CancellationToken,
    handle: JoinHandle<TurnOutcome>,
    steer: SteerInbox,
}

struct Session {
    params: SessionParams,
    emitter: Emitter,
    model: ResolvedModel,
    effort: Option<String>,
    approval_mode: ApprovalMode,
    history: Arc<Mutex<History>>,
    queue: VecDeque<UserInput>,
    turn: Option<RunningTurn>,
    /// Cumulative USD over the session's turns.
    cost: f64,
    last_model_status: Option<ModelStatus>,
}

enum Wake {
    TurnDone(Result<TurnOutcome, tokio::task::JoinError>),
    Input(Option<Input>),
}

#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

impl Session {
    async fn start(params: SessionParams, events: mpsc::Sender<EventLine>) -> Self {
        tokens::warm_up();
        let emitter = Emitter::new(&params.session_id, events);
        let mut errors = params.startup_errors.clone();
        let model = match params.catalog.default_model() {
            Ok(model) => model,
            Err(err) => {
                errors.push(format!("{err}; using the offline demo model replay/demo"));
                params.catalog.fallback()
            }
        };
        model.client.warm_up();
        let effort = pick_effort(&model, params.reasoning_effort.as_deref(), None);
        let mut session = Self {
            approval_mode: params.approval_mode,
            emitter,
            model,
            effort,
            history: Arc::default(),
            queue: VecDeque::new(),
            turn: None,
            cost: 0.0,
            last_model_status: None,
            params,
        };
        session.emit_startup(errors).await;
        session
    }

    async fn emit_startup(&mut self, errors: Vec<String>) {
        let params = &self.params;
        self.emitter
            .emit(Event::Startup {
                version: VERSION.to_owned(),
                session_id: params.session_id.clone(),
                profile_dir: params.profile_dir.display().to_string(),
                config_path: params.config_path.display().to_string(),
                cwd: params.cwd.display().to_string(),
                model: self.model.full_name(),
                context_window: self.model.info.context_window,
            })
            .await;
        self.emit_model_status().await;
        self.emitter
            .emit(Event::CommandList {
                commands: commands::command_list(),
            })
            .await;
        self.emitter
            .emit(Event::ApprovalMode {
                mode: self.approval_mode.to_string(),
            })
            .await;
        self.emitter
            .emit(Event::McpServers {
                servers: Vec::new(),
            })
            .await;
        for error in errors {
            self.emitter.error(error).await;
        }
        if let Some(notice) = self.model.notice.clone() {
            self.emitter.info(notice).await;
        }
    }

    async fn run(&mut self, mut inputs: mpsc::Receiver<Input>) {
        loop {
            let wake = match &mut self.turn {
                Some(turn) => tokio::select! {
                    biased;
                    outcome = &mut turn.handle => Wake::TurnDone(outcome),
                    input = inputs.recv() => Wake::Input(input),
                },
                None => Wake::Input(inputs.recv().await),
            };
            let flow = match wake {
                Wake::TurnDone(outcome) => {
                    self.finish_turn(outcome).await;
                    Flow::Continue
                }
                Wake::Input(None) => Flow::Stop,
                Wake::Input(Some(Input::Malformed(message))) => {
                    self.emitter.error(message).await;
                    Flow::Continue
                }
                Wake::Input(Some(Input::Op(op))) => self.handle(op).await,
            };
            if flow == Flow::Stop {
                break;
            }
        }
        if let Some(turn) = self.turn.take() {
            turn.cancel.cancel();
            let _ = turn.handle.await;
        }
    }

    async fn handle(&mut self, op: Op) -> Flow {
        match op {
            Op::UserMessage(input) => self.submit(input).await,
            Op::Command { input } => return self.command(&input).await,
            Op::Steer { index } => self.steer(index).await,
            Op::Unqueue { index } => self.unqueue(index).await,
            Op::Interrupt { index } => self.interrupt(index).await,
            Op::SetApprovalMode { mode } => self.set_approval_mode(&mode).await,
            Op::AgentRuns => {
                self.emitter
                    .emit(Event::AgentRuns {
                        workflows: Vec::new(),
                        agents: Vec::new(),
                    })
                    .await;
            }
            Op::SubagentTranscript { agent_id } => {
                self.emitter
                    .error(format!("unknown agent: {agent_id}"))
                    .await;
            }
            Op::Approve(approve) => {
                self.emitter
                    .error(format!(
                        "no approval request is pending with call_id {:?}",
                        approve.call_id
                    ))
                    .await;
            }
            Op::ApprovePlan(plan) => {
                self.emitter
                    .error(format!("unknown plan id: {}", plan.id))
                    .await;
            }
            Op::SetAttended { .. } | Op::DecideAction { .. } => {
                self.emitter
                    .error("deferred actions are not available in this build")
                    .await;
            }
            Op::McpList | Op::McpSet(_) | Op::McpRemove(_) | Op::McpToggle(_) => {
                self.emitter
                    .error("MCP servers are not available in this build")
                    .await;
            }
            Op::Shutdown => return Flow::Stop,
        }
        Flow::Continue
    }

    async fn submit(&mut self, input: UserInput) {
        if self.turn.is_some() {
            self.queue.push_back(input);
            self.emit_pending().await;
            self.emitter
                .status(format!("queued: {}", self.queue.len()))
                .await;
        } else {
            self.start_turn(input);
        }
    }

    fn start_turn(&mut self, input: UserInput) {
        let cancel = CancellationToken::new();
        let steer = SteerInbox::default();
        let ctx = TurnContext {
            emitter: self.emitter.clone(),
            model: self.model.clone(),
            reasoning_effort: self.effort.clone(),
            system: Arc::from(self.params.system_prompt.as_str()),
            tools: self.params.tools.clone(),
            cwd: self.params.cwd.clone(),
            env: self.params.env.clone(),
            history: self.history.clone(),
            steer: steer.clone(),
            cancel: cancel.clone(),
        };
        let handle = tokio::spawn(turn::run(ctx, input));
        self.turn = Some(RunningTurn {
            cancel,
            handle,
            steer,
        });
    }

    async fn finish_turn(&mut self, outcome: Result<TurnOutcome, tokio::task::JoinError>) {
        let Some(turn) = self.turn.take() else { return };
        self.requeue_steered(&turn.steer);
        match outcome {
            Ok(TurnOutcome {
                end: TurnEnd::Completed,
                usage,
            }) => {
                self.emitter.emit(Event::Usage(usage)).await;
                self.emit_context_usage(&usage).await;
                self.emitter.status("ready").await;
            }
            Ok(TurnOutcome {
                end: TurnEnd::Failed,
                usage,
            }) => {
                self.cost += tokens::cost(&usage, &self.model.info);
                self.emitter.status("ready").await;
            }
            Ok(TurnOutcome {
                end: TurnEnd::Interrupted,
                ..
            }) => {
                self.emitter.status("interrupted").await;
            }
            Err(err) => {
                tracing::error!(%err, "turn task failed");
                self.emitter
                    .error(format!(
                        "internal error: the turn stopped unexpectedly ({err})"
                    ))
                    .await;
                self.emitter.status("ready").await;
            }
        }
        self.start_next().await;
    }

    /// Messages steered too late for the turn to read run next, in their order.
    fn requeue_steered(&mut self, inbox: &SteerInbox) {
        let mut inbox = inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(input) = inbox.pop_back() {
            self.queue.push_front(input);
        }
    }

    async fn start_next(&mut self) {
        if self.turn.is_some() {
            return;
        }
        if let Some(next) = self.queue.pop_front() {
            self.emit_pending().await;
            self.start_turn(next);
        }
    }

    async fn emit_context_usage(&mut self, usage: &crate::protocol::TurnUsage) {
        self.cost += tokens::cost(usage, &self.model.info);
        let system = self.params.system_prompt.clone();
        let history = self.history.clone();
        let specs = self.params.tools.specs();
        // Counting walks the whole conversation; keep it off the async workers.
        let tokens = tokio::task::spawn_blocking(move || {
            let history = history
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            tokens::count_context(&system, &history.messages, &specs)
        })
        .await
        .unwrap_or(0);
        self.emitter
            .emit(Event::ContextUsage {
                tokens,
                tokenizer: tokens::TOKENIZER.to_owned(),
                cost: self.cost,
            })
            .await;
    }

    async fn steer(&mut self, index: Option<i64>) {
        if self.turn.is_none() {
            return;
        }
        let Some(position) = pick(self.queue.len(), index) else {
            return;
        };
        if !self.queue[position].images.is_empty() {
            // Images cannot join a request mid-turn: the message starts a turn of its own.
            self.interrupt(Some(position as i64)).await;
            return;
        }
        let Some(input) = self.queue.remove(position) else {
            return;
        };
        if let Some(turn) = &self.turn {
            turn.steer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push_back(input);
        }
        self.emitter.status("steering").await;
        self.emit_pending().await;
    }

    async fn unqueue(&mut self, index: Option<i64>) {
        let Some(position) = pick(self.queue.len(), index) else {
            return;
        };
        let Some(input) = self.queue.remove(position) else {
            return;
        };
        self.emit_pending().await;
        self.emitter
            .emit(Event::Unqueued(UnqueuedEvent {
                content: input.content,
                images: input.images,
                files: input.files,
            }))
            .await;
    }

    async fn interrupt(&mut self, index: Option<i64>) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        turn.cancel.cancel();
        let outcome = turn.handle.await;
        if let Err(err) = outcome {
            tracing::error!(%err, "turn task failed while interrupted");
        }
        self.requeue_steered(&turn.steer);
        // "Interrupt and send": the chosen message goes first; start_next then announces
        // the new queue and starts it.
        if let Some(position) = pick(self.queue.len(), index)
            && let Some(input) = self.queue.remove(position)
        {
            self.queue.push_front(input);
        }
        self.emitter.info("request interrupted").await;
        self.emitter.status("interrupted").await;
        self.start_next().await;
    }

    async fn set_approval_mode(&mut self, mode: &str) {
        let Some(mode) = ApprovalMode::parse(mode) else {
            self.emitter
                .error(format!(
                    "unknown approval mode: {mode} (expected manual, plan, auto-edit, auto or full-access)"
                ))
                .await;
            return;
        };
        self.approval_mode = mode;
        self.emitter.status(format!("approval mode: {mode}")).await;
        self.emitter
            .emit(Event::ApprovalMode {
                mode: mode.to_string(),
            })
            .await;
    }

    async fn command(&mut self, input: &str) -> Flow {
        let command = match commands::parse(input) {
            Ok(command) => command,
            Err(message) => {
                self.emitter.error(message).await;
                return Flow::Continue;
            }
        };
        match command {
            Command::Help => self.emitter.info(commands::help_text()).await,
            Command::Quit => return Flow::Stop,
            Command::ModelView => self.emit_model_view().await,
            Command::Transcript => {
                let items = self
                    .history
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .transcript_json();
                self.emitter.emit(Event::Transcript { items }).await;
            }
            Command::SwitchModel { name, effort } => self.switch_model(name, effort).await,
        }
        Flow::Continue
    }

    async fn switch_model(&mut self, name: &str, effort: Option<&str>) {
        let model = match self
            .params
            .catalog
            .resolve(name, Some(&self.model.provider))
        {
            Ok(model) => model,
            Err(message) => {
                self.emitter.error(message).await;
                return;
            }
        };
        if let Some(effort) = effort
            && !model.info.reasoning_efforts.iter().any(|e| e == effort)
        {
            let message = if model.info.reasoning_efforts.is_empty() {
                format!("{} takes no reasoning effort", model.full_name())
            } else {
                format!(
                    "unknown reasoning effort {effort:?} for {}: expected one of {}",
                    model.full_name(),
                    model.info.reasoning_efforts.join(", ")
                )
            };
            self.emitter.error(message).await;
            return;
        }
        self.effort = pick_effort(&model, effort, self.effort.as_deref());
        model.client.warm_up();
        self.model = model;
        self.emit_model_status().await;
    }

    async fn emit_model_view(&mut self) {
        let active = self.model.full_name();
        let mut models: Vec<ModelViewEntry> = self
            .params
            .catalog
            .list()
            .into_iter()
            .map(|(name, info)| ModelViewEntry {
                active: name == active,
                model: name,
                context_window: info.context_window,
                max_output_tokens: info.max_output_tokens,
                reasoning_efforts: info.reasoning_efforts,
            })
            .collect();
        if !models.iter().any(|entry| entry.active) {
            models.insert(
                0,
                ModelViewEntry {
                    model: active,
                    active: true,
                    context_window: self.model.info.context_window,
                    max_output_tokens: self.model.info.max_output_tokens,
                    reasoning_efforts: self.model.info.reasoning_efforts.clone(),
                },
            );
        }
        self.emitter
            .emit(Event::ModelView {
                models,
                active_effort: self.effort.clone(),
            })
            .await;
    }

    /// Emits `model_status` unless it would repeat the last one verbatim.
    async fn emit_model_status(&mut self) {
        let info = &self.model.info;
        let status = ModelStatus {
            provider: self.model.provider.clone(),
            model: self.model.model.clone(),
            reasoning_effort: self.effort.clone(),
            context_window: info.context_window,
            context_limit: context_limit(info.context_window),
            max_output_tokens: info.max_output_tokens,
            reasoning_efforts: info.reasoning_efforts.clone(),
            state: self.model.state.clone(),
        };
        if self.last_model_status.as_ref() == Some(&status) {
            return;
        }
        self.last_model_status = Some(status.clone());
        self.emitter.emit(Event::ModelStatus(status)).await;
    }

    async fn emit_pending(&self) {
        let messages = self.queue.iter().map(|m| m.content.clone()).collect();
        self.emitter.emit(Event::PendingMessages { messages }).await;
    }
}

/// The share of the window a conversation may fill before it must be compacted: 80 %,
/// which leaves room for the reply and the compaction summary itself.
pub fn context_limit(context_window: u64) -> u64 {
    context_window / 5 * 4
}

/// The effort to use on `model`: the one asked for, else the current one if the model
/// takes it, else `medium`, else the model's first; `None` for models without efforts.
fn pick_effort(
    model: &ResolvedModel,
    asked: Option<&str>,
    current: Option<&str>,
) -> Option<String> {
    let efforts = &model.info.reasoning_efforts;
    let supported = |effort: &str| efforts.iter().any(|e| e == effort);
    [asked, current, Some("medium")]
        .into_iter()
        .flatten()
        .find(|effort| supported(effort))
        .map(str::to_owned)
        .or_else(|| efforts.first().cloned())
}

/// Index semantics of steer/unqueue/interrupt: absent = the next (0), negative counts
/// from the end, out of range = nothing.
fn pick(len: usize, index: Option<i64>) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let index = index.unwrap_or(0);
    let position = if index < 0 { len + index } else { index };
    (0..len).contains(&position).then_some(position as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_semantics() {
        assert_eq!(pick(3, None), Some(0));
        assert_eq!(pick(3, Some(2)), Some(2));
        assert_eq!(pick(3, Some(3)), None);
        assert_eq!(pick(3, Some(-1)), Some(2));
        assert_eq!(pick(3, Some(-3)), Some(0));
        assert_eq!(pick(3, Some(-4)), None);
        assert_eq!(pick(0, None), None);
    }

    #[test]
    fn context_limit_is_four_fifths() {
        assert_eq!(context_limit(200_000), 160_000);
    }
}
