//! Builds engine sessions from a profile: reads the config, resolves providers, registers
//! tools, picks the prompt. This is the one place that knows both the engine and the
//! concrete providers and tools; the in-process transport and the daemon both start
//! sessions through it, which is what keeps their protocol identical.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::{ApprovalMode, LoadedConfig, Profile};
use crate::engine::{Input, Outbound};
use crate::engine::{McpServers, SessionParams, ToolRegistry, conversation::prompt};
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
    /// A saved session to continue instead of starting a new one (its own working
    /// directory and kind then apply).
    pub resume: Option<String>,
    /// Who runs the session, for the session file's lock.
    pub by: crate::sessions::Runner,
    /// Overrides of the config for this session (`--headless --model`, `--approval-mode`).
    pub model: Option<String>,
    pub approval_mode: Option<ApprovalMode>,
}

impl SessionOptions {
    /// Options for a session of this very process (in-process serve).
    pub fn from_current_process(chat: bool, resume: Option<String>) -> Self {
        Self {
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            chat,
            env: std::env::vars().collect(),
            resume,
            by: crate::sessions::Runner::Serve,
            model: None,
            approval_mode: None,
        }
    }
}

fn new_session_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Builds a session: a new one, or (with `options.resume`) a saved one, locked for this
/// process. Blocking (it reads the profile, the config and the session file); must run
/// within a tokio runtime, which the session file's writer joins. `Err`: the saved
/// session cannot be continued (unknown, or open elsewhere), said for the client.
pub fn build_session(
    profile: &Profile,
    mut options: SessionOptions,
) -> Result<SessionParams, String> {
    let mut unsaved = None;
    let (session_id, opened) = match options.resume.take() {
        Some(id) => {
            let opened = crate::sessions::open_saved(&profile.dir, &id, options.by)?;
            if let Some(meta) = opened
                .saved
                .as_ref()
                .and_then(|(entries, _)| entries.first())
                .and_then(|entry| match &entry.body {
                    crate::engine::conversation::store::EntryBody::Session(meta) => Some(meta),
                    _ => None,
                })
            {
                if !meta.chat && !meta.cwd.is_dir() {
                    return Err(format!(
                        "session {id} ran in {}, which is not a directory any more",
                        meta.cwd.display()
                    ));
                }
                options.cwd = meta.cwd.clone();
                options.chat = meta.chat;
            }
            (id, opened)
        }
        None => {
            let id = new_session_id();
            let cwd = if options.chat {
                profile.chats_dir()
            } else {
                options.cwd.clone()
            };
            let opened = crate::sessions::new_session(&profile.dir, &cwd, &id, options.by);
            unsaved = crate::sessions::cannot_save(&profile.dir, &cwd);
            (id, opened)
        }
    };
    let config_path = profile.config_path();
    let LoadedConfig {
        mut config,
        problems,
        broken_providers,
        unreadable,
    } = LoadedConfig::load(&config_path);
    if let Some(model) = options.model.take() {
        config.model = Some(model);
    }
    let config_broken = !problems.is_empty();
    let mut startup_errors = problems;
    if let Some(why) = unsaved {
        startup_errors.push(format!(
            "this session cannot be saved: {why}; it goes on in memory, and its first turn tries again"
        ));
    }

    let agents_max_depth = config
        .agents
        .max_depth
        .unwrap_or(crate::config::DEFAULT_AGENTS_MAX_DEPTH);
    let today = prompt::today();
    let chat = options.chat || is_inside(&options.cwd, &profile.chats_dir());
    let mut tools = ToolRegistry::new();
    // The prompt names the registry's tools and the engine's own.
    let prompt_specs = |tools: &ToolRegistry| {
        let mut specs = tools.specs();
        specs.extend(crate::engine::session_builtin_specs(agents_max_depth));
        specs
    };
    let (cwd, base_prompt) = if chat {
        let dir = if options.chat {
            profile.chats_dir()
        } else {
            options.cwd.clone()
        };
        if let Err(err) = crate::config::private::create_dir_all(&dir) {
            startup_errors.push(format!("cannot create {}: {err}", dir.display()));
        }
        crate::tools::register_chat(&mut tools);
        // Research is what a chat is for: fetching a page asks nobody.
        crate::tools::register_web(
            &mut tools,
            &config.web_fetch,
            config.web_search.as_ref(),
            false,
        );
        (dir, prompt::chat_prompt(&today, &prompt_specs(&tools)))
    } else {
        crate::tools::register_all(&mut tools);
        crate::tools::register_web(
            &mut tools,
            &config.web_fetch,
            config.web_search.as_ref(),
            true,
        );
        let prompt = prompt::coding_prompt(&options.cwd, &today, &prompt_specs(&tools));
        (options.cwd.clone(), prompt)
    };

    let env = Arc::new(options.env);
    let project = crate::project::ProjectContext::load(crate::project::ProjectSetup {
        profile_dir: profile.dir.clone(),
        cwd: cwd.clone(),
        chat,
        base_prompt,
        env: env.clone(),
        session_id: session_id.clone(),
        user_hooks: config.hooks.clone(),
    });
    // The session's own servers: in the daemon too, a server started for one session
    // never serves another.
    let mcp = McpManager::new(
        config.mcp_servers.clone(),
        cwd.clone(),
        env.clone(),
        config_path.clone(),
    );
    mcp.add_project(crate::engine::Project::mcp_servers(&project));
    tools.add_source(Arc::new(mcp.clone()));

    let approval_mode = options
        .approval_mode
        .or(config.approval_mode)
        .unwrap_or(ApprovalMode::Manual);
    let sandbox = session_sandbox(&config.sandbox, &cwd, &env);
    let idle_unload_secs = config.daemon.idle_unload_secs;
    let reasoning_effort = config.reasoning_effort.clone();
    let catalog = Catalog::new(
        config,
        profile.dir.clone(),
        config_path.clone(),
        env.clone(),
    )
    .config_problems(config_broken, unreadable, &broken_providers);
    let idle_unload = (options.by == crate::sessions::Runner::Daemon)
        .then(|| idle_unload_secs.unwrap_or(DEFAULT_IDLE_UNLOAD_SECS))
        .filter(|secs| *secs > 0)
        .map(std::time::Duration::from_secs);
    let library = Arc::new(ProfileLibrary {
        profile: profile.clone(),
        env: env.as_ref().clone(),
        by: options.by,
    });
    Ok(SessionParams {
        session_id,
        cwd,
        env,
        profile_dir: profile.dir.clone(),
        config_path,
        project: Arc::new(project),
        approval_mode,
        sandbox,
        reasoning_effort,
        catalog: Arc::new(catalog),
        tools,
        mcp: Arc::new(mcp),
        startup_errors,
        clients: None,
        turn_ends: None,
        chat,
        journal: opened.journal,
        saved: opened.saved,
        library,
        idle_unload,
        agents_max_depth,
    })
}

/// The sandbox a session's commands start in: `[sandbox]`, the places of this cwd and
/// environment, and what the kernel can enforce (probed once per process).
fn session_sandbox(
    config: &crate::config::SandboxConfig,
    cwd: &std::path::Path,
    env: &HashMap<String, String>,
) -> crate::engine::Sandbox {
    let support = crate::tools::sandbox::support();
    let home = env.get("HOME").filter(|home| !home.is_empty());
    let extra: Vec<PathBuf> = config
        .writable_roots
        .iter()
        .map(|root| match (root.strip_prefix("~/"), home) {
            (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
            _ => PathBuf::from(root),
        })
        .collect();
    let writable_roots =
        crate::tools::sandbox::workspace_roots(cwd, env.get("TMPDIR").map(String::as_str), &extra);
    let limits = support.unsupported.clone().or_else(|| {
        (!support.gaps.is_empty()).then(|| {
            format!(
                "not enforced with Landlock ABI {}: {}",
                support.landlock_abi,
                support.gaps.join("; ")
            )
        })
    });
    crate::engine::Sandbox {
        mode: config.mode.unwrap_or(crate::config::DEFAULT_SANDBOX_MODE),
        writable_roots,
        network: config.network,
        available: support.enforced(),
        limits,
    }
}

/// How long an idle daemon session stays loaded by default: ten minutes.
pub const DEFAULT_IDLE_UNLOAD_SECS: u64 = 600;

/// The saved sessions of a profile, as `/resume` sees them.
struct ProfileLibrary {
    profile: Profile,
    env: HashMap<String, String>,
    by: crate::sessions::Runner,
}

impl crate::engine::ports::library::Library for ProfileLibrary {
    fn list(
        &self,
        cwd: &std::path::Path,
    ) -> Result<Vec<crate::engine::ports::library::Saved>, String> {
        Ok(crate::sessions::list(&self.profile.dir, Some(cwd))?
            .into_iter()
            .map(crate::engine::ports::library::Saved::from)
            .collect())
    }

    fn open(&self, id: &str) -> Result<SessionParams, String> {
        build_session(
            &self.profile,
            SessionOptions {
                cwd: PathBuf::from("/"),
                chat: false,
                env: self.env.clone(),
                resume: Some(id.to_owned()),
                by: self.by,
                model: None,
                approval_mode: None,
            },
        )
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

    /// Opens the session on another agent when it is one (`engine` given, or a saved
    /// session that ran on one); `None` for jucode's own engine.
    async fn open_hosted(
        &self,
        params: &jucode_daemon::OpenParams,
    ) -> Option<Result<crate::engines::Opened, String>> {
        let profile = Profile::from_env(&params.env).unwrap_or_else(|| self.profile.clone());
        let engine = match (&params.engine, &params.resume) {
            (Some(engine), _) => engine.clone(),
            (None, Some(id)) => {
                let (dir, id) = (profile.dir.clone(), id.clone());
                tokio::task::spawn_blocking(move || crate::engines::saved_engine(&dir, &id))
                    .await
                    .ok()
                    .flatten()?
                    .name
            }
            (None, None) => return None,
        };
        if params.chat {
            return Some(Err(format!(
                "engine {engine} runs coding sessions only, not chat ones"
            )));
        }
        let cwd = match (&params.cwd, &params.resume) {
            (Some(cwd), _) => cwd.clone(),
            (None, Some(_)) => PathBuf::from("/"),
            (None, None) => {
                return Some(Err(format!(
                    "open with engine {engine} needs an absolute cwd"
                )));
            }
        };
        Some(
            crate::engines::open(crate::engines::Request {
                profile,
                engine,
                cwd,
                env: params.env.clone(),
                resume: params.resume.clone(),
                clients: params.clients.clone(),
            })
            .await,
        )
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
        if let Some(opened) = self.open_hosted(&params).await {
            let opened = opened?;
            return Ok(jucode_daemon::Hosted {
                id: opened.id,
                input: opened.inputs,
                output: opened.output,
                cwd: Some(opened.cwd),
                chat: false,
                engine: Some(opened.engine),
            });
        }
        let profile = self.profile.clone();
        // Reading the profile and config, resolving paths: file-system work, kept off
        // the daemon's async workers.
        let built = tokio::task::spawn_blocking(move || prepare_open(&profile, params))
            .await
            .map_err(|err| format!("internal error while opening: {err}"))??;
        let id = built.session_id.clone();
        let cwd = Some(built.cwd.clone());
        let chat = built.chat;
        let (events, output) = tokio::sync::mpsc::channel(crate::engine::EVENT_QUEUE);
        let handle = crate::engine::spawn(built, events);
        Ok(jucode_daemon::Hosted {
            id,
            input: handle.inputs,
            output,
            cwd,
            chat,
            engine: None,
        })
    }

    async fn saved_sessions(&self) -> Result<Vec<jucode_daemon::SavedSession>, String> {
        let profile = self.profile.dir.clone();
        let saved = tokio::task::spawn_blocking(move || crate::sessions::list(&profile, None))
            .await
            .unwrap_or_else(|err| Err(format!("internal error while listing: {err}")))?;
        Ok(saved
            .into_iter()
            .map(|saved| jucode_daemon::SavedSession {
                id: saved.id,
                cwd: saved.cwd,
                chat: saved.chat,
                engine: saved.engine,
                // A broken file has no first message to show; `broken` says why.
                label: saved.broken.is_none().then_some(saved.label),
                created_at: saved.created,
                updated: saved.updated,
                broken: saved.broken,
            })
            .collect())
    }

    fn intercept(&self, op: &str, line: &[u8]) -> jucode_daemon::Intercept {
        use jucode_daemon::Intercept;
        match OpName::parse(op) {
            Some(OpName::Shutdown) => Intercept::Quit,
            // A malformed `command` is neither: it goes to the engine, which says what
            // is wrong with it.
            Some(OpName::Command) => match crate::protocol::parse_op(line) {
                Ok(Op::Command { input }) if crate::engine::commands::is_quit(&input) => {
                    Intercept::Quit
                }
                Ok(Op::Command { input }) => crate::engine::commands::resume_target(&input)
                    .map_or(Intercept::Forward, Intercept::Switch),
                _ => Intercept::Forward,
            },
            _ => Intercept::Forward,
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
    profile.check_private()?;
    if let Some(id) = params.resume {
        let options = SessionOptions {
            cwd: PathBuf::from("/"),
            chat: false,
            env: params.env,
            resume: Some(id),
            by: crate::sessions::Runner::Daemon,
            model: None,
            approval_mode: None,
        };
        let mut session = build_session(&profile, options)?;
        session.clients = Some(params.clients);
        return Ok(session);
    }
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
        resume: None,
        by: crate::sessions::Runner::Daemon,
        model: None,
        approval_mode: None,
    };
    let mut session = build_session(&profile, options)?;
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
            Outbound::Status { line, status } => Self::Status {
                line,
                state: status,
            },
            Outbound::Reply { client, line } => Self::Reply { client, line },
            Outbound::Snapshot { token, lines } => Self::Snapshot { token, lines },
            Outbound::Barrier { token } => Self::Barrier { token },
        }
    }
}
