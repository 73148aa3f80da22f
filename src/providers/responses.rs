//! OpenAI Responses (`POST {base_url}/responses`, `stream: true`), stateless.
//!
//! Nothing is stored at OpenAI (`store: false`): every request carries the whole
//! conversation, and the reasoning of earlier replies goes back as the `reasoning` items
//! the stream handed over (with their `encrypted_content`, which `include` asks for),
//! each in its place before the call it led to. Those items reach the engine as
//! provider items ([`ModelEvent::ProviderItem`]) and come back only to the same provider
//! and model.
//!
//! The wire types are our own and lenient, as for Messages: every event and output item
//! is dispatched on its `type`, kinds we do not know are skipped (an unknown output item
//! is kept and resent). Stream events are correlated by `output_index`, never by item
//! id: some servers (GitHub Copilot's) rotate ids on every event. Like the other clients
//! this does one attempt and classifies failures; the engine retries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::{self, BoxFuture, FutureExt};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::openai::{classify_status, http_client, retry_after, send, stream_headers};
use crate::engine::{
    ChatRequest, FinishReason, FreeformTool, Message, ModelClient, ModelError, ModelEvent,
    ModelStream, ToolCall,
};
use crate::protocol::TurnUsage;

/// The tag of this API's provider items ([`ModelEvent::ProviderItem`]).
pub const API: &str = "openai-responses";

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A Responses endpoint (`{base_url}/responses`; `base_url` ends in `/v1`, as
/// `OPENAI_BASE_URL` does).
#[derive(Debug, Clone)]
pub struct ResponsesClient {
    provider: String,
    endpoint: String,
    api_key: Option<String>,
    headers: HeaderMap,
    connect_timeout: Duration,
    unusable: Option<String>,
    /// Offer `apply_patch` in its freeform shape (the model is trained on it).
    apply_patch: bool,
}

impl ResponsesClient {
    pub fn new(provider: impl Into<String>, base_url: &str) -> Self {
        Self {
            provider: provider.into(),
            endpoint: format!("{}/responses", base_url.trim_end_matches('/')),
            api_key: None,
            headers: HeaderMap::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            unusable: None,
            apply_patch: false,
        }
    }

    /// Whether the model takes `apply_patch` as a freeform tool in place of `edit_file`
    /// and `write_file` (GPT-5 models are trained on it).
    pub fn apply_patch(mut self, apply_patch: bool) -> Self {
        self.apply_patch = apply_patch;
        self
    }

    /// Sent as `Authorization: Bearer <key>`.
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

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub fn unusable(mut self, message: impl Into<String>) -> Self {
        self.unusable = Some(message.into());
        self
    }

    fn needs_tls(&self) -> bool {
        !self.endpoint.starts_with("http://")
    }

    fn start(
        &self,
        request: &ChatRequest,
    ) -> Result<BoxFuture<'static, Result<ModelStream, ModelError>>, ModelError> {
        if let Some(message) = &self.unusable {
            return Err(ModelError::fatal(message.clone()));
        }
        let body = serde_json::to_vec(&request_body(request, self.apply_patch))
            .map_err(|err| ModelError::fatal(format!("cannot encode the request: {err}")))?;
        let headers = stream_headers(
            &self.provider,
            self.api_key.as_deref(),
            AUTHORIZATION,
            |key| format!("Bearer {key}"),
            &self.headers,
        )?;
        let pending = http_client(self.connect_timeout, self.needs_tls())?
            .post(&self.endpoint)
            .headers(headers)
            .body(body);
        let endpoint = self.endpoint.clone();
        Ok(async move {
            let response = match send(pending, &endpoint).await? {
                Ok(response) => response,
                Err(refused) => {
                    let retry_after = retry_after(&refused.headers, SystemTime::now());
                    return Err(status_error(refused.status, retry_after, &refused.body));
                }
            };
            Ok(reply(response.bytes_stream()))
        }
        .boxed())
    }
}

impl ModelClient for ResponsesClient {
    fn stream(&self, request: &ChatRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        self.start(request)
            .unwrap_or_else(|err| future::ready(Err(err)).boxed())
    }

    fn warm_up(&self) {
        if self.unusable.is_some() {
            return;
        }
        let timeout = self.connect_timeout;
        let tls = self.needs_tls();
        let _ = std::thread::Builder::new()
            .name("http-client-init".into())
            .spawn(move || {
                let _ = http_client(timeout, tls);
            });
    }
}

/// A non-2xx answer. A used-up quota comes as a 429 like a rate limit, but waiting does
/// not help: it is not retried.
pub(crate) fn status_error(status: u16, retry_after: Option<Duration>, body: &str) -> ModelError {
    let mut error = classify_status(status, retry_after, body);
    let code = serde_json::from_str::<Value>(body).ok().and_then(|body| {
        body.pointer("/error/code")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    if code.as_deref() == Some("insufficient_quota") {
        error.retry = crate::engine::Retry::Never;
    }
    error
}

/// The JSON body of one Responses request; `apply_patch` offers the freeform tools the
/// request lists in place of the JSON tools they replace.
pub(crate) fn request_body(request: &ChatRequest, apply_patch: bool) -> Value {
    let freeform = offered_freeform(request, apply_patch);
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if !request.system.is_empty() {
        body.insert("instructions".into(), json!(&*request.system));
    }
    body.insert("input".into(), Value::Array(input(request, &freeform)));
    if !request.tools.is_empty() {
        let replaced = |name: &str| freeform.iter().any(|tool| tool.replaces.contains(&name));
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .filter(|tool| !replaced(&tool.name))
            .map(|tool| {
                json!({
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": false,
                })
            })
            .collect();
        tools.extend(freeform.iter().map(|tool| {
            json!({
                "type": "custom",
                "name": tool.name,
                "description": tool.description,
                "format": {"type": "grammar", "syntax": "lark", "definition": tool.grammar},
            })
        }));
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
        body.insert("parallel_tool_calls".into(), json!(true));
    }
    body.insert("store".into(), json!(false));
    if let Some(effort) = &request.reasoning_effort {
        body.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
        // Reasoning is carried between turns only as these encrypted items. Models that
        // do not reason refuse the option, so it goes with `reasoning` (as codex does).
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    body.insert("stream".into(), json!(true));
    if let Some(key) = &request.cache_key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    Value::Object(body)
}

/// The freeform tools this request offers: those whose JSON tools are all offered, when
/// the model takes them.
fn offered_freeform(request: &ChatRequest, apply_patch: bool) -> Vec<&FreeformTool> {
    if !apply_patch {
        return Vec::new();
    }
    let offered = |name: &&str| request.tools.iter().any(|tool| tool.name == *name);
    request
        .freeform_tools
        .iter()
        .filter(|tool| !tool.replaces.is_empty() && tool.replaces.iter().all(offered))
        .collect()
}

/// A call to a freeform tool as the item the model wrote: its text, not JSON arguments.
/// `None` for a call that is not one (or whose arguments are not `{"input": text}`).
fn freeform_input(call: &ToolCall, freeform: &[&FreeformTool]) -> Option<String> {
    if !freeform.iter().any(|tool| tool.name == call.name) {
        return None;
    }
    let arguments: Value = serde_json::from_str(&call.arguments).ok()?;
    arguments.get("input")?.as_str().map(str::to_owned)
}

/// The conversation as input items, in order: each reply's own reasoning items (and
/// other kept items) where they were, its text as an assistant message, its calls, and
/// the calls' outputs. Calls of an offered freeform tool go back as the custom calls
/// the model made, with custom outputs.
fn input(request: &ChatRequest, freeform: &[&FreeformTool]) -> Vec<Value> {
    let mut items = Vec::new();
    let mut custom_calls = BTreeSet::new();
    for message in request.messages() {
        match message {
            Message::User { text, images } => {
                let mut content = Vec::with_capacity(images.len() + 1);
                if !text.is_empty() || images.is_empty() {
                    content.push(json!({"type": "input_text", "text": text}));
                }
                content.extend(images.iter().map(|image| {
                    let url = format!("data:{};base64,{}", image.mime, image.base64);
                    json!({"type": "input_image", "image_url": url})
                }));
                items.push(json!({"type": "message", "role": "user", "content": content}));
            }
            Message::Assistant {
                text, tool_calls, ..
            } => {
                let own: Vec<(usize, Value)> = request
                    .own_items(message, API)
                    .iter()
                    .filter_map(|item| {
                        let value = serde_json::from_str::<Value>(&item.json).ok()?;
                        Some((item.after_calls, value))
                    })
                    .collect();
                let kept = |after: usize| {
                    own.iter()
                        .filter(move |(at, _)| *at == after)
                        .map(|(_, item)| item.clone())
                };
                // The reply's own message items (with their `phase`: commentary or final
                // answer) stand for its text; without them the text is one message.
                let own_messages = own.iter().any(|(_, item)| item["type"] == "message");
                items.extend(kept(0));
                if !text.is_empty() && !own_messages {
                    items.push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}]}));
                }
                for (position, call) in tool_calls.iter().enumerate() {
                    match freeform_input(call, freeform) {
                        Some(text) => {
                            custom_calls.insert(call.id.as_str());
                            items.push(json!({"type": "custom_tool_call", "call_id": call.id,
                                "name": call.name, "input": text}));
                        }
                        None => items.push(json!({"type": "function_call", "call_id": call.id,
                            "name": call.name, "arguments": call.arguments})),
                    }
                    items.extend(kept(position + 1));
                }
            }
            Message::Tool {
                call_id, output, ..
            } => {
                let kind = if custom_calls.contains(call_id.as_str()) {
                    "custom_tool_call_output"
                } else {
                    "function_call_output"
                };
                items.push(json!({"type": kind, "call_id": call_id, "output": output}));
            }
        }
    }
    items
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

/// Incremental state of one streamed reply. Pure, so recorded streams can be fed to it
/// event by event.
#[derive(Debug, Default)]
pub(crate) struct EventParser {
    /// Open calls by `output_index`.
    calls: BTreeMap<u64, OpenCall>,
    call_count: usize,
    /// Output indexes whose text arrived as deltas (a `.done` message without any is
    /// shown whole).
    streamed: BTreeSet<u64>,
    /// The last reasoning part seen, `(output_index, summary_index)`, to separate parts.
    last_part: Option<(u64, u64)>,
    /// The model refused (a `refusal` part): a completed reply is a refusal stop.
    refused: bool,
    /// A terminal event arrived: nothing more is read.
    pub(crate) done: bool,
}

#[derive(Debug)]
struct OpenCall {
    position: usize,
    arguments: String,
}

impl EventParser {
    /// Feeds one SSE event's `data` (the JSON carries its own `type`).
    pub(crate) fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        let data = data.trim();
        if data.is_empty() || self.done || data == "[DONE]" {
            return Ok(Vec::new());
        }
        let event: Value = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(err) => {
                tracing::warn!(%err, event = %super::truncate(data, 200), "skipping unparseable Responses event");
                return Ok(Vec::new());
            }
        };
        let index = event.get("output_index").and_then(Value::as_u64);
        let mut out = Vec::new();
        match str_of(event.get("type")) {
            "response.output_item.added" => {
                let item = event.get("item").unwrap_or(&Value::Null);
                if let (Some(index), "function_call" | "custom_tool_call") =
                    (index, str_of(item.get("type")))
                {
                    let position = self.call_count;
                    self.call_count += 1;
                    out.push(ModelEvent::ToolCallDelta {
                        index: position,
                        name: Some(str_of(item.get("name")).to_owned()),
                        arguments: String::new(),
                    });
                    let call = OpenCall {
                        position,
                        arguments: String::new(),
                    };
                    self.calls.insert(index, call);
                }
            }
            "response.function_call_arguments.delta" | "response.custom_tool_call_input.delta" => {
                let fragment = str_of(event.get("delta"));
                if let Some(call) = index.and_then(|index| self.calls.get_mut(&index))
                    && !fragment.is_empty()
                {
                    call.arguments.push_str(fragment);
                    out.push(ModelEvent::ToolCallDelta {
                        index: call.position,
                        name: None,
                        arguments: fragment.to_owned(),
                    });
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if event.get("type").and_then(Value::as_str) == Some("response.refusal.delta") {
                    self.refused = true;
                }
                if let Some(index) = index {
                    self.streamed.insert(index);
                }
                push_text(&mut out, event.get("delta"), ModelEvent::TextDelta);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let part = (
                    index.unwrap_or(0),
                    event
                        .get("summary_index")
                        .or_else(|| event.get("content_index"))
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                );
                if self.last_part.is_some_and(|last| last != part) {
                    out.push(ModelEvent::ReasoningDelta("\n\n".to_owned()));
                }
                self.last_part = Some(part);
                push_text(&mut out, event.get("delta"), ModelEvent::ReasoningDelta);
            }
            "response.output_item.done" => {
                let item = event.get("item").unwrap_or(&Value::Null);
                self.item_done(index, item, &mut out);
            }
            "response.completed" => {
                let response = event.get("response").unwrap_or(&Value::Null);
                out.extend(self.end(response, FinishReason::Stop));
            }
            "response.incomplete" => {
                let response = event.get("response").unwrap_or(&Value::Null);
                let reason = match response
                    .pointer("/incomplete_details/reason")
                    .and_then(Value::as_str)
                {
                    Some("max_output_tokens") => FinishReason::Length,
                    Some("content_filter") => FinishReason::ContentFilter,
                    Some(other) => FinishReason::Other(other.to_owned()),
                    None => FinishReason::Other("incomplete".to_owned()),
                };
                out.extend(self.end(response, reason));
            }
            "response.failed" => {
                self.done = true;
                let error = event.pointer("/response/error").unwrap_or(&Value::Null);
                return Err(failure(error));
            }
            "error" => {
                self.done = true;
                // `{error: {code, message}}`, or (older servers) the fields at the top.
                let error = event
                    .get("error")
                    .filter(|e| e.is_object())
                    .unwrap_or(&event);
                return Err(failure(error));
            }
            // `response.created`, `.in_progress`, part and `.done` events whose content the
            // deltas and items already gave, and kinds added after this was written.
            _ => {}
        }
        Ok(out)
    }

    fn item_done(&mut self, index: Option<u64>, item: &Value, out: &mut Vec<ModelEvent>) {
        match str_of(item.get("type")) {
            kind @ ("function_call" | "custom_tool_call") => {
                let open = index.and_then(|index| self.calls.remove(&index));
                let position = open.as_ref().map(|call| call.position);
                let streamed = open.map(|call| call.arguments).unwrap_or_default();
                if position.is_none() {
                    // A call that was never announced: it still counts.
                    self.call_count += 1;
                }
                let field = if kind == "function_call" {
                    "arguments"
                } else {
                    "input"
                };
                let raw = item
                    .get(field)
                    .and_then(Value::as_str)
                    .filter(|raw| !raw.is_empty())
                    .map_or(streamed, str::to_owned);
                let arguments = if kind == "custom_tool_call" {
                    // A freeform tool's input is plain text; jucode's tools read objects.
                    json!({ "input": raw }).to_string()
                } else if raw.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    raw
                };
                out.push(ModelEvent::ToolCall(ToolCall {
                    id: str_of(item.get("call_id")).to_owned(),
                    name: str_of(item.get("name")).to_owned(),
                    arguments,
                }));
            }
            "message" => {
                // Text normally arrived as deltas; a server that sends only the finished
                // item still has it shown.
                if let Value::Object(map) = item {
                    // Kept to be resent as it is (its `phase` tells the model which
                    // messages were commentary), without id and status.
                    let mut map = map.clone();
                    map.remove("id");
                    map.remove("status");
                    out.push(ModelEvent::ProviderItem {
                        api: API,
                        json: Value::Object(map).to_string(),
                    });
                }
                if index.is_none_or(|index| !self.streamed.contains(&index)) {
                    for part in item
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if part.get("refusal").is_some() {
                            self.refused = true;
                        }
                        let text = part.get("text").or_else(|| part.get("refusal"));
                        push_text(out, text, ModelEvent::TextDelta);
                    }
                }
            }
            "" => {}
            // Reasoning (with the `.done` item's `encrypted_content`, which differs from
            // the `.added` one) and items we do not know: kept and resent, without the
            // ids and status that only mean something to a server that stores them.
            // Without its encrypted content (not asked for) a reasoning item means
            // nothing to a server that stores nothing: not kept.
            "reasoning"
                if item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty) => {}
            _ => {
                if let Value::Object(map) = item {
                    let mut map = map.clone();
                    map.remove("id");
                    map.remove("status");
                    out.push(ModelEvent::ProviderItem {
                        api: API,
                        json: Value::Object(map).to_string(),
                    });
                }
            }
        }
    }

    /// The body ended. Without a terminal event the reply is incomplete: a transient
    /// failure, so the engine may try again.
    pub(crate) fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done {
            return Ok(Vec::new());
        }
        Err(ModelError::transient(
            "the model stream ended before response.completed",
            None,
        ))
    }

    fn end(&mut self, response: &Value, reason: FinishReason) -> Vec<ModelEvent> {
        self.done = true;
        let usage = response.get("usage").unwrap_or(&Value::Null);
        let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
        let reason = match reason {
            FinishReason::Stop if self.call_count > 0 => FinishReason::ToolCalls,
            FinishReason::Stop if self.refused => FinishReason::ContentFilter,
            reason => reason,
        };
        vec![
            ModelEvent::Usage(TurnUsage {
                // `cached_tokens` is part of `input_tokens` already.
                input_tokens: count("/input_tokens"),
                cached_input_tokens: count("/input_tokens_details/cached_tokens"),
                // Some servers (GitHub Copilot's) also say what was written to the cache.
                cache_write_input_tokens: count("/input_tokens_details/cache_write_tokens"),
                output_tokens: count("/output_tokens"),
                reasoning_tokens: count("/output_tokens_details/reasoning_tokens"),
            }),
            ModelEvent::Finished(reason),
        ]
    }
}

/// A `response.failed` (or `error` event) error object as a [`ModelError`].
fn failure(error: &Value) -> ModelError {
    let code = error
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| error.get("type").and_then(Value::as_str))
        .unwrap_or("");
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the model reported a failure");
    match code {
        "context_length_exceeded" => ModelError::too_long(format!(
            "the conversation no longer fits the model's context window ({message}): \
             /compact it, or start a new session"
        )),
        "insufficient_quota" => {
            ModelError::fatal(format!("the account's quota is used up: {message}"))
        }
        "rate_limit_exceeded" => {
            ModelError::transient(format!("rate limited: {message}"), try_again_in(message))
        }
        "" => ModelError::transient(message.to_owned(), None),
        code => ModelError::transient(format!("{code}: {message}"), None),
    }
}

/// The delay in "... Please try again in 1.5s." (or `in 20ms`).
fn try_again_in(message: &str) -> Option<Duration> {
    let rest = &message[message.find("try again in ")? + "try again in ".len()..];
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let value: f64 = number.parse().ok()?;
    let unit = &rest[number.len()..];
    let seconds = if unit.starts_with("ms") {
        value / 1000.0
    } else if unit.starts_with('s') {
        value
    } else if unit.starts_with('m') {
        value * 60.0
    } else {
        return None;
    };
    Duration::try_from_secs_f64(seconds).ok()
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
#[path = "responses_tests.rs"]
mod tests;
