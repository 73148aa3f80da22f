//! One dashboard connection: JSON-RPC requests over text frames and its sessions (each a
//! link of its own); what it sends goes through its `outbox`.
//!
//! Like `acp`, one task owns the connection's state; requests that change a session
//! are answered when the `sync` barrier comes back (see `acp::session`).

use std::collections::HashMap;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use super::methods::{
    CancelRequestParams, InitializeResult, Listed, ListedSession, Method, NewSession, OpenState,
    Opened, PermissionRequest, PromptParams, SessionRef, SetMode, UpdateParams,
};
use super::outbox::{Outbox, read_failure};
use crate::protocol::{ApprovalMode, Op, UserInput};
use crate::transport::jsonrpc::{self, Message as Rpc, RpcError, RpcId};
use crate::transport::link::{Backend, Incoming, LinkEvent, Target};
use crate::transport::peer::{Openings, Outgoing, PeerSession};
use crate::transport::translate::updates::{PermissionAsk, SessionUpdate};
use crate::transport::translate::{self, Dialect, Output, Translator};

const EVENT_QUEUE: usize = 1024;

enum Internal {
    OpenFailed {
        tag: u64,
        error: String,
    },
    Listed {
        id: RpcId,
        result: Result<Vec<crate::protocol::SessionInfo>, String>,
    },
    PromptReady {
        session: String,
        id: RpcId,
        result: Result<UserInput, String>,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    New,
    Attach,
}

enum Barrier {
    Ready,
    SetMode(RpcId),
}

/// One session of this connection: the peer's core, plus what this dialect adds.
struct Session {
    peer: PeerSession<Barrier>,
    pending: Option<(RpcId, Kind)>,
    /// A new session's updates, held until its answer is out.
    held: Vec<SessionUpdate>,
    cancelling: bool,
}

struct Dashboard {
    backend: Backend,
    out: Outbox,
    sessions: HashMap<String, Session>,
    opening: Openings<(RpcId, Kind)>,
    /// Permission requests sent: (session, call id).
    outgoing: Outgoing<(String, String)>,
    events_tx: mpsc::Sender<LinkEvent>,
    internal_tx: mpsc::Sender<Internal>,
    /// Served by `jucode serve --server-config`: only this session (see `pinned_to`).
    pinned: Option<super::Pinned>,
}

pub async fn run(
    ws: WebSocketStream<TcpStream>,
    backend: Backend,
    max_queue: usize,
    pinned: Option<super::Pinned>,
    stop: CancellationToken,
) {
    let (sink, mut source) = ws.split();
    let (out, writer) = Outbox::new(max_queue, sink);
    let writer = tokio::spawn(writer);
    let (events_tx, mut events) = mpsc::channel(EVENT_QUEUE);
    let (internal_tx, mut internal) = mpsc::channel(64);
    let mut dash = Dashboard {
        backend,
        out: out.clone(),
        sessions: HashMap::new(),
        opening: Openings::default(),
        outgoing: Outgoing::default(),
        events_tx,
        internal_tx,
        pinned,
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                out.close(CloseCode::Away, "the daemon is stopping");
                break;
            }
            () = out.cut_off() => break,
            message = source.next() => match message {
                Some(Ok(Message::Text(text))) => dash.on_text(text.as_bytes()).await,
                Some(Ok(Message::Binary(_))) => {
                    let error = RpcError::new(jsonrpc::INVALID_REQUEST, "Invalid Request: messages are text frames");
                    dash.out.push(jsonrpc::error_response(&RpcId::null(), &error));
                }
                Some(Ok(Message::Close(_))) | None => break,
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    // Too large a frame or message, or a broken stream: the connection
                    // ends, saying why when the socket still takes it (the sessions go
                    // on in the daemon).
                    let code = read_failure(&err);
                    tracing::info!(%err, "closing a dashboard connection");
                    if let Some(code) = code {
                        out.close(code, &err.to_string());
                    }
                    break;
                }
            },
            Some(event) = events.recv() => dash.on_link(event).await,
            Some(done) = internal.recv() => dash.on_internal(done).await,
        }
    }
    dash.sessions.clear();
    drop(dash);
    drop(out);
    let _ = writer.await;
}

impl Dashboard {
    fn reply(&self, id: &RpcId, result: Result<Value, RpcError>) {
        self.out.push(match result {
            Ok(result) => jsonrpc::response(id, &result),
            Err(error) => jsonrpc::error_response(id, &error),
        });
    }

    fn update(&self, session: &str, update: &SessionUpdate) {
        let params = UpdateParams {
            session_id: session,
            update,
        };
        self.out
            .push(jsonrpc::notification("session/update", &params));
    }

    async fn on_text(&mut self, text: &[u8]) {
        match jsonrpc::parse(text) {
            Err(answer) => self.out.push(answer),
            Ok(Rpc::Request { id, method, params }) => {
                if let Err(error) = self.on_request(&id, &method, params).await {
                    self.reply(&id, Err(error));
                }
            }
            Ok(Rpc::Notification { method, params }) => {
                if method == "session/cancel"
                    && let Ok(params) = jsonrpc::params::<SessionRef>(params)
                {
                    self.cancel(&params.session_id).await;
                }
            }
            Ok(Rpc::Response { id, result }) => self.on_response(&id, result).await,
        }
    }

    fn session_mut(&mut self, id: &str) -> Result<&mut Session, RpcError> {
        self.sessions
            .get_mut(id)
            .filter(|session| session.pending.is_none())
            .ok_or_else(|| RpcError::unknown_session(id))
    }

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
            Method::Initialize => self.reply(id, Ok(json!(InitializeResult::jucode()))),
            Method::New if self.pinned.is_some() => {
                // A serve process's server has one session: "new" is that one, fresh
                // to this client (its answer first, like a new session's).
                let session = self.pinned_to(None)?;
                if self.sessions.contains_key(&session) {
                    return Err(RpcError::new(
                        jsonrpc::INVALID_REQUEST,
                        "already attached to this session",
                    ));
                }
                let target = Target::Attach {
                    id: session,
                    env: std::env::vars().collect(),
                };
                self.open(id, Kind::New, target);
            }
            Method::New => {
                let params: NewSession = jsonrpc::params(params)?;
                let cwd = match params.cwd {
                    Some(cwd) if cwd.is_absolute() => cwd,
                    Some(_) => {
                        return Err(RpcError::invalid_params("cwd must be an absolute path"));
                    }
                    None => std::env::var_os("HOME").map_or_else(|| "/".into(), Into::into),
                };
                let env = std::env::vars().collect();
                self.open(id, Kind::New, Target::Open { cwd, env });
            }
            Method::Attach => {
                let params: SessionRef = jsonrpc::params(params)?;
                self.pinned_to(Some(&params.session_id))?;
                if self.sessions.contains_key(&params.session_id) {
                    return Err(RpcError::new(
                        jsonrpc::INVALID_REQUEST,
                        "already attached to this session",
                    ));
                }
                let target = Target::Attach {
                    id: params.session_id,
                    env: std::env::vars().collect(),
                };
                self.open(id, Kind::Attach, target);
            }
            Method::List => {
                let (backend, done, id) =
                    (self.backend.clone(), self.internal_tx.clone(), id.clone());
                let only = self
                    .pinned
                    .as_ref()
                    .and_then(|pinned| pinned.borrow().clone());
                tokio::spawn(async move {
                    let result = backend.list().await.map(|mut rows| {
                        if let Some(only) = only {
                            rows.retain(|row| row.session == only);
                        }
                        rows
                    });
                    let _ = done.send(Internal::Listed { id, result }).await;
                });
            }
            Method::Prompt => {
                let params: PromptParams = jsonrpc::params(params)?;
                self.session_mut(&params.session_id)?;
                let done = self.internal_tx.clone();
                let id = id.clone();
                let attachments = std::env::temp_dir().join("jucode-attachments");
                tokio::task::spawn_blocking(move || {
                    let result = translate::prompt::to_input(&params.prompt, &attachments);
                    let _ = done.blocking_send(Internal::PromptReady {
                        session: params.session_id,
                        id,
                        result,
                    });
                });
            }
            Method::Cancel => {
                let params: SessionRef = jsonrpc::params(params)?;
                self.session_mut(&params.session_id)?;
                self.cancel(&params.session_id).await;
                self.reply(id, Ok(json!({})));
            }
            Method::Close if self.pinned.is_some() => {
                // The serve process's front-end owns its session: a dashboard only
                // stops watching it.
                let params: SessionRef = jsonrpc::params(params)?;
                self.session_mut(&params.session_id)?;
                self.sessions.remove(&params.session_id);
                self.reply(id, Ok(json!({})));
            }
            Method::Close => {
                let params: SessionRef = jsonrpc::params(params)?;
                let session = self.session_mut(&params.session_id)?;
                session.peer.closing = Some(id.clone());
                session.peer.link.close_session().await;
            }
            Method::SetMode => {
                let params: SetMode = jsonrpc::params(params)?;
                let mode = ApprovalMode::parse(&params.mode_id).ok_or_else(|| {
                    RpcError::invalid_params(format!("unknown mode: {}", params.mode_id))
                })?;
                let session = self.session_mut(&params.session_id)?;
                session.peer.link.send(Op::SetApprovalMode { mode }).await;
                session
                    .peer
                    .barrier(Barrier::SetMode(id.clone()), false)
                    .await;
            }
        }
        Ok(())
    }

    /// With a pinned server, the session it serves (which `asked`, when given, must be);
    /// without one, `asked` as it is.
    fn pinned_to(&self, asked: Option<&str>) -> Result<String, RpcError> {
        let Some(pinned) = &self.pinned else {
            return Ok(asked.unwrap_or_default().to_owned());
        };
        let Some(session) = pinned.borrow().clone() else {
            return Err(RpcError::internal("the serve process has no session yet"));
        };
        match asked {
            Some(asked) if asked != session => Err(RpcError::new(
                jsonrpc::RESOURCE_NOT_FOUND,
                format!("this server (jucode serve --server-config) serves session {session} only"),
            )),
            _ => Ok(session),
        }
    }

    fn open(&mut self, id: &RpcId, kind: Kind, target: Target) {
        self.opening.start(
            (id.clone(), kind),
            &self.backend,
            target,
            self.events_tx.clone(),
            self.internal_tx.clone(),
            |tag, error| Internal::OpenFailed { tag, error },
        );
    }

    async fn cancel(&mut self, name: &str) {
        let Some(session) = self.sessions.get_mut(name) else {
            return;
        };
        let idle = !session.peer.tr.running();
        session.cancelling = !idle;
        // Also when idle: subagents left running in the background stop.
        session.peer.link.send(Op::Interrupt { index: None }).await;
        if idle {
            // No turn end will say it: the session is idle, as after a cancelled turn.
            self.update(name, &Translator::idle_cancelled());
        }
    }

    async fn on_response(&mut self, id: &RpcId, result: Result<Value, RpcError>) {
        let Some((name, call_id)) = self.outgoing.answered(id) else {
            return;
        };
        let Some(session) = self.sessions.get_mut(&name) else {
            return;
        };
        let cancelling = session.cancelling;
        session
            .peer
            .permission_answered(&call_id, result.ok().as_ref(), cancelling)
            .await;
    }

    async fn on_internal(&mut self, done: Internal) {
        match done {
            Internal::OpenFailed { tag, error } => {
                if let Some((id, _)) = self.opening.take(tag) {
                    self.reply(&id, Err(RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, error)));
                }
            }
            Internal::Listed { id, result } => {
                let result = result.map_err(RpcError::internal).map(|rows| {
                    let sessions = rows
                        .into_iter()
                        .map(|row| ListedSession {
                            session_id: row.session,
                            cwd: row.cwd,
                            status: if row.live { "active" } else { "saved" },
                            state: row.state,
                            title: row.label,
                            clients: row.clients,
                            live: row.live,
                            updated_at: row.updated,
                            broken: row.broken,
                            meta: Default::default(),
                        })
                        .collect();
                    json!(Listed {
                        sessions,
                        meta: Default::default(),
                    })
                });
                self.reply(&id, result);
            }
            Internal::PromptReady {
                session,
                id,
                result,
            } => match result {
                Ok(input) => match self.sessions.get_mut(&session) {
                    Some(state) => {
                        state.cancelling = false;
                        state.peer.link.send(Op::UserMessage(input)).await;
                        self.reply(&id, Ok(json!({})));
                    }
                    None => self.reply(&id, Err(RpcError::unknown_session(&session))),
                },
                Err(message) => self.reply(&id, Err(RpcError::invalid_params(message))),
            },
        }
    }

    async fn on_link(&mut self, event: LinkEvent) {
        let name = event.session;
        match event.incoming {
            Incoming::Opened { tag, link } => {
                let Some((id, kind)) = self.opening.take(tag) else {
                    return;
                };
                let mut peer = PeerSession::new(link, Dialect::Dashboard);
                peer.tr.replay_next_transcript = kind == Kind::Attach;
                let mut session = Session {
                    peer,
                    pending: Some((id, kind)),
                    held: Vec::new(),
                    cancelling: false,
                };
                // The link's ops are written by a task of its own, so this wait is
                // for room in its bounded queue only.
                session.peer.barrier(Barrier::Ready, true).await;
                self.sessions.insert(name, session);
            }
            Incoming::Event(event) => {
                let Some(mut session) = self.sessions.remove(&name) else {
                    return;
                };
                for output in session.peer.tr.handle(&event) {
                    if let Output::Op(op) = output {
                        session.peer.link.send(op).await;
                        continue;
                    }
                    self.apply(&name, &mut session, output);
                }
                self.sessions.insert(name, session);
            }
            Incoming::Closed(why) => {
                let Some(mut session) = self.sessions.remove(&name) else {
                    return;
                };
                for output in session.peer.tr.end(&why) {
                    self.apply(&name, &mut session, output);
                }
                if let Some((id, _)) = session.pending.take() {
                    self.reply(
                        &id,
                        Err(RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, why.clone())),
                    );
                }
                for barrier in session.peer.take_barriers() {
                    if let Barrier::SetMode(id) = barrier {
                        self.reply(
                            &id,
                            Err(RpcError::internal(format!("the session ended: {why}"))),
                        );
                    }
                }
                for (_, request) in session.peer.permissions.drain() {
                    self.withdraw(request);
                }
                if let Some(id) = session.peer.closing.take() {
                    self.reply(&id, Ok(json!({})));
                }
            }
        }
    }

    fn withdraw(&mut self, request: i64) {
        self.outgoing.withdraw(request);
        let params = CancelRequestParams {
            request_id: request,
        };
        self.out
            .push(jsonrpc::notification("$/cancel_request", &params));
    }

    fn ask(&mut self, name: &str, session: &mut Session, call_id: String, ask: PermissionAsk) {
        let request = self.outgoing.ask((name.to_owned(), call_id.clone()));
        let params = PermissionRequest {
            session_id: name,
            ask: &ask,
        };
        session.peer.permissions.insert(call_id, request);
        self.out.push(jsonrpc::request(
            &RpcId::number(request),
            "session/request_permission",
            &params,
        ));
    }

    fn apply(&mut self, name: &str, session: &mut Session, output: Output) {
        match output {
            Output::Update(update) => match &session.pending {
                // A new session's answer comes first (the seed's clients read it as the
                // next message); an attached one's history comes before its answer.
                Some((_, Kind::New)) => session.held.push(update),
                _ => self.update(name, &update),
            },
            Output::Ask { call_id, ask } => {
                if session.pending.is_some() {
                    session.peer.held_asks.push((call_id, ask));
                } else {
                    self.ask(name, session, call_id, ask);
                }
            }
            Output::Closed { call_id, .. } => {
                session.peer.held_asks.retain(|(held, _)| *held != call_id);
                if let Some(request) = session.peer.permissions.remove(&call_id) {
                    self.withdraw(request);
                }
            }
            Output::Ended(_) => session.cancelling = false,
            Output::Synced(token) => match session.peer.passed(&token) {
                Some(Barrier::Ready) => {
                    let Some((id, _)) = session.pending.take() else {
                        return;
                    };
                    // What the session is doing as it is opened: a client showing it needs
                    // this before its next `state_update`, which may be long in coming.
                    let state = if !session.peer.tr.open_approvals().is_empty() {
                        OpenState::RequiresAction
                    } else if session.peer.tr.running() {
                        OpenState::Running
                    } else {
                        OpenState::Idle
                    };
                    let opened = Opened {
                        session_id: name.to_owned(),
                        modes: translate::modes(session.peer.tr.mode),
                        config_options: translate::config_options(&session.peer.tr),
                        state,
                    };
                    self.reply(&id, Ok(json!(opened)));
                    for update in std::mem::take(&mut session.held) {
                        self.update(name, &update);
                    }
                    for (call_id, ask) in std::mem::take(&mut session.peer.held_asks) {
                        self.ask(name, session, call_id, ask);
                    }
                }
                Some(Barrier::SetMode(id)) => self.reply(&id, Ok(json!({}))),
                None => {}
            },
            Output::Started { .. }
            | Output::Info(_)
            | Output::Error(_)
            | Output::ClientRequest { .. }
            | Output::Op(_) => {}
        }
    }
}
