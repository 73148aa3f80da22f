//! Serve protocol v2 on the wire: ops in, events out, one JSON object per line.
//!
//! This is the only module that knows field names. Everything above it (engine,
//! transports, daemon glue) deals in [`Op`] values and pre-encoded [`EventLine`]s.
//!
//! An event is serialized exactly once, by [`EventEncoder::encode`], into an
//! [`EventLine`] (a refcounted byte buffer ending in `\n`). Transports and the daemon's
//! fan-out only ever copy that handle, never the JSON.

mod events;
mod ops;

pub use events::{
    CommandInfo, Event, Hunk, ModelStatus, ModelViewEntry, TurnUsage, UnqueuedEvent,
    UserMessageEvent,
};
pub use jucode_daemon::framing::{Frame, LineCodec, MAX_LINE_BYTES};
pub use ops::{ApproveOp, ApprovePlanOp, OP_NAMES, Op, UserInput, parse_op};

use bytes::Bytes;

/// The protocol version this build speaks; sent in `hello` and checked by the shim.
pub const PROTOCOL_VERSION: u32 = 2;

/// The version of this build, as `hello.version` and `startup.version` carry it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One encoded event line, `\n`-terminated, shared by every consumer.
pub type EventLine = Bytes;

/// `{"type":"hello","protocol":2,"version":"..."}`, the first line of every stream.
pub fn hello_line() -> EventLine {
    // Written by hand because serde_json's map sorts keys and `type` must come first.
    let version = serde_json::Value::from(VERSION);
    Bytes::from(format!(
        "{{\"type\":\"hello\",\"protocol\":{PROTOCOL_VERSION},\"version\":{version}}}\n"
    ))
}

/// Serializes events of one session, appending its `"session"` field.
///
/// The suffix `,"session":"<id>"}\n` is built once per session; encoding an event is
/// then a single `serde_json::to_writer` plus a copy of the suffix, which keeps the
/// per-delta cost of the hot streaming path to one allocation.
#[derive(Debug, Clone)]
pub struct EventEncoder {
    suffix: Bytes,
}

impl EventEncoder {
    pub fn new(session_id: &str) -> Self {
        let quoted = serde_json::to_string(session_id).unwrap_or_else(|_| "\"\"".to_owned());
        let suffix = format!(",\"session\":{quoted}}}\n");
        Self {
            suffix: Bytes::from(suffix),
        }
    }

    pub fn encode(&self, event: &Event) -> EventLine {
        let mut buf = Vec::with_capacity(96);
        // Serializing an enum of plain data into a Vec cannot fail; should a future
        // variant ever make it fail, the client still gets a well-formed error line.
        if serde_json::to_writer(&mut buf, event).is_err() {
            buf.clear();
            buf.extend_from_slice(
                br#"{"type":"error","message":"internal: event failed to serialize"}"#,
            );
        }
        // Every event serializes as an object, so the last byte is its closing brace.
        buf.pop();
        buf.extend_from_slice(&self.suffix);
        Bytes::from(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_type_first_and_session_last() {
        let encoder = EventEncoder::new("s-1");
        let line = encoder.encode(&Event::AssistantDelta {
            delta: "hé\"llo\n".into(),
        });
        assert_eq!(
            &line[..],
            b"{\"type\":\"assistant_delta\",\"delta\":\"h\xc3\xa9\\\"llo\\n\",\"session\":\"s-1\"}\n"
        );
        let unit = encoder.encode(&Event::Connecting);
        assert_eq!(
            &unit[..],
            b"{\"type\":\"connecting\",\"session\":\"s-1\"}\n"
        );
    }

    #[test]
    fn hello_is_exact() {
        let line = hello_line();
        assert_eq!(
            String::from_utf8(line.to_vec()).unwrap(),
            format!("{{\"type\":\"hello\",\"protocol\":2,\"version\":\"{VERSION}\"}}\n")
        );
    }

    #[test]
    fn attachments_only_when_present() {
        let encoder = EventEncoder::new("s");
        let plain = encoder.encode(&Event::UserMessage(UserMessageEvent {
            content: "x".into(),
            images: vec![],
            files: vec![],
        }));
        assert_eq!(
            &plain[..],
            b"{\"type\":\"user_message\",\"content\":\"x\",\"session\":\"s\"}\n"
        );
        let unqueued = encoder.encode(&Event::Unqueued(UnqueuedEvent {
            content: "x".into(),
            images: vec![],
            files: vec![],
        }));
        assert_eq!(
            &unqueued[..],
            b"{\"type\":\"unqueued\",\"content\":\"x\",\"images\":[],\"session\":\"s\"}\n"
        );
    }
}
