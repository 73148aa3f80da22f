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

use super::connection::{Connection, OpenKind, Outgoing};
use crate::protocol::Op;
use crate::transport::jsonrpc::{self, RpcError, RpcId};
use crate::transport::link::{Incoming, Link, LinkEvent};
use crate::transport::peer::PeerSession;
use crate::transport::translate::updates::{PermissionAsk, SessionUpdate, StopReason};
use crate::transport::translate::{self, Dialect, Output, Translator};

/// The open/load/resume request a session answers once its first events are in.
pub(super) struct Pending {
    pub id: RpcId,
    pub kind: OpenKind,
}

/// A request answered when the session's `synced` for it (to this link) arrives.
pub(super) enum Barrier {
    /// The session's startup batch or snapshot is all in: answer the open.
    Ready,
    SetMode(RpcId),
    SetConfig(RpcId),
    /// A slash-command prompt has been handled.
    Command,
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

/// One session of the editor: the peers' core, plus what ACP adds (the prompt being
/// answered, the commands held until the open is answered).
pub(super) struct Session {
    pub peer: PeerSession<Barrier>,
    pub pending: Option<Pending>,
    pub prompt: Option<Prompt>,
    /// Held back until the open is answered.
    held_commands: Option<SessionUpdate>,
}

impl Session {
    pub fn new(link: Link, pending: Pending) -> Self {
        let mut peer = PeerSession::new(link, Dialect::Acp);
        peer.tr.replay_next_transcript = pending.kind == OpenKind::Load;
        Self {
            peer,
            pending: Some(pending),
            prompt: None,
            held_commands: None,
        }
    }

    /// Starts over from a fresh snapshot for request `id` (`session/load` or
    /// `session/resume` of a session already open). Returns the permission requests
    /// to withdraw: the snapshot asks again for what is still open.
    pub fn restart(&mut self, id: RpcId, kind: OpenKind) -> Vec<i64> {
        self.peer.tr = Translator::new(Dialect::Acp);
        self.peer.tr.replay_next_transcript = kind == OpenKind::Load;
        self.pending = Some(Pending { id, kind });
        self.peer.held_asks.clear();
        self.held_commands = None;
        self.peer
            .permissions
            .drain()
            .map(|(_, request)| request)
            .collect()
    }

    /// Waits for everything sent so far to be handled, then `barrier` is answered.
    /// Barriers are answered in order, so one token serves them all.
    pub async fn barrier(&mut self, barrier: Barrier) {
        let with_models = matches!(barrier, Barrier::Ready);
        self.peer.barrier(barrier, with_models).await;
    }

    /// The op that sets config option `config` to `value`.
    pub fn config_op(&self, config: &str, value: &Value) -> Result<Op, RpcError> {
        let value = value
            .as_str()
            .ok_or_else(|| RpcError::invalid_params("value must be a string"))?;
        let options = translate::config_options(&self.peer.tr);
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
        let prompt = self.prompt.as_mut()?;
        prompt.cancelled = true;
        if prompt.started || self.peer.tr.running() && prompt.command {
            self.peer.link.send(Op::Interrupt { index: None }).await;
            return None;
        }
        let prompt = self.prompt.take()?;
        // Still queued behind another client's turn: take it out of the queue.
        if let Some(content) = &prompt.content
            && let Some(index) = self
                .peer
                .tr
                .queue
                .iter()
                .position(|queued| queued == content)
        {
            let index = i64::try_from(index).ok();
            self.peer.link.send(Op::Unqueue { index }).await;
        }
        Some(prompt.id)
    }
}

impl Connection {
    pub(super) async fn on_link(&mut self, event: LinkEvent) {
        let name = event.session;
        match event.incoming {
            Incoming::Opened { tag, link } => {
                let serves = self.client.op();
                if let Some((session, mcp)) = self.adopt(tag, link) {
                    if let Some(op) = serves {
                        session.peer.link.send(op).await;
                    }
                    for op in mcp {
                        session.peer.link.send(op).await;
                    }
                    session.barrier(Barrier::Ready).await;
                }
            }
            Incoming::Event(ev) => {
                let Some(mut session) = self.sessions.remove(&name) else {
                    return;
                };
                for output in session.peer.tr.handle(&ev) {
                    self.apply(&name, &mut session, output).await;
                }
                self.sessions.insert(name, session);
            }
            Incoming::Closed(why) => {
                let Some(mut session) = self.sessions.remove(&name) else {
                    return;
                };
                for output in session.peer.tr.end(&why) {
                    self.apply(&name, &mut session, output).await;
                }
                self.ended(session, &why).await;
            }
        }
    }

    /// Answers whatever still waited on a session that has ended.
    async fn ended(&mut self, mut session: Session, why: &str) {
        let gone = || RpcError::internal(format!("the session ended: {why}"));
        if let Some(pending) = session.pending {
            self.reply(
                &pending.id,
                Err(RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, why)),
            )
            .await;
        }
        if let Some(prompt) = session.prompt {
            let answer = if prompt.cancelled {
                Ok(json!({"stopReason": "cancelled"}))
            } else {
                Err(gone())
            };
            self.reply(&prompt.id, answer).await;
        }
        for barrier in session.peer.take_barriers() {
            if let Barrier::SetMode(id) | Barrier::SetConfig(id) = barrier {
                self.reply(&id, Err(gone())).await;
            }
        }
        for (_, request) in session.peer.permissions {
            self.withdraw(request).await;
        }
        if let Some(id) = session.peer.closing {
            self.reply(&id, Ok(json!({}))).await;
        }
    }

    pub(super) async fn withdraw(&mut self, request: i64) {
        self.outgoing.withdraw(request);
        self.notify("$/cancel_request", json!({"requestId": request}))
            .await;
    }

    async fn apply(&mut self, name: &str, session: &mut Session, output: Output) {
        match output {
            Output::Update(update) => {
                if let Some(pending) = &session.pending {
                    match (&update, pending.kind) {
                        // The history of a session being loaded comes before the answer.
                        (_, OpenKind::Load) => {}
                        (SessionUpdate::AvailableCommandsUpdate { .. }, _) => {
                            session.held_commands = Some(update);
                            return;
                        }
                        // The answer carries the modes and options.
                        _ => return,
                    }
                }
                self.update(name, &update).await;
            }
            Output::Ask { call_id, ask } => {
                if session.pending.is_some() {
                    session.peer.held_asks.push((call_id, ask));
                } else {
                    self.ask(name, session, call_id, ask).await;
                }
            }
            Output::Closed { call_id, .. } => {
                session.peer.held_asks.retain(|(held, _)| *held != call_id);
                if let Some(request) = session.peer.permissions.remove(&call_id) {
                    self.withdraw(request).await;
                }
            }
            Output::Started { content } => {
                if let Some(prompt) = session.prompt.as_mut()
                    && !prompt.started
                    && (prompt.command || prompt.content.as_deref() == Some(content.as_str()))
                {
                    prompt.started = true;
                }
            }
            Output::Ended(end) => {
                if let Some(prompt) = session.prompt.take_if(|prompt| prompt.started) {
                    let answer = match end.stop {
                        _ if prompt.cancelled => Ok(json!({"stopReason": "cancelled"})),
                        StopReason::Error => Err(RpcError::internal(
                            end.error.unwrap_or_else(|| "the turn failed".into()),
                        )),
                        stop => Ok(json!({"stopReason": stop})),
                    };
                    self.reply(&prompt.id, answer).await;
                }
            }
            Output::Synced(token) => {
                if let Some(barrier) = session.peer.passed(&token) {
                    self.passed(name, session, barrier).await;
                }
            }
            Output::Op(op) => {
                session.peer.link.send(op).await;
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
                let outgoing = Outgoing::Client {
                    session: name.to_owned(),
                    id,
                    method: method.clone(),
                    call_id,
                };
                self.request(&method, params, outgoing).await;
            }
            Output::Info(text) | Output::Error(text) => {
                // The answer to a slash command the user typed is shown as a message.
                if session
                    .prompt
                    .as_ref()
                    .is_some_and(|prompt| prompt.command && !prompt.started)
                {
                    let update = session.peer.tr.reply_update(&text);
                    self.update(name, &update).await;
                } else {
                    tracing::debug!(session = name, text, "session notice");
                }
            }
        }
    }

    /// A barrier came back: answer what waited for it.
    async fn passed(&mut self, name: &str, session: &mut Session, barrier: Barrier) {
        match barrier {
            Barrier::Ready => {
                let Some(pending) = session.pending.take() else {
                    return;
                };
                let mut result = json!({
                    "modes": translate::modes(session.peer.tr.mode),
                    "configOptions": translate::config_options(&session.peer.tr),
                });
                if pending.kind == OpenKind::New {
                    result["sessionId"] = json!(name);
                }
                self.reply(&pending.id, Ok(result)).await;
                if let Some(commands) = session.held_commands.take() {
                    self.update(name, &commands).await;
                }
                for (call_id, ask) in std::mem::take(&mut session.peer.held_asks) {
                    self.ask(name, session, call_id, ask).await;
                }
            }
            Barrier::SetMode(id) => self.reply(&id, Ok(json!({}))).await,
            Barrier::SetConfig(id) => {
                let options = translate::config_options(&session.peer.tr);
                self.reply(&id, Ok(json!({"configOptions": options}))).await;
            }
            Barrier::Command => {
                if let Some(prompt) = session.prompt.take_if(|p| p.command && !p.started) {
                    let stop = if prompt.cancelled {
                        "cancelled"
                    } else {
                        "end_turn"
                    };
                    self.reply(&prompt.id, Ok(json!({"stopReason": stop})))
                        .await;
                }
            }
        }
    }

    /// The client answered a file or terminal request: the answer goes to the session;
    /// a terminal it created is embedded in the call's card.
    pub(super) async fn client_answered(
        &mut self,
        name: &str,
        id: String,
        method: &str,
        call_id: Option<String>,
        result: Result<Value, RpcError>,
    ) {
        let Some(mut session) = self.sessions.remove(name) else {
            return;
        };
        if method == "terminal/create"
            && let (Ok(created), Some(call_id)) = (&result, &call_id)
            && let Some(terminal) = created.get("terminalId").and_then(Value::as_str)
        {
            for output in session.peer.tr.terminal_started(call_id, terminal) {
                self.apply(name, &mut session, output).await;
            }
        }
        let (result, error) = match result {
            Ok(result) => (Some(result), None),
            Err(error) => (None, Some(error.message)),
        };
        session
            .peer
            .link
            .send(Op::ClientResponse { id, result, error })
            .await;
        self.sessions.insert(name.to_owned(), session);
    }

    async fn update(&self, name: &str, update: &SessionUpdate) {
        self.notify(
            "session/update",
            json!({"sessionId": name, "update": update}),
        )
        .await;
    }

    async fn ask(
        &mut self,
        name: &str,
        session: &mut Session,
        call_id: String,
        ask: PermissionAsk,
    ) {
        let mut params = json!(ask);
        params["sessionId"] = json!(name);
        let outgoing = Outgoing::Permission {
            session: name.to_owned(),
            call_id: call_id.clone(),
        };
        let request = self
            .request("session/request_permission", params, outgoing)
            .await;
        session.peer.permissions.insert(call_id, request);
    }
}
