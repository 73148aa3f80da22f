//! What the engine needs from a model provider, and nothing more.
//!
//! The engine owns the conversation and the retry policy; a provider only turns one
//! [`ChatRequest`] into one attempt's stream of [`ModelEvent`]s and classifies its
//! failures. Keeping retries here means every provider gets the same rule: retry a
//! transient failure only while nothing of the reply has reached the client.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use crate::engine::conversation::store::{Entry, EntryBody};
use crate::protocol::{ModelState, TurnUsage};

/// One request to the model: the conversation so far plus the tools it may call.
///
/// The conversation is the store's entries themselves (shared, not copied); the
/// provider reads each one's [`Entry::message`] as it encodes the request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The model name as the provider's API knows it (no `provider/` prefix).
    pub model: String,
    pub system: Arc<str>,
    pub conversation: Vec<Arc<Entry>>,
    pub tools: Vec<ToolSpec>,
    pub reasoning_effort: Option<String>,
    /// The provider's name as the catalog knows it (`anthropic`, a config table's name):
    /// with [`ChatRequest::model`] it says which [`ProviderItems`] of the conversation
    /// are this request's to resend. Empty outside a session: none are.
    pub provider: String,
    /// A key stable across the session's requests (its id), for APIs that route
    /// requests sharing a prompt prefix to the same cache (`prompt_cache_key`).
    pub cache_key: Option<String>,
    /// Freeform shapes of the offered tools, for a provider whose model is trained on
    /// one (see [`FreeformTool`]); the turn lists none when a client serves the files.
    pub freeform_tools: Vec<FreeformTool>,
}

impl ChatRequest {
    /// The messages the model reads, in order.
    pub fn messages(&self) -> impl DoubleEndedIterator<Item = &Message> + '_ {
        self.conversation.iter().filter_map(|entry| entry.message())
    }

    /// A request from loose messages, outside any session (compaction, tests).
    pub fn from_messages(
        model: impl Into<String>,
        system: &str,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
    ) -> Self {
        let conversation = messages
            .into_iter()
            .enumerate()
            .map(|(index, message)| {
                let body = match message {
                    Message::Assistant { .. } => EntryBody::Assistant(message),
                    Message::Tool { .. } => EntryBody::ToolResult(message),
                    Message::User { .. } => EntryBody::User {
                        shown: Default::default(),
                        message,
                        steered: false,
                    },
                };
                Arc::new(Entry::new(Arc::from(format!("m{index}")), None, 0, body))
            })
            .collect();
        Self {
            model: model.into(),
            system: Arc::from(system),
            conversation,
            tools,
            reasoning_effort: None,
            provider: String::new(),
            cache_key: None,
            freeform_tools: Vec::new(),
        }
    }

    /// The provider items of `message` this request must resend verbatim: those made by
    /// this provider and model through the API `api`. Items of another provider, model
    /// or API are dropped, never converted (a signature is only good where it was made).
    pub fn own_items<'a>(&self, message: &'a Message, api: &str) -> &'a [ProviderItem] {
        match message {
            Message::Assistant {
                provider_items: Some(items),
                ..
            } if !self.provider.is_empty()
                && items.api == api
                && items.provider == self.provider
                && items.model == self.model =>
            {
                &items.items
            }
            _ => &[],
        }
    }
}

/// A conversation item in provider-neutral form.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// `text` is what the model reads, attachment notes included.
    User {
        text: String,
        images: Vec<ImageData>,
    },
    Assistant {
        text: String,
        reasoning: String,
        tool_calls: Vec<ToolCall>,
        /// The reply's provider-bound items (signed thinking, encrypted reasoning, server
        /// tool blocks), resent only to the provider and model that made them.
        provider_items: Option<Arc<ProviderItems>>,
    },
    Tool {
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
        /// The call as its tool described it, for the transcript (never sent to the
        /// model). Empty for results recorded before cards were kept.
        card: crate::protocol::CallCard,
    },
}

/// Opaque items of one reply that only the API, provider and model which produced them
/// can read back: Anthropic's `thinking` blocks with their signatures, Responses'
/// `reasoning` items with their `encrypted_content`, server tool blocks. The engine
/// keeps them as the provider handed them (JSON text it never parses) and gives them
/// back in the same order on later requests to the same provider and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderItems {
    /// The wire format (`anthropic`, `openai-responses`): the provider client's own tag.
    pub api: String,
    /// The provider's name and the model, as in [`ChatRequest`].
    pub provider: String,
    pub model: String,
    pub items: Vec<ProviderItem>,
}

/// One opaque item, and where it sat in the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderItem {
    /// How many of the reply's tool calls came before it: it is resent after those and
    /// before the next one (items with 0 come first, before the reply's text).
    pub after_calls: usize,
    /// The item's JSON text, exactly as the provider made it.
    pub json: Arc<str>,
}

/// An attached image, already read and base64-encoded. Shared because a long session
/// re-sends every image on every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageData {
    pub mime: &'static str,
    pub base64: Arc<str>,
}

/// A complete tool call as the model made it. `arguments` is the raw JSON text; the
/// engine parses it, so a provider never rejects a reply over bad arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A tool as offered to the model: `parameters` is a JSON Schema object.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// A tool the model writes as plain text in a grammar rather than as JSON arguments
/// (OpenAI's custom tools; `apply_patch` for GPT-5). A provider whose model is trained on
/// it offers it in place of the JSON tools it `replaces`, when all of those are offered;
/// every other provider ignores it. Its calls come back with the arguments
/// `{"input": <the text>}`.
#[derive(Debug, Clone, PartialEq)]
pub struct FreeformTool {
    pub name: String,
    pub description: String,
    /// The input's grammar, in Lark syntax.
    pub grammar: &'static str,
    pub replaces: &'static [&'static str],
}

/// One piece of a streamed reply, in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    ReasoningDelta(String),
    TextDelta(String),
    /// A fragment of a tool call still being written: lets the engine show a call (for
    /// example a plan) while the model types it. `arguments` is the new fragment only.
    ToolCallDelta {
        index: usize,
        name: Option<String>,
        arguments: String,
    },
    /// A finished tool call. All of them arrive before [`ModelEvent::Finished`].
    ToolCall(ToolCall),
    /// A finished opaque item of the reply (see [`ProviderItems`]), in its place among
    /// the tool calls; `api` is the client's wire format tag.
    ProviderItem {
        api: &'static str,
        json: String,
    },
    /// Something the provider did that the user should see but the engine does not act
    /// on (a server tool Anthropic ran): shown as an `info`.
    Notice(String),
    Usage(TurnUsage),
    /// The reply is complete; nothing follows.
    Finished(FinishReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    ToolCalls,
    /// The reply hit the output token limit.
    Length,
    ContentFilter,
    /// The reply paused (Anthropic's `pause_turn`: a long server tool run) and is
    /// continued, within the same turn, by sending the conversation back as it is.
    Paused,
    Other(String),
}

impl FinishReason {
    pub fn from_wire(reason: &str) -> Self {
        match reason {
            "stop" | "end_turn" => Self::Stop,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolCalls,
            "length" | "max_tokens" => Self::Length,
            "content_filter" => Self::ContentFilter,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// A failed attempt. `retry` says whether trying again may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelError {
    pub message: String,
    pub retry: Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Permanent: bad request, bad key, unknown model ...
    Never,
    /// Transient (overload, 5xx, connection reset, stream cut short); the server may
    /// have said how long to wait.
    After(Option<Duration>),
    /// The conversation does not fit the model's context window (by the provider's
    /// count): compacting it may help, and the request is tried again once after that.
    Compact,
}

impl ModelError {
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry: Retry::Never,
        }
    }

    pub fn transient(message: impl Into<String>, after: Option<Duration>) -> Self {
        Self {
            message: message.into(),
            retry: Retry::After(after),
        }
    }

    pub fn too_long(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry: Retry::Compact,
        }
    }
}

pub type ModelStream = BoxStream<'static, Result<ModelEvent, ModelError>>;

/// A model endpoint. Implementations live in `crate::providers`.
pub trait ModelClient: Send + Sync {
    /// Starts one attempt. The request is read synchronously (implementations encode it
    /// before returning), so the caller keeps ownership of the conversation. The future
    /// resolves once the model has accepted the request (HTTP headers in); the stream
    /// then yields the reply and ends after [`ModelEvent::Finished`] or an error.
    fn stream(&self, request: &ChatRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>>;

    /// Prepares costly shared state (an HTTP client with its TLS roots) in the
    /// background, so the first request of a session does not pay for it. Called when a
    /// session starts on, or switches to, this client.
    fn warm_up(&self) {}
}

/// Limits and prices of one model, resolved from config and built-in defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    pub context_window: u64,
    pub max_output_tokens: u64,
    /// Empty when the model takes no effort setting.
    pub reasoning_efforts: Vec<String>,
    /// USD per million tokens; `None` when unpriced (cost then stays 0).
    pub input_price: Option<f64>,
    pub cached_input_price: Option<f64>,
    /// Writing the prompt cache (Anthropic's `cache_creation_input_tokens`).
    pub cache_write_price: Option<f64>,
    pub output_price: Option<f64>,
}

/// How the engine treats a provider's transient failures and silences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; not capped.
    pub max_retries: u32,
    /// The pause before the first retry, doubled for each later one. The engine caps
    /// every pause (this one doubled, or a server's `retry-after`) at 60 s.
    pub base_delay: Duration,
    /// A stream silent for this long is cut and counts as a transient failure.
    pub idle_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            base_delay: Duration::from_millis(500),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// A `provider/model` pair ready to use.
#[derive(Clone)]
pub struct ResolvedModel {
    pub provider: String,
    pub model: String,
    pub info: ModelInfo,
    pub client: Arc<dyn ModelClient>,
    pub retry: RetryPolicy,
    /// `model_status.state`: `ready`, or why requests will fail (`missing_api_key`).
    pub state: ModelState,
    /// Shown once in the startup batch (for example: "this is the offline demo").
    pub notice: Option<String>,
    /// The provider's usage counts every prompt token exactly (Messages, Responses):
    /// `context_usage` then starts from the last request's real count and estimates
    /// only what was added since.
    pub context_from_usage: bool,
}

impl ResolvedModel {
    /// `provider/model`, as `startup.model` and the config's `model` key spell it.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// Resolves model names to clients. Implemented by `crate::providers::Catalog`.
pub trait ModelCatalog: Send + Sync {
    /// The model a new session starts on.
    fn default_model(&self) -> Result<ResolvedModel, String>;

    /// Stands in for the model a new session should start on when it cannot be
    /// resolved (`why`): it keeps that model's name, reports `invalid_config`, and fails
    /// every request with `why`. A session always starts, but never on a model the user
    /// did not choose (the offline demo answering in place of a broken config would
    /// look like success).
    fn unusable(&self, why: &str) -> ResolvedModel;

    /// Resolves `provider/model`, or a bare model name of a configured provider (the
    /// current provider first).
    fn resolve(&self, name: &str, current_provider: Option<&str>) -> Result<ResolvedModel, String>;

    /// Every model the user can pick, as `(provider/model, info)`, for the model picker.
    fn list(&self) -> Vec<(String, ModelInfo)>;
}

/// The effort to use on `model`: the one asked for, else the current one if the model
/// takes it, else `medium`, else the model's first; `None` for models without efforts.
pub fn pick_effort(
    model: &ResolvedModel,
    asked: Option<&str>,
    current: Option<&str>,
) -> Option<String> {
    let efforts = &model.info.reasoning_efforts;
    let supported = |effort: &str| efforts.iter().any(|e| e == effort);
    [asked, current, Some("medium")]
        .into_iter()
        .flatten()
        .find(|effort| supported(effort))
        .map(str::to_owned)
        .or_else(|| efforts.first().cloned())
}
