//! Model providers: implementations of [`crate::engine::ModelClient`], and the
//! [`Catalog`] that turns `provider/model` names into ready clients.
//!
//! Four kinds exist: [`OpenAiClient`] speaks OpenAI Chat Completions, which nearly every
//! server speaks (OpenRouter, vLLM, Ollama, llama.cpp, DeepSeek); [`ResponsesClient`]
//! OpenAI Responses (the built-in `openai`); [`AnthropicClient`] Anthropic Messages;
//! [`ReplayClient`] plays scripted replies, so a session works offline (the built-in
//! demo) and tests get a deterministic model.
//!
//! Resolving a name never touches the network or the disk: the engine resolves on every
//! `/model` switch and at startup, and a session must start even when the provider is
//! down or misconfigured. Problems surface instead as `model_status.state`
//! (`missing_api_key`) and as the first request's error, worded so the user can fix them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{self, BoxFuture, FutureExt};

use crate::config::{CacheSetting, Config, ProviderConfig, ProviderKind, Thinking};
use crate::engine::{
    ChatRequest, ModelCatalog, ModelClient, ModelError, ModelInfo, ModelStream, ResolvedModel,
    RetryPolicy,
};
use crate::protocol::ModelState;

mod anthropic;
mod openai;
mod replay;
mod responses;
pub mod sse;
mod stream;

pub use anthropic::AnthropicClient;
/// A Messages reply from its body's bytes, for the fuzz targets.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use anthropic::reply as messages_reply;
pub use openai::OpenAiClient;
/// A Chat Completions reply from its body's bytes, for the fuzz targets (`crate::fuzzing`).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use openai::sse_reply;
pub use replay::ReplayClient;
pub use responses::ResponsesClient;
/// A Responses reply from its body's bytes, for the fuzz targets.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use responses::reply as responses_reply;

const OPENAI: &str = "openai";
const OPENAI_KEY_ENV: &str = "OPENAI_API_KEY";
const OPENAI_BASE_URL_ENV: &str = "OPENAI_BASE_URL";
const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The model a session starts on when only `OPENAI_API_KEY` is set.
const DEFAULT_OPENAI_MODEL: &str = "openai/gpt-5.5";
const ANTHROPIC: &str = "anthropic";
const ANTHROPIC_KEY_ENV: &str = "ANTHROPIC_API_KEY";
const ANTHROPIC_BASE_URL_ENV: &str = "ANTHROPIC_BASE_URL";
const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The model a session starts on when only `ANTHROPIC_API_KEY` is set.
const DEFAULT_ANTHROPIC_MODEL: &str = "anthropic/claude-sonnet-4-5";
const DEMO_MODEL: &str = "replay/demo";

const DEFAULT_CONTEXT_WINDOW: u64 = 200_000;
const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 32_000;

/// The configured providers plus the built-in `openai` and `replay`.
pub struct Catalog {
    config: Config,
    providers: BTreeMap<String, Provider>,
    profile_dir: PathBuf,
    config_path: PathBuf,
    /// The session's environment (a daemon session uses its client's, not ours).
    env: Arc<HashMap<String, String>>,
    /// `config.toml` had problems, so "nothing is configured" may not be true.
    config_broken: bool,
    /// `config.toml` could not be read at all, so even a model it names (salvaged into
    /// `config.model`) has no provider settings to go with it.
    config_unreadable: bool,
}

struct Provider {
    config: ProviderConfig,
    /// Defined by jucode rather than by `[providers.<name>]`.
    builtin: bool,
    /// Why every request must fail: its table in `config.toml` has a problem.
    broken: Option<String>,
}

impl Catalog {
    pub fn new(
        config: Config,
        profile_dir: PathBuf,
        config_path: PathBuf,
        env: Arc<HashMap<String, String>>,
    ) -> Self {
        let mut providers: BTreeMap<String, Provider> = config
            .providers
            .iter()
            .map(|(name, config)| {
                let provider = Provider {
                    config: config.clone(),
                    builtin: false,
                    broken: None,
                };
                (name.clone(), provider)
            })
            .collect();
        let base_url = env
            .get(OPENAI_BASE_URL_ENV)
            .filter(|url| !url.is_empty())
            .map_or(DEFAULT_OPENAI_BASE_URL, String::as_str);
        // The built-in `openai` speaks Responses; `kind = "openai"` tables stay on Chat
        // Completions.
        let mut openai = bare_provider(ProviderKind::OpenaiResponses);
        openai.base_url = Some(base_url.to_owned());
        openai.api_key_env = Some(OPENAI_KEY_ENV.to_owned());
        let anthropic_url = env
            .get(ANTHROPIC_BASE_URL_ENV)
            .filter(|url| !url.is_empty())
            .map_or(DEFAULT_ANTHROPIC_BASE_URL, String::as_str);
        let mut anthropic = bare_provider(ProviderKind::Anthropic);
        anthropic.base_url = Some(anthropic_url.to_owned());
        anthropic.api_key_env = Some(ANTHROPIC_KEY_ENV.to_owned());
        for (name, config) in [
            (OPENAI, openai),
            (ANTHROPIC, anthropic),
            ("replay", bare_provider(ProviderKind::Replay)),
        ] {
            providers.entry(name.to_owned()).or_insert(Provider {
                config,
                builtin: true,
                broken: None,
            });
        }
        Self {
            config,
            providers,
            profile_dir,
            config_path,
            env,
            config_broken: false,
            config_unreadable: false,
        }
    }

    /// Takes in what went wrong reading `config.toml` ([`crate::config::LoadedConfig`]):
    /// whether anything did, and the providers whose tables are broken. Those stay
    /// resolvable but fail every request, naming the problem: falling back to another
    /// provider, or to a guess at what the table meant, would send the conversation
    /// somewhere the user did not choose.
    pub fn config_problems(
        mut self,
        any: bool,
        unreadable: bool,
        broken_providers: &BTreeMap<String, String>,
    ) -> Self {
        self.config_broken = any;
        self.config_unreadable = unreadable;
        for (name, problem) in broken_providers {
            let provider = self.providers.entry(name.clone()).or_insert(Provider {
                config: bare_provider(ProviderKind::Openai),
                builtin: false,
                broken: None,
            });
            if provider.builtin {
                // A broken `[providers.openai]` must not quietly become the built-in one.
                provider.config = bare_provider(ProviderKind::Openai);
                provider.builtin = false;
            }
            provider.broken = Some(problem.clone());
        }
        self
    }

    /// Splits `provider/model` at the first `/` (model names may contain more), or
    /// pairs a bare model name with `current_provider`.
    fn lookup<'a>(
        &'a self,
        name: &'a str,
        current_provider: Option<&'a str>,
    ) -> Result<(&'a str, &'a Provider, &'a str), String> {
        let name = name.trim();
        let (provider_name, model) = match name.split_once('/') {
            Some(pair) => pair,
            None => {
                let provider = current_provider.ok_or_else(|| {
                    format!("model {name:?} names no provider: write it as \"<provider>/{name}\"")
                })?;
                (provider, name)
            }
        };
        if model.is_empty() {
            return Err(format!(
                "no model name in {name:?}: write it as \"<provider>/<model>\""
            ));
        }
        let provider = self.providers.get(provider_name).ok_or_else(|| {
            let hint = did_you_mean(provider_name, self.providers.keys())
                .map(|near| format!(" (did you mean `{near}`?)"))
                .unwrap_or_default();
            format!(
                "unknown provider {provider_name:?} in model {name:?}{hint}: add [providers.{provider_name}] to {}",
                self.config_path.display()
            )
        })?;
        Ok((provider_name, provider, model))
    }

    fn info(&self, provider: &Provider, model: &str) -> ModelInfo {
        let mut settings = provider.config.model_settings(model);
        let anthropic = provider.config.kind == ProviderKind::Anthropic;
        if anthropic && let Some(known) = claude_defaults(model) {
            // Cache writes cost 1.25 times the input price for 5 minutes, twice for an hour.
            let write = if provider.config.cache == Some(CacheSetting::OneHour) {
                2.0
            } else {
                1.25
            };
            settings.context_window = settings.context_window.or(Some(known.context_window));
            settings.max_output_tokens = settings.max_output_tokens.or(Some(known.max_output));
            settings.input_price = settings.input_price.or(Some(known.input));
            settings.cached_input_price = settings.cached_input_price.or(Some(known.input / 10.0));
            settings.cache_write_price = settings.cache_write_price.or(Some(known.input * write));
            settings.output_price = settings.output_price.or(Some(known.output));
        }
        let openai = matches!(
            provider.config.kind,
            ProviderKind::Openai | ProviderKind::OpenaiResponses
        );
        if openai && let Some(known) = gpt_defaults(model) {
            settings.context_window = settings.context_window.or(Some(known.context_window));
            settings.max_output_tokens = settings.max_output_tokens.or(Some(known.max_output));
            settings.input_price = settings.input_price.or(Some(known.input));
            settings.cached_input_price = settings.cached_input_price.or(Some(known.input / 10.0));
            settings.output_price = settings.output_price.or(Some(known.output));
        }
        let efforts_by_default: &[&str] = if anthropic {
            match self.thinking(provider, model) {
                Thinking::Adaptive => &["low", "medium", "high", "max"],
                Thinking::Budget => &["low", "medium", "high"],
                Thinking::None => &[],
            }
        } else if provider.config.kind == ProviderKind::Replay || provider.builtin {
            &["low", "medium", "high"]
        } else {
            &[]
        };
        let reasoning_efforts = settings
            .reasoning_efforts
            .unwrap_or_else(|| efforts_by_default.iter().map(|e| (*e).to_owned()).collect());
        ModelInfo {
            context_window: settings.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW),
            max_output_tokens: settings
                .max_output_tokens
                .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
            reasoning_efforts,
            input_price: settings.input_price,
            cached_input_price: settings.cached_input_price,
            cache_write_price: settings.cache_write_price,
            output_price: settings.output_price,
        }
    }

    /// How an Anthropic model takes an effort: the config's word, else the table's, else
    /// not at all (a model we do not know may not think).
    fn thinking(&self, provider: &Provider, model: &str) -> Thinking {
        provider
            .config
            .model_settings(model)
            .thinking
            .or_else(|| claude_defaults(model).map(|known| known.thinking))
            .unwrap_or(Thinking::None)
    }

    /// The client of `provider`, and its `model_status.state`.
    fn client(
        &self,
        name: &str,
        provider: &Provider,
        model: &str,
    ) -> (Arc<dyn ModelClient>, ModelState) {
        let config = &provider.config;
        if let Some(problem) = &provider.broken {
            let message = format!(
                "provider {name:?} cannot be used until its table in {} is fixed: {problem}",
                self.config_path.display()
            );
            // The startup `error` events already named every problem; the state tells a
            // status bar why requests will fail.
            return (Arc::new(Unusable(message)), ModelState::InvalidConfig);
        }
        match config.kind {
            ProviderKind::Replay => {
                let client = match &config.script {
                    // `join` keeps an absolute script path as it is.
                    Some(script) => ReplayClient::from_script(self.profile_dir.join(script)),
                    None => ReplayClient::demo(),
                };
                (Arc::new(client), ModelState::Ready)
            }
            ProviderKind::Openai | ProviderKind::Anthropic | ProviderKind::OpenaiResponses => {
                let anthropic = config.kind == ProviderKind::Anthropic;
                let (default_env, default_url, url_env) = if anthropic {
                    (
                        ANTHROPIC_KEY_ENV,
                        DEFAULT_ANTHROPIC_BASE_URL,
                        ANTHROPIC_BASE_URL_ENV,
                    )
                } else {
                    (OPENAI_KEY_ENV, DEFAULT_OPENAI_BASE_URL, OPENAI_BASE_URL_ENV)
                };
                let key_env = config.api_key_env.as_deref().filter(|env| !env.is_empty());
                let key = config
                    .api_key
                    .clone()
                    .filter(|key| !key.is_empty())
                    .or_else(|| key_env.and_then(|env| self.env.get(env)).cloned())
                    .filter(|key| !key.is_empty());
                let needs_key = provider.builtin || key_env.is_some();
                let base_url = config.base_url.as_deref().unwrap_or(default_url);
                // `LoadedConfig` already marks a config provider with such a URL broken;
                // this also covers `OPENAI_BASE_URL`, which only the built-in one reads.
                if !crate::config::is_http_url(base_url) {
                    let message = if provider.builtin {
                        format!(
                            "provider {name:?} cannot be used: {url_env} must start \
                             with http:// or https:// (got {base_url:?})"
                        )
                    } else {
                        format!(
                            "provider {name:?} cannot be used until its table in {} is fixed: \
                             providers.{name}.base_url must start with http:// or https:// \
                             (got {base_url:?})",
                            self.config_path.display()
                        )
                    };
                    return (Arc::new(Unusable(message)), ModelState::InvalidConfig);
                }
                let missing = (needs_key && key.is_none()).then(|| {
                    format!(
                        "no API key for provider {name:?}: set {} or api_key / api_key_env in [providers.{name}] of {}",
                        key_env.unwrap_or(default_env),
                        self.config_path.display()
                    )
                });
                let timeout = config.connect_timeout_secs.and_then(positive_secs);
                let client: Arc<dyn ModelClient> = if anthropic {
                    let max_tokens = self.info(provider, model).max_output_tokens;
                    let mut client = AnthropicClient::new(name, base_url)
                        .headers(&config.headers)
                        .max_tokens(max_tokens)
                        .cache(config.cache.unwrap_or(CacheSetting::FiveMinutes))
                        .thinking(self.thinking(provider, model))
                        .text_editor(
                            config
                                .model_settings(model)
                                .text_editor
                                .or_else(|| claude_defaults(model).map(|known| known.text_editor))
                                .unwrap_or(false),
                        );
                    if let Some(timeout) = timeout {
                        client = client.connect_timeout(timeout);
                    }
                    match &missing {
                        Some(message) => Arc::new(client.unusable(message.clone())),
                        None => Arc::new(client.api_key(key)),
                    }
                } else if config.kind == ProviderKind::OpenaiResponses {
                    let mut client = ResponsesClient::new(name, base_url)
                        .headers(&config.headers)
                        .apply_patch(
                            config
                                .model_settings(model)
                                .apply_patch
                                .unwrap_or_else(|| gpt_defaults(model).is_some()),
                        );
                    if let Some(timeout) = timeout {
                        client = client.connect_timeout(timeout);
                    }
                    match &missing {
                        Some(message) => Arc::new(client.unusable(message.clone())),
                        None => Arc::new(client.api_key(key)),
                    }
                } else {
                    let mut client = OpenAiClient::new(name, base_url)
                        .headers(&config.headers)
                        .include_usage(config.include_usage.unwrap_or(true));
                    if let Some(timeout) = timeout {
                        client = client.connect_timeout(timeout);
                    }
                    match &missing {
                        Some(message) => Arc::new(client.unusable(message.clone())),
                        None => Arc::new(client.api_key(key)),
                    }
                };
                let state = if missing.is_some() {
                    ModelState::MissingApiKey
                } else {
                    ModelState::Ready
                };
                (client, state)
            }
        }
    }

    /// The name a new session starts on, and whether it is the fallback demo.
    fn default_name(&self) -> (&str, bool) {
        if let Some(model) = &self.config.model {
            return (model, false);
        }
        if self
            .env
            .get(OPENAI_KEY_ENV)
            .is_some_and(|key| !key.is_empty())
        {
            return (DEFAULT_OPENAI_MODEL, false);
        }
        if self
            .env
            .get(ANTHROPIC_KEY_ENV)
            .is_some_and(|key| !key.is_empty())
        {
            return (DEFAULT_ANTHROPIC_MODEL, false);
        }
        (DEMO_MODEL, true)
    }
}

impl ModelCatalog for Catalog {
    fn default_model(&self) -> Result<ResolvedModel, String> {
        let (name, is_demo) = self.default_name();
        if self.config_unreadable && !is_demo {
            return Err(format!(
                "model {name:?} cannot be used: the config file {} that names it cannot be read \
                 (see the error above), so its provider settings are unknown; fix the file",
                self.config_path.display()
            ));
        }
        let mut resolved = self.resolve(name, None)?;
        if is_demo && self.config_broken {
            // The user may well have configured a model: the file is what failed.
            resolved.notice = Some(format!(
                "The config file {} could not be read completely (see the errors above), so \
                 this session runs on jucode's offline replay demo until it is fixed: its \
                 replies are scripted, not written by a model.",
                self.config_path.display()
            ));
        } else if is_demo {
            resolved.notice = Some(format!(
                "No model is configured, so this is jucode's offline replay demo: its replies \
                 are scripted, not written by a model. To use a real model, set \
                 {OPENAI_KEY_ENV}, or set `model = \"<provider>/<model>\"` and add a \
                 [providers.<name>] table in {} (see docs/configuration.md).",
                self.config_path.display()
            ));
        }
        Ok(resolved)
    }

    fn resolve(&self, name: &str, current_provider: Option<&str>) -> Result<ResolvedModel, String> {
        let (provider_name, provider, model) = self.lookup(name, current_provider)?;
        let (client, state) = self.client(provider_name, provider, model);
        Ok(ResolvedModel {
            provider: provider_name.to_owned(),
            model: model.to_owned(),
            info: self.info(provider, model),
            client,
            retry: retry_policy(&provider.config),
            state,
            notice: None,
            context_from_usage: matches!(
                provider.config.kind,
                ProviderKind::Anthropic | ProviderKind::OpenaiResponses
            ),
        })
    }

    fn unusable(&self, why: &str) -> ResolvedModel {
        let name = self.default_name().0;
        let (provider, model) = name.split_once('/').unwrap_or(("", name));
        ResolvedModel {
            provider: provider.to_owned(),
            model: model.to_owned(),
            info: ModelInfo {
                context_window: DEFAULT_CONTEXT_WINDOW,
                max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
                reasoning_efforts: Vec::new(),
                input_price: None,
                cached_input_price: None,
                cache_write_price: None,
                output_price: None,
            },
            client: Arc::new(Unusable(why.to_owned())),
            retry: RetryPolicy::default(),
            state: ModelState::InvalidConfig,
            notice: None,
            context_from_usage: false,
        }
    }

    fn list(&self) -> Vec<(String, ModelInfo)> {
        let mut names: BTreeSet<String> = self
            .providers
            .iter()
            .flat_map(|(provider, p)| {
                p.config
                    .models
                    .keys()
                    .map(move |model| format!("{provider}/{model}"))
            })
            .collect();
        names.insert(DEMO_MODEL.to_owned());
        // The configured model, or the one a session would start on without one.
        names.insert(self.default_name().0.to_owned());
        names
            .into_iter()
            .filter_map(|name| {
                let (_, provider, model) = self.lookup(&name, None).ok()?;
                let info = self.info(provider, model);
                Some((name, info))
            })
            .collect()
    }
}

/// The known name closest to `name`, when it is close enough to be a slip of the
/// keyboard (`loacl` for `local`) rather than another name altogether.
fn did_you_mean<'a>(name: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a str> {
    known
        .map(|candidate| (strsim::damerau_levenshtein(name, candidate), candidate))
        .filter(|(distance, candidate)| *distance > 0 && *distance <= (candidate.len() / 3).max(1))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate.as_str())
}

/// The client of a provider that cannot be used: every request fails at once.
struct Unusable(String);

impl ModelClient for Unusable {
    fn stream(
        &self,
        _request: &ChatRequest,
    ) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        future::ready(Err(ModelError::fatal(self.0.clone()))).boxed()
    }
}

fn retry_policy(config: &ProviderConfig) -> RetryPolicy {
    let defaults = RetryPolicy::default();
    RetryPolicy {
        max_retries: config.max_retries.unwrap_or(defaults.max_retries),
        base_delay: config
            .retry_base_delay_ms
            .map_or(defaults.base_delay, Duration::from_millis),
        idle_timeout: config
            .stream_idle_timeout_secs
            .and_then(positive_secs)
            .unwrap_or(defaults.idle_timeout),
    }
}

/// Limits, list prices (USD per million tokens) and thinking of a current Claude model.
struct ClaudeModel {
    context_window: u64,
    max_output: u64,
    input: f64,
    output: f64,
    thinking: Thinking,
    /// Trained on a text editor tool (Claude 3.7, 4 and later).
    text_editor: bool,
}

/// The built-in table, matched on the family prefix so dated snapshots
/// (`claude-sonnet-4-5-20250929`) find their family (more specific prefixes first).
/// Config overrides every field. Cache reads cost a tenth of the input price.
fn claude_defaults(model: &str) -> Option<ClaudeModel> {
    use Thinking::{Adaptive, Budget};
    let table: [(&str, u64, f64, f64, Thinking); 8] = [
        ("claude-opus-4-6", 64_000, 5.0, 25.0, Adaptive),
        ("claude-sonnet-4-6", 64_000, 3.0, 15.0, Adaptive),
        ("claude-opus-4-5", 64_000, 5.0, 25.0, Budget),
        ("claude-opus-4", 32_000, 15.0, 75.0, Budget),
        ("claude-sonnet-4", 64_000, 3.0, 15.0, Budget),
        ("claude-haiku-4-5", 64_000, 1.0, 5.0, Budget),
        ("claude-3-7-sonnet", 64_000, 3.0, 15.0, Budget),
        ("claude-3-5-haiku", 8_192, 0.8, 4.0, Thinking::None),
    ];
    table
        .iter()
        .find(|(prefix, ..)| model.starts_with(prefix))
        .map(
            |&(prefix, max_output, input, output, thinking)| ClaudeModel {
                context_window: 200_000,
                max_output,
                input,
                output,
                thinking,
                // 3.7 takes the editor's earlier version (`TextEditor::of`).
                text_editor: prefix != "claude-3-5-haiku",
            },
        )
}

/// Limits and list prices (USD per million tokens) of a GPT-5 model.
struct GptModel {
    context_window: u64,
    max_output: u64,
    input: f64,
    output: f64,
}

/// The built-in table of the GPT-5 families (all trained on `apply_patch`), matched on the whole name or the name and a
/// dated suffix (`gpt-5-2025-08-07`), so `gpt-5.5` is not taken for `gpt-5`. The context
/// window is the input limit (272k of the 400k, the rest being the output's); cached
/// input costs a tenth of the input price. Config overrides every field.
fn gpt_defaults(model: &str) -> Option<GptModel> {
    let table: [(&str, f64, f64); 9] = [
        ("gpt-5.2-codex", 1.75, 14.0),
        ("gpt-5.2", 1.75, 14.0),
        ("gpt-5.1-codex-mini", 0.25, 2.0),
        ("gpt-5.1-codex", 1.25, 10.0),
        ("gpt-5.1", 1.25, 10.0),
        ("gpt-5-codex", 1.25, 10.0),
        ("gpt-5-mini", 0.25, 2.0),
        ("gpt-5-nano", 0.05, 0.4),
        ("gpt-5", 1.25, 10.0),
    ];
    table
        .iter()
        .find(|(family, ..)| {
            model
                .strip_prefix(family)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
        })
        .map(|&(_, input, output)| GptModel {
            context_window: 272_000,
            max_output: 128_000,
            input,
            output,
        })
}

/// A positive, finite number of seconds; anything else means "use the default".
fn positive_secs(secs: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|duration| !duration.is_zero())
}

fn bare_provider(kind: ProviderKind) -> ProviderConfig {
    ProviderConfig {
        kind,
        base_url: None,
        api_key: None,
        api_key_env: None,
        headers: BTreeMap::new(),
        script: None,
        context_window: None,
        max_output_tokens: None,
        reasoning_efforts: None,
        input_price: None,
        cached_input_price: None,
        cache_write_price: None,
        output_price: None,
        thinking: None,
        text_editor: None,
        apply_patch: None,
        models: BTreeMap::new(),
        include_usage: None,
        max_retries: None,
        retry_base_delay_ms: None,
        stream_idle_timeout_secs: None,
        connect_timeout_secs: None,
        cache: None,
    }
}

/// At most `max_chars` characters of `text`, with `…` when shortened.
pub(crate) fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
