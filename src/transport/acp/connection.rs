//! One ACP connection: the client's requests, and the requests jucode makes of the
//! client (permissions).

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::params::{
    CancelRequest, ClientCapabilities, Initialize, ListSessions, Method, NewSession, PromptParams,
    SessionRef, SetConfig, SetMode,
};
use super::session::{Barrier, Pending, Prompt, Session};
use crate::protocol::{ApprovalMode, Frame, Op, SessionInfo, UserInput};
use crate::transport::jsonrpc::{self, Message, RpcError, RpcId};
use crate::transport::link::{Backend, LinkEvent, Target};
use crate::transport::translate::prompt as blocks;

/// The ACP protocol version this agent speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// Link events not yet handled, for all of a connection's sessions together.
const EVENT_QUEUE: usize = 1024;

/// Work done elsewhere, reported back to the connection task.
pub(super) enum Internal {
    OpenFailed {
        tag: u64,
        error: String,
    },
    Listed {
        id: RpcId,
        cwd: Option<String>,
        result: Result<Vec<SessionInfo>, String>,
    },
    PromptReady {
        session: String,
        id: RpcId,
        result: Result<UserInput, String>,
    },
}

/// What a session being opened was asked for.
pub(super) struct Opening {
    pub id: RpcId,
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

/// A request jucode made of the client, waiting for its answer.
/// What a request sent to the editor is for.
pub(super) enum Outgoing {
    Permission {
        session: String,
        call_id: String,
    },
    /// A file or terminal request of a session's tool call.
    Client {
        session: String,
        id: String,
        method: String,
        call_id: Option<String>,
    },
}

pub(super) struct Connection {
    pub backend: Backend,
    out: mpsc::Sender<Bytes>,
    pub attachments: PathBuf,
    pub sessions: HashMap<String, Session>,
    pub opening: crate::transport::peer::Openings<Opening>,
    pub outgoing: crate::transport::peer::Outgoing<Outgoing>,
    pub events_tx: mpsc::Sender<LinkEvent>,
    events: Option<mpsc::Receiver<LinkEvent>>,
    pub internal_tx: mpsc::Sender<Internal>,
    internal: Option<mpsc::Receiver<Internal>>,
    pub client: ClientCapabilities,
}

impl Connection {
    pub fn new(backend: Backend, out: mpsc::Sender<Bytes>, attachments: PathBuf) -> Self {
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let (internal_tx, internal) = mpsc::channel(64);
        Self {
            backend,
            out,
            attachments,
            sessions: HashMap::new(),
            opening: Default::default(),
            outgoing: Default::default(),
            events_tx,
            events: Some(events),
            internal_tx,
            internal: Some(internal),
            client: ClientCapabilities::default(),
        }
    }

    /// Serves until stdin ends; then every link is dropped (the daemon detaches them,
    /// sessions in process end).
    pub async fn run(mut self, mut frames: mpsc::Receiver<Frame>) {
        let (Some(mut events), Some(mut internal)) = (self.events.take(), self.internal.take())
        else {
            return;
        };
        loop {
            tokio::select! {
                frame = frames.recv() => match frame {
                    Some(frame) => self.on_frame(frame).await,
                    None => break,
                },
                Some(event) = events.recv() => self.on_link(event).await,
                Some(done) = internal.recv() => self.on_internal(done).await,
            }
        }
        self.sessions.clear();
    }

    pub async fn send(&self, line: Bytes) {
        // The writer ends only with the process; a send error means stdout is gone,
        // and there is nobody left to tell.
        let _ = self.out.send(line).await;
    }

    pub async fn reply(&self, id: &RpcId, result: Result<Value, RpcError>) {
        let line = match result {
            Ok(result) => jsonrpc::response(id, &result),
            Err(error) => jsonrpc::error_response(id, &error),
        };
        self.send(line).await;
    }

    pub async fn notify(&self, method: &str, params: Value) {
        self.send(jsonrpc::notification(method, &params)).await;
    }

    /// Sends a request to the client; its answer comes back as `outgoing`.
    pub async fn request(&mut self, method: &str, params: Value, outgoing: Outgoing) -> i64 {
        let id = self.outgoing.ask(outgoing);
        self.send(jsonrpc::request(&RpcId::number(id), method, &params))
            .await;
        id
    }

    async fn on_frame(&mut self, frame: Frame) {
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
                self.send(jsonrpc::error_response(&RpcId::null(), &error))
                    .await;
                return;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match jsonrpc::parse(&line) {
            Err(answer) => self.send(answer).await,
            Ok(Message::Request { id, method, params }) => {
                if let Err(error) = self.on_request(&id, &method, params).await {
                    self.reply(&id, Err(error)).await;
                }
            }
            Ok(Message::Notification { method, params }) => {
                self.on_notification(&method, params).await
            }
            Ok(Message::Response { id, result }) => self.on_response(&id, result).await,
        }
    }

    /// Handles a request; requests answered later (once a session says so) return
    /// `Ok` and are answered then. `Err` is answered at once.
    async fn on_request(
        &mut self,
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
                self.reply(id, Ok(result)).await;
            }
            Method::Authenticate => self.reply(id, Ok(json!({}))).await,
            Method::New => {
                let params: NewSession = jsonrpc::params(params)?;
                if !params.cwd.is_absolute() {
                    return Err(RpcError::invalid_params("cwd must be an absolute path"));
                }
                let mcp = super::mcp::ops(params.mcp_servers)?;
                let target = Target::Open {
                    cwd: params.cwd,
                    env: std::env::vars().collect(),
                };
                self.open(id, OpenKind::New, target, mcp);
            }
            Method::Load | Method::Resume => {
                let params: SessionRef = jsonrpc::params(params)?;
                if !crate::sessions::valid_id(&params.session_id) {
                    return Err(RpcError::unknown_session(&params.session_id));
                }
                let mcp = super::mcp::ops(params.mcp_servers)?;
                let kind = if method == Method::Load {
                    OpenKind::Load
                } else {
                    OpenKind::Resume
                };
                // A session this connection has open starts over on the same link,
                // from a fresh snapshot.
                if let Some(mut session) = self.sessions.remove(&params.session_id) {
                    if session.pending.is_some() {
                        self.sessions.insert(params.session_id, session);
                        return Err(RpcError::new(
                            jsonrpc::INVALID_REQUEST,
                            "this session is still being opened",
                        ));
                    }
                    for request in session.restart(id.clone(), kind) {
                        self.withdraw(request).await;
                    }
                    for op in mcp {
                        session.peer.link.send(op).await;
                    }
                    session.peer.link.resync().await;
                    session.barrier(Barrier::Ready).await;
                    self.sessions.insert(params.session_id, session);
                    return Ok(());
                }
                let target = Target::Attach {
                    id: params.session_id,
                    env: std::env::vars().collect(),
                };
                self.open(id, kind, target, mcp);
            }
            Method::List => {
                let params: ListSessions = jsonrpc::params(params)?;
                let backend = self.backend.clone();
                let done = self.internal_tx.clone();
                let id = id.clone();
                tokio::spawn(async move {
                    let result = backend.list().await;
                    let _ = done
                        .send(Internal::Listed {
                            id,
                            cwd: params.cwd,
                            result,
                        })
                        .await;
                });
            }
            Method::Close => {
                let params: SessionRef = jsonrpc::params(params)?;
                let session = self.session_mut(&params.session_id)?;
                session.peer.closing = Some(id.clone());
                session.peer.link.close_session().await;
            }
            Method::Prompt => self.prompt(id, params).await?,
            Method::SetMode => {
                let params: SetMode = jsonrpc::params(params)?;
                let mode = ApprovalMode::parse(&params.mode_id).ok_or_else(|| {
                    RpcError::invalid_params(format!("unknown mode: {}", params.mode_id))
                })?;
                let session = self.session_mut(&params.session_id)?;
                session.peer.link.send(Op::SetApprovalMode { mode }).await;
                session.barrier(Barrier::SetMode(id.clone())).await;
            }
            Method::SetConfigOption => {
                let params: SetConfig = jsonrpc::params(params)?;
                let session = self.session_mut(&params.session_id)?;
                let op = session.config_op(&params.config_id, &params.value)?;
                session.peer.link.send(op).await;
                session.barrier(Barrier::SetConfig(id.clone())).await;
            }
        }
        Ok(())
    }

    fn open(&mut self, id: &RpcId, kind: OpenKind, target: Target, mcp: Vec<Op>) {
        let opening = Opening {
            id: id.clone(),
            kind,
            mcp,
        };
        self.opening.start(
            opening,
            &self.backend,
            target,
            self.events_tx.clone(),
            self.internal_tx.clone(),
            |tag, error| Internal::OpenFailed { tag, error },
        );
    }

    pub fn session_mut(&mut self, id: &str) -> Result<&mut Session, RpcError> {
        self.sessions
            .get_mut(id)
            .filter(|session| session.pending.is_none())
            .ok_or_else(|| RpcError::unknown_session(id))
    }

    async fn prompt(&mut self, id: &RpcId, params: Value) -> Result<(), RpcError> {
        let params: PromptParams = jsonrpc::params(params)?;
        let attachments = self.attachments.clone();
        let done = self.internal_tx.clone();
        let session = self.session_mut(&params.session_id)?;
        if session.prompt.is_some() {
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
            session.prompt = Some(Prompt::command(id.clone()));
            session.peer.link.send(Op::Command { input: command }).await;
            session.barrier(Barrier::Command).await;
            return Ok(());
        }
        session.prompt = Some(Prompt::message(id.clone()));
        let id = id.clone();
        let name = params.session_id;
        // Decoding and writing attachments is blocking work.
        tokio::task::spawn_blocking(move || {
            let result = blocks::to_input(&params.prompt, &attachments);
            let _ = done.blocking_send(Internal::PromptReady {
                session: name,
                id,
                result,
            });
        });
        Ok(())
    }

    async fn on_notification(&mut self, method: &str, params: Value) {
        match method {
            "session/cancel" => {
                if let Ok(params) = jsonrpc::params::<SessionRef>(params)
                    && let Some(session) = self.sessions.get_mut(&params.session_id)
                {
                    let ended = session.cancel().await;
                    if let Some(id) = ended {
                        self.reply(&id, Ok(json!({"stopReason": "cancelled"})))
                            .await;
                    }
                }
            }
            "$/cancel_request" => {
                // The client withdraws a request of its own: only a prompt takes time.
                if let Ok(params) = jsonrpc::params::<CancelRequest>(params) {
                    let found = self.sessions.values_mut().find(|session| {
                        session
                            .prompt
                            .as_ref()
                            .is_some_and(|prompt| prompt.id.is(&params.request_id))
                    });
                    if let Some(session) = found
                        && let Some(id) = session.cancel().await
                    {
                        self.reply(&id, Ok(json!({"stopReason": "cancelled"})))
                            .await;
                    }
                }
            }
            // Unknown notifications are ignored, as JSON-RPC asks.
            _ => tracing::debug!(method, "ignored a notification"),
        }
    }

    async fn on_response(&mut self, id: &RpcId, result: Result<Value, RpcError>) {
        let Some(outgoing) = self.outgoing.answered(id) else {
            tracing::debug!(%id, "a response to no request of ours");
            return;
        };
        match outgoing {
            Outgoing::Client {
                session,
                id,
                method,
                call_id,
            } => {
                self.client_answered(&session, id, &method, call_id, result)
                    .await
            }
            Outgoing::Permission { session, call_id } => {
                let Some(session) = self.sessions.get_mut(&session) else {
                    return;
                };
                let cancelling = session.prompt.as_ref().is_some_and(|p| p.cancelled());
                session
                    .peer
                    .permission_answered(&call_id, result.ok().as_ref(), cancelling)
                    .await;
            }
        }
    }

    async fn on_internal(&mut self, done: Internal) {
        match done {
            Internal::OpenFailed { tag, error } => {
                if let Some(opening) = self.opening.take(tag) {
                    let code = if opening.kind == OpenKind::New {
                        jsonrpc::INTERNAL_ERROR
                    } else {
                        jsonrpc::RESOURCE_NOT_FOUND
                    };
                    self.reply(&opening.id, Err(RpcError::new(code, error)))
                        .await;
                }
            }
            Internal::Listed { id, cwd, result } => {
                let result = result.map_err(RpcError::internal).map(|rows| {
                    let sessions: Vec<Value> = rows
                        .into_iter()
                        .filter(|row| !row.chat)
                        .filter(|row| cwd.is_none() || row.cwd == cwd)
                        .map(|row| match row.broken {
                            // A broken file is listed too (ACP has no field for it: its
                            // title and `_meta` say it); its working directory is unknown.
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
                });
                self.reply(&id, result).await;
            }
            Internal::PromptReady {
                session,
                id,
                result,
            } => {
                let Some(state) = self.sessions.get_mut(&session) else {
                    return;
                };
                match result {
                    Ok(input) => {
                        if let Some(prompt) = state.prompt.as_mut().filter(|p| p.id == id) {
                            prompt.content = Some(input.content.clone());
                            state.peer.link.send(Op::UserMessage(input)).await;
                        }
                    }
                    Err(message) => {
                        state.prompt = None;
                        self.reply(&id, Err(RpcError::invalid_params(message)))
                            .await;
                    }
                }
            }
        }
    }

    /// Registers a link that came up for `opening`.
    /// The session of an open that succeeded, with the ops it still has to send.
    pub fn adopt(
        &mut self,
        tag: u64,
        link: crate::transport::link::Link,
    ) -> Option<(&mut Session, Vec<Op>)> {
        let opening = self.opening.take(tag)?;
        let mcp = opening.mcp;
        let name = link.session.clone();
        let session = Session::new(
            link,
            Pending {
                id: opening.id,
                kind: opening.kind,
            },
        );
        self.sessions.insert(name.clone(), session);
        self.sessions.get_mut(&name).map(|session| (session, mcp))
    }
}

/// Milliseconds since the epoch as RFC 3339 (UTC).
fn rfc3339(ms: u64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(i64::try_from(ms).ok()?)
        .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}
