//! The SSE reader on recorded and hand-made streams.

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
                cache_write_input_tokens: 0,
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
        cache_write_input_tokens: 0,
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

/// Every payload read both ways: in place (`ChunkParser::new`) and as a JSON tree
/// (`lenient_only`), with the same events and the same end. The odd shapes are the ones
/// where a derived struct and a tree disagree unless the in-place reading steps aside.
#[test]
fn the_in_place_reading_agrees_with_the_lenient_one() {
    let streams: &[&[&str]] = &[
        &[
            r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"He said \"hi\"\n\u00e9\ud83d\ude00"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.rs\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            "[DONE]",
        ],
        // `"delta": null` hides `message`; a `message` alone is read.
        &[
            r#"{"choices":[{"delta":null,"message":{"content":"hidden"}}]}"#,
            r#"{"choices":[{"message":{"content":"shown"}}]}"#,
            r#"{"choices":[{"message":null,"finish_reason":"stop"}]}"#,
        ],
        // Arrays where objects belong: a derived struct would read them as fields.
        &[
            r#"[null,{"prompt_tokens":7},null]"#,
            r#"{"choices":[["x",null,"stop"]]}"#,
            r#"{"choices":[{"delta":["text",null,null,null,null]}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[[0,"id",null]]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":["n","{}"]}]}}]}"#,
            r#"{"choices":[{"delta":{"content":"ok"}}]}"#,
        ],
        // Types that vary between servers.
        &[
            r#"{"choices":[{"delta":{"reasoning":{"text":"thinking"}}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"r"}}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"part"}]}}]}"#,
            r#"{"choices":[{"delta":{"content":5,"refusal":"no"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":"0","id":7,"function":{"name":"f","arguments":{"b":1,"a":2}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":-1,"function":{"name":"g","arguments":null}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1.0,"function":null}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":{"index":0}}}]}"#,
            r#"{"choices":{"0":{"delta":{"content":"x"}}}}"#,
            r#"{"choices":[{"delta":{"content":"a"},"finish_reason":1}]}"#,
            r#"{"usage":"none","choices":null}"#,
            r#"{"usage":{"prompt_tokens":1.5e1}}"#,
            "[DONE]",
        ],
        // Duplicate keys (the tree keeps the last) and errors.
        &[
            r#"{"choices":[{"delta":{"content":"first","content":"second"}}]}"#,
            r#"{"choices":[{"delta":{"content":"x"}}],"choices":[{"delta":{"content":"y"}}]}"#,
            r#"{"error":null,"choices":[{"delta":{"content":"z"}}]}"#,
            r#"{"error":{"message":"overloaded","code":529}}"#,
        ],
        &[
            r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#,
            "not json",
            r#"{"choices":[{"finish_reason":"length"}]}"#,
        ],
    ];
    let run_with = |make: fn() -> ChunkParser, payloads: &[&str]| {
        let mut parser = make();
        let mut events = Vec::new();
        for data in payloads {
            let result = if is_done(data) {
                parser.finish(true)
            } else {
                parser.push(data)
            };
            match result {
                Ok(more) => events.extend(more.into_iter().map(Ok)),
                Err(err) => {
                    events.push(Err(format!("{err:?}")));
                    return events;
                }
            }
        }
        match parser.finish(false) {
            Ok(more) => events.extend(more.into_iter().map(Ok)),
            Err(err) => events.push(Err(format!("{err:?}"))),
        }
        events
    };
    for payloads in streams {
        let in_place = run_with(ChunkParser::new, payloads);
        let lenient = run_with(ChunkParser::lenient_only, payloads);
        // Calls the server sent without an id get a random one.
        let masked = |events: Vec<Result<ModelEvent, String>>| -> Vec<String> {
            events
                .into_iter()
                .map(|event| match event {
                    Ok(ModelEvent::ToolCall(mut call)) if call.id.starts_with("call_") => {
                        call.id = "call_minted".into();
                        format!("{:?}", ModelEvent::ToolCall(call))
                    }
                    other => format!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(masked(in_place), masked(lenient), "{payloads:?}");
    }
}

/// The usual chunk is read in place (not through the lenient fallback): a parser that
/// refused it would still pass the test above, only slowly.
#[test]
fn the_usual_chunks_are_read_in_place() {
    let mut parser = ChunkParser::new();
    let mut events = Vec::new();
    for data in [
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi \"there\"\n"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}"#,
        r#"{"choices":[],"usage":null}"#,
    ] {
        assert!(parser.push_typed(data, &mut events), "{data}");
    }
    assert_eq!(text(&events), "Hi \"there\"\n");
    assert_eq!(reasoning(&events), "hm");
}

/// A field jucode does not use is skipped, not checked escape by escape, so a lone
/// surrogate in a chunk's `id` (invalid JSON, which a tree reading must refuse whole)
/// does not cost the text the chunk carries.
#[test]
fn a_broken_field_that_is_not_used_does_not_drop_the_chunk() {
    let events = run(&[
        r#"{"id":"chatcmpl-\ud800x","choices":[{"index":0,"delta":{"content":"kept"}}]}"#,
        "[DONE]",
    ])
    .unwrap();
    assert_eq!(text(&events), "kept");
}
