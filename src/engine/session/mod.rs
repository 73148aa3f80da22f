//! The session task: owns one session's state and turns ops into events.
//!
//! Everything that changes what runs next (the queue, the running turn, the model) lives
//! in this one task and is changed only here, in op order. The running turn is a
//! separate task (see [`super::turn`]) so that ops keep flowing while it streams; the
//! two share only [`Shared`] (history, open approvals, mode, ...) and the steer inbox.
//!
//! Ops are handled in the submodules: `queue` (messages, steer, unqueue, interrupt),
//! `gating` (approval mode, approvals, attended, deferred actions), `plans`,
//! `models` (slash commands and model switching), `mcp` (MCP servers and their prompt
//! commands), `agents` (the agent trace), `goal` (`/goal` and working toward it),
//! `snapshot` (startup batch and late-joiner state), `turns` (starting a turn or a
//! compaction, and what follows its end).

mod agents;
mod elicit;
mod gating;
mod goal;
mod history;
pub use history::resume_items;
mod mcp;
mod models;
mod plans;
mod project;
mod queue;
pub use queue::pick as queue_index;
mod recover;
mod snapshot;
mod turns;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::agents::Hub;
use super::conversation::store::{Entry, Journal, SessionMeta, Store};
use super::conversation::tokens;
use super::emitter::{Outbound, Output};
use super::ports::library::Library;
use super::ports::mcp::McpServers;
use super::ports::model::{ModelCatalog, ResolvedModel};
use super::ports::project::Project;
use super::ports::tools::{Sandbox, ToolOutput, ToolRegistry};
use super::shared::{Emitter, Shared};
use super::turn::{SteerInbox, TurnEnd, TurnOutcome};
use crate::protocol::{ApprovalMode, ClientId, Event, ModelStatus, Op, UserInput};

/// Everything needed to start a session; built by `crate::host`.
pub struct SessionParams {
    pub session_id: String,
    pub cwd: PathBuf,
    /// The session's environment: tools run with it (the client's, in the daemon).
    pub env: Arc<HashMap<String, String>>,
    pub profile_dir: PathBuf,
    pub config_path: PathBuf,
    /// The project and the user: the system prompt, custom commands, trust, hooks.
    pub project: Arc<dyn Project>,
    pub approval_mode: ApprovalMode,
    /// The sandbox commands run in at first (`[sandbox]`, the kernel's support).
    pub sandbox: Sandbox,
    /// `reasoning_effort` from the config, applied when the model supports it.
    pub reasoning_effort: Option<String>,
    pub catalog: Arc<dyn ModelCatalog>,
    pub tools: ToolRegistry,
    /// The session's MCP servers (their tools are a source in `tools`).
    pub mcp: Arc<dyn McpServers>,
    /// Problems found while loading the config, reported as `error` at startup.
    pub startup_errors: Vec<String>,
    /// How many clients are attached, when a host with several clients runs the session
    /// (the daemon); `None` in process, where its one client is always there.
    pub clients: Option<watch::Receiver<usize>>,
    /// A chat session (for its metadata).
    pub chat: bool,
    /// Where the session's entries are persisted.
    pub journal: Arc<dyn Journal>,
    /// A saved conversation to continue, in file order (its first entry is its
    /// metadata), with what loading it found wrong; `None` starts a new one.
    pub saved: Option<(Vec<Entry>, Vec<String>)>,
    /// The saved sessions `/resume` lists and opens.
    pub library: Arc<dyn Library>,
    /// A daemon session with nobody attached and no work unloads itself after this
    /// long (`None`: never, as in process).
    pub idle_unload: Option<std::time::Duration>,
    /// Told how each turn ended, once its closing `status` is out (`--headless` exits
    /// on it).
    pub turn_ends: Option<mpsc::UnboundedSender<TurnEnd>>,
    /// `[agents] max_depth`: how deep subagents may nest (0: no subagents).
    pub agents_max_depth: u32,
}

/// The client of a session in process: there is only one.
pub const SOLE_CLIENT: ClientId = 0;

/// One input to a session.
#[derive(Debug)]
pub enum Input {
    /// An op, and the client that sent it (answers go to that client only).
    Op { client: ClientId, op: Op },
    /// A line that is not a valid op; carries the complete error message.
    Malformed { client: ClientId, message: String },
    /// A client attaches: answer with [`Outbound::Snapshot`] carrying this token.
    Snapshot { token: u64 },
    /// A client leaves: answer with [`Outbound::Barrier`] once earlier inputs are done.
    Barrier { token: u64 },
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
pub fn spawn(params: SessionParams, events: mpsc::Sender<Outbound>) -> SessionHandle {
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
    /// It continues a turn a stopped process left halfway: nobody sent it, so it is
    /// not one of the turns `turn_ends` reports.
    resumed: bool,
}

/// Work finished in the background that the session task must act on.
enum Internal {
    /// A deferred action the user allowed has run.
    ActionRan { id: String, output: ToolOutput },
    /// An MCP prompt command was expanded (or failed), for the client that ran it.
    PromptReady {
        client: ClientId,
        result: Result<String, String>,
    },
}

struct Session {
    params: SessionParams,
    emitter: Emitter,
    model: ResolvedModel,
    effort: Option<String>,
    queue: VecDeque<UserInput>,
    turn: Option<RunningTurn>,
    /// Cumulative USD over the session's turns.
    cost: f64,
    /// The last `context_usage` this session emitted (tokens, cost), for the snapshots
    /// of clients that attach later; `None` until its first turn in this process.
    last_context_usage: Option<(u64, &'static str, f64)>,
    last_model_status: Option<ModelStatus>,
    internal_tx: mpsc::Sender<Internal>,
    internal_rx: mpsc::Receiver<Internal>,
    /// The client whose op is being handled: where its answers go.
    origin: ClientId,
    /// Tokens every request carries besides the conversation (system prompt, tool
    /// schemas), counted once.
    base_tokens: Option<u64>,
    /// Hosted by the daemon (several clients, sessions addressed by id).
    in_daemon: bool,
    /// Clients attached now (1 in process).
    clients_now: usize,
    /// Deferred actions running in the background.
    background: usize,
    /// When the session became idle with nobody attached, if it is.
    idle_since: Option<tokio::time::Instant>,
    /// What clients were last told about the MCP servers.
    mcp: mcp::Announced,
    /// The servers' requests for the user's input.
    elicit: elicit::Elicitations,
    /// The system prompt as the project gives it now (without plan mode's addendum).
    system_prompt: Arc<str>,
    /// The session continues a saved one (for hooks).
    resumed: bool,
    /// What loading the saved conversation found and did (skipped lines, calls
    /// answered for a stopped process): in the startup batch, and in the snapshot of
    /// every client that attaches later.
    load_notices: Vec<String>,
    /// The session's subagents' tasks.
    agents: Arc<Hub>,
    /// The client serving file access and commands, if any.
    delegation: crate::engine::delegate::Delegation,
}

enum Wake {
    TurnDone(Result<TurnOutcome, tokio::task::JoinError>),
    Input(Option<Input>),
    Internal(Internal),
    /// The MCP servers changed (state, tools or prompts).
    Mcp,
    /// An MCP server asks the user for input.
    Elicit(crate::engine::ports::mcp::Elicitation),
    /// The number of attached clients changed (daemon sessions only); `None` when the
    /// host stopped counting.
    Clients(Option<usize>),
    /// Nobody attached and nothing to do for the idle time: the session unloads.
    Idle,
}

#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

impl Session {
    async fn start(mut params: SessionParams, events: mpsc::Sender<Outbound>) -> Self {
        let mut errors = params.startup_errors.clone();
        let model = match params.catalog.default_model() {
            Ok(model) => model,
            Err(err) => {
                let model = params.catalog.unusable(&err);
                errors.push(err);
                model
            }
        };
        let journal = params.journal.clone();
        let resumed = params.saved.is_some();
        let mut notices = Vec::new();
        let store = match params.saved.take() {
            Some((entries, warnings)) => match Store::load(entries, journal.clone()) {
                Ok((store, more)) => {
                    notices.extend(warnings.into_iter().chain(more));
                    store
                }
                Err(err) => {
                    errors.push(format!("cannot continue the saved session: {err}"));
                    Store::new(meta(&params, &model), journal)
                }
            },
            None => Store::new(meta(&params, &model), journal),
        };
        let shared = Arc::new(Mutex::new(Shared::new(
            params.approval_mode,
            params.sandbox.clone(),
            store,
        )));
        let emitter = Emitter::new(Output::new(&params.session_id, events), shared);
        model.client.warm_up();
        tokens::warm_up();
        let effort = models::pick_effort(&model, params.reasoning_effort.as_deref(), None);
        let (internal_tx, internal_rx) = mpsc::channel(16);
        let mcp_servers = params.mcp.clone();
        let system_prompt: Arc<str> = Arc::from(params.project.system_prompt());
        errors.extend(params.project.problems());
        let agents = Hub::new(
            params.catalog.clone(),
            params.agents_max_depth,
            system_prompt.clone(),
        );
        let delegation = crate::engine::delegate::Delegation::new(emitter.output().clone());
        let mut session = Self {
            delegation,
            agents,
            emitter,
            model,
            effort,
            queue: VecDeque::new(),
            turn: None,
            cost: 0.0,
            last_context_usage: None,
            last_model_status: None,
            params,
            internal_tx,
            internal_rx,
            origin: SOLE_CLIENT,
            base_tokens: None,
            in_daemon: false,
            clients_now: 1,
            background: 0,
            idle_since: None,
            mcp: mcp::Announced::new(mcp_servers.as_ref()),
            elicit: elicit::Elicitations::new(mcp_servers.elicitations()),
            system_prompt,
            resumed,
            load_notices: Vec::new(),
        };
        session.in_daemon = session.params.clients.is_some();
        let (recovered, again) = session.recover_calls();
        notices.extend(recovered);
        notices.extend(session.sandbox_notice());
        session.keep_load_notices(&notices);
        session.emit_startup().await;
        // Only now: the startup batch shows every enabled server `connecting`, and no
        // server, however slow, can delay it.
        mcp_servers.start();
        session.emit_startup_notices(errors, notices).await;
        session.resume_turn(again);
        session
    }

    async fn run(&mut self, mut inputs: mpsc::Receiver<Input>) {
        let mut clients = self.params.clients.take();
        self.clients_now = clients.as_ref().map_or(1, |count| *count.borrow());
        loop {
            let idle = self.idle_deadline();
            let wake = {
                let turn = &mut self.turn;
                let internal = &mut self.internal_rx;
                let mcp_changes = &mut self.mcp.changes;
                let elicitations = &mut self.elicit.requests;
                tokio::select! {
                    biased;
                    outcome = turn_finished(turn) => Wake::TurnDone(outcome),
                    Some(internal) = internal.recv() => Wake::Internal(internal),
                    () = mcp::changed(mcp_changes) => Wake::Mcp,
                    request = elicit::next(elicitations) => Wake::Elicit(request),
                    count = client_count(clients.as_mut()) => Wake::Clients(count),
                    input = inputs.recv() => Wake::Input(input),
                    () = sleep_until(idle) => Wake::Idle,
                }
            };
            let flow = match wake {
                Wake::TurnDone(outcome) => {
                    self.finish_turn(outcome).await;
                    Flow::Continue
                }
                Wake::Internal(Internal::ActionRan { id, output }) => {
                    self.action_ran(id, output).await;
                    Flow::Continue
                }
                Wake::Internal(Internal::PromptReady { client, result }) => {
                    self.origin = client;
                    self.prompt_ready(result).await;
                    Flow::Continue
                }
                Wake::Mcp => {
                    self.mcp_changed().await;
                    Flow::Continue
                }
                Wake::Elicit(request) => {
                    self.elicitation_arrived(request).await;
                    Flow::Continue
                }
                Wake::Clients(Some(count)) => {
                    if count == 0 {
                        self.delegation.clear();
                    }
                    self.clients_now = count;
                    self.clients_changed(count).await;
                    Flow::Continue
                }
                Wake::Idle if self.agents.any_running() => {
                    // Subagents left in the background still work: wait another while.
                    self.idle_since = None;
                    Flow::Continue
                }
                Wake::Idle => {
                    tracing::info!(session = %self.params.session_id, "unloading an idle session");
                    Flow::Stop
                }
                Wake::Clients(None) => {
                    // The host dropped its side of the count: there is nothing to watch.
                    clients = None;
                    Flow::Continue
                }
                Wake::Input(None) => Flow::Stop,
                Wake::Input(Some(Input::Malformed { client, message })) => {
                    self.origin = client;
                    self.reply_error(message).await;
                    Flow::Continue
                }
                Wake::Input(Some(Input::Snapshot { token })) => {
                    self.snapshot(token).await;
                    Flow::Continue
                }
                Wake::Input(Some(Input::Barrier { token })) => {
                    self.emitter.barrier(token).await;
                    Flow::Continue
                }
                Wake::Input(Some(Input::Op { client, op })) => {
                    self.origin = client;
                    self.handle(op).await
                }
            };
            if flow == Flow::Stop {
                break;
            }
        }
        // The session ends: the running turn stops, and every card it opened is closed
        // (its tool call ends, its approval requests are resolved as interrupted); so do
        // its subagents.
        if let Some(turn) = self.turn.take() {
            turn.cancel.cancel();
            let _ = turn.handle.await;
        }
        self.agents.shutdown().await;
        self.resolve_open_approvals(crate::protocol::Resolution::Interrupted)
            .await;
        self.close_elicitations(crate::protocol::ElicitationAction::Cancel)
            .await;
        // Its MCP servers die with it.
        self.params.mcp.shutdown().await;
    }

    /// Sends an event to the client whose op is being handled, and to it only.
    async fn reply(&self, event: Event) {
        self.emitter.reply(self.origin, event).await;
    }

    async fn reply_error(&self, message: impl Into<String>) {
        self.reply(Event::error(message)).await;
    }

    async fn handle(&mut self, op: Op) -> Flow {
        match op {
            Op::UserMessage(input) => {
                self.advise_command_as_message(&input.content).await;
                self.submit(input).await;
            }
            Op::Command { input } => return self.command(&input).await,
            Op::SetModel {
                model,
                reasoning_effort,
            } => {
                let name = model.unwrap_or_else(|| self.model.full_name());
                self.switch_model(&name, reasoning_effort.as_deref()).await;
            }
            Op::ListModels => self.emit_model_view().await,
            Op::Sync { token } => self.reply(Event::Synced { token }).await,
            Op::Steer { index } => self.steer(index).await,
            Op::Unqueue { index } => self.unqueue(index).await,
            Op::Interrupt { index } => self.interrupt(index).await,
            Op::SetApprovalMode { mode } => self.apply_mode(mode).await,
            Op::SetSandboxMode { mode } => self.apply_sandbox_mode(mode).await,
            Op::SetSessionOption { id, .. } => {
                let message = format!(
                    "jucode's own engine has no session option {id}: set_session_option is for sessions of other engines"
                );
                self.reply_error(message).await;
            }
            Op::Approve(answer) => {
                self.approve(
                    &answer.call_id,
                    answer.decision,
                    answer.always,
                    answer.hunks,
                )
                .await
            }
            Op::SetAttended { attended } => self.set_attended(attended, false).await,
            Op::DecideAction { action, decision } => self.decide_action(&action, decision).await,
            Op::ApprovePlan(answer) => {
                self.approve_plan(&answer.id, answer.decision, answer.mode, answer.feedback)
                    .await
            }
            Op::AgentRuns => self.agent_runs().await,
            Op::SubagentTranscript { agent_id } => self.subagent_transcript(agent_id).await,
            Op::McpList => self.mcp_list().await,
            Op::McpSet {
                name,
                server,
                persist,
            } => self.mcp_set(&name, server, persist).await,
            Op::McpRemove { name } => self.mcp_remove(&name).await,
            Op::McpToggle { name, enabled } => self.mcp_toggle(&name, enabled).await,
            Op::McpLogin { name } => self.mcp_login(&name).await,
            Op::McpLogout { name } => self.mcp_logout(&name).await,
            Op::ElicitationResponse {
                id,
                action,
                content,
            } => self.elicitation_response(&id, action, content).await,
            Op::ClientCapabilities {
                read_text_file,
                write_text_file,
                terminal,
            } => {
                let capabilities = crate::engine::delegate::Capabilities {
                    read_text_file,
                    write_text_file,
                    terminal,
                };
                self.delegation.announce(self.origin, capabilities);
            }
            Op::ClientResponse { id, result, error } => {
                let answer = match (result, error) {
                    (_, Some(error)) => Err(error),
                    (Some(result), None) => Ok(result),
                    (None, None) => Ok(serde_json::Value::Null),
                };
                self.delegation.answer(&id, answer);
            }
            Op::Surface { .. } => self.reply_error(models::NO_TERMINAL).await,
            Op::TermInput { .. } | Op::TermResize { .. } => {
                self.reply_error("this session has no terminal: term_input and term_resize are for a hosted engine's TUI (surface terminal)").await;
            }
            Op::Shutdown => return Flow::Stop,
        }
        Flow::Continue
    }
}

impl Session {
    /// When an idle session with nobody attached unloads (daemon sessions only); `None`
    /// while anyone is attached or anything runs.
    fn idle_deadline(&mut self) -> Option<tokio::time::Instant> {
        let idle = self.params.idle_unload?;
        let quiet = self.clients_now == 0
            && self.turn.is_none()
            && self.queue.is_empty()
            && self.background == 0;
        if !quiet {
            self.idle_since = None;
            return None;
        }
        let since = *self
            .idle_since
            .get_or_insert_with(tokio::time::Instant::now);
        Some(since + idle)
    }

    /// What the next request would carry: a sum of the entries' cached counts plus the
    /// session's fixed part, so it costs nothing however long the conversation.
    /// The tokens the next request carries, and how they were counted: from the last
    /// request's real count plus an estimate of what came since, where the provider's
    /// usage is exact and that request's conversation is still the start of this one;
    /// else all estimated.
    fn context_tokens(&mut self) -> (u64, &'static str) {
        if self.model.context_from_usage {
            let measured = self.emitter.change(|shared| {
                let measured = shared.measured.clone()?;
                let conversation = shared.store.request();
                let at = conversation
                    .iter()
                    .position(|entry| entry.id == measured.tail)?;
                Some((measured, conversation[at + 1..].to_vec()))
            });
            if let Some((measured, since)) = measured
                && measured.provider == self.model.provider
                && measured.model == self.model.model
            {
                let added: u64 = since.iter().map(|entry| entry.tokens()).sum();
                return (measured.tokens + added, tokens::MEASURED);
            }
        }
        (self.estimated_tokens(), tokens::TOKENIZER)
    }

    fn estimated_tokens(&mut self) -> u64 {
        let base = match self.base_tokens {
            Some(base) => base,
            None => {
                let base = tokens::count_base(&self.system_prompt, &self.params.tools.specs());
                self.base_tokens = Some(base);
                base
            }
        };
        let conversation = self.emitter.change(|shared| shared.store.request());
        base + conversation.iter().map(|entry| entry.tokens()).sum::<u64>()
    }
}

/// A new session's metadata entry.
fn meta(params: &SessionParams, model: &ResolvedModel) -> SessionMeta {
    SessionMeta {
        id: params.session_id.clone(),
        cwd: params.cwd.clone(),
        model: model.full_name(),
        created: crate::engine::conversation::store::now_ms(),
        chat: params.chat,
        engine: None,
    }
}

/// Sleeps until `deadline`; never, without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The running turn's end; never, when no turn runs.
async fn turn_finished(
    turn: &mut Option<RunningTurn>,
) -> Result<TurnOutcome, tokio::task::JoinError> {
    match turn {
        Some(turn) => (&mut turn.handle).await,
        None => std::future::pending().await,
    }
}

/// The next change of the attached-client count; never, without a count to watch.
async fn client_count(clients: Option<&mut watch::Receiver<usize>>) -> Option<usize> {
    let Some(clients) = clients else {
        return std::future::pending().await;
    };
    clients.changed().await.ok()?;
    Some(*clients.borrow_and_update())
}
