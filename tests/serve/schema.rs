//! The protocol schema: `jucode schema` is the committed document, the spec's ops
//! validate against `$defs.Op` and nothing else does. (Every event every end-to-end test
//! reads is checked against `$defs.Event` by the test drivers themselves.)

use serde_json::{Value, json};

use crate::common::schema::{event_error, op_error};
use crate::common::serve::Home;

#[test]
fn the_committed_schema_is_what_jucode_schema_prints() {
    let home = Home::new();
    let output = home.jucode(&["schema"]);
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).expect("UTF-8");
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/serve-protocol.schema.json"
    ))
    .expect("read the committed schema");
    assert!(
        printed == committed,
        "docs/serve-protocol.schema.json is stale: regenerate it with `cargo run -- schema > docs/serve-protocol.schema.json`"
    );
    let document: Value = serde_json::from_str(&printed).expect("JSON");
    assert_eq!(
        document["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    for definition in ["Op", "Event"] {
        assert!(
            document["$defs"][definition]["oneOf"].is_array(),
            "{definition}"
        );
    }
}

#[test]
fn every_op_of_the_spec_validates() {
    let ops = [
        json!({"op":"user_message","content":"refactor the parser","images":["/abs/path.png"]}),
        json!({"op":"user_message","content":"x","images":null,"files":["/abs/report.pdf"],"session":"s1"}),
        json!({"op":"command","input":"/model gpt-5.5 medium"}),
        json!({"op":"steer","index":-1}),
        json!({"op":"steer"}),
        json!({"op":"unqueue","index":0}),
        json!({"op":"interrupt"}),
        json!({"op":"interrupt","index":-1}),
        json!({"op":"approve","call_id":"call_9","decision":"allow","always":false,"hunks":["f0h1"]}),
        json!({"op":"approve","call_id":"call_2","decision":"deny"}),
        json!({"op":"set_approval_mode","mode":"manual"}),
        json!({"op":"set_approval_mode","mode":"full-access"}),
        json!({"op":"agent_runs"}),
        json!({"op":"subagent_transcript","agent_id":"/root/lister"}),
        json!({"op":"approve_plan","id":"plan-1a2b3c4d5e6f7a8b","decision":"approve","mode":"auto-edit"}),
        json!({"op":"approve_plan","id":"plan-1a2b3c4d5e6f7a8b","decision":"revise","feedback":"Also add a test"}),
        json!({"op":"set_attended","attended":false}),
        json!({"op":"decide_action","action":"act-1727500000000-3f9a1c2b","decision":"allow"}),
        json!({"op":"mcp_list"}),
        json!({"op":"mcp_set","name":"fs","server":{"command":"npx","args":["-y","srv"],"env":{"A":"1"}}}),
        json!({"op":"mcp_set","name":"web","server":{"url":"https://example.com/mcp","headers":{"Authorization":"Bearer x"},"timeout_ms":5000}}),
        json!({"op":"mcp_remove","name":"fs"}),
        json!({"op":"mcp_toggle","name":"fs","enabled":false}),
        json!({"op":"shutdown"}),
        // The daemon's own ops.
        json!({"op":"open","cwd":"/home/me/project","chat":false,"env":{"PATH":"/usr/bin"}}),
        json!({"op":"open","chat":true}),
        json!({"op":"attach","session":"0193"}),
        json!({"op":"detach"}),
        json!({"op":"detach","session":"0193"}),
        json!({"op":"close","session":"0193"}),
        json!({"op":"sessions"}),
        json!({"op":"daemon_status"}),
        json!({"op":"daemon_stop"}),
    ];
    for op in &ops {
        if let Some(error) = op_error(op) {
            panic!("{op} does not validate: {error}");
        }
        assert!(event_error(op).is_some(), "an op is not an event: {op}");
    }
}

#[test]
fn what_is_not_an_op_does_not_validate() {
    let not_ops = [
        json!(["shutdown"]),
        json!(["set_approval_mode", "full-access"]),
        json!(["daemon_stop", null]),
        json!("shutdown"),
        json!(42),
        json!(null),
        json!({"content":"x"}),
        json!({"op":"dance"}),
        json!({"op":7}),
        json!({"op":"user_message"}),
        json!({"op":"approve","call_id":"c","decision":"maybe"}),
        json!({"op":"set_approval_mode","mode":"yolo"}),
        json!({"op":"mcp_set","name":"fs","server":["npx"]}),
        json!({"op":"attach"}),
    ];
    for line in &not_ops {
        assert!(op_error(line).is_some(), "{line} validated as an op");
    }
}

#[test]
fn events_the_spec_shows_validate() {
    let events = [
        json!({"type":"hello","protocol":2,"version":"0.3.0"}),
        json!({"type":"status","message":"queued: 2","session":"s"}),
        json!({"type":"status","message":"approval mode: auto-edit","session":"s"}),
        json!({"type":"approval_request","call_id":"call_2","name":"bash","summary":"rm -rf build","subagent_id":null,"hunks":null,"session":"s"}),
        json!({"type":"usage","input_tokens":1234,"cached_input_tokens":800,"cache_write_input_tokens":0,"output_tokens":56,"reasoning_tokens":12,"session":"s"}),
        json!({"type":"subagent_transcript","agent_id":"/root/x","error":"unknown agent: /root/x","session":"s"}),
        json!({"type":"error","message":"no session: send open or attach first"}),
        json!({"type":"session_closed","session":"s","reason":"quit"}),
        json!({"type":"detached","session":"s"}),
    ];
    for event in &events {
        if let Some(error) = event_error(event) {
            panic!("{event} does not validate: {error}");
        }
    }
    for bad in [
        json!({"type":"status","message":"bored","session":"s"}),
        json!({"type":"connecting"}),
        json!([{"type":"info","message":"x"}]),
        json!({"type":"approval_resolved","call_id":"c","decision":"maybe","session":"s"}),
    ] {
        assert!(event_error(&bad).is_some(), "{bad} validated as an event");
    }
}

/// `jucode <args>` with stdout a pipe nobody reads any more (`jucode schema | head`
/// after head exits): every write fails with EPIPE.
fn into_a_closed_pipe(home: &Home, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    std::process::Command::new(env!("CARGO_BIN_EXE_jucode"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("JUCODE_HOME", home.path())
        .current_dir(home.path())
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run jucode")
}

#[test]
fn every_command_that_prints_ends_quietly_with_0_on_a_closed_pipe() {
    let home = Home::new();
    // A saved session, so that `sessions` has something to print.
    let run = home.jucode(&["--headless", "hi"]);
    assert!(run.status.success(), "{run:?}");
    for args in [
        &["schema"][..],
        &["--help"],
        &["--version"],
        &["sessions"],
        &["sessions", "--help"],
    ] {
        let output = into_a_closed_pipe(&home, args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            "",
            "{args:?} says nothing"
        );
    }
}
