//! A hosted session: the serve-protocol side of another agent. It owns what clients
//! see, whatever the agent: the queue, the running turn's cards, open approvals, the
//! conversation (kept in the session file as jucode's own sessions are), the startup
//! batch and late joiners' snapshots. The agent's driver only translates
//! ([`super::agent`]).

use std::collections::VecDeque;

use tokio::sync::{mpsc, watch};

use base64::Engine as _;

use super::agent::{
    Agent, Command, Event as AgentEvent, HistoryItem, Launch, MODE_OPTION, Settings, Started,
    TurnStop,
};
use super::terminal::{self, Report, Terminal};
use crate::engine::conversation::store::{EntryBody, Prepared, Store};
use crate::engine::{Input, Message, Outbound, Output, ToolCall};
use crate::protocol::{
    ApprovalMode, CallCard, ClientId, CommandInfo, Decision, Event, EventEncoder, EventLine,
    ModelState, ModelStatus, ModelViewEntry, Op, OpName, ReplyStop, Resolution, SessionOption,
    SessionStatus, Surface, TerminalView, ToolProviderView, UnqueuedEvent, UserInput,
};

/// What the session says about itself in its startup batch.
pub struct Identity {
    pub id: String,
    pub engine: String,
    pub kind: &'static str,
    pub profile_dir: String,
    pub config_path: String,
    pub cwd: std::path::PathBuf,
    pub provider: Option<ToolProviderView>,
}

struct OpenApproval {
    request: u64,
    call_id: String,
    event: Event,
}

/// The running turn.
#[derive(Default)]
struct Turn {
    /// The assistant message being streamed (flushed into the conversation at a tool
    /// call and at the turn's end).
    text: String,
    reasoning: String,
    started: bool,
    /// An `assistant_start` was sent for the message being streamed.
    message_open: bool,
    /// Open tool cards: id, name, card.
    tools: Vec<(String, String, CallCard)>,
    usage: Option<crate::protocol::TurnUsage>,
    /// An interrupt asked for this turn to stop.
    interrupted: bool,
}

pub struct Hosted {
    identity: Identity,
    launch: Launch,
    agent: Option<Agent>,
    started: Started,
    settings: Settings,
    commands: Vec<CommandInfo>,
    output: Output,
    encoder: EventEncoder,
    store: Store,
    queue: VecDeque<UserInput>,
    turn: Option<Turn>,
    approvals: Vec<OpenApproval>,
    status: SessionStatus,
    clients: watch::Receiver<usize>,
    /// The context as the agent last counted it: tokens, window, cost.
    context: (u64, u64, f64),
    /// A `set_session_option` waits for the agent's new options.
    options_asked: bool,
    /// The op being handled came from this client (answers go to it).
    asker: ClientId,
    /// Messages sent into the running turn, waiting for the agent to take them.
    steering: VecDeque<Steered>,
    /// Where the conversation is: here, or on the engine's TUI.
    surface: Place,
    /// The terminal sizes clients asked for, and who used the terminal last.
    sizes: Sizes,
}

/// Where a hosted session's conversation is (`surface`).
enum Place {
    Chat,
    /// `surface terminal` was asked during a turn: it moves when the turn ends.
    Asked,
    Terminal(Box<OnTerminal>),
}

/// The conversation on the engine's TUI.
struct OnTerminal {
    terminal: Terminal,
    /// The user messages the conversation had when it moved: the agent's history
    /// after as many is what was said in the TUI.
    known_users: usize,
    /// The TUI was asked to quit: killed at this instant if it has not.
    quit_by: Option<tokio::time::Instant>,
}

/// Every client's terminal size, and the client that used the terminal last, whose
/// size the terminal takes (tmux's `window-size latest`).
#[derive(Default)]
struct Sizes {
    /// Bounded: the oldest is forgotten first.
    by_client: VecDeque<(ClientId, (u16, u16))>,
    latest: Option<ClientId>,
}

/// Clients whose sizes are kept.
const SIZES_KEPT: usize = 64;

impl Sizes {
    fn of(&self, client: ClientId) -> Option<(u16, u16)> {
        self.by_client
            .iter()
            .find(|(id, _)| *id == client)
            .map(|(_, size)| *size)
    }

    fn set(&mut self, client: ClientId, size: (u16, u16)) {
        self.by_client.retain(|(id, _)| *id != client);
        if self.by_client.len() == SIZES_KEPT {
            self.by_client.pop_front();
        }
        self.by_client.push_back((client, size));
        self.latest = Some(client);
    }

    /// A client used the terminal: the size it wants, when that changes who leads.
    fn used(&mut self, client: ClientId) -> Option<(u16, u16)> {
        let size = self.of(client)?;
        (self.latest != Some(client)).then(|| {
            self.latest = Some(client);
            size
        })
    }

    fn current(&self) -> (u16, u16) {
        self.latest
            .and_then(|client| self.of(client))
            .unwrap_or(terminal::DEFAULT_SIZE)
    }
}

/// A message sent into the running turn ([`Command::Steer`]).
struct Steered {
    input: UserInput,
    prepared: crate::engine::PreparedInput,
}

impl Hosted {
    pub fn new(
        identity: Identity,
        launch: Launch,
        agent: Agent,
        started: Started,
        store: Store,
        clients: watch::Receiver<usize>,
        events: mpsc::Sender<Outbound>,
    ) -> Self {
        let settings = started.settings.clone();
        let commands = started.commands.clone().unwrap_or_default();
        Self {
            output: Output::new(&identity.id, events),
            encoder: EventEncoder::new(&identity.id),
            identity,
            launch,
            agent: Some(agent),
            started,
            settings,
            commands,
            store,
            queue: VecDeque::new(),
            turn: None,
            approvals: Vec::new(),
            status: SessionStatus::Ready,
            clients,
            context: (0, 0, 0.0),
            options_asked: false,
            asker: crate::engine::SOLE_CLIENT,
            steering: VecDeque::new(),
            surface: Place::Chat,
            sizes: Sizes::default(),
        }
    }

    pub async fn run(mut self, mut inputs: mpsc::Receiver<Input>, notices: Vec<String>) {
        if let Some(history) = self.started.history.take() {
            let known = self.user_messages();
            self.import(history, known);
        }
        for line in self.startup_batch() {
            let _ = self.output.sender().send(Outbound::Line(line)).await;
        }
        for notice in notices {
            self.output.info(notice).await;
        }
        self.output.emit(Event::status(SessionStatus::Ready)).await;
        loop {
            let agent = self.agent.as_mut();
            let event = async {
                match agent {
                    Some(agent) => agent.events.recv().await,
                    None => std::future::pending().await,
                }
            };
            let (report, quit_by) = match &mut self.surface {
                Place::Terminal(on) => (Some(&mut on.terminal), on.quit_by),
                _ => (None, None),
            };
            let report = async {
                match report {
                    Some(terminal) => terminal.report().await,
                    None => std::future::pending().await,
                }
            };
            let hung = async {
                match quit_by {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                report = report => self.terminal_report(report).await,
                () = hung => self.quit_timed_out().await,
                input = inputs.recv() => match input {
                    Some(input) => {
                        if !self.input(input).await {
                            break;
                        }
                    }
                    None => break,
                },
                event = event => match event {
                    Some(event) => self.agent_event(event).await,
                    None => {
                        self.agent = None;
                        self.agent_gone("the agent's driver stopped".to_owned()).await;
                    }
                },
            }
        }
        self.end().await;
    }

    /// The session ends: whatever is open is closed, the file made durable, the agent
    /// stopped (dropping it kills its process group).
    async fn end(&mut self) {
        if self.turn.is_some() {
            self.close_turn(Resolution::Interrupted).await;
        }
        self.store.journal().sync();
        self.store.journal().written().await;
        // The TUI's process group is killed with its terminal.
        self.surface = Place::Chat;
        self.agent = None;
    }

    /// False when the session is to end.
    async fn input(&mut self, input: Input) -> bool {
        match input {
            Input::Op { client, op } => {
                self.asker = client;
                return self.op(op).await;
            }
            Input::Malformed { client, message } => {
                self.output.reply(client, Event::error(message)).await;
            }
            Input::Snapshot { token } => {
                let lines = self.snapshot();
                let _ = self
                    .output
                    .sender()
                    .send(Outbound::Snapshot { token, lines })
                    .await;
            }
            Input::Barrier { token } => self.output.barrier(token).await,
        }
        true
    }

    async fn reply(&self, event: Event) {
        self.output.reply(self.asker, event).await;
    }

    async fn reply_error(&self, message: impl Into<String>) {
        self.reply(Event::error(message)).await;
    }

    fn what(&self) -> String {
        format!("engine {} ({})", self.identity.engine, self.identity.kind)
    }

    async fn op(&mut self, op: Op) -> bool {
        if matches!(self.surface, Place::Terminal(_)) && !terminal_allows(&op) {
            let name = OpName::from(&op).as_str();
            self.reply_error(format!(
                "the conversation is on {}'s TUI (surface terminal): type in the terminal, or send surface chat first ({name} is not available meanwhile)",
                self.identity.engine
            ))
            .await;
            return true;
        }
        match op {
            Op::Surface { to } => self.surface_to(to).await,
            Op::TermInput { data } => self.term_input(&data).await,
            Op::TermResize { cols, rows } => self.term_resize(cols, rows).await,
            Op::UserMessage(input) => self.user_message(input).await,
            Op::Command { input } => self.command(input).await,
            Op::Steer { index } => self.steer(index).await,
            Op::Unqueue { index } => {
                let Some(position) = crate::engine::queue_index(self.queue.len(), index) else {
                    return true;
                };
                if let Some(input) = self.queue.remove(position) {
                    self.emit_pending().await;
                    self.reply(Event::Unqueued(UnqueuedEvent {
                        content: input.content,
                        images: input.images,
                        files: input.files,
                    }))
                    .await;
                    self.queue_status().await;
                }
            }
            Op::Interrupt { index } => self.interrupt(index).await,
            Op::Approve(answer) => {
                let Some(position) = self
                    .approvals
                    .iter()
                    .position(|open| open.call_id == answer.call_id)
                else {
                    self.reply_error(format!(
                        "no approval is pending for call {}",
                        answer.call_id
                    ))
                    .await;
                    return true;
                };
                let open = self.approvals.remove(position);
                self.send(Command::Permission {
                    request: open.request,
                    decision: answer.decision,
                    always: answer.always,
                })
                .await;
                self.output
                    .emit(Event::ApprovalResolved {
                        call_id: open.call_id,
                        decision: answer.decision.into(),
                    })
                    .await;
            }
            Op::SetApprovalMode { mode } => self.set_approval_mode(mode).await,
            Op::SetSessionOption { id, value } => {
                let known = self.settings.options.iter().any(|option| option.id == id)
                    || (id == MODE_OPTION && !self.settings.modes.is_empty());
                if !known {
                    let ids: Vec<String> = self
                        .session_options_view()
                        .into_iter()
                        .map(|option| option.id)
                        .collect();
                    let message = format!(
                        "{} has no session option {id}; it has: {}",
                        self.what(),
                        if ids.is_empty() {
                            "none".to_owned()
                        } else {
                            ids.join(", ")
                        }
                    );
                    self.reply_error(message).await;
                    return true;
                }
                self.options_asked = true;
                self.send(Command::SetOption { id, value }).await;
            }
            Op::SetModel {
                model,
                reasoning_effort,
            } => self.set_model(model, reasoning_effort).await,
            Op::ListModels => self.reply(self.model_view()).await,
            Op::Sync { token } => self.reply(Event::Synced { token }).await,
            Op::Shutdown => return false,
            other => {
                let name = OpName::from(&other).as_str();
                self.reply_error(format!("{name} is not available on {}", self.what()))
                    .await;
            }
        }
        true
    }

    async fn send(&mut self, command: Command) {
        if let Some(agent) = &self.agent {
            let _ = agent.commands.send(command).await;
        }
    }

    async fn user_message(&mut self, input: UserInput) {
        if self.turn.is_some() {
            self.queue.push_back(input);
            self.emit_pending().await;
            self.queue_status().await;
            return;
        }
        self.start_turn(input).await;
    }

    async fn start_turn(&mut self, input: UserInput) {
        if self.agent.is_none() && !self.restart().await {
            return;
        }
        let prepared = crate::engine::prepare_input(input, self.identity.cwd.clone(), false).await;
        let (text, images) = self.message_of(&prepared).await;
        self.store.append(prepared.entry);
        self.output.emit(Event::UserMessage(prepared.shown)).await;
        self.turn = Some(Turn::default());
        self.set_status(SessionStatus::Streaming).await;
        self.output.emit(Event::Connecting).await;
        self.send(Command::Prompt { text, images }).await;
    }

    /// What the agent is sent of a prepared message: its text, and its images where it
    /// takes them (the notices about the rest go to every client).
    async fn message_of(
        &self,
        prepared: &crate::engine::PreparedInput,
    ) -> (String, Vec<crate::engine::ImageData>) {
        for notice in &prepared.notices {
            self.output.info(notice.clone()).await;
        }
        let (text, images) = match prepared.entry.body() {
            EntryBody::User {
                message: Message::User { text, images },
                ..
            } => (text.clone(), images.clone()),
            _ => (String::new(), Vec::new()),
        };
        if self.started.images || images.is_empty() {
            return (text, images);
        }
        self.output
            .info(format!(
                "{} takes no images: they were not sent",
                self.what()
            ))
            .await;
        (text, Vec::new())
    }

    /// `steer`: a queued message goes into the running turn where the agent can take
    /// one; it is the user's message once the agent has ([`AgentEvent::SteerTaken`]).
    async fn steer(&mut self, index: Option<i64>) {
        if self.turn.is_none() || self.queue.is_empty() {
            return;
        }
        if !self.started.steer {
            let message = format!(
                "{} cannot take a message into a running turn: it stays queued (interrupt with its index to send it now)",
                self.what()
            );
            self.reply_error(message).await;
            return;
        }
        let Some(position) = crate::engine::queue_index(self.queue.len(), index) else {
            return;
        };
        let Some(input) = self.queue.remove(position) else {
            return;
        };
        let prepared =
            crate::engine::prepare_input(input.clone(), self.identity.cwd.clone(), true).await;
        let (text, images) = self.message_of(&prepared).await;
        self.steering.push_back(Steered { input, prepared });
        self.emit_pending().await;
        self.set_status(SessionStatus::Steering).await;
        self.send(Command::Steer { text, images }).await;
    }

    /// The agent's answer to the oldest steer still waiting.
    async fn steer_taken(&mut self, taken: Result<(), String>) {
        let Some(steered) = self.steering.pop_front() else {
            return;
        };
        match taken {
            Ok(()) => {
                // What was said so far comes before it in the conversation.
                self.flush_message(None);
                if let Some(turn) = self.turn.as_mut() {
                    turn.message_open = false;
                }
                self.store.append(steered.prepared.entry);
                self.output
                    .emit(Event::UserMessage(steered.prepared.shown))
                    .await;
            }
            Err(why) => {
                self.output
                    .info(format!(
                        "{} did not take the message into its turn ({why}): it runs as the next turn",
                        self.what()
                    ))
                    .await;
                self.queue.push_front(steered.input);
                self.emit_pending().await;
            }
        }
        if self.turn.is_some() {
            self.queue_status().await;
        } else {
            self.start_next().await;
        }
    }

    /// Starts the agent again on its conversation (it crashed or was never up).
    async fn restart(&mut self) -> bool {
        self.restart_reading(false).await.is_some()
    }

    /// [`Self::restart`], the agent reading back its conversation when `history`; the
    /// history it read, if any (`Some(None)`: started, no history).
    async fn restart_reading(&mut self, history: bool) -> Option<Option<Vec<HistoryItem>>> {
        let mut launch = self.launch.clone();
        launch.load = Some(self.started.session.clone());
        launch.history = history;
        match super::start(launch).await {
            Ok((agent, started)) => {
                if let Some(why) = &started.not_loaded {
                    self.output
                        .info(format!(
                            "{} restarted on a new conversation: {why}",
                            self.what()
                        ))
                        .await;
                } else {
                    self.output
                        .info(format!("{} restarted on its conversation", self.what()))
                        .await;
                }
                self.agent = Some(agent);
                if let Some(commands) = &started.commands {
                    self.commands = commands.clone();
                }
                let mut started = started;
                let history = started.history.take();
                self.started = started.clone();
                self.settings_changed(started.settings).await;
                Some(history)
            }
            Err(err) => {
                self.output.error(format!("cannot restart {err}")).await;
                self.output.emit(Event::status(SessionStatus::Ready)).await;
                None
            }
        }
    }

    /// `surface` and `/terminal [chat]`.
    async fn surface_to(&mut self, to: Surface) {
        match (to, &mut self.surface) {
            (Surface::Terminal, Place::Chat) => {
                if self.launch.tui.is_none() {
                    let message = format!(
                        "{} has no TUI to move the conversation to (an acp engine has one when its [engines.{}] entry names a `tui` command)",
                        self.what(),
                        self.identity.engine
                    );
                    self.reply_error(message).await;
                    return;
                }
                if self.turn.is_some() || !self.steering.is_empty() {
                    self.surface = Place::Asked;
                    self.output
                        .info("the conversation moves to the terminal when the running turn ends")
                        .await;
                    return;
                }
                self.open_terminal().await;
            }
            (Surface::Terminal, _) => self.reply(self.surface_event()).await,
            (Surface::Chat, Place::Asked) => {
                self.surface = Place::Chat;
                self.output.info("the conversation stays here").await;
            }
            (Surface::Chat, Place::Chat) => self.reply(self.surface_event()).await,
            (Surface::Chat, Place::Terminal(on)) => {
                if on.quit_by.is_some() {
                    return;
                }
                let Some(tui) = &self.launch.tui else {
                    return;
                };
                // Asked as its user would; killed if it has not quit after the grace.
                on.quit_by = Some(tokio::time::Instant::now() + tui.grace);
                if let Err(why) = on.terminal.type_text(&tui.quit) {
                    tracing::debug!(%why, "could not type the TUI's quit keys");
                }
            }
        }
    }

    fn surface_event(&self) -> Event {
        match &self.surface {
            Place::Terminal(on) => {
                let (cols, rows) = on.terminal.size();
                Event::Surface {
                    surface: Surface::Terminal,
                    terminal: Some(TerminalView {
                        id: on.terminal.id.clone(),
                        cols,
                        rows,
                    }),
                }
            }
            _ => Event::Surface {
                surface: Surface::Chat,
                terminal: None,
            },
        }
    }

    async fn term_input(&mut self, data: &str) {
        let Place::Terminal(on) = &self.surface else {
            self.reply_error(
                "this session has no terminal open: term_input needs surface terminal first",
            )
            .await;
            return;
        };
        let bytes = match base64::engine::general_purpose::STANDARD.decode(data) {
            Ok(bytes) => bytes,
            Err(err) => {
                self.reply_error(format!("invalid term_input: data is not base64 ({err})"))
                    .await;
                return;
            }
        };
        if let Err(why) = on.terminal.write(bytes::Bytes::from(bytes)) {
            self.reply_error(why).await;
            return;
        }
        if let Some((cols, rows)) = self.sizes.used(self.asker) {
            self.resize_terminal(cols, rows).await;
        }
    }

    async fn term_resize(&mut self, cols: u16, rows: u16) {
        if cols == 0 || rows == 0 {
            self.reply_error("invalid term_resize: cols and rows must be at least 1")
                .await;
            return;
        }
        self.sizes.set(self.asker, terminal::clamp(cols, rows));
        let (cols, rows) = self.sizes.current();
        self.resize_terminal(cols, rows).await;
    }

    /// The terminal takes this size; every client is told when it changes.
    async fn resize_terminal(&mut self, cols: u16, rows: u16) {
        let Place::Terminal(on) = &mut self.surface else {
            return;
        };
        if on.terminal.resize(cols, rows) {
            self.output.emit(self.surface_event()).await;
        }
    }

    /// Moves the conversation to the TUI: the structured agent stops (one process owns
    /// a conversation at a time), the TUI starts on the same conversation.
    async fn open_terminal(&mut self) {
        self.surface = Place::Chat;
        let Some(tui) = self.launch.tui.clone() else {
            return;
        };
        let known_users = self.user_messages();
        let session = self.started.session.clone();
        self.stop_agent().await;
        let (cols, rows) = self.sizes.current();
        let spec = terminal::Spec {
            command: tui.command.clone(),
            args: tui
                .args
                .iter()
                .map(|arg| arg.replace("{session}", &session))
                .collect(),
            env: self.launch.env.clone(),
            cwd: self.launch.cwd.clone(),
            cols,
            rows,
        };
        match Terminal::start(spec) {
            Ok(terminal) => {
                self.surface = Place::Terminal(Box::new(OnTerminal {
                    terminal,
                    known_users,
                    quit_by: None,
                }));
                self.output.emit(self.surface_event()).await;
            }
            Err(why) => {
                // The agent starts again with the next message.
                self.output
                    .error(format!("{}: its TUI did not start: {why}", self.what()))
                    .await;
            }
        }
    }

    /// Stops the structured agent and waits until its driver (and so its process) is
    /// gone.
    async fn stop_agent(&mut self) {
        let Some(agent) = self.agent.take() else {
            return;
        };
        let Agent {
            commands,
            mut events,
        } = agent;
        drop(commands);
        let drained = async { while events.recv().await.is_some() {} };
        if tokio::time::timeout(std::time::Duration::from_secs(10), drained)
            .await
            .is_err()
        {
            tracing::warn!(engine = %self.identity.engine, "the agent's driver did not stop within 10 s");
        }
    }

    async fn terminal_report(&mut self, report: Option<Report>) {
        match report {
            Some(Report::Output(data)) => {
                let Place::Terminal(on) = &mut self.surface else {
                    return;
                };
                let seq = on.terminal.shown(&data);
                let id = on.terminal.id.clone();
                self.output
                    .emit(Event::TermOutput {
                        id,
                        seq,
                        data: base64::engine::general_purpose::STANDARD.encode(&data),
                    })
                    .await;
            }
            Some(Report::Exited(how)) => self.back_to_chat(&how).await,
            None => self.back_to_chat("closed its terminal").await,
        }
    }

    async fn quit_timed_out(&mut self) {
        let Place::Terminal(on) = &mut self.surface else {
            return;
        };
        on.quit_by = None;
        on.terminal.kill();
        let grace = self
            .launch
            .tui
            .as_ref()
            .map_or(super::DEFAULT_TUI_GRACE, |tui| tui.grace);
        self.output
            .info(format!(
                "{}'s TUI did not quit within {} ms: it was killed",
                self.identity.engine,
                grace.as_millis()
            ))
            .await;
    }

    /// The TUI is gone: the structured agent continues the conversation, reading back
    /// what was said in the TUI, and every client gets the fresh transcript.
    async fn back_to_chat(&mut self, how: &str) {
        let Place::Terminal(on) = std::mem::replace(&mut self.surface, Place::Chat) else {
            return;
        };
        let known_users = on.known_users;
        drop(on);
        self.output
            .info(format!("{}'s TUI {how}", self.identity.engine))
            .await;
        if let Some(Some(history)) = self.restart_reading(true).await {
            self.import(history, known_users);
        }
        self.output.emit(self.surface_event()).await;
        let items = self.store.transcript_items();
        self.output.emit_transcript(&items).await;
        self.start_next().await;
    }

    /// The user messages of the conversation's active branch.
    fn user_messages(&self) -> usize {
        self.store
            .branch()
            .iter()
            .filter(|entry| matches!(entry.body, EntryBody::User { .. }))
            .count()
    }

    /// What the agent's history has after the first `known_users` user messages: what
    /// was said in the TUI, into the conversation.
    fn import(&mut self, history: Vec<HistoryItem>, known_users: usize) {
        let mut users = 0;
        for item in history {
            match item {
                HistoryItem::User(text) => {
                    users += 1;
                    if users > known_users {
                        self.store.append(Prepared::new(EntryBody::User {
                            message: Message::User {
                                text: text.clone(),
                                images: Vec::new(),
                            },
                            shown: crate::protocol::UserMessageEvent {
                                content: text,
                                images: Vec::new(),
                                files: Vec::new(),
                            },
                            steered: false,
                        }));
                    }
                }
                HistoryItem::Assistant(text) if users > known_users => {
                    self.store
                        .append(Prepared::new(EntryBody::Assistant(Message::Assistant {
                            text,
                            reasoning: String::new(),
                            tool_calls: Vec::new(),
                            provider_items: None,
                        })));
                }
                HistoryItem::Assistant(_) => {}
            }
        }
        self.store.journal().sync();
    }

    async fn command(&mut self, input: String) {
        let trimmed = input.trim();
        let (name, args) = trimmed
            .split_once(char::is_whitespace)
            .map_or((trimmed, ""), |(name, args)| (name, args.trim()));
        if let Some(to) = crate::engine::commands::surface_target(trimmed) {
            return self.surface_to(to).await;
        }
        match name {
            "/model" if args.is_empty() => self.reply(self.model_view()).await,
            "/model" => {
                let (model, effort) = match args.split_once(char::is_whitespace) {
                    Some((model, effort)) => (model.to_owned(), Some(effort.trim().to_owned())),
                    None => (args.to_owned(), None),
                };
                self.set_model(Some(model), effort).await;
            }
            "/transcript" => {
                let items = self.store.transcript_items();
                self.output.reply_transcript(self.asker, &items).await;
            }
            // `/resume ID` never gets here: the daemon moves the client itself.
            "/resume" if args.is_empty() => self.resume_view().await,
            "/help" => {
                let mut text = format!("{} commands:", self.what());
                for command in self.command_list() {
                    text.push_str(&format!(
                        "\n{} {} {}",
                        command.command, command.args, command.description
                    ));
                }
                self.reply(Event::info(text)).await;
            }
            _ if self.commands.iter().any(|command| command.command == name) => {
                // The agent's own commands are prompts to it.
                self.user_message(UserInput::text(input)).await;
            }
            _ => {
                self.reply_error(format!(
                    "unknown command {name} on {}: /help lists them",
                    self.what()
                ))
                .await;
            }
        }
    }

    /// `/resume`: the profile's saved sessions, this directory's first, this one marked.
    async fn resume_view(&self) {
        let profile = std::path::PathBuf::from(&self.identity.profile_dir);
        let cwd = self.identity.cwd.clone();
        let listed =
            tokio::task::spawn_blocking(move || crate::sessions::list(&profile, Some(&cwd)))
                .await
                .unwrap_or_else(|err| Err(format!("internal error while listing: {err}")));
        let saved = match listed {
            Ok(saved) => saved,
            Err(message) => return self.reply_error(message).await,
        };
        let saved = saved
            .into_iter()
            .map(crate::engine::ports::library::Saved::from)
            .collect();
        let items = crate::engine::resume_items(saved, &self.identity.id);
        self.reply(Event::ResumeView { items }).await;
    }

    async fn set_model(&mut self, model: Option<String>, effort: Option<String>) {
        let mut asked = false;
        if let Some(model) = model {
            let Some((id, _)) = self.settings.model_option.clone() else {
                self.reply_error(format!(
                    "{} does not let a client choose its model",
                    self.what()
                ))
                .await;
                return;
            };
            // `provider/model` as jucode's own picker words it: the agent knows the model.
            let model = match model.split_once('/') {
                Some((provider, rest)) if provider == self.identity.engine => rest.to_owned(),
                _ => model,
            };
            self.send(Command::SetOption {
                id,
                value: serde_json::Value::String(model),
            })
            .await;
            asked = true;
        }
        if let Some(effort) = effort {
            let Some(id) = self.settings.effort_option.clone() else {
                self.reply_error(format!("{} takes no reasoning effort", self.what()))
                    .await;
                return;
            };
            self.send(Command::SetOption {
                id,
                value: serde_json::Value::String(effort),
            })
            .await;
            asked = true;
        }
        if !asked {
            self.reply(self.model_view()).await;
        }
    }

    async fn set_approval_mode(&mut self, mode: ApprovalMode) {
        let Some(id) = agent_mode(&self.settings.modes, mode) else {
            let modes: Vec<&str> = self
                .settings
                .modes
                .iter()
                .map(|m| m.value.as_str())
                .collect();
            let message = format!(
                "{} has no mode for {mode}; its modes: {} (set one with set_session_option {MODE_OPTION})",
                self.what(),
                if modes.is_empty() {
                    "none".to_owned()
                } else {
                    modes.join(", ")
                }
            );
            self.reply_error(message).await;
            return;
        };
        self.send(Command::SetMode(id)).await;
    }

    async fn interrupt(&mut self, index: Option<i64>) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        turn.interrupted = true;
        if let Some(position) = crate::engine::queue_index(self.queue.len(), index)
            && let Some(input) = self.queue.remove(position)
        {
            self.queue.push_front(input);
        }
        self.send(Command::Cancel).await;
    }

    async fn emit_pending(&self) {
        let messages = self.queue.iter().map(|m| m.content.clone()).collect();
        self.output.emit(Event::PendingMessages { messages }).await;
    }

    async fn queue_status(&mut self) {
        if self.turn.is_none() {
            return;
        }
        let status = match self.queue.len() {
            0 => SessionStatus::Streaming,
            n => SessionStatus::Queued(n),
        };
        self.set_status(status).await;
    }

    async fn set_status(&mut self, status: SessionStatus) {
        self.status = status.clone();
        self.output.emit(Event::status(status)).await;
    }

    async fn agent_event(&mut self, event: AgentEvent) {
        match event {
            AgentEvent::Settings(settings) => self.settings_changed(settings).await,
            // Agents announce their commands when they like, often again right after
            // the startup batch carried the same list: only a change is news.
            AgentEvent::Commands(commands) if commands == self.commands => {}
            AgentEvent::Commands(commands) => {
                self.commands = commands;
                let commands = self.command_list();
                self.output.emit(Event::CommandList { commands }).await;
            }
            AgentEvent::MessageBreak => {
                self.flush_message(None);
                if let Some(turn) = self.turn.as_mut() {
                    turn.message_open = false;
                }
            }
            AgentEvent::Text(text) => {
                let Some(turn) = self.turn_started().await else {
                    return;
                };
                let open = std::mem::replace(&mut turn.message_open, true);
                turn.text.push_str(&text);
                if !open {
                    self.output.emit(Event::AssistantStart).await;
                }
                self.output
                    .emit(Event::AssistantDelta { delta: text })
                    .await;
            }
            AgentEvent::Thought(text) => {
                let Some(turn) = self.turn_started().await else {
                    return;
                };
                turn.reasoning.push_str(&text);
                self.output
                    .emit(Event::ReasoningDelta { delta: text })
                    .await;
            }
            AgentEvent::ToolStart {
                call_id,
                name,
                arguments,
                card,
            } => {
                if self.turn_started().await.is_none() {
                    return;
                }
                let call = ToolCall {
                    id: call_id.clone(),
                    name: name.clone(),
                    arguments: arguments
                        .as_ref()
                        .map_or_else(|| "{}".to_owned(), ToString::to_string),
                };
                self.flush_message(Some(call));
                if let Some(turn) = self.turn.as_mut() {
                    turn.message_open = false;
                    turn.tools
                        .push((call_id.clone(), name.clone(), card.clone()));
                }
                self.output
                    .emit(Event::ToolStart {
                        call_id,
                        name,
                        arguments,
                        card,
                    })
                    .await;
            }
            AgentEvent::ToolUpdate { call_id, output } => {
                let Some(name) = self.open_tool(&call_id).map(|(_, name, _)| name.clone()) else {
                    return;
                };
                self.output
                    .emit(Event::ToolUpdate {
                        call_id,
                        name,
                        output,
                    })
                    .await;
            }
            AgentEvent::ToolDone {
                call_id,
                output,
                is_error,
            } => self.tool_done(call_id, output, is_error).await,
            AgentEvent::Permission {
                request,
                call_id,
                name,
                summary,
                hunks,
            } => {
                let event = Event::ApprovalRequest {
                    call_id: call_id.clone(),
                    name,
                    summary,
                    subagent_id: None,
                    hunks,
                };
                self.output.emit(event.clone()).await;
                if *self.clients.borrow() == 0 {
                    // Nobody can answer: the agent is told no rather than left waiting.
                    self.send(Command::Permission {
                        request,
                        decision: Decision::Deny,
                        always: false,
                    })
                    .await;
                    self.output
                        .emit(Event::ApprovalResolved {
                            call_id,
                            decision: Resolution::Deny,
                        })
                        .await;
                    return;
                }
                self.approvals.push(OpenApproval {
                    request,
                    call_id,
                    event,
                });
            }
            AgentEvent::PermissionWithdrawn { request } => {
                if let Some(position) = self
                    .approvals
                    .iter()
                    .position(|open| open.request == request)
                {
                    let open = self.approvals.remove(position);
                    self.output
                        .emit(Event::ApprovalResolved {
                            call_id: open.call_id,
                            decision: Resolution::Interrupted,
                        })
                        .await;
                }
            }
            AgentEvent::Plan(plan) => self.output.emit(Event::Plan { plan }).await,
            AgentEvent::Usage(usage) => {
                if let Some(turn) = self.turn.as_mut() {
                    turn.usage = Some(usage);
                }
            }
            AgentEvent::Context {
                tokens,
                window,
                cost,
            } => {
                let window_changed = window != 0 && window != self.context.1;
                self.context.0 = tokens;
                if window != 0 {
                    self.context.1 = window;
                }
                if let Some(cost) = cost {
                    self.context.2 = cost;
                }
                if window_changed {
                    self.output
                        .emit(Event::ModelStatus(self.model_status()))
                        .await;
                }
                self.output
                    .emit(Event::ContextUsage {
                        tokens,
                        tokenizer: self.identity.kind.to_owned(),
                        cost: self.context.2,
                    })
                    .await;
            }
            AgentEvent::Info(message) => self.output.info(message).await,
            AgentEvent::SteerTaken(taken) => self.steer_taken(taken).await,
            AgentEvent::TurnEnded(stop) => self.turn_ended(stop).await,
            AgentEvent::Exited(why) => {
                self.agent = None;
                self.agent_gone(why).await;
            }
        }
    }

    async fn agent_gone(&mut self, why: String) {
        self.approvals_resolved(Resolution::Interrupted).await;
        // Messages it never took are queued again, in their order.
        if !self.steering.is_empty() {
            while let Some(steered) = self.steering.pop_back() {
                self.queue.push_front(steered.input);
            }
            self.emit_pending().await;
        }
        if self.turn.is_some() {
            self.close_turn(Resolution::Interrupted).await;
            self.output
                .error(format!("{why}; the next message starts it again"))
                .await;
            self.set_status(SessionStatus::Ready).await;
            self.start_next().await;
        } else {
            self.output
                .error(format!("{why}; the next message starts it again"))
                .await;
        }
    }

    fn open_tool(&self, call_id: &str) -> Option<&(String, String, CallCard)> {
        self.turn
            .as_ref()?
            .tools
            .iter()
            .find(|(id, _, _)| id == call_id)
    }

    /// The running turn, after its `thinking_start` (sent before its first output).
    async fn turn_started(&mut self) -> Option<&mut Turn> {
        let first = !self.turn.as_ref()?.started;
        if first {
            self.output.emit(Event::ThinkingStart).await;
        }
        let turn = self.turn.as_mut()?;
        turn.started = true;
        Some(turn)
    }

    async fn tool_done(&mut self, call_id: String, output: String, is_error: bool) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let Some(position) = turn.tools.iter().position(|(id, _, _)| *id == call_id) else {
            return;
        };
        let (_, name, card) = turn.tools.remove(position);
        self.store
            .append(Prepared::new(EntryBody::ToolResult(Message::Tool {
                call_id: call_id.clone(),
                name: name.clone(),
                output: output.clone(),
                is_error,
                card,
            })));
        self.output
            .emit(Event::ToolOutput {
                call_id,
                name,
                output,
                is_error,
            })
            .await;
    }

    /// The streamed message (and the call that ends it) into the conversation.
    fn flush_message(&mut self, call: Option<ToolCall>) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if turn.text.is_empty() && turn.reasoning.is_empty() && call.is_none() {
            return;
        }
        let message = Message::Assistant {
            text: std::mem::take(&mut turn.text),
            reasoning: std::mem::take(&mut turn.reasoning),
            tool_calls: call.into_iter().collect(),
            provider_items: None,
        };
        self.store
            .append(Prepared::new(EntryBody::Assistant(message)));
    }

    /// Closes what the turn left open: the message, its cards, its questions.
    async fn close_turn(&mut self, cards: Resolution) {
        self.flush_message(None);
        let tools = self
            .turn
            .as_mut()
            .map(|turn| std::mem::take(&mut turn.tools))
            .unwrap_or_default();
        let why = match cards {
            Resolution::Interrupted => "interrupted",
            _ => "the engine ended the turn without finishing the call",
        };
        for (call_id, _, _) in tools {
            if let Some(turn) = self.turn.as_mut() {
                turn.tools
                    .push((call_id.clone(), String::new(), CallCard::default()));
            }
            self.tool_done(call_id, why.to_owned(), true).await;
        }
        self.approvals_resolved(Resolution::Interrupted).await;
        if let Some(usage) = self.turn.as_ref().and_then(|turn| turn.usage) {
            self.output.emit(Event::Usage(usage)).await;
        }
        self.turn = None;
        self.store.journal().sync();
    }

    async fn approvals_resolved(&mut self, decision: Resolution) {
        for open in std::mem::take(&mut self.approvals) {
            self.output
                .emit(Event::ApprovalResolved {
                    call_id: open.call_id,
                    decision,
                })
                .await;
        }
    }

    async fn turn_ended(&mut self, stop: TurnStop) {
        let Some(turn) = self.turn.as_ref() else {
            return;
        };
        let interrupted = turn.interrupted || stop == TurnStop::Cancelled;
        // A card still open at a turn's end was interrupted or left unfinished by the
        // agent: closed either way, so every `tool_start` has its `tool_output`.
        let cards = if interrupted {
            Resolution::Interrupted
        } else {
            Resolution::Deny
        };
        // The turn's message first, then the rest of what it closes.
        self.close_turn(cards).await;
        if interrupted {
            self.output.info("request interrupted").await;
            self.set_status(SessionStatus::Interrupted).await;
        } else {
            match stop {
                TurnStop::MaxTokens => {
                    self.output
                        .emit(Event::reply_stopped(ReplyStop::MaxTokens))
                        .await
                }
                TurnStop::Refusal => {
                    self.output
                        .emit(Event::reply_stopped(ReplyStop::Refusal))
                        .await
                }
                TurnStop::Failed(message) => self.output.error(message).await,
                TurnStop::EndTurn | TurnStop::Cancelled => {}
            }
            self.set_status(SessionStatus::Ready).await;
        }
        self.start_next().await;
    }

    async fn start_next(&mut self) {
        if self.turn.is_some() {
            return;
        }
        if matches!(self.surface, Place::Asked) {
            self.open_terminal().await;
        }
        if !matches!(self.surface, Place::Chat) {
            return;
        }
        if let Some(next) = self.queue.pop_front() {
            self.emit_pending().await;
            self.start_turn(next).await;
        }
    }

    async fn settings_changed(&mut self, settings: Settings) {
        let old = std::mem::replace(&mut self.settings, settings);
        if old.model != self.settings.model
            || old.effort != self.settings.effort
            || old.efforts != self.settings.efforts
        {
            self.output
                .emit(Event::ModelStatus(self.model_status()))
                .await;
        }
        if old.mode != self.settings.mode
            && let Some(mode) = self.approval_mode()
        {
            self.output.emit(Event::ApprovalMode { mode }).await;
        }
        let asked = std::mem::take(&mut self.options_asked);
        if asked || old.options != self.settings.options || old.mode != self.settings.mode {
            let options = self.session_options_view();
            self.output.emit(Event::SessionOptions { options }).await;
        }
    }

    fn approval_mode(&self) -> Option<ApprovalMode> {
        self.settings.mode.as_deref().and_then(approval_mode_of)
    }

    fn model_status(&self) -> ModelStatus {
        ModelStatus {
            provider: self.identity.engine.clone(),
            model: self
                .settings
                .model
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
            reasoning_effort: self.settings.effort.clone(),
            context_window: self.context.1,
            context_limit: self.context.1,
            max_output_tokens: 0,
            reasoning_efforts: self.settings.efforts.clone(),
            state: ModelState::Ready,
        }
    }

    fn model_view(&self) -> Event {
        let current = self
            .settings
            .model
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let mut models: Vec<ModelViewEntry> = self
            .settings
            .model_option
            .as_ref()
            .map(|(_, choices)| {
                choices
                    .iter()
                    .map(|choice| ModelViewEntry {
                        model: choice.value.clone(),
                        active: choice.value == current,
                        context_window: self.context.1,
                        max_output_tokens: 0,
                        reasoning_efforts: self.settings.efforts.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !models.iter().any(|entry| entry.active) {
            models.insert(
                0,
                ModelViewEntry {
                    model: current,
                    active: true,
                    context_window: self.context.1,
                    max_output_tokens: 0,
                    reasoning_efforts: self.settings.efforts.clone(),
                },
            );
        }
        Event::ModelView {
            models,
            active_effort: self.settings.effort.clone(),
        }
    }

    /// The agent's options, its modes among them when it has modes but no mode option.
    fn session_options_view(&self) -> Vec<SessionOption> {
        let mut options = self.settings.options.clone();
        let has_mode = options
            .iter()
            .any(|option| option.category.as_deref() == Some("mode"));
        if !has_mode && !self.settings.modes.is_empty() {
            options.insert(
                0,
                SessionOption {
                    id: MODE_OPTION.to_owned(),
                    name: "Mode".to_owned(),
                    description: None,
                    category: Some("mode".to_owned()),
                    kind: "select".to_owned(),
                    value: self
                        .settings
                        .mode
                        .clone()
                        .map_or(serde_json::Value::Null, serde_json::Value::String),
                    choices: self.settings.modes.clone(),
                },
            );
        }
        options
    }

    /// The agent's commands and the session's own.
    fn command_list(&self) -> Vec<CommandInfo> {
        // The session answers these itself, whatever the agent offers by those names.
        let own = [
            (
                "/model",
                "[MODEL [EFFORT]]",
                "Show or switch the agent's model",
            ),
            ("/transcript", "", "Show the conversation"),
            ("/resume", "", "List the saved sessions"),
            ("/help", "", "List the commands"),
        ];
        let mut list: Vec<CommandInfo> = self
            .commands
            .iter()
            .filter(|offered| !own.iter().any(|(name, _, _)| offered.command == *name))
            .cloned()
            .collect();
        for (command, args, description) in own {
            list.push(CommandInfo {
                command: command.to_owned(),
                marker: None,
                args: args.to_owned(),
                description: description.to_owned(),
            });
        }
        if self.launch.tui.is_some() {
            let terminal = crate::engine::commands::terminal_command();
            list.retain(|offered| offered.command != terminal.command);
            list.push(terminal);
        }
        list
    }

    fn engine_caps(&self) -> Event {
        Event::EngineCaps {
            engine: self.identity.engine.clone(),
            kind: self.identity.kind.to_owned(),
            agent: self.started.agent.clone(),
            images: self.started.images,
            steer: self.started.steer,
            resume: self.started.resume,
            capabilities: self.started.capabilities.clone(),
        }
    }

    /// `startup`, `model_status`, `command_list`, `approval_mode`, then what only
    /// hosted sessions say: `engine_caps`, `session_options`, `tool_provider`.
    fn startup_batch(&self) -> Vec<EventLine> {
        let status = self.model_status();
        let mut events = vec![
            Event::Startup {
                version: env!("CARGO_PKG_VERSION").to_owned(),
                session_id: self.identity.id.clone(),
                profile_dir: self.identity.profile_dir.clone(),
                config_path: self.identity.config_path.clone(),
                cwd: self.identity.cwd.display().to_string(),
                model: format!("{}/{}", status.provider, status.model),
                context_window: status.context_window,
                sandbox: None,
            },
            Event::ModelStatus(status),
            Event::CommandList {
                commands: self.command_list(),
            },
            Event::ApprovalMode {
                mode: self.approval_mode().unwrap_or(ApprovalMode::Manual),
            },
            self.engine_caps(),
            Event::SessionOptions {
                options: self.session_options_view(),
            },
            Event::ToolProvider {
                provider: self.identity.provider.clone(),
            },
        ];
        if self.context.1 != 0 {
            events.push(Event::ContextUsage {
                tokens: self.context.0,
                tokenizer: self.identity.kind.to_owned(),
                cost: self.context.2,
            });
        }
        events
            .iter()
            .map(|event| self.encoder.encode(event))
            .collect()
    }

    /// What a client attaching now needs: the startup batch, the conversation, the
    /// queue, the running turn's message and cards, the open questions, the status.
    fn snapshot(&self) -> Vec<EventLine> {
        let mut lines = self.startup_batch();
        let items = self.store.transcript_items();
        lines.extend(self.encoder.transcript(&items));
        let mut events = Vec::new();
        if !self.queue.is_empty() {
            events.push(Event::PendingMessages {
                messages: self.queue.iter().map(|m| m.content.clone()).collect(),
            });
        }
        if let Some(turn) = &self.turn {
            if !turn.reasoning.is_empty() {
                events.push(Event::ReasoningDelta {
                    delta: turn.reasoning.clone(),
                });
            }
            if !turn.text.is_empty() {
                events.push(Event::AssistantStart);
                events.push(Event::AssistantDelta {
                    delta: turn.text.clone(),
                });
            }
            for (call_id, name, card) in &turn.tools {
                events.push(Event::ToolStart {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    arguments: None,
                    card: card.clone(),
                });
            }
        }
        events.extend(self.approvals.iter().map(|open| open.event.clone()));
        events.push(Event::status(self.status.clone()));
        if let Place::Terminal(on) = &self.surface {
            let terminal = &on.terminal;
            let (cols, rows) = terminal.size();
            events.push(self.surface_event());
            events.push(Event::TermSnapshot {
                id: terminal.id.clone(),
                seq: terminal.seq(),
                cols,
                rows,
                screen: base64::engine::general_purpose::STANDARD.encode(terminal.repaint()),
            });
        }
        lines.extend(events.iter().map(|event| self.encoder.encode(event)));
        lines
    }
}

/// The ops a session on its TUI still takes: the terminal's, and those that only read.
fn terminal_allows(op: &Op) -> bool {
    match op {
        Op::Surface { .. }
        | Op::TermInput { .. }
        | Op::TermResize { .. }
        | Op::ListModels
        | Op::Sync { .. }
        | Op::Unqueue { .. }
        | Op::Shutdown => true,
        Op::Command { input } => {
            let name = input.split_whitespace().next().unwrap_or_default();
            matches!(name, "/terminal" | "/transcript" | "/help" | "/resume")
        }
        _ => false,
    }
}

/// The agent mode that stands for a jucode approval mode: its own id, or the name
/// Claude Code's modes (and agents built on it) use.
fn agent_mode(modes: &[crate::protocol::OptionChoice], mode: ApprovalMode) -> Option<String> {
    let wanted: &[&str] = match mode {
        ApprovalMode::Manual => &["manual", "default", "ask"],
        ApprovalMode::Plan => &["plan", "read-only"],
        ApprovalMode::AutoEdit => &["auto-edit", "acceptEdits", "accept-edits"],
        ApprovalMode::Auto => &["auto", "dontAsk"],
        ApprovalMode::FullAccess => &["full-access", "bypassPermissions", "yolo"],
    };
    wanted.iter().find_map(|id| {
        modes
            .iter()
            .find(|choice| choice.value == *id)
            .map(|choice| choice.value.clone())
    })
}

fn approval_mode_of(mode: &str) -> Option<ApprovalMode> {
    ApprovalMode::ALL.into_iter().find(|candidate| {
        agent_mode(
            &[crate::protocol::OptionChoice {
                value: mode.to_owned(),
                name: String::new(),
            }],
            *candidate,
        )
        .is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::OptionChoice;

    fn modes(ids: &[&str]) -> Vec<OptionChoice> {
        ids.iter()
            .map(|id| OptionChoice {
                value: (*id).to_owned(),
                name: (*id).to_owned(),
            })
            .collect()
    }

    #[test]
    fn approval_modes_map_onto_agent_modes_both_ways() {
        let claude = modes(&[
            "default",
            "acceptEdits",
            "plan",
            "dontAsk",
            "bypassPermissions",
        ]);
        assert_eq!(
            agent_mode(&claude, ApprovalMode::AutoEdit).as_deref(),
            Some("acceptEdits")
        );
        assert_eq!(
            agent_mode(&claude, ApprovalMode::FullAccess).as_deref(),
            Some("bypassPermissions")
        );
        let jucode = modes(&["manual", "plan", "auto-edit", "auto", "full-access"]);
        assert_eq!(
            agent_mode(&jucode, ApprovalMode::Auto).as_deref(),
            Some("auto")
        );
        assert_eq!(agent_mode(&modes(&["chat"]), ApprovalMode::Plan), None);
        assert_eq!(
            approval_mode_of("acceptEdits"),
            Some(ApprovalMode::AutoEdit)
        );
        assert_eq!(approval_mode_of("default"), Some(ApprovalMode::Manual));
        assert_eq!(approval_mode_of("something"), None);
    }

    #[test]
    fn the_terminal_takes_the_size_of_the_client_that_used_it_last() {
        let mut sizes = Sizes::default();
        assert_eq!(sizes.current(), terminal::DEFAULT_SIZE);
        sizes.set(1, (100, 30));
        sizes.set(2, (80, 20));
        assert_eq!(sizes.current(), (80, 20));
        // Input from client 1 brings the terminal back to its size; again, no change.
        assert_eq!(sizes.used(1), Some((100, 30)));
        assert_eq!(sizes.used(1), None);
        assert_eq!(sizes.current(), (100, 30));
        // A client that never said its size does not decide.
        assert_eq!(sizes.used(3), None);
        assert_eq!(sizes.current(), (100, 30));
        for client in 10..10 + SIZES_KEPT as u64 {
            sizes.set(client, (50, 10));
        }
        assert_eq!(sizes.by_client.len(), SIZES_KEPT);
        assert_eq!(sizes.of(1), None);
    }
}
