//! Serve-protocol events into ACP-shaped updates: the one translation layer behind both
//! `jucode acp` (ACP v1 on stdio) and the WebSocket server for dashboards.
//!
//! A [`Translator`] follows one session's event stream (its startup batch or snapshot,
//! then live events) and says what a client of the ACP-shaped protocols must see:
//! `session/update` payloads ([`SessionUpdate`]), permission requests to make or
//! withdraw, and turn ends with their stop reason. The two servers differ only in the
//! few places the [`Dialect`] names; everything else (message ids, tool kinds, titles,
//! diffs, cards always closed, usage, modes, config options, replay) is decided here,
//! once.
//!
//! It is a pure state machine over [`Event`] values: no I/O, no clock, so each rule is
//! unit-tested on event sequences.
//!
//! # Layout
//! - `updates`: the ACP-shaped wire types (serialize-only).
//! - `cards`: a tool call's kind, title, locations and diff from its name and arguments.
//! - `options`: session modes and config options (model, reasoning effort).
//! - `replay`: the history (`transcript`) as updates, for `session/load` and attaching.
//! - `prompt`: ACP content blocks into a serve-protocol `user_message`.

mod cards;
mod options;
mod permissions;
pub mod prompt;
mod replay;
pub mod updates;

use std::collections::HashMap;

use crate::protocol::{
    ApprovalMode, Event, ModelStatus, ModelViewEntry, ReplyStop, Resolution, SessionStatus,
    TurnUsage,
};
use cards::closed_card;
pub use options::{config_options, modes};
pub use permissions::permission_answer;
use updates::{
    ContentBlock, ContentChunk, Cost, NoticeLevel, PermissionAsk, SessionUpdate, StopReason,
    ToolCallContent, ToolCallUpdate, ToolStatus, TurnState, UsageUpdate,
};

/// Which protocol the updates are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// ACP v1 (`jucode acp`): `tool_call` opens a card, the prompt's response ends a turn.
    Acp,
    /// The WebSocket server: `state_update` says what the session does, cards open with
    /// `tool_call_update`, output streams as `tool_call_content_chunk`, approvals closed
    /// elsewhere are announced (`permission_resolved`), infos and errors are notices.
    Dashboard,
}

/// What a client must be told or asked after one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Update(SessionUpdate),
    /// Ask for permission for this call (`session/request_permission`).
    Ask {
        call_id: String,
        ask: PermissionAsk,
    },
    /// The approval request of this call is closed: withdraw the question if it is open.
    Closed {
        call_id: String,
        resolution: Resolution,
    },
    /// A user message was accepted: the turn it starts (or joins) runs.
    Started {
        content: String,
    },
    /// The running turn ended.
    Ended(TurnEnd),
    /// The answer to this client's `sync`: the session has handled every op sent before
    /// it (the servers' marker that a request's ops have been applied).
    Synced(String),
    Info(String),
    Error(String),
    /// A tool call asks the client to read or write a file or run a command (ACP's
    /// method and params, without `sessionId`); answer with `client_response`.
    ClientRequest {
        id: String,
        call_id: Option<String>,
        method: String,
        params: serde_json::Value,
    },
    /// Send this op to the session on the client's behalf: the answer to something
    /// neither dialect can put to its client (an MCP server's elicitation request).
    Op(crate::protocol::Op),
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub stop: StopReason,
    /// Why it failed, with [`StopReason::Error`].
    pub error: Option<String>,
}

/// The most tool output a card keeps to show (ACP replaces a card's content on every
/// update, so the card carries its output so far, up to its last this many bytes).
const CARD_OUTPUT_BYTES: usize = 64 * 1024;

struct OpenCard {
    card: cards::Card,
    /// What the card shows of its output so far (ACP), or what was streamed of it as
    /// chunks (dashboards), up to its last [`CARD_OUTPUT_BYTES`].
    output: String,
    /// The client terminal the call runs in (delegated shell commands).
    terminal: Option<String>,
}

/// One session's state as the ACP-shaped protocols need it.
pub struct Translator {
    dialect: Dialect,
    pub session_id: String,
    pub cwd: String,
    pub model: Option<ModelStatus>,
    pub models: Vec<ModelViewEntry>,
    pub mode: ApprovalMode,
    /// The queued messages, oldest first (`pending_messages`).
    pub queue: Vec<String>,
    /// Whether the next `transcript` is replayed as updates (the history of a session
    /// being loaded or attached to); later ones are answers to commands.
    pub replay_next_transcript: bool,
    context_window: u64,
    message: Option<String>,
    thought: Option<String>,
    next_id: u64,
    cards: HashMap<String, OpenCard>,
    approvals: Vec<String>,
    usage: Option<TurnUsage>,
    running: bool,
    stop: Option<StopReason>,
    error: Option<String>,
}

impl Translator {
    pub fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            session_id: String::new(),
            cwd: String::new(),
            model: None,
            models: Vec::new(),
            mode: ApprovalMode::Manual,
            queue: Vec::new(),
            replay_next_transcript: false,
            context_window: 0,
            message: None,
            thought: None,
            next_id: 0,
            cards: HashMap::new(),
            approvals: Vec::new(),
            usage: None,
            running: false,
            stop: None,
            error: None,
        }
    }

    /// Whether a turn runs now.
    pub fn running(&self) -> bool {
        self.running
    }

    /// The approval requests open now, oldest first.
    pub fn open_approvals(&self) -> &[String] {
        &self.approvals
    }

    /// A new message id: unique within the session's stream as this client sees it.
    fn new_id(&mut self, kind: &str) -> String {
        self.next_id += 1;
        format!("{}-{kind}-{}", short(&self.session_id), self.next_id)
    }

    pub fn handle(&mut self, event: &Event) -> Vec<Output> {
        let mut out = Vec::new();
        match event {
            Event::Startup {
                session_id,
                cwd,
                context_window,
                ..
            } => {
                self.session_id.clone_from(session_id);
                self.cwd.clone_from(cwd);
                self.context_window = *context_window;
            }
            Event::ModelStatus(status) => {
                let changed = self.model.as_ref().is_some_and(|old| old != status);
                self.context_window = status.context_window;
                self.model = Some(status.clone());
                if changed {
                    out.push(Output::Update(SessionUpdate::ConfigOptionUpdate {
                        config_options: config_options(self),
                    }));
                }
            }
            Event::CommandList { commands } => {
                out.push(Output::Update(SessionUpdate::AvailableCommandsUpdate {
                    available_commands: options::commands(commands),
                }));
            }
            Event::ApprovalMode { mode } => {
                self.mode = *mode;
                out.push(Output::Update(SessionUpdate::CurrentModeUpdate {
                    current_mode_id: mode.as_str().to_owned(),
                }));
            }
            Event::Info {
                stop_reason: Some(stop),
                ..
            } => {
                self.stop = Some(match stop {
                    ReplyStop::MaxTokens => StopReason::MaxTokens,
                    ReplyStop::Refusal => StopReason::Refusal,
                });
            }
            Event::Info { message, .. } => self.notice(&mut out, NoticeLevel::Info, message),
            Event::Error { message } => {
                if self.running {
                    self.error = Some(message.clone());
                }
                self.notice(&mut out, NoticeLevel::Error, message);
            }
            Event::Retrying { attempt, message } => {
                let text = format!("retrying the model request (attempt {attempt}): {message}");
                self.notice(&mut out, NoticeLevel::Info, &text);
            }
            Event::Status { message } => self.status(message, &mut out),
            Event::UserMessage(user) => {
                self.message = None;
                self.thought = None;
                if self.dialect == Dialect::Dashboard {
                    let message_id = self.new_id("user");
                    out.push(Output::Update(SessionUpdate::UserMessage(ContentChunk {
                        content: ContentBlock::text(user.content.clone()),
                        message_id,
                    })));
                }
                out.push(Output::Started {
                    content: user.content.clone(),
                });
            }
            Event::PendingMessages { messages } => self.queue.clone_from(messages),
            Event::Connecting => self.thought = None,
            Event::AssistantStart => self.message = Some(self.new_id("msg")),
            Event::ReasoningDelta { delta } => {
                let id = match &self.thought {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.new_id("thought");
                        self.thought = Some(id.clone());
                        id
                    }
                };
                out.push(Output::Update(SessionUpdate::AgentThoughtChunk(chunk(
                    delta, id,
                ))));
            }
            Event::AssistantDelta { delta } => {
                let id = match &self.message {
                    Some(id) => id.clone(),
                    None => {
                        let id = self.new_id("msg");
                        self.message = Some(id.clone());
                        id
                    }
                };
                out.push(Output::Update(SessionUpdate::AgentMessageChunk(chunk(
                    delta, id,
                ))));
            }
            Event::ToolStart {
                call_id,
                name,
                arguments,
                card: told,
            } => {
                // Text after a tool call is a new message.
                self.message = None;
                let mut card = cards::card(name, arguments.as_ref(), told);
                if self.dialect == Dialect::Dashboard {
                    card.kind = card.kind.for_dashboard();
                }
                let update = ToolCallUpdate {
                    tool_call_id: call_id.clone(),
                    title: Some(card.title.clone()),
                    kind: Some(card.kind),
                    status: Some(ToolStatus::InProgress),
                    content: (!card.preview.is_empty()).then(|| card.preview.clone()),
                    locations: Some(card.locations.clone()),
                    raw_input: card.arguments.clone(),
                    raw_output: None,
                };
                out.push(Output::Update(match self.dialect {
                    Dialect::Acp => SessionUpdate::ToolCall(update),
                    Dialect::Dashboard => SessionUpdate::ToolCallUpdate(update),
                }));
                let open = OpenCard {
                    card,
                    output: String::new(),
                    terminal: None,
                };
                self.cards.insert(call_id.clone(), open);
            }
            Event::ToolUpdate {
                call_id, output, ..
            } => self.tool_progress(call_id, output, &mut out),
            Event::ToolOutput {
                call_id,
                name,
                output,
                is_error,
            } => {
                let open = self.cards.remove(call_id);
                if self.dialect == Dialect::Dashboard {
                    // A client that prints chunks sees every result, not only output
                    // streamed while the call ran (and that part not twice).
                    let streamed = open.as_ref().map_or("", |open| open.output.as_str());
                    let rest = unstreamed(output, streamed);
                    if !rest.is_empty() {
                        out.push(Output::Update(SessionUpdate::ToolCallContentChunk {
                            tool_call_id: call_id.clone(),
                            content: ContentBlock::text(rest),
                        }));
                    }
                }
                let update = closed_card(call_id, name, open.as_ref(), output, *is_error);
                out.push(Output::Update(SessionUpdate::ToolCallUpdate(update)));
            }
            Event::ApprovalRequest {
                call_id,
                name,
                summary,
                hunks,
                ..
            } => {
                if !self.approvals.contains(call_id) {
                    self.approvals.push(call_id.clone());
                }
                let ask = self.permission(call_id, name, summary, hunks.as_deref());
                out.push(Output::Ask {
                    call_id: call_id.clone(),
                    ask,
                });
                if self.dialect == Dialect::Dashboard {
                    out.push(Output::Update(state(TurnState::RequiresAction, None, None)));
                }
            }
            // ACP v1 and the dashboards' protocol have no way to ask the user for a form:
            // the request is declined at once rather than left for nobody to answer.
            Event::ElicitationRequest { id, .. } => {
                out.push(Output::Op(crate::protocol::Op::ElicitationResponse {
                    id: id.clone(),
                    action: crate::protocol::ElicitationAction::Decline,
                    content: None,
                }));
            }
            Event::ApprovalResolved { call_id, decision } => {
                self.approvals.retain(|open| open != call_id);
                out.push(Output::Closed {
                    call_id: call_id.clone(),
                    resolution: *decision,
                });
                if self.dialect == Dialect::Dashboard {
                    out.push(Output::Update(SessionUpdate::PermissionResolved {
                        tool_call_id: call_id.clone(),
                        decision: *decision,
                    }));
                    if self.approvals.is_empty() && self.running {
                        out.push(Output::Update(state(TurnState::Running, None, None)));
                    }
                }
            }
            Event::Usage(usage) => self.usage = Some(*usage),
            Event::ContextUsage { tokens, cost, .. } => {
                let turn = self
                    .usage
                    .take()
                    .filter(|_| self.dialect == Dialect::Dashboard);
                out.push(Output::Update(SessionUpdate::UsageUpdate(UsageUpdate {
                    used: *tokens,
                    size: self.context_window,
                    cost: Cost {
                        amount: *cost,
                        currency: "USD",
                    },
                    input_tokens: turn.map(|usage| usage.input_tokens),
                    cached_input_tokens: turn.map(|usage| usage.cached_input_tokens),
                    cache_write_input_tokens: turn.map(|usage| usage.cache_write_input_tokens),
                    output_tokens: turn.map(|usage| usage.output_tokens),
                    reasoning_tokens: turn.map(|usage| usage.reasoning_tokens),
                })));
            }
            Event::ModelView { models, .. } => self.models.clone_from(models),
            Event::Synced { token } => out.push(Output::Synced(token.clone())),
            Event::Transcript { items } if std::mem::take(&mut self.replay_next_transcript) => {
                for item in items {
                    let updates = replay::item(self, item);
                    out.extend(updates.into_iter().map(Output::Update));
                }
            }
            Event::ProposedPlan {
                title,
                markdown,
                status,
                ..
            } if *status == crate::protocol::PlanStatus::Pending => {
                let id = self.new_id("plan");
                let text = format!("**Plan: {title}**\n\n{markdown}");
                out.push(Output::Update(SessionUpdate::AgentMessageChunk(chunk(
                    &text, id,
                ))));
            }
            Event::ClientRequest {
                id,
                call_id,
                method,
                params,
            } => out.push(Output::ClientRequest {
                id: id.clone(),
                call_id: call_id.clone(),
                method: method.clone(),
                params: params.clone(),
            }),
            Event::Plan { plan } => {
                out.push(Output::Update(SessionUpdate::Plan {
                    entries: options::plan(plan),
                }));
            }
            _ => {}
        }
        out
    }

    /// What a dashboard is told when it cancels a session that runs nothing: it is
    /// idle, as it would be after a cancelled turn.
    pub fn idle_cancelled() -> SessionUpdate {
        state(TurnState::Idle, Some(StopReason::Cancelled), None)
    }

    /// A message of the agent's own (the answer to a slash command the user typed).
    pub fn reply_update(&mut self, text: &str) -> SessionUpdate {
        let id = self.new_id("msg");
        SessionUpdate::AgentMessageChunk(chunk(text, id))
    }

    /// The client runs this call's command in its terminal `terminal_id`: the card
    /// shows that terminal from now on.
    pub fn terminal_started(&mut self, call_id: &str, terminal_id: &str) -> Vec<Output> {
        let Some(open) = self.cards.get_mut(call_id) else {
            return Vec::new();
        };
        open.terminal = Some(terminal_id.to_owned());
        vec![Output::Update(SessionUpdate::ToolCallUpdate(
            ToolCallUpdate {
                tool_call_id: call_id.to_owned(),
                content: Some(vec![ToolCallContent::Terminal {
                    terminal_id: terminal_id.to_owned(),
                }]),
                ..ToolCallUpdate::default()
            },
        ))]
    }

    /// The session ended (closed, or the link to it lost): every card still open is
    /// closed as failed, every approval withdrawn, a running turn ends cancelled.
    pub fn end(&mut self, why: &str) -> Vec<Output> {
        let mut out = Vec::new();
        for (call_id, open) in std::mem::take(&mut self.cards) {
            let update = closed_card(&call_id, &open.card.name, Some(&open), why, true);
            out.push(Output::Update(SessionUpdate::ToolCallUpdate(update)));
        }
        for call_id in std::mem::take(&mut self.approvals) {
            out.push(Output::Closed {
                call_id,
                resolution: Resolution::Interrupted,
            });
        }
        if self.running {
            self.running = false;
            out.extend(self.turn_end(TurnEnd {
                stop: StopReason::Cancelled,
                error: None,
            }));
        }
        out
    }

    fn status(&mut self, status: &SessionStatus, out: &mut Vec<Output>) {
        match status {
            SessionStatus::Streaming | SessionStatus::Steering | SessionStatus::Queued(_) => {
                if !self.running {
                    self.running = true;
                    if self.dialect == Dialect::Dashboard {
                        out.push(Output::Update(state(TurnState::Running, None, None)));
                    }
                }
            }
            SessionStatus::Ready | SessionStatus::Interrupted => {
                if !std::mem::take(&mut self.running) {
                    return;
                }
                let error = self.error.take();
                let stop = self.stop.take();
                let end = if *status == SessionStatus::Interrupted {
                    TurnEnd {
                        stop: StopReason::Cancelled,
                        error: None,
                    }
                } else if error.is_some() {
                    TurnEnd {
                        stop: StopReason::Error,
                        error,
                    }
                } else {
                    TurnEnd {
                        stop: stop.unwrap_or(StopReason::EndTurn),
                        error: None,
                    }
                };
                out.extend(self.turn_end(end));
            }
            // Trust has no ACP form; the trust prompt reaches the user as a notice.
            SessionStatus::Compacting
            | SessionStatus::ApprovalMode(_)
            | SessionStatus::Trusted(_)
            | SessionStatus::Untrusted(_) => {}
        }
    }

    fn turn_end(&self, end: TurnEnd) -> Vec<Output> {
        let mut out = Vec::new();
        if self.dialect == Dialect::Dashboard {
            // The dashboards' protocol ends a failed turn as `refusal`, with the error.
            let stop = match end.stop {
                StopReason::Error => StopReason::Refusal,
                stop => stop,
            };
            out.push(Output::Update(state(
                TurnState::Idle,
                Some(stop),
                end.error.clone(),
            )));
        }
        out.push(Output::Ended(end));
        out
    }

    fn notice(&self, out: &mut Vec<Output>, level: NoticeLevel, message: &str) {
        if self.dialect == Dialect::Dashboard {
            out.push(Output::Update(SessionUpdate::Notice {
                level,
                message: message.to_owned(),
            }));
        }
        out.push(match level {
            NoticeLevel::Info => Output::Info(message.to_owned()),
            NoticeLevel::Error => Output::Error(message.to_owned()),
        });
    }

    fn tool_progress(&mut self, call_id: &str, output: &str, out: &mut Vec<Output>) {
        let Some(open) = self.cards.get_mut(call_id) else {
            return;
        };
        match self.dialect {
            Dialect::Dashboard => {
                open.output.push_str(output);
                keep_tail(&mut open.output, CARD_OUTPUT_BYTES);
                out.push(Output::Update(SessionUpdate::ToolCallContentChunk {
                    tool_call_id: call_id.to_owned(),
                    content: ContentBlock::text(output),
                }));
            }
            // The client's terminal shows the output itself.
            Dialect::Acp if open.terminal.is_some() => {}
            Dialect::Acp => {
                open.output.push_str(output);
                keep_tail(&mut open.output, CARD_OUTPUT_BYTES);
                out.push(Output::Update(SessionUpdate::ToolCallUpdate(
                    ToolCallUpdate {
                        tool_call_id: call_id.to_owned(),
                        content: Some(vec![cards::text(open.output.clone())]),
                        ..ToolCallUpdate::default()
                    },
                )));
            }
        }
    }
}

fn chunk(text: &str, message_id: String) -> ContentChunk {
    ContentChunk {
        content: ContentBlock::text(text),
        message_id,
    }
}

fn state(
    state: TurnState,
    stop_reason: Option<StopReason>,
    message: Option<String>,
) -> SessionUpdate {
    SessionUpdate::StateUpdate {
        state,
        stop_reason,
        message,
    }
}

/// The first 8 characters of an id (UUIDv7s share their leading time digits within a
/// session's life, so message ids stay distinct by their counter).
fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// What of a call's result the streamed output has not shown: the result without the
/// streamed text at its end (a command's result is its exit line, then its output) or
/// at its start; the whole result when it is other text.
fn unstreamed<'a>(result: &'a str, streamed: &str) -> &'a str {
    if streamed.is_empty() {
        return result;
    }
    if let Some(rest) = result.strip_suffix(streamed) {
        return rest;
    }
    if let Some(rest) = result.strip_prefix(streamed) {
        return rest;
    }
    result
}

/// Cuts `text` to at most its last `max` bytes, on a character boundary.
fn keep_tail(text: &mut String, max: usize) {
    if text.len() > max {
        let mut cut = text.len() - max;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text.drain(..cut);
    }
}

#[cfg(test)]
mod tests;
