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
mod tests {
    use super::*;
    use crate::engine::Retry;
    use pretty_assertions::assert_eq;

    /// Feeds payloads like the OpenAI client does: `[DONE]` ends the stream, else EOF.
    fn run(payloads: &[&str]) -> Result<Vec<ModelEvent>, ModelError> {
        let mut parser = ChunkParser::new();
        let mut events = Vec::new();
        for data in payloads {
            if is_done(data) {
                events.extend(parser.finish(true)?);
                return Ok(events);
            }
            events.extend(parser.push(data)?);
        }
        events.extend(parser.finish(false)?);
        Ok(events)
    }

    fn text(events: &[ModelEvent]) -> String {
        events
            .iter()
            .filter_map(|event| match event {
                ModelEvent::TextDelta(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn reasoning(events: &[ModelEvent]) -> String {
        events
            .iter()
            .filter_map(|event| match event {
                ModelEvent::ReasoningDelta(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn calls(events: &[ModelEvent]) -> Vec<ToolCall> {
        events
            .iter()
            .filter_map(|event| match event {
                ModelEvent::ToolCall(call) => Some(call.clone()),
                _ => None,
            })
            .collect()
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn openai_text_with_usage_and_done() {
        let events = run(&[
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo!"},"finish_reason":null}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}"#,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":7,"total_tokens":127,"prompt_tokens_details":{"cached_tokens":64,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":3}}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("Hel".into()),
                ModelEvent::TextDelta("lo!".into()),
                ModelEvent::Usage(TurnUsage {
                    input_tokens: 120,
                    cached_input_tokens: 64,
                    output_tokens: 7,
                    reasoning_tokens: 3,
                }),
                ModelEvent::Finished(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn openai_parallel_tool_calls_split_over_chunks() {
        let events = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read_file","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\": \"a.rs\"}"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"list_dir","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"path\":"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":" \".\"}"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":20}}"#,
            "[DONE]",
        ])
        .unwrap();
        let deltas: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, ModelEvent::ToolCallDelta { .. }))
            .cloned()
            .collect();
        assert_eq!(
            deltas[0],
            ModelEvent::ToolCallDelta {
                index: 0,
                name: Some("read_file".into()),
                arguments: String::new(),
            }
        );
        assert_eq!(
            deltas[1],
            ModelEvent::ToolCallDelta {
                index: 0,
                name: None,
                arguments: "{\"pa".into(),
            }
        );
        assert_eq!(deltas.len(), 6);
        assert_eq!(
            calls(&events),
            vec![
                call("call_a", "read_file", r#"{"path": "a.rs"}"#),
                call("call_b", "list_dir", r#"{"path": "."}"#),
            ]
        );
        let tail = &events[events.len() - 2..];
        assert_eq!(
            tail,
            &[
                ModelEvent::Usage(TurnUsage {
                    input_tokens: 10,
                    output_tokens: 20,
                    ..TurnUsage::default()
                }),
                ModelEvent::Finished(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn vllm_and_deepseek_reasoning_content() {
        let events = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"Let me ","content":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"think.","reasoning":"think."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":null,"content":"Done."}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":4,"prompt_cache_hit_tokens":2}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(reasoning(&events), "Let me think.");
        assert_eq!(text(&events), "Done.");
        assert!(events.contains(&ModelEvent::Usage(TurnUsage {
            input_tokens: 5,
            cached_input_tokens: 2,
            output_tokens: 4,
            reasoning_tokens: 0,
        })));
    }

    #[test]
    fn openrouter_and_ollama_reasoning_string_and_object() {
        let events = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Plan: "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"","reasoning":{"text":"read "}}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"","reasoning":{"content":"first."}}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"OK","reasoning":null}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(reasoning(&events), "Plan: read first.");
        assert_eq!(text(&events), "OK");
        assert_eq!(
            events.last(),
            Some(&ModelEvent::Finished(FinishReason::Stop))
        );
    }

    #[test]
    fn whole_tool_call_in_one_chunk_and_repeated_id() {
        let events = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"shell","arguments":"{\"command\":\"ls\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"list_dir","arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_2","function":{"arguments":"\".\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            calls(&events),
            vec![
                call("call_1", "shell", r#"{"command":"ls"}"#),
                call("call_2", "list_dir", r#"{"path":"."}"#),
            ]
        );
        assert!(events.contains(&ModelEvent::ToolCallDelta {
            index: 1,
            name: Some("list_dir".into()),
            arguments: "{\"path\":".into(),
        }));
    }

    #[test]
    fn missing_index_and_id_still_aggregates() {
        let events = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"type":"function","function":{"name":"read_file","arguments":"{\"path\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"noop","arguments":{}}}]}}]}"#,
            "[DONE]",
        ])
        .unwrap();
        let calls = calls(&events);
        assert_eq!(calls.len(), 2);
        assert!(calls[0].id.starts_with("call_") && calls[0].id.len() == 29);
        assert_eq!(calls[0].name, "read_file");
        assert_eq!(calls[0].arguments, r#"{"path":"x"}"#);
        assert_eq!(calls[1], call("b", "noop", "{}"));
        assert_eq!(
            events.last(),
            Some(&ModelEvent::Finished(FinishReason::ToolCalls))
        );
    }

    #[test]
    fn eof_after_finish_reason_without_done_is_complete() {
        let events = run(&[
            r#"{"choices":[{"delta":{"content":"hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("hi".into()),
                ModelEvent::Finished(FinishReason::Length),
            ]
        );
    }

    #[test]
    fn eof_without_finish_is_transient() {
        let err = run(&[r#"{"choices":[{"delta":{"content":"hi"}}]}"#]).unwrap_err();
        assert_eq!(err.retry, Retry::After(None));
        assert!(err.message.contains("ended before"), "{}", err.message);
    }

    #[test]
    fn error_payloads_are_classified() {
        let err = run(&[
            r#"{"choices":[{"delta":{"content":"par"}}]}"#,
            r#"{"error":{"message":"Provider returned error","code":502,"metadata":{}}}"#,
        ])
        .unwrap_err();
        assert_eq!(err, ModelError::transient("Provider returned error", None));

        let err = run(&[r#"{"error":{"message":"Rate limit reached for gpt","type":"requests"}}"#])
            .unwrap_err();
        assert_eq!(err.retry, Retry::After(None));

        let err = run(&[
            r#"{"error":{"message":"Invalid schema for tool","type":"invalid_request_error","code":"invalid_function_parameters"}}"#,
        ])
        .unwrap_err();
        assert_eq!(err, ModelError::fatal("Invalid schema for tool"));

        let err = run(&[r#"{"error":"model overloaded"}"#]).unwrap_err();
        assert_eq!(err, ModelError::transient("model overloaded", None));
    }

    #[test]
    fn garbage_chunks_are_skipped() {
        let events = run(&[
            "not json at all",
            r#"{"choices":[{"delta":{"content":"ok"}}]}"#,
            r#"{"choices": [ {"delta""#,
            "42",
            r#"{"choices":"nope"}"#,
            r#"{"choices":[{"delta":{"content":7,"tool_calls":"x"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("ok".into()),
                ModelEvent::Finished(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn mistral_content_parts_become_reasoning_then_text() {
        let events = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Small sum, "}]}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"easy."},{"type":"text","text":" Answer it."}]}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"3 + 4 "},{"type":"text","text":"= 7"}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":20}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::ReasoningDelta("Small sum, ".into()),
                ModelEvent::ReasoningDelta("easy. Answer it.".into()),
                ModelEvent::TextDelta("3 + 4 ".into()),
                ModelEvent::TextDelta("= 7".into()),
                ModelEvent::Usage(TurnUsage {
                    input_tokens: 8,
                    output_tokens: 20,
                    ..TurnUsage::default()
                }),
                ModelEvent::Finished(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn content_parts_keep_their_order_and_unknown_parts_are_skipped() {
        let events = run(&[
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"before "},{"type":"thinking","thinking":[{"type":"text","text":"hmm"},{"type":"image","url":"x"}]},{"type":"reference","reference_ids":[3]},{"type":"text","text":"after"},{"text":"untyped"},"bare",{"type":"text","text":7},{"type":"thinking","thinking":"flat"}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("before ".into()),
                ModelEvent::ReasoningDelta("hmm".into()),
                ModelEvent::TextDelta("after".into()),
                ModelEvent::ReasoningDelta("flat".into()),
                ModelEvent::Finished(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn non_streamed_message_with_content_parts() {
        let events = run(&[
            r#"{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"thinking","thinking":[{"type":"text","text":"Greet back."}]},{"type":"text","text":"Hello!"}]},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(reasoning(&events), "Greet back.");
        assert_eq!(text(&events), "Hello!");
        assert_eq!(
            events.last(),
            Some(&ModelEvent::Finished(FinishReason::Stop))
        );
    }

    #[test]
    fn refusal_is_shown_as_the_reply() {
        let events = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":""},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"refusal":"I can't"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"refusal":" help with that."},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("I can't".into()),
                ModelEvent::TextDelta(" help with that.".into()),
                ModelEvent::Finished(FinishReason::Stop),
            ]
        );
        let whole = run(&[
            r#"{"choices":[{"message":{"role":"assistant","content":null,"refusal":"No."},"finish_reason":"stop"}]}"#,
        ])
        .unwrap();
        assert_eq!(text(&whole), "No.");
    }

    #[test]
    fn done_without_anything_is_an_empty_stop() {
        assert_eq!(
            run(&["[DONE]"]).unwrap(),
            vec![ModelEvent::Finished(FinishReason::Stop)]
        );
    }
}
