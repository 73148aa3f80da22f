//! Client → engine ops, and the parser that turns one input line into an [`Op`] or a
//! precise error message.
//!
//! Only a JSON object with a string `op` is an op. serde reads an internally tagged
//! enum from a JSON array too (`["shutdown"]` would be a shutdown), so the parser looks
//! at the first byte before serde does. The fast path is then one serde pass straight
//! into [`Op`]; only when that fails is the line looked at again to say *why*, so
//! well-formed traffic never pays for diagnostics.

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::values::{
    ApprovalMode, Decision, ElicitationAction, PlanDecision, SandboxMode, Surface,
};

/// One op of serve protocol v2. Unknown fields (notably `session`) are ignored: a
/// `jucode serve` process hosts exactly one session, and the daemon routes on `session`
/// before the op reaches an engine.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema, strum::EnumDiscriminants)]
#[serde(tag = "op", rename_all = "snake_case")]
#[strum_discriminants(
    name(OpName),
    derive(Deserialize, Serialize),
    serde(rename_all = "snake_case")
)]
pub enum Op {
    /// Submits a user turn, or queues it behind the running one.
    UserMessage(UserInput),
    /// Runs a slash command (`/model`, `/approve`, `/quit`, ...).
    Command {
        input: String,
    },
    /// Sends a queued message into the running turn.
    Steer {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<i64>,
    },
    /// Takes a queued message back out of the queue.
    Unqueue {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<i64>,
    },
    /// Stops the running turn; with `index`, that queued message starts next at once.
    Interrupt {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<i64>,
    },
    /// Answers an `approval_request`.
    Approve(ApproveOp),
    SetApprovalMode {
        mode: ApprovalMode,
    },
    /// Changes the session's sandbox mode (`sandbox` follows, to every client).
    SetSandboxMode {
        mode: SandboxMode,
    },
    /// Sets one of a hosted engine's own settings (an id from `session_options`);
    /// answered with the new `session_options`. jucode's own engine has none.
    SetSessionOption {
        id: String,
        value: serde_json::Value,
    },
    /// Asks for the `agent_runs` view.
    AgentRuns,
    SubagentTranscript {
        agent_id: String,
    },
    /// Answers a `proposed_plan`.
    ApprovePlan(ApprovePlanOp),
    /// Marks whether a client is watching the session.
    SetAttended {
        attended: bool,
    },
    /// Decides a deferred action.
    DecideAction {
        action: String,
        decision: Decision,
    },
    McpList,
    /// Adds or replaces an MCP server.
    McpSet {
        name: String,
        #[serde(deserialize_with = "object_only")]
        server: McpServerConfig,
        /// jucode addition: `false` adds the server to this session only, leaving the
        /// config file alone (an editor's `mcpServers` over ACP). Default `true`.
        #[serde(default = "persist_default", skip_serializing_if = "is_persisted")]
        persist: bool,
    },
    McpRemove {
        name: String,
    },
    McpToggle {
        name: String,
        enabled: bool,
    },
    /// Signs in to a remote server that needs it: answered with `mcp_login {server,
    /// url}`, the address to open in a browser; the server connects when the browser
    /// comes back.
    McpLogin {
        name: String,
    },
    /// Forgets a remote server's sign-in (revoking its tokens where the server offers
    /// it); the server then needs a sign-in again.
    McpLogout {
        name: String,
    },
    /// Answers an `elicitation_request`. `content` (an object) only with `accept`; it is
    /// checked against the request's schema, whose defaults fill omitted fields.
    ElicitationResponse {
        id: String,
        action: ElicitationAction,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<serde_json::Value>,
    },
    /// jucode addition: this client serves the session's file reads and writes and its
    /// shell commands (an editor's buffers and terminals); all `false` stops it.
    ClientCapabilities {
        #[serde(default)]
        read_text_file: bool,
        #[serde(default)]
        write_text_file: bool,
        #[serde(default)]
        terminal: bool,
    },
    /// jucode addition: the answer to a `client_request`: `result`, or `error`.
    ClientResponse {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// jucode addition: switches the model and/or the reasoning effort, as `/model NAME
    /// [EFFORT]` does: `model` absent keeps the current one. Answered as `/model` is
    /// (`model_status` to every client, an `error` to the sender when it cannot be used).
    SetModel {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_effort: Option<String>,
    },
    /// jucode addition: asks for the `model_view` (the models to pick from), as `/model`
    /// without arguments does.
    ListModels,
    /// jucode addition: answered with `synced {token}`, to the sender only, once the
    /// session has handled every op this client sent before it (and emitted what they
    /// caused): how a client learns that its earlier ops have been applied.
    Sync {
        token: String,
    },
    /// Daemon sessions of other engines only: moves the conversation to the engine's
    /// own TUI on a terminal the daemon runs (`terminal`, at the next turn boundary),
    /// or back to the structured view (`chat`, asking the TUI to quit).
    Surface {
        to: Surface,
    },
    /// Keys for the session's terminal: `data` is the bytes, base64.
    TermInput {
        data: String,
    },
    /// This client's terminal size; the terminal takes the size of the client that
    /// used it last (docs/daemon-protocol.md, *Terminals*).
    TermResize {
        cols: u16,
        rows: u16,
    },
    /// Ends the session (in process: the process).
    Shutdown,
}

impl OpName {
    /// The op name as it appears on the wire.
    pub fn as_str(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The op a wire name names, if any.
    pub fn parse(name: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
    }
}

/// A user message as submitted: text plus optional local images and files.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
pub struct UserInput {
    pub content: String,
    /// Local image paths, sent to the model as images; `null` means none.
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schemars(with = "Option<Vec<String>>")]
    pub images: Vec<String>,
    /// Local files of any type, which the model is told where to find; `null` means none.
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schemars(with = "Option<Vec<String>>")]
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

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ApproveOp {
    pub call_id: String,
    pub decision: Decision,
    /// With `allow`: stop asking for this tool for the rest of the session.
    #[serde(default)]
    pub always: bool,
    /// With `allow`, for requests that offered hunks: apply only these.
    #[serde(default)]
    pub hunks: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ApprovePlanOp {
    pub id: String,
    pub decision: PlanDecision,
    /// The approval mode to implement the plan in (default `auto-edit`; not `plan`).
    #[serde(default)]
    pub mode: Option<ApprovalMode>,
    /// Notes for the implementation, or (required for `revise`) what to change.
    #[serde(default)]
    pub feedback: Option<String>,
}

/// One MCP server, as `[mcp_servers.<name>]` in the config and `mcp_set` carry it: a
/// `command` to start (stdio) or a `url` (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// How a remote server that asks for a sign-in is signed in to (all optional:
    /// without it, jucode registers itself with the server's authorization server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<Box<McpOAuthConfig>>,
}

/// `oauth` of a remote MCP server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpOAuthConfig {
    /// A client registered with the authorization server beforehand (no dynamic
    /// registration then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Its secret, for a confidential client (`${VAR}` is expanded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The scopes to ask for; the server's advertised ones when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

fn persist_default() -> bool {
    true
}

fn is_persisted(persist: &bool) -> bool {
    *persist
}

fn null_as_empty<'de, D>(deserializer: D) -> Result<Vec<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Option::<Vec<String>>::deserialize(deserializer)?.unwrap_or_default())
}

/// A nested struct from a JSON object only (serde would take an array too).
fn object_only<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let object = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
    serde_json::from_value(serde_json::Value::Object(object)).map_err(serde::de::Error::custom)
}

/// Parses one non-empty input line. The error string is the complete `message` of the
/// `error` event the client gets.
pub fn parse_op(line: &[u8]) -> Result<Op, String> {
    if !jucode_daemon::is_object(line) {
        return Err(not_an_op(line));
    }
    match serde_json::from_slice::<Op>(line) {
        Ok(op) => Ok(op),
        Err(fast_err) => Err(diagnose(line, fast_err)),
    }
}

fn not_an_op(line: &[u8]) -> String {
    match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
        Ok(_) => "invalid command: expected a JSON object with a string \"op\" field".to_owned(),
        Err(err) => format!("invalid command: {err}"),
    }
}

fn diagnose(line: &[u8], fast_err: serde_json::Error) -> String {
    let value: serde_json::Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(err) => return format!("invalid command: {err}"),
    };
    let Some(object) = value.as_object() else {
        return "invalid command: expected a JSON object with a string \"op\" field".to_owned();
    };
    match object.get("op") {
        None => "invalid command: missing \"op\" field".to_owned(),
        Some(serde_json::Value::String(name)) if OpName::parse(name).is_some() => {
            format!(
                "invalid {name}: {}",
                jucode_daemon::strip_position(&fast_err)
            )
        }
        Some(serde_json::Value::String(name)) => format!("unknown op: {name}"),
        Some(other) => format!("invalid command: \"op\" must be a string, got {other}"),
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
    fn arrays_and_other_non_objects_are_never_ops() {
        for line in [
            &br#"["shutdown"]"#[..],
            br#"["set_approval_mode","full-access"]"#,
            br#"  ["user_message","hi"]"#,
            br#""shutdown""#,
            b"42",
            b"null",
            b"true",
        ] {
            assert_eq!(
                parse_op(line).unwrap_err(),
                "invalid command: expected a JSON object with a string \"op\" field",
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // Nor are nested objects read from arrays.
        let err = parse_op(br#"{"op":"mcp_set","name":"fs","server":["npx","srv"]}"#).unwrap_err();
        assert!(err.starts_with("invalid mcp_set: "), "{err}");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(
            parse_op(b"{nope")
                .unwrap_err()
                .starts_with("invalid command: ")
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
            parse_op(br#"{"op":7}"#).unwrap_err(),
            "invalid command: \"op\" must be a string, got 7"
        );
        assert_eq!(
            parse_op(br#"{"op":"user_message"}"#).unwrap_err(),
            "invalid user_message: missing field `content`"
        );
        assert_eq!(
            parse_op(br#"{"op":"steer","index":"x"}"#).unwrap_err(),
            "invalid steer: invalid type: string \"x\", expected i64"
        );
        let err = parse_op(br#"{"op":"set_approval_mode","mode":"yolo"}"#).unwrap_err();
        assert!(
            err.starts_with("invalid set_approval_mode: unknown variant `yolo`"),
            "{err}"
        );
        let err = parse_op(br#"{"op":"approve","call_id":"c","decision":"maybe"}"#).unwrap_err();
        assert!(
            err.starts_with("invalid approve: unknown variant `maybe`"),
            "{err}"
        );
    }

    #[test]
    fn op_names_come_from_the_enum() {
        assert_eq!(OpName::parse("user_message"), Some(OpName::UserMessage));
        assert_eq!(OpName::SetApprovalMode.as_str(), "set_approval_mode");
        assert_eq!(OpName::parse("open"), None);
        let op = parse_op(br#"{"op":"mcp_toggle","name":"fs","enabled":false}"#).unwrap();
        assert_eq!(OpName::from(&op), OpName::McpToggle);
    }
}
