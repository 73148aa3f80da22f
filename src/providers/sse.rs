//! Turns the `data:` payloads of an OpenAI Chat Completions stream into [`ModelEvent`]s.
//!
//! This is pure (no I/O) so the messy part of speaking "OpenAI-compatible" can be tested
//! on recorded chunk sequences. Every server bends the format a little: vLLM and DeepSeek
//! stream `reasoning_content`, OpenRouter and Ollama `reasoning` (a string or an object),
//! some send a whole tool call in one chunk, repeat its id, or leave out `index`; usage
//! arrives in a chunk of its own *after* the one carrying `finish_reason`; Mistral sends
//! `content` as a list of typed parts, OpenAI a refusal in `refusal`. So the parser
//! tolerates anything it does not understand (a garbled chunk is logged and skipped) and
//! only decides at the end whether the reply is complete.

use serde_json::Value;

use crate::engine::{FinishReason, ModelError, ModelEvent, ToolCall};
use crate::protocol::TurnUsage;

/// The payload that ends an OpenAI stream.
pub const DONE: &str = "[DONE]";

/// Whether `data` is the end-of-stream marker.
pub fn is_done(data: &str) -> bool {
    data.trim() == DONE
}

/// Incremental state of one streamed reply.
#[derive(Debug, Default)]
pub struct ChunkParser {
    /// Tool calls in order of first appearance; their position is the `index` of the
    /// [`ModelEvent::ToolCallDelta`]s we emit, which stays unique even when a server
    /// numbers every call 0.
    calls: Vec<PartialCall>,
    usage: Option<TurnUsage>,
    finish_reason: Option<String>,
}

#[derive(Debug)]
struct PartialCall {
    /// The `index` the server gave the call, when it gave one.
    wire_index: Option<usize>,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl ChunkParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one event's `data`. Returns the deltas it carries; an error payload from the
    /// server becomes `Err`. Unparseable chunks are skipped.
    pub fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        let data = data.trim();
        if data.is_empty() || data == DONE {
            return Ok(Vec::new());
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(err) => {
                tracing::warn!(%err, chunk = %super::truncate(data, 200), "skipping unparseable model stream chunk");
                return Ok(Vec::new());
            }
        };
        if let Some(error) = chunk.get("error").filter(|error| !error.is_null()) {
            return Err(stream_error(error));
        }
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.usage = Some(parse_usage(usage));
        }
        let mut events = Vec::new();
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|choices| choices.first())
        else {
            return Ok(events);
        };
        // `message` is the non-streaming shape, which a few servers use for a last chunk.
        if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
            if let Some(reasoning) = reasoning_of(delta) {
                events.push(ModelEvent::ReasoningDelta(reasoning.to_owned()));
            }
            push_content(delta.get("content"), &mut events);
            // A refusal is the model's answer, only in another field: dropping it would
            // leave the user looking at an empty reply.
            if let Some(refusal) = non_empty_str(delta.get("refusal")) {
                events.push(ModelEvent::TextDelta(refusal.to_owned()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    self.push_call(call, &mut events);
                }
            }
        }
        if let Some(reason) = non_empty_str(choice.get("finish_reason")) {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(events)
    }

    /// Ends the reply, at `[DONE]` (`saw_done`) or when the connection closed. A reply
    /// is complete if the server said why it finished or sent `[DONE]`; otherwise the
    /// stream was cut short and trying again may help.
    pub fn finish(&mut self, saw_done: bool) -> Result<Vec<ModelEvent>, ModelError> {
        if self.finish_reason.is_none() && !saw_done {
            return Err(ModelError::transient(
                "model stream ended before the reply was complete",
                None,
            ));
        }
        let mut calls: Vec<(usize, PartialCall)> = std::mem::take(&mut self.calls)
            .into_iter()
            .enumerate()
            .collect();
        calls.sort_by_key(|(position, call)| (call.wire_index.unwrap_or(*position), *position));
        let has_calls = !calls.is_empty();
        let mut events: Vec<ModelEvent> = calls
            .into_iter()
            .map(|(_, call)| ModelEvent::ToolCall(call.into_tool_call()))
            .collect();
        if let Some(usage) = self.usage.take() {
            events.push(ModelEvent::Usage(usage));
        }
        let reason = match self.finish_reason.take() {
            Some(reason) => FinishReason::from_wire(&reason),
            None if has_calls => FinishReason::ToolCalls,
            None => FinishReason::Stop,
        };
        events.push(ModelEvent::Finished(reason));
        Ok(events)
    }

    fn push_call(&mut self, call: &Value, events: &mut Vec<ModelEvent>) {
        let index = call
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|index| usize::try_from(index).ok());
        let id = non_empty_str(call.get("id"));
        let function = call.get("function");
        let name = non_empty_str(function.and_then(|f| f.get("name")));
        let arguments = match function.and_then(|f| f.get("arguments")) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            // Some servers send the arguments as an object rather than JSON text.
            Some(other) => other.to_string(),
        };

        let slot = self.slot_for(index, id);
        let call = &mut self.calls[slot];
        if call.id.is_none() {
            call.id = id.map(str::to_owned);
        }
        let mut new_name = None;
        if call.name.is_empty()
            && let Some(name) = name
        {
            call.name = name.to_owned();
            new_name = Some(name.to_owned());
        }
        call.arguments.push_str(&arguments);
        if new_name.is_some() || !arguments.is_empty() {
            events.push(ModelEvent::ToolCallDelta {
                index: slot,
                name: new_name,
                arguments,
            });
        }
    }

    /// Which call a tool-call delta continues: the one with its id, else the one with its
    /// index, else (no index) the last one. A new id under an index already taken by a
    /// call with another id is a new call: some servers number every call 0.
    fn slot_for(&mut self, index: Option<usize>, id: Option<&str>) -> usize {
        if let Some(id) = id
            && let Some(position) = self.calls.iter().position(|c| c.id.as_deref() == Some(id))
        {
            return position;
        }
        match index {
            Some(index) => {
                if let Some(position) = self.calls.iter().rposition(|c| c.wire_index == Some(index))
                    && (id.is_none() || self.calls[position].id.is_none())
                {
                    return position;
                }
            }
            None if id.is_none() && !self.calls.is_empty() => return self.calls.len() - 1,
            None => {}
        }
        self.calls.push(PartialCall {
            wire_index: index,
            id: None,
            name: String::new(),
            arguments: String::new(),
        });
        self.calls.len() - 1
    }
}

impl PartialCall {
    fn into_tool_call(self) -> ToolCall {
        let id = self.id.unwrap_or_else(|| {
            let uuid = uuid::Uuid::new_v4().simple().to_string();
            format!("call_{}", &uuid[..24])
        });
        let arguments = if self.arguments.trim().is_empty() {
            "{}".to_owned()
        } else {
            self.arguments
        };
        ToolCall {
            id,
            name: self.name,
            arguments,
        }
    }
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value
        .and_then(Value::as_str)
        .filter(|text| !text.is_empty())
}

/// The deltas of a `content` field: a string (nearly every server), or a list of typed
/// parts (Mistral's magistral models), where `text` parts are reply text and `thinking`
/// parts (each a list of text parts) are reasoning. Parts keep their order; parts of
/// other types carry nothing we can show, so they are skipped.
fn push_content(content: Option<&Value>, events: &mut Vec<ModelEvent>) {
    let parts = match content {
        Some(Value::String(text)) if !text.is_empty() => {
            events.push(ModelEvent::TextDelta(text.clone()));
            return;
        }
        Some(Value::Array(parts)) => parts,
        _ => return,
    };
    for part in parts {
        match part.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(text) = non_empty_str(part.get("text")) {
                    events.push(ModelEvent::TextDelta(text.to_owned()));
                }
            }
            Some("thinking") => {
                let thinking = thinking_text(part.get("thinking"));
                if !thinking.is_empty() {
                    events.push(ModelEvent::ReasoningDelta(thinking));
                }
            }
            _ => {}
        }
    }
}

/// The text of a `thinking` part: its `text` sub-parts joined. A plain string is
/// accepted too, in case a server flattens the list.
fn thinking_text(thinking: Option<&Value>) -> String {
    match thinking {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// `reasoning_content` (vLLM, DeepSeek) wins over `reasoning` (OpenRouter, Ollama): a
/// server sending both sends the same text twice.
fn reasoning_of(delta: &Value) -> Option<&str> {
    non_empty_str(delta.get("reasoning_content")).or_else(|| match delta.get("reasoning") {
        Some(Value::String(text)) if !text.is_empty() => Some(text.as_str()),
        Some(object @ Value::Object(_)) => {
            non_empty_str(object.get("text")).or_else(|| non_empty_str(object.get("content")))
        }
        _ => None,
    })
}

fn parse_usage(usage: &Value) -> TurnUsage {
    let count = |pointer: &str| {
        usage.pointer(pointer).and_then(|value| {
            value
                .as_u64()
                .or_else(|| value.as_f64().filter(|n| *n >= 0.0).map(|n| n as u64))
        })
    };
    TurnUsage {
        input_tokens: count("/prompt_tokens").unwrap_or(0),
        cached_input_tokens: count("/prompt_tokens_details/cached_tokens")
            .or_else(|| count("/prompt_cache_hit_tokens"))
            .unwrap_or(0),
        cache_write_input_tokens: 0,
        output_tokens: count("/completion_tokens").unwrap_or(0),
        reasoning_tokens: count("/completion_tokens_details/reasoning_tokens").unwrap_or(0),
    }
}

/// An error the server reported inside the stream (or in an error body). Transient
/// when its code, type or message speaks of overload, rate limits, 5xx or timeouts.
pub(crate) fn stream_error(error: &Value) -> ModelError {
    let message = match error {
        Value::String(text) => text.trim().to_owned(),
        _ => non_empty_str(error.get("message"))
            .map(|text| text.trim().to_owned())
            .unwrap_or_else(|| super::truncate(&error.to_string(), 500)),
    };
    let code = error.get("code");
    let numeric = code.and_then(|code| {
        code.as_u64()
            .or_else(|| code.as_str().and_then(|c| c.parse().ok()))
    });
    let transient = match numeric {
        Some(code) => matches!(code, 408 | 409 | 425 | 429 | 500..=599),
        None => {
            let words = [
                code.and_then(Value::as_str).unwrap_or_default(),
                error
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                &message,
            ]
            .join(" ")
            .to_lowercase();
            TRANSIENT_WORDS.iter().any(|needle| words.contains(needle))
        }
    };
    if transient {
        ModelError::transient(message, None)
    } else {
        ModelError::fatal(message)
    }
}

const TRANSIENT_WORDS: &[&str] = &[
    "rate limit",
    "rate_limit",
    "ratelimit",
    "too many requests",
    "overload",
    "timeout",
    "timed out",
    "server_error",
    "server error",
    "internal error",
    "internal_error",
    "unavailable",
    "capacity",
    "try again",
];

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
