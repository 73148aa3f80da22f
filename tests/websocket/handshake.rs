//! The upgrade handshake as RFC 6455 has it, sent by hand: what no real client sends,
//! and an attacker might.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::serve::Home;
use crate::{WsDaemon, free_port};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

/// The status line the server answers a raw request head with.
fn status_of(port: u16, head: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    stream.write_all(head.as_bytes()).expect("send");
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => answer.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&answer).trim().to_owned()
}

fn upgrade(port: u16, host: &str, key: &str, connection: Option<&str>) -> String {
    let connection = connection
        .map(|value| format!("Connection: {value}\r\n"))
        .unwrap_or_default();
    format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n{connection}\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .replace("{port}", &port.to_string())
}

#[test]
fn malformed_handshakes_are_refused() {
    let home = Home::new();
    let port = free_port();
    let daemon = WsDaemon::start(&home, &format!(r#"{{"port": {port}}}"#), port, &[]);
    daemon.wait_listening();
    let host = format!("127.0.0.1:{port}");

    let good = upgrade(port, &host, KEY, Some("keep-alive, Upgrade"));
    assert_eq!(status_of(port, &good), "HTTP/1.1 101 Switching Protocols");

    let evil_host = format!("127.0.0.1:{port}@evil.example");
    let cases = [
        (upgrade(port, &evil_host, KEY, Some("Upgrade")), "403"),
        (upgrade(port, &host, "!!", Some("Upgrade")), "400"),
        (upgrade(port, &host, KEY, None), "400"),
        (upgrade(port, &host, KEY, Some("keep-alive")), "400"),
    ];
    for (head, status) in cases {
        let answer = status_of(port, &head);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{head:?} got {answer:?}"
        );
    }
    daemon.stop();
}

#[test]
fn a_foreground_daemon_says_where_it_listens_and_a_second_one_what_to_do() {
    let home = Home::new();
    let port = free_port();
    let daemon = WsDaemon::start(&home, &format!(r#"{{"port": {port}}}"#), port, &[]);
    daemon.wait_listening();

    let second = home.jucode(&["daemon", "--server-config", r#"{"port": 1}"#]);
    assert_eq!(second.status.code(), Some(1));
    let advice = String::from_utf8_lossy(&second.stderr);
    assert!(advice.contains("already running"), "{advice}");
    assert!(
        advice.contains("`jucode daemon stop`, then run this command again"),
        "{advice}"
    );
    assert!(advice.contains("[websocket]"), "{advice}");

    let said = daemon.stop();
    let socket = home.socket().display().to_string();
    assert!(said.contains(&format!("listening on {socket}")), "{said}");
    assert!(said.contains(&format!("ws://127.0.0.1:{port}/")), "{said}");
    assert!(
        said.contains(&format!("dashboard at http://127.0.0.1:{port}/")),
        "{said}"
    );
    assert!(said.contains("no token: any program of any user"), "{said}");
}

#[test]
fn the_committed_websocket_schema_is_what_jucode_schema_websocket_prints() {
    let home = Home::new();
    let output = home.jucode(&["schema", "--websocket"]);
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8(output.stdout).expect("UTF-8");
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/websocket.schema.json"
    ))
    .expect("read the committed schema");
    assert!(
        printed == committed,
        "docs/websocket.schema.json is stale: regenerate it with `cargo run -- schema --websocket > docs/websocket.schema.json`"
    );
    let document: serde_json::Value = serde_json::from_str(&printed).expect("JSON");
    for method in [
        "initialize",
        "session/new",
        "session/attach",
        "session/list",
        "session/prompt",
        "session/cancel",
        "session/close",
        "session/set_mode",
    ] {
        assert!(
            document["methods"][method]["params"].is_object(),
            "{method}"
        );
        assert!(
            document["methods"][method]["result"].is_object(),
            "{method}"
        );
    }
    // The schema is one a validator takes, and it tells a good message from a bad one.
    let validator = jsonschema::validator_for(&serde_json::json!({
        "$schema": document["$schema"],
        "$defs": document["$defs"],
        "$ref": "#/$defs/ServerMessage"
    }))
    .expect("a valid schema");
    let update = serde_json::json!({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}}});
    assert!(validator.is_valid(&update), "{update}");
    let wrong = serde_json::json!({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "asleep"}}});
    assert!(!validator.is_valid(&wrong));
}
