//! The daemon protocol end to end: real sockets, a fake host, exact events.
#![cfg(unix)]

mod common;

use std::time::Duration;

use common::{Client, TestDaemon};
use jucode_daemon::ClientLimits;
use serde_json::json;

#[tokio::test]
async fn hello_comes_first_and_open_streams_from_the_first_line() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    a.expect_hello().await;
    a.send(r#"{"op":"open","cwd":"/work","chat":true,"env":{"X":"1"}}"#)
        .await;
    let startup = a.expect("startup").await;
    assert_eq!(startup["seq"], 1, "the opener gets the very first line");
    assert_eq!(startup["cwd"], "/work");
    assert_eq!(startup["chat"], true);
    assert_eq!(startup["env_x"], "1");
    let id = startup["session"].as_str().unwrap().to_owned();
    assert_eq!(a.expect("status").await["seq"], 2);
    a.echo(&id, "hi").await;
    // Without `session`, ops go to the current session.
    a.send(r#"{"op":"echo","text":"plain"}"#).await;
    assert_eq!(a.expect("echo").await["session"], id.as_str());
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn open_errors() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    a.expect_hello().await;
    a.send(r#"{"op":"open","cwd":"relative"}"#).await;
    assert_eq!(
        a.expect("error").await["message"],
        "invalid open: cwd must be an absolute path"
    );
    a.send(r#"{"op":"open","chat":"yes"}"#).await;
    let message = a.expect("error").await["message"].to_string();
    assert!(
        message.starts_with("\"invalid open: invalid type"),
        "{message}"
    );
    a.send(r#"{"op":"open","cwd":"/refused"}"#).await;
    assert_eq!(
        a.expect("error").await["message"],
        "cannot open session: no such project"
    );
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn sessions_lists_state_and_clients() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    a.expect_hello().await;
    let id = a.open().await;
    a.send(r#"{"op":"status","message":"streaming"}"#).await;
    assert_eq!(a.expect("status").await["message"], "streaming");
    let sessions = a.sessions().await;
    assert_eq!(sessions.len(), 1);
    let row = &sessions[0];
    assert_eq!(row["session"], id.as_str());
    assert_eq!(row["cwd"], "/work");
    assert_eq!(row["chat"], false);
    assert_eq!(row["clients"], 1);
    assert_eq!(row["state"], "streaming");
    assert!(row["created_at"].as_u64().unwrap() > 1_600_000_000_000);
    assert_eq!(row["live"], true);
    assert_eq!(row["label"], serde_json::Value::Null);
    assert!(row["updated"].as_u64().unwrap() >= row["created_at"].as_u64().unwrap());
    let keys: Vec<_> = row.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys.len(), 9, "{keys:?}");

    let status = a.daemon_status().await;
    assert_eq!(status["pid"], std::process::id());
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["socket"], daemon.socket.to_str().unwrap());
    assert_eq!(status["sessions"], 1);
    assert!(status["clients"].as_u64().unwrap() >= 1);
    assert!(status["uptime_ms"].is_u64());
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn attach_detach_close() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    let mut b = daemon.client().await;
    a.expect_hello().await;
    b.expect_hello().await;
    let id = a.open().await;

    let snapshot = b.attach(&id).await;
    assert_eq!(snapshot["seq"], 2, "the snapshot covers the startup batch");
    a.echo(&id, "both").await;
    assert_eq!(b.expect("echo").await["seq"], 3);

    b.send_json(json!({"op":"detach","session":id})).await;
    assert_eq!(
        b.next().await,
        json!({"type":"detached","session":id}),
        "detached is the last line of that session"
    );
    // `a` has the echo, so the fan-out has passed it to every subscriber; `b`'s next
    // line being the answer to a later op proves it was not among them.
    a.echo(&id, "only a").await;
    assert_eq!(b.sessions().await[0]["clients"], 1);

    // Closing from a client that is not attached: it is told, the attached one gets
    // the session's last events and `session_closed`.
    b.send_json(json!({"op":"close","session":id})).await;
    assert_eq!(
        b.next().await,
        json!({"type":"info","message":format!("closing session {id}"),"session":id})
    );
    a.expect("bye").await;
    assert_eq!(
        a.next().await,
        json!({"type":"session_closed","session":id,"reason":"closed"})
    );
    assert!(b.sessions().await.is_empty());
    // `a` stays connected: close is not a quit.
    assert!(a.sessions().await.is_empty());
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn two_sessions_on_one_connection() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    a.expect_hello().await;
    let first = a.open().await;
    let second = a.open().await;
    assert_ne!(first, second);
    a.echo(&first, "one").await;
    a.echo(&second, "two").await;
    // The current session is the most recently opened.
    a.send(r#"{"op":"echo","text":"current"}"#).await;
    assert_eq!(a.expect("echo").await["session"], second.as_str());
    // Detaching it makes the previous one current again.
    a.send_json(json!({"op":"detach","session":second})).await;
    a.expect("detached").await;
    a.send(r#"{"op":"echo","text":"current"}"#).await;
    assert_eq!(a.expect("echo").await["session"], first.as_str());
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn routing_errors() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    let mut b = daemon.client().await;
    a.expect_hello().await;
    b.expect_hello().await;

    b.send(r#"{"op":"echo","text":"x"}"#).await;
    assert_eq!(
        b.next().await,
        json!({"type":"error","message":"no session: send open or attach first"})
    );
    b.send("not json").await;
    let error = b.expect("error").await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid command: expected ident"),
        "{error}"
    );
    b.send("[1,2]").await;
    assert_eq!(
        b.expect("error").await["message"],
        "invalid command: expected a JSON object with a string \"op\" field"
    );
    b.send(r#"{"op":"attach","session":"nope"}"#).await;
    assert_eq!(
        b.next().await,
        json!({"type":"error","message":"unknown session: nope","session":"nope"})
    );
    b.send(r#"{"op":"attach"}"#).await;
    assert_eq!(
        b.expect("error").await["message"],
        "invalid attach: missing field `session`"
    );
    b.send(r#"{"op":"echo","session":5}"#).await;
    assert_eq!(
        b.expect("error").await["message"],
        "invalid command: \"session\" must be a string"
    );

    let id = a.open().await;
    b.send_json(json!({"op":"echo","text":"x","session":id}))
        .await;
    assert_eq!(
        b.next().await,
        json!({"type":"error","message":format!("not attached to session {id}"),"session":id})
    );
    b.send_json(json!({"op":"detach","session":id})).await;
    assert_eq!(
        b.expect("error").await["message"],
        format!("not attached to session {id}")
    );
    a.send(r#"{"op":"echo","session":"gone"}"#).await;
    assert_eq!(a.expect("error").await["message"], "unknown session: gone");

    // With a current session, lines the daemon cannot route go to its engine as-is.
    a.send("not json").await;
    assert_eq!(a.expect("error").await["message"], "invalid command");
    a.send(r#"{"op":"frobnicate","n":1}"#).await;
    assert_eq!(
        a.expect("got").await["line"],
        r#"{"op":"frobnicate","n":1}"#
    );
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn over_long_line_is_reported_for_the_current_session() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    a.expect_hello().await;
    let id = a.open().await;
    let long = vec![b'x'; 32 * 1024 * 1024 + 1];
    a.send_bytes(&long).await;
    assert_eq!(
        a.next().await,
        json!({
            "type":"error",
            "message":"invalid command: line longer than 32 MiB was skipped",
            "session":id
        })
    );
    a.echo(&id, "still here").await;
    daemon.stop().await.unwrap();
}

/// A client attaching while the session streams gets a snapshot placed exactly in the
/// stream: every later event once, none that the snapshot covers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_attach_gets_the_snapshot_at_the_right_point() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    let mut b = daemon.client().await;
    a.expect_hello().await;
    b.expect_hello().await;
    let id = a.open().await;
    const TICKS: u64 = 4000;
    a.send_json(json!({"op":"tick","count":TICKS,"size":16}))
        .await;
    let last = 2 + TICKS;
    let mut seq = 2;
    // Attach while it streams.
    while seq < 50 {
        let event = a.expect("tick").await;
        seq += 1;
        assert_eq!(event["seq"], seq);
    }
    b.send_json(json!({"op":"attach","session":id})).await;
    follow_snapshot(&mut b, &id, last).await;
    while seq < last {
        let event = a.expect("tick").await;
        seq += 1;
        assert_eq!(event["seq"], seq, "the opener loses nothing");
    }
    daemon.stop().await.unwrap();
}

/// Reads the snapshot and every tick after it, checking they continue it exactly.
async fn follow_snapshot(client: &mut Client, id: &str, last: u64) {
    let snapshot = client.expect("snapshot").await;
    assert_eq!(snapshot["session"], id);
    let mut seq = snapshot["seq"].as_u64().unwrap();
    assert!(
        seq >= 50,
        "the snapshot covers what was sent before the attach"
    );
    while seq < last {
        let event = client.expect("tick").await;
        seq += 1;
        assert_eq!(
            event["seq"], seq,
            "no event lost or repeated after the snapshot"
        );
    }
}

#[tokio::test]
async fn quit_as_the_only_client_ends_the_session_and_the_connection() {
    let daemon = TestDaemon::start().await;
    for quit in [
        r#"{"op":"shutdown"}"#,
        r#"{"op":"command","input":"/quit"}"#,
        r#"{"op":"command","input":" /exit\n"}"#,
    ] {
        let mut a = daemon.client().await;
        a.expect_hello().await;
        let id = a.open().await;
        a.send(quit).await;
        // The session's last events, then its end, then EOF.
        a.expect("bye").await;
        assert_eq!(
            a.next().await,
            json!({"type":"session_closed","session":id,"reason":"quit"})
        );
        a.expect_eof().await;
    }
    let mut b = daemon.client().await;
    b.expect_hello().await;
    assert!(b.sessions().await.is_empty());
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn quit_with_another_client_only_detaches() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    let mut b = daemon.client().await;
    a.expect_hello().await;
    b.expect_hello().await;
    let id = a.open().await;
    b.attach(&id).await;
    a.send(r#"{"op":"command","input":"/quit"}"#).await;
    a.expect_eof().await;
    b.echo(&id, "still running").await;
    let sessions = b.sessions().await;
    assert_eq!(sessions[0]["clients"], 1);

    // A client with two sessions that quits one keeps its connection.
    let mut c = daemon.client().await;
    c.expect_hello().await;
    let first = c.open().await;
    let second = c.open().await;
    b.attach(&second).await;
    c.send_json(json!({"op":"shutdown","session":second})).await;
    c.echo(&first, "connection kept").await;
    b.echo(&second, "b still there").await;
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn eof_only_detaches() {
    let daemon = TestDaemon::start().await;
    let mut a = daemon.client().await;
    a.expect_hello().await;
    let id = a.open().await;
    a.send_json(json!({"op":"echo","text":"last","session":id}))
        .await;
    a.shutdown_write().await;
    // The connection closes at once; the echo may or may not have made it before.
    let rest = a.read_to_eof().await;
    assert!(rest.len() <= 1, "{rest:?}");

    let mut b = daemon.client().await;
    b.expect_hello().await;
    let sessions = b.sessions().await;
    assert_eq!(sessions.len(), 1, "the session keeps running");
    assert_eq!(sessions[0]["clients"], 0);
    let snapshot = b.attach(&id).await;
    assert_eq!(snapshot["seq"], 3);
    b.echo(&id, "resumed").await;
    daemon.stop().await.unwrap();
}

/// A client that never reads is cut off; the session and the other client go on at
/// full speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_is_disconnected_without_slowing_the_others() {
    let limits = ClientLimits {
        max_lines: 256,
        max_bytes: 256 * 1024,
        // Long enough that the final line surely waits for the slow client to read.
        final_write_timeout: Duration::from_secs(60),
    };
    let daemon = TestDaemon::start_with(|options| options.client_limits = limits).await;
    let mut fast = daemon.client().await;
    let mut slow = daemon.client().await;
    fast.expect_hello().await;
    slow.expect_hello().await;
    let id = fast.open().await;
    slow.attach(&id).await;

    // In rounds the fast client keeps up with (well within its limits), while the
    // slow one falls further behind with every round.
    const ROUNDS: u64 = 40;
    const PER_ROUND: u64 = 100;
    let mut seq = 2;
    for _ in 0..ROUNDS {
        fast.send_json(json!({"op":"tick","count":PER_ROUND,"size":1000}))
            .await;
        for _ in 0..PER_ROUND {
            let event = fast.expect("tick").await;
            seq += 1;
            assert_eq!(event["seq"], seq);
        }
    }
    let rest = slow.read_to_eof().await;
    assert!(
        rest.len() < (ROUNDS * PER_ROUND) as usize,
        "the slow client got {}",
        rest.len()
    );
    assert_eq!(
        rest.last().unwrap(),
        "{\"type\":\"error\",\"message\":\"disconnected: this client fell more than 256 \
         events / 256 KiB behind; reconnect and attach to resume\"}"
    );
    let sessions = fast.sessions().await;
    assert_eq!(sessions[0]["clients"], 1);
    daemon.stop().await.unwrap();
}
