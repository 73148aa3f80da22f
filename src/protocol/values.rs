//! The closed sets of values the protocol carries (modes, decisions, statuses, states),
//! as enums: the engine matches on them, and the schema lists them, so a new value
//! cannot be emitted without being declared here.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The five approval modes, strictest first in permissiveness order except `plan`
/// (see `engine::turn::approvals`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalMode {
    Manual,
    Plan,
    AutoEdit,
    Auto,
    FullAccess,
}

impl ApprovalMode {
    pub const ALL: [ApprovalMode; 5] = [
        Self::Manual,
        Self::Plan,
        Self::AutoEdit,
        Self::Auto,
        Self::FullAccess,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Plan => "plan",
            Self::AutoEdit => "auto-edit",
            Self::Auto => "auto",
            Self::FullAccess => "full-access",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == text)
    }
}

impl fmt::Display for ApprovalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a hosted session's conversation is shown (`surface`): the structured view, or
/// its engine's own TUI on a terminal the daemon runs (docs/daemon-protocol.md,
/// *Terminals*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    Chat,
    Terminal,
}

impl Surface {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Terminal => "terminal",
        }
    }
}

/// What commands a tool starts may do (`[sandbox] mode`, `set_sandbox_mode`, `/sandbox`;
/// `docs/security.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read anywhere the user can, write nowhere (but `/dev/null` and the like).
    ReadOnly,
    /// Also write under the working directory, the temp directory and `writable_roots`.
    WorkspaceWrite,
    /// No sandbox: approvals alone.
    Off,
}

impl SandboxMode {
    pub const ALL: [SandboxMode; 3] = [Self::ReadOnly, Self::WorkspaceWrite, Self::Off];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::Off => "off",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == text)
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An answer to an approval request or a deferred action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
}

impl Decision {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "allow" => Some(Self::Allow),
            "deny" => Some(Self::Deny),
            _ => None,
        }
    }
}

/// How an approval request was closed (`approval_resolved.decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// A client allowed the call.
    Allow,
    /// A client denied it: it did not run.
    Deny,
    /// The turn was interrupted, or the session ended, before anyone answered.
    Interrupted,
    /// Nobody watches the session any more: the call became a deferred action.
    Deferred,
}

impl From<Decision> for Resolution {
    fn from(decision: Decision) -> Self {
        match decision {
            Decision::Allow => Self::Allow,
            Decision::Deny => Self::Deny,
        }
    }
}

/// The user's answer to an MCP server's `elicitation/create` (`elicitation_response.action`,
/// and how `elicitation_resolved` closed the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ElicitationAction {
    /// Send `content` to the server.
    Accept,
    /// The user said no.
    Decline,
    /// The user dismissed the request (also: an interrupt, or the session ending).
    Cancel,
}

impl ElicitationAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::Decline => "decline",
            Self::Cancel => "cancel",
        }
    }
}

/// The answer to a proposed plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanDecision {
    Approve,
    Revise,
}

/// Where a proposed plan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    Approved,
    Revising,
}

/// Where the session's goal stands (`goal.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoalStatus {
    /// The session works toward it, turn after turn.
    Active,
    /// The model said it is reached (`update_goal`).
    Achieved,
    /// The model said it cannot go on without the user (`update_goal`).
    Blocked,
    /// Its turns used up its token budget.
    BudgetExhausted,
}

impl GoalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Achieved => "achieved",
            Self::Blocked => "blocked",
            Self::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// What a `subagent_lifecycle` notice says happened to a subagent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleStatus {
    /// It was spawned and starts on its task.
    Started,
    /// A milestone while it works (a message from its parent read, an approval asked).
    Progress,
    /// It finished with a final answer.
    Completed,
    /// It failed (its model request failed, its context overflowed).
    Errored,
    /// An interrupt, or the session ending, stopped it.
    Interrupted,
    /// Its parent closed it (`close_agent`).
    Closed,
}

/// `info.stop_reason` (jucode addition): the `info` says why the turn's reply ended
/// before the model finished it, as a value the translators of the serve protocol read
/// as the turn's stop reason (ACP's `stopReason`), so nothing matches on its wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplyStop {
    /// The model reached its output token limit.
    MaxTokens,
    /// The provider or the model refused (a content filter, a refusal stop).
    Refusal,
}

/// What a tool call does, as its tool describes it (`tool_start.kind`, the transcript's
/// `tool` items; jucode addition). The words front-ends key icons on: the kinds the
/// Agent Client Protocol names its tool calls with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    /// Work on the session itself (its plan, goal, subagents), not the machine.
    Think,
    Fetch,
    Other,
}

/// `model_status.state`: whether requests to the model can work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelState {
    Ready,
    /// The provider needs an API key it does not have.
    MissingApiKey,
    /// The provider's table in the config is broken (the startup errors say how).
    InvalidConfig,
}

/// The `message` of a `status` event: what the session is doing. `ready` ends a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStatus {
    Ready,
    /// A turn is running.
    Streaming,
    /// A turn is running and this many messages wait behind it.
    Queued(usize),
    /// A queued message was sent into the running turn.
    Steering,
    Interrupted,
    /// The conversation is being summarised.
    Compacting,
    /// The approval mode changed to this one.
    ApprovalMode(ApprovalMode),
    /// The project is trusted from now on: the directory, or `<root> (repository)`.
    Trusted(String),
    /// The user refused to trust the project in this directory.
    Untrusted(String),
}

impl fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ready => f.write_str("ready"),
            Self::Streaming => f.write_str("streaming"),
            Self::Queued(count) => write!(f, "queued: {count}"),
            Self::Steering => f.write_str("steering"),
            Self::Interrupted => f.write_str("interrupted"),
            Self::Compacting => f.write_str("compacting"),
            Self::ApprovalMode(mode) => write!(f, "approval mode: {mode}"),
            Self::Trusted(what) => write!(f, "trusted {what}"),
            Self::Untrusted(what) => write!(f, "untrusted {what}"),
        }
    }
}

impl SessionStatus {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "ready" => Self::Ready,
            "streaming" => Self::Streaming,
            "steering" => Self::Steering,
            "interrupted" => Self::Interrupted,
            "compacting" => Self::Compacting,
            other => {
                if let Some(count) = other.strip_prefix("queued: ") {
                    Self::Queued(count.parse().ok()?)
                } else if let Some(what) = other.strip_prefix("trusted ").filter(|w| !w.is_empty())
                {
                    Self::Trusted(what.to_owned())
                } else if let Some(what) =
                    other.strip_prefix("untrusted ").filter(|w| !w.is_empty())
                {
                    Self::Untrusted(what.to_owned())
                } else {
                    Self::ApprovalMode(ApprovalMode::parse(other.strip_prefix("approval mode: ")?)?)
                }
            }
        })
    }
}

impl Serialize for SessionStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SessionStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown status {text:?}")))
    }
}

impl JsonSchema for SessionStatus {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SessionStatus".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mode_names: Vec<&str> = ApprovalMode::ALL.iter().map(|m| m.as_str()).collect();
        schemars::json_schema!({
            "description": "What the session is doing; `ready` ends a turn.",
            "anyOf": [
                {"type": "string", "enum": ["ready", "streaming", "steering", "interrupted", "compacting"]},
                {"type": "string", "pattern": "^queued: (0|[1-9][0-9]*)$"},
                {"type": "string", "pattern": format!("^approval mode: ({})$", mode_names.join("|"))},
                {"type": "string", "pattern": "^(un)?trusted .+$"}
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_as_strings() {
        let all = [
            SessionStatus::Ready,
            SessionStatus::Streaming,
            SessionStatus::Queued(3),
            SessionStatus::Steering,
            SessionStatus::Interrupted,
            SessionStatus::Compacting,
            SessionStatus::ApprovalMode(ApprovalMode::AutoEdit),
            SessionStatus::Trusted("/r (repository)".into()),
            SessionStatus::Untrusted("/r/app".into()),
        ];
        for status in all {
            let json = serde_json::to_string(&status).unwrap();
            let back: SessionStatus = serde_json::from_str(&json).unwrap();
            assert_eq!(back, status, "{json}");
        }
        assert_eq!(
            serde_json::to_string(&SessionStatus::Queued(2)).unwrap(),
            "\"queued: 2\""
        );
        assert!(SessionStatus::parse("queued: x").is_none());
        assert!(SessionStatus::parse("approval mode: yolo").is_none());
    }

    #[test]
    fn modes_are_kebab_case() {
        for mode in ApprovalMode::ALL {
            assert_eq!(
                serde_json::to_string(&mode).unwrap(),
                format!("\"{}\"", mode.as_str())
            );
            assert_eq!(ApprovalMode::parse(mode.as_str()), Some(mode));
        }
    }
}
