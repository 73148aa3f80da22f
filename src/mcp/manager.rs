//! One session's MCP servers: their definitions, their states, and one task per server
//! that connects it and keeps it connected.
//!
//! Nothing the session calls waits on a server: the state lives behind a mutex held
//! only for short changes, and connecting, listing and restarting happen in the
//! server's task. A task's updates carry its generation, so a server restarted (or
//! removed) while an old attempt was still connecting never sees that attempt's
//! result. Every server task is a child of the manager's cancellation token: when the
//! manager goes (the session ended), they stop and their processes are killed.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::client::{self, RemotePrompt, RemoteTool, SharedConnection, oauth};
use super::naming;
use super::task::run_server;
use super::tool::McpTool;
use crate::config::mcp::{self as config, DEFAULT_TIMEOUT_MS};
use crate::engine::ports::mcp::{Elicitation, SignInFailure};
use crate::engine::{McpServers, PromptArgument, PromptCommand, Tool, ToolSource, ToolSpec};
use crate::protocol::{McpServerConfig, McpServerView, McpState, McpTransport};

/// Elicitation requests waiting for the session to take them.
const ELICITATION_QUEUE: usize = 16;

/// A session's MCP servers. Cheap to clone: clones share the servers.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    state: Mutex<State>,
    changes: watch::Sender<()>,
    /// Where stdio servers start unless they set `cwd`, and with which environment.
    pub(super) cwd: PathBuf,
    pub(super) env: Arc<HashMap<String, String>>,
    /// The user's config file, where `mcp_set`, `mcp_remove` and `mcp_toggle` persist.
    config_path: PathBuf,
    root: CancellationToken,
    /// Where the servers' elicitation requests go; the session takes the receiver.
    pub(super) elicit: mpsc::Sender<Elicitation>,
    elicitations: Mutex<Option<mpsc::Receiver<Elicitation>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.root.cancel();
    }
}

#[derive(Default)]
struct State {
    servers: BTreeMap<String, Server>,
    started: bool,
    closed: bool,
    /// The tools of every connected server, by exposed name.
    tools: BTreeMap<String, Arc<McpTool>>,
    /// Each server's exposed tool names, in its own order.
    names: BTreeMap<String, Vec<String>>,
    /// Sign-ins that failed, not yet taken by the session.
    sign_in_failures: Vec<SignInFailure>,
}

struct Server {
    config: McpServerConfig,
    status: Status,
    generation: u64,
    /// Stops the server's current task.
    stop: Option<CancellationToken>,
    /// Where it is defined: only the user's config is edited by the protocol's ops.
    origin: Origin,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The user's `config.toml`.
    User,
    /// The trusted project's `.jucode/config.toml`.
    Project,
    /// The client that opened the session (an editor's `mcpServers`): this session only.
    Client,
}

pub(super) enum Status {
    Disabled,
    Connecting,
    Connected {
        connection: SharedConnection,
        tools: Vec<RemoteTool>,
        prompts: Vec<RemotePrompt>,
    },
    Failed(String),
    /// It answered `401`: it waits for a sign-in. Why (for the view), and its
    /// `WWW-Authenticate` challenge (for the sign-in's discovery).
    NeedsAuth {
        why: String,
        challenge: String,
    },
}

impl McpManager {
    /// The servers of one session: `servers` from the config, stdio ones started in
    /// `cwd` with `env`. Nothing starts before [`McpServers::start`].
    pub fn new(
        servers: BTreeMap<String, McpServerConfig>,
        cwd: PathBuf,
        env: Arc<HashMap<String, String>>,
        config_path: PathBuf,
    ) -> Self {
        let servers = servers
            .into_iter()
            .map(|(name, config)| {
                let status = if enabled(&config) {
                    Status::Connecting
                } else {
                    Status::Disabled
                };
                let server = Server {
                    config,
                    status,
                    generation: 0,
                    stop: None,
                    origin: Origin::User,
                };
                (name, server)
            })
            .collect();
        let (changes, _) = watch::channel(());
        // Requests beyond these wait in their servers' handlers (each server request is
        // bounded by the server itself).
        let (elicit, elicitations) = mpsc::channel(ELICITATION_QUEUE);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    servers,
                    ..State::default()
                }),
                changes,
                cwd,
                env,
                config_path,
                root: CancellationToken::new(),
                elicit,
                elicitations: Mutex::new(Some(elicitations)),
            }),
        }
    }
}

fn enabled(config: &McpServerConfig) -> bool {
    config.enabled != Some(false)
}

pub(super) fn timeout_of(config: &McpServerConfig) -> Duration {
    Duration::from_millis(config.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS))
}

impl Inner {
    /// The profile's folder (the user's config file's), where sign-ins are kept.
    pub(super) fn profile_dir(&self) -> PathBuf {
        self.config_path
            .parent()
            .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
    }

    /// A sign-in started here failed: the server, still waiting for one, says why.
    fn sign_in_failed(&self, name: &str, why: &str) {
        self.change(|state| {
            if let Some(server) = state.servers.get_mut(name)
                && let Status::NeedsAuth { why: shown, .. } = &mut server.status
            {
                *shown = format!("the sign-in failed: {why}");
            }
            state.sign_in_failures.push(SignInFailure {
                server: name.to_owned(),
                why: why.to_owned(),
            });
        });
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic mid-change leaves the best record there is; refusing it would take
        // the session's servers down for good.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `change` under the lock, rebuilds the tools, and wakes the session.
    fn change<R>(&self, change: impl FnOnce(&mut State) -> R) -> R {
        let result = {
            let mut state = self.lock();
            let result = change(&mut state);
            state.rebuild_tools();
            result
        };
        self.changes.send_replace(());
        result
    }

    /// Applies a task's update if the task is still the server's current one.
    pub(super) fn update(&self, name: &str, generation: u64, status: Status) {
        self.change(|state| {
            if state.closed {
                return;
            }
            if let Some(server) = state.servers.get_mut(name)
                && server.generation == generation
            {
                server.status = status;
            }
        });
    }
}

impl State {
    /// (Re)starts `name` in a new task; the previous task, if any, stops.
    fn launch(&mut self, inner: &Arc<Inner>, name: &str) {
        let Some(server) = self.servers.get_mut(name) else {
            return;
        };
        if let Some(stop) = server.stop.take() {
            stop.cancel();
        }
        server.generation += 1;
        server.status = Status::Connecting;
        if !self.started || self.closed {
            return;
        }
        let stop = inner.root.child_token();
        server.stop = Some(stop.clone());
        tokio::spawn(run_server(
            Arc::downgrade(inner),
            name.to_owned(),
            server.generation,
            server.config.clone(),
            stop,
        ));
    }

    fn stop(&mut self, name: &str) {
        if let Some(server) = self.servers.get_mut(name) {
            if let Some(stop) = server.stop.take() {
                stop.cancel();
            }
            server.generation += 1;
            server.status = Status::Disabled;
        }
    }

    fn rebuild_tools(&mut self) {
        let connected: Vec<(&String, &SharedConnection, &Vec<RemoteTool>, Duration)> = self
            .servers
            .iter()
            .filter_map(|(name, server)| match &server.status {
                Status::Connected {
                    connection, tools, ..
                } => Some((name, connection, tools, timeout_of(&server.config))),
                _ => None,
            })
            .collect();
        let names = naming::assign(connected.iter().map(|(name, _, tools, _)| {
            (
                name.as_str(),
                tools.iter().map(|tool| tool.name.as_str()).collect(),
            )
        }));
        let mut tools = BTreeMap::new();
        let mut by_server = BTreeMap::new();
        for ((server, connection, remote, timeout), exposed) in connected.iter().zip(names) {
            for (remote, exposed) in remote.iter().zip(&exposed) {
                let tool = McpTool {
                    server: (*server).clone(),
                    exposed: exposed.clone(),
                    remote: remote.clone(),
                    connection: (*connection).clone(),
                    timeout: *timeout,
                };
                tools.insert(exposed.clone(), Arc::new(tool));
            }
            by_server.insert((*server).clone(), exposed);
        }
        self.tools = tools;
        self.names = by_server;
    }

    /// Defines (or redefines) server `name`, then starts or stops it as it says.
    fn put(&mut self, inner: &Arc<Inner>, name: &str, server: McpServerConfig, origin: Origin) {
        let on = enabled(&server);
        if let Some(old) = self.servers.get_mut(name) {
            old.config = server;
            old.origin = origin;
        } else {
            self.servers.insert(
                name.to_owned(),
                Server {
                    config: server,
                    status: Status::Disabled,
                    generation: 0,
                    stop: None,
                    origin,
                },
            );
        }
        if on {
            self.launch(inner, name);
        } else {
            self.stop(name);
        }
    }

    /// Refuses to change a server the user's config does not define through it.
    fn editable(&self, name: &str) -> Result<(), String> {
        match self.servers.get(name).map(|server| server.origin) {
            Some(Origin::Project) => Err(format!(
                "MCP server {name} is defined by the project (.jucode/config.toml): change it there"
            )),
            Some(Origin::Client) => Err(format!(
                "MCP server {name} was given by the client that opened this session, for this session only: change it there"
            )),
            _ => Ok(()),
        }
    }

    fn known(&self, name: &str) -> Result<&Server, String> {
        self.servers.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.servers.keys().map(String::as_str).collect();
            if known.is_empty() {
                format!("unknown MCP server: {name} (none is configured)")
            } else {
                format!(
                    "unknown MCP server: {name} (configured: {})",
                    known.join(", ")
                )
            }
        })
    }
}

impl McpServers for McpManager {
    fn start(&self) {
        let inner = &self.inner;
        inner.change(|state| {
            state.started = true;
            let enabled: Vec<String> = state
                .servers
                .iter()
                .filter(|(_, server)| enabled(&server.config))
                .map(|(name, _)| name.clone())
                .collect();
            for name in enabled {
                state.launch(inner, &name);
            }
        });
    }

    fn add_project(&self, servers: BTreeMap<String, McpServerConfig>) {
        let inner = &self.inner;
        inner.change(|state| {
            for (name, config) in servers {
                // The user's own definition wins.
                if !state.servers.contains_key(&name) {
                    state.put(inner, &name, config, Origin::Project);
                }
            }
        });
    }

    fn view(&self) -> Vec<McpServerView> {
        let state = self.inner.lock();
        state
            .servers
            .iter()
            .map(|(name, server)| {
                let (state_of, error) = match &server.status {
                    Status::Disabled => (McpState::Disabled, None),
                    Status::Connecting => (McpState::Connecting, None),
                    Status::Connected { .. } => (McpState::Connected, None),
                    Status::Failed(error) => (McpState::Failed, Some(error.clone())),
                    Status::NeedsAuth { why, .. } => (McpState::NeedsAuth, Some(why.clone())),
                };
                McpServerView {
                    name: name.clone(),
                    transport: if server.config.url.is_some() {
                        McpTransport::Http
                    } else {
                        McpTransport::Stdio
                    },
                    state: state_of,
                    tools: state.names.get(name).cloned().unwrap_or_default(),
                    error,
                }
            })
            .collect()
    }

    fn prompts(&self) -> Vec<PromptCommand> {
        let state = self.inner.lock();
        let mut commands: Vec<PromptCommand> = Vec::new();
        for (server, entry) in &state.servers {
            let Status::Connected { prompts, .. } = &entry.status else {
                continue;
            };
            for prompt in prompts {
                let shown: String = prompt
                    .name
                    .chars()
                    .map(|c| if c.is_whitespace() { '-' } else { c })
                    .collect();
                let command = format!("/{server}:{shown}");
                if commands.iter().any(|known| known.command == command) {
                    continue;
                }
                commands.push(PromptCommand {
                    command,
                    server: server.clone(),
                    prompt: prompt.name.clone(),
                    description: prompt.description.clone(),
                    arguments: prompt
                        .arguments
                        .iter()
                        .map(|(name, description, required)| PromptArgument {
                            name: name.clone(),
                            description: description.clone(),
                            required: *required,
                        })
                        .collect(),
                });
            }
        }
        commands
    }

    fn changes(&self) -> watch::Receiver<()> {
        self.inner.changes.subscribe()
    }

    fn set(&self, name: &str, server: McpServerConfig) -> BoxFuture<'static, Result<(), String>> {
        let inner = self.inner.clone();
        let name = name.to_owned();
        async move {
            config::validate(&name, &server)?;
            inner.lock().editable(&name)?;
            persist(&inner, {
                let (name, server) = (name.clone(), server.clone());
                move |path| config::persist_set(path, &name, &server)
            })
            .await?;
            inner.change(|state| state.put(&inner, &name, server, Origin::User));
            Ok(())
        }
        .boxed()
    }

    fn set_for_session(
        &self,
        name: &str,
        server: McpServerConfig,
    ) -> BoxFuture<'static, Result<(), String>> {
        let inner = self.inner.clone();
        let name = name.to_owned();
        async move {
            config::validate(&name, &server)?;
            inner.change(|state| state.put(&inner, &name, server, Origin::Client));
            Ok(())
        }
        .boxed()
    }

    fn remove(&self, name: &str) -> BoxFuture<'static, Result<(), String>> {
        let inner = self.inner.clone();
        let name = name.to_owned();
        async move {
            let url = inner.lock().known(&name)?.config.url.clone();
            inner.lock().editable(&name)?;
            persist(&inner, {
                let name = name.clone();
                move |path| config::persist_remove(path, &name)
            })
            .await?;
            inner.change(|state| {
                state.stop(&name);
                state.servers.remove(&name);
            });
            // A removed server's sign-in goes with it.
            if let Some(url) = url {
                let tokens =
                    oauth::TokenFile::new(oauth::token_path(&inner.profile_dir(), &name, &url));
                if let Ok(Ok(held)) = tokio::task::spawn_blocking(move || tokens.remove()).await
                    && let Ok(http) = client::http_client()
                {
                    oauth::revoke(&url, held, &http).await;
                }
            }
            Ok(())
        }
        .boxed()
    }

    fn toggle(&self, name: &str, on: bool) -> BoxFuture<'static, Result<(), String>> {
        let inner = self.inner.clone();
        let name = name.to_owned();
        async move {
            inner.lock().known(&name)?;
            inner.lock().editable(&name)?;
            persist(&inner, {
                let name = name.clone();
                move |path| config::persist_enabled(path, &name, on)
            })
            .await?;
            inner.change(|state| {
                let Some(server) = state.servers.get_mut(&name) else {
                    return;
                };
                server.config.enabled = Some(on);
                let idle = matches!(server.status, Status::Disabled | Status::Failed(_));
                match on {
                    true if idle => state.launch(&inner, &name),
                    true => {}
                    false => state.stop(&name),
                }
            });
            Ok(())
        }
        .boxed()
    }

    fn retry(&self, name: &str) -> Result<(), String> {
        let inner = &self.inner;
        inner.change(|state| {
            let server = state.known(name)?;
            if !enabled(&server.config) {
                return Err(format!(
                    "MCP server {name} is disabled; enable it with mcp_toggle"
                ));
            }
            state.launch(inner, name);
            Ok(())
        })
    }

    fn login(&self, name: &str) -> BoxFuture<'static, Result<String, String>> {
        let inner = self.inner.clone();
        let name = name.to_owned();
        async move {
            let (url, challenge, oauth) = {
                let state = inner.lock();
                let server = state.known(&name)?;
                let Some(url) = server.config.url.clone() else {
                    return Err(format!(
                        "MCP server {name} runs as a command, not at a URL: it has no sign-in"
                    ));
                };
                let challenge = match &server.status {
                    Status::NeedsAuth { challenge, .. } if !challenge.is_empty() => {
                        Some(challenge.clone())
                    }
                    _ => None,
                };
                (url, challenge, server.config.oauth.clone())
            };
            let oauth = match oauth {
                Some(mut oauth) => {
                    if let Some(secret) = &oauth.client_secret {
                        oauth.client_secret = Some(
                            config::expand_vars(secret, |var| inner.env.get(var).cloned())
                                .map_err(|problem| format!("oauth.client_secret: {problem}"))?,
                        );
                    }
                    Some(oauth)
                }
                None => None,
            };
            let path = oauth::token_path(&inner.profile_dir(), &name, &url);
            // A sign-in already running for this server (in this session or another
            // of the process) is joined, not started twice.
            if let Some(running) = oauth::running(&path) {
                return Ok(running);
            }
            let http = client::http_client()?;
            let tokens = oauth::TokenFile::new(path.clone());
            let sign_in = oauth::sign_in(&url, challenge, oauth.as_deref(), &tokens, &http)
                .await
                .map_err(|why| format!("MCP server {name}: {why}"))?;
            let address = sign_in.url.clone();
            oauth::started(path.clone(), address.clone());
            let weak = Arc::downgrade(&inner);
            tokio::spawn(async move {
                let result = sign_in
                    .done
                    .await
                    .unwrap_or_else(|err| Err(format!("the sign-in stopped: {err}")));
                oauth::ended(&path);
                if let Err(why) = result
                    && let Some(inner) = weak.upgrade()
                {
                    inner.sign_in_failed(&name, &why);
                }
            });
            Ok(address)
        }
        .boxed()
    }

    fn take_sign_in_failures(&self) -> Vec<SignInFailure> {
        std::mem::take(&mut self.inner.lock().sign_in_failures)
    }

    fn logout(&self, name: &str) -> BoxFuture<'static, Result<(), String>> {
        let inner = self.inner.clone();
        let name = name.to_owned();
        async move {
            let url = {
                let state = inner.lock();
                let server = state.known(&name)?;
                server.config.url.clone().ok_or_else(|| {
                    format!("MCP server {name} runs as a command, not at a URL: it has no sign-in")
                })?
            };
            let tokens =
                oauth::TokenFile::new(oauth::token_path(&inner.profile_dir(), &name, &url));
            let held = {
                let tokens = tokens.clone();
                tokio::task::spawn_blocking(move || tokens.remove())
                    .await
                    .map_err(|err| format!("internal error: {err}"))??
            };
            if let Ok(http) = client::http_client() {
                oauth::revoke(&url, held, &http).await;
            }
            inner.change(|state| {
                if state.started
                    && state
                        .servers
                        .get(&name)
                        .is_some_and(|server| enabled(&server.config))
                {
                    state.launch(&inner, &name);
                }
            });
            Ok(())
        }
        .boxed()
    }

    fn get_prompt(
        &self,
        server: &str,
        prompt: &str,
        arguments: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<String, String>> {
        let found = {
            let state = self.inner.lock();
            match state
                .servers
                .get(server)
                .map(|entry| (&entry.status, &entry.config))
            {
                Some((Status::Connected { connection, .. }, config)) => {
                    Ok((connection.clone(), timeout_of(config)))
                }
                _ => Err(format!("MCP server {server} is not connected")),
            }
        };
        let (server, prompt) = (server.to_owned(), prompt.to_owned());
        async move {
            let (connection, timeout) = found?;
            let arguments = arguments
                .into_iter()
                .map(|(key, text)| (key, serde_json::Value::String(text)))
                .collect();
            let messages = tokio::select! {
                reason = connection.closed() => {
                    return Err(format!("MCP server {server} is not connected: {reason}"));
                }
                got = tokio::time::timeout(timeout, connection.get_prompt(&prompt, arguments)) => match got {
                    Ok(Ok(messages)) => messages,
                    Ok(Err(err)) => return Err(format!("MCP server {server} failed prompt {prompt}: {err}")),
                    Err(_) => return Err(format!(
                        "MCP server {server} did not answer for prompt {prompt} within {} ms (timeout_ms)",
                        timeout.as_millis()
                    )),
                },
            };
            prompt_text(&messages).ok_or_else(|| format!("prompt {prompt} of {server} has no text"))
        }
        .boxed()
    }

    fn shutdown(&self) -> BoxFuture<'static, ()> {
        let connections: Vec<SharedConnection> = self.inner.change(|state| {
            state.closed = true;
            self.inner.root.cancel();
            state
                .servers
                .values_mut()
                .filter_map(|server| {
                    match std::mem::replace(&mut server.status, Status::Disabled) {
                        Status::Connected { connection, .. } => Some(connection),
                        _ => None,
                    }
                })
                .collect()
        });
        async move {
            futures_util::future::join_all(connections.iter().map(|c| c.shutdown())).await;
        }
        .boxed()
    }

    fn elicitations(&self) -> Option<mpsc::Receiver<Elicitation>> {
        self.inner
            .elicitations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// Writes the config file off the async workers.
async fn persist(
    inner: &Inner,
    write: impl FnOnce(&std::path::Path) -> Result<(), String> + Send + 'static,
) -> Result<(), String> {
    let path = inner.config_path.clone();
    tokio::task::spawn_blocking(move || write(&path))
        .await
        .map_err(|err| format!("internal error while writing the config: {err}"))?
}

/// The text of a prompt's messages, as one user message: text blocks and embedded text
/// resources, in order; other content is named, not inlined.
fn prompt_text(messages: &[client::PromptMessage]) -> Option<String> {
    let parts: Vec<String> = messages
        .iter()
        .filter_map(|message| {
            let content = &message.content;
            match content["type"].as_str() {
                Some("text") => content["text"].as_str().map(str::to_owned),
                Some("resource") => content["resource"]["text"].as_str().map(str::to_owned),
                Some(other) => Some(format!("[{other} content not shown]")),
                None => None,
            }
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

impl ToolSource for McpManager {
    fn specs(&self) -> Vec<ToolSpec> {
        self.inner
            .lock()
            .tools
            .values()
            .map(|tool| tool.spec())
            .collect()
    }

    fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let tool = self.inner.lock().tools.get(name).cloned()?;
        Some(tool)
    }
}
