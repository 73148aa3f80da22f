//! Serve protocol v2 on the wire: ops in, events out, one JSON object per line.
//!
//! This is the only module that knows field names. Everything above it (engine,
//! transports, daemon glue) deals in [`Op`] values and pre-encoded [`EventLine`]s.
//!
//! An event is serialized exactly once, by [`EventEncoder::encode`], into an
//! [`EventLine`] (a refcounted byte buffer ending in `\n`). Transports and the daemon's
//! fan-out only ever copy that handle, never the JSON.

pub mod delegation;
mod events;
pub mod jsonrpc;
pub mod notices;
mod ops;
pub mod schema;
mod values;

pub use events::{
    AgentKind, AgentRun, AgentState, CallCard, CheckpointItem, CommandInfo, Event, Goal, Hunk,
    McpServerView, McpState, McpTransport, ModelStatus, ModelViewEntry, OptionChoice, PlanStep,
    ResumeItem, SandboxView, SessionOption, StepStatus, SubagentItem, TerminalView,
    ToolProviderView, TranscriptItem, TreeNode, TurnUsage, UnqueuedEvent, UserMessageEvent,
};
pub use jucode_daemon::ClientId;
pub use jucode_daemon::framing::{Frame, LineCodec};
pub use jucode_daemon::protocol::{
    CloseReason, DaemonEvent, DaemonOp, DaemonStatus, Hello, OpenOp, PROTOCOL_VERSION, SessionInfo,
    encode_line,
};
pub use ops::{
    ApproveOp, ApprovePlanOp, McpOAuthConfig, McpServerConfig, Op, OpName, UserInput, parse_op,
};
pub use values::{
    ApprovalMode, CallKind, Decision, ElicitationAction, GoalStatus, LifecycleStatus, ModelState,
    PlanDecision, PlanStatus, ReplyStop, Resolution, SandboxMode, SessionStatus, Surface,
};

use bytes::Bytes;

/// The version of this build, as `hello.version` and `startup.version` carry it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Identifies this exact build: a hash of the sources it was built from (see
/// `build.rs`). Two binaries of one version built from different sources differ, so
/// the shim never hands a session to a daemon running other code.
pub const BUILD_ID: &str = env!("JUCODE_BUILD_ID");

/// One encoded event line, `\n`-terminated, shared by every consumer.
pub type EventLine = Bytes;

/// `{"type":"hello","protocol":2,"version":"..."}`, the first line of `jucode serve`.
pub fn hello_line() -> EventLine {
    jucode_daemon::protocol::encode_line(&hello(None))
}

/// The `hello` of the daemon socket: the same, plus this build's id.
pub fn daemon_hello_line() -> EventLine {
    jucode_daemon::protocol::encode_line(&hello(Some(BUILD_ID.to_owned())))
}

/// The `hello` of this build, without `build`.
pub fn hello_value() -> Hello {
    hello(None)
}

fn hello(build: Option<String>) -> Hello {
    Hello {
        protocol: PROTOCOL_VERSION,
        version: VERSION.to_owned(),
        build,
    }
}

/// Serializes events of one session, appending its `"session"` field.
///
/// The suffix `,"session":"<id>"}\n` is built once per session; encoding an event is
/// then a single `serde_json::to_writer` plus a copy of the suffix, which keeps the
/// per-delta cost of the hot streaming path to one allocation.
#[derive(Debug, Clone)]
pub struct EventEncoder {
    suffix: Bytes,
    /// `]` and the suffix: the end of a `transcript` built from encoded items.
    items_end: Bytes,
}

/// The start of a `transcript` event, as [`EventEncoder::transcript`] writes it.
const TRANSCRIPT_START: &[u8] = br#"{"type":"transcript","items":["#;

impl EventEncoder {
    pub fn new(session_id: &str) -> Self {
        let quoted = serde_json::to_string(session_id).unwrap_or_else(|_| "\"\"".to_owned());
        let suffix = format!(",\"session\":{quoted}}}\n");
        Self {
            items_end: Bytes::from(format!("]{suffix}")),
            suffix: Bytes::from(suffix),
        }
    }

    /// A `transcript` event from items already encoded (each a [`TranscriptItem`]'s
    /// JSON), as segments whose concatenation is the line: the items are shared, not
    /// copied, which keeps a long session's snapshot to reference counts.
    pub fn transcript(&self, items: &[Bytes]) -> Vec<Bytes> {
        static COMMA: Bytes = Bytes::from_static(b",");
        let mut segments = Vec::with_capacity(items.len() * 2 + 2);
        segments.push(Bytes::from_static(TRANSCRIPT_START));
        for (index, item) in items.iter().enumerate() {
            if index > 0 {
                segments.push(COMMA.clone());
            }
            segments.push(item.clone());
        }
        segments.push(self.items_end.clone());
        segments
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
        let status = encoder.encode(&Event::status(SessionStatus::Queued(2)));
        assert_eq!(
            &status[..],
            b"{\"type\":\"status\",\"message\":\"queued: 2\",\"session\":\"s-1\"}\n"
        );
        assert_eq!(
            &unit[..],
            b"{\"type\":\"connecting\",\"session\":\"s-1\"}\n"
        );
    }

    #[test]
    fn a_transcript_from_encoded_items_is_the_typed_encoding() {
        let encoder = EventEncoder::new("s");
        let items = vec![
            TranscriptItem::User(UserMessageEvent {
                content: "hi".into(),
                images: vec![],
                files: vec!["/f".into()],
            }),
            TranscriptItem::Assistant {
                content: "yo\n".into(),
            },
        ];
        let typed = encoder.encode(&Event::Transcript {
            items: items.clone(),
        });
        let encoded: Vec<Bytes> = items
            .iter()
            .map(|item| Bytes::from(serde_json::to_vec(item).unwrap()))
            .collect();
        assert_eq!(encoder.transcript(&encoded).concat(), typed.to_vec());
        let empty = encoder.encode(&Event::Transcript { items: vec![] });
        assert_eq!(encoder.transcript(&[]).concat(), empty.to_vec());
    }

    #[test]
    fn hello_is_exact() {
        let line = hello_line();
        assert_eq!(
            String::from_utf8(line.to_vec()).unwrap(),
            format!("{{\"type\":\"hello\",\"protocol\":2,\"version\":\"{VERSION}\"}}\n")
        );
        assert_eq!(
            String::from_utf8(daemon_hello_line().to_vec()).unwrap(),
            format!(
                "{{\"type\":\"hello\",\"protocol\":2,\"version\":\"{VERSION}\",\"build\":\"{BUILD_ID}\"}}\n"
            )
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
