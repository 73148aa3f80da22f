//! Anthropic Messages (`POST /v1/messages`, `stream: true`).
//!
//! The wire types are our own and lenient: every stream event and content block is
//! dispatched on its `type`, and kinds we do not know are skipped rather than failing
//! the reply, because the API adds new ones often. Like [`super::OpenAiClient`] this does
//! one attempt and classifies failures; the engine retries.
//!
//! Prompt caching: the request carries a `cache_control` breakpoint on the last tool,
//! on the system block and on the last block of the last message (three of the four
//! allowed). Nothing volatile is put in the prefix, so each request of a session is
//! byte-identical to the previous one up to that one's last breakpoint, and the cache
//! is read every turn.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::{self, BoxFuture, FutureExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::openai::{classify_status, http_client, retry_after, send, stream_headers};
use crate::config::{CacheSetting, Thinking};
use crate::engine::{
    ChatRequest, FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelStream, ToolCall,
};
use crate::protocol::TurnUsage;

/// The tag of this API's provider items ([`ModelEvent::ProviderItem`]).
pub const API: &str = "anthropic";

/// The API version jucode's wire types follow.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A Messages endpoint (`{base_url}/v1/messages`).
#[derive(Debug, Clone)]
pub struct AnthropicClient {
    provider: String,
    endpoint: String,
    api_key: Option<String>,
    headers: HeaderMap,
    shape: Shape,
    connect_timeout: Duration,
    unusable: Option<String>,
}

/// What a request body holds besides the conversation: the model's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// `max_tokens`, which the Messages API requires on every request.
    pub max_tokens: u64,
    /// Where `cache_control` breakpoints go, and for how long.
    pub cache: CacheSetting,
    /// How `reasoning_effort` is sent.
    pub thinking: Thinking,
    /// Offer Claude's text editor client tool in place of jucode's `edit_file` and
    /// `write_file` (Claude 4 models are trained on it); its calls become theirs.
    pub text_editor: bool,
}

impl AnthropicClient {
    /// `base_url` is the API root without `/v1` (`https://api.anthropic.com`), as
    /// `ANTHROPIC_BASE_URL` has it; a trailing `/v1` is accepted too.
    pub fn new(provider: impl Into<String>, base_url: &str) -> Self {
        let root = base_url.trim_end_matches('/');
        let root = root.strip_suffix("/v1").unwrap_or(root);
        Self {
            provider: provider.into(),
            endpoint: format!("{root}/v1/messages"),
            api_key: None,
            headers: HeaderMap::new(),
            shape: Shape {
                max_tokens: 32_000,
                cache: CacheSetting::FiveMinutes,
                thinking: Thinking::None,
                text_editor: false,
            },
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            unusable: None,
        }
    }

    /// Sent as `x-api-key`.
    pub fn api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key.filter(|key| !key.is_empty());
        self
    }

    /// Extra headers for every request; they override the client's own.
    pub fn headers(mut self, headers: &BTreeMap<String, String>) -> Self {
        for (name, value) in headers {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(value)) => {
                    self.headers.insert(name, value);
                }
                _ => {
                    let message =
                        format!("invalid header {name:?} in [providers.{}]", self.provider);
                    self.unusable.get_or_insert(message);
                }
            }
        }
        self
    }

    /// `max_tokens`, which the Messages API requires on every request.
    pub fn max_tokens(mut self, max_tokens: u64) -> Self {
        self.shape.max_tokens = max_tokens.max(1);
        self
    }

    /// Whether to place `cache_control` breakpoints, and their lifetime (5 minutes by
    /// default).
    pub fn cache(mut self, cache: CacheSetting) -> Self {
        self.shape.cache = cache;
        self
    }

    /// How the model takes `reasoning_effort` (not at all by default).
    pub fn thinking(mut self, thinking: Thinking) -> Self {
        self.shape.thinking = thinking;
        self
    }

    /// Whether to offer the text editor tool in place of jucode's edit tools (off by
    /// default).
    pub fn text_editor(mut self, text_editor: bool) -> Self {
        self.shape.text_editor = text_editor;
        self
    }

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub fn unusable(mut self, message: impl Into<String>) -> Self {
        self.unusable = Some(message.into());
        self
    }

    fn start(
        &self,
        request: &ChatRequest,
    ) -> Result<BoxFuture<'static, Result<ModelStream, ModelError>>, ModelError> {
        if let Some(message) = &self.unusable {
            return Err(ModelError::fatal(message.clone()));
        }
        let body = serde_json::to_vec(&request_body(request, &self.shape))
            .map_err(|err| ModelError::fatal(format!("cannot encode the request: {err}")))?;
        let mut headers = stream_headers(
            &self.provider,
            self.api_key.as_deref(),
            HeaderName::from_static("x-api-key"),
            str::to_owned,
            &self.headers,
        )?;
        headers
            .entry("anthropic-version")
            .or_insert(HeaderValue::from_static(ANTHROPIC_VERSION));
        let tls = !self.endpoint.starts_with("http://");
        let pending = http_client(self.connect_timeout, tls)?
            .post(&self.endpoint)
            .headers(headers)
            .body(body);
        let endpoint = self.endpoint.clone();
        Ok(async move {
            let response = match send(pending, &endpoint).await? {
                Ok(response) => response,
                Err(refused) => {
                    return Err(status_error(
                        refused.status,
                        &refused.headers,
                        &refused.body,
                    ));
                }
            };
            Ok(reply(response.bytes_stream()))
        }
        .boxed())
    }
}

impl ModelClient for AnthropicClient {
    fn stream(&self, request: &ChatRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        self.start(request)
            .unwrap_or_else(|err| future::ready(Err(err)).boxed())
    }
}

/// A non-2xx answer. `x-should-retry` is the server's own verdict and overrides ours.
pub(crate) fn status_error(status: u16, headers: &HeaderMap, body: &str) -> ModelError {
    let mut error = classify_status(status, retry_after(headers, SystemTime::now()), body);
    let should_retry = headers
        .get("x-should-retry")
        .and_then(|value| value.to_str().ok())
        .map(str::trim);
    match should_retry {
        Some("true") => {
            error.retry = crate::engine::Retry::After(retry_after(headers, SystemTime::now()));
        }
        Some("false") => error.retry = crate::engine::Retry::Never,
        _ => {}
    }
    error
}

/// The JSON body of one Messages request.
pub(crate) fn request_body(request: &ChatRequest, shape: &Shape) -> Value {
    let cache = shape.cache != CacheSetting::Off;
    let breakpoint = || match shape.cache {
        CacheSetting::OneHour => json!({"type": "ephemeral", "ttl": "1h"}),
        _ => json!({"type": "ephemeral"}),
    };
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(shape.max_tokens));
    body.insert("stream".into(), json!(true));
    // Claude's own edit tool, where the model takes it and jucode's edit tools are offered
    // (not in a chat session, say).
    let offered = |name: &str| request.tools.iter().any(|tool| tool.name == name);
    let editor = (shape.text_editor && offered(EDIT_FILE) && offered(WRITE_FILE))
        .then(|| TextEditor::of(&request.model));
    let mut messages = conversation(request, editor.as_ref());
    // The API wants a tool loop that runs with thinking on to have begun with a
    // thinking block; one that began without (on another model, before a restart)
    // finishes without thinking.
    let effort = request
        .reasoning_effort
        .as_ref()
        .filter(|_| !unthought_tool_loop(&messages));
    if let Some(effort) = effort {
        match shape.thinking {
            Thinking::Adaptive => {
                body.insert("thinking".into(), json!({"type": "adaptive"}));
                body.insert("output_config".into(), json!({"effort": effort}));
            }
            Thinking::Budget => {
                if let Some(budget) = thinking_budget(effort, shape.max_tokens) {
                    body.insert(
                        "thinking".into(),
                        json!({"type": "enabled", "budget_tokens": budget}),
                    );
                }
            }
            Thinking::None => {}
        }
    }
    if !request.system.is_empty() {
        let mut block = json!({"type": "text", "text": &*request.system});
        if cache {
            block["cache_control"] = breakpoint();
        }
        body.insert("system".into(), json!([block]));
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .filter(|tool| {
                !(editor.is_some() && [EDIT_FILE, WRITE_FILE].contains(&tool.name.as_str()))
            })
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters,
                })
            })
            .collect();
        if let Some(editor) = &editor {
            tools.push(json!({"type": editor.kind, "name": editor.name}));
        }
        if cache && let Some(last) = tools.last_mut() {
            last["cache_control"] = breakpoint();
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    // The breakpoint goes on the last block of a kind the API caches (thinking blocks and
    // the blocks of server tools take none): the last one, in all but a paused reply.
    if cache
        && let Some(block) = messages
            .last_mut()
            .and_then(|message| message["content"].as_array_mut())
            .and_then(|content| {
                content.iter_mut().rev().find(|block| {
                    matches!(
                        str_of(block.get("type")),
                        "text" | "image" | "document" | "tool_use" | "tool_result"
                    )
                })
            })
    {
        block["cache_control"] = breakpoint();
    }
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

/// Whether the conversation ends in a tool loop (an assistant turn with `tool_use`, then
/// the user turn of its results) whose assistant turn does not start with thinking.
fn unthought_tool_loop(messages: &[Value]) -> bool {
    let [.., assistant, results] = messages else {
        return false;
    };
    let blocks = |message: &Value| message["content"].as_array().cloned().unwrap_or_default();
    let types = |message: &Value| -> Vec<String> {
        blocks(message)
            .iter()
            .map(|block| str_of(block.get("type")).to_owned())
            .collect()
    };
    let (calls, answers) = (types(assistant), types(results));
    assistant["role"] == "assistant"
        && calls.iter().any(|kind| kind == "tool_use")
        && answers.first().is_some_and(|kind| kind == "tool_result")
        && !calls
            .first()
            .is_some_and(|kind| kind == "thinking" || kind == "redacted_thinking")
}

/// The thinking budget of an effort on a model that takes `budget_tokens`: at least the
/// API's 1024, and at most three quarters of `max_tokens` (which must exceed it, and the
/// answer needs room too); `None` when `max_tokens` leaves no room for thinking.
fn thinking_budget(effort: &str, max_tokens: u64) -> Option<u64> {
    const MIN: u64 = 1024;
    let wanted = match effort {
        "minimal" | "low" => 4_096,
        "medium" => 16_384,
        "high" => 32_768,
        _ => 63_999,
    };
    let budget = wanted.min(max_tokens * 3 / 4);
    (budget >= MIN).then_some(budget)
}

/// The conversation as Messages wants it: alternating `user` and `assistant` turns of
/// content blocks. Tool results are user content, so a run of them (and a user message
/// after them) merges into one user turn, as the API requires.
fn conversation(request: &ChatRequest, editor: Option<&TextEditor>) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in request.messages() {
        let (role, blocks) = match message {
            Message::User { text, images } => {
                let mut blocks = Vec::with_capacity(images.len() + 1);
                blocks.extend(images.iter().map(|image| {
                    json!({"type": "image", "source": {
                        "type": "base64", "media_type": image.mime, "data": &*image.base64,
                    }})
                }));
                if !text.is_empty() || blocks.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                ("user", blocks)
            }
            Message::Assistant {
                text, tool_calls, ..
            } => {
                // This provider's and model's own blocks go back verbatim, each where it
                // was: before the text, or after the call it followed.
                let items = request.own_items(message, API);
                let kept = |after: usize| {
                    items
                        .iter()
                        .filter(move |item| item.after_calls == after)
                        .filter_map(|item| serde_json::from_str::<Value>(&item.json).ok())
                };
                let mut blocks = Vec::with_capacity(tool_calls.len() + items.len() + 1);
                blocks.extend(kept(0));
                // The reply's own text blocks (with their citations) stand for its text.
                let own_text = items.iter().any(|item| {
                    serde_json::from_str::<Value>(&item.json)
                        .is_ok_and(|block| block["type"] == "text")
                });
                if !text.is_empty() && !own_text {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for (position, call) in tool_calls.iter().enumerate() {
                    // The engine keeps the model's raw text; the API wants an object.
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    let (name, input) = match editor {
                        Some(editor) => editor.call(&call.name, input),
                        None => (call.name.clone(), input),
                    };
                    blocks.push(json!({"type": "tool_use", "id": wire_id(&call.id), "name": name, "input": input}));
                    blocks.extend(kept(position + 1));
                }
                if blocks.is_empty() {
                    // An empty assistant turn is refused; an empty text block is too.
                    continue;
                }
                ("assistant", blocks)
            }
            Message::Tool {
                call_id,
                output,
                is_error,
                ..
            } => {
                let mut block = json!({"type": "tool_result", "tool_use_id": wire_id(call_id), "content": output});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// The reply's events from its body's bytes, however they are cut into chunks.
pub(crate) fn reply<E>(
    body: impl futures_util::Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> ModelStream
where
    E: std::error::Error + Send + 'static,
{
    super::stream::reply::<EventParser, E>(body)
}

impl super::stream::ReplyParser for EventParser {
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        EventParser::push(self, data)
    }

    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        EventParser::finish(self)
    }

    fn done(&self) -> bool {
        self.done
    }
}

/// Incremental state of one streamed Messages reply. Pure, so recorded streams can be
/// fed to it event by event.
#[derive(Debug, Default)]
pub(crate) struct EventParser {
    started: bool,
    /// Open `tool_use` blocks by their `index`.
    calls: BTreeMap<u64, OpenCall>,
    /// How many tool calls were seen, for [`ModelEvent::ToolCallDelta::index`].
    call_count: usize,
    /// Open blocks kept whole for the provider items (thinking with its signature,
    /// redacted thinking, server tools and their results, kinds unknown to us), by index.
    kept: BTreeMap<u64, KeptBlock>,
    input_tokens: u64,
    cache_read: u64,
    cache_write: u64,
    output_tokens: u64,
    stop_reason: Option<String>,
    /// `message_stop` arrived: nothing more is read.
    pub(crate) done: bool,
}

/// A block being kept: the start's `content_block`, and what its deltas add.
#[derive(Debug)]
struct KeptBlock {
    block: Map<String, Value>,
    text: String,
    citations: Vec<Value>,
    thinking: String,
    signature: String,
    input: String,
}

impl KeptBlock {
    /// The finished block as the API wants it back.
    fn finish(mut self) -> String {
        if !self.text.is_empty() {
            let before = str_of(self.block.get("text")).to_owned();
            self.block.insert("text".into(), json!(before + &self.text));
        }
        if !self.citations.is_empty() {
            let mut citations = match self.block.remove("citations") {
                Some(Value::Array(before)) => before,
                _ => Vec::new(),
            };
            citations.append(&mut self.citations);
            self.block
                .insert("citations".into(), Value::Array(citations));
        }
        if self.block.get("citations").is_some_and(Value::is_null) {
            self.block.remove("citations");
        }
        if !self.thinking.is_empty() {
            let before = str_of(self.block.get("thinking")).to_owned();
            self.block
                .insert("thinking".into(), json!(before + &self.thinking));
        }
        if !self.signature.is_empty() {
            let before = str_of(self.block.get("signature")).to_owned();
            self.block
                .insert("signature".into(), json!(before + &self.signature));
        }
        if !self.input.trim().is_empty() {
            let input = serde_json::from_str::<Value>(&self.input)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}));
            self.block.insert("input".into(), input);
        }
        Value::Object(self.block).to_string()
    }
}

#[derive(Debug)]
struct OpenCall {
    position: usize,
    id: String,
    name: String,
    input: String,
}

impl EventParser {
    /// Feeds one SSE event's `data` (the JSON carries its own `type`).
    pub(crate) fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        let data = data.trim();
        if data.is_empty() || self.done {
            return Ok(Vec::new());
        }
        let event: Value = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(err) => {
                tracing::warn!(%err, event = %super::truncate(data, 200), "skipping unparseable Messages event");
                return Ok(Vec::new());
            }
        };
        let mut out = Vec::new();
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                if self.started {
                    return Err(ModelError::transient(
                        "the model stream started a second message",
                        None,
                    ));
                }
                self.started = true;
                if let Some(usage) = event.pointer("/message/usage") {
                    self.take_usage(usage);
                }
            }
            "content_block_start" => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = event.get("content_block").unwrap_or(&Value::Null);
                match block.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text" => push_text(&mut out, block.get("text"), ModelEvent::TextDelta),
                    "thinking" => {
                        push_text(&mut out, block.get("thinking"), ModelEvent::ReasoningDelta)
                    }
                    "tool_use" => {
                        let name = str_of(block.get("name")).to_owned();
                        let position = self.call_count;
                        self.call_count += 1;
                        out.push(ModelEvent::ToolCallDelta {
                            index: position,
                            name: Some(name.clone()),
                            arguments: String::new(),
                        });
                        // A start that already carries a non-empty input (some proxies)
                        // counts as the first fragment.
                        let input = match block.get("input") {
                            Some(Value::Object(map)) if !map.is_empty() => {
                                block["input"].to_string()
                            }
                            _ => String::new(),
                        };
                        let call = OpenCall {
                            position,
                            id: str_of(block.get("id")).to_owned(),
                            name,
                            input,
                        };
                        self.calls.insert(index, call);
                    }
                    _ => {}
                }
                // Thinking (signed), redacted thinking, server tools and their results,
                // and kinds added after this was written are kept whole and resent.
                if let Value::Object(map) = block
                    && !matches!(str_of(block.get("type")), "tool_use" | "")
                {
                    let kept = KeptBlock {
                        block: map.clone(),
                        text: String::new(),
                        citations: Vec::new(),
                        thinking: String::new(),
                        signature: String::new(),
                        input: String::new(),
                    };
                    self.kept.insert(index, kept);
                }
            }
            "content_block_delta" => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = event.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text_delta" => {
                        if let Some(kept) = self.kept.get_mut(&index) {
                            kept.text.push_str(str_of(delta.get("text")));
                        }
                        push_text(&mut out, delta.get("text"), ModelEvent::TextDelta)
                    }
                    "citations_delta" => {
                        if let (Some(kept), Some(citation)) =
                            (self.kept.get_mut(&index), delta.get("citation"))
                        {
                            kept.citations.push(citation.clone());
                        }
                    }
                    "thinking_delta" => {
                        if let Some(kept) = self.kept.get_mut(&index) {
                            kept.thinking.push_str(str_of(delta.get("thinking")));
                        }
                        push_text(&mut out, delta.get("thinking"), ModelEvent::ReasoningDelta)
                    }
                    "signature_delta" => {
                        if let Some(kept) = self.kept.get_mut(&index) {
                            kept.signature.push_str(str_of(delta.get("signature")));
                        }
                    }
                    "input_json_delta" => {
                        let fragment = str_of(delta.get("partial_json"));
                        if let Some(kept) = self.kept.get_mut(&index) {
                            kept.input.push_str(fragment);
                        }
                        if let Some(call) = self.calls.get_mut(&index)
                            && !fragment.is_empty()
                        {
                            call.input.push_str(fragment);
                            out.push(ModelEvent::ToolCallDelta {
                                index: call.position,
                                name: None,
                                arguments: fragment.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(call) = self.calls.remove(&index) {
                    out.push(ModelEvent::ToolCall(finished_call(call)));
                }
                if let Some(kept) = self.kept.remove(&index) {
                    let json = kept.finish();
                    if let Some(notice) = server_tool_notice(&json) {
                        out.push(ModelEvent::Notice(notice));
                    }
                    out.push(ModelEvent::ProviderItem { api: API, json });
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(details) = event
                    .pointer("/delta/stop_details")
                    .filter(|d| !d.is_null())
                {
                    let explanation = details
                        .get("explanation")
                        .and_then(Value::as_str)
                        .map_or_else(|| details.to_string(), str::to_owned);
                    out.push(ModelEvent::TextDelta(format!(
                        "\n\n[refused: {explanation}]"
                    )));
                }
                if let Some(usage) = event.get("usage") {
                    self.take_usage(usage);
                }
            }
            "message_stop" => {
                out.extend(self.end()?);
            }
            "error" => {
                let error = event.get("error").unwrap_or(&Value::Null);
                let kind = str_of(error.get("type"));
                let message = format!(
                    "{kind}: {}",
                    error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the model stream reported an error")
                );
                let transient =
                    matches!(kind, "overloaded_error" | "api_error" | "rate_limit_error");
                return Err(if transient {
                    ModelError::transient(message, None)
                } else {
                    ModelError::fatal(message)
                });
            }
            // `ping`, and event kinds added after this was written.
            _ => {}
        }
        Ok(out)
    }

    /// The body ended. Without `message_stop` the reply is incomplete: a transient
    /// failure, so the engine may try again.
    pub(crate) fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done {
            return Ok(Vec::new());
        }
        Err(ModelError::transient(
            "the model stream ended before message_stop",
            None,
        ))
    }

    fn end(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        self.done = true;
        let mut out: Vec<ModelEvent> = std::mem::take(&mut self.calls)
            .into_values()
            .map(|call| ModelEvent::ToolCall(finished_call(call)))
            .collect();
        out.push(ModelEvent::Usage(TurnUsage {
            // OpenAI's meaning: every prompt token, cached or not.
            input_tokens: self.input_tokens + self.cache_read + self.cache_write,
            cached_input_tokens: self.cache_read,
            cache_write_input_tokens: self.cache_write,
            output_tokens: self.output_tokens,
            reasoning_tokens: 0,
        }));
        let reason = match self.stop_reason.as_deref().unwrap_or("end_turn") {
            "end_turn" | "stop_sequence" => FinishReason::Stop,
            "tool_use" => FinishReason::ToolCalls,
            "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
            "refusal" => FinishReason::ContentFilter,
            "pause_turn" => FinishReason::Paused,
            other => FinishReason::Other(other.to_owned()),
        };
        out.push(ModelEvent::Finished(reason));
        Ok(out)
    }

    /// Each counter from the last event that carries it: `message_delta` may correct
    /// what `message_start` said.
    fn take_usage(&mut self, usage: &Value) {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        if let Some(n) = count("input_tokens") {
            self.input_tokens = n;
        }
        if let Some(n) = count("cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = count("cache_creation_input_tokens") {
            self.cache_write = n;
        }
        if let Some(n) = count("output_tokens") {
            self.output_tokens = n;
        }
    }
}

/// What the user is shown of a server tool call (run by Anthropic, never by jucode):
/// its name and input.
fn server_tool_notice(block: &str) -> Option<String> {
    let block: Value = serde_json::from_str(block).ok()?;
    if str_of(block.get("type")) != "server_tool_use" {
        return None;
    }
    let input = block.get("input").map(Value::to_string).unwrap_or_default();
    Some(format!(
        "{} (run by the provider): {}",
        str_of(block.get("name")),
        super::truncate(&input, 300)
    ))
}

fn finished_call(call: OpenCall) -> ToolCall {
    // No fragments, or only empty ones, is a call without arguments.
    let arguments = if call.input.trim().is_empty() {
        "{}".to_owned()
    } else {
        call.input
    };
    let (name, arguments) = if TextEditor::NAMES.contains(&call.name.as_str()) {
        from_editor_call(&arguments).unwrap_or((call.name, arguments))
    } else {
        (call.name, arguments)
    };
    ToolCall {
        id: call.id,
        name,
        arguments,
    }
}

/// Claude's text editor client tool, offered in place of jucode's edit tools in the
/// version the model is trained on: `text_editor_20250728` for Claude 4 and later,
/// `text_editor_20250124` (named `str_replace_editor`) for Claude 3.7.
struct TextEditor {
    kind: &'static str,
    name: &'static str,
}

impl TextEditor {
    /// The names its calls arrive under, whichever version was offered.
    const NAMES: [&'static str; 2] = ["str_replace_based_edit_tool", "str_replace_editor"];

    fn of(model: &str) -> Self {
        if model.starts_with("claude-3-7") {
            Self {
                kind: "text_editor_20250124",
                name: "str_replace_editor",
            }
        } else {
            Self {
                kind: "text_editor_20250728",
                name: "str_replace_based_edit_tool",
            }
        }
    }

    /// jucode's edit calls as the text editor's, for a request that offers it in their
    /// place: the model reads back the calls in the shape it made them.
    fn call(&self, name: &str, input: Value) -> (String, Value) {
        let text = |key: &str| input.get(key).cloned().unwrap_or_else(|| json!(""));
        let editor = match name {
            EDIT_FILE if input.get("insert_line").is_some() => json!({"command": "insert",
                "path": text("path"), "insert_line": text("insert_line"),
                "new_str": text("new_string")}),
            EDIT_FILE => json!({"command": "str_replace", "path": text("path"),
                "old_str": text("old_string"), "new_str": text("new_string")}),
            WRITE_FILE => json!({"command": "create", "path": text("path"),
                "file_text": text("content")}),
            _ => return (name.to_owned(), input),
        };
        (self.name.to_owned(), editor)
    }
}

const EDIT_FILE: &str = "edit_file";
const WRITE_FILE: &str = "write_file";
const READ_FILE: &str = "read_file";

/// A text editor call as jucode's own: `str_replace` is `edit_file`, `insert` is
/// `edit_file` with `insert_line`, `create` is `write_file`, `view` is `read_file` (a
/// `view_range` as its lines), so the call goes through the same assessment, approvals,
/// hunks, plan-mode gating and checkpoints. `None` for what has no counterpart
/// (`undo_edit`) or lacks a field: the call then stays the editor's, which jucode does
/// not run, and the model reads why.
fn from_editor_call(arguments: &str) -> Option<(String, String)> {
    let input: Value = serde_json::from_str(arguments).ok()?;
    let text = |key: &str| input.get(key).and_then(Value::as_str);
    let path = text("path")?;
    let (name, arguments) = match text("command")? {
        "str_replace" => (
            EDIT_FILE,
            json!({"path": path, "old_string": text("old_str")?,
                "new_string": text("new_str").unwrap_or("")}),
        ),
        // `new_str` in the editor's versions, `insert_text` in the memory tool's shape.
        "insert" => (
            EDIT_FILE,
            json!({"path": path, "insert_line": input.get("insert_line")?.as_u64()?,
                "new_string": text("new_str").or_else(|| text("insert_text"))?}),
        ),
        "create" => (
            WRITE_FILE,
            json!({"path": path, "content": text("file_text")?}),
        ),
        "view" => {
            let mut arguments = json!({ "path": path });
            if let Some([start, end]) = input
                .get("view_range")
                .and_then(Value::as_array)
                .and_then(|range| <&[Value; 2]>::try_from(range.as_slice()).ok())
            {
                let start = start.as_u64().filter(|n| *n > 0).unwrap_or(1);
                arguments["offset"] = json!(start);
                if let Some(end) = end.as_u64().filter(|end| *end >= start) {
                    arguments["limit"] = json!(end - start + 1);
                }
            }
            (READ_FILE, arguments)
        }
        _ => return None,
    };
    Some((name.to_owned(), arguments.to_string()))
}

/// A call id the Messages API accepts (`[A-Za-z0-9_-]+`). Ids minted by other providers
/// (`functions.read:0` from some Chat Completions servers) would be refused after a
/// `/model` switch; the mapping is deterministic, so a call and its result still match
/// and the cached prefix stays the same from turn to turn.
fn wire_id(id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() { "call".to_owned() } else { id }
}

fn str_of(value: Option<&Value>) -> &str {
    value.and_then(Value::as_str).unwrap_or("")
}

fn push_text(out: &mut Vec<ModelEvent>, text: Option<&Value>, make: fn(String) -> ModelEvent) {
    let text = str_of(text);
    if !text.is_empty() {
        out.push(make(text.to_owned()));
    }
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
