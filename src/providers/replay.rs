//! Scripted model replies: the offline demo and a test double for everything above.
//!
//! A front-end or an integration test needs a model that answers without a network, an
//! API key or a bill, yet streams like a real one (reasoning, text, tool calls, usage,
//! failures). A script is JSONL, one reply per line, consumed in order, one per request:
//!
//! ```json
//! {"reasoning": "Look first.", "text": "Listing.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}
//! {"error": "overloaded", "retryable": true}
//! {"text": "Done.", "usage": {"prompt_tokens": 900, "completion_tokens": 12}, "delay_ms": 20, "chunk": 2}
//! ```
//!
//! The script is read on the first request, not when the model is resolved, so picking
//! a model stays cheap and a missing file is reported where the user sees it: as the
//! turn's error. Without a script the client plays the built-in demo, which answers
//! from the conversation so it needs no state at all.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{self, BoxFuture, FutureExt};
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::engine::{
    ChatRequest, FinishReason, Message, ModelClient, ModelError, ModelEvent, ModelStream, ToolCall,
};
use crate::protocol::TurnUsage;

/// A model that plays a script, or the built-in demo. Its position in the script is
/// per instance: every resolved model starts from the first reply.
#[derive(Clone)]
pub struct ReplayClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None`: the built-in demo.
    script: Option<PathBuf>,
    replies: OnceCell<Arc<[Reply]>>,
    position: Mutex<usize>,
    next_call_id: AtomicU64,
}

/// One line of a script.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    text: Option<String>,
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptedCall>,
    usage: Option<ScriptedUsage>,
    /// Pause before every delta after the first, in milliseconds.
    #[serde(default)]
    delay_ms: u64,
    /// Characters per delta; 0 sends each text whole.
    chunk: Option<usize>,
    /// Fail the request with this message instead of replying.
    error: Option<String>,
    #[serde(default)]
    retryable: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    name: String,
    /// An object, or JSON text as a string.
    #[serde(default)]
    arguments: Value,
    id: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    reasoning_tokens: u64,
}

const DEFAULT_CHUNK: usize = 4;

impl ReplayClient {
    /// Plays `path` (JSONL), read on the first request.
    pub fn from_script(path: impl Into<PathBuf>) -> Self {
        Self::with_script(Some(path.into()))
    }

    /// The built-in demo: a tool call, then an explanation, and again.
    pub fn demo() -> Self {
        Self::with_script(None)
    }

    fn with_script(script: Option<PathBuf>) -> Self {
        Self {
            inner: Arc::new(Inner {
                script,
                replies: OnceCell::new(),
                position: Mutex::new(0),
                next_call_id: AtomicU64::new(1),
            }),
        }
    }
}

impl ModelClient for ReplayClient {
    fn stream(&self, request: &ChatRequest) -> BoxFuture<'static, Result<ModelStream, ModelError>> {
        let inner = Arc::clone(&self.inner);
        // Ids this conversation has already seen are never handed out again: a session
        // resumed in a new process (a new client, counting from 1) keeps its calls'
        // ids unique, so a client keying cards by id never mixes two calls.
        inner
            .next_call_id
            .fetch_max(first_unused_call_number(request), Ordering::Relaxed);
        let Some(path) = inner.script.clone() else {
            let reply = demo_reply(request);
            return future::ready(Ok(inner.play(reply))).boxed();
        };
        async move {
            let replies = inner.replies.get_or_try_init(|| load_script(&path)).await?;
            let reply = {
                let mut position = inner
                    .position
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let reply = replies.get(*position).cloned();
                *position += 1;
                reply
            };
            let reply = reply.ok_or_else(|| {
                ModelError::fatal(format!(
                    "replay script {} has no reply left: it had {} {}",
                    path.display(),
                    replies.len(),
                    if replies.len() == 1 {
                        "reply"
                    } else {
                        "replies"
                    },
                ))
            })?;
            if let Some(message) = reply.error {
                return Err(if reply.retryable {
                    ModelError::transient(message, None)
                } else {
                    ModelError::fatal(message)
                });
            }
            Ok(inner.play(reply))
        }
        .boxed()
    }
}

/// One more than the highest `call_N` among the calls of `request`'s conversation.
fn first_unused_call_number(request: &ChatRequest) -> u64 {
    request
        .messages()
        .filter_map(|message| match message {
            Message::Assistant { tool_calls, .. } => Some(tool_calls),
            _ => None,
        })
        .flatten()
        .filter_map(|call| call.id.strip_prefix("call_")?.parse::<u64>().ok())
        .max()
        .map_or(1, |highest| highest + 1)
}

impl Inner {
    /// The events of one reply, paced by its `delay_ms`. Deltas are cut from the reply
    /// text as the stream is polled, so a long scripted reply costs its text, not one
    /// allocation per delta up front.
    fn play(&self, reply: Reply) -> ModelStream {
        let chunk = reply.chunk.unwrap_or(DEFAULT_CHUNK);
        let mut tail: Vec<ModelEvent> = Vec::new();
        let has_calls = !reply.tool_calls.is_empty();
        let mut calls = Vec::new();
        for (index, call) in reply.tool_calls.into_iter().enumerate() {
            let id = call.id.unwrap_or_else(|| {
                format!("call_{}", self.next_call_id.fetch_add(1, Ordering::Relaxed))
            });
            let arguments = match call.arguments {
                Value::Null => "{}".to_owned(),
                Value::String(text) => text,
                other => other.to_string(),
            };
            // Arguments stream in pieces first, as a real provider sends them, so a
            // plan being written shows up as drafts.
            let mut name = Some(call.name.clone());
            for piece in split(&arguments, chunk.max(1) * 8) {
                tail.push(ModelEvent::ToolCallDelta {
                    index,
                    name: name.take(),
                    arguments: piece.to_owned(),
                });
            }
            calls.push(ModelEvent::ToolCall(ToolCall {
                id,
                name: call.name,
                arguments,
            }));
        }
        tail.extend(calls);
        if let Some(usage) = reply.usage {
            tail.push(ModelEvent::Usage(TurnUsage {
                input_tokens: usage.prompt_tokens,
                cached_input_tokens: usage.cached_tokens,
                cache_write_input_tokens: 0,
                output_tokens: usage.completion_tokens,
                reasoning_tokens: usage.reasoning_tokens,
            }));
        }
        let reason = if has_calls {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        };
        tail.push(ModelEvent::Finished(reason));
        let events = Playback {
            reasoning: reply.reasoning.unwrap_or_default(),
            text: reply.text.unwrap_or_default(),
            offset: 0,
            in_text: false,
            chunk,
            tail: tail.into_iter(),
        };

        let delay = Duration::from_millis(reply.delay_ms);
        if delay.is_zero() {
            return stream::iter(events.map(Ok)).boxed();
        }
        stream::unfold((events, true), move |(mut events, first)| async move {
            let event = events.next()?;
            let is_delta = matches!(
                event,
                ModelEvent::ReasoningDelta(_) | ModelEvent::TextDelta(_)
            );
            if is_delta && !first {
                tokio::time::sleep(delay).await;
            }
            Some((Ok(event), (events, false)))
        })
        .boxed()
    }
}

/// The events of one scripted reply, in order: reasoning deltas, text deltas, then the
/// rest (tool calls, usage, finish).
struct Playback {
    reasoning: String,
    text: String,
    /// Byte offset of the next delta in the current text.
    offset: usize,
    in_text: bool,
    chunk: usize,
    tail: std::vec::IntoIter<ModelEvent>,
}

impl Iterator for Playback {
    type Item = ModelEvent;

    fn next(&mut self) -> Option<ModelEvent> {
        loop {
            let source = if self.in_text {
                &self.text
            } else {
                &self.reasoning
            };
            if let Some(piece) = split(&source[self.offset..], self.chunk).next() {
                self.offset += piece.len();
                let piece = piece.to_owned();
                return Some(if self.in_text {
                    ModelEvent::TextDelta(piece)
                } else {
                    ModelEvent::ReasoningDelta(piece)
                });
            }
            if self.in_text {
                return self.tail.next();
            }
            self.in_text = true;
            self.offset = 0;
        }
    }
}

/// `text` in pieces of `size` characters (never splitting one); 0 means whole.
fn split(text: &str, size: usize) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = match size {
            0 => rest.len(),
            size => rest
                .char_indices()
                .nth(size)
                .map_or(rest.len(), |(at, _)| at),
        };
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

async fn load_script(path: &Path) -> Result<Arc<[Reply]>, ModelError> {
    let text = tokio::fs::read_to_string(path).await.map_err(|err| {
        ModelError::fatal(format!(
            "cannot read replay script {}: {err}",
            path.display()
        ))
    })?;
    parse_script(path, &text)
}

fn parse_script(path: &Path, text: &str) -> Result<Arc<[Reply]>, ModelError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            serde_json::from_str::<Reply>(line).map_err(|err| {
                ModelError::fatal(format!(
                    "replay script {} line {}: {err}",
                    path.display(),
                    number + 1
                ))
            })
        })
        .collect()
}

/// The demo answers from the conversation: after a tool result it explains itself,
/// otherwise it looks at the project. So it alternates within a session, and a fresh
/// client (or a retry) never loses its place.
fn demo_reply(request: &ChatRequest) -> Reply {
    let after_tool = matches!(request.messages().next_back(), Some(Message::Tool { .. }));
    let mut reply = if after_tool {
        Reply {
            text: Some(DEMO_EXPLANATION.to_owned()),
            ..Reply::default()
        }
    } else {
        Reply {
            reasoning: Some(
                "The user wants help with their project. I don't know what is in it yet, \
                 so let me look at the project first."
                    .to_owned(),
            ),
            text: Some("Let me look at the project first.".to_owned()),
            tool_calls: vec![ScriptedCall {
                name: "list_dir".to_owned(),
                arguments: json!({"path": "."}),
                id: None,
            }],
            ..Reply::default()
        }
    };
    let completion: usize = [&reply.reasoning, &reply.text]
        .into_iter()
        .flatten()
        .map(|text| text.chars().count())
        .chain(
            reply
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.to_string().len()),
        )
        .sum();
    reply.usage = Some(ScriptedUsage {
        prompt_tokens: estimate_tokens(prompt_chars(request)),
        completion_tokens: estimate_tokens(completion),
        ..ScriptedUsage::default()
    });
    reply.chunk = Some(DEFAULT_CHUNK);
    reply.delay_ms = 8;
    reply
}

const DEMO_EXPLANATION: &str = "This is jucode's offline replay demo: these replies are \
scripted, not written by a model. I just listed the working directory with the `list_dir` \
tool to show how a tool call works.\n\nTo talk to a real model, set `OPENAI_API_KEY`, or set \
`model = \"<provider>/<model>\"` and add a `[providers.<provider>]` table to your \
config.toml; see docs/configuration.md.";

/// A rough token count: about four characters per token.
fn estimate_tokens(chars: usize) -> u64 {
    chars.div_ceil(4) as u64
}

fn prompt_chars(request: &ChatRequest) -> usize {
    let messages: usize = request
        .messages()
        .map(|message| match message {
            Message::User { text, .. } => text.chars().count(),
            Message::Assistant {
                text, tool_calls, ..
            } => {
                text.chars().count()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.chars().count())
                        .sum::<usize>()
            }
            Message::Tool { output, .. } => output.chars().count(),
        })
        .sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|tool| tool.name.len() + tool.description.len() + tool.parameters.to_string().len())
        .sum();
    request.system.chars().count() + messages + tools
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
