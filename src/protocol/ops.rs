//! Client → engine ops, and the parser that turns one input line into an [`Op`] or a
//! precise error message.
//!
//! The parser tries the fast path first (one serde pass straight into [`Op`]); only when
//! that fails does it look at the line again to say *why*, so well-formed traffic never
//! pays for diagnostics.

use serde::Deserialize;

/// One op of serve protocol v2. Unknown fields (notably `session`) are ignored: a
/// `jucode serve` process hosts exactly one session, and the daemon routes on `session`
/// before the op reaches an engine.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    UserMessage(UserInput),
    Command {
        input: String,
    },
    Steer {
        #[serde(default)]
        index: Option<i64>,
    },
    Unqueue {
        #[serde(default)]
        index: Option<i64>,
    },
    Interrupt {
        #[serde(default)]
        index: Option<i64>,
    },
    Approve(ApproveOp),
    SetApprovalMode {
        mode: String,
    },
    AgentRuns,
    SubagentTranscript {
        agent_id: String,
    },
    ApprovePlan(ApprovePlanOp),
    SetAttended {
        attended: bool,
    },
    DecideAction {
        action: String,
        decision: String,
    },
    McpList,
    McpSet(serde_json::Map<String, serde_json::Value>),
    McpRemove(serde_json::Map<String, serde_json::Value>),
    McpToggle(serde_json::Map<String, serde_json::Value>),
    Shutdown,
}

/// Every op name [`Op`] knows, to tell "unknown op" from "known op, wrong fields".
pub const OP_NAMES: &[&str] = &[
    "user_message",
    "command",
    "steer",
    "unqueue",
    "interrupt",
    "approve",
    "set_approval_mode",
    "agent_runs",
    "subagent_transcript",
    "approve_plan",
    "set_attended",
    "decide_action",
    "mcp_list",
    "mcp_set",
    "mcp_remove",
    "mcp_toggle",
    "shutdown",
];

/// A user message as submitted: text plus optional local images and files.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct UserInput {
    pub content: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub images: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub files: Vec<String>,
}

impl UserInput {
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            ..Self::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ApproveOp {
    pub call_id: String,
    pub decision: String,
    #[serde(default)]
    pub always: bool,
    #[serde(default)]
    pub hunks: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ApprovePlanOp {
    pub id: String,
    pub decision: String,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub feedback: Option<String>,
}

fn null_as_empty<'de, D>(deserializer: D) -> Result<Vec<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Option::<Vec<String>>::deserialize(deserializer)?.unwrap_or_default())
}

/// Parses one non-empty input line. The error string is the complete `message` of the
/// `error` event the client gets.
pub fn parse_op(line: &[u8]) -> Result<Op, String> {
    match serde_json::from_slice::<Op>(line) {
        Ok(op) => Ok(op),
        Err(fast_err) => Err(diagnose(line, fast_err)),
    }
}

fn diagnose(line: &[u8], fast_err: serde_json::Error) -> String {
    let value: serde_json::Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(err) => return format!("invalid command: {err}"),
    };
    let Some(object) = value.as_object() else {
        return "invalid command: expected a JSON object with an \"op\" field".to_owned();
    };
    match object.get("op") {
        None => "invalid command: missing \"op\" field".to_owned(),
        Some(serde_json::Value::String(name)) if OP_NAMES.contains(&name.as_str()) => {
            format!("invalid {name}: {}", strip_position(&fast_err))
        }
        Some(serde_json::Value::String(name)) => format!("unknown op: {name}"),
        Some(other) => format!("invalid command: \"op\" must be a string, got {other}"),
    }
}

/// serde_json appends "at line 1 column 873" to data errors; on a one-line protocol that
/// position is noise to a front-end developer reading the message.
fn strip_position(err: &serde_json::Error) -> String {
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
    fn parses_user_message_with_attachments_and_ignores_session() {
        let op =
            parse_op(br#"{"op":"user_message","content":"hi","images":["/a.png"],"session":"x"}"#)
                .unwrap();
        assert_eq!(
            op,
            Op::UserMessage(UserInput {
                content: "hi".into(),
                images: vec!["/a.png".into()],
                files: vec![],
            })
        );
    }

    #[test]
    fn null_attachments_mean_none() {
        let op = parse_op(br#"{"op":"user_message","content":"x","images":null}"#).unwrap();
        assert_eq!(op, Op::UserMessage(UserInput::text("x")));
    }

    #[test]
    fn unit_ops_parse() {
        assert_eq!(parse_op(br#"{"op":"shutdown"}"#).unwrap(), Op::Shutdown);
        assert_eq!(parse_op(br#"{"op":"agent_runs"}"#).unwrap(), Op::AgentRuns);
        assert_eq!(
            parse_op(br#"{"op":"interrupt","index":-1}"#).unwrap(),
            Op::Interrupt { index: Some(-1) }
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(
            parse_op(b"{nope")
                .unwrap_err()
                .starts_with("invalid command: ")
        );
        assert_eq!(
            parse_op(b"[1,2]").unwrap_err(),
            "invalid command: expected a JSON object with an \"op\" field"
        );
        assert_eq!(
            parse_op(br#"{"content":"x"}"#).unwrap_err(),
            "invalid command: missing \"op\" field"
        );
        assert_eq!(
            parse_op(br#"{"op":"dance"}"#).unwrap_err(),
            "unknown op: dance"
        );
        assert_eq!(
            parse_op(br#"{"op":"user_message"}"#).unwrap_err(),
            "invalid user_message: missing field `content`"
        );
        assert_eq!(
            parse_op(br#"{"op":"steer","index":"x"}"#).unwrap_err(),
            "invalid steer: invalid type: string \"x\", expected i64"
        );
    }

    #[test]
    fn every_listed_name_is_a_real_op() {
        for name in OP_NAMES {
            let err = parse_op(format!(r#"{{"op":"{name}"}}"#).as_bytes()).err();
            if let Some(err) = err {
                assert!(!err.starts_with("unknown op"), "{name}: {err}");
            }
        }
    }
}
