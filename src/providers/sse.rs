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
#[derive(Debug)]
pub struct ChunkParser {
    /// Tool calls in order of first appearance; their position is the `index` of the
    /// [`ModelEvent::ToolCallDelta`]s we emit, which stays unique even when a server
    /// numbers every call 0.
    calls: Vec<PartialCall>,
    usage: Option<TurnUsage>,
    finish_reason: Option<String>,
    /// Whether chunks are read in place first ([`Self::push_typed`]); off only to check
    /// both readings against each other.
    typed: bool,
}

impl Default for ChunkParser {
    fn default() -> Self {
        Self {
            calls: Vec::new(),
            usage: None,
            finish_reason: None,
            typed: true,
        }
    }
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

    /// A parser that reads every chunk into a JSON tree: the reference the in-place
    /// reading is checked against (unit tests, the `chat_stream` fuzz target).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn lenient_only() -> Self {
        Self {
            typed: false,
            ..Self::default()
        }
    }

    /// Feeds one event's `data`. Returns the deltas it carries; an error payload from the
    /// server becomes `Err`. Unparseable chunks are skipped.
    pub fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        let data = data.trim();
        if data.is_empty() || data == DONE {
            return Ok(Vec::new());
        }
        let mut events = Vec::new();
        if self.typed && self.push_typed(data, &mut events) {
            return Ok(events);
        }
        self.push_value(data)
    }

    /// The chunk in the shape nearly every server sends on every chunk (strings where
    /// strings belong, no error), read in place: no tree of the JSON is built and only
    /// the texts handed on are copied. False, with nothing changed and nothing pushed,
    /// when the chunk strays from that shape in any way; [`Self::push_value`] then reads
    /// it leniently. So the two readings agree by construction: the typed one only ever
    /// answers for chunks whose every field it understood.
    fn push_typed(&mut self, data: &str, events: &mut Vec<ModelEvent>) -> bool {
        let Some(chunk) = typed::object::<typed::Chunk<'_>>(data) else {
            return false;
        };
        if chunk.error.is_some_and(|error| error.get() != "null") {
            return false;
        }
        let usage = match chunk.usage {
            Some(raw) if raw.get().starts_with('{') => {
                match serde_json::from_str::<Value>(raw.get()) {
                    Ok(usage) => Some(parse_usage(&usage)),
                    Err(_) => return false,
                }
            }
            _ => None,
        };
        let choice = match chunk.choices.and_then(|choices| choices.0) {
            Some(raw) => match typed::object::<typed::Choice<'_>>(raw.get()) {
                Some(choice) => Some(choice),
                None => return false,
            },
            None => None,
        };
        // `message` is the non-streaming shape; `"delta": null` hides it, as in the
        // lenient reading.
        let delta = match choice.as_ref().and_then(|c| c.delta.or(c.message)) {
            Some(raw) if raw.get() != "null" => {
                match typed::object::<typed::Delta<'_>>(raw.get()) {
                    Some(delta) => Some(delta),
                    None => return false,
                }
            }
            _ => None,
        };
        let mut calls = Vec::new();
        for raw in delta
            .iter()
            .flat_map(|delta| delta.tool_calls.iter().flatten())
        {
            let Some(call) = typed::object::<typed::Call<'_>>(raw.get()) else {
                return false;
            };
            let function = match call.function {
                Some(raw) if raw.get() != "null" => {
                    match typed::object::<typed::Function<'_>>(raw.get()) {
                        Some(function) => Some(function),
                        None => return false,
                    }
                }
                _ => None,
            };
            let arguments = match function.as_ref().and_then(|function| function.arguments) {
                Some(raw) if raw.get() != "null" => {
                    match serde_json::from_str::<String>(raw.get()) {
                        Ok(text) => text,
                        // Arguments as an object: the lenient reading writes them out.
                        Err(_) => return false,
                    }
                }
                _ => String::new(),
            };
            calls.push((
                call.index,
                call.id,
                function.and_then(|f| f.name),
                arguments,
            ));
        }
        // Past this point nothing can fail: the state changes as the lenient reading
        // would change it, in the same order.
        if usage.is_some() {
            self.usage = usage;
        }
        let Some(choice) = choice else {
            return true;
        };
        if let Some(delta) = delta {
            let reasoning = non_empty(delta.reasoning_content).or(non_empty(delta.reasoning));
            if let Some(reasoning) = reasoning {
                events.push(ModelEvent::ReasoningDelta(reasoning));
            }
            if let Some(text) = non_empty(delta.content) {
                events.push(ModelEvent::TextDelta(text));
            }
            // A refusal is the model's answer, only in another field.
            if let Some(refusal) = non_empty(delta.refusal) {
                events.push(ModelEvent::TextDelta(refusal));
            }
            for (index, id, name, arguments) in calls {
                let index = index.and_then(|index| usize::try_from(index).ok());
                let id = non_empty(id);
                let name = non_empty(name);
                self.apply_call(index, id.as_deref(), name.as_deref(), arguments, events);
            }
        }
        if let Some(reason) = non_empty(choice.finish_reason) {
            self.finish_reason = Some(reason);
        }
        true
    }

    /// Any chunk, read into a JSON tree: fields of unexpected types are ignored rather
    /// than failing the chunk.
    fn push_value(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
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
        self.apply_call(index, id, name, arguments, events);
    }

    /// One tool-call delta, whichever reading found it.
    fn apply_call(
        &mut self,
        index: Option<usize>,
        id: Option<&str>,
        name: Option<&str>,
        arguments: String,
        events: &mut Vec<ModelEvent>,
    ) {
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

fn non_empty(text: Option<String>) -> Option<String> {
    text.filter(|text| !text.is_empty())
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

/// The usual shape of a chunk, read in place. Nested objects and fields whose type
/// varies between servers are kept raw, looked at only when present; unknown fields
/// are skipped without being built.
mod typed {
    use std::fmt;

    use serde::Deserialize;
    use serde::de::{IgnoredAny, SeqAccess, Visitor};
    use serde_json::value::RawValue;

    /// `text` read as `T` when it is a JSON object. A derived struct would also accept
    /// an array of its fields in order, which the lenient reading sees as no fields at
    /// all; objects nested in a chunk are therefore kept raw and read through this.
    pub(super) fn object<'a, T: Deserialize<'a>>(text: &'a str) -> Option<T> {
        if !text.starts_with('{') {
            return None;
        }
        serde_json::from_str(text).ok()
    }

    #[derive(Deserialize)]
    pub(super) struct Chunk<'a> {
        #[serde(borrow)]
        pub error: Option<&'a RawValue>,
        #[serde(borrow)]
        pub usage: Option<&'a RawValue>,
        #[serde(borrow)]
        pub choices: Option<FirstChoice<'a>>,
    }

    /// Only the first choice is kept (jucode asks for one); the rest are skipped.
    pub(super) struct FirstChoice<'a>(pub Option<&'a RawValue>);

    #[derive(Deserialize)]
    pub(super) struct Choice<'a> {
        /// `Some("null")` for `"delta": null`, which hides `message`.
        #[serde(borrow, default, deserialize_with = "present")]
        pub delta: Option<&'a RawValue>,
        #[serde(borrow)]
        pub message: Option<&'a RawValue>,
        pub finish_reason: Option<String>,
    }

    /// Texts are owned: each becomes the event that carries it.
    #[derive(Deserialize)]
    pub(super) struct Delta<'a> {
        pub content: Option<String>,
        pub reasoning_content: Option<String>,
        pub reasoning: Option<String>,
        pub refusal: Option<String>,
        #[serde(borrow)]
        pub tool_calls: Option<Vec<&'a RawValue>>,
    }

    #[derive(Deserialize)]
    pub(super) struct Call<'a> {
        pub index: Option<u64>,
        pub id: Option<String>,
        #[serde(borrow)]
        pub function: Option<&'a RawValue>,
    }

    #[derive(Deserialize)]
    pub(super) struct Function<'a> {
        pub name: Option<String>,
        #[serde(borrow)]
        pub arguments: Option<&'a RawValue>,
    }

    /// A field's raw value, `null` included (`Option` would read `null` as absent).
    fn present<'de: 'a, 'a, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<&'a RawValue>, D::Error> {
        <&'a RawValue>::deserialize(deserializer).map(Some)
    }

    impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct First<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> Visitor<'de> for First<'a> {
                type Value = FirstChoice<'a>;

                fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                    formatter.write_str("a list of choices")
                }

                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                    let first = seq.next_element::<&'a RawValue>()?;
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(FirstChoice(first))
                }
            }
            deserializer.deserialize_seq(First(std::marker::PhantomData))
        }
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
