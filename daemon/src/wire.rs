//! What the daemon reads of the lines it routes.
//!
//! Each client line is parsed into [`Route`], which picks out `op` and `session` and
//! lets serde skip everything else without building values (a 30 MiB `user_message`
//! costs one scan, no allocation). Only a JSON object is ever routed as an op: serde
//! would also read a struct from a JSON array (`["daemon_stop",null]`), so the first
//! byte is checked before serde sees the line. The daemon's own ops are then parsed in
//! full into [`DaemonOp`](crate::protocol::DaemonOp); a session's lines are forwarded
//! unparsed.
//!
//! Event lines coming out of sessions are not parsed at all, except `status` events,
//! recognised by their first bytes, for the `state` column of `sessions`.

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::protocol::{DaemonOp, DaemonOpName};

/// The routing fields of a client line.
#[derive(Debug, Deserialize)]
pub(crate) struct Route {
    pub op: Option<OpField>,
    pub session: Option<SessionField>,
}

/// `op` as sent: one of the daemon's own, another name (for a session), or not a
/// string at all (the session's engine says what is wrong with it).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OpField {
    Daemon(DaemonOpName),
    Session(String),
    Invalid(IgnoredAny),
}

/// `session` as sent: a string, or something else (which is an error).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum SessionField {
    Id(String),
    Invalid(IgnoredAny),
}

/// Why a line cannot be routed.
#[derive(Debug)]
pub(crate) enum Unroutable {
    /// Valid JSON, but not an object.
    NotAnObject,
    /// Not JSON at all.
    Invalid(serde_json::Error),
}

impl Route {
    pub(crate) fn parse(line: &[u8]) -> Result<Route, Unroutable> {
        if !is_object(line) {
            return Err(match serde_json::from_slice::<IgnoredAny>(line) {
                Ok(_) => Unroutable::NotAnObject,
                Err(err) => Unroutable::Invalid(err),
            });
        }
        serde_json::from_slice(line).map_err(Unroutable::Invalid)
    }
}

/// What a client line asks for, decided from the line alone (the connection then acts on
/// it): pure, so the routing of any bytes can be checked without a socket.
#[derive(Debug)]
pub(crate) enum Routed {
    /// Not a JSON object: it never acts.
    Unroutable(Unroutable),
    /// `session` is there but not a string.
    BadSession,
    /// One of the daemon's own ops, parsed in full, or the error message for the client.
    Daemon(Result<DaemonOp, String>),
    /// A line for a session: its op name when `op` is a string, and the session it names.
    Session {
        op: Option<String>,
        session: Option<String>,
    },
}

pub(crate) fn route(line: &[u8]) -> Routed {
    let route = match Route::parse(line) {
        Ok(route) => route,
        Err(err) => return Routed::Unroutable(err),
    };
    let session = match route.session {
        None => None,
        Some(SessionField::Id(id)) => Some(id),
        Some(SessionField::Invalid(_)) => return Routed::BadSession,
    };
    match route.op {
        Some(OpField::Daemon(name)) => {
            Routed::Daemon(serde_json::from_slice::<DaemonOp>(line).map_err(|err| {
                let name = serde_json::to_value(name)
                    .ok()
                    .and_then(|value| value.as_str().map(str::to_owned))
                    .unwrap_or_default();
                format!("invalid {name}: {}", strip_position(&err))
            }))
        }
        Some(OpField::Session(op)) => Routed::Session {
            op: Some(op),
            session,
        },
        _ => Routed::Session { op: None, session },
    }
}

/// Whether a line can only be a JSON object: its first non-blank byte opens one.
pub fn is_object(line: &[u8]) -> bool {
    line.iter()
        .find(|byte| !byte.is_ascii_whitespace())
        .is_some_and(|&byte| byte == b'{')
}

/// Error text serde_json appends ("at line 1 column 9") is noise on a one-line protocol.
pub fn strip_position(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(cut) => text[..cut].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_reads_op_and_session_only() {
        let route =
            Route::parse(br#"{"op":"user_message","content":{"deep":[1,2,3]},"session":"s1"}"#)
                .unwrap();
        assert!(matches!(route.op, Some(OpField::Session(ref op)) if op == "user_message"));
        assert!(matches!(route.session, Some(SessionField::Id(ref s)) if s == "s1"));
        let route = Route::parse(br#"{"op":"daemon_stop","session":7}"#).unwrap();
        assert!(matches!(
            route.op,
            Some(OpField::Daemon(DaemonOpName::DaemonStop))
        ));
        assert!(matches!(route.session, Some(SessionField::Invalid(_))));
        let route = Route::parse(br#"{"op":5,"session":null}"#).unwrap();
        assert!(matches!(route.op, Some(OpField::Invalid(_))));
        assert!(route.session.is_none());
    }

    #[test]
    fn only_objects_are_routed() {
        assert!(matches!(
            Route::parse(b"not json"),
            Err(Unroutable::Invalid(_))
        ));
        for line in [
            &br#"["daemon_stop",null]"#[..],
            br#" ["close","s1"]"#,
            b"[1]",
            b"\"open\"",
            b"7",
            b"null",
        ] {
            assert!(
                matches!(Route::parse(line), Err(Unroutable::NotAnObject)),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(Route::parse(b"  {\"op\":\"sessions\"}").is_ok());
    }
}
