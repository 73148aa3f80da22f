//! The profile directory and `config.toml`.
//!
//! Loading never fails: a missing file means defaults, and a broken one yields what could
//! be read plus one problem message per problem, naming the file and line, which the
//! engine reports as `error` events in its startup batch. A front-end must always get a
//! working session.

pub mod hooks;
pub mod mcp;
pub mod private;
pub mod web;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeString, DeTable, DeValue, ValueDeserializer};

/// Where a user's jucode state lives: `$JUCODE_HOME`, else `~/.jucode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub dir: PathBuf,
}

impl Profile {
    pub fn resolve() -> Result<Self, String> {
        if let Some(home) = std::env::var_os("JUCODE_HOME").filter(|v| !v.is_empty()) {
            return Ok(Self {
                dir: absolute(PathBuf::from(home)),
            });
        }
        let base = directories::BaseDirs::new().ok_or(
            "cannot find the home directory: set JUCODE_HOME to choose a profile directory",
        )?;
        Ok(Self {
            dir: base.home_dir().join(".jucode"),
        })
    }

    /// The profile an environment names (`JUCODE_HOME`, else `$HOME/.jucode`), if it
    /// names one. The daemon uses it so that a session runs on its client's profile,
    /// exactly as it would in that client's own process.
    pub fn from_env(env: &std::collections::HashMap<String, String>) -> Option<Self> {
        let set = |key: &str| env.get(key).filter(|value| !value.is_empty());
        if let Some(home) = set("JUCODE_HOME") {
            return Some(Self::at(absolute(PathBuf::from(home))));
        }
        let home = set("HOME").or_else(|| set("USERPROFILE"))?;
        Some(Self::at(PathBuf::from(home).join(".jucode")))
    }

    /// Refuses a profile someone else could have written, as ssh refuses such a
    /// `~/.ssh`: its `config.toml` names the programs jucode starts (hooks, MCP
    /// servers) and its sessions are replayed to the model. The directory and the config,
    /// where they exist, must be owned by this user and not writable by group or others.
    pub fn check_private(&self) -> Result<(), String> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let me = nix::unistd::geteuid().as_raw();
            for path in [self.dir.clone(), self.config_path()] {
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                if meta.uid() != me {
                    return Err(format!(
                        "refusing the profile: {} is owned by uid {}, not by you (uid {me}); \
                         chown it, or choose another profile with JUCODE_HOME",
                        path.display(),
                        meta.uid()
                    ));
                }
                if meta.mode() & 0o022 != 0 {
                    return Err(format!(
                        "refusing the profile: {} is writable by {} (mode {:o}); \
                         `chmod go-w {}` fixes it",
                        path.display(),
                        if meta.mode() & 0o002 != 0 {
                            "everyone"
                        } else {
                            "its group"
                        },
                        meta.mode() & 0o7777,
                        path.display()
                    ));
                }
            }
        }
        Ok(())
    }

    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// The working directory of chat sessions (`jucode serve --chat`).
    pub fn chats_dir(&self) -> PathBuf {
        self.dir.join("chats")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

pub use crate::protocol::{ApprovalMode, McpServerConfig};
pub use web::{SearchBackend, WebFetchConfig, WebSearchConfig};

/// `config.toml`, as written by the user. Every key is optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `"<provider>/<model>"`.
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    pub approval_mode: Option<ApprovalMode>,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[daemon]`: settings of `jucode daemon` (read when it starts).
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// `[mcp_servers.<name>]`: the MCP servers every session starts (`docs/mcp.md`).
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// `[hooks]`: commands run at session start and before each turn (`docs/hooks.md`).
    #[serde(default)]
    pub hooks: hooks::HooksConfig,
    /// `[agents]`: subagents.
    #[serde(default)]
    pub agents: AgentsConfig,
    /// `[web_fetch]`: limits and the private-address policy of `web_fetch` (`docs/web.md`).
    #[serde(default)]
    pub web_fetch: WebFetchConfig,
    /// `[web_search]`: the search backend; without it `web_search` is not offered.
    pub web_search: Option<WebSearchConfig>,
    /// `[websocket]`: the daemon's WebSocket server for dashboards (`docs/websocket.md`).
    #[serde(default)]
    pub websocket: WebSocketConfig,
    /// `[sandbox]`: what commands a tool starts may do (`docs/security.md`).
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// `[engines.<name>]`: other agents the daemon hosts as sessions
    /// (`docs/daemon-protocol.md`, *Other engines*).
    #[serde(default)]
    pub engines: BTreeMap<String, EngineConfig>,
}

/// The kinds of other agents a session can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// Any agent speaking the Agent Client Protocol on its stdio.
    Acp,
    /// Claude Code's `claude -p --input-format stream-json`.
    ClaudeCode,
    /// `codex app-server`.
    Codex,
}

/// `[engines.<name>]`: how to start another agent, as Zed's `agent_servers` entries say it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    pub kind: EngineKind,
    /// The program (default `claude` / `codex`; required for `acp`).
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Set in the agent's environment, over the client's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A jucode provider the agent's model traffic goes to.
    pub provider: Option<String>,
    /// The agent's mode to start in (an ACP mode id).
    pub default_mode: Option<String>,
    /// ACP config options to set when a session starts, by id.
    #[serde(default)]
    pub default_config_options: BTreeMap<String, String>,
    /// How long starting the agent (`initialize` and opening its session) may take.
    pub startup_timeout_ms: Option<u64>,
    /// The engine's own TUI, which `surface terminal` runs on the same conversation
    /// (default: the engine's `command` for `claude-code` and `codex`; an `acp` engine
    /// has one only when this is set).
    pub tui: Option<String>,
    /// Its arguments, `{session}` standing for the agent's id of the conversation
    /// (default: `--resume {session}` for Claude Code, `resume {session}` for Codex).
    pub tui_args: Option<Vec<String>>,
    /// What is typed into the TUI to ask it to quit, as its user would (default:
    /// `/exit` and Enter for Claude Code, `/quit` and Enter for Codex, Ctrl-D otherwise).
    pub tui_quit: Option<String>,
    /// How long the TUI has to quit before its process group is killed (default 5000;
    /// 15000 for Claude Code).
    pub tui_grace_ms: Option<u64>,
}

/// `[sandbox]`: the mode sessions start in, extra writable places, the network.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `read-only`, `workspace-write` (the default) or `off`.
    pub mode: Option<crate::protocol::SandboxMode>,
    /// Where `workspace-write` commands may also write (absolute, `~/`, or relative to
    /// the session's working directory).
    #[serde(default)]
    pub writable_roots: Vec<String>,
    /// TCP and other sockets allowed (default false).
    #[serde(default)]
    pub network: bool,
}

/// `[sandbox] mode` when the config does not set it.
pub const DEFAULT_SANDBOX_MODE: crate::protocol::SandboxMode =
    crate::protocol::SandboxMode::WorkspaceWrite;

/// `[websocket]`: where the daemon's WebSocket server listens (nothing listens unless
/// `port` is set here or by `--server-config`) and who may use it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSocketConfig {
    pub host: Option<String>,
    /// 0 disables the server.
    pub port: Option<u16>,
    /// The environment variable holding the bearer token (default
    /// `JUCODE_WEBSOCKET_TOKEN`).
    pub token_env: Option<String>,
    /// Origins allowed besides the server's own loopback ones, e.g.
    /// `"https://dash.example"`.
    pub allowed_origins: Option<Vec<String>>,
    /// A connection whose unsent messages exceed this is cut off (default 8 MiB).
    pub max_queue_bytes: Option<usize>,
}

/// `[agents]`: how subagents may be used.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// How deep subagents may nest: 1 (the default) lets the session's agent spawn
    /// subagents that cannot spawn their own; 0 turns subagents off.
    pub max_depth: Option<u32>,
}

/// `[agents] max_depth` when the config does not set it.
pub const DEFAULT_AGENTS_MAX_DEPTH: u32 = 1;

/// `[daemon]`: how far a daemon client may fall behind before it is disconnected, and
/// how many clients it serves at once.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub max_client_lines: Option<usize>,
    pub max_client_bytes: Option<usize>,
    pub max_clients: Option<usize>,
    /// Seconds a session with no client and no work stays loaded; 0 never unloads.
    pub idle_unload_secs: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI Chat Completions, or any server compatible with it.
    Openai,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`/responses`), stateless.
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
    /// Scripted replies from a JSONL file, or the built-in demo.
    Replay,
}

/// `[providers.<name>]`. Limits and prices set here are the defaults for every model of
/// the provider; `[providers.<name>.models.<model>]` overrides them per model.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    /// Extra HTTP headers sent with every request (OpenRouter's `HTTP-Referer`, ...).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Replay script (JSONL), relative to the profile directory when not absolute.
    pub script: Option<PathBuf>,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub reasoning_efforts: Option<Vec<String>>,
    pub input_price: Option<f64>,
    pub cached_input_price: Option<f64>,
    /// Anthropic's price of writing the prompt cache.
    pub cache_write_price: Option<f64>,
    pub output_price: Option<f64>,
    /// How `reasoning_effort` is sent to an Anthropic model (see [`Thinking`]).
    pub thinking: Option<Thinking>,
    /// Offer an Anthropic model Claude's text editor tool in place of `edit_file` and
    /// `write_file` (default: the model table's word).
    pub text_editor: Option<bool>,
    /// Offer an OpenAI Responses model `apply_patch` as a freeform tool in place of
    /// `edit_file` and `write_file` (default: the model table's word: GPT-5 families).
    pub apply_patch: Option<bool>,
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
    /// Ask for `usage` in the last chunk (`stream_options.include_usage`). Some servers
    /// reject the option; turn it off for them.
    pub include_usage: Option<bool>,
    /// Transient failures are retried this many times before the turn fails.
    pub max_retries: Option<u32>,
    /// First retry delay in milliseconds; doubles with every attempt. A `retry-after`
    /// from the server replaces it. Either way the engine caps a pause at 60 s
    /// (`MAX_RETRY_DELAY` in `engine/turn/mod.rs`), so a turn never looks frozen.
    pub retry_base_delay_ms: Option<u64>,
    /// A stream that sends nothing for this many seconds is cut and counts as a
    /// transient failure.
    pub stream_idle_timeout_secs: Option<f64>,
    pub connect_timeout_secs: Option<f64>,
    /// Anthropic prompt caching: `"5m"` (the default), `"1h"` or `"off"`.
    pub cache: Option<CacheSetting>,
}

/// `cache` of an Anthropic provider: how long a cache entry lives, or no breakpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum CacheSetting {
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    OneHour,
    #[serde(rename = "off")]
    Off,
}

/// How an Anthropic model takes `reasoning_effort`: adaptive thinking with
/// `output_config.effort` (Claude 4.6 and later), a `budget_tokens` budget (older Claude
/// 4 and 3.7 models), or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    Adaptive,
    Budget,
    None,
}

impl ProviderConfig {
    /// The settings of `model` under this provider: its own table over the provider's.
    pub fn model_settings(&self, model: &str) -> ModelConfig {
        let own = self.models.get(model).cloned().unwrap_or_default();
        ModelConfig {
            context_window: own.context_window.or(self.context_window),
            max_output_tokens: own.max_output_tokens.or(self.max_output_tokens),
            reasoning_efforts: own
                .reasoning_efforts
                .or_else(|| self.reasoning_efforts.clone()),
            input_price: own.input_price.or(self.input_price),
            cached_input_price: own.cached_input_price.or(self.cached_input_price),
            cache_write_price: own.cache_write_price.or(self.cache_write_price),
            output_price: own.output_price.or(self.output_price),
            thinking: own.thinking.or(self.thinking),
            text_editor: own.text_editor.or(self.text_editor),
            apply_patch: own.apply_patch.or(self.apply_patch),
        }
    }
}

/// Per-model limits and prices (USD per million tokens).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub reasoning_efforts: Option<Vec<String>>,
    pub input_price: Option<f64>,
    pub cached_input_price: Option<f64>,
    pub cache_write_price: Option<f64>,
    pub output_price: Option<f64>,
    pub thinking: Option<Thinking>,
    pub text_editor: Option<bool>,
    pub apply_patch: Option<bool>,
}

/// Whether `url` can be a provider's `base_url`. Anything else is refused rather than
/// guessed at: `localhost:8000/v1` with `http://` assumed could as well have meant
/// `https://`, and a guess that sends an API key in clear text is not ours to make.
/// (The scheme is case-insensitive, as URLs have it.)
pub fn is_http_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    })
}

/// The outcome of reading `config.toml`: always a usable config, plus what went wrong.
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    /// Every setting that could be read; a broken one is left at its default.
    pub config: Config,
    /// One message per problem, naming the file and line, in file order.
    pub problems: Vec<String>,
    /// Providers whose table has a problem, with what is wrong (for the error of every
    /// request to them). They stay known, so the session does not fall back to another
    /// provider (for `[providers.openai]`, the built-in one) the user did not ask for.
    pub broken_providers: BTreeMap<String, String>,
    /// The file exists but could not be read as TOML (or not at all), so nothing it says
    /// is known, not even whether it names a model. `config.model` holds the model of a
    /// top-level `model = "..."` line when one could still be found
    /// ([`salvage_model`]), so the session says which model cannot be used rather than
    /// quietly running another.
    pub unreadable: bool,
}

impl LoadedConfig {
    pub fn load(path: &Path) -> Self {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(path, &text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(err) => Self {
                problems: vec![format!(
                    "cannot read config file {}: {err}; using defaults",
                    path.display()
                )],
                unreadable: true,
                ..Self::default()
            },
        }
    }

    /// Reads as much of `text` as possible. Broken TOML leaves nothing to go on (one
    /// problem, all defaults). Otherwise every key is checked on its own, so each bad
    /// key is reported, not only the first, and the good ones are kept: a typo in one
    /// setting must not silently reset all the others.
    pub fn parse(path: &Path, text: &str) -> Self {
        let mut root = match DeTable::parse(text) {
            Ok(root) => root,
            Err(err) => {
                let location = line_of(text, err.span());
                let message = err.message().trim_end();
                let config = Config {
                    model: salvage_model(text),
                    ..Config::default()
                };
                return Self {
                    config,
                    problems: vec![format!(
                        "config error in {}{location}: {message}; using defaults",
                        path.display()
                    )],
                    unreadable: true,
                    ..Self::default()
                };
            }
        };
        let mut reader = Reader {
            text,
            problems: Vec::new(),
            broken_providers: BTreeMap::new(),
        };
        let span = root.span();
        let table = root.get_mut();
        // Innermost tables first: a pruned table then passes its parent's check.
        if let Some(providers) = table.get_mut("providers")
            && let DeValue::Table(providers) = providers.get_mut()
        {
            reader.providers(providers);
        }
        if let Some(servers) = table.get_mut("mcp_servers")
            && let DeValue::Table(servers) = servers.get_mut()
        {
            reader.mcp_servers(servers);
        }
        if let Some(fetch) = table.get_mut("web_fetch") {
            let span = fetch.span();
            if let DeValue::Table(fetch) = fetch.get_mut() {
                reader.web_fetch(fetch, span);
            }
        }
        if let Some(search) = table.get_mut("web_search")
            && !reader.web_search(search)
        {
            table.remove("web_search");
        }
        reader.prune_table::<DaemonConfig>(table, "daemon");
        reader.prune_table::<hooks::HooksConfig>(table, "hooks");
        reader.prune_table::<AgentsConfig>(table, "agents");
        reader.prune_table::<SandboxConfig>(table, "sandbox");
        reader.prune_table::<WebSocketConfig>(table, "websocket");
        let config = reader
            .prune::<Config>("", table, span, &[], Scope::Settings)
            .unwrap_or_default();
        let mut problems = reader.problems;
        // File order reads best, whatever order the checks ran in.
        problems.sort_by_key(|(at, _)| *at);
        Self {
            config,
            problems: problems
                .into_iter()
                .map(|(at, what)| {
                    let location = line_of(text, at.map(|at| at..at));
                    format!("config error in {}{location}: {what}", path.display())
                })
                .collect(),
            broken_providers: reader
                .broken_providers
                .into_iter()
                .filter_map(|(name, mut problems)| {
                    // The first in the file; the startup errors list them all.
                    problems.sort_by_key(|(at, _)| *at);
                    let (_, first) = problems.first()?;
                    let summary = match problems.len() - 1 {
                        0 => first.clone(),
                        more => format!("{first} (and {more} more)"),
                    };
                    Some((name, summary))
                })
                .collect(),
            unreadable: false,
        }
    }
}

/// The value of a top-level `model = "..."` line of a file that is not valid TOML as a
/// whole: the one setting worth finding, since without it a broken file reads as "no
/// model configured". Only lines before the first table header count (a `model` key
/// under `[providers.x.models]` or the like is something else), and only a plain
/// double- or single-quoted value.
pub fn salvage_model(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with('['))
        .find_map(|line| {
            let value = line.strip_prefix("model")?.trim_start().strip_prefix('=')?;
            let value = value.trim();
            let quote = value.chars().next().filter(|c| *c == '"' || *c == '\'')?;
            let rest = &value[1..];
            let end = rest.find(quote)?;
            let model = rest[..end].trim();
            (!model.is_empty() && !model.contains('\\')).then(|| model.to_owned())
        })
}

/// Where a problem lies, and so what its consequence is.
#[derive(Clone, Copy)]
enum Scope<'a> {
    /// A top-level or `[daemon]` setting: it falls back to its default.
    Settings,
    /// Anything under `[providers.<name>]`: the provider cannot be used, since guessing
    /// what a half-read provider table meant (say, the default `base_url` in place of a
    /// broken one) could send the conversation and its key to another server.
    Provider(&'a str),
    /// Anything under `[mcp_servers.<name>]`: the server is not started (see
    /// [`mcp`]).
    McpServer(&'a str),
    /// Anything under `[web_search]`: the tool is not offered (see [`web`]).
    WebSearch,
}

/// Collects the problems of one file.
struct Reader<'t> {
    text: &'t str,
    /// Byte offset (for the line) and message, without the file.
    problems: Vec<(Option<usize>, String)>,
    /// The problems of each broken provider, as in `problems`.
    broken_providers: BTreeMap<String, Vec<(Option<usize>, String)>>,
}

impl<'t> Reader<'t> {
    /// Records a problem; `unknown` says it is a key that does not exist at all.
    fn report(
        &mut self,
        span: Option<Range<usize>>,
        what: String,
        unknown: bool,
        scope: Scope<'_>,
    ) {
        let at = span.map(|span| span.start.min(self.text.len()));
        let consequence = match scope {
            Scope::Settings if unknown => "ignored".to_owned(),
            Scope::Settings => "using the default".to_owned(),
            Scope::Provider(name) => {
                self.broken_providers
                    .entry(name.to_owned())
                    .or_default()
                    .push((at, what.clone()));
                format!("provider {name:?} cannot be used until this is fixed")
            }
            Scope::McpServer(name) => {
                format!("MCP server {name:?} is not started until this is fixed")
            }
            Scope::WebSearch => "web_search is not offered until this is fixed".to_owned(),
        };
        self.problems.push((at, format!("{what}; {consequence}")));
    }

    /// `[providers]`: each provider on its own, its models first. A provider whose own
    /// table cannot be read at all (no `kind`, say) is dropped from the config but stays
    /// in [`LoadedConfig::broken_providers`].
    fn providers(&mut self, providers: &mut DeTable<'_>) {
        let mut dropped = Vec::new();
        for (name, provider) in providers.iter_mut() {
            let name: &str = name.get_ref();
            let path = key_path("providers", name);
            let span = provider.span();
            let DeValue::Table(table) = provider.get_mut() else {
                let what = format!(
                    "{path}: expected a table, found {}",
                    provider.get_ref().type_str()
                );
                self.report(Some(span), what, false, Scope::Provider(name));
                dropped.push(name.to_owned());
                continue;
            };
            // A model that is not a table is left to the provider's check of `models`.
            if let Some(models) = table.get_mut("models")
                && let DeValue::Table(models) = models.get_mut()
            {
                for (model, settings) in models.iter_mut() {
                    let model_path = key_path(&key_path(&path, "models"), model.get_ref());
                    let settings_span = settings.span();
                    if let DeValue::Table(settings) = settings.get_mut() {
                        self.prune::<ModelConfig>(
                            &model_path,
                            settings,
                            settings_span,
                            &[],
                            Scope::Provider(name),
                        );
                    }
                }
            }
            // `kind` is required, so every other key is tried beside a stand-in `kind`;
            // the real one is checked when the rest is read.
            let read = self.prune::<ProviderConfig>(
                &path,
                table,
                span,
                &[("kind", "openai")],
                Scope::Provider(name),
            );
            let Some(read) = read else {
                dropped.push(name.to_owned());
                continue;
            };
            if matches!(
                read.kind,
                ProviderKind::Openai | ProviderKind::Anthropic | ProviderKind::OpenaiResponses
            ) && let Some(url) = read.base_url.as_deref()
                && !is_http_url(url)
            {
                let at = table.get("base_url").map(Spanned::span);
                let what = format!(
                    "{} must start with http:// or https:// (got {url:?})",
                    key_path(&path, "base_url")
                );
                self.report(at, what, false, Scope::Provider(name));
            }
        }
        for name in dropped {
            providers.remove(name.as_str());
        }
    }

    /// Prunes the settings table `name` of the top level, if there is one (see
    /// [`Self::prune`]).
    fn prune_table<T: DeserializeOwned>(&mut self, table: &mut DeTable<'_>, name: &str) {
        if let Some(value) = table.get_mut(name) {
            let span = value.span();
            if let DeValue::Table(inner) = value.get_mut() {
                self.prune::<T>(name, inner, span, &[], Scope::Settings);
            }
        }
    }

    /// Drops (and reports) every key of `table` that `T` rejects, each tried on its own
    /// beside `stand_ins` (values for required keys, so that a probe is complete), then
    /// reads `T` from what is left. Trying keys one by one is what lets one bad key
    /// neither hide the problems of the others nor take their values down with it.
    fn prune<T: DeserializeOwned>(
        &mut self,
        path: &str,
        table: &mut DeTable<'_>,
        span: Range<usize>,
        stand_ins: &[(&'static str, &'static str)],
        scope: Scope<'_>,
    ) -> Option<T> {
        let mut rejected = Vec::new();
        for (spanned_key, value) in table.iter() {
            let key: &str = spanned_key.get_ref();
            if stand_ins.iter().any(|(name, _)| *name == key) {
                continue;
            }
            let probe: DeTable<'_> = stand_ins
                .iter()
                .map(|(name, value)| {
                    let value = DeValue::String(Cow::Borrowed(*value));
                    (spanned_str(name), Spanned::new(0..0, value))
                })
                .chain([(spanned_key.clone(), value.clone())])
                .collect();
            if let Err(err) = read::<T>(probe, span.clone()) {
                let unknown = err.message().starts_with("unknown field");
                let what = describe(path, key, unknown, &err);
                let at = err.span().or_else(|| Some(value.span()));
                self.report(at, what, unknown, scope);
                rejected.push(key.to_owned());
            }
        }
        for key in rejected {
            table.remove(key.as_str());
        }
        // What is left passed key by key, so only the stand-ins' keys can fail here.
        match read::<T>(table.clone(), span.clone()) {
            Ok(value) => Some(value),
            Err(err) => {
                let message = err.message().trim_end();
                let what = if path.is_empty() {
                    message.to_owned()
                } else {
                    format!("{path}: {message}")
                };
                self.report(err.span().or(Some(span)), what, false, scope);
                None
            }
        }
    }
}

fn read<T: DeserializeOwned>(table: DeTable<'_>, span: Range<usize>) -> Result<T, toml::de::Error> {
    T::deserialize(ValueDeserializer::from(Spanned::new(
        span,
        DeValue::Table(table),
    )))
}

fn spanned_str<'i>(text: &'i str) -> Spanned<DeString<'i>> {
    Spanned::new(0..0, Cow::Borrowed(text))
}

/// What is wrong with `key` under `path`. serde names an unknown key itself, so it is
/// placed under its table; any other message is about the key's value.
fn describe(path: &str, key: &str, unknown: bool, err: &toml::de::Error) -> String {
    let message = err.message().trim_end();
    let at = if unknown {
        path.to_owned()
    } else {
        key_path(path, key)
    };
    if at.is_empty() {
        message.to_owned()
    } else {
        format!("{at}: {message}")
    }
}

/// `parent.key`, quoting `key` the way TOML needs when it is not a bare key.
fn key_path(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// ` line N` for a byte span of `text`, or nothing when there is no span.
fn line_of(text: &str, span: Option<Range<usize>>) -> String {
    span.map(|span| {
        let before = &text.as_bytes()[..span.start.min(text.len())];
        let line = before.iter().filter(|&&byte| byte == b'\n').count() + 1;
        format!(" line {line}")
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests;
