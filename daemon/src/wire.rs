//! The little of the protocol the daemon reads and writes itself.
//!
//! Reading: only what routing needs. Each client line is parsed into [`Route`], which
//! picks out `op` and `session` and lets serde skip everything else without building
//! values (a 30 MiB `user_message` costs one scan, no allocation). Op-specific fields
//! are parsed only for the daemon's own ops. Event lines coming out of sessions are not
//! parsed at all, except `status` events, recognised by their first bytes, for the
//! `state` column of `sessions`.
//!
//! Writing: the daemon's own events, `type` first like every engine event (serde keeps
//! struct field order; a `serde_json::Value` map would sort the keys).

use std::collections::HashMap;
use std::path::PathBuf;

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

/// The routing fields of a client line.
#[derive(Debug, Deserialize)]
pub(crate) struct Route {
    pub op: Option<String>,
    pub session: Option<SessionField>,
}

/// `session` as sent: a string, or something else (which is an error).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum SessionField {
    Id(String),
    Invalid(IgnoredAny),
}

impl Route {
    pub(crate) fn parse(line: &[u8]) -> Result<Route, serde_json::Error> {
        serde_json::from_slice(line)
    }
}

/// `{"op":"open","cwd":"/abs","chat":false,"env":{...}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct OpenOp {
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    #[serde(default)]
    pub chat: bool,
    #[serde(default)]
    pub env: HashMap<String, String>,
}

/// The `input` of a `command` op, to recognise `/quit` and `/exit`.
#[derive(Debug, Deserialize)]
struct CommandOp {
    input: String,
}

/// True for `{"op":"command","input":"/quit"}` and `/exit`, trimmed, as the engine's
/// own check. A malformed `command` is not a quit: it goes to the engine, which says
/// what is wrong with it.
pub(crate) fn is_quit_command(line: &[u8]) -> bool {
    serde_json::from_slice::<CommandOp>(line)
        .is_ok_and(|op| matches!(op.input.trim(), "/quit" | "/exit"))
}

/// The engine's encoder writes every `status` event starting with exactly this.
const STATUS_PREFIX: &[u8] = b"{\"type\":\"status\",";

/// The `message` of a `status` event line; `None` for every other line, cheaply.
pub(crate) fn status_message(line: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Status {
        message: String,
    }
    if !line.starts_with(STATUS_PREFIX) {
        return None;
    }
    serde_json::from_slice::<Status>(line)
        .ok()
        .map(|s| s.message)
}

/// Error text serde_json appends ("at line 1 column 9") is noise on a one-line protocol.
pub(crate) fn strip_position(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(cut) => text[..cut].to_owned(),
        None => text,
    }
}

/// One row of the `sessions` answer.
#[derive(Debug, Serialize)]
pub(crate) struct SessionInfo {
    pub session: String,
    pub cwd: Option<String>,
    pub chat: bool,
    pub clients: usize,
    pub state: String,
    pub created_at: u64,
}

/// The `daemon_status` answer.
#[derive(Debug, Serialize)]
pub(crate) struct DaemonStatus {
    pub pid: u32,
    pub version: String,
    pub socket: String,
    pub sessions: usize,
    pub clients: usize,
    pub uptime_ms: u64,
    /// Serving a listener it was handed (systemd socket activation) rather than one it
    /// bound: stopping it does not stop the socket, which restarts it on demand.
    pub socket_activated: bool,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    Error {
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<&'a str>,
    },
    Info {
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<&'a str>,
    },
    SessionClosed {
        session: &'a str,
        reason: &'a str,
    },
    Detached {
        session: &'a str,
    },
    Sessions {
        sessions: &'a [SessionInfo],
    },
    DaemonStatus(&'a DaemonStatus),
}

fn encode(event: &Event<'_>) -> Bytes {
    let mut buf = Vec::with_capacity(96);
    // Plain strings and numbers: serializing into a Vec cannot fail.
    serde_json::to_writer(&mut buf, event).expect("daemon events always serialize");
    buf.push(b'\n');
    Bytes::from(buf)
}

/// `{"type":"error","message":...,"session":...}` (`session` only when given).
pub(crate) fn error_line(message: &str, session: Option<&str>) -> Bytes {
    encode(&Event::Error { message, session })
}

/// `{"type":"info","message":...,"session":...}` (`session` only when given).
pub(crate) fn info_line(message: &str, session: Option<&str>) -> Bytes {
    encode(&Event::Info { message, session })
}

pub(crate) fn session_closed_line(session: &str, reason: &str) -> Bytes {
    encode(&Event::SessionClosed { session, reason })
}

pub(crate) fn detached_line(session: &str) -> Bytes {
    encode(&Event::Detached { session })
}

pub(crate) fn sessions_line(sessions: &[SessionInfo]) -> Bytes {
    encode(&Event::Sessions { sessions })
}

pub(crate) fn daemon_status_line(status: &DaemonStatus) -> Bytes {
    encode(&Event::DaemonStatus(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_reads_op_and_session_only() {
        let route =
            Route::parse(br#"{"op":"user_message","content":{"deep":[1,2,3]},"session":"s1"}"#)
                .unwrap();
        assert_eq!(route.op.as_deref(), Some("user_message"));
        assert!(matches!(route.session, Some(SessionField::Id(ref s)) if s == "s1"));
        let route = Route::parse(br#"{"op":"x","session":7}"#).unwrap();
        assert!(matches!(route.session, Some(SessionField::Invalid(_))));
        let route = Route::parse(br#"{"op":"x","session":null}"#).unwrap();
        assert!(route.session.is_none());
        assert!(Route::parse(b"not json").is_err());
        assert!(Route::parse(b"[1]").is_err());
    }

    #[test]
    fn quit_commands() {
        assert!(is_quit_command(br#"{"op":"command","input":" /quit "}"#));
        assert!(is_quit_command(br#"{"op":"command","input":"/exit"}"#));
        assert!(!is_quit_command(br#"{"op":"command","input":"/quit now"}"#));
        assert!(!is_quit_command(br#"{"op":"command","input":5}"#));
    }

    #[test]
    fn status_lines_are_recognised_by_prefix() {
        let line = br#"{"type":"status","message":"queued: 2","session":"s"}"#;
        assert_eq!(status_message(line).as_deref(), Some("queued: 2"));
        assert_eq!(status_message(br#"{"type":"info","message":"x"}"#), None);
    }

    #[test]
    fn events_put_type_first() {
        assert_eq!(
            &error_line("unknown session: x", Some("x"))[..],
            b"{\"type\":\"error\",\"message\":\"unknown session: x\",\"session\":\"x\"}\n"
        );
        assert_eq!(
            &session_closed_line("s", "closed")[..],
            b"{\"type\":\"session_closed\",\"session\":\"s\",\"reason\":\"closed\"}\n"
        );
        let status = DaemonStatus {
            pid: 1,
            version: "0.1.0".into(),
            socket: "/s".into(),
            sessions: 2,
            clients: 3,
            uptime_ms: 4,
            socket_activated: false,
        };
        assert_eq!(
            &daemon_status_line(&status)[..],
            b"{\"type\":\"daemon_status\",\"pid\":1,\"version\":\"0.1.0\",\"socket\":\"/s\",\
              \"sessions\":2,\"clients\":3,\"uptime_ms\":4,\"socket_activated\":false}\n"
        );
    }
}
