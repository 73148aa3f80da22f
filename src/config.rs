//! The profile directory and `config.toml`.
//!
//! Loading never fails: a missing file means defaults, and a broken one yields
//! defaults plus a problem message naming the file and line, which the engine reports as
//! an `error` event in its startup batch. A front-end must always get a working session.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

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

pub use crate::protocol::ApprovalMode;

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
}

/// How far a daemon client may fall behind before it is disconnected.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub max_client_lines: Option<usize>,
    pub max_client_bytes: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI Chat Completions, or any server compatible with it.
    Openai,
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
    pub output_price: Option<f64>,
    #[serde(default)]
    pub models: BTreeMap<String, ModelConfig>,
    /// Ask for `usage` in the last chunk (`stream_options.include_usage`). Some servers
    /// reject the option; turn it off for them.
    pub include_usage: Option<bool>,
    /// Transient failures are retried this many times before the turn fails.
    pub max_retries: Option<u32>,
    /// First retry delay in milliseconds; doubles with every attempt (capped at 30 s)
    /// unless the server sends `retry-after`.
    pub retry_base_delay_ms: Option<u64>,
    /// A stream that sends nothing for this many seconds is cut and counts as a
    /// transient failure.
    pub stream_idle_timeout_secs: Option<f64>,
    pub connect_timeout_secs: Option<f64>,
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
            output_price: own.output_price.or(self.output_price),
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
    pub output_price: Option<f64>,
}

/// The outcome of reading `config.toml`: always a usable config, plus what went wrong.
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    pub config: Config,
    pub problems: Vec<String>,
}

impl LoadedConfig {
    pub fn load(path: &Path) -> Self {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(path, &text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Self::default(),
            Err(err) => Self {
                config: Config::default(),
                problems: vec![format!(
                    "cannot read config file {}: {err}; using defaults",
                    path.display()
                )],
            },
        }
    }

    pub fn parse(path: &Path, text: &str) -> Self {
        match toml::from_str::<Config>(text) {
            Ok(config) => Self {
                config,
                problems: Vec::new(),
            },
            Err(err) => {
                let location = err
                    .span()
                    .map(|span| {
                        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                        format!(" line {line}")
                    })
                    .unwrap_or_default();
                let message = err.message().trim_end();
                Self {
                    config: Config::default(),
                    problems: vec![format!(
                        "config error in {}{location}: {message}; using defaults",
                        path.display()
                    )],
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_example_parses() {
        let text = r#"
model = "mock/mock-1"
reasoning_effort = "medium"
approval_mode = "auto-edit"
[providers.mock]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"
api_key = "k"
context_window = 200000
max_output_tokens = 32000
reasoning_efforts = ["low", "medium", "high"]
input_price = 1.0
[providers.mock.models.big]
context_window = 1000000
output_price = 8.0
[providers.demo]
kind = "replay"
script = "replies.jsonl"
"#;
        let loaded = LoadedConfig::parse(Path::new("/p/config.toml"), text);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let config = loaded.config;
        assert_eq!(config.model.as_deref(), Some("mock/mock-1"));
        assert_eq!(config.approval_mode, Some(ApprovalMode::AutoEdit));
        let mock = &config.providers["mock"];
        assert_eq!(mock.kind, ProviderKind::Openai);
        assert_eq!(mock.context_window, Some(200_000));
        let big = mock.model_settings("big");
        assert_eq!(big.context_window, Some(1_000_000));
        assert_eq!(big.input_price, Some(1.0), "inherited from the provider");
        assert_eq!(big.output_price, Some(8.0));
        assert_eq!(mock.model_settings("other").context_window, Some(200_000));
        assert_eq!(config.providers["demo"].kind, ProviderKind::Replay);
    }

    #[test]
    fn broken_file_names_file_and_line() {
        let text = "model = \"a/b\"\n\napproval_mode = \"sometimes\"\n";
        let loaded = LoadedConfig::parse(Path::new("/p/config.toml"), text);
        assert_eq!(loaded.problems.len(), 1);
        let problem = &loaded.problems[0];
        assert!(
            problem.starts_with("config error in /p/config.toml line 3: "),
            "{problem}"
        );
        assert!(problem.contains("sometimes"), "{problem}");
        assert!(
            loaded.config.model.is_none(),
            "a broken file means defaults"
        );
    }

    #[test]
    fn syntax_error_and_unknown_key() {
        let loaded = LoadedConfig::parse(Path::new("c.toml"), "model = \n");
        assert!(
            loaded.problems[0].contains("line 1"),
            "{:?}",
            loaded.problems
        );
        let loaded = LoadedConfig::parse(Path::new("c.toml"), "a = 1\nmodle = \"x\"\n");
        assert!(
            loaded.problems[0].contains("line 1"),
            "{:?}",
            loaded.problems
        );
    }

    #[test]
    fn missing_file_is_defaults_without_problems() {
        let loaded = LoadedConfig::load(Path::new("/definitely/not/here/config.toml"));
        assert!(loaded.problems.is_empty());
        assert!(loaded.config.model.is_none());
    }

    #[test]
    fn approval_modes_round_trip() {
        for mode in ApprovalMode::ALL {
            assert_eq!(ApprovalMode::parse(mode.as_str()), Some(mode));
        }
        assert_eq!(ApprovalMode::parse("yolo"), None);
    }
}
