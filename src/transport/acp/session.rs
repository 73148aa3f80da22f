//! One ACP session: its link's events through the translator, and the client requests
//! that wait on them (the open or load, a prompt, mode and option changes, close).
//!
//! Requests that change a session get their answer once the session has handled them.
//! The serve protocol acknowledges few ops, so each such op is followed by `sync`, whose
//! `synced` answer comes back to this link only and after everything the earlier ops
//! caused (a session handles one client's ops in order): a [`Barrier`] waits for it.
//! Opening asks for the model list (`list_models`) before its barrier, for the config
//! options.

use serde_json::{Value, json};

use super::connection::{Acp, ClientAsk, OpenKind, Opening, Session};
use crate::protocol::Op;
use crate::transport::jsonrpc::{RpcError, RpcId};
use crate::transport::peer::Pending;
use crate::transport::peer::core::{self, Core};
use crate::transport::translate::updates::{SessionUpdate, StopReason};
use crate::transport::translate::{self, Dialect, Output, Translator};

/// A request answered when the session's `synced` for it (to this link) arrives.
pub(super) enum Barrier {
    /// The session's startup batch or snapshot is all in: answer the open.
    Ready,
    SetMode(RpcId),
    SetConfig(RpcId),
    /// A slash-command prompt has been handled.
    Command,
}

impl core::Barrier for Barrier {
    fn ready() -> Self {
        Self::Ready
    }

    fn request(self) -> Option<RpcId> {
        match self {
            Self::SetMode(id) | Self::SetConfig(id) => Some(id),
            // The prompt a command answers is answered by the session's end.
            Self::Ready | Self::Command => None,
        }
    }
}

pub(super) struct Prompt {
    pub id: RpcId,
    /// The message sent (once its attachments are decoded), to recognise its echo.
    pub content: Option<String>,
    /// Its turn runs (the echo came).
    started: bool,
    command: bool,
    /// The client cancelled it: however the turn ends, the answer is `cancelled`.
    cancelled: bool,
}

impl Prompt {
    pub fn message(id: RpcId) -> Self {
        Self {
            id,
            content: None,
            started: false,
            command: false,
            cancelled: false,
        }
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    pub fn command(id: RpcId) -> Self {
        Self {
            command: true,
            ..Self::message(id)
        }
    }
}

/// What an editor's session keeps besides the peers' core: the prompt being answered,
/// and the commands held until the open is answered.
#[derive(Default)]
pub(super) struct Extra {
    pub prompt: Option<Prompt>,
    held_commands: Option<SessionUpdate>,
}

impl Session {
    /// Starts over from a fresh snapshot for request `id` (`session/load` or
    /// `session/resume` of a session already open). Returns the permission requests
    /// to withdraw: the snapshot asks again for what is still open.
    pub fn restart(&mut self, id: RpcId, kind: OpenKind) -> Vec<i64> {
        self.tr = Translator::new(Dialect::Acp);
        self.tr.replay_next_transcript = kind == OpenKind::Load;
        self.pending = Some(Pending {
            id,
            open: Opening {
                kind,
                mcp: Vec::new(),
            },
        });
        self.held_asks.clear();
        self.x.held_commands = None;
        self.permissions
            .drain()
            .map(|(_, request)| request)
            .collect()
    }

    /// The op that sets config option `config` to `value`.
    pub fn config_op(&self, config: &str, value: &Value) -> Result<Op, RpcError> {
        let value = value
            .as_str()
            .ok_or_else(|| RpcError::invalid_params("value must be a string"))?;
        let options = translate::config_options(&self.tr);
        let option = options
            .iter()
            .find(|option| option.id == config)
            .ok_or_else(|| RpcError::invalid_params(format!("unknown config option: {config}")))?;
        if !option.options.iter().any(|choice| choice.value == value) {
            return Err(RpcError::invalid_params(format!(
                "{config} has no value {value}"
            )));
        }
        Ok(if config == "model" {
            Op::SetModel {
                model: Some(value.to_owned()),
                reasoning_effort: None,
            }
        } else {
            Op::SetModel {
                model: None,
                reasoning_effort: Some(value.to_owned()),
            }
        })
    }

    /// The client cancels the prompt. `Some(id)`: answer that prompt `cancelled` now
    /// (it had not started); otherwise its turn is interrupted and answered when it
    /// ends.
    pub async fn cancel(&mut self) -> Option<RpcId> {
        let prompt = self.x.prompt.as_mut()?;
        prompt.cancelled = true;
        if prompt.started || self.tr.running() && prompt.command {
            self.link.send(Op::Interrupt { index: None }).await;
            return None;
        }
        let prompt = self.x.prompt.take()?;
        // Still queued behind another client's turn: take it out of the queue.
        if let Some(content) = &prompt.content
            && let Some(index) = self.tr.queue.iter().position(|queued| queued == content)
        {
            let index = i64::try_from(index).ok();
            self.link.send(Op::Unqueue { index }).await;
        }
        Some(prompt.id)
    }
}

impl Acp {
    /// What the core leaves to ACP of a session's translated events.
    pub(super) async fn session_output(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        session: &mut Session,
        output: Output,
    ) {
        match output {
            Output::Update(next) => {
                if let Some(pending) = &session.pending {
                    match (&next, pending.open.kind) {
                        // The history of a session being loaded comes before the answer.
                        (_, OpenKind::Load) => {}
                        (SessionUpdate::AvailableCommandsUpdate { .. }, _) => {
                            session.x.held_commands = Some(next);
                            return;
                        }
                        // The answer carries the modes and options.
                        _ => return,
                    }
                }
                update(core, name, &next).await;
            }
            Output::Started { content } => {
                if let Some(prompt) = session.x.prompt.as_mut()
                    && !prompt.started
                    && (prompt.command || prompt.content.as_deref() == Some(content.as_str()))
                {
                    prompt.started = true;
                }
            }
            Output::Ended(end) => {
                if let Some(prompt) = session.x.prompt.take_if(|prompt| prompt.started) {
                    let answer = match end.stop {
                        _ if prompt.cancelled => Ok(json!({"stopReason": "cancelled"})),
                        StopReason::Error => Err(RpcError::internal(
                            end.error.unwrap_or_else(|| "the turn failed".into()),
                        )),
                        stop => Ok(json!({"stopReason": stop})),
                    };
                    core.reply(&prompt.id, answer).await;
                }
            }
            Output::ClientRequest {
                id,
                call_id,
                method,
                mut params,
            } => {
                if let Value::Object(fields) = &mut params {
                    fields.insert("sessionId".into(), json!(name));
                }
                let ask = ClientAsk {
                    session: name.to_owned(),
                    id,
                    method: method.clone(),
                    call_id,
                };
                core.request(&method, &params, ask).await;
            }
            Output::Info(text) | Output::Error(text) => {
                // The answer to a slash command the user typed is shown as a message.
                if session
                    .x
                    .prompt
                    .as_ref()
                    .is_some_and(|prompt| prompt.command && !prompt.started)
                {
                    let reply = session.tr.reply_update(&text);
                    update(core, name, &reply).await;
                } else {
                    tracing::debug!(session = name, text, "session notice");
                }
            }
            // The core handles these.
            Output::Ask { .. } | Output::Closed { .. } | Output::Synced(_) | Output::Op(_) => {}
        }
    }

    /// A barrier came back: answer what waited for it.
    pub(super) async fn barrier_passed(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        session: &mut Session,
        barrier: Barrier,
    ) {
        match barrier {
            Barrier::Ready => {
                let Some(pending) = session.pending.take() else {
                    return;
                };
                let mut result = json!({
                    "modes": translate::modes(session.tr.mode),
                    "configOptions": translate::config_options(&session.tr),
                });
                if pending.open.kind == OpenKind::New {
                    result["sessionId"] = json!(name);
                }
                core.answer(&pending.id, &result).await;
                if let Some(commands) = session.x.held_commands.take() {
                    update(core, name, &commands).await;
                }
                core.release_asks(name, session).await;
            }
            Barrier::SetMode(id) => core.answer(&id, &json!({})).await,
            Barrier::SetConfig(id) => {
                let options = translate::config_options(&session.tr);
                core.answer(&id, &json!({"configOptions": options})).await;
            }
            Barrier::Command => {
                if let Some(prompt) = session.x.prompt.take_if(|p| p.command && !p.started) {
                    let stop = if prompt.cancelled {
                        "cancelled"
                    } else {
                        "end_turn"
                    };
                    core.answer(&prompt.id, &json!({"stopReason": stop})).await;
                }
            }
        }
    }

    /// The client answered a file or terminal request: the answer goes to the session;
    /// a terminal it created is embedded in the call's card.
    pub(super) async fn client_answered(
        &mut self,
        core: &mut Core<Self>,
        ask: ClientAsk,
        result: Result<Value, RpcError>,
    ) {
        let ClientAsk {
            session: name,
            id,
            method,
            call_id,
        } = ask;
        let Some(mut session) = core.sessions.remove(&name) else {
            return;
        };
        if method == "terminal/create"
            && let (Ok(created), Some(call_id)) = (&result, &call_id)
            && let Some(terminal) = created.get("terminalId").and_then(Value::as_str)
        {
            let outputs = session.tr.terminal_started(call_id, terminal);
            core.apply_all(self, &name, &mut session, outputs).await;
        }
        let (result, error) = match result {
            Ok(result) => (Some(result), None),
            Err(error) => (None, Some(error.message)),
        };
        session
            .link
            .send(Op::ClientResponse { id, result, error })
            .await;
        core.sessions.insert(name, session);
    }
}

async fn update(core: &Core<Acp>, name: &str, update: &SessionUpdate) {
    core.notify(
        "session/update",
        &json!({"sessionId": name, "update": update}),
    )
    .await;
}
