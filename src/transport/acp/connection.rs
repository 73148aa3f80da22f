//! One ACP connection: the client's requests and notifications, and the answers to
//! the requests jucode makes of the client (files and terminals), on the peers' core.

use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::params::{
    CancelRequest, ClientCapabilities, Initialize, ListSessions, Method, NewSession, PromptParams,
    SessionRef, SetConfig, SetMode,
};
use super::session::{Barrier, Prompt};
use crate::protocol::{Frame, Op, SessionInfo, UserInput};
use crate::transport::jsonrpc::{self, RpcError, RpcId};
use crate::transport::link::{Backend, Target};
use crate::transport::peer::core::{self, Core};
use crate::transport::translate::prompt as blocks;

/// The ACP protocol version this agent speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// What a session being opened was asked for.
pub(super) struct Opening {
    pub kind: OpenKind,
    /// The editor's MCP servers, sent once the session is open.
    pub mcp: Vec<Op>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpenKind {
    New,
    Load,
    Resume,
}

/// A file or terminal request of a session's tool call, sent to the editor.
pub(super) struct ClientAsk {
    pub session: String,
    pub id: String,
    pub method: String,
    pub call_id: Option<String>,
}

/// The ACP dialect: what the editor's connection adds to the peers' core.
pub(super) struct Acp {
    pub attachments: PathBuf,
    pub client: ClientCapabilities,
}

pub(super) type Session = crate::transport::peer::PeerSession<Acp>;

/// Serves `frames` until they end; then every link is dropped (the daemon detaches
/// them, sessions in process end).
pub(super) async fn run(
    backend: Backend,
    out: mpsc::Sender<Bytes>,
    attachments: PathBuf,
    mut frames: mpsc::Receiver<Frame>,
) {
    let (mut core, mut inputs) = Core::new(backend, out);
    let mut acp = Acp {
        attachments,
        client: ClientCapabilities::default(),
    };
    loop {
        tokio::select! {
            frame = frames.recv() => match frame {
                Some(frame) => on_frame(&mut core, &mut acp, frame).await,
                None => break,
            },
            Some(event) = inputs.events.recv() => core.on_link(&mut acp, event).await,
            Some(done) = inputs.internal.recv() => core.on_internal(&mut acp, done).await,
        }
    }
    core.sessions.clear();
}

async fn on_frame(core: &mut Core<Acp>, acp: &mut Acp, frame: Frame) {
    let line = match frame {
        Frame::Line(line) => line,
        Frame::TooLong { limit } => {
            let error = RpcError::new(
                jsonrpc::INVALID_REQUEST,
                format!(
                    "message longer than {} MiB was skipped",
                    limit / (1024 * 1024)
                ),
            );
            core.send(jsonrpc::error_response(&RpcId::null(), &error))
                .await;
            return;
        }
    };
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    core.on_message(acp, &line).await;
}

impl Acp {
    async fn prompt(
        &mut self,
        core: &mut Core<Self>,
        id: &RpcId,
        params: Value,
    ) -> Result<(), RpcError> {
        let params: PromptParams = jsonrpc::params(params)?;
        let session = core.session_mut(&params.session_id)?;
        if session.x.prompt.is_some() {
            return Err(RpcError::new(
                jsonrpc::INVALID_REQUEST,
                "a prompt is already running in this session; cancel it or wait for its answer",
            ));
        }
        if let Some(command) = blocks::command_of(&params.prompt) {
            let word = command.split_whitespace().next().unwrap_or("");
            if matches!(word, "/quit" | "/exit") {
                return Err(RpcError::invalid_params(
                    "use session/close to end a session",
                ));
            }
            if word == "/resume" && command.split_whitespace().nth(1).is_some() {
                return Err(RpcError::invalid_params(
                    "use session/load to continue another session",
                ));
            }
            session.x.prompt = Some(Prompt::command(id.clone()));
            session.link.send(Op::Command { input: command }).await;
            session.barrier(Barrier::Command, false).await;
            return Ok(());
        }
        session.x.prompt = Some(Prompt::message(id.clone()));
        core.decode_prompt(
            params.session_id,
            id,
            params.prompt,
            self.attachments.clone(),
        );
        Ok(())
    }

    /// `session/load` or `session/resume`.
    async fn reopen(
        &mut self,
        core: &mut Core<Self>,
        id: &RpcId,
        kind: OpenKind,
        params: Value,
    ) -> Result<(), RpcError> {
        let params: SessionRef = jsonrpc::params(params)?;
        if !crate::sessions::valid_id(&params.session_id) {
            return Err(RpcError::unknown_session(&params.session_id));
        }
        let mcp = super::mcp::ops(params.mcp_servers)?;
        // A session this connection has open starts over on the same link, from a
        // fresh snapshot.
        if let Some(mut session) = core.sessions.remove(&params.session_id) {
            if session.pending.is_some() {
                core.sessions.insert(params.session_id, session);
                return Err(RpcError::new(
                    jsonrpc::INVALID_REQUEST,
                    "this session is still being opened",
                ));
            }
            for request in session.restart(id.clone(), kind) {
                core.withdraw(request).await;
            }
            for op in mcp {
                session.link.send(op).await;
            }
            session.link.resync().await;
            session
                .barrier(<Barrier as core::Barrier>::ready(), true)
                .await;
            core.sessions.insert(params.session_id, session);
            return Ok(());
        }
        let target = Target::Attach {
            id: params.session_id,
            env: std::env::vars().collect(),
        };
        core.open(id, Opening { kind, mcp }, target);
        Ok(())
    }

    /// The client cancels session `name`'s prompt.
    async fn cancel(core: &mut Core<Self>, name: &str) {
        if let Some(session) = core.sessions.get_mut(name)
            && let Some(id) = session.cancel().await
        {
            core.answer(&id, &json!({"stopReason": "cancelled"})).await;
        }
    }
}

impl core::Dialect for Acp {
    const WORDING: crate::transport::translate::Dialect = crate::transport::translate::Dialect::Acp;
    type Wire = mpsc::Sender<Bytes>;
    type Open = Opening;
    type Barrier = Barrier;
    type Extra = super::session::Extra;
    type Ask = ClientAsk;
    /// `session/list`'s `cwd`.
    type Query = Option<String>;

    fn replays(open: &Opening) -> bool {
        open.kind == OpenKind::Load
    }

    async fn on_request(
        &mut self,
        core: &mut Core<Self>,
        id: &RpcId,
        method: &str,
        params: Value,
    ) -> Result<(), RpcError> {
        let method: Method = method
            .parse()
            .map_err(|_| RpcError::method_not_found(method))?;
        match method {
            Method::Initialize => {
                let params: Initialize = jsonrpc::params(params)?;
                self.client = params.client_capabilities;
                // The client's version when it is one this agent speaks, else its own.
                let version = params
                    .protocol_version
                    .filter(|v| *v == PROTOCOL_VERSION)
                    .unwrap_or(PROTOCOL_VERSION);
                let result = json!({
                    "protocolVersion": version,
                    "agentCapabilities": {
                        "loadSession": true,
                        "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                        "mcpCapabilities": {"http": true, "sse": false},
                        "sessionCapabilities": {"list": {}, "resume": {}, "close": {}}
                    },
                    "agentInfo": {"name": "jucode", "title": "jucode", "version": crate::protocol::VERSION},
                    "authMethods": []
                });
                core.answer(id, &result).await;
            }
            Method::Authenticate => core.answer(id, &json!({})).await,
            Method::New => {
                let params: NewSession = jsonrpc::params(params)?;
                if !params.cwd.is_absolute() {
                    return Err(RpcError::invalid_params("cwd must be an absolute path"));
                }
                let mcp = super::mcp::ops(params.mcp_servers)?;
                let target = Target::Open {
                    cwd: params.cwd,
                    env: std::env::vars().collect(),
                    engine: None,
                };
                let opening = Opening {
                    kind: OpenKind::New,
                    mcp,
                };
                core.open(id, opening, target);
            }
            Method::Load => self.reopen(core, id, OpenKind::Load, params).await?,
            Method::Resume => self.reopen(core, id, OpenKind::Resume, params).await?,
            Method::List => {
                let params: ListSessions = jsonrpc::params(params)?;
                core.list(id, params.cwd);
            }
            Method::Close => {
                let params: SessionRef = jsonrpc::params(params)?;
                core.close(id, &params.session_id).await?;
            }
            Method::Prompt => self.prompt(core, id, params).await?,
            Method::SetMode => {
                let params: SetMode = jsonrpc::params(params)?;
                let barrier = Barrier::SetMode(id.clone());
                core.set_mode(&params.session_id, &params.mode_id, barrier)
                    .await?;
            }
            Method::SetConfigOption => {
                let params: SetConfig = jsonrpc::params(params)?;
                let session = core.session_mut(&params.session_id)?;
                let op = session.config_op(&params.config_id, &params.value)?;
                session.link.send(op).await;
                session.barrier(Barrier::SetConfig(id.clone()), false).await;
            }
        }
        Ok(())
    }

    async fn on_notification(&mut self, core: &mut Core<Self>, method: &str, params: Value) {
        match method {
            "session/cancel" => {
                if let Ok(params) = jsonrpc::params::<SessionRef>(params) {
                    Self::cancel(core, &params.session_id).await;
                }
            }
            "$/cancel_request" => {
                // The client withdraws a request of its own: only a prompt takes time.
                if let Ok(params) = jsonrpc::params::<CancelRequest>(params) {
                    let found = core.sessions.iter().find(|(_, session)| {
                        session
                            .x
                            .prompt
                            .as_ref()
                            .is_some_and(|prompt| prompt.id.is(&params.request_id))
                    });
                    if let Some((name, _)) = found {
                        let name = name.clone();
                        Self::cancel(core, &name).await;
                    }
                }
            }
            // Unknown notifications are ignored, as JSON-RPC asks.
            _ => tracing::debug!(method, "ignored a notification"),
        }
    }

    async fn answered(
        &mut self,
        core: &mut Core<Self>,
        ask: ClientAsk,
        result: Result<Value, RpcError>,
    ) {
        self.client_answered(core, ask, result).await;
    }

    async fn opened(&mut self, session: &mut Session) {
        if let Some(op) = self.client.op() {
            session.link.send(op).await;
        }
        let mcp = session
            .pending
            .as_mut()
            .map(|pending| std::mem::take(&mut pending.open.mcp))
            .unwrap_or_default();
        for op in mcp {
            session.link.send(op).await;
        }
    }

    async fn output(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        session: &mut Session,
        output: crate::transport::translate::Output,
    ) {
        self.session_output(core, name, session, output).await;
    }

    async fn passed(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        session: &mut Session,
        barrier: Barrier,
    ) {
        self.barrier_passed(core, name, session, barrier).await;
    }

    async fn ended(&mut self, core: &mut Core<Self>, session: &mut Session, why: &str) {
        if let Some(prompt) = session.x.prompt.take() {
            let answer = if prompt.cancelled() {
                Ok(json!({"stopReason": "cancelled"}))
            } else {
                Err(RpcError::internal(format!("the session ended: {why}")))
            };
            core.reply(&prompt.id, answer).await;
        }
    }

    fn listed(&self, rows: Vec<SessionInfo>, cwd: Option<String>) -> Value {
        let sessions: Vec<Value> = rows
            .into_iter()
            .filter(|row| !row.chat)
            .filter(|row| cwd.is_none() || row.cwd == cwd)
            .map(|row| match row.broken {
                // A broken file is listed too (ACP has no field for it: its title and
                // `_meta` say it); its working directory is unknown.
                Some(why) => json!({
                    "sessionId": row.session,
                    "cwd": row.cwd.unwrap_or_default(),
                    "title": format!("(broken) {why}"),
                    "updatedAt": rfc3339(row.updated),
                    "_meta": {"broken": why},
                }),
                None => json!({
                    "sessionId": row.session,
                    "cwd": row.cwd.unwrap_or_default(),
                    "title": row.label,
                    "updatedAt": rfc3339(row.updated),
                }),
            })
            .collect();
        json!({"sessions": sessions, "nextCursor": null})
    }

    async fn prompt_ready(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        id: RpcId,
        result: Result<UserInput, String>,
    ) {
        // A session that ended meanwhile answered its prompt as it ended.
        let Some(session) = core.sessions.get_mut(name) else {
            return;
        };
        match result {
            Ok(input) => {
                if let Some(prompt) = session.x.prompt.as_mut().filter(|p| p.id == id) {
                    prompt.content = Some(input.content.clone());
                    session.link.send(Op::UserMessage(input)).await;
                }
            }
            Err(message) => {
                session.x.prompt = None;
                core.reply(&id, Err(RpcError::invalid_params(message)))
                    .await;
            }
        }
    }

    fn cancelling(session: &Session) -> bool {
        session.x.prompt.as_ref().is_some_and(Prompt::cancelled)
    }

    fn open_failed(open: &Opening) -> i64 {
        if open.kind == OpenKind::New {
            jsonrpc::INTERNAL_ERROR
        } else {
            jsonrpc::RESOURCE_NOT_FOUND
        }
    }
}

/// Milliseconds since the epoch as RFC 3339 (UTC).
fn rfc3339(ms: u64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(i64::try_from(ms).ok()?)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}
