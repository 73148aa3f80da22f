//! Builds engine sessions from a profile: reads the config, resolves providers, registers
//! tools, picks the prompt. This is the one place that knows both the engine and the
//! concrete providers and tools; the in-process transport and the daemon both start
//! sessions through it, which is what keeps their protocol identical.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{ApprovalMode, LoadedConfig, Profile};
use crate::engine::{Input, Outbound};
use crate::engine::{SessionParams, ToolRegistry, prompt};
use crate::mcp::McpManager;
use crate::protocol::{Op, OpName};
use crate::providers::Catalog;

/// What a client asks for when it opens a session.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Working directory of a coding session (ignored for chat sessions).
    pub cwd: PathBuf,
    /// A chat session: runs in `<profile>/chats` with the chat prompt.
    pub chat: bool,
    /// The client's environment; providers read API keys from it.
    pub env: HashMap<String, String>,
}

impl SessionOptions {
    /// Options for a session of this very process (in-process serve).
    pub fn from_current_process(chat: bool) -> Self {
        Self {
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            chat,
            env: std::env::vars().collect(),
        }
    }
}

fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

pub fn build_session(profile: &Profile, options: SessionOptions) -> SessionParams {
    let config_path = profile.config_path();
    let LoadedConfig {
        config,
        problems,
        broken_providers,
    } = LoadedConfig::load(&config_path);
    let config_broken = !problems.is_empty();
    let mut startup_errors = problems;

    let today = prompt::today();
    let (cwd, system_prompt) = if options.chat || is_inside(&options.cwd, &profile.chats_dir()) {
        let dir = if options.chat {
            profile.chats_dir()
        } else {
            options.cwd.clone()
        };
        if let Err(err) = std::fs::create_dir_all(&dir) {
            startup_errors.push(format!("cannot create {}: {err}", dir.display()));
        }
        (dir, prompt::chat_prompt(&today))
    } else {
        let prompt = prompt::coding_prompt(&options.cwd, &today);
        (options.cwd.clone(), prompt)
    };

    let mut tools = ToolRegistry::new();
    crate::tools::register_all(&mut tools);

    let env = Arc::new(options.env);
    // The session's own servers: in the daemon too, a server started for one session
    // never serves another.
    let mcp = McpManager::new(
        config.mcp_servers.clone(),
        cwd.clone(),
        env.clone(),
        config_path.clone(),
    );
    tools.add_source(Arc::new(mcp.clone()));

    let approval_mode = config.approval_mode.unwrap_or(ApprovalMode::Manual);
    let reasoning_effort = config.reasoning_effort.clone();
    let catalog = Catalog::new(
        config,
        profile.dir.clone(),
        config_path.clone(),
        env.clone(),
    )
    .config_problems(config_broken, &broken_providers);
    SessionParams {
        session_id: new_session_id(),
        cwd,
        env,
        profile_dir: profile.dir.clone(),
        config_path,
        system_prompt,
        approval_mode,
        reasoning_effort,
        catalog: Arc::new(catalog),
        tools,
        mcp: Arc::new(mcp),
        startup_errors,
        clients: None,
    }
}

/// Whether `path` is `dir` or inside it. Any engine started in the chats directory is a
/// chat session, as the protocol says.
fn is_inside(path: &std::path::Path, dir: &std::path::Path) -> bool {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    path.starts_with(dir)
}

/// The engine as the daemon hosts it: each `open` builds a session from the profile,
/// exactly as in-process `serve` does, so the two speak the same protocol line for line.
pub struct EngineHost {
    profile: Profile,
}

impl EngineHost {
    pub fn new(profile: Profile) -> Self {
        Self { profile }
    }
}

impl jucode_daemon::Host for EngineHost {
    type Input = Input;
    type Output = Outbound;

    fn hello(&self) -> bytes::Bytes {
        crate::protocol::daemon_hello_line()
    }

    async fn open(
        &self,
        params: jucode_daemon::OpenParams,
    ) -> Result<jucode_daemon::Hosted<Self::Input, Self::Output>, String> {
        let profile = self.profile.clone();
        // Reading the profile and config, resolving paths: file-system work, kept off
        // the daemon's async workers.
        let built = tokio::task::spawn_blocking(move || prepare_open(&profile, params))
            .await
            .map_err(|err| format!("internal error while opening: {err}"))??;
        let id = built.session_id.clone();
        let (events, output) = tokio::sync::mpsc::channel(crate::engine::EVENT_QUEUE);
        let handle = crate::engine::spawn(built, events);
        Ok(jucode_daemon::Hosted {
            id,
            input: handle.inputs,
            output,
        })
    }

    fn is_quit(&self, op: &str, line: &[u8]) -> bool {
        match OpName::parse(op) {
            Some(OpName::Shutdown) => true,
            // A malformed `command` is not a quit: it goes to the engine, which says
            // what is wrong with it.
            Some(OpName::Command) => matches!(
                crate::protocol::parse_op(line),
                Ok(Op::Command { input }) if crate::engine::commands::is_quit(&input)
            ),
            _ => false,
        }
    }
}

/// The blocking part of a daemon `open`: which profile, which directory, the session.
fn prepare_open(
    default_profile: &Profile,
    params: jucode_daemon::OpenParams,
) -> Result<SessionParams, String> {
    // The client's profile, as its own process would use; the daemon's otherwise.
    let profile = Profile::from_env(&params.env).unwrap_or_else(|| default_profile.clone());
    let cwd = match params.cwd {
        Some(cwd) if cwd.is_absolute() => cwd,
        Some(cwd) => {
            return Err(format!(
                "cwd must be an absolute path, got {}",
                cwd.display()
            ));
        }
        None if params.chat => profile.chats_dir(),
        None => return Err("open needs an absolute cwd (or chat: true)".to_owned()),
    };
    if !params.chat && !cwd.is_dir() {
        return Err(format!("cwd {} is not a directory", cwd.display()));
    }
    let options = SessionOptions {
        cwd,
        chat: params.chat,
        env: params.env,
    };
    let mut session = build_session(&profile, options);
    session.clients = Some(params.clients);
    Ok(session)
}

impl From<jucode_daemon::ClientInput> for Input {
    fn from(input: jucode_daemon::ClientInput) -> Self {
        match input {
            jucode_daemon::ClientInput::Line { client, line } => {
                match crate::protocol::parse_op(&line) {
                    Ok(op) => Self::Op { client, op },
                    Err(message) => Self::Malformed { client, message },
                }
            }
            jucode_daemon::ClientInput::Snapshot { token } => Self::Snapshot { token },
            jucode_daemon::ClientInput::Barrier { token } => Self::Barrier { token },
        }
    }
}

impl From<Outbound> for jucode_daemon::HostOutput {
    fn from(output: Outbound) -> Self {
        match output {
            Outbound::Line(line) => Self::Line(line),
            Outbound::Reply { client, line } => Self::Reply { client, line },
            Outbound::Snapshot { token, lines } => Self::Snapshot { token, lines },
            Outbound::Barrier { token } => Self::Barrier { token },
        }
    }
}
