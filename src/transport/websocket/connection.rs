//! One dashboard connection: JSON-RPC requests over text frames and its sessions (each a
//! link of its own); what it sends goes through its `outbox`.
//!
//! Like `acp`, one task owns the connection's state; requests that change a session
//! are answered when the `sync` barrier comes back (see `acp::session`).

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use super::methods::{
    InitializeResult, Listed, ListedSession, Method, NewSession, OpenState, Opened, PromptParams,
    SessionRef, SetMode, UpdateParams,
};
use super::outbox::{Outbox, read_failure};
use crate::protocol::{Op, SessionInfo, UserInput};
use crate::transport::jsonrpc::{self, RpcError, RpcId};
use crate::transport::link::{Backend, Target};
use crate::transport::peer::PeerSession;
use crate::transport::peer::core::{self, Core, Wire};
use crate::transport::translate::updates::SessionUpdate;
use crate::transport::translate::{self, Output, Translator};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    New,
    Attach,
}

enum Barrier {
    Ready,
    SetMode(RpcId),
}

impl core::Barrier for Barrier {
    fn ready() -> Self {
        Self::Ready
    }

    fn request(self) -> Option<RpcId> {
        match self {
            Self::Ready => None,
            Self::SetMode(id) => Some(id),
        }
    }
}

/// What a dashboard session keeps besides the core's.
#[derive(Default)]
struct Extra {
    /// A new session's updates, held until its answer is out.
    held: Vec<SessionUpdate>,
    cancelling: bool,
}

type Session = PeerSession<Dashboard>;

/// The dashboard dialect: what this connection adds to the peers' core.
struct Dashboard {
    /// Served by `jucode serve --server-config`: only this session (see `pinned_to`).
    pinned: Option<super::Pinned>,
}

impl Wire for Outbox {
    async fn send(&self, line: bytes::Bytes) {
        // Never waits: a client too slow for its queue is cut off by the outbox.
        self.push(line);
    }
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
    let (mut core, mut inputs) = Core::new(backend, out.clone());
    let mut dash = Dashboard { pinned };
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                out.close(CloseCode::Away, "the daemon is stopping");
                break;
            }
            () = out.cut_off() => break,
            message = source.next() => match message {
                Some(Ok(Message::Text(text))) => core.on_message(&mut dash, text.as_bytes()).await,
                Some(Ok(Message::Binary(_))) => {
                    let error = RpcError::new(jsonrpc::INVALID_REQUEST, "Invalid Request: messages are text frames");
                    out.push(jsonrpc::error_response(&RpcId::null(), &error));
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
            Some(event) = inputs.events.recv() => core.on_link(&mut dash, event).await,
            Some(done) = inputs.internal.recv() => core.on_internal(&mut dash, done).await,
        }
    }
    core.sessions.clear();
    drop(core);
    drop(out);
    let _ = writer.await;
}

async fn update(core: &Core<Dashboard>, session: &str, update: &SessionUpdate) {
    let params = UpdateParams {
        session_id: session,
        update,
    };
    core.notify("session/update", &params).await;
}

impl Dashboard {
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

    /// Attaching to `session` for request `id`, answered as `kind`.
    fn attach(
        core: &mut Core<Self>,
        id: &RpcId,
        kind: Kind,
        session: String,
    ) -> Result<(), RpcError> {
        if core.sessions.contains_key(&session) {
            return Err(RpcError::new(
                jsonrpc::INVALID_REQUEST,
                "already attached to this session",
            ));
        }
        let target = Target::Attach {
            id: session,
            env: std::env::vars().collect(),
        };
        core.open(id, kind, target);
        Ok(())
    }

    async fn cancel(core: &mut Core<Self>, name: &str) {
        let Some(session) = core.sessions.get_mut(name) else {
            return;
        };
        let idle = !session.tr.running();
        session.x.cancelling = !idle;
        // Also when idle: subagents left running in the background stop.
        session.link.send(Op::Interrupt { index: None }).await;
        if idle {
            // No turn end will say it: the session is idle, as after a cancelled turn.
            update(core, name, &Translator::idle_cancelled()).await;
        }
    }
}

impl core::Dialect for Dashboard {
    const WORDING: translate::Dialect = translate::Dialect::Dashboard;
    type Wire = Outbox;
    type Open = Kind;
    type Barrier = Barrier;
    type Extra = Extra;
    /// The dashboard dialect asks its client nothing but permissions.
    type Ask = std::convert::Infallible;
    /// A pinned server lists its one session.
    type Query = Option<String>;

    fn replays(open: &Kind) -> bool {
        *open == Kind::Attach
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
            Method::Initialize => core.answer(id, &InitializeResult::jucode()).await,
            Method::New if self.pinned.is_some() => {
                // A serve process's server has one session: "new" is that one, fresh
                // to this client (its answer first, like a new session's).
                let session = self.pinned_to(None)?;
                Self::attach(core, id, Kind::New, session)?;
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
                core.open(
                    id,
                    Kind::New,
                    Target::Open {
                        cwd,
                        env,
                        engine: params.engine,
                    },
                );
            }
            Method::Attach => {
                let params: SessionRef = jsonrpc::params(params)?;
                self.pinned_to(Some(&params.session_id))?;
                Self::attach(core, id, Kind::Attach, params.session_id)?;
            }
            Method::List => {
                let only = self
                    .pinned
                    .as_ref()
                    .and_then(|pinned| pinned.borrow().clone());
                core.list(id, only);
            }
            Method::Prompt => {
                let params: PromptParams = jsonrpc::params(params)?;
                core.session_mut(&params.session_id)?;
                let attachments = std::env::temp_dir().join("jucode-attachments");
                core.decode_prompt(params.session_id, id, params.prompt, attachments);
            }
            Method::Cancel => {
                let params: SessionRef = jsonrpc::params(params)?;
                core.session_mut(&params.session_id)?;
                Self::cancel(core, &params.session_id).await;
                core.answer(id, &json!({})).await;
            }
            Method::Close if self.pinned.is_some() => {
                // The serve process's front-end owns its session: a dashboard only
                // stops watching it.
                let params: SessionRef = jsonrpc::params(params)?;
                core.session_mut(&params.session_id)?;
                core.sessions.remove(&params.session_id);
                core.answer(id, &json!({})).await;
            }
            Method::Close => {
                let params: SessionRef = jsonrpc::params(params)?;
                core.close(id, &params.session_id).await?;
            }
            Method::SetMode => {
                let params: SetMode = jsonrpc::params(params)?;
                let barrier = Barrier::SetMode(id.clone());
                core.set_mode(&params.session_id, &params.mode_id, barrier)
                    .await?;
            }
        }
        Ok(())
    }

    async fn on_notification(&mut self, core: &mut Core<Self>, method: &str, params: Value) {
        if method == "session/cancel"
            && let Ok(params) = jsonrpc::params::<SessionRef>(params)
        {
            Self::cancel(core, &params.session_id).await;
        }
    }

    async fn answered(&mut self, _: &mut Core<Self>, ask: Self::Ask, _: Result<Value, RpcError>) {
        match ask {}
    }

    async fn opened(&mut self, _: &mut Session) {}

    async fn output(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        session: &mut Session,
        output: Output,
    ) {
        match output {
            Output::Update(next) => match &session.pending {
                // A new session's answer comes first (the seed's clients read it as the
                // next message); an attached one's history comes before its answer.
                Some(pending) if pending.open == Kind::New => session.x.held.push(next),
                _ => update(core, name, &next).await,
            },
            Output::Ended(_) => session.x.cancelling = false,
            Output::Started { .. }
            | Output::Info(_)
            | Output::Error(_)
            | Output::ClientRequest { .. }
            | Output::Ask { .. }
            | Output::Closed { .. }
            | Output::Synced(_)
            | Output::Op(_) => {}
        }
    }

    async fn passed(
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
                // What the session is doing as it is opened: a client showing it needs
                // this before its next `state_update`, which may be long in coming.
                let state = if !session.tr.open_approvals().is_empty() {
                    OpenState::RequiresAction
                } else if session.tr.running() {
                    OpenState::Running
                } else {
                    OpenState::Idle
                };
                let opened = Opened {
                    session_id: name.to_owned(),
                    modes: translate::modes(session.tr.mode),
                    config_options: translate::config_options(&session.tr),
                    state,
                };
                core.answer(&pending.id, &opened).await;
                for held in std::mem::take(&mut session.x.held) {
                    update(core, name, &held).await;
                }
                core.release_asks(name, session).await;
            }
            Barrier::SetMode(id) => core.answer(&id, &json!({})).await,
        }
    }

    async fn ended(&mut self, _: &mut Core<Self>, _: &mut Session, _: &str) {}

    fn listed(&self, mut rows: Vec<SessionInfo>, only: Option<String>) -> Value {
        if let Some(only) = only {
            rows.retain(|row| row.session == only);
        }
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
                engine: row.engine,
                updated_at: row.updated,
                broken: row.broken,
                meta: Default::default(),
            })
            .collect();
        json!(Listed {
            sessions,
            meta: Default::default(),
        })
    }

    async fn prompt_ready(
        &mut self,
        core: &mut Core<Self>,
        name: &str,
        id: RpcId,
        result: Result<UserInput, String>,
    ) {
        match result {
            Ok(input) => match core.sessions.get_mut(name) {
                Some(session) => {
                    session.x.cancelling = false;
                    session.link.send(Op::UserMessage(input)).await;
                    core.answer(&id, &json!({})).await;
                }
                None => core.reply(&id, Err(RpcError::unknown_session(name))).await,
            },
            Err(message) => {
                core.reply(&id, Err(RpcError::invalid_params(message)))
                    .await
            }
        }
    }

    fn cancelling(session: &Session) -> bool {
        session.x.cancelling
    }
}
