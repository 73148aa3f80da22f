//! Other agents the daemon hosts behind the serve protocol (`[engines.<name>]` in
//! `config.toml`, `open` with `engine`). A hosted session speaks the same ops and events
//! as jucode's own engine; what differs is who runs the turns.
//!
//! # Layout
//! - `agent`: the engine-neutral seam: the [`agent::Command`]s a session sends an agent
//!   and the [`agent::Event`]s it reports. Every driver speaks only this.
//! - `child`: an agent's process: its name in messages, its exit, its stdin writer.
//! - `rpc`: a JSON-RPC 2.0 client over a child's stdio (for ACP and Codex's app server).
//! - `claude`: the driver of Claude Code in stream-json print mode (`kind = "claude-code"`).
//! - `codex`: the driver of Codex's app server (`kind = "codex"`).
//! - `acp`: the driver of an Agent Client Protocol agent (`kind = "acp"`).
//! - `session`: the hosted session task: queue, cards, approvals, conversation on disk,
//!   startup batch and snapshots, whatever the agent; and the move to the engine's TUI
//!   and back (`surface`).
//! - `terminal`: the pseudo-terminal an engine's TUI runs on, and its screen's model.
//!
//! This layer sits beside jucode's engine: it uses the engine's emitter, inputs and
//! conversation store and the session files, never the host or a transport.

pub mod acp;
mod agent;
mod child;
mod claude;
mod codex;
mod rpc;
mod session;
mod terminal;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::{EngineConfig, EngineKind, LoadedConfig, Profile};
use crate::engine::conversation::store::{EntryBody, HostedEngine, SessionMeta, Store};
use crate::engine::{EVENT_QUEUE, Input, Outbound};
use crate::protocol::ToolProviderView;

/// How long an agent may take to answer `initialize` and open its session by default.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// What opening a hosted session needs.
pub struct Request {
    pub profile: Profile,
    /// The `[engines.<name>]` entry.
    pub engine: String,
    /// Absolute; for a saved session, the one it was saved with is used.
    pub cwd: PathBuf,
    /// The client's environment, under the entry's `env`.
    pub env: HashMap<String, String>,
    /// A saved hosted session to continue.
    pub resume: Option<String>,
    pub clients: watch::Receiver<usize>,
}

/// A started hosted session's channels, as the host hands them to the daemon.
pub struct Opened {
    pub id: String,
    /// The `[engines.<name>]` entry it runs on.
    pub engine: String,
    pub cwd: PathBuf,
    pub inputs: mpsc::Sender<Input>,
    pub output: mpsc::Receiver<Outbound>,
}

/// The engine a saved session ran on, read from its header only (`None`: jucode's own,
/// or no such session).
pub fn saved_engine(profile_dir: &Path, id: &str) -> Option<HostedEngine> {
    crate::sessions::header(profile_dir, id)?.engine
}

/// The kind's name as the protocol and the session file spell it.
fn kind_name(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Acp => "acp",
        EngineKind::ClaudeCode => "claude-code",
        EngineKind::Codex => "codex",
    }
}

/// Starts the agent and its session. `Err` is for the client: it names the engine,
/// its command and what failed.
pub async fn open(request: Request) -> Result<Opened, String> {
    request.profile.check_private()?;
    let config_path = request.profile.config_path();
    let loaded = {
        let path = config_path.clone();
        tokio::task::spawn_blocking(move || LoadedConfig::load(&path))
            .await
            .map_err(|err| format!("internal error while reading the config: {err}"))?
    };
    let config = loaded.config.engines.get(&request.engine).cloned();
    let Some(config) = config else {
        let known: Vec<&str> = loaded.config.engines.keys().map(String::as_str).collect();
        let mut message = format!("no engine {} in {}", request.engine, config_path.display());
        if let Some(problem) = loaded
            .problems
            .iter()
            .find(|problem| problem.contains("engines"))
        {
            message.push_str(&format!(" ({problem})"));
        } else if known.is_empty() {
            message.push_str(" (it has no [engines.<name>] table)");
        } else {
            message.push_str(&format!(" (it has: {})", known.join(", ")));
        }
        return Err(message);
    };
    let kind = kind_name(config.kind);
    let (driver, default_command) = match config.kind {
        EngineKind::Acp => (agent::Kind::Acp, None),
        EngineKind::ClaudeCode => (agent::Kind::ClaudeCode, Some("claude")),
        EngineKind::Codex => (agent::Kind::Codex, Some("codex")),
    };
    let command = config
        .command
        .clone()
        .filter(|command| !command.is_empty())
        .or_else(|| default_command.map(str::to_owned));
    let Some(command) = command else {
        return Err(format!(
            "engine {} (kind {kind}) has no command in {}",
            request.engine,
            config_path.display()
        ));
    };

    let profile_dir = request.profile.dir.clone();
    let saved = match &request.resume {
        Some(id) => Some(load_saved(&profile_dir, id).await?),
        None => None,
    };
    let cwd = saved
        .as_ref()
        .map_or_else(|| request.cwd.clone(), |saved| saved.meta.cwd.clone());
    if !cwd.is_dir() {
        return Err(format!("cwd {} is not a directory", cwd.display()));
    }
    let mut env = request.env.clone();
    env.extend(config.env.clone());
    let mut notices = Vec::new();
    let mut route = None;
    let provider = match driver {
        agent::Kind::ClaudeCode => {
            claude_provider(&request.engine, &config, &loaded, &mut env, &mut notices)
        }
        agent::Kind::Codex => {
            codex_provider(&request.engine, &config, &loaded, &mut env, &mut notices).map(
                |(view, codex_route)| {
                    route = Some(codex_route);
                    view
                },
            )
        }
        agent::Kind::Acp => provider_view(&request.engine, &config, &loaded, &mut notices),
    };
    // A resumed conversation goes on with the model it had, not the agent's default.
    let mut default_config_options = config.default_config_options.clone();
    if let Some(saved) = &saved
        && !saved.meta.model.is_empty()
        && !default_config_options.contains_key("model")
    {
        default_config_options.insert("model".to_owned(), saved.meta.model.clone());
    }
    let mut launch = agent::Launch {
        kind: driver,
        name: request.engine.clone(),
        command,
        args: config.args.clone(),
        env,
        cwd: cwd.clone(),
        default_mode: config.default_mode.clone(),
        default_config_options,
        provider: route,
        load: saved
            .as_ref()
            .and_then(|saved| saved.meta.engine.as_ref())
            .and_then(|engine| engine.session.clone()),
        startup: config
            .startup_timeout_ms
            .map_or(DEFAULT_STARTUP_TIMEOUT, Duration::from_millis),
        tui: None,
        // A saved conversation may have gone on without the session (its TUI ran when
        // the daemon stopped): what the agent has beyond it is read back.
        history: saved.is_some(),
    };
    launch.tui = tui_of(&config, &launch);
    let (agent, started) = start(launch.clone()).await?;

    if let Some(why) = &started.not_loaded {
        notices.push(format!(
            "engine {} could not continue its conversation ({why}): it starts a new one; the transcript is jucode's record",
            request.engine
        ));
    }
    let (id, store) = match saved {
        Some(saved) => {
            notices.extend(saved.warnings);
            (saved.meta.id.clone(), saved.store)
        }
        None => {
            let id = session_id(&profile_dir, &started.session);
            let opened = crate::sessions::new_session(
                &profile_dir,
                &cwd,
                &id,
                crate::sessions::Runner::Daemon,
            );
            let meta = SessionMeta {
                id: id.clone(),
                cwd: cwd.clone(),
                model: started.settings.model.clone().unwrap_or_default(),
                created: now_ms(),
                chat: false,
                engine: Some(HostedEngine {
                    name: request.engine.clone(),
                    kind: kind.to_owned(),
                    session: Some(started.session.clone()),
                }),
            };
            (id, Store::new(meta, opened.journal))
        }
    };

    let identity = session::Identity {
        id: id.clone(),
        engine: request.engine.clone(),
        kind,
        profile_dir: profile_dir.display().to_string(),
        config_path: config_path.display().to_string(),
        cwd: cwd.clone(),
        provider,
    };
    let (inputs, inputs_rx) = mpsc::channel(crate::engine::INPUT_QUEUE);
    let (events, output) = mpsc::channel(EVENT_QUEUE);
    let hosted = session::Hosted::new(
        identity,
        launch,
        agent,
        started,
        store,
        request.clients,
        events,
    );
    tokio::spawn(hosted.run(inputs_rx, notices));
    Ok(Opened {
        id,
        engine: request.engine.clone(),
        cwd,
        inputs,
        output,
    })
}

/// How long a TUI asked to quit has before it is killed, by default.
pub const DEFAULT_TUI_GRACE: Duration = Duration::from_secs(5);
/// Claude Code's TUI can take several seconds to exit after `/exit` (measured up to
/// about 6 s with 2.1.332, its conversation already saved): it gets longer.
const CLAUDE_TUI_GRACE: Duration = Duration::from_secs(15);

/// The engine's TUI (`surface terminal`): Claude Code's and Codex's own by default, an
/// ACP engine's only where its entry names one.
fn tui_of(config: &EngineConfig, launch: &agent::Launch) -> Option<agent::Tui> {
    let session = "{session}".to_owned();
    let (command, default_args, quit) = match config.kind {
        EngineKind::ClaudeCode => {
            let mut args = vec!["--resume".to_owned(), session];
            if let Some(mode) = &launch.default_mode {
                args.extend(["--permission-mode".to_owned(), mode.clone()]);
            }
            if let Some(model) = launch.default_config_options.get("model") {
                args.extend(["--model".to_owned(), model.clone()]);
            }
            (launch.command.clone(), args, "/exit\r")
        }
        EngineKind::Codex => {
            let mut args = vec!["resume".to_owned()];
            if let Some(route) = &launch.provider {
                args.extend(route.args.iter().cloned());
            }
            if let Some(model) = launch.default_config_options.get("model") {
                args.extend(["--model".to_owned(), model.clone()]);
            }
            args.push(session);
            (launch.command.clone(), args, "/quit\r")
        }
        EngineKind::Acp => (config.tui.clone()?, Vec::new(), "\u{4}"),
    };
    Some(agent::Tui {
        command: config.tui.clone().unwrap_or(command),
        args: config.tui_args.clone().unwrap_or(default_args),
        quit: config.tui_quit.clone().unwrap_or_else(|| quit.to_owned()),
        grace: config.tui_grace_ms.map_or(
            if config.kind == EngineKind::ClaudeCode {
                CLAUDE_TUI_GRACE
            } else {
                DEFAULT_TUI_GRACE
            },
            Duration::from_millis,
        ),
    })
}

/// Starts the agent `launch` names with the driver of its kind.
async fn start(launch: agent::Launch) -> Result<(agent::Agent, agent::Started), String> {
    match launch.kind {
        agent::Kind::Acp => acp::start(launch).await,
        agent::Kind::ClaudeCode => claude::start(launch).await,
        agent::Kind::Codex => codex::start(launch).await,
    }
}

/// A saved hosted session, loaded and locked for this process.
struct Saved {
    meta: SessionMeta,
    store: Store,
    warnings: Vec<String>,
}

async fn load_saved(profile_dir: &Path, id: &str) -> Result<Saved, String> {
    let opened = {
        let profile_dir = profile_dir.to_path_buf();
        let wanted = id.to_owned();
        tokio::task::spawn_blocking(move || {
            crate::sessions::open_saved(&profile_dir, &wanted, crate::sessions::Runner::Daemon)
        })
        .await
        .map_err(|err| format!("internal error while loading {id}: {err}"))??
    };
    let (entries, mut warnings) = opened.saved.unwrap_or_default();
    let meta = match entries.first().map(|entry| &entry.body) {
        Some(EntryBody::Session(meta)) => meta.clone(),
        _ => return Err(format!("session {id} has no session header")),
    };
    let (store, more) = Store::load(entries, opened.journal)?;
    warnings.extend(more);
    Ok(Saved {
        meta,
        store,
        warnings,
    })
}

/// The hosted session's id: the agent's own when it can name a jucode session file
/// (so both sides call the conversation the same), a fresh one otherwise.
fn session_id(profile_dir: &Path, agent_session: &str) -> String {
    if crate::sessions::valid_id(agent_session)
        && crate::sessions::find(profile_dir, agent_session).is_none()
    {
        agent_session.to_owned()
    } else {
        uuid::Uuid::now_v7().to_string()
    }
}

/// What `tool_provider` says. An ACP agent chooses its own model endpoint: a
/// configured `provider` cannot be imposed on it, which the session says once.
fn provider_view(
    engine: &str,
    config: &EngineConfig,
    loaded: &LoadedConfig,
    notices: &mut Vec<String>,
) -> Option<ToolProviderView> {
    let provider = config.provider.as_ref()?;
    let known = loaded.config.providers.contains_key(provider);
    notices.push(format!(
        "engine {engine} (kind acp) picks its own model endpoint: provider {provider}{} is not applied to it",
        if known { "" } else { " (not in [providers] either)" }
    ));
    None
}

/// Claude Code's model traffic goes where its environment says (`ANTHROPIC_BASE_URL`,
/// `ANTHROPIC_AUTH_TOKEN`, `ANTHROPIC_MODEL`, `ANTHROPIC_CUSTOM_HEADERS`): a configured
/// Anthropic provider is set there. Anything else is not applied, which the session says.
fn claude_provider(
    engine: &str,
    config: &EngineConfig,
    loaded: &LoadedConfig,
    env: &mut HashMap<String, String>,
    notices: &mut Vec<String>,
) -> Option<ToolProviderView> {
    let id = config.provider.as_ref()?;
    let Some(provider) = loaded.config.providers.get(id) else {
        notices.push(format!(
            "engine {engine}: provider {id} is not in [providers]; Claude Code uses its own configuration"
        ));
        return None;
    };
    if provider.kind != crate::config::ProviderKind::Anthropic {
        notices.push(format!(
            "engine {engine}: Claude Code speaks Anthropic Messages only, and provider {id} is not of kind anthropic: it is not applied"
        ));
        return None;
    }
    let base = provider
        .base_url
        .as_deref()
        .unwrap_or("https://api.anthropic.com")
        .trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    env.insert("ANTHROPIC_BASE_URL".to_owned(), base.to_owned());
    let key_env = provider
        .api_key_env
        .clone()
        .unwrap_or_else(|| "ANTHROPIC_API_KEY".to_owned());
    if let Some(key) = provider
        .api_key
        .clone()
        .or_else(|| env.get(&key_env).cloned())
    {
        // As a bearer token, and the key variable emptied: Claude Code prefers a key
        // it finds to the token, and the user's own must not win over the provider.
        env.insert("ANTHROPIC_AUTH_TOKEN".to_owned(), key);
        env.insert("ANTHROPIC_API_KEY".to_owned(), String::new());
    }
    if let Some(model) = config.default_config_options.get("model") {
        env.insert("ANTHROPIC_MODEL".to_owned(), model.clone());
    }
    if !provider.headers.is_empty() {
        let headers: Vec<String> = provider
            .headers
            .iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        env.insert("ANTHROPIC_CUSTOM_HEADERS".to_owned(), headers.join("\n"));
    }
    Some(ToolProviderView {
        id: id.clone(),
        name: id.clone(),
        model: config.default_config_options.get("model").cloned(),
    })
}

/// The name Codex knows a jucode provider by (`-c model_providers.jucode=...`): always
/// the same, so a thread saved on it resumes however the provider is called here.
const CODEX_PROVIDER_ID: &str = "jucode";
/// The child's variable holding the provider's key (never an argument).
const CODEX_PROVIDER_KEY: &str = "JUCODE_PROVIDER_API_KEY";

/// Codex speaks Responses only: a configured `openai-responses` provider is defined
/// for it on its command line, its key only in the child's environment.
fn codex_provider(
    engine: &str,
    config: &EngineConfig,
    loaded: &LoadedConfig,
    env: &mut HashMap<String, String>,
    notices: &mut Vec<String>,
) -> Option<(ToolProviderView, agent::ProviderRoute)> {
    let id = config.provider.as_ref()?;
    let Some(provider) = loaded.config.providers.get(id) else {
        notices.push(format!(
            "engine {engine}: provider {id} is not in [providers]; Codex uses its own configuration"
        ));
        return None;
    };
    if provider.kind != crate::config::ProviderKind::OpenaiResponses {
        notices.push(format!(
            "engine {engine}: Codex speaks OpenAI Responses only, and provider {id} is not of kind openai-responses: it is not applied"
        ));
        return None;
    }
    let base = provider
        .base_url
        .as_deref()
        .unwrap_or("https://api.openai.com/v1")
        .trim_end_matches('/');
    // TOML basic strings take JSON's escapes.
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    let mut definition = vec![
        format!("name={}", quoted(id)),
        format!("base_url={}", quoted(base)),
        "wire_api=\"responses\"".to_owned(),
    ];
    let key_env = provider
        .api_key_env
        .clone()
        .unwrap_or_else(|| "OPENAI_API_KEY".to_owned());
    if let Some(key) = provider
        .api_key
        .clone()
        .or_else(|| env.get(&key_env).cloned())
    {
        env.insert(CODEX_PROVIDER_KEY.to_owned(), key);
        definition.push(format!("env_key={}", quoted(CODEX_PROVIDER_KEY)));
    }
    if !provider.headers.is_empty() {
        let headers: Vec<String> = provider
            .headers
            .iter()
            .map(|(name, value)| format!("{}={}", quoted(name), quoted(value)))
            .collect();
        definition.push(format!("http_headers={{{}}}", headers.join(",")));
    }
    let args = vec![
        "-c".to_owned(),
        format!("model_provider={}", quoted(CODEX_PROVIDER_ID)),
        "-c".to_owned(),
        format!(
            "model_providers.{CODEX_PROVIDER_ID}={{{}}}",
            definition.join(",")
        ),
    ];
    let view = ToolProviderView {
        id: id.clone(),
        name: id.clone(),
        model: config.default_config_options.get("model").cloned(),
    };
    Some((
        view,
        agent::ProviderRoute {
            id: CODEX_PROVIDER_ID.to_owned(),
            args,
        },
    ))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}
