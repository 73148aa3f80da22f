//! The driver of Codex (`kind = "codex"`): `codex app-server`, JSON-RPC on its stdio
//! (its messages leave out the `jsonrpc` member). One app server runs one thread:
//! `thread/start` opens it (the thread id is the hosted session's id), `thread/resume`
//! continues it, each message is a `turn/start`, and a message sent into a running
//! turn is a `turn/steer`. Its notifications are read leniently: an item type, a
//! notification or a field this driver does not know is skipped, since Codex adds them
//! with most releases.
//!
//! Approval policy and sandbox are Codex's own: the modes this driver offers are pairs
//! of them, sent with every `turn/start` (Codex keeps them for the turns after).

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::agent::{Agent, Command, Event, HistoryItem, Launch, Settings, Started, TurnStop};
use super::child::{self, Failure};
use super::rpc::{self, CallError, Incoming, Rpc};
use crate::mcp::process::{self, Group, StderrTail};
use crate::protocol::jsonrpc::{self, RpcError, RpcId};
use crate::protocol::{
    CallCard, CallKind, Decision, OptionChoice, PlanStep, SessionOption, StepStatus, TurnUsage,
};

/// The modes offered: an id (jucode's approval mode names where one fits, so
/// `set_approval_mode` finds them), a label, Codex's approval policy and sandbox.
const MODES: [(&str, &str, &str, &str); 5] = [
    ("read-only", "Read only", "on-request", "read-only"),
    (
        "manual",
        "Ask before untrusted commands",
        "untrusted",
        "workspace-write",
    ),
    (
        "auto-edit",
        "Sandboxed, ask to leave it",
        "on-request",
        "workspace-write",
    ),
    ("auto", "Sandboxed, never ask", "never", "workspace-write"),
    ("full-access", "Full access", "never", "danger-full-access"),
];

/// Codex's default pair (`on-request` in a writable workspace).
const DEFAULT_MODE: &str = "auto-edit";

const MODEL_OPTION: &str = "model";
const EFFORT_OPTION: &str = "effort";
/// Whether commands in a writable sandbox may reach the network.
const NETWORK_OPTION: &str = "network";

/// Starts `codex app-server` and opens its thread. `Err` says what failed, naming the
/// command.
pub async fn start(launch: Launch) -> Result<(Agent, Started), String> {
    let what = child::describe(&launch);
    let mut args = vec!["app-server".to_owned()];
    if let Some(route) = &launch.provider {
        args.extend(route.args.iter().cloned());
    }
    args.extend(launch.args.iter().cloned());
    let spawned = process::spawn(&launch.command, &args, &launch.env, &launch.cwd)
        .map_err(|err| format!("{what}: {err}"))?;
    let process::Spawned {
        child,
        stdin,
        stdout,
        group,
        stderr,
    } = spawned;
    let (rpc, mut incoming) = rpc::connect(stdin, stdout, jsonrpc::Version::Optional);
    let opened =
        tokio::time::timeout(launch.startup, open_thread(&rpc, &mut incoming, &launch)).await;
    let failure = match opened {
        Ok(Ok((started, state))) => {
            let (commands, commands_rx) = mpsc::channel(64);
            let (events_tx, events) = mpsc::channel(1024);
            let (answers, answers_rx) = mpsc::channel(64);
            let driver = Driver {
                rpc,
                thread: started.session.clone(),
                settings: started.settings.clone(),
                state,
                events: events_tx,
                answers,
                asked: HashMap::new(),
                next_permission: 1,
                turn: None,
                running: false,
                cancel_asked: false,
                tools: HashMap::new(),
                streamed: HashSet::new(),
                usage: TurnUsage::default(),
                failure: None,
                what,
            };
            tokio::spawn(driver.run(commands_rx, incoming, answers_rx, child, group, stderr));
            return Ok((Agent { commands, events }, started));
        }
        Ok(Err(failure)) => failure,
        Err(_) => Failure::Other(format!(
            "did not answer `initialize` and open a thread within {} s",
            launch.startup.as_secs_f64()
        )),
    };
    Err(child::abandon(child, group, stderr, &what, failure).await)
}

/// What the next `turn/start` sends besides the input: Codex keeps each for the turns
/// after, so they are what the session shows.
#[derive(Debug, Clone)]
struct TurnState {
    mode: String,
    network: bool,
    model: Option<String>,
    effort: Option<String>,
    /// The efforts each model offers, for the effort option when the model changes.
    efforts: HashMap<String, Vec<String>>,
}

impl TurnState {
    fn mode_entry(&self) -> (&'static str, &'static str, &'static str, &'static str) {
        MODES
            .iter()
            .copied()
            .find(|(id, ..)| *id == self.mode)
            .unwrap_or(MODES[2])
    }

    fn approval_policy(&self) -> &'static str {
        self.mode_entry().2
    }

    /// `turn/start`'s sandbox policy, an object (`thread/start` takes the short name).
    fn sandbox_policy(&self) -> Value {
        match self.mode_entry().3 {
            "read-only" => json!({"type": "readOnly"}),
            "danger-full-access" => json!({"type": "dangerFullAccess"}),
            _ => json!({"type": "workspaceWrite", "networkAccess": self.network}),
        }
    }

    fn settings(&self, models: &[OptionChoice]) -> Settings {
        let efforts = self
            .model
            .as_ref()
            .and_then(|model| self.efforts.get(model))
            .cloned()
            .unwrap_or_default();
        Settings {
            model: self.model.clone(),
            model_option: Some((MODEL_OPTION.to_owned(), models.to_vec())),
            effort: self.effort.clone(),
            effort_option: Some(EFFORT_OPTION.to_owned()),
            efforts,
            mode: Some(self.mode.clone()),
            modes: MODES
                .iter()
                .map(|(id, name, ..)| OptionChoice {
                    value: (*id).to_owned(),
                    name: (*name).to_owned(),
                })
                .collect(),
            options: vec![SessionOption {
                id: NETWORK_OPTION.to_owned(),
                name: "Network in the sandbox".to_owned(),
                description: Some(
                    "Whether sandboxed commands may reach the network (writable-workspace modes)"
                        .to_owned(),
                ),
                category: None,
                kind: "boolean".to_owned(),
                value: Value::Bool(self.network),
                choices: Vec::new(),
            }],
        }
    }
}

/// `initialize`, the thread (resumed when asked and Codex still has it, new otherwise)
/// and the models Codex offers.
async fn open_thread(
    rpc: &Rpc,
    incoming: &mut mpsc::Receiver<Incoming>,
    launch: &Launch,
) -> Result<(Started, TurnState), Failure> {
    let init = call_draining(
        rpc,
        incoming,
        "initialize",
        json!({
            "clientInfo": {"name": "jucode", "title": "jucode", "version": env!("CARGO_PKG_VERSION")},
            "capabilities": {"experimentalApi": true}
        }),
    )
    .await
    .map_err(|err| failed("initialize", err))?;
    rpc.notify("initialized", json!({})).await;
    let agent = init
        .get("userAgent")
        .and_then(Value::as_str)
        .and_then(|agent| agent.split(' ').next())
        .and_then(|agent| agent.split('/').nth(1))
        .map(|version| format!("Codex {version}"));

    let mode = launch
        .default_mode
        .clone()
        .filter(|mode| MODES.iter().any(|(id, ..)| id == mode))
        .unwrap_or_else(|| DEFAULT_MODE.to_owned());
    let mut state = TurnState {
        mode,
        network: launch
            .default_config_options
            .get(NETWORK_OPTION)
            .is_some_and(|value| value == "true"),
        model: launch.default_config_options.get(MODEL_OPTION).cloned(),
        effort: launch.default_config_options.get(EFFORT_OPTION).cloned(),
        efforts: HashMap::new(),
    };
    let mut params = json!({
        "cwd": launch.cwd.display().to_string(),
        "approvalPolicy": state.approval_policy(),
        "sandbox": state.mode_entry().3,
    });
    if let Some(model) = &state.model {
        params["model"] = json!(model);
    }
    // The provider is named on every open: Codex ignores a configured default for
    // threads its app server starts, and a resumed thread needs its definition again.
    if let Some(route) = &launch.provider {
        params["modelProvider"] = json!(route.id);
    }
    let mut not_loaded = None;
    let mut opened = None;
    if let Some(thread) = &launch.load {
        let mut resume = params.clone();
        resume["threadId"] = json!(thread);
        resume["excludeTurns"] = json!(!launch.history);
        match call_draining(rpc, incoming, "thread/resume", resume).await {
            Ok(result) => opened = Some(result),
            Err(CallError::Gone) => return Err(failed("thread/resume", CallError::Gone)),
            Err(err) => not_loaded = Some(format!("Codex could not resume its thread: {err}")),
        }
    }
    let result = match opened {
        Some(result) => result,
        None => call_draining(rpc, incoming, "thread/start", params)
            .await
            .map_err(|err| failed("thread/start", err))?,
    };
    let thread = result
        .pointer("/thread/id")
        .and_then(Value::as_str)
        .ok_or(Failure::from("answered thread/start without a thread id"))?
        .to_owned();
    if let Some(model) = result.get("model").and_then(Value::as_str) {
        state.model = Some(model.to_owned());
    }
    if let Some(effort) = result.get("reasoningEffort").and_then(Value::as_str) {
        state.effort = Some(effort.to_owned());
    }
    if let Some(mode) = mode_of(&result) {
        state.mode = mode.to_owned();
    }
    // The model list is a nicety: a Codex that cannot give one still runs.
    let models = match call_draining(rpc, incoming, "model/list", json!({})).await {
        Ok(list) => read_models(&list, &mut state.efforts),
        Err(CallError::Gone) => return Err(Failure::Closed),
        Err(_) => Vec::new(),
    };
    let settings = state.settings(&models);
    let started = Started {
        session: thread,
        agent,
        capabilities: json!({
            "codex": {
                "platformOs": init.get("platformOs").cloned().unwrap_or(Value::Null),
                "codexHome": init.get("codexHome").cloned().unwrap_or(Value::Null),
                "modelProvider": result.get("modelProvider").cloned().unwrap_or(Value::Null),
            }
        }),
        images: true,
        steer: true,
        resume: true,
        settings,
        history: (launch.load.is_some() && launch.history && not_loaded.is_none())
            .then(|| history_of(&result)),
        not_loaded,
        commands: Some(Vec::new()),
    };
    Ok((started, state))
}

/// The user messages and replies of a resumed thread's turns (`thread.turns[].items`).
fn history_of(result: &Value) -> Vec<HistoryItem> {
    let mut items = Vec::new();
    let turns = result
        .pointer("/thread/turns")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for item in turns
        .iter()
        .filter_map(|turn| turn.get("items").and_then(Value::as_array))
        .flatten()
    {
        match item.get("type").and_then(Value::as_str) {
            Some("userMessage") => {
                let text: Vec<&str> = item
                    .get("content")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect();
                if !text.is_empty() {
                    items.push(HistoryItem::User(text.join("\n")));
                }
            }
            Some("agentMessage") => {
                if let Some(text) = item.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    items.push(HistoryItem::Assistant(text.to_owned()));
                }
            }
            _ => {}
        }
    }
    items
}

/// The mode whose policy and sandbox a thread's answer names.
fn mode_of(result: &Value) -> Option<&'static str> {
    let policy = result.get("approvalPolicy")?.as_str()?;
    let sandbox = match result.pointer("/sandbox/type").and_then(Value::as_str)? {
        "readOnly" => "read-only",
        "dangerFullAccess" => "danger-full-access",
        _ => "workspace-write",
    };
    MODES
        .iter()
        .find(|(_, _, mode_policy, mode_sandbox)| {
            *mode_policy == policy && *mode_sandbox == sandbox
        })
        .map(|(id, ..)| *id)
}

/// `model/list`'s models as choices, and each one's efforts.
fn read_models(list: &Value, efforts: &mut HashMap<String, Vec<String>>) -> Vec<OptionChoice> {
    let Some(models) = list.get("data").and_then(Value::as_array) else {
        return Vec::new();
    };
    models
        .iter()
        .filter(|model| model.get("hidden").and_then(Value::as_bool) != Some(true))
        .filter_map(|model| {
            let id = model.get("model").or(model.get("id"))?.as_str()?;
            let name = model
                .get("displayName")
                .and_then(Value::as_str)
                .unwrap_or(id);
            let offered: Vec<String> = model
                .get("supportedReasoningEfforts")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|effort| effort.get("reasoningEffort")?.as_str())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            efforts.insert(id.to_owned(), offered);
            Some(OptionChoice {
                value: id.to_owned(),
                name: name.to_owned(),
            })
        })
        .collect()
}

fn failed(method: &str, err: CallError) -> Failure {
    match err {
        CallError::Gone => Failure::Closed,
        CallError::Rpc(err) => {
            Failure::Other(format!("failed {method}: {} ({})", err.message, err.code))
        }
    }
}

/// A request made before the thread is up: what Codex says meanwhile (warnings about
/// its setup, the thread's own notices) is not yet the session's, only the log's.
async fn call_draining(
    rpc: &Rpc,
    incoming: &mut mpsc::Receiver<Incoming>,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    rpc.call_draining(incoming, method, params, |method, params| {
        tracing::debug!(%method, %params, "Codex said while starting");
    })
    .await
}

/// What a permission request was, for the answer's shape.
enum Asked {
    Command {
        id: RpcId,
        /// `availableDecisions`, when Codex listed them.
        decisions: Option<Vec<Value>>,
    },
    FileChange {
        id: RpcId,
    },
    Permissions {
        id: RpcId,
        requested: Value,
    },
}

impl Asked {
    fn id(&self) -> &RpcId {
        match self {
            Asked::Command { id, .. }
            | Asked::FileChange { id }
            | Asked::Permissions { id, .. } => id,
        }
    }
}

/// Answers to the driver's own requests, made without holding up its loop.
enum Answer {
    TurnStarted(Result<Value, CallError>),
    Steered(Result<Value, CallError>),
    Interrupted(Result<Value, CallError>),
}

struct Driver {
    rpc: Rpc,
    thread: String,
    settings: Settings,
    state: TurnState,
    events: mpsc::Sender<Event>,
    answers: mpsc::Sender<Answer>,
    asked: HashMap<u64, Asked>,
    next_permission: u64,
    /// The running turn's id, once Codex has given it.
    turn: Option<String>,
    /// A turn was asked for and has not completed.
    running: bool,
    /// An interrupt came before the turn's id did.
    cancel_asked: bool,
    /// Open tool cards, by item id.
    tools: HashMap<String, String>,
    /// Agent messages whose text came as deltas (their completed item repeats it).
    streamed: HashSet<String>,
    /// The turn's usage: the sum of each model request's.
    usage: TurnUsage,
    /// Why the turn failed, from an `error` notification that precedes its end.
    failure: Option<String>,
    what: String,
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut incoming: mpsc::Receiver<Incoming>,
        mut answers: mpsc::Receiver<Answer>,
        child: tokio::process::Child,
        group: Group,
        stderr: StderrTail,
    ) {
        loop {
            tokio::select! {
                biased;
                message = incoming.recv() => match message {
                    Some(Incoming::Notification { method, params }) => {
                        self.notification(&method, params).await;
                    }
                    Some(Incoming::Request { id, method, params }) => {
                        self.request(id, &method, params).await;
                    }
                    None => {
                        let why = child::gone(child, &group, &stderr, &self.what).await;
                        let _ = self.events.send(Event::Exited(why)).await;
                        return;
                    }
                },
                Some(answer) = answers.recv() => self.answer(answer).await,
                command = commands.recv() => match command {
                    Some(command) => self.command(command).await,
                    // The session is gone, or moves to the TUI: so is Codex.
                    None => break,
                },
            }
        }
        child::stop(child, group).await;
    }

    async fn emit(&self, event: Event) {
        let _ = self.events.send(event).await;
    }

    /// Sends a request whose answer comes back through [`Answer`].
    async fn call_later(
        &self,
        method: &str,
        params: Value,
        answer: fn(Result<Value, CallError>) -> Answer,
    ) {
        let reply = self.rpc.send_call(method, params).await;
        let answers = self.answers.clone();
        tokio::spawn(async move {
            let result = match reply.await {
                Ok(result) => result.map_err(CallError::Rpc),
                Err(_) => Err(CallError::Gone),
            };
            let _ = answers.send(answer(result)).await;
        });
    }

    fn input(text: String, images: Vec<crate::engine::ImageData>) -> Value {
        let mut input = vec![json!({"type": "text", "text": text})];
        for image in images {
            input.push(json!({
                "type": "image",
                "url": format!("data:{};base64,{}", image.mime, image.base64),
            }));
        }
        Value::Array(input)
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Prompt { text, images } => {
                let mut params = json!({
                    "threadId": self.thread,
                    "input": Self::input(text, images),
                    "approvalPolicy": self.state.approval_policy(),
                    "sandboxPolicy": self.state.sandbox_policy(),
                });
                if let Some(model) = &self.state.model {
                    params["model"] = json!(model);
                }
                if let Some(effort) = &self.state.effort {
                    params["effort"] = json!(effort);
                }
                self.running = true;
                self.turn = None;
                self.cancel_asked = false;
                self.usage = TurnUsage::default();
                self.failure = None;
                self.call_later("turn/start", params, Answer::TurnStarted)
                    .await;
            }
            Command::Steer { text, images } => {
                let Some(turn) = self.turn.clone() else {
                    let why = "the turn has not started yet".to_owned();
                    self.emit(Event::SteerTaken(Err(why))).await;
                    return;
                };
                let params = json!({
                    "threadId": self.thread,
                    "expectedTurnId": turn,
                    "input": Self::input(text, images),
                });
                self.call_later("turn/steer", params, Answer::Steered).await;
            }
            Command::Cancel => {
                if !self.running {
                    return;
                }
                match self.turn.clone() {
                    Some(turn) => self.interrupt(&turn).await,
                    None => self.cancel_asked = true,
                }
            }
            Command::Permission {
                request,
                decision,
                always,
            } => {
                let Some(asked) = self.asked.remove(&request) else {
                    return;
                };
                let answer = decision_for(&asked, decision, always);
                self.rpc.respond(asked.id(), answer).await;
            }
            Command::SetMode(mode) => {
                if MODES.iter().any(|(id, ..)| *id == mode) {
                    self.state.mode = mode;
                    self.settings_changed().await;
                } else {
                    let ids: Vec<&str> = MODES.iter().map(|(id, ..)| *id).collect();
                    self.emit(Event::Info(format!(
                        "Codex has no mode {mode}; its modes: {}",
                        ids.join(", ")
                    )))
                    .await;
                    self.settings_changed().await;
                }
            }
            Command::SetOption { id, value } => {
                match id.as_str() {
                    super::agent::MODE_OPTION => {
                        if let Some(mode) = value.as_str() {
                            Box::pin(self.command(Command::SetMode(mode.to_owned()))).await;
                        }
                        return;
                    }
                    MODEL_OPTION => match value.as_str() {
                        Some(model) => {
                            let model = model.to_owned();
                            // An effort the new model does not offer would fail the
                            // next turn: its own default is taken instead.
                            if let Some(offered) = self.state.efforts.get(&model)
                                && let Some(effort) = &self.state.effort
                                && !offered.contains(effort)
                            {
                                self.state.effort = None;
                            }
                            self.state.model = Some(model);
                        }
                        None => self.refuse(&id, &value, "a model name").await,
                    },
                    EFFORT_OPTION => match value.as_str() {
                        Some(effort) => self.state.effort = Some(effort.to_owned()),
                        None => self.refuse(&id, &value, "an effort name").await,
                    },
                    NETWORK_OPTION => match value.as_bool().or_else(|| match value.as_str() {
                        Some("true") => Some(true),
                        Some("false") => Some(false),
                        _ => None,
                    }) {
                        Some(network) => self.state.network = network,
                        None => self.refuse(&id, &value, "true or false").await,
                    },
                    _ => {
                        self.emit(Event::Info(format!("Codex has no option {id}")))
                            .await
                    }
                }
                self.settings_changed().await;
            }
        }
    }

    async fn refuse(&self, id: &str, value: &Value, wanted: &str) {
        self.emit(Event::Info(format!("{id} takes {wanted}, not {value}")))
            .await;
    }

    /// Says the settings as they now stand (they apply from the next turn).
    async fn settings_changed(&mut self) {
        let models = self
            .settings
            .model_option
            .as_ref()
            .map(|(_, models)| models.clone())
            .unwrap_or_default();
        self.settings = self.state.settings(&models);
        self.emit(Event::Settings(self.settings.clone())).await;
    }

    async fn interrupt(&mut self, turn: &str) {
        let params = json!({"threadId": self.thread, "turnId": turn});
        self.call_later("turn/interrupt", params, Answer::Interrupted)
            .await;
    }

    async fn answer(&mut self, answer: Answer) {
        match answer {
            Answer::TurnStarted(Ok(result)) => {
                if self.turn.is_none()
                    && let Some(turn) = result.pointer("/turn/id").and_then(Value::as_str)
                {
                    self.turn_known(turn.to_owned()).await;
                }
            }
            Answer::TurnStarted(Err(CallError::Gone)) => {}
            Answer::TurnStarted(Err(err)) => {
                if self.running {
                    self.running = false;
                    self.emit(Event::TurnEnded(TurnStop::Failed(format!(
                        "Codex refused the turn: {err}"
                    ))))
                    .await;
                }
            }
            Answer::Steered(result) => {
                let taken = result.map(|_| ()).map_err(|err| err.to_string());
                self.emit(Event::SteerTaken(taken)).await;
            }
            Answer::Interrupted(Ok(_) | Err(CallError::Gone)) => {}
            Answer::Interrupted(Err(err)) => {
                self.emit(Event::Info(format!("Codex refused to interrupt: {err}")))
                    .await;
            }
        }
    }

    async fn turn_known(&mut self, turn: String) {
        self.turn = Some(turn.clone());
        if std::mem::take(&mut self.cancel_asked) {
            self.interrupt(&turn).await;
        }
    }

    async fn request(&mut self, id: RpcId, method: &str, params: Value) {
        let item = params
            .get("itemId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let reason = params
            .get("reason")
            .and_then(Value::as_str)
            .filter(|reason| !reason.is_empty());
        let (asked, name, summary) = match method {
            "item/commandExecution/requestApproval" => {
                let command = params
                    .get("command")
                    .and_then(Value::as_str)
                    .unwrap_or("a command");
                let decisions = params
                    .get("availableDecisions")
                    .and_then(Value::as_array)
                    .cloned();
                let summary = match reason {
                    Some(reason) => format!("{command} ({reason})"),
                    None => command.to_owned(),
                };
                (Asked::Command { id, decisions }, "shell", summary)
            }
            "item/fileChange/requestApproval" => {
                let summary = self
                    .tools
                    .get(&item)
                    .cloned()
                    .unwrap_or_else(|| "edit files".to_owned());
                let summary = match reason {
                    Some(reason) => format!("{summary} ({reason})"),
                    None => summary,
                };
                (Asked::FileChange { id }, "apply_patch", summary)
            }
            "item/permissions/requestApproval" => {
                let requested = params.get("permissions").cloned().unwrap_or(json!({}));
                let summary = format!(
                    "grant {}{}",
                    requested,
                    reason
                        .map(|reason| format!(" ({reason})"))
                        .unwrap_or_default()
                );
                (Asked::Permissions { id, requested }, "permissions", summary)
            }
            _ => {
                // User input, MCP elicitation, dynamic tools: not offered to a hosted
                // session's clients; Codex goes on without them.
                self.rpc
                    .respond_error(&id, RpcError::method_not_found(method))
                    .await;
                return;
            }
        };
        let request = self.next_permission;
        self.next_permission += 1;
        self.asked.insert(request, asked);
        self.emit(Event::Permission {
            request,
            call_id: item,
            name: name.to_owned(),
            summary,
            hunks: None,
        })
        .await;
    }

    async fn notification(&mut self, method: &str, params: Value) {
        match method {
            "turn/started" => {
                if self.turn.is_none()
                    && let Some(turn) = params.pointer("/turn/id").and_then(Value::as_str)
                {
                    self.turn_known(turn.to_owned()).await;
                }
            }
            "item/started" => {
                if let Some(item) = params.get("item") {
                    self.item_started(item).await;
                }
            }
            "item/completed" => {
                if let Some(item) = params.get("item") {
                    self.item_completed(item).await;
                }
            }
            "item/agentMessage/delta" => {
                if let (Some(item), Some(delta)) = (text(&params, "itemId"), text(&params, "delta"))
                {
                    self.streamed.insert(item.to_owned());
                    self.emit(Event::Text(delta.to_owned())).await;
                }
            }
            "item/reasoning/summaryTextDelta" | "item/reasoning/textDelta" => {
                if let Some(delta) = text(&params, "delta") {
                    self.emit(Event::Thought(delta.to_owned())).await;
                }
            }
            "item/commandExecution/outputDelta" | "item/fileChange/outputDelta" => {
                if let (Some(item), Some(delta)) = (text(&params, "itemId"), text(&params, "delta"))
                    && self.tools.contains_key(item)
                {
                    self.emit(Event::ToolUpdate {
                        call_id: item.to_owned(),
                        output: delta.to_owned(),
                    })
                    .await;
                }
            }
            "item/mcpToolCall/progress" => {
                if let (Some(item), Some(message)) =
                    (text(&params, "itemId"), text(&params, "message"))
                    && self.tools.contains_key(item)
                {
                    self.emit(Event::ToolUpdate {
                        call_id: item.to_owned(),
                        output: message.to_owned(),
                    })
                    .await;
                }
            }
            "turn/plan/updated" => {
                let steps = params
                    .get("plan")
                    .and_then(Value::as_array)
                    .map(|plan| plan.iter().filter_map(plan_step).collect())
                    .unwrap_or_default();
                self.emit(Event::Plan(steps)).await;
            }
            "thread/tokenUsage/updated" => self.token_usage(&params).await,
            "serverRequest/resolved" => {
                // Answered elsewhere or cleared by Codex (the turn ended, was
                // interrupted): nobody needs to answer it any more.
                let Some(resolved) = params.get("requestId") else {
                    return;
                };
                let withdrawn: Vec<u64> = self
                    .asked
                    .iter()
                    .filter(|(_, asked)| asked.id().is(resolved))
                    .map(|(request, _)| *request)
                    .collect();
                for request in withdrawn {
                    self.asked.remove(&request);
                    self.emit(Event::PermissionWithdrawn { request }).await;
                }
            }
            "error" => {
                let message = params
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error")
                    .to_owned();
                if params.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    self.emit(Event::Info(format!("Codex: {message} (retrying)")))
                        .await;
                } else {
                    self.failure = Some(message);
                }
            }
            "warning" => {
                if let Some(message) = text(&params, "message") {
                    self.emit(Event::Info(format!("Codex: {message}"))).await;
                }
            }
            "turn/completed" => self.turn_completed(&params).await,
            _ => {}
        }
    }

    async fn item_started(&mut self, item: &Value) {
        let Some(id) = text(item, "id") else {
            return;
        };
        let kind = text(item, "type").unwrap_or_default();
        let (name, card, arguments) = match kind {
            "agentMessage" => {
                self.emit(Event::MessageBreak).await;
                return;
            }
            "userMessage" | "reasoning" | "contextCompaction" | "hookPrompt" | "plan" => return,
            "commandExecution" => {
                let command = text(item, "command").unwrap_or_default();
                (
                    "shell".to_owned(),
                    CallCard {
                        title: Some(command.to_owned()),
                        kind: Some(CallKind::Execute),
                        ..CallCard::default()
                    },
                    Some(json!({"command": command})),
                )
            }
            "fileChange" => {
                let paths: Vec<&str> = item
                    .get("changes")
                    .and_then(Value::as_array)
                    .map(|changes| changes.iter().filter_map(|c| text(c, "path")).collect())
                    .unwrap_or_default();
                (
                    "apply_patch".to_owned(),
                    CallCard {
                        title: Some(format!("edit {}", paths.join(", "))),
                        kind: Some(CallKind::Edit),
                        path: paths.first().map(|path| (*path).to_owned()),
                        ..CallCard::default()
                    },
                    None,
                )
            }
            "mcpToolCall" => {
                let server = text(item, "server").unwrap_or("mcp");
                let tool = text(item, "tool").unwrap_or("tool");
                (
                    format!("{server}/{tool}"),
                    CallCard {
                        title: Some(format!("{server}/{tool}")),
                        kind: Some(CallKind::Other),
                        ..CallCard::default()
                    },
                    item.get("arguments")
                        .filter(|args| args.is_object())
                        .cloned(),
                )
            }
            "webSearch" => (
                "web_search".to_owned(),
                CallCard {
                    title: text(item, "query").map(str::to_owned),
                    kind: Some(CallKind::Search),
                    ..CallCard::default()
                },
                None,
            ),
            other => (
                other.to_owned(),
                CallCard {
                    title: Some(other.to_owned()),
                    kind: Some(CallKind::Other),
                    ..CallCard::default()
                },
                None,
            ),
        };
        let title = card.title.clone().unwrap_or_else(|| name.clone());
        if self.tools.insert(id.to_owned(), title).is_none() {
            self.emit(Event::ToolStart {
                call_id: id.to_owned(),
                name,
                arguments,
                card,
            })
            .await;
        }
    }

    async fn item_completed(&mut self, item: &Value) {
        let Some(id) = text(item, "id") else {
            return;
        };
        if text(item, "type") == Some("agentMessage") {
            if !self.streamed.remove(id)
                && let Some(message) = text(item, "text").filter(|text| !text.is_empty())
            {
                self.emit(Event::Text(message.to_owned())).await;
            }
            return;
        }
        if self.tools.remove(id).is_none() {
            return;
        }
        let status = text(item, "status").unwrap_or_default();
        let exit = item.get("exitCode").and_then(Value::as_i64);
        let is_error =
            matches!(status, "failed" | "declined") || exit.is_some_and(|code| code != 0);
        let mut output = text(item, "aggregatedOutput")
            .map(str::to_owned)
            .or_else(|| {
                item.get("result").map(|result| match result {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                })
            })
            .unwrap_or_default();
        if status == "declined" && output.is_empty() {
            output = "declined".to_owned();
        }
        if let Some(error) = item.pointer("/error/message").and_then(Value::as_str) {
            output = error.to_owned();
        }
        self.emit(Event::ToolDone {
            call_id: id.to_owned(),
            output,
            is_error,
        })
        .await;
    }

    async fn token_usage(&mut self, params: &Value) {
        let Some(usage) = params.get("tokenUsage") else {
            return;
        };
        let last = usage.get("last").unwrap_or(&Value::Null);
        let number = |key: &str| last.get(key).and_then(Value::as_u64).unwrap_or(0);
        self.usage.add(&TurnUsage {
            input_tokens: number("inputTokens"),
            cached_input_tokens: number("cachedInputTokens"),
            cache_write_input_tokens: number("cacheWriteInputTokens"),
            output_tokens: number("outputTokens"),
            reasoning_tokens: number("reasoningOutputTokens"),
        });
        if let Some(window) = usage.get("modelContextWindow").and_then(Value::as_u64) {
            self.emit(Event::Context {
                tokens: number("totalTokens"),
                window,
                cost: None,
            })
            .await;
        }
    }

    async fn turn_completed(&mut self, params: &Value) {
        if !self.running {
            return;
        }
        self.running = false;
        self.turn = None;
        // Cards Codex left open (an interrupt mid-command) close with the turn.
        for (call_id, _) in std::mem::take(&mut self.tools) {
            self.emit(Event::ToolDone {
                call_id,
                output: "stopped with the turn".to_owned(),
                is_error: true,
            })
            .await;
        }
        for (request, _) in std::mem::take(&mut self.asked) {
            self.emit(Event::PermissionWithdrawn { request }).await;
        }
        self.streamed.clear();
        if self.usage != TurnUsage::default() {
            let usage = std::mem::take(&mut self.usage);
            self.emit(Event::Usage(usage)).await;
        }
        let turn = params.get("turn").unwrap_or(&Value::Null);
        let failure = self.failure.take();
        let stop = match text(turn, "status") {
            Some("interrupted") => TurnStop::Cancelled,
            Some("failed") => TurnStop::Failed(
                turn.pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or(failure)
                    .unwrap_or_else(|| "Codex failed the turn".to_owned()),
            ),
            _ => TurnStop::EndTurn,
        };
        self.emit(Event::TurnEnded(stop)).await;
    }
}

/// The answer to a permission request, in the shape its kind takes.
fn decision_for(asked: &Asked, decision: Decision, always: bool) -> Value {
    match asked {
        Asked::Command { decisions, .. } => {
            let offered = |name: &str| {
                decisions.as_ref().is_none_or(|list| {
                    list.iter().any(|decision| {
                        decision.as_str() == Some(name) || decision.get(name).is_some()
                    })
                })
            };
            let answer = match (decision, always) {
                (Decision::Deny, _) => json!("decline"),
                (Decision::Allow, true) if offered("acceptForSession") => json!("acceptForSession"),
                // Codex's own lasting rule: the amendment it proposed, kept in its
                // execpolicy so the command stops asking.
                (Decision::Allow, true) => decisions
                    .iter()
                    .flatten()
                    .find(|decision| decision.get("acceptWithExecpolicyAmendment").is_some())
                    .cloned()
                    .unwrap_or(json!("accept")),
                (Decision::Allow, false) => json!("accept"),
            };
            json!({"decision": answer})
        }
        Asked::FileChange { .. } => json!({"decision": match (decision, always) {
            (Decision::Deny, _) => "decline",
            (Decision::Allow, true) => "acceptForSession",
            (Decision::Allow, false) => "accept",
        }}),
        Asked::Permissions { requested, .. } => match decision {
            Decision::Allow => json!({
                "permissions": requested,
                "scope": if always { "session" } else { "turn" },
            }),
            Decision::Deny => json!({"permissions": {}}),
        },
    }
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn plan_step(entry: &Value) -> Option<PlanStep> {
    let step = text(entry, "step")?.to_owned();
    let status = match text(entry, "status") {
        Some("inProgress" | "in_progress") => StepStatus::InProgress,
        Some("completed") => StepStatus::Completed,
        _ => StepStatus::Pending,
    };
    Some(PlanStep { step, status })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_threads_turns_are_read_back_as_messages() {
        let answer = json!({"thread": {"id": "t", "turns": [
            {"id": "1", "items": [
                {"type": "userMessage", "id": "u", "content": [{"type": "text", "text": "hi"}]},
                {"type": "reasoning", "id": "r", "summary": []},
                {"type": "commandExecution", "id": "c", "command": "ls"},
                {"type": "agentMessage", "id": "a", "text": "hello"}]},
            {"id": "2", "items": [
                {"type": "userMessage", "id": "u2", "content": [{"type": "image", "url": "x"}]},
                {"type": "agentMessage", "id": "a2", "text": ""}]},
        ]}});
        assert_eq!(
            history_of(&answer),
            [
                HistoryItem::User("hi".into()),
                HistoryItem::Assistant("hello".into()),
            ]
        );
        assert_eq!(history_of(&json!({"thread": {"id": "t"}})), []);
    }

    #[test]
    fn a_thread_answer_names_its_mode() {
        let answer = json!({"approvalPolicy": "never", "sandbox": {"type": "dangerFullAccess"}});
        assert_eq!(mode_of(&answer), Some("full-access"));
        let answer = json!({"approvalPolicy": "on-request", "sandbox": {"type": "workspaceWrite"}});
        assert_eq!(mode_of(&answer), Some("auto-edit"));
        assert_eq!(mode_of(&json!({"approvalPolicy": {"granular": {}}})), None);
    }

    #[test]
    fn always_takes_what_codex_offers() {
        let asked = Asked::Command {
            id: RpcId::number(0),
            decisions: Some(vec![
                json!("accept"),
                json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["echo"]}}),
                json!("cancel"),
            ]),
        };
        assert_eq!(
            decision_for(&asked, Decision::Allow, true)["decision"],
            json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["echo"]}})
        );
        assert_eq!(
            decision_for(&asked, Decision::Allow, false)["decision"],
            json!("accept")
        );
        assert_eq!(
            decision_for(&asked, Decision::Deny, true)["decision"],
            json!("decline")
        );
        let unlisted = Asked::Command {
            id: RpcId::number(1),
            decisions: None,
        };
        assert_eq!(
            decision_for(&unlisted, Decision::Allow, true)["decision"],
            json!("acceptForSession")
        );
        let grant = Asked::Permissions {
            id: RpcId::number(2),
            requested: json!({"network": {"enabled": true}}),
        };
        assert_eq!(
            decision_for(&grant, Decision::Allow, true),
            json!({"permissions": {"network": {"enabled": true}}, "scope": "session"})
        );
    }

    #[test]
    fn models_and_their_efforts() {
        let mut efforts = HashMap::new();
        let models = read_models(
            &json!({"data": [
                {"model": "m1", "displayName": "M1", "supportedReasoningEfforts": [{"reasoningEffort": "low"}, {"reasoningEffort": "high"}]},
                {"model": "hidden", "hidden": true},
                {"displayName": "no id"},
                7
            ]}),
            &mut efforts,
        );
        assert_eq!(models.len(), 1);
        assert_eq!(models[0].name, "M1");
        assert_eq!(efforts["m1"], ["low", "high"]);
        assert!(read_models(&json!([]), &mut efforts).is_empty());
    }

    #[test]
    fn odd_plan_entries_are_skipped() {
        assert!(plan_step(&json!({"status": "completed"})).is_none());
        assert_eq!(
            plan_step(&json!({"step": "a", "status": "inProgress"})).map(|s| s.status),
            Some(StepStatus::InProgress)
        );
    }
}
