//! The MCP client: the only module that names `rmcp`.
//!
//! rmcp changes its API often, so everything else sees only what this module defines:
//! an [`Endpoint`] to connect to, a [`Connection`] with the four requests jucode makes,
//! and plain data ([`RemoteTool`], [`RemotePrompt`], results as JSON in MCP's own wire
//! shapes). Results are read from their JSON form rather than from rmcp's structs,
//! whose fields move between releases while the protocol's do not.
//!
//! The handshake is the classic `initialize` (at the newest protocol version that still
//! has one), which every server released so far understands.
//!
//! `oauth` is the sign-in to remote servers that ask for one (rmcp's auth support).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use nix::sys::signal::Signal;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationCapability, FormElicitationCapability, GetPromptRequestParams, Implementation,
    ProtocolVersion,
};
use rmcp::service::{
    NotificationContext, RequestContext, RoleClient, RunningServiceCancellationToken,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, Peer, ServiceExt};
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};

pub mod oauth;

use super::process::{self, Group, StderrTail};
use crate::engine::ports::mcp::{Elicitation, ElicitationAnswer};
use crate::protocol::ElicitationAction;

/// How long a stopped stdio server gets to exit after its stdin closes and it got
/// SIGTERM, before its group is killed.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// How long an exited server's stderr is read on, for the reason its state shows.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// Where a server is.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// A process speaking MCP on stdin/stdout; `env` is its whole environment.
    Stdio {
        command: String,
        args: Vec<String>,
        env: HashMap<String, String>,
        cwd: PathBuf,
    },
    /// A streamable HTTP endpoint; header values are final (variables expanded).
    /// `tokens`: where its sign-in is kept, when it has one (each request then carries
    /// the access token).
    Http {
        url: String,
        headers: Vec<(String, String)>,
        tokens: Option<oauth::TokenFile>,
    },
}

/// Why a server did not connect.
#[derive(Debug)]
pub enum ConnectError {
    /// It answered `401`: it needs a sign-in. Its `WWW-Authenticate` challenge, for
    /// the sign-in's discovery (empty when it gave none).
    SignIn {
        challenge: String,
        why: String,
    },
    Failed(String),
}

impl From<String> for ConnectError {
    fn from(message: String) -> Self {
        ConnectError::Failed(message)
    }
}

/// What a server told us without being asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    ToolsChanged,
    PromptsChanged,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTool {
    pub name: String,
    pub description: String,
    /// A JSON Schema object.
    pub input_schema: Value,
    /// Annotated `readOnlyHint: true`.
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePrompt {
    pub name: String,
    pub description: String,
    /// `(name, description, required)`, in declared order.
    pub arguments: Vec<(String, String, bool)>,
}

/// A `tools/call` result: `content` blocks and `structuredContent` as MCP sends them.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub content: Vec<Value>,
    pub structured: Option<Value>,
    pub is_error: bool,
}

/// One message of a `prompts/get` result: its role and content block.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMessage {
    pub role: String,
    pub content: Value,
}

/// Receives what the server sends unasked. Notices go to a bounded channel and are
/// dropped when it is full: one pending "tools changed" means the same as ten.
struct Handler {
    notices: mpsc::Sender<Notice>,
    elicitor: Elicitor,
}

/// Where a server's elicitation requests go, and the name they carry.
#[derive(Clone)]
pub struct Elicitor {
    pub server: String,
    pub requests: mpsc::Sender<Elicitation>,
}

fn elicit_result(action: ElicitationAction, content: Option<Map<String, Value>>) -> ElicitResult {
    let action = match action {
        ElicitationAction::Accept => rmcp::model::ElicitationAction::Accept,
        ElicitationAction::Decline => rmcp::model::ElicitationAction::Decline,
        ElicitationAction::Cancel => rmcp::model::ElicitationAction::Cancel,
    };
    let result = ElicitResult::new(action);
    match content {
        Some(content) => result.with_content(Value::Object(content)),
        None => result,
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // Form elicitation only: URL elicitation would send the user to a page the server
        // chooses, which needs a consent flow of its own.
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::new().with_schema_validation(true)),
        );
        ClientConfig::new(
            capabilities,
            Implementation::new("jucode", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Ok(elicit_result(ElicitationAction::Decline, None));
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
        let (answer, answered) = oneshot::channel();
        let asked = self.elicitor.requests.try_send(Elicitation {
            server: self.elicitor.server.clone(),
            message,
            schema,
            answer,
        });
        if asked.is_err() {
            // Nobody takes requests (no session behind the manager), or too many wait.
            return Ok(elicit_result(ElicitationAction::Decline, None));
        }
        let answer = tokio::select! {
            answer = answered => answer,
            () = context.ct.cancelled() => return Ok(elicit_result(ElicitationAction::Cancel, None)),
        };
        Ok(match answer {
            Ok(ElicitationAnswer { action, content }) => elicit_result(action, content),
            // The session dropped the request (it ended).
            Err(_) => elicit_result(ElicitationAction::Cancel, None),
        })
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.notices.try_send(Notice::ToolsChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.notices.try_send(Notice::PromptsChanged);
    }
}

/// A live connection to one server.
pub struct Connection {
    peer: Peer<RoleClient>,
    stop: Mutex<Option<RunningServiceCancellationToken>>,
    /// `Some(reason)` once the connection is gone.
    closed: watch::Receiver<Option<String>>,
    /// Stdio servers: the process group (dropping it kills the group).
    group: Option<Group>,
    /// Set when the server stopped accepting its sign-in (a request got `401` and no
    /// refresh helped): the connection is of no use until a new sign-in.
    signed_out: watch::Sender<bool>,
}

/// Connects and completes the handshake. Not bounded here: the caller applies the
/// server's timeout (dropping this future kills a process it started).
pub async fn connect(
    endpoint: Endpoint,
    notices: mpsc::Sender<Notice>,
    elicitor: Elicitor,
) -> Result<Connection, ConnectError> {
    let handler = Handler { notices, elicitor };
    match endpoint {
        Endpoint::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut spawned = process::spawn(&command, &args, &env, &cwd)?;
            let served = handler.serve((spawned.stdout, spawned.stdin)).await;
            let running = match served {
                Ok(running) => running,
                Err(err) => {
                    // A server that died during the handshake says more about why than
                    // the closed pipe does.
                    let exited =
                        tokio::time::timeout(Duration::from_millis(500), spawned.child.wait())
                            .await;
                    spawned.group.reaper().reaped();
                    spawned.stderr.drained(STDERR_DRAIN).await;
                    return Err(ConnectError::Failed(match exited {
                        Ok(Ok(status)) => format!(
                            "the server exited during the handshake ({status}){}",
                            spawned.stderr.suffix()
                        ),
                        _ => format!("the MCP handshake failed: {err}{}", spawned.stderr.suffix()),
                    }));
                }
            };
            let peer = running.peer().clone();
            let stop = running.cancellation_token();
            let (closed_tx, closed) = watch::channel(None);
            let reaper = spawned.group.reaper();
            let mut child = spawned.child;
            let stderr = spawned.stderr;
            tokio::spawn(async move {
                let reason = tokio::select! {
                    status = child.wait() => match status {
                        Ok(status) => format!("the server exited ({status})"),
                        Err(err) => format!("the server's process is lost: {err}"),
                    },
                    _ = running.waiting() => {
                        // Give a dying process a moment to be reaped, for its status.
                        match tokio::time::timeout(Duration::from_millis(200), child.wait()).await {
                            Ok(Ok(status)) => format!("the server exited ({status})"),
                            _ => "the server closed the connection".to_owned(),
                        }
                    }
                };
                reaper.reaped();
                stderr.drained(STDERR_DRAIN).await;
                let _ = closed_tx.send(Some(with_tail(reason, &stderr)));
            });
            Ok(Connection {
                peer,
                stop: Mutex::new(Some(stop)),
                closed,
                group: Some(spawned.group),
                signed_out: watch::channel(false).0,
            })
        }
        Endpoint::Http {
            url,
            headers,
            tokens,
        } => {
            let mut custom = HashMap::new();
            for (name, text) in headers {
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|err| format!("header {name:?}: {err}"))?;
                let text = reqwest::header::HeaderValue::from_str(&text)
                    .map_err(|err| format!("header {name}: {err}"))?;
                custom.insert(name, text);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
            let http = http_client()?;
            let signed_in = match &tokens {
                Some(tokens) => oauth::authorized(&url, tokens, &http).await?,
                None => None,
            };
            let served = match signed_in {
                Some(client) => {
                    handler
                        .serve(StreamableHttpClientTransport::with_client(client, config))
                        .await
                }
                None => {
                    handler
                        .serve(StreamableHttpClientTransport::with_client(http, config))
                        .await
                }
            };
            let needs_sign_in = err_sign_in(&served);
            let running = served.map_err(|err| match needs_sign_in {
                Some(challenge) => ConnectError::SignIn {
                    challenge,
                    why: if tokens.as_ref().is_some_and(oauth::TokenFile::exists) {
                        "its sign-in is no longer accepted: sign in again (mcp_login)".to_owned()
                    } else {
                        "it needs a sign-in (mcp_login)".to_owned()
                    },
                },
                None => ConnectError::Failed(format!("the MCP handshake failed: {err}")),
            })?;
            let peer = running.peer().clone();
            let stop = running.cancellation_token();
            let (closed_tx, closed) = watch::channel(None);
            tokio::spawn(async move {
                let _ = running.waiting().await;
                let _ = closed_tx.send(Some("the connection closed".to_owned()));
            });
            Ok(Connection {
                peer,
                stop: Mutex::new(Some(stop)),
                closed,
                group: None,
                signed_out: watch::channel(false).0,
            })
        }
    }
}

/// A failed handshake's `WWW-Authenticate` challenge when the server asked for a
/// sign-in (empty when it gave none).
fn err_sign_in<T>(served: &Result<T, rmcp::service::ClientInitializeError>) -> Option<String> {
    let err = served.as_ref().err()?;
    match err.auth_challenge() {
        Some(challenge) => Some(challenge.to_owned()),
        None => err.is_authorization_required().then(String::new),
    }
}

fn with_tail(reason: String, stderr: &StderrTail) -> String {
    format!("{reason}{}", stderr.suffix())
}

/// One HTTP client for every MCP server of the process (they share its pool), with
/// redirects off: a redirect would replay the server's headers, its token among them,
/// to wherever the redirect points.
pub(super) fn http_client() -> Result<reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // Already installed (by the providers or the embedding program) is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("jucode/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|err| format!("cannot set up the HTTP client: {err}"))
        })
        .clone()
}

impl Connection {
    /// A request's failure as its message, after `request` ("tools/list failed: ...")
    /// or, without one, in the server's words alone (what the model reads of a tool
    /// call). A refused sign-in also marks the connection signed out.
    fn failed(&self, request: Option<&str>, err: &rmcp::ServiceError) -> String {
        if err.is_authorization_required() || err.auth_challenge().is_some() {
            self.signed_out.send_replace(true);
            return "the server no longer accepts the sign-in (sign in again with mcp_login)"
                .to_owned();
        }
        match request {
            Some(request) => format!("{request} failed: {err}"),
            None => err.to_string(),
        }
    }

    pub fn is_signed_out(&self) -> bool {
        *self.signed_out.borrow()
    }

    /// Resolves once the server stopped accepting the sign-in.
    pub async fn signed_out(&self) {
        let mut signed_out = self.signed_out.subscribe();
        let _ = signed_out.wait_for(|out| *out).await;
    }

    /// Whether the server said it has this capability (`tools`, `prompts`).
    fn offers(&self, capability: &str) -> bool {
        self.peer
            .peer_info()
            .and_then(|info| serde_json::to_value(&*info).ok())
            .is_some_and(|info| info["capabilities"][capability].is_object())
    }

    pub async fn list_tools(&self) -> Result<Vec<RemoteTool>, String> {
        if !self.offers("tools") {
            return Ok(Vec::new());
        }
        let tools = self
            .peer
            .list_all_tools()
            .await
            .map_err(|err| self.failed(Some("tools/list"), &err))?;
        Ok(tools
            .iter()
            .filter_map(|tool| serde_json::to_value(tool).ok())
            .filter_map(|tool| {
                let name = tool["name"].as_str()?.to_owned();
                let description = text_of(&tool["description"])
                    .or_else(|| text_of(&tool["title"]))
                    .unwrap_or_default();
                let mut input_schema = tool["inputSchema"].clone();
                if !input_schema.is_object() {
                    input_schema = serde_json::json!({"type": "object"});
                }
                Some(RemoteTool {
                    name,
                    description,
                    input_schema,
                    read_only: tool["annotations"]["readOnlyHint"] == Value::Bool(true),
                })
            })
            .collect())
    }

    pub async fn list_prompts(&self) -> Result<Vec<RemotePrompt>, String> {
        if !self.offers("prompts") {
            return Ok(Vec::new());
        }
        let prompts = self
            .peer
            .list_all_prompts()
            .await
            .map_err(|err| self.failed(Some("prompts/list"), &err))?;
        Ok(prompts
            .iter()
            .filter_map(|prompt| serde_json::to_value(prompt).ok())
            .filter_map(|prompt| {
                let name = prompt["name"].as_str()?.to_owned();
                let description = text_of(&prompt["description"])
                    .or_else(|| text_of(&prompt["title"]))
                    .unwrap_or_default();
                let arguments = prompt["arguments"]
                    .as_array()
                    .map(|arguments| {
                        arguments
                            .iter()
                            .filter_map(|arg| {
                                Some((
                                    arg["name"].as_str()?.to_owned(),
                                    text_of(&arg["description"]).unwrap_or_default(),
                                    arg["required"] == Value::Bool(true),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Some(RemotePrompt {
                    name,
                    description,
                    arguments,
                })
            })
            .collect())
    }

    /// `tools/call`. A protocol or transport failure is `Err`; a tool that reports an
    /// error is `Ok` with `is_error`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<CallResult, String> {
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let result = self
            .peer
            .call_tool(params)
            .await
            .map_err(|err| self.failed(None, &err))?;
        let result = serde_json::to_value(&result).map_err(|err| err.to_string())?;
        Ok(CallResult {
            content: result["content"].as_array().cloned().unwrap_or_default(),
            structured: result.get("structuredContent").cloned(),
            is_error: result["isError"] == Value::Bool(true),
        })
    }

    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<Vec<PromptMessage>, String> {
        let params = GetPromptRequestParams::new(name).with_arguments(arguments);
        let result = self
            .peer
            .get_prompt(params)
            .await
            .map_err(|err| self.failed(None, &err))?;
        let result = serde_json::to_value(&result).map_err(|err| err.to_string())?;
        Ok(result["messages"]
            .as_array()
            .map(|messages| {
                messages
                    .iter()
                    .map(|message| PromptMessage {
                        role: message["role"].as_str().unwrap_or("user").to_owned(),
                        content: message["content"].clone(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Resolves with the reason once the connection is gone (a crashed server, a
    /// closed pipe); never while it lives.
    pub async fn closed(&self) -> String {
        let mut closed = self.closed.clone();
        loop {
            if let Some(reason) = closed.borrow_and_update().clone() {
                return reason;
            }
            if closed.changed().await.is_err() {
                return "the connection closed".to_owned();
            }
        }
    }

    /// Ends the connection: the transport closes (a stdio server sees EOF and gets
    /// SIGTERM), and whatever is left of a stdio server's group is killed after
    /// [`STOP_GRACE`].
    pub async fn shutdown(&self) {
        if let Some(stop) = self
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            stop.cancel();
        }
        if let Some(group) = &self.group {
            group.signal(Signal::SIGTERM);
            let _ = tokio::time::timeout(STOP_GRACE, self.closed()).await;
            group.signal(Signal::SIGKILL);
        }
    }
}

fn text_of(value: &Value) -> Option<String> {
    value
        .as_str()
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
}

/// Shared, so tools and prompt requests outlive a restart of the server's task.
pub type SharedConnection = Arc<Connection>;
