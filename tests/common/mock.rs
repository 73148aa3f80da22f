//! A loopback model server the tests own: OpenAI Chat Completions over SSE, with
//! scripted replies served in order, per-chunk pacing, gates the test opens to release
//! the rest of a reply, HTTP failures and mid-stream disconnects.
//!
//! It runs on its own runtime thread so tests can stay plain blocking `#[test]`s that
//! drive the `jucode` binary line by line.
//!
//! It is strict, as a test double should be: a request nobody scripted a reply for is
//! answered with a 500 *and* fails the test, and so does a scripted reply left unused
//! when the mock is dropped (the test expected a request that never came).
//!
//! Replies can be routed: those pushed with [`MockModel::push_for`] answer only requests
//! whose system prompt contains their marker (a subagent's id line, say), in their own
//! order; the others answer the requests that match no marker. Several agents' requests
//! may then come in any order, and each still gets its own script.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, channel::Channel};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// One scripted answer to one request.
pub enum Reply {
    /// `200 text/event-stream`: each step is sent in order.
    Sse(Vec<Step>),
    /// A non-2xx answer.
    Status {
        code: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
}

pub enum Step {
    /// One `data: <json>` event.
    Data(Value),
    /// Raw bytes, for malformed-input cases.
    Raw(String),
    /// `data: [DONE]`.
    Done,
    Pause(Duration),
    /// Waits until the test opens the gate.
    Wait(Gate),
    /// Drops the connection without finishing the body.
    Cut,
}

/// A one-way latch the test opens to let a reply continue.
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Notify)>);

impl Gate {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn open(&self) {
        *self.0.0.lock().unwrap() = true;
        self.0.1.notify_waiters();
    }

    async fn wait(&self) {
        loop {
            let notified = self.0.1.notified();
            if *self.0.0.lock().unwrap() {
                return;
            }
            notified.await;
        }
    }
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// When the request's body was complete, for latency measurements.
    pub at: Instant,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The `messages` array of the request.
    pub fn messages(&self) -> &Vec<Value> {
        self.body["messages"].as_array().expect("messages array")
    }

    /// The `role` of every message, in order.
    pub fn roles(&self) -> Vec<&str> {
        self.messages()
            .iter()
            .map(|m| m["role"].as_str().expect("role"))
            .collect()
    }

    /// The names of the tools offered to the model.
    pub fn tool_names(&self) -> Vec<&str> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["function"]["name"].as_str())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn last_message(&self) -> &Value {
        self.messages().last().expect("at least one message")
    }

    /// The system prompt (the first message, when it is one).
    pub fn system(&self) -> &str {
        system_of(&self.body)
    }
}

fn system_of(body: &Value) -> &str {
    let first = &body["messages"][0];
    if first["role"] == "system" {
        first["content"].as_str().unwrap_or_default()
    } else {
        ""
    }
}

/// The last entry of a request's conversation as JSON text, whichever API it speaks
/// (`messages` for Chat Completions and Messages, `input` for Responses).
fn last_message_of(body: &Value) -> String {
    body["messages"]
        .as_array()
        .or_else(|| body["input"].as_array())
        .and_then(|messages| messages.last())
        .map(Value::to_string)
        .unwrap_or_default()
}

struct State {
    replies: VecDeque<Reply>,
    /// Replies for requests whose system prompt contains the marker.
    routes: Vec<(String, VecDeque<Reply>)>,
    /// Replies for every request whose last message contains the marker.
    standing: Vec<(String, fn() -> Reply)>,
    requests: Vec<Recorded>,
    /// Requests that found no scripted reply.
    unscripted: Vec<String>,
    /// When each streamed reply's last byte was handed to the connection.
    reply_ends: Vec<Instant>,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

pub struct MockModel {
    pub addr: SocketAddr,
    shared: Shared,
    _runtime: std::thread::JoinHandle<()>,
}

impl MockModel {
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let shared: Shared = Arc::new((
            Mutex::new(State {
                replies: VecDeque::new(),
                routes: Vec::new(),
                standing: Vec::new(),
                requests: Vec::new(),
                unscripted: Vec::new(),
                reply_ends: Vec::new(),
            }),
            Condvar::new(),
        ));
        let server = shared.clone();
        let runtime = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("mock runtime");
            rt.block_on(serve(listener, server));
        });
        Self {
            addr,
            shared,
            _runtime: runtime,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn push(&self, reply: Reply) {
        self.shared.0.lock().unwrap().replies.push_back(reply);
    }

    /// A reply made by `make` for every request whose last message contains `marker`,
    /// however many come (an agent's side requests, a title, which it makes when it
    /// likes); never asserted on, before any other script.
    pub fn answer_every(&self, marker: &str, make: fn() -> Reply) {
        self.shared
            .0
            .lock()
            .unwrap()
            .standing
            .push((marker.to_owned(), make));
    }

    /// A reply for the next request whose system prompt contains `marker` (or, when no
    /// marker is in its system prompt, whose last message does).
    pub fn push_for(&self, marker: &str, reply: Reply) {
        let mut state = self.shared.0.lock().unwrap();
        match state.routes.iter_mut().find(|(known, _)| known == marker) {
            Some((_, replies)) => replies.push_back(reply),
            None => state
                .routes
                .push((marker.to_owned(), VecDeque::from([reply]))),
        }
    }

    /// Blocks until the requests so far satisfy `done` (10 s at most, then fails the
    /// test naming `what`).
    pub fn wait_until(&self, what: &str, done: impl Fn(&[Recorded]) -> bool) -> Vec<Recorded> {
        let (lock, arrived) = &*self.shared;
        let state = lock.lock().unwrap();
        let (state, timeout) = arrived
            .wait_timeout_while(state, Duration::from_secs(10), |s| !done(&s.requests))
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "never: {what} ({} requests)",
            state.requests.len()
        );
        state.requests.clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.0.lock().unwrap().requests.clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.0.lock().unwrap().requests.len()
    }

    /// Blocks until at least `n` requests arrived (10 s at most, then fails the test).
    pub fn wait_requests(&self, n: usize) -> Vec<Recorded> {
        let (lock, arrived) = &*self.shared;
        let state = lock.lock().unwrap();
        let (state, timeout) = arrived
            .wait_timeout_while(state, Duration::from_secs(10), |s| s.requests.len() < n)
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "expected {n} model requests, got {}",
            state.requests.len()
        );
        state.requests.clone()
    }

    /// When each streamed reply so far sent its last byte, in order.
    pub fn reply_ends(&self) -> Vec<Instant> {
        self.shared.0.lock().unwrap().reply_ends.clone()
    }

    pub fn unused_replies(&self) -> usize {
        let state = self.shared.0.lock().unwrap();
        state.replies.len() + state.routes.iter().map(|(_, r)| r.len()).sum::<usize>()
    }

    /// Drops the scripted replies nobody asked for: for tests that end a session on
    /// purpose before its requests.
    pub fn forget_unused(&self) {
        let mut state = self.shared.0.lock().unwrap();
        state.replies.clear();
        state.routes.clear();
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let state = self.shared.0.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            state.unscripted.is_empty(),
            "the mock model got requests nobody scripted a reply for: {:?}",
            state.unscripted
        );
        assert!(
            state.replies.is_empty(),
            "{} scripted repl{} never requested",
            state.replies.len(),
            if state.replies.len() == 1 {
                "y was"
            } else {
                "ies were"
            }
        );
        for (marker, replies) in &state.routes {
            assert!(
                replies.is_empty(),
                "{} scripted replies for {marker:?} never requested",
                replies.len()
            );
        }
    }
}

async fn serve(listener: std::net::TcpListener, shared: Shared) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // Each SSE event is its own small write: without this, Nagle holds every one
        // after the first until the client's delayed ACK (40 ms), which real servers do
        // not do and which would be measured as the engine's latency.
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(req, shared).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// OpenAI's rule, which jucode must keep in every request: an assistant message with
/// `tool_calls` is followed by tool messages answering each of its calls.
fn unanswered_call(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    for (index, message) in messages.iter().enumerate() {
        let Some(calls) = message["tool_calls"].as_array() else {
            continue;
        };
        let answered: Vec<&str> = messages[index + 1..]
            .iter()
            .take_while(|next| next["role"] == "tool")
            .filter_map(|next| next["tool_call_id"].as_str())
            .collect();
        for call in calls {
            let id = call["id"].as_str().unwrap_or_default();
            if !answered.contains(&id) {
                return Some(format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {id}"
                ));
            }
        }
    }
    None
}

async fn handle(req: Request<Incoming>, shared: Shared) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_owned()))
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // As strict as OpenAI: a conversation with an unanswered call is refused.
    if let Some(message) = unanswered_call(&body) {
        eprintln!("mock model: 400 {message}");
        let mut state = shared.0.lock().unwrap();
        state.requests.push(Recorded {
            path,
            headers,
            body,
            at: Instant::now(),
        });
        drop(state);
        shared.1.notify_all();
        let error = json!({"error": {"message": message, "type": "invalid_request_error",
            "param": "messages", "code": null}});
        return status(400, &error.to_string(), &[]);
    }
    let reply = {
        let mut state = shared.0.lock().unwrap();
        let system = system_of(&body);
        let mut routed: Vec<usize> = (0..state.routes.len())
            .filter(|&index| system.contains(state.routes[index].0.as_str()))
            .collect();
        // Side requests an agent makes on its own (a title, a summary) say what they
        // are in their last message, under the APIs that keep the system prompt apart.
        if routed.is_empty() {
            let last = last_message_of(&body);
            routed = (0..state.routes.len())
                .filter(|&index| last.contains(state.routes[index].0.as_str()))
                .collect();
        }
        let last = last_message_of(&body);
        let standing = state
            .standing
            .iter()
            .find(|(marker, _)| last.contains(marker.as_str()))
            .map(|(_, make)| make());
        let reply = match (standing, routed.as_slice()) {
            (Some(reply), _) => Some(reply),
            (None, []) => state.replies.pop_front(),
            (None, [index]) => state.routes[*index].1.pop_front(),
            // Two markers in one prompt: the script is ambiguous, a test bug.
            (None, _) => None,
        };
        if reply.is_none() {
            let last = body["messages"]
                .as_array()
                .and_then(|messages| messages.last())
                .map(|message| message.to_string())
                .unwrap_or_default();
            state
                .unscripted
                .push(format!("{path} (last message: {last})"));
        }
        state.requests.push(Recorded {
            path,
            headers,
            body,
            at: Instant::now(),
        });
        reply
    };
    shared.1.notify_all();
    match reply {
        None => status(
            500,
            r#"{"error":{"message":"mock: no reply scripted"}}"#,
            &[],
        ),
        Some(Reply::Status {
            code,
            body,
            headers,
        }) => status(code, &body, &headers),
        Some(Reply::Sse(steps)) => {
            let (mut tx, body) = Channel::<Bytes, std::io::Error>::new(64);
            let ends = shared.clone();
            tokio::spawn(async move {
                for step in steps {
                    let chunk = match step {
                        Step::Data(value) => format!("data: {value}\n\n"),
                        Step::Raw(raw) => raw,
                        Step::Done => "data: [DONE]\n\n".to_owned(),
                        Step::Pause(duration) => {
                            tokio::time::sleep(duration).await;
                            continue;
                        }
                        Step::Wait(gate) => {
                            gate.wait().await;
                            continue;
                        }
                        Step::Cut => {
                            tx.abort(std::io::Error::other("mock: connection cut"));
                            return;
                        }
                    };
                    if tx.send_data(Bytes::from(chunk)).await.is_err() {
                        return;
                    }
                }
                ends.0.lock().unwrap().reply_ends.push(Instant::now());
            });
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(body.boxed())
                .expect("response")
        }
    }
}

fn status(code: u16, body: &str, headers: &[(String, String)]) -> Response<Body> {
    let mut builder = Response::builder()
        .status(code)
        .header("content-type", "application/json");
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    builder
        .body(
            Full::new(Bytes::from(body.to_owned()))
                .map_err(|never| match never {})
                .boxed(),
        )
        .expect("response")
}

// ---- chunk builders ------------------------------------------------------------------

pub fn chunk(delta: Value) -> Step {
    Step::Data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "mock-1",
        "choices": [{"index": 0, "delta": delta, "finish_reason": null}]
    }))
}

pub fn finish(reason: &str) -> Step {
    Step::Data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "mock-1",
        "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]
    }))
}

pub fn usage(prompt: u64, completion: u64) -> Step {
    Step::Data(json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "mock-1", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": prompt / 2},
                  "completion_tokens_details": {"reasoning_tokens": completion / 5}}
    }))
}

pub fn text(text: &str) -> Step {
    chunk(json!({"content": text}))
}

pub fn reasoning(text: &str) -> Step {
    chunk(json!({"reasoning_content": text}))
}

pub fn tool_call(index: u32, id: &str, name: &str, arguments: &str) -> Step {
    chunk(
        json!({"tool_calls": [{"index": index, "id": id, "type": "function",
        "function": {"name": name, "arguments": arguments}}]}),
    )
}

/// An Anthropic Messages SSE body from its events (each JSON carries its `type`).
pub fn messages_sse(events: &[Value]) -> Reply {
    typed_sse(events)
}

/// An OpenAI Responses SSE body from its events (each JSON carries its `type`).
pub fn responses_sse(events: &[Value]) -> Reply {
    typed_sse(events)
}

/// `event: <type>` then `data: <json>` for each event, as both APIs frame them.
fn typed_sse(events: &[Value]) -> Reply {
    let body: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or("?")
            )
        })
        .collect();
    Reply::Sse(vec![Step::Raw(body)])
}

/// A complete text reply: `deltas` streamed, then finish, usage and `[DONE]`.
pub fn text_reply(deltas: &[&str]) -> Reply {
    let mut steps: Vec<Step> = deltas.iter().map(|d| text(d)).collect();
    steps.extend([finish("stop"), usage(100, 20), Step::Done]);
    Reply::Sse(steps)
}

/// A reply that only calls one tool.
pub fn tool_reply(id: &str, name: &str, arguments: Value) -> Reply {
    Reply::Sse(vec![
        tool_call(0, id, name, &arguments.to_string()),
        finish("tool_calls"),
        usage(50, 10),
        Step::Done,
    ])
}
