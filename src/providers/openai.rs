//! OpenAI Chat Completions over HTTP and server-sent events.
//!
//! Chat Completions is the one API nearly every server speaks (OpenAI, OpenRouter, vLLM,
//! Ollama, llama.cpp, DeepSeek ...), so this client is the workhorse. It does one attempt
//! and classifies failures; retrying is the engine's job. The request body is encoded
//! synchronously inside [`ModelClient::stream`] so the returned future owns everything it
//! needs and the engine keeps its conversation. Chunk parsing lives in [`super::sse`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::future::{self, BoxFuture, FutureExt};
use futures_util::stream::{self, BoxStream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use super::sse::{self, ChunkParser};
use crate::engine::{ChatRequest, Message, ModelClient, ModelError, ModelEvent, ModelStream};

/// How long to wait for a TCP/TLS connection unless the provider says otherwise.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Statuses worth retrying: timeouts, conflicts, rate limits, overload, server errors.
const RETRYABLE_STATUS: [u16; 9] = [408, 409, 425, 429, 500, 502, 503, 504, 529];

/// How much of an error body we read: enough for any provider message.
const ERROR_BODY_CAP: usize = 64 * 1024;

/// A Chat Completions endpoint. Cheap to build; all clients share one connection pool.
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    provider: String,
    endpoint: String,
    api_key: Option<String>,
    headers: HeaderMap,
    include_usage: bool,
    connect_timeout: Duration,
    /// Set when every request must fail (no API key, a bad header in the config).
    unusable: Option<String>,
}

impl OpenAiClient {
    /// A client for `{base_url}/chat/completions`. `provider` names it in messages.
    pub fn new(provider: impl Into<String>, base_url: &str) -> Self {
        Self {
            provider: provider.into(),
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            api_key: None,
            headers: HeaderMap::new(),
            include_usage: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            unusable: None,
        }
    }

    /// Sends `Authorization: Bearer <key>` when set; local servers often need none.
    pub fn api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key.filter(|key| !key.is_empty());
        self
    }

    /// Extra headers for every request; they override the client's own.
    pub fn headers(mut self, headers: &BTreeMap<String, String>) -> Self {
        for (name, value) in headers {
            let parsed = HeaderName::from_bytes(name.as_bytes())
                .map_err(|err| err.to_string())
                .and_then(|name| {
                    HeaderValue::from_str(value)
                        .map(|value| (name, value))
                        .map_err(|err| err.to_string())
                });
            match parsed {
                Ok((name, value)) => {
                    self.headers.insert(name, value);
                }
                Err(err) => {
                    let message = format!(
                        "invalid header {name:?} in [providers.{}]: {err}",
                        self.provider
                    );
                    self.unusable.get_or_insert(message);
                }
            }
        }
        self
    }

    /// Whether to ask for `stream_options.include_usage` (some servers reject it).
    pub fn include_usage(mut self, include: bool) -> Self {
        self.include_usage = include;
        self
    }

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether the endpoint needs TLS (anything but plain `http://`).
    fn needs_tls(&self) -> bool {
        !self.endpoint.starts_with("http://")
    }

    /// Makes every request fail at once with this (fatal) message.
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
        let body = serde_json::to_vec(&request_body(request, self.include_usage))
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
                    return Err(classify_status(refused.status, retry_after, &refused.body));
                }
            };
            let is_json = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| value.starts_with("application/json"));
            if is_json {
                return whole_reply(response).await;
            }
            Ok(reply_stream(response))
        }
        .boxed())
    }
}

impl ModelClient for OpenAiClient {
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

/// The process-wide HTTP clients, one per connect timeout and TLS need (in practice one
/// or two): sharing them shares the connection pool, so a session's requests reuse warm
/// connections. Plain `http://` endpoints (local servers) get a client without the
/// system's root certificates, whose loading costs several milliseconds.
/// The headers of a streamed JSON request: content type, `text/event-stream`, the API
/// key (when there is one) under `key_header` as `key_value(key)` makes it, then the
/// provider's configured `extra` headers (which win).
pub(crate) fn stream_headers(
    provider: &str,
    key: Option<&str>,
    key_header: HeaderName,
    key_value: fn(&str) -> String,
    extra: &HeaderMap,
) -> Result<HeaderMap, ModelError> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    if let Some(key) = key {
        let value = HeaderValue::from_str(&key_value(key)).map_err(|_| {
            ModelError::fatal(format!(
                "the API key of provider {provider:?} contains characters not allowed in a header"
            ))
        })?;
        headers.insert(key_header, value);
    }
    headers.extend(extra.clone());
    Ok(headers)
}

/// A response whose status is not 2xx, for the API's own classification.
pub(crate) struct Refused {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

/// Sends `pending` (a request to `endpoint`): the response when its status is 2xx, else
/// what refused it (its body read up to a bound).
pub(crate) async fn send(
    pending: reqwest::RequestBuilder,
    endpoint: &str,
) -> Result<Result<reqwest::Response, Refused>, ModelError> {
    let response = pending
        .send()
        .await
        .map_err(|err| request_error(err, &format!("request to {endpoint} failed")))?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(Ok(response));
    }
    let headers = response.headers().clone();
    let body = read_capped(response).await;
    Ok(Err(Refused {
        status,
        headers,
        body,
    }))
}

pub(crate) fn http_client(
    connect_timeout: Duration,
    tls: bool,
) -> Result<reqwest::Client, ModelError> {
    type Clients = HashMap<(Duration, bool), reqwest::Client>;
    static CLIENTS: OnceLock<Mutex<Clients>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(|| {
        // Already installed (by us or the embedding program) is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Mutex::default()
    });
    let mut clients = clients.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(client) = clients.get(&(connect_timeout, tls)) {
        return Ok(client.clone());
    }
    let mut builder = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .https_only(false)
        .user_agent(concat!("jucode/", env!("CARGO_PKG_VERSION")));
    if !tls {
        builder = builder.tls_certs_only(std::iter::empty());
    }
    let client = builder
        .build()
        .map_err(|err| request_error(err, "cannot set up the HTTP client"))?;
    clients.insert((connect_timeout, tls), client.clone());
    Ok(client)
}

/// The JSON body of one Chat Completions request.
pub(crate) fn request_body(request: &ChatRequest, include_usage: bool) -> Value {
    let mut messages = Vec::with_capacity(request.conversation.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": &*request.system}));
    }
    // A reply that held only another API's items (reasoning cut short, say) has
    // nothing to say here, and an empty assistant message is refused by some servers.
    let said = |message: &&Message| {
        !matches!(message, Message::Assistant { text, tool_calls, .. }
            if text.is_empty() && tool_calls.is_empty())
    };
    messages.extend(request.messages().filter(said).map(message_json));
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    if include_usage {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(effort) = &request.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    Value::Object(body)
}

fn message_json(message: &Message) -> Value {
    match message {
        Message::User { text, images } if images.is_empty() => {
            json!({"role": "user", "content": text})
        }
        Message::User { text, images } => {
            let mut parts = Vec::with_capacity(images.len() + 1);
            if !text.is_empty() {
                parts.push(json!({"type": "text", "text": text}));
            }
            parts.extend(images.iter().map(|image| {
                let url = format!("data:{};base64,{}", image.mime, image.base64);
                json!({"type": "image_url", "image_url": {"url": url}})
            }));
            json!({"role": "user", "content": parts})
        }
        // Reasoning is not sent back: Chat Completions has no field for it.
        Message::Assistant {
            text, tool_calls, ..
        } => {
            let mut object = Map::new();
            object.insert("role".into(), json!("assistant"));
            let content = if text.is_empty() && !tool_calls.is_empty() {
                Value::Null
            } else {
                json!(text)
            };
            object.insert("content".into(), content);
            if !tool_calls.is_empty() {
                let calls = tool_calls
                    .iter()
                    .map(|call| {
                        json!({
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        })
                    })
                    .collect();
                object.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(object)
        }
        Message::Tool {
            call_id, output, ..
        } => json!({"role": "tool", "tool_call_id": call_id, "content": output}),
    }
}

/// A non-2xx response as a [`ModelError`]: `HTTP <status>: <provider message>`.
pub(crate) fn classify_status(
    status: u16,
    retry_after: Option<Duration>,
    body: &str,
) -> ModelError {
    let detail = provider_message(body).unwrap_or_else(|| {
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|status| status.canonical_reason())
            .unwrap_or("no details")
            .to_owned()
    });
    let message = format!("HTTP {status}: {detail}");
    if too_long(body) {
        return ModelError::too_long(message);
    }
    if RETRYABLE_STATUS.contains(&status) {
        ModelError::transient(message, retry_after)
    } else {
        ModelError::fatal(message)
    }
}

/// Whether an error body says the prompt does not fit the model's context window:
/// OpenAI's `context_length_exceeded` code, Anthropic's "prompt is too long".
fn too_long(body: &str) -> bool {
    let Ok(value) = serde_json::from_str::<Value>(body.trim()) else {
        return false;
    };
    let error = value.get(0).unwrap_or(&value).get("error");
    let field = |key: &str| error.and_then(|e| e.get(key)).and_then(Value::as_str);
    field("code") == Some("context_length_exceeded")
        || field("message").is_some_and(|message| message.starts_with("prompt is too long"))
}

/// The human part of an error body: `error.message`, `error` as a string, or `message`;
/// else the raw text, shortened.
fn provider_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        // Some servers wrap the error object in an array.
        let value = value.get(0).unwrap_or(&value);
        let found = value
            .pointer("/error/message")
            .and_then(Value::as_str)
            .or_else(|| value.get("error").and_then(Value::as_str))
            .or_else(|| value.get("message").and_then(Value::as_str))
            .map(str::trim)
            .filter(|message| !message.is_empty());
        if let Some(message) = found {
            return Some(super::truncate(message, 2000));
        }
    }
    Some(super::truncate(body, 500))
}

/// `retry-after-ms` (milliseconds), else `retry-after` (seconds, or an HTTP date).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let value = header("retry-after")?.trim();
    match parse_non_negative(value) {
        Some(seconds) => Duration::try_from_secs_f64(seconds).ok(),
        None => {
            let at = parse_http_date(value)?;
            Some(at.duration_since(now).unwrap_or(Duration::ZERO))
        }
    }
}

fn parse_non_negative(text: &str) -> Option<f64> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0)
}

/// The IMF-fixdate form of an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`), the only
/// one servers still send.
fn parse_http_date(text: &str) -> Option<SystemTime> {
    let mut parts = text.split_whitespace().skip(1);
    let day: u64 = parts.next()?.parse().ok()?;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as u64 + 1;
    let year: u64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':').map(|n| n.parse::<u64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if parts.next()? != "GMT" || year < 1970 || !(1..=31).contains(&day) {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = (era * 146_097 + day_of_era).checked_sub(719_468)?;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// Reads at most [`ERROR_BODY_CAP`] bytes of an error body, giving up after 30 s: the
/// status alone is enough to report.
pub(crate) async fn read_capped(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = ERROR_BODY_CAP - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= ERROR_BODY_CAP {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), read).await;
    String::from_utf8_lossy(&body).into_owned()
}

/// A reqwest failure: a request that could not be built is permanent; anything else
/// (connect, TLS, timeout, reset) is worth another try.
/// `context` says which request failed; the URL is left out of reqwest's own text,
/// which would repeat it ("request to URL failed: error sending request for url (URL)").
pub(crate) fn request_error(err: reqwest::Error, context: &str) -> ModelError {
    let builder = err.is_builder();
    let err = err.without_url();
    let message = format!("{context}: {}", error_chain(&err));
    if builder {
        ModelError::fatal(message)
    } else {
        ModelError::transient(message, None)
    }
}

/// An error with its causes: reqwest's own message alone rarely says what went wrong.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

type SseEvents<E> = BoxStream<'static, Result<Event, EventStreamError<E>>>;

/// The state of a reply stream between polls.
struct Reply<E> {
    events: SseEvents<E>,
    parser: ChunkParser,
    ready: VecDeque<Result<ModelEvent, ModelError>>,
    ended: bool,
}

fn reply_stream(response: reqwest::Response) -> ModelStream {
    sse_reply(response.bytes_stream())
}

/// The events of a reply's body, however its bytes are cut into chunks.
pub(crate) fn sse_reply<E>(
    body: impl futures_util::Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> ModelStream
where
    E: std::error::Error + Send + 'static,
{
    // A blank line at the end dispatches a last event the server did not terminate
    // (the SSE parser would drop it), typically a bare `data: [DONE]`.
    let terminator = stream::once(future::ready(Ok(Bytes::from_static(b"\n\n"))));
    let reply = Reply {
        events: body.chain(terminator).eventsource().boxed(),
        parser: ChunkParser::new(),
        ready: VecDeque::new(),
        ended: false,
    };
    stream::unfold(reply, |mut reply| async move {
        loop {
            if let Some(item) = reply.ready.pop_front() {
                return Some((item, reply));
            }
            if reply.ended {
                return None;
            }
            let outcome = match reply.events.next().await {
                Some(Ok(event)) if sse::is_done(&event.data) => {
                    reply.ended = true;
                    reply.parser.finish(true)
                }
                Some(Ok(event)) => reply.parser.push(&event.data),
                Some(Err(err)) => Err(stream_failure(err)),
                None => {
                    reply.ended = true;
                    reply.parser.finish(false)
                }
            };
            match outcome {
                Ok(events) => reply.ready.extend(events.into_iter().map(Ok)),
                Err(err) => {
                    reply.ended = true;
                    reply.ready.push_back(Err(err));
                }
            }
        }
    })
    .boxed()
}

/// A server that ignores `stream: true` answers with one JSON completion; its
/// `message` parses like a single delta.
async fn whole_reply(response: reqwest::Response) -> Result<ModelStream, ModelError> {
    let body = response
        .bytes()
        .await
        .map_err(|err| request_error(err, "cannot read the reply"))?;
    let mut parser = ChunkParser::new();
    let mut events = parser.push(&String::from_utf8_lossy(&body))?;
    events.extend(parser.finish(false)?);
    Ok(stream::iter(events.into_iter().map(Ok)).boxed())
}

pub(crate) fn stream_failure<E: std::error::Error>(err: EventStreamError<E>) -> ModelError {
    let detail = match err {
        EventStreamError::Transport(err) => error_chain(&err),
        other => other.to_string(),
    };
    ModelError::transient(format!("model stream interrupted: {detail}"), None)
}

#[cfg(test)]
#[path = "openai_tests.rs"]
mod tests;
