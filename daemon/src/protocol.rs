//! The daemon's own ops and events, typed: the one definition of their JSON shapes.
//!
//! Front-end code in this repository (the `jucode serve` shim, `jucode daemon status`)
//! uses these types rather than writing JSON by hand, and `jucode schema` derives the
//! daemon's part of the protocol's JSON Schema from them (`schemars`).
//!
//! The daemon only ever parses a *session's* lines for two fields (see `wire`); these
//! types cover the lines the daemon reads or writes itself: `open`, `attach`, `detach`,
//! `close`, `sessions`, `daemon_status`, `daemon_stop`, and the events that answer them.
//! `hello` is here too, since every connection starts with it, whoever serves it.

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The protocol version every connection's `hello` announces.
pub const PROTOCOL_VERSION: u32 = 2;

/// An op the daemon handles itself. Any other op is routed to a session.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema, strum::EnumDiscriminants)]
#[serde(tag = "op", rename_all = "snake_case")]
#[strum_discriminants(
    name(DaemonOpName),
    derive(Deserialize, Serialize),
    serde(rename_all = "snake_case")
)]
pub enum DaemonOp {
    /// Starts a session and attaches this connection to it.
    Open(OpenOp),
    /// Attaches this connection to a session (a snapshot, then live events); a saved
    /// session that is not running is loaded first.
    Attach {
        session: String,
        /// The client's environment, used if the session must be loaded (as `open`'s).
        #[serde(default, skip_serializing_if = "HashMap::is_empty")]
        env: HashMap<String, String>,
    },
    /// Leaves a session once it has handled this connection's earlier ops.
    Detach {
        /// Default: the connection's current session.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
    },
    /// Ends a session for every client.
    Close {
        /// Default: the connection's current session.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
    },
    /// Lists the daemon's sessions.
    Sessions,
    DaemonStatus,
    /// Stops the daemon gracefully.
    DaemonStop,
}

/// `{"op":"open","cwd":"/abs","chat":false,"env":{...}}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct OpenOp {
    /// Absolute working directory of the session; the host chooses when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// A chat session instead of a coding session.
    #[serde(default)]
    pub chat: bool,
    /// The client's environment: the session's tools run with it and providers read API
    /// keys from it.
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// Another agent to run the session on: an `[engines.<name>]` entry of the
    /// profile's config. jucode's own engine when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

/// The first line of every stream: `{"type":"hello","protocol":2,"version":"..."}`.
///
/// The daemon adds `build`, which identifies the exact binary (two builds of one
/// version differ), so a client can tell it is talking to a daemon built from other
/// sources. `jucode serve` prints `hello` without it, as the serve protocol shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename = "hello")]
pub struct Hello {
    pub protocol: u32,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
}

/// An event the daemon writes itself.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DaemonEvent {
    /// A daemon op failed, or a line could not be routed.
    Error {
        message: String,
        /// The session it concerns, when it concerns one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
    },
    Info {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
    },
    /// The session has ended; the last line of it every attached client gets.
    SessionClosed {
        session: String,
        reason: CloseReason,
    },
    /// The answer to `detach`: the last line of that session this connection gets.
    Detached {
        session: String,
    },
    Sessions {
        sessions: Vec<SessionInfo>,
    },
    DaemonStatus(DaemonStatus),
}

impl DaemonEvent {
    pub fn error(message: impl Into<String>, session: Option<&str>) -> Self {
        Self::Error {
            message: message.into(),
            session: session.map(str::to_owned),
        }
    }

    pub fn info(message: impl Into<String>, session: Option<&str>) -> Self {
        Self::Info {
            message: message.into(),
            session: session.map(str::to_owned),
        }
    }

    /// The event as one `\n`-terminated line, `type` first.
    pub fn line(&self) -> Bytes {
        encode_line(self)
    }
}

/// Why a session ended, as `session_closed` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// A client sent `close`.
    Closed,
    /// Its last attached client quit (`shutdown`, `/quit`, `/exit`).
    Quit,
    /// The daemon is stopping.
    DaemonStopping,
    /// The engine ended the session on its own.
    Ended,
}

/// One row of the `sessions` answer: a session running in the daemon (`live`), or one
/// saved on disk that attaching loads again.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct SessionInfo {
    pub session: String,
    /// Its working directory; `null` when the opener gave none.
    pub cwd: Option<String>,
    pub chat: bool,
    /// The `[engines.<name>]` entry it runs on; absent for jucode's own engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Connections attached to it now.
    pub clients: usize,
    /// The `message` of its last `status` event, `starting` before the first, `saved`
    /// for a session that is not running.
    pub state: String,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// Running in the daemon now.
    pub live: bool,
    /// Its first user message's first line; `null` before it has one.
    pub label: Option<String>,
    /// When it last changed, milliseconds since the Unix epoch.
    pub updated: u64,
    /// Why its file cannot be continued (it cannot be read, it is empty, it does not
    /// start with a session header, it is a symbolic link): such a session is listed,
    /// with this, rather than left out. Absent when it can be continued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
}

/// The `daemon_status` answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct DaemonStatus {
    pub pid: u32,
    pub version: String,
    /// The exact build (see [`Hello::build`]).
    pub build: String,
    pub socket: String,
    pub sessions: usize,
    /// Connections, including the asking one.
    pub clients: usize,
    pub uptime_ms: u64,
    /// Serving a listener it was handed (systemd socket activation) rather than one it
    /// bound: stopping it does not stop the socket, which restarts it on demand.
    pub socket_activated: bool,
}

/// Serializes `value` as one `\n`-terminated line. Struct and enum fields keep their
/// declaration order, so tagged types put `type` (or `op`) first.
pub fn encode_line<T: Serialize + ?Sized>(value: &T) -> Bytes {
    let mut buf = Vec::with_capacity(96);
    // Plain strings, numbers and maps of strings: serializing into a Vec cannot fail.
    // Should it ever, the peer still gets a well-formed line saying so.
    if serde_json::to_writer(&mut buf, value).is_err() {
        buf.clear();
        buf.extend_from_slice(
            br#"{"type":"error","message":"internal: a line failed to serialize"}"#,
        );
    }
    buf.push(b'\n');
    Bytes::from(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_put_type_first() {
        assert_eq!(
            &DaemonEvent::error("unknown session: x", Some("x")).line()[..],
            b"{\"type\":\"error\",\"message\":\"unknown session: x\",\"session\":\"x\"}\n"
        );
        assert_eq!(
            &DaemonEvent::info("daemon stopping", None).line()[..],
            b"{\"type\":\"info\",\"message\":\"daemon stopping\"}\n"
        );
        let closed = DaemonEvent::SessionClosed {
            session: "s".into(),
            reason: CloseReason::DaemonStopping,
        };
        assert_eq!(
            &closed.line()[..],
            b"{\"type\":\"session_closed\",\"session\":\"s\",\"reason\":\"daemon_stopping\"}\n"
        );
        let status = DaemonEvent::DaemonStatus(DaemonStatus {
            pid: 1,
            version: "0.1.0".into(),
            build: "b".into(),
            socket: "/s".into(),
            sessions: 2,
            clients: 3,
            uptime_ms: 4,
            socket_activated: false,
        });
        assert_eq!(
            &status.line()[..],
            b"{\"type\":\"daemon_status\",\"pid\":1,\"version\":\"0.1.0\",\"build\":\"b\",\"socket\":\"/s\",\
              \"sessions\":2,\"clients\":3,\"uptime_ms\":4,\"socket_activated\":false}\n"
        );
    }

    #[test]
    fn hello_is_exact_and_build_only_when_given() {
        let hello = Hello {
            protocol: 2,
            version: "0.1.0".into(),
            build: None,
        };
        assert_eq!(
            &encode_line(&hello)[..],
            b"{\"type\":\"hello\",\"protocol\":2,\"version\":\"0.1.0\"}\n"
        );
        let with_build = Hello {
            build: Some("abc".into()),
            ..hello
        };
        let line = encode_line(&with_build);
        assert_eq!(
            &line[..],
            b"{\"type\":\"hello\",\"protocol\":2,\"version\":\"0.1.0\",\"build\":\"abc\"}\n"
        );
        let parsed: Hello = serde_json::from_slice(&line).unwrap();
        assert_eq!(parsed, with_build);
    }

    #[test]
    fn events_round_trip() {
        let event = DaemonEvent::Sessions {
            sessions: vec![SessionInfo {
                session: "s".into(),
                cwd: None,
                chat: true,
                engine: Some("claude".into()),
                clients: 0,
                state: "ready".into(),
                created_at: 7,
                live: true,
                label: Some("hi".into()),
                updated: 8,
                broken: None,
            }],
        };
        let parsed: DaemonEvent = serde_json::from_slice(&event.line()).unwrap();
        assert_eq!(parsed, event);
    }

    #[test]
    fn every_daemon_op_has_a_name() {
        for op in [
            r#"{"op":"open"}"#,
            r#"{"op":"attach","session":"s"}"#,
            r#"{"op":"detach"}"#,
            r#"{"op":"close"}"#,
            r#"{"op":"sessions"}"#,
            r#"{"op":"daemon_status"}"#,
            r#"{"op":"daemon_stop"}"#,
        ] {
            let parsed: DaemonOp = serde_json::from_str(op).unwrap();
            let name: DaemonOpName =
                serde_json::from_value(serde_json::json!(op_name(op))).unwrap();
            assert_eq!(DaemonOpName::from(&parsed), name, "{op}");
        }
    }

    fn op_name(line: &str) -> String {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        value["op"].as_str().unwrap().to_owned()
    }
}
