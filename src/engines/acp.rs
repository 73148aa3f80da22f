//! The driver of an agent that speaks the Agent Client Protocol on its stdio
//! (`kind = "acp"`): the daemon is its client. It starts the agent (`initialize`,
//! `session/new` or `session/load`), turns its `session/update` notifications and
//! permission requests into [`agent::Event`]s and the session's [`agent::Command`]s into
//! its requests. Its messages are read leniently: a field or update kind this driver
//! does not know is skipped, never an error, since agents add them often.

use std::collections::HashMap;

use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::agent::{
    Agent, Command, Event, HistoryItem, Launch, MODE_OPTION, Settings, Started, TurnStop,
};
use super::child::{self, Failure};
use super::rpc::{self, CallError, Incoming, Rpc};
use crate::mcp::process::{self, Group, StderrTail};
use crate::protocol::jsonrpc::{self, RpcError, RpcId};
use crate::protocol::{
    CallCard, CallKind, CommandInfo, Decision, OptionChoice, PlanStep, SessionOption, StepStatus,
    TurnUsage,
};

/// The ACP version this client speaks.
const PROTOCOL_VERSION: u64 = 1;

/// Starts the agent and opens its session. `Err` says what failed, naming the command.
pub async fn start(launch: Launch) -> Result<(Agent, Started), String> {
    let what = child::describe(&launch);
    let spawned = process::spawn(&launch.command, &launch.args, &launch.env, &launch.cwd)
        .map_err(|err| format!("{what}: {err}"))?;
    let process::Spawned {
        child,
        stdin,
        stdout,
        group,
        stderr,
    } = spawned;
    let (rpc, mut incoming) = rpc::connect(stdin, stdout, jsonrpc::Version::Required);
    let opened =
        tokio::time::timeout(launch.startup, open_session(&rpc, &mut incoming, &launch)).await;
    let failure = match opened {
        Ok(Ok(started)) => {
            let (commands, commands_rx) = mpsc::channel(64);
            let (events_tx, events) = mpsc::channel(1024);
            let driver = Driver {
                rpc,
                session: started.session.clone(),
                settings: started.settings.clone(),
                events: events_tx,
                permissions: HashMap::new(),
                next_permission: 1,
                prompt: None,
                what,
                tools: HashMap::new(),
                message: None,
            };
            tokio::spawn(driver.run(commands_rx, incoming, child, group, stderr));
            return Ok((Agent { commands, events }, started));
        }
        Ok(Err(failure)) => failure,
        Err(_) => Failure::Other(format!(
            "did not answer `initialize` and open a session within {} s",
            launch.startup.as_secs_f64()
        )),
    };
    Err(child::abandon(child, group, stderr, &what, failure).await)
}

/// `initialize`, then the session: loaded when asked and offered, new otherwise; then
/// the launch's default mode and options.
async fn open_session(
    rpc: &Rpc,
    incoming: &mut mpsc::Receiver<Incoming>,
    launch: &Launch,
) -> Result<Started, Failure> {
    let mut commands = None;
    let init = call_draining(
        rpc,
        incoming,
        &mut commands,
        "initialize",
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": false, "writeTextFile": false},
                "terminal": false
            },
            "clientInfo": {"name": "jucode", "version": env!("CARGO_PKG_VERSION")}
        }),
    )
    .await
    .map_err(|err| failed("initialize", err))?;
    let capabilities = init.get("agentCapabilities").cloned().unwrap_or(json!({}));
    let agent = init.get("agentInfo").and_then(|info| {
        let name = info.get("title").or(info.get("name"))?.as_str()?;
        Some(match info.get("version").and_then(Value::as_str) {
            Some(version) => format!("{name} {version}"),
            None => name.to_owned(),
        })
    });
    let loads = capabilities
        .get("loadSession")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let images = capabilities
        .pointer("/promptCapabilities/image")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let cwd = launch.cwd.display().to_string();
    let mut not_loaded = None;
    let mut opened = None;
    let mut history = launch.history.then(Vec::new);
    if let Some(id) = &launch.load {
        if loads {
            let params = json!({"sessionId": id, "cwd": cwd, "mcpServers": []});
            let replay = history.as_mut();
            match replaying(rpc, incoming, &mut commands, replay, "session/load", params).await {
                Ok(result) => opened = Some((id.clone(), result)),
                Err(CallError::Gone) => return Err(failed("session/load", CallError::Gone)),
                Err(err) => {
                    not_loaded = Some(format!("the agent could not load its conversation: {err}"))
                }
            }
        } else {
            not_loaded = Some("the agent cannot load a conversation (no loadSession)".to_owned());
        }
    }
    let (session, result) = match opened {
        Some(opened) => opened,
        None => {
            let params = json!({"cwd": cwd, "mcpServers": []});
            let result = call_draining(rpc, incoming, &mut commands, "session/new", params)
                .await
                .map_err(|err| failed("session/new", err))?;
            let id = result
                .get("sessionId")
                .and_then(Value::as_str)
                .ok_or(Failure::from("answered session/new without a sessionId"))?
                .to_owned();
            (id, result)
        }
    };
    let mut settings = Settings::default();
    read_modes(&mut settings, result.get("modes"));
    if let Some(options) = result.get("configOptions") {
        read_config_options(&mut settings, options);
    }
    if let Some(mode) = &launch.default_mode
        && settings.mode.as_deref() != Some(mode.as_str())
    {
        let params = json!({"sessionId": session, "modeId": mode});
        call_draining(rpc, incoming, &mut commands, "session/set_mode", params)
            .await
            .map_err(|err| format!("refused default_mode {mode}: {err}"))?;
        settings.mode = Some(mode.clone());
    }
    for (id, value) in &launch.default_config_options {
        let params = json!({"sessionId": session, "configId": id, "value": value});
        let result = call_draining(
            rpc,
            incoming,
            &mut commands,
            "session/set_config_option",
            params,
        )
        .await
        .map_err(|err| format!("refused default_config_options {id}: {err}"))?;
        if let Some(options) = result.get("configOptions") {
            read_config_options(&mut settings, options);
        }
    }
    let resume = loads
        || capabilities
            .pointer("/sessionCapabilities/resume")
            .is_some_and(|resume| !resume.is_null());
    Ok(Started {
        session,
        agent,
        capabilities,
        images,
        steer: false,
        resume,
        settings,
        // Read back from the replay of `session/load`.
        history: history.filter(|_| not_loaded.is_none() && loads),
        not_loaded,
        commands,
    })
}

fn failed(method: &str, err: CallError) -> Failure {
    match err {
        CallError::Gone => Failure::Closed,
        CallError::Rpc(err) => {
            Failure::Other(format!("failed {method}: {} ({})", err.message, err.code))
        }
    }
}

/// A request made while the agent may be talking: what it sends meanwhile (a loaded
/// conversation's replay, which the session file already holds) is dropped, except the
/// commands it announces as it opens a session, which are what the session offers.
async fn call_draining(
    rpc: &Rpc,
    incoming: &mut mpsc::Receiver<Incoming>,
    commands: &mut Option<Vec<CommandInfo>>,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    replaying(rpc, incoming, commands, None, method, params).await
}

/// [`call_draining`], the replay's messages kept in `history` when given (after the
/// engine's TUI, whose turns the session did not see).
async fn replaying(
    rpc: &Rpc,
    incoming: &mut mpsc::Receiver<Incoming>,
    commands: &mut Option<Vec<CommandInfo>>,
    mut history: Option<&mut Vec<HistoryItem>>,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    rpc.call_draining(incoming, method, params, |_, params| {
        let update = params.get("update").unwrap_or(&Value::Null);
        let text = || {
            update
                .pointer("/content/text")
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("available_commands_update") => *commands = Some(commands_of(update)),
            Some("user_message_chunk") => {
                if let Some(history) = history.as_deref_mut() {
                    match history.last_mut() {
                        Some(HistoryItem::User(said)) => said.push_str(text()),
                        _ => history.push(HistoryItem::User(text().to_owned())),
                    }
                }
            }
            Some("agent_message_chunk") => {
                if let Some(history) = history.as_deref_mut() {
                    match history.last_mut() {
                        Some(HistoryItem::Assistant(said)) => said.push_str(text()),
                        _ => history.push(HistoryItem::Assistant(text().to_owned())),
                    }
                }
            }
            _ => {}
        }
    })
    .await
}

fn unsupported(method: &str) -> RpcError {
    RpcError::method_not_found(method)
}

fn read_modes(settings: &mut Settings, modes: Option<&Value>) {
    let Some(modes) = modes else { return };
    settings.mode = modes
        .get("currentModeId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    settings.modes = modes
        .get("availableModes")
        .and_then(Value::as_array)
        .map(|modes| {
            modes
                .iter()
                .filter_map(|mode| {
                    let id = mode.get("id")?.as_str()?;
                    let name = mode.get("name").and_then(Value::as_str).unwrap_or(id);
                    Some(OptionChoice {
                        value: id.to_owned(),
                        name: name.to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
}

/// `configOptions`: the model and the effort go to their own fields, the rest stays
/// an option; a mode option (category `mode`) also sets the mode.
fn read_config_options(settings: &mut Settings, options: &Value) {
    let Some(options) = options.as_array() else {
        return;
    };
    settings.options.clear();
    for option in options {
        let Some(id) = option.get("id").and_then(Value::as_str) else {
            continue;
        };
        let text = |key: &str| option.get(key).and_then(Value::as_str).map(str::to_owned);
        let category = text("category");
        let kind = text("type").unwrap_or_else(|| "select".to_owned());
        let value = option.get("currentValue").cloned().unwrap_or(Value::Null);
        let choices = choices(option);
        match category.as_deref() {
            Some("model") => {
                settings.model = value.as_str().map(str::to_owned);
                settings.model_option = Some((id.to_owned(), choices));
                continue;
            }
            Some("thought_level") => {
                settings.effort = value.as_str().map(str::to_owned);
                settings.effort_option = Some(id.to_owned());
                settings.efforts = choices.into_iter().map(|choice| choice.value).collect();
                continue;
            }
            Some("mode") => {
                settings.mode = value.as_str().map(str::to_owned);
                settings.modes = choices.clone();
            }
            _ => {}
        }
        settings.options.push(SessionOption {
            id: id.to_owned(),
            name: text("name").unwrap_or_else(|| id.to_owned()),
            description: text("description"),
            category,
            kind,
            value,
            choices,
        });
    }
}

/// A select option's values, flat or in groups.
fn choices(option: &Value) -> Vec<OptionChoice> {
    let read = |list: &Value| -> Vec<OptionChoice> {
        list.as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|choice| {
                        let value = choice.get("value")?.as_str()?;
                        let name = choice.get("name").and_then(Value::as_str).unwrap_or(value);
                        Some(OptionChoice {
                            value: value.to_owned(),
                            name: name.to_owned(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    if let Some(options) = option.get("options") {
        let mut flat = read(options);
        // Grouped options are `[{group, name, options: [...]}]` in the same field.
        if let Some(groups) = options.as_array() {
            for group in groups {
                if let Some(inner) = group.get("options") {
                    flat.extend(read(inner));
                }
            }
        }
        return flat;
    }
    option
        .get("groups")
        .and_then(Value::as_array)
        .map(|groups| {
            groups
                .iter()
                .flat_map(|group| read(group.get("options").unwrap_or(&Value::Null)))
                .collect()
        })
        .unwrap_or_default()
}

/// A permission request waiting for the session's answer.
struct Asked {
    id: RpcId,
    options: Vec<(String, String)>,
}

struct Driver {
    rpc: Rpc,
    session: String,
    settings: Settings,
    events: mpsc::Sender<Event>,
    permissions: HashMap<u64, Asked>,
    next_permission: u64,
    /// The running turn's `session/prompt`.
    prompt: Option<oneshot::Receiver<Result<Value, RpcError>>>,
    what: String,
    /// Open tool cards, by call id: their name, for the closing update.
    tools: HashMap<String, String>,
    /// The `messageId` of the last message chunk, for agents that send one.
    message: Option<String>,
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut incoming: mpsc::Receiver<Incoming>,
        child: tokio::process::Child,
        group: Group,
        stderr: StderrTail,
    ) {
        loop {
            let prompt = async {
                match self.prompt.as_mut() {
                    Some(prompt) => prompt.await,
                    None => std::future::pending().await,
                }
            };
            // The agent's notifications are all in the channel by the time the answer
            // they precede arrives: taken first, a turn's last chunks never come after
            // its end.
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
                result = prompt => {
                    self.prompt = None;
                    self.turn_ended(result).await;
                }
                command = commands.recv() => match command {
                    Some(command) => self.command(command).await,
                    // The session is gone, or moves to the TUI: so is its agent.
                    None => break,
                },
            }
        }
        child::stop(child, group).await;
    }

    async fn emit(&self, event: Event) {
        let _ = self.events.send(event).await;
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Prompt { text, images } => {
                let mut prompt = vec![json!({"type": "text", "text": text})];
                for image in images {
                    prompt.push(json!({
                        "type": "image",
                        "mimeType": image.mime,
                        "data": &*image.base64,
                    }));
                }
                let params = json!({"sessionId": self.session, "prompt": prompt});
                self.prompt = Some(self.rpc.send_call("session/prompt", params).await);
            }
            // Never sent: `Started::steer` is false, ACP has no way into a running turn.
            Command::Steer { .. } => {}
            Command::Cancel => {
                self.rpc
                    .notify("session/cancel", json!({"sessionId": self.session}))
                    .await;
                // The protocol has the client answer its pending questions itself.
                for (request, asked) in std::mem::take(&mut self.permissions) {
                    let cancelled = json!({"outcome": {"outcome": "cancelled"}});
                    self.rpc.respond(&asked.id, cancelled).await;
                    self.emit(Event::PermissionWithdrawn { request }).await;
                }
            }
            Command::Permission {
                request,
                decision,
                always,
            } => {
                let Some(asked) = self.permissions.remove(&request) else {
                    return;
                };
                let wanted: &[&str] = match (decision, always) {
                    (Decision::Allow, true) => &["allow_always", "allow_once"],
                    (Decision::Allow, false) => &["allow_once", "allow_always"],
                    (Decision::Deny, _) => &["reject_once", "reject_always"],
                };
                let chosen = wanted.iter().find_map(|kind| {
                    asked
                        .options
                        .iter()
                        .find(|(_, option_kind)| option_kind == kind)
                });
                let outcome = match chosen {
                    Some((option, _)) => {
                        json!({"outcome": {"outcome": "selected", "optionId": option}})
                    }
                    None => json!({"outcome": {"outcome": "cancelled"}}),
                };
                self.rpc.respond(&asked.id, outcome).await;
            }
            Command::SetMode(mode) => {
                let params = json!({"sessionId": self.session, "modeId": mode});
                match self.rpc.call("session/set_mode", params).await {
                    Ok(_) => {
                        self.settings.mode = Some(mode);
                        self.emit(Event::Settings(self.settings.clone())).await;
                    }
                    Err(err) => {
                        self.emit(Event::Info(format!("the agent refused mode {mode}: {err}")))
                            .await
                    }
                }
            }
            Command::SetOption { id, value } => {
                if id == MODE_OPTION && !self.settings.options.iter().any(|option| option.id == id)
                {
                    if let Some(mode) = value.as_str() {
                        Box::pin(self.command(Command::SetMode(mode.to_owned()))).await;
                    }
                    return;
                }
                let params = json!({"sessionId": self.session, "configId": id, "value": value});
                match self.rpc.call("session/set_config_option", params).await {
                    Ok(result) => {
                        if let Some(options) = result.get("configOptions") {
                            read_config_options(&mut self.settings, options);
                        }
                        self.emit(Event::Settings(self.settings.clone())).await;
                    }
                    Err(err) => {
                        self.emit(Event::Info(format!(
                            "the agent refused {id} = {value}: {err}"
                        )))
                        .await;
                        // Said again so whoever asked sees the options as they stand.
                        self.emit(Event::Settings(self.settings.clone())).await;
                    }
                }
            }
        }
    }

    async fn turn_ended(
        &mut self,
        result: Result<Result<Value, RpcError>, oneshot::error::RecvError>,
    ) {
        let stop = match result {
            Ok(Ok(result)) => {
                if let Some(usage) = result.get("usage") {
                    self.emit(Event::Usage(usage_of(usage))).await;
                }
                match result.get("stopReason").and_then(Value::as_str) {
                    Some("cancelled") => TurnStop::Cancelled,
                    Some("max_tokens" | "max_turn_requests") => TurnStop::MaxTokens,
                    Some("refusal") => TurnStop::Refusal,
                    _ => TurnStop::EndTurn,
                }
            }
            Ok(Err(err)) => TurnStop::Failed(format!(
                "the agent failed the turn: {} ({})",
                err.message, err.code
            )),
            // The connection closed: the exit is reported when the output ends.
            Err(_) => return,
        };
        // Questions still open belong to a turn that is over.
        for (request, asked) in std::mem::take(&mut self.permissions) {
            self.rpc
                .respond(&asked.id, json!({"outcome": {"outcome": "cancelled"}}))
                .await;
            self.emit(Event::PermissionWithdrawn { request }).await;
        }
        self.emit(Event::TurnEnded(stop)).await;
    }

    async fn request(&mut self, id: RpcId, method: &str, params: Value) {
        if method != "session/request_permission" {
            // Files and terminals are not offered (clientCapabilities says so): the
            // agent uses its own.
            self.rpc.respond_error(&id, unsupported(method)).await;
            return;
        }
        let call = params.get("toolCall").cloned().unwrap_or(json!({}));
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .map(|options| {
                options
                    .iter()
                    .filter_map(|option| {
                        Some((
                            option.get("optionId")?.as_str()?.to_owned(),
                            option.get("kind")?.as_str()?.to_owned(),
                        ))
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let call_id = call
            .get("toolCallId")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = self
            .tools
            .get(&call_id)
            .cloned()
            .or_else(|| title_of(&call))
            .unwrap_or_else(|| "tool".to_owned());
        let summary = title_of(&call)
            .or_else(|| call.get("rawInput").map(Value::to_string))
            .unwrap_or_else(|| name.clone());
        let request = self.next_permission;
        self.next_permission += 1;
        self.permissions.insert(request, Asked { id, options });
        self.emit(Event::Permission {
            request,
            call_id,
            name,
            summary,
            hunks: None,
        })
        .await;
    }

    async fn notification(&mut self, method: &str, params: Value) {
        if method != "session/update" {
            return;
        }
        let Some(update) = params.get("update") else {
            return;
        };
        let text_of = |update: &Value| {
            update
                .pointer("/content/text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match update.get("sessionUpdate").and_then(Value::as_str) {
            Some("agent_message_chunk") => {
                // A chunk of another message (agents that number them) starts a new
                // assistant message rather than running on in the last one.
                if let Some(message) = update.get("messageId").and_then(Value::as_str)
                    && self.message.as_deref() != Some(message)
                    && self.message.replace(message.to_owned()).is_some()
                {
                    self.emit(Event::MessageBreak).await;
                }
                if let Some(text) = text_of(update) {
                    self.emit(Event::Text(text)).await;
                }
            }
            Some("agent_thought_chunk") => {
                if let Some(text) = text_of(update) {
                    self.emit(Event::Thought(text)).await;
                }
            }
            Some("tool_call") => self.tool_call(update).await,
            Some("tool_call_update") => self.tool_call_update(update).await,
            Some("plan") => {
                let steps = update
                    .get("entries")
                    .and_then(Value::as_array)
                    .map(|entries| entries.iter().filter_map(plan_step).collect())
                    .unwrap_or_default();
                self.emit(Event::Plan(steps)).await;
            }
            Some("available_commands_update") => {
                self.emit(Event::Commands(commands_of(update))).await;
            }
            Some("current_mode_update") => {
                if let Some(mode) = update.get("currentModeId").and_then(Value::as_str) {
                    self.settings.mode = Some(mode.to_owned());
                    self.emit(Event::Settings(self.settings.clone())).await;
                }
            }
            Some("config_option_update") => {
                if let Some(options) = update.get("configOptions") {
                    read_config_options(&mut self.settings, options);
                    self.emit(Event::Settings(self.settings.clone())).await;
                }
            }
            Some("usage_update") => {
                let number = |key: &str| update.get(key).and_then(Value::as_u64).unwrap_or(0);
                self.emit(Event::Context {
                    tokens: number("used"),
                    window: number("size"),
                    cost: update.pointer("/cost/amount").and_then(Value::as_f64),
                })
                .await;
            }
            _ => {}
        }
    }

    async fn tool_call(&mut self, update: &Value) {
        let Some(call_id) = update.get("toolCallId").and_then(Value::as_str) else {
            return;
        };
        let kind = update.get("kind").and_then(Value::as_str);
        let title = title_of(update);
        let name = title
            .clone()
            .or_else(|| kind.map(str::to_owned))
            .unwrap_or_else(|| "tool".to_owned());
        let location = update.pointer("/locations/0");
        let card = CallCard {
            title,
            kind: kind.map(call_kind),
            path: location
                .and_then(|at| at.get("path"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            line: location
                .and_then(|at| at.get("line"))
                .and_then(Value::as_u64)
                .and_then(|line| u32::try_from(line).ok()),
            activity: None,
        };
        let arguments = update
            .get("rawInput")
            .filter(|raw| raw.is_object())
            .cloned();
        if self
            .tools
            .insert(call_id.to_owned(), name.clone())
            .is_none()
        {
            self.emit(Event::ToolStart {
                call_id: call_id.to_owned(),
                name,
                arguments,
                card,
            })
            .await;
        }
        // A call announced already finished (agents that report after the fact).
        self.tool_call_update(update).await;
    }

    async fn tool_call_update(&mut self, update: &Value) {
        let Some(call_id) = update.get("toolCallId").and_then(Value::as_str) else {
            return;
        };
        let output = content_text(update);
        match update.get("status").and_then(Value::as_str) {
            Some(status @ ("completed" | "failed")) => {
                if self.tools.remove(call_id).is_none() {
                    return;
                }
                let output = output
                    .or_else(|| update.get("rawOutput").map(raw_output))
                    .unwrap_or_default();
                self.emit(Event::ToolDone {
                    call_id: call_id.to_owned(),
                    output,
                    is_error: status == "failed",
                })
                .await;
            }
            _ => {
                if let Some(output) = output
                    && self.tools.contains_key(call_id)
                {
                    self.emit(Event::ToolUpdate {
                        call_id: call_id.to_owned(),
                        output,
                    })
                    .await;
                }
            }
        }
    }
}

fn title_of(call: &Value) -> Option<String> {
    call.get("title")
        .and_then(Value::as_str)
        .filter(|title| !title.is_empty())
        .map(str::to_owned)
}

fn call_kind(kind: &str) -> CallKind {
    match kind {
        "read" => CallKind::Read,
        "edit" => CallKind::Edit,
        "delete" => CallKind::Delete,
        "move" => CallKind::Move,
        "search" => CallKind::Search,
        "execute" => CallKind::Execute,
        "think" => CallKind::Think,
        "fetch" => CallKind::Fetch,
        _ => CallKind::Other,
    }
}

/// A tool call's content as text: its text blocks, and a line per diff.
fn content_text(update: &Value) -> Option<String> {
    let content = update.get("content")?.as_array()?;
    let mut parts = Vec::new();
    for item in content {
        match item.get("type").and_then(Value::as_str) {
            Some("content") => {
                if let Some(text) = item.pointer("/content/text").and_then(Value::as_str) {
                    parts.push(text.to_owned());
                }
            }
            Some("diff") => {
                if let Some(path) = item.get("path").and_then(Value::as_str) {
                    parts.push(format!("edited {path}"));
                }
            }
            _ => {}
        }
    }
    (!parts.is_empty()).then(|| parts.join("\n"))
}

fn raw_output(raw: &Value) -> String {
    match raw {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn plan_step(entry: &Value) -> Option<PlanStep> {
    let step = entry.get("content")?.as_str()?.to_owned();
    let status = match entry.get("status").and_then(Value::as_str) {
        Some("in_progress") => StepStatus::InProgress,
        Some("completed") => StepStatus::Completed,
        _ => StepStatus::Pending,
    };
    Some(PlanStep { step, status })
}

fn commands_of(update: &Value) -> Vec<CommandInfo> {
    update
        .get("availableCommands")
        .and_then(Value::as_array)
        .map(|commands| commands.iter().filter_map(command_info).collect())
        .unwrap_or_default()
}

fn command_info(command: &Value) -> Option<CommandInfo> {
    let name = command.get("name")?.as_str()?;
    Some(CommandInfo {
        command: format!("/{}", name.trim_start_matches('/')),
        marker: None,
        args: command
            .pointer("/input/hint")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        description: command
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    })
}

/// ACP's `PromptResponse.usage`.
fn usage_of(usage: &Value) -> TurnUsage {
    let number = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    TurnUsage {
        input_tokens: number("inputTokens"),
        cached_input_tokens: number("cachedReadTokens"),
        cache_write_input_tokens: number("cachedWriteTokens"),
        output_tokens: number("outputTokens"),
        reasoning_tokens: number("thoughtTokens"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_options_split_model_effort_mode_and_the_rest() {
        let mut settings = Settings::default();
        read_config_options(
            &mut settings,
            &json!([
                {"id": "model", "name": "Model", "category": "model", "type": "select",
                 "currentValue": "m1", "options": [{"value": "m1", "name": "M1"}, {"value": "m2", "name": "M2"}]},
                {"id": "effort", "name": "Effort", "category": "thought_level", "type": "select",
                 "currentValue": "high", "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}]},
                {"id": "mode", "name": "Mode", "category": "mode", "type": "select",
                 "currentValue": "plan", "options": [{"group": "g", "name": "G", "options": [{"value": "plan", "name": "Plan"}]}]},
                {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": true},
                {"name": "no id"},
                "not an object"
            ]),
        );
        assert_eq!(settings.model.as_deref(), Some("m1"));
        assert_eq!(
            settings
                .model_option
                .as_ref()
                .map(|(id, c)| (id.as_str(), c.len())),
            Some(("model", 2))
        );
        assert_eq!(settings.effort.as_deref(), Some("high"));
        assert_eq!(settings.efforts, ["low", "high"]);
        assert_eq!(settings.mode.as_deref(), Some("plan"));
        assert_eq!(settings.modes.len(), 1);
        let ids: Vec<&str> = settings.options.iter().map(|o| o.id.as_str()).collect();
        assert_eq!(ids, ["mode", "fast"]);
        assert_eq!(settings.options[1].kind, "boolean");
        assert_eq!(settings.options[1].value, json!(true));
    }

    #[test]
    fn odd_updates_are_skipped() {
        assert!(content_text(&json!({"content": "text"})).is_none());
        assert!(plan_step(&json!({"status": "completed"})).is_none());
        assert!(command_info(&json!({"name": 3})).is_none());
        assert_eq!(usage_of(&json!([])), TurnUsage::default());
        assert_eq!(
            command_info(&json!({"name": "review", "input": {"hint": "path"}})).map(|c| c.command),
            Some("/review".to_owned())
        );
    }
}
