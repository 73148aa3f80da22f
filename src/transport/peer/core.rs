//! The machine both JSON-RPC servers run: one task owns a connection's sessions and
//! reacts to the client's messages, the sessions' events and the results of work done
//! elsewhere (opening a link, listing, decoding attachments). [`Core`] does everything
//! the dialects do alike; a [`Dialect`] answers what differs: its methods, how an open
//! is answered, what a turn's end answers, how a listing reads.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;

use bytes::Bytes;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Openings, Outgoing, PeerSession, Pending};
use crate::protocol::{ApprovalMode, Op, SessionInfo, UserInput};
use crate::transport::jsonrpc::{self, Message, RpcError, RpcId};
use crate::transport::link::{Backend, Incoming, LinkEvent, Target};
use crate::transport::translate::prompt::{self, PromptBlock};
use crate::transport::translate::updates::PermissionAsk;
use crate::transport::translate::{self, Output};

/// Link events not yet handled, for all of a connection's sessions together.
const EVENT_QUEUE: usize = 1024;
/// Results of work done elsewhere not yet handled.
const INTERNAL_QUEUE: usize = 64;

/// Where a connection's messages to its client go.
pub trait Wire: Send + Sync {
    /// Queues one message; waits only for room in a bounded queue.
    fn send(&self, line: Bytes) -> impl Future<Output = ()> + Send;
}

/// stdio: the writer thread's bounded queue (a full one makes the connection wait).
impl Wire for mpsc::Sender<Bytes> {
    async fn send(&self, line: Bytes) {
        // The writer ends only with the process; a send error means the output is
        // gone, and there is nobody left to tell.
        let _ = mpsc::Sender::send(self, line).await;
    }
}

/// A request answered by the barrier it waits for, or failed when the session ends.
pub trait Barrier {
    /// The barrier that answers an open: the startup batch or snapshot is all in.
    fn ready() -> Self;
    /// The request this barrier answers, to fail when the session ends first.
    fn request(self) -> Option<RpcId>;
}

/// What one dialect of JSON-RPC peer does differently. Every hook gets the [`Core`],
/// whose sessions and helpers it uses.
pub trait Dialect: Sized + Send + 'static {
    /// How the translator words sessions for this dialect.
    const WORDING: translate::Dialect;
    type Wire: Wire;
    /// What an open was asked as (new, attach, load ...).
    type Open: Send + 'static;
    type Barrier: Barrier + Send;
    /// What a session keeps besides the core's.
    type Extra: Default + Send;
    /// What a request of the dialect's own (not a permission request) sent to the
    /// client is for.
    type Ask: Send;
    /// What a listing was asked with.
    type Query: Send + 'static;

    /// Whether an open of this kind shows the session's history first.
    fn replays(open: &Self::Open) -> bool;

    /// Handles a request; requests answered later return `Ok` and are answered then.
    /// `Err` is answered at once.
    fn on_request(
        &mut self,
        core: &mut Core<Self>,
        id: &RpcId,
        method: &str,
        params: Value,
    ) -> impl Future<Output = Result<(), RpcError>> + Send;

    fn on_notification(
        &mut self,
        core: &mut Core<Self>,
        method: &str,
        params: Value,
    ) -> impl Future<Output = ()> + Send;

    /// The client answered a request of the dialect's own.
    fn answered(
        &mut self,
        core: &mut Core<Self>,
        ask: Self::Ask,
        result: Result<Value, RpcError>,
    ) -> impl Future<Output = ()> + Send;

    /// A session's link came up: the ops it sends before its open's barrier.
    fn opened(&mut self, session: &mut PeerSession<Self>) -> impl Future<Output = ()> + Send;

    /// A translated output the core leaves to the dialect (updates, turns starting and
    /// ending, notices, client requests).
    fn output(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        session: &mut PeerSession<Self>,
        output: Output,
    ) -> impl Future<Output = ()> + Send;

    /// A barrier came back: answer what waited for it.
    fn passed(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        session: &mut PeerSession<Self>,
        barrier: Self::Barrier,
    ) -> impl Future<Output = ()> + Send;

    /// The session ended: answer what the dialect still had waiting on it (the core
    /// answers the open, the barriers, the permission requests and a close).
    fn ended(
        &mut self,
        core: &mut Core<Self>,
        session: &mut PeerSession<Self>,
        why: &str,
    ) -> impl Future<Output = ()> + Send;

    /// A listing's answer.
    fn listed(&self, rows: Vec<SessionInfo>, query: Self::Query) -> Value;

    /// A prompt's message, its attachments decoded, for the session `name` (which may
    /// have ended meanwhile).
    fn prompt_ready(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        id: RpcId,
        result: Result<UserInput, String>,
    ) -> impl Future<Output = ()> + Send;

    /// Whether the client is cancelling the session's turn (so an unanswered permission
    /// request denies nothing).
    fn cancelling(session: &PeerSession<Self>) -> bool;

    /// The error code of an open that failed.
    fn open_failed(open: &Self::Open) -> i64 {
        let _ = open;
        jsonrpc::RESOURCE_NOT_FOUND
    }
}

/// What a request sent to the client is for.
pub enum Asked<A> {
    Permission { session: String, call_id: String },
    Own(A),
}

/// Work done elsewhere, reported back to the connection task.
pub enum Internal<D: Dialect> {
    OpenFailed {
        tag: u64,
        error: String,
    },
    Listed {
        id: RpcId,
        query: D::Query,
        result: Result<Vec<SessionInfo>, String>,
    },
    PromptReady {
        session: String,
        id: RpcId,
        result: Result<UserInput, String>,
    },
}

/// What the connection task reads besides its client: take them once, with
/// [`Core::inputs`], and hand each to [`Core::on_link`] / [`Core::on_internal`].
pub struct Inputs<D: Dialect> {
    pub events: mpsc::Receiver<LinkEvent>,
    pub internal: mpsc::Receiver<Internal<D>>,
}

/// `session/request_permission` params.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequest<'a> {
    pub session_id: &'a str,
    #[serde(flatten)]
    pub ask: &'a PermissionAsk,
}

/// `$/cancel_request` params: a `session/request_permission` that is no longer asked.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequestParams {
    pub request_id: i64,
}

/// One connection's sessions and the flows both dialects share.
pub struct Core<D: Dialect> {
    pub backend: Backend,
    pub wire: D::Wire,
    pub sessions: HashMap<String, PeerSession<D>>,
    opening: Openings<Pending<D::Open>>,
    outgoing: Outgoing<Asked<D::Ask>>,
    events_tx: mpsc::Sender<LinkEvent>,
    internal_tx: mpsc::Sender<Internal<D>>,
}

impl<D: Dialect> Core<D> {
    pub fn new(backend: Backend, wire: D::Wire) -> (Self, Inputs<D>) {
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let (internal_tx, internal) = mpsc::channel(INTERNAL_QUEUE);
        let core = Self {
            backend,
            wire,
            sessions: HashMap::new(),
            opening: Openings::default(),
            outgoing: Outgoing::default(),
            events_tx,
            internal_tx,
        };
        (core, Inputs { events, internal })
    }

    pub async fn send(&self, line: Bytes) {
        self.wire.send(line).await;
    }

    pub async fn reply(&self, id: &RpcId, result: Result<Value, RpcError>) {
        let line = match result {
            Ok(result) => jsonrpc::response(id, &result),
            Err(error) => jsonrpc::error_response(id, &error),
        };
        self.send(line).await;
    }

    /// Answers `id` with `result` serialized.
    pub async fn answer(&self, id: &RpcId, result: &impl Serialize) {
        self.send(jsonrpc::response(id, result)).await;
    }

    pub async fn notify(&self, method: &str, params: &impl Serialize) {
        self.send(jsonrpc::notification(method, params)).await;
    }

    /// Sends a request of the dialect's own to the client; its answer comes back to
    /// [`Dialect::answered`] with `ask`.
    pub async fn request(&mut self, method: &str, params: &impl Serialize, ask: D::Ask) -> i64 {
        self.ask_client(method, params, Asked::Own(ask)).await
    }

    async fn ask_client(
        &mut self,
        method: &str,
        params: &impl Serialize,
        asked: Asked<D::Ask>,
    ) -> i64 {
        let id = self.outgoing.ask(asked);
        self.send(jsonrpc::request(&RpcId::number(id), method, params))
            .await;
        id
    }

    /// A message from the client: parsed, dispatched, answered when it is wrong.
    pub async fn on_message(&mut self, dialect: &mut D, text: &[u8]) {
        match jsonrpc::parse(text) {
            Err(answer) => self.send(answer).await,
            Ok(Message::Request { id, method, params }) => {
                if let Err(error) = dialect.on_request(self, &id, &method, params).await {
                    self.reply(&id, Err(error)).await;
                }
            }
            Ok(Message::Notification { method, params }) => {
                dialect.on_notification(self, &method, params).await;
            }
            Ok(Message::Response { id, result }) => self.on_response(dialect, &id, result).await,
        }
    }

    async fn on_response(&mut self, dialect: &mut D, id: &RpcId, result: Result<Value, RpcError>) {
        let Some(asked) = self.outgoing.answered(id) else {
            tracing::debug!(%id, "a response to no request of ours");
            return;
        };
        match asked {
            Asked::Own(ask) => dialect.answered(self, ask, result).await,
            Asked::Permission { session, call_id } => {
                let Some(session) = self.sessions.get_mut(&session) else {
                    return;
                };
                let cancelling = D::cancelling(session);
                session
                    .permission_answered(&call_id, result.ok().as_ref(), cancelling)
                    .await;
            }
        }
    }

    /// A session that is open (its open answered), or the error that names it unknown.
    pub fn session_mut(&mut self, id: &str) -> Result<&mut PeerSession<D>, RpcError> {
        self.sessions
            .get_mut(id)
            .filter(|session| session.pending.is_none())
            .ok_or_else(|| RpcError::unknown_session(id))
    }

    /// Opens `target` for request `id`; answered once the session's first events are in.
    pub fn open(&mut self, id: &RpcId, open: D::Open, target: Target) {
        self.opening.start(
            Pending {
                id: id.clone(),
                open,
            },
            &self.backend,
            target,
            self.events_tx.clone(),
            self.internal_tx.clone(),
            |tag, error| Internal::OpenFailed { tag, error },
        );
    }

    /// Lists the sessions for request `id`, in a task of its own.
    pub fn list(&self, id: &RpcId, query: D::Query) {
        let (backend, done, id) = (self.backend.clone(), self.internal_tx.clone(), id.clone());
        tokio::spawn(async move {
            let result = backend.list().await;
            let _ = done.send(Internal::Listed { id, query, result }).await;
        });
    }

    /// Decodes a prompt's blocks (attachments are written under `attachments`: blocking
    /// work) into the message for session `name`; [`Dialect::prompt_ready`] gets it.
    pub fn decode_prompt(
        &self,
        name: String,
        id: &RpcId,
        blocks: Vec<PromptBlock>,
        attachments: PathBuf,
    ) {
        let (done, id) = (self.internal_tx.clone(), id.clone());
        tokio::task::spawn_blocking(move || {
            let result = prompt::to_input(&blocks, &attachments);
            let _ = done.blocking_send(Internal::PromptReady {
                session: name,
                id,
                result,
            });
        });
    }

    /// `session/close`: the session ends, and `id` is answered when it has.
    pub async fn close(&mut self, id: &RpcId, name: &str) -> Result<(), RpcError> {
        let session = self.session_mut(name)?;
        session.closing = Some(id.clone());
        session.link.close_session().await;
        Ok(())
    }

    /// `session/set_mode`: answered with `barrier` once the session has applied it.
    pub async fn set_mode(
        &mut self,
        name: &str,
        mode_id: &str,
        barrier: D::Barrier,
    ) -> Result<(), RpcError> {
        let mode = ApprovalMode::parse(mode_id)
            .ok_or_else(|| RpcError::invalid_params(format!("unknown mode: {mode_id}")))?;
        let session = self.session_mut(name)?;
        session.link.send(Op::SetApprovalMode { mode }).await;
        session.barrier(barrier, false).await;
        Ok(())
    }

    /// Withdraws a permission request (`$/cancel_request`); its late answer is dropped.
    pub async fn withdraw(&mut self, request: i64) {
        self.outgoing.withdraw(request);
        self.notify(
            "$/cancel_request",
            &CancelRequestParams {
                request_id: request,
            },
        )
        .await;
    }

    async fn ask(
        &mut self,
        name: &str,
        session: &mut PeerSession<D>,
        call_id: String,
        ask: PermissionAsk,
    ) {
        let params = PermissionRequest {
            session_id: name,
            ask: &ask,
        };
        let asked = Asked::Permission {
            session: name.to_owned(),
            call_id: call_id.clone(),
        };
        let request = self
            .ask_client("session/request_permission", &params, asked)
            .await;
        session.permissions.insert(call_id, request);
    }

    /// Puts the permission requests held while the session was being opened.
    pub async fn release_asks(&mut self, name: &str, session: &mut PeerSession<D>) {
        for (call_id, ask) in std::mem::take(&mut session.held_asks) {
            self.ask(name, session, call_id, ask).await;
        }
    }

    pub async fn on_internal(&mut self, dialect: &mut D, done: Internal<D>) {
        match done {
            Internal::OpenFailed { tag, error } => {
                if let Some(pending) = self.opening.take(tag) {
                    let code = D::open_failed(&pending.open);
                    self.reply(&pending.id, Err(RpcError::new(code, error)))
                        .await;
                }
            }
            Internal::Listed { id, query, result } => {
                let result = result
                    .map_err(RpcError::internal)
                    .map(|rows| dialect.listed(rows, query));
                self.reply(&id, result).await;
            }
            Internal::PromptReady {
                session,
                id,
                result,
            } => dialect.prompt_ready(self, &session, id, result).await,
        }
    }

    pub async fn on_link(&mut self, dialect: &mut D, event: LinkEvent) {
        let name = event.session;
        match event.incoming {
            Incoming::Opened { tag, link } => {
                let Some(pending) = self.opening.take(tag) else {
                    return;
                };
                let mut session = PeerSession::new(link, pending);
                dialect.opened(&mut session).await;
                // The link's ops are written by a task of its own, so this wait is for
                // room in its bounded queue only.
                session.barrier(D::Barrier::ready(), true).await;
                self.sessions.insert(name, session);
            }
            Incoming::Event(event) => {
                let Some(mut session) = self.sessions.remove(&name) else {
                    return;
                };
                for output in session.tr.handle(&event) {
                    self.apply(dialect, &name, &mut session, output).await;
                }
                self.sessions.insert(name, session);
            }
            Incoming::Closed(why) => {
                let Some(mut session) = self.sessions.remove(&name) else {
                    return;
                };
                for output in session.tr.end(&why) {
                    self.apply(dialect, &name, &mut session, output).await;
                }
                self.ended(dialect, session, &why).await;
            }
        }
    }

    /// Re-translates outputs a session produced outside its link's events (a terminal
    /// the client created for a call).
    pub async fn apply_all(
        &mut self,
        dialect: &mut D,
        name: &str,
        session: &mut PeerSession<D>,
        outputs: Vec<Output>,
    ) {
        for output in outputs {
            self.apply(dialect, name, session, output).await;
        }
    }

    async fn apply(
        &mut self,
        dialect: &mut D,
        name: &str,
        session: &mut PeerSession<D>,
        output: Output,
    ) {
        match output {
            Output::Op(op) => {
                session.link.send(op).await;
            }
            Output::Ask { call_id, ask } => {
                if session.pending.is_some() {
                    session.held_asks.push((call_id, ask));
                } else {
                    self.ask(name, session, call_id, ask).await;
                }
            }
            Output::Closed { call_id, .. } => {
                session.held_asks.retain(|(held, _)| *held != call_id);
                if let Some(request) = session.permissions.remove(&call_id) {
                    self.withdraw(request).await;
                }
            }
            Output::Synced(token) => {
                if let Some(barrier) = session.passed(&token) {
                    dialect.passed(self, name, session, barrier).await;
                }
            }
            other => dialect.output(self, name, session, other).await,
        }
    }

    /// Answers whatever still waited on a session that has ended.
    async fn ended(&mut self, dialect: &mut D, mut session: PeerSession<D>, why: &str) {
        if let Some(pending) = session.pending.take() {
            let error = RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, why);
            self.reply(&pending.id, Err(error)).await;
        }
        dialect.ended(self, &mut session, why).await;
        for barrier in session.take_barriers() {
            if let Some(id) = barrier.request() {
                let error = RpcError::internal(format!("the session ended: {why}"));
                self.reply(&id, Err(error)).await;
            }
        }
        for (_, request) in std::mem::take(&mut session.permissions) {
            self.withdraw(request).await;
        }
        if let Some(id) = session.closing.take() {
            self.reply(&id, Ok(Value::Object(Default::default()))).await;
        }
    }
}
