//! The driver of Claude Code (`kind = "claude-code"`): the `claude` binary in print mode
//! with stream-json on both pipes, the daemon answering its permission prompts
//! (`--permission-prompt-tool stdio`). Its output is read leniently: a message type,
//! field or block kind this driver does not know is skipped, since Claude Code adds
//! them with most releases.
//!
//! One process is one conversation: `--session-id` names a new one (the hosted
//! session's id is the same), `--resume` continues a saved one.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

use super::agent::{Agent, Command, Event, HistoryItem, Launch, Settings, Started, TurnStop};
use super::child::{self, Failure};
use crate::mcp::process::{self, Group, StderrTail};
use crate::protocol::{
    CallCard, CallKind, CommandInfo, Decision, Frame, LineCodec, OptionChoice, TurnUsage,
};

/// Claude Code's permission modes, as `--permission-mode` and `set_permission_mode`
/// name them.
const MODES: [(&str, &str); 6] = [
    ("default", "Default"),
    ("acceptEdits", "Accept edits"),
    ("plan", "Plan"),
    ("auto", "Auto"),
    ("dontAsk", "Don't ask"),
    ("bypassPermissions", "Bypass permissions"),
];

/// The option the model is set with (`set_session_option model`, `/model`).
const MODEL_OPTION: &str = "model";

/// The arguments every session runs `claude` with, before the entry's own `args`.
fn arguments(launch: &Launch, session: &str, resume: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "-p",
        "--output-format",
        "stream-json",
        "--input-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        // Its echo of a message written mid-turn says when it took it (see `steer`).
        "--replay-user-messages",
        "--permission-prompt-tool",
        "stdio",
    ]
    .map(str::to_owned)
    .to_vec();
    args.push(if resume { "--resume" } else { "--session-id" }.to_owned());
    args.push(session.to_owned());
    if let Some(mode) = &launch.default_mode {
        args.extend(["--permission-mode".to_owned(), mode.clone()]);
    }
    if let Some(model) = launch.default_config_options.get(MODEL_OPTION) {
        args.extend(["--model".to_owned(), model.clone()]);
    }
    args.extend(launch.args.iter().cloned());
    args
}

/// Starts `claude` and waits for its answer to `initialize`. A saved conversation that
/// cannot be resumed (Claude Code no longer has it) starts a new one, which
/// [`Started::not_loaded`] says.
pub async fn start(launch: Launch) -> Result<(Agent, Started), String> {
    if let Some(saved) = launch.load.clone() {
        match start_on(&launch, &saved, true).await {
            Ok(started) => return Ok(started),
            Err(why) => {
                let fresh = uuid::Uuid::new_v4().to_string();
                let (agent, mut started) = start_on(&launch, &fresh, false).await?;
                started.not_loaded = Some(format!("Claude Code could not resume it: {why}"));
                return Ok((agent, started));
            }
        }
    }
    let id = uuid::Uuid::now_v7().to_string();
    start_on(&launch, &id, false).await
}

async fn start_on(
    launch: &Launch,
    session: &str,
    resume: bool,
) -> Result<(Agent, Started), String> {
    let what = child::describe(launch);
    let args = arguments(launch, session, resume);
    let spawned = process::spawn(&launch.command, &args, &launch.env, &launch.cwd)
        .map_err(|err| format!("{what}: {err}"))?;
    let process::Spawned {
        child,
        stdin,
        stdout,
        group,
        stderr,
    } = spawned;
    let (lines_tx, lines) = mpsc::channel::<Bytes>(256);
    tokio::spawn(child::write_lines(stdin, lines));
    let mut output = FramedRead::new(stdout, LineCodec::new());
    let mut driver = Driver {
        lines: lines_tx,
        events: None,
        settings: Settings::default(),
        next_request: 1,
        asked: HashMap::new(),
        pending: HashMap::new(),
        next_permission: 1,
        streamed: HashSet::new(),
        turn: false,
        cancelling: false,
        last_prompt: 0,
        tools: HashMap::new(),
        steering: VecDeque::new(),
        carried: 0,
        what: what.clone(),
    };
    let init = driver
        .control("initialize", json!({}), Pending::Initialize)
        .await;
    let answer = tokio::time::timeout(launch.startup, async {
        loop {
            match next_message(&mut output).await {
                Some(message) => {
                    if message.get("type").and_then(Value::as_str) == Some("control_response")
                        && response_id(&message) == Some(init.as_str())
                    {
                        return Ok(message);
                    }
                    if message.get("type").and_then(Value::as_str) == Some("control_request") {
                        driver.refuse(&message, "not ready").await;
                    }
                }
                None => return Err(()),
            }
        }
    })
    .await;
    let failure = match answer {
        Ok(Ok(ref message)) => match message.pointer("/response/subtype").and_then(Value::as_str) {
            Some("success") => None,
            _ => Some(Failure::Other(format!(
                "refused initialize: {}",
                message
                    .pointer("/response/error")
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given")
            ))),
        },
        Ok(Err(())) => Some(Failure::Closed),
        Err(_) => Some(Failure::Other(format!(
            "did not answer `initialize` within {} s",
            launch.startup.as_secs_f64()
        ))),
    };
    if let Some(failure) = failure {
        return Err(child::abandon(child, group, stderr, &what, failure).await);
    }
    driver.pending.clear();
    let answer = answer
        .ok()
        .and_then(Result::ok)
        .and_then(|message| message.pointer("/response/response").cloned())
        .unwrap_or(Value::Null);
    driver.settings = settings_of(&answer, launch);
    let commands = answer
        .get("commands")
        .and_then(Value::as_array)
        .map(|commands| commands.iter().filter_map(command_info).collect());
    let agent = answer
        .get("claude_code_version")
        .and_then(Value::as_str)
        .map(|version| format!("Claude Code {version}"));
    let mut started = Started {
        session: session.to_owned(),
        agent,
        capabilities: json!({
            "claudeCode": {
                "capabilities": answer.get("capabilities").cloned().unwrap_or(json!([])),
                "account": answer.get("account").cloned().unwrap_or(Value::Null),
            }
        }),
        images: true,
        steer: true,
        resume: true,
        settings: driver.settings.clone(),
        not_loaded: None,
        commands,
        history: None,
    };
    if resume && launch.history {
        // A long conversation's file is read off the async workers.
        let (launch, session) = (launch.clone(), session.to_owned());
        started.history = tokio::task::spawn_blocking(move || history(&launch, &session))
            .await
            .ok();
    }
    let (commands_tx, commands_rx) = mpsc::channel(64);
    let (events_tx, events) = mpsc::channel(1024);
    driver.events = Some(events_tx);
    tokio::spawn(driver.run(commands_rx, output, child, group, stderr));
    Ok((
        Agent {
            commands: commands_tx,
            events,
        },
        started,
    ))
}

type Output = FramedRead<tokio::process::ChildStdout, LineCodec>;

/// The conversation `session` as Claude Code keeps it
/// (`<config dir>/projects/<project>/<session>.jsonl`, the config dir being
/// `CLAUDE_CONFIG_DIR` or `~/.claude` of the agent's environment): its user prompts
/// and the text of its replies, read leniently (a line it cannot read is skipped).
/// Empty when there is no such file.
fn history(launch: &Launch, session: &str) -> Vec<HistoryItem> {
    let config = launch
        .env
        .get("CLAUDE_CONFIG_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            launch
                .env
                .get("HOME")
                .map(|home| std::path::Path::new(home).join(".claude"))
        });
    let Some(config) = config else {
        return Vec::new();
    };
    let file = format!("{session}.jsonl");
    let found = std::fs::read_dir(config.join("projects"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|project| project.path().join(&file))
        .find(|path| path.is_file());
    let Some(text) = found.and_then(|path| std::fs::read_to_string(path).ok()) else {
        return Vec::new();
    };
    history_of(&text)
}

/// The messages of a Claude Code session file's lines.
fn history_of(text: &str) -> Vec<HistoryItem> {
    let mut items: Vec<HistoryItem> = Vec::new();
    for line in text.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if entry.get("isMeta").and_then(Value::as_bool) == Some(true)
            || entry.get("isSidechain").and_then(Value::as_bool) == Some(true)
        {
            continue;
        }
        let content = entry.pointer("/message/content");
        let text = match content {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            _ => continue,
        };
        if text.is_empty() {
            continue;
        }
        match entry.get("type").and_then(Value::as_str) {
            // What the TUI's own commands leave (`/exit`, their output) is not said.
            Some("user")
                if !text.starts_with("<command-")
                    && !text.starts_with("<local-command-")
                    && !text.starts_with("Caveat: ") =>
            {
                items.push(HistoryItem::User(text));
            }
            Some("assistant") => match items.last_mut() {
                Some(HistoryItem::Assistant(said)) => said.push_str(&text),
                _ => items.push(HistoryItem::Assistant(text)),
            },
            _ => {}
        }
    }
    items
}

/// The next JSON object Claude Code writes; lines that are not (banners, logs) are
/// skipped. `None`: its output ended.
async fn next_message(output: &mut Output) -> Option<Value> {
    while let Some(frame) = output.next().await {
        match frame {
            Ok(Frame::Line(line)) => match serde_json::from_slice::<Value>(&line) {
                Ok(message) if message.is_object() => return Some(message),
                _ => {
                    tracing::debug!(line = %String::from_utf8_lossy(&line), "not a stream-json message")
                }
            },
            Ok(_) => tracing::warn!("Claude Code wrote a line over the length limit; skipped"),
            Err(err) => {
                tracing::debug!(%err, "reading Claude Code's output failed");
                return None;
            }
        }
    }
    None
}

fn response_id(message: &Value) -> Option<&str> {
    message
        .pointer("/response/request_id")
        .and_then(Value::as_str)
}

/// The settings `initialize` reports: its models (as the `model` option), the
/// permission modes and the current one.
fn settings_of(answer: &Value, launch: &Launch) -> Settings {
    let models: Vec<OptionChoice> = answer
        .get("models")
        .and_then(Value::as_array)
        .map(|models| {
            models
                .iter()
                .filter_map(|model| {
                    let value = model.get("value")?.as_str()?;
                    let name = model
                        .get("displayName")
                        .and_then(Value::as_str)
                        .unwrap_or(value);
                    Some(OptionChoice {
                        value: value.to_owned(),
                        name: name.to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mode = answer
        .get("current_permission_mode")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| launch.default_mode.clone())
        .or_else(|| Some("default".to_owned()));
    Settings {
        model: launch.default_config_options.get(MODEL_OPTION).cloned(),
        model_option: Some((MODEL_OPTION.to_owned(), models)),
        effort: None,
        effort_option: None,
        efforts: Vec::new(),
        mode,
        modes: MODES
            .iter()
            .map(|(value, name)| OptionChoice {
                value: (*value).to_owned(),
                name: (*name).to_owned(),
            })
            .collect(),
        options: Vec::new(),
    }
}

fn command_info(command: &Value) -> Option<CommandInfo> {
    let name = command.get("name")?.as_str()?;
    let text = |field: &str| {
        command
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Some(CommandInfo {
        command: format!("/{}", name.trim_start_matches('/')),
        marker: None,
        args: text("argumentHint"),
        description: text("description"),
    })
}

/// What an answer to one of the driver's own control requests is for.
enum Pending {
    Initialize,
    Mode(String),
    Model(String),
    Interrupt,
}

/// A `can_use_tool` question waiting for the session's answer.
struct Asked {
    request_id: String,
    input: Value,
    suggestions: Option<Value>,
}

struct Driver {
    lines: mpsc::Sender<Bytes>,
    events: Option<mpsc::Sender<Event>>,
    settings: Settings,
    next_request: u64,
    /// Permission questions by the session's request number.
    asked: HashMap<u64, Asked>,
    /// The driver's control requests by id.
    pending: HashMap<String, Pending>,
    next_permission: u64,
    /// Messages whose text came as partial deltas (their whole copy is not shown again).
    streamed: HashSet<String>,
    turn: bool,
    cancelling: bool,
    /// The prompt tokens of the turn's last model request.
    last_prompt: u64,
    /// Open tool calls: their name.
    tools: HashMap<String, String>,
    /// The text of each message written into the running turn that Claude Code has not
    /// echoed yet. Echoed before the turn's `result`, it was folded into the turn;
    /// still here at the `result`, Claude Code runs it as a turn of its own next.
    steering: VecDeque<String>,
    /// Messages Claude Code already has and runs as their own turns: the session's
    /// next prompts, which are not written again.
    carried: usize,
    what: String,
}

impl Driver {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut output: Output,
        child: tokio::process::Child,
        group: Group,
        stderr: StderrTail,
    ) {
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => self.command(command).await,
                    // The session is gone, or moves to the TUI: so is its agent.
                    None => break,
                },
                message = next_message(&mut output) => match message {
                    Some(message) => self.message(message).await,
                    None => {
                        let why = child::gone(child, &group, &stderr, &self.what).await;
                        self.emit(Event::Exited(why)).await;
                        return;
                    }
                },
            }
        }
        child::stop(child, group).await;
    }

    async fn emit(&self, event: Event) {
        if let Some(events) = &self.events {
            let _ = events.send(event).await;
        }
    }

    async fn write(&self, message: Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let _ = self.lines.send(Bytes::from(line)).await;
    }

    /// Sends a control request; its answer is handled as `pending` says. Returns its id.
    async fn control(&mut self, subtype: &str, mut fields: Value, pending: Pending) -> String {
        let id = format!("jucode-{}", self.next_request);
        self.next_request += 1;
        if let Some(fields) = fields.as_object_mut() {
            fields.insert("subtype".to_owned(), json!(subtype));
        }
        self.pending.insert(id.clone(), pending);
        self.write(json!({"type": "control_request", "request_id": id, "request": fields}))
            .await;
        id
    }

    async fn write_user(&self, text: &str, images: Vec<crate::engine::ImageData>) {
        let mut content = vec![json!({"type": "text", "text": text})];
        for image in images {
            content.push(json!({"type": "image", "source": {
                "type": "base64", "media_type": image.mime, "data": &*image.base64}}));
        }
        self.write(json!({
            "type": "user",
            "message": {"role": "user", "content": content},
            "parent_tool_use_id": null,
        }))
        .await;
    }

    async fn refuse(&self, request: &Value, why: &str) {
        let Some(id) = request.get("request_id").and_then(Value::as_str) else {
            return;
        };
        self.write(json!({"type": "control_response", "response": {
            "subtype": "error", "request_id": id, "error": why}}))
            .await;
    }

    async fn command(&mut self, command: Command) {
        match command {
            Command::Prompt { text, images } => {
                self.turn = true;
                self.cancelling = false;
                if self.carried > 0 {
                    // Written as a steer that the last turn did not take: Claude Code
                    // is running it already.
                    self.carried -= 1;
                    return;
                }
                self.write_user(&text, images).await;
            }
            Command::Steer { text, images } => {
                if !self.turn {
                    let why = "no turn is running".to_owned();
                    self.emit(Event::SteerTaken(Err(why))).await;
                    return;
                }
                self.write_user(&text, images).await;
                self.steering.push_back(text);
            }
            Command::Cancel => {
                if self.turn {
                    self.cancelling = true;
                    self.control("interrupt", json!({}), Pending::Interrupt)
                        .await;
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
                let answer = match decision {
                    Decision::Allow => {
                        let mut answer = json!({"behavior": "allow", "updatedInput": asked.input});
                        if always && let Some(suggestions) = asked.suggestions {
                            answer["updatedPermissions"] = suggestions;
                        }
                        answer
                    }
                    Decision::Deny => {
                        json!({"behavior": "deny", "message": "The user declined this call."})
                    }
                };
                self.write(json!({"type": "control_response", "response": {
                    "subtype": "success", "request_id": asked.request_id, "response": answer}}))
                    .await;
            }
            Command::SetMode(mode) => {
                let fields = json!({"mode": mode});
                self.control("set_permission_mode", fields, Pending::Mode(mode))
                    .await;
            }
            Command::SetOption { id, value } => {
                let Some(value) = value.as_str().map(str::to_owned) else {
                    self.emit(Event::Info(format!("{id} takes a string"))).await;
                    return;
                };
                match id.as_str() {
                    MODEL_OPTION => {
                        let fields = json!({"model": value});
                        self.control("set_model", fields, Pending::Model(value))
                            .await;
                    }
                    super::agent::MODE_OPTION => {
                        Box::pin(self.command(Command::SetMode(value))).await;
                    }
                    _ => {
                        self.emit(Event::Info(format!("Claude Code has no option {id}")))
                            .await;
                        self.emit(Event::Settings(self.settings.clone())).await;
                    }
                }
            }
        }
    }

    async fn message(&mut self, message: Value) {
        match message.get("type").and_then(Value::as_str) {
            Some("stream_event") if is_main(&message) => {
                if let Some(event) = message.get("event") {
                    self.stream_event(event).await;
                }
            }
            Some("assistant") if is_main(&message) => self.assistant(&message).await,
            Some("user") => {
                self.steer_echoed(&message).await;
                self.tool_results(&message).await;
            }
            Some("system") => self.system(&message).await,
            Some("result") => self.result(&message).await,
            Some("control_request") => self.control_request(&message).await,
            Some("control_cancel_request") => {
                let id = message.get("request_id").and_then(Value::as_str);
                let withdrawn = self
                    .asked
                    .iter()
                    .find(|(_, asked)| Some(asked.request_id.as_str()) == id)
                    .map(|(request, _)| *request);
                if let Some(request) = withdrawn {
                    self.asked.remove(&request);
                    self.emit(Event::PermissionWithdrawn { request }).await;
                }
            }
            Some("control_response") => self.control_response(&message).await,
            _ => {}
        }
    }

    async fn stream_event(&mut self, event: &Value) {
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(id) = event.pointer("/message/id").and_then(Value::as_str) {
                    self.streamed.insert(id.to_owned());
                }
                self.emit(Event::MessageBreak).await;
                if let Some(usage) = event.pointer("/message/usage") {
                    self.last_prompt = prompt_tokens(usage);
                }
            }
            Some("content_block_delta") => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str) {
                            self.emit(Event::Text(text.to_owned())).await;
                        }
                    }
                    Some("thinking_delta") => {
                        if let Some(text) = delta.get("thinking").and_then(Value::as_str) {
                            self.emit(Event::Thought(text.to_owned())).await;
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// A whole assistant message: its tool calls start cards; its text is shown only
    /// where no partial deltas carried it.
    async fn assistant(&mut self, message: &Value) {
        let streamed = message
            .pointer("/message/id")
            .and_then(Value::as_str)
            .is_some_and(|id| self.streamed.contains(id));
        let blocks = message
            .pointer("/message/content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") if !streamed => {
                    if let Some(text) = block.get("text").and_then(Value::as_str) {
                        self.emit(Event::Text(text.to_owned())).await;
                    }
                }
                Some("thinking") if !streamed => {
                    if let Some(text) = block.get("thinking").and_then(Value::as_str) {
                        self.emit(Event::Thought(text.to_owned())).await;
                    }
                }
                Some("tool_use") => {
                    let (Some(id), Some(name)) = (
                        block.get("id").and_then(Value::as_str),
                        block.get("name").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    let input = block.get("input").cloned().unwrap_or(json!({}));
                    self.tools.insert(id.to_owned(), name.to_owned());
                    self.emit(Event::ToolStart {
                        call_id: id.to_owned(),
                        name: name.to_owned(),
                        card: card_of(name, &input),
                        arguments: Some(input),
                    })
                    .await;
                }
                _ => {}
            }
        }
    }

    /// Claude Code echoes a user message as it takes it: a steer echoed within the
    /// turn is part of it.
    async fn steer_echoed(&mut self, message: &Value) {
        let Some(waiting) = self.steering.front() else {
            return;
        };
        let text = message
            .pointer("/message/content")
            .and_then(Value::as_array)
            .and_then(|blocks| {
                blocks
                    .iter()
                    .find(|block| block.get("type").and_then(Value::as_str) == Some("text"))
            })
            .and_then(|block| block.get("text"))
            .and_then(Value::as_str);
        if text == Some(waiting.as_str()) {
            self.steering.pop_front();
            self.emit(Event::SteerTaken(Ok(()))).await;
        }
    }

    async fn tool_results(&mut self, message: &Value) {
        let Some(blocks) = message
            .pointer("/message/content")
            .and_then(Value::as_array)
        else {
            return;
        };
        for block in blocks {
            if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                continue;
            }
            let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
                continue;
            };
            // A subagent's calls were never shown: their results are not either.
            if self.tools.remove(id).is_none() {
                continue;
            }
            self.emit(Event::ToolDone {
                call_id: id.to_owned(),
                output: result_text(block.get("content")),
                is_error: block
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            })
            .await;
        }
    }

    async fn system(&mut self, message: &Value) {
        if message.get("subtype").and_then(Value::as_str) != Some("init") {
            return;
        }
        let mut settings = self.settings.clone();
        if let Some(model) = message.get("model").and_then(Value::as_str) {
            settings.model = Some(model.to_owned());
        }
        if let Some(mode) = message.get("permissionMode").and_then(Value::as_str) {
            settings.mode = Some(mode.to_owned());
        }
        if settings != self.settings {
            self.settings = settings;
            self.emit(Event::Settings(self.settings.clone())).await;
        }
    }

    /// The end of a turn: its usage, the context, and why it ended.
    async fn result(&mut self, message: &Value) {
        if let Some(usage) = message.get("usage") {
            self.emit(Event::Usage(TurnUsage {
                input_tokens: prompt_tokens(usage),
                cached_input_tokens: count(usage, "cache_read_input_tokens"),
                cache_write_input_tokens: count(usage, "cache_creation_input_tokens"),
                output_tokens: count(usage, "output_tokens"),
                reasoning_tokens: usage
                    .pointer("/output_tokens_details/thinking_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            }))
            .await;
        }
        let window = message
            .get("modelUsage")
            .and_then(Value::as_object)
            .and_then(|models| {
                let model = self.settings.model.as_deref();
                models
                    .get(model.unwrap_or_default())
                    .or_else(|| models.values().next())
            })
            .and_then(|usage| usage.get("contextWindow"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        // The context is what the last request sent, whatever the turn's total was.
        if self.last_prompt > 0 || window > 0 {
            self.emit(Event::Context {
                tokens: self.last_prompt,
                window,
                cost: message.get("total_cost_usd").and_then(Value::as_f64),
            })
            .await;
        }
        let is_error = message
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let stop = if self.cancelling {
            TurnStop::Cancelled
        } else if is_error {
            let why = message
                .get("result")
                .and_then(Value::as_str)
                .filter(|text| !text.is_empty())
                .or_else(|| message.get("subtype").and_then(Value::as_str))
                .unwrap_or("an error");
            TurnStop::Failed(format!("Claude Code failed the turn: {why}"))
        } else {
            match message.get("stop_reason").and_then(Value::as_str) {
                Some("max_tokens" | "model_context_window_exceeded") => TurnStop::MaxTokens,
                Some("refusal") => TurnStop::Refusal,
                _ => TurnStop::EndTurn,
            }
        };
        for (request, _) in std::mem::take(&mut self.asked) {
            self.emit(Event::PermissionWithdrawn { request }).await;
        }
        for (call_id, _) in std::mem::take(&mut self.tools) {
            self.emit(Event::ToolDone {
                call_id,
                output: String::new(),
                is_error: true,
            })
            .await;
        }
        // Messages written into the turn that it ended without reading: Claude Code
        // keeps them and runs each as its own turn, which the session starts next.
        while self.steering.pop_front().is_some() {
            self.carried += 1;
            let why = "the turn ended before Claude Code read it".to_owned();
            self.emit(Event::SteerTaken(Err(why))).await;
        }
        self.turn = false;
        self.cancelling = false;
        self.streamed.clear();
        self.emit(Event::TurnEnded(stop)).await;
    }

    async fn control_request(&mut self, message: &Value) {
        let request = message.get("request").unwrap_or(&Value::Null);
        if request.get("subtype").and_then(Value::as_str) != Some("can_use_tool") {
            // Hooks, SDK MCP servers and dialogs are not offered: Claude Code goes on
            // without them.
            self.refuse(message, "not supported by this client").await;
            return;
        }
        let Some(request_id) = message.get("request_id").and_then(Value::as_str) else {
            return;
        };
        tracing::debug!(%request, "Claude Code asks before a call");
        let name = request
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or("tool")
            .to_owned();
        let input = request.get("input").cloned().unwrap_or(json!({}));
        let call_id = request
            .get("tool_use_id")
            .and_then(Value::as_str)
            .map_or_else(|| request_id.to_owned(), str::to_owned);
        let summary = summary_of(&name, &input);
        let number = self.next_permission;
        self.next_permission += 1;
        self.asked.insert(
            number,
            Asked {
                request_id: request_id.to_owned(),
                input,
                suggestions: request
                    .get("permission_suggestions")
                    .filter(|suggestions| {
                        suggestions.as_array().is_some_and(|list| !list.is_empty())
                    })
                    .cloned()
                    .or_else(|| {
                        Some(json!([{"type": "addRules", "rules": [{"toolName": name}],
                            "behavior": "allow", "destination": "session"}]))
                    }),
            },
        );
        self.emit(Event::Permission {
            request: number,
            call_id,
            name,
            summary,
            hunks: None,
        })
        .await;
    }

    async fn control_response(&mut self, message: &Value) {
        let Some(pending) = response_id(message).and_then(|id| self.pending.remove(id)) else {
            return;
        };
        let ok = message.pointer("/response/subtype").and_then(Value::as_str) == Some("success");
        let error = message
            .pointer("/response/error")
            .and_then(Value::as_str)
            .unwrap_or("no reason given")
            .to_owned();
        match pending {
            Pending::Initialize | Pending::Interrupt => {}
            Pending::Mode(mode) if ok => {
                self.settings.mode = Some(mode);
                self.emit(Event::Settings(self.settings.clone())).await;
            }
            Pending::Model(model) if ok => {
                self.settings.model = Some(model);
                self.emit(Event::Settings(self.settings.clone())).await;
            }
            Pending::Mode(value) | Pending::Model(value) => {
                self.emit(Event::Info(format!("Claude Code refused {value}: {error}")))
                    .await;
                self.emit(Event::Settings(self.settings.clone())).await;
            }
        }
    }
}

/// Whether a message belongs to the main conversation (not a subagent's).
fn is_main(message: &Value) -> bool {
    message.get("parent_tool_use_id").is_none_or(Value::is_null)
}

fn count(usage: &Value, field: &str) -> u64 {
    usage.get(field).and_then(Value::as_u64).unwrap_or(0)
}

/// Every prompt token, cached or not (the three Messages counters are disjoint).
fn prompt_tokens(usage: &Value) -> u64 {
    count(usage, "input_tokens")
        + count(usage, "cache_read_input_tokens")
        + count(usage, "cache_creation_input_tokens")
}

fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn text_field<'a>(input: &'a Value, field: &str) -> Option<&'a str> {
    input.get(field).and_then(Value::as_str)
}

/// How a client shows one of Claude Code's tools.
fn card_of(name: &str, input: &Value) -> CallCard {
    let path = text_field(input, "file_path")
        .or_else(|| text_field(input, "notebook_path"))
        .or_else(|| text_field(input, "path"))
        .map(str::to_owned);
    let kind = match name {
        "Read" => CallKind::Read,
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => CallKind::Edit,
        "Glob" | "Grep" => CallKind::Search,
        "Bash" | "BashOutput" | "KillShell" => CallKind::Execute,
        "WebFetch" | "WebSearch" => CallKind::Fetch,
        "TodoWrite" | "Task" | "Agent" | "ExitPlanMode" => CallKind::Think,
        _ => CallKind::Other,
    };
    CallCard {
        title: Some(summary_of(name, input)),
        kind: Some(kind),
        path,
        line: input
            .get("offset")
            .and_then(Value::as_u64)
            .and_then(|line| u32::try_from(line).ok()),
        activity: None,
    }
}

/// One line saying what a call does: the command, the path, the pattern.
fn summary_of(name: &str, input: &Value) -> String {
    let detail = text_field(input, "command")
        .or_else(|| text_field(input, "file_path"))
        .or_else(|| text_field(input, "pattern"))
        .or_else(|| text_field(input, "url"))
        .or_else(|| text_field(input, "query"))
        .or_else(|| text_field(input, "description"));
    match detail {
        Some(detail) => format!("{name} {detail}"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_files_messages_are_read_back_without_commands_or_tool_results() {
        let lines = [
            json!({"type": "user", "message": {"role": "user", "content": "first"}}),
            json!({"type": "assistant", "message": {"content": [
                {"type": "text", "text": "one "}, {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]}}),
            json!({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}}),
            json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "two"}]}}),
            json!({"type": "user", "isMeta": true, "message": {"content": "Caveat: local commands"}}),
            json!({"type": "user", "message": {"content": "<command-name>/exit</command-name>"}}),
            json!({"type": "user", "message": {"content": [{"type": "text", "text": "second"}]}}),
            json!({"type": "summary", "summary": "x"}),
        ];
        let mut text: Vec<String> = lines.iter().map(Value::to_string).collect();
        text.insert(2, "not json".to_owned());
        assert_eq!(
            history_of(&text.join("\n")),
            [
                HistoryItem::User("first".into()),
                HistoryItem::Assistant("one two".into()),
                HistoryItem::User("second".into()),
            ]
        );
    }

    #[test]
    fn cards_name_the_call() {
        let card = card_of("Bash", &json!({"command": "cargo test"}));
        assert_eq!(card.kind, Some(CallKind::Execute));
        assert_eq!(card.title.as_deref(), Some("Bash cargo test"));
        let card = card_of("Edit", &json!({"file_path": "/p/a.rs", "old_string": "x"}));
        assert_eq!(card.kind, Some(CallKind::Edit));
        assert_eq!(card.path.as_deref(), Some("/p/a.rs"));
        assert_eq!(card_of("Mystery", &json!([1])).kind, Some(CallKind::Other));
    }

    #[test]
    fn results_are_text_whatever_their_shape() {
        assert_eq!(result_text(Some(&json!("ok"))), "ok");
        assert_eq!(
            result_text(Some(
                &json!([{"type": "text", "text": "a"}, {"type": "image"},
                {"type": "text", "text": "b"}])
            )),
            "a\nb"
        );
        assert_eq!(result_text(Some(&json!(3))), "");
        assert_eq!(result_text(None), "");
    }

    #[test]
    fn prompt_tokens_add_the_disjoint_counters() {
        let usage = json!({"input_tokens": 3, "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20, "output_tokens": 9});
        assert_eq!(prompt_tokens(&usage), 123);
        assert_eq!(prompt_tokens(&json!("junk")), 0);
    }

    #[test]
    fn a_subagents_messages_are_not_the_main_conversation() {
        assert!(is_main(&json!({"parent_tool_use_id": null})));
        assert!(is_main(&json!({})));
        assert!(!is_main(&json!({"parent_tool_use_id": "toolu_1"})));
    }
}
