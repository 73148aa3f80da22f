//! The ACP-shaped JSON both translators write: `session/update` payloads, content
//! blocks, tool calls, permission options, session modes and config options.
//!
//! This is the one definition of those shapes in jucode (as `protocol/` is for the serve
//! protocol). The stable ACP v1 names are used for both dialects; the few kinds only
//! the dashboard dialect sends (`state_update`, `user_message`,
//! `tool_call_content_chunk`, `permission_resolved`, `notice`) follow the ACP v2 draft
//! and the WebSocket peer's documented shape. Types are serialize-only: what clients
//! send is read by `super::prompt` and the servers' own request types.

use serde::Serialize;

/// One `session/update` payload (`params.update`), tagged by `sessionUpdate`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
#[serde(rename_all_fields = "camelCase")]
pub enum SessionUpdate {
    /// A user message of the history (`session/load`) — ACP.
    UserMessageChunk(ContentChunk),
    /// A user message was accepted (a turn starts) — dashboard.
    UserMessage(ContentChunk),
    AgentMessageChunk(ContentChunk),
    AgentThoughtChunk(ContentChunk),
    /// A new tool call — ACP (the dashboard dialect opens cards with an update).
    ToolCall(ToolCallUpdate),
    ToolCallUpdate(ToolCallUpdate),
    /// Streamed tool output — dashboard.
    ToolCallContentChunk {
        tool_call_id: String,
        content: ContentBlock,
    },
    Plan {
        entries: Vec<PlanEntry>,
    },
    AvailableCommandsUpdate {
        available_commands: Vec<AvailableCommand>,
    },
    CurrentModeUpdate {
        current_mode_id: String,
    },
    ConfigOptionUpdate {
        config_options: Vec<ConfigOption>,
    },
    UsageUpdate(UsageUpdate),
    /// What the session is doing — dashboard.
    StateUpdate {
        state: TurnState,
        #[serde(skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        /// Why the turn failed, with `stopReason: "error"`.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// An approval request was closed, by whoever answered it — dashboard.
    PermissionResolved {
        tool_call_id: String,
        decision: crate::protocol::Resolution,
    },
    /// An `info` or `error` of the session — dashboard.
    Notice {
        level: NoticeLevel,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TurnState {
    Running,
    Idle,
    RequiresAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NoticeLevel {
    Info,
    Error,
}

/// Why a turn ended. `error` is the dashboard's only (ACP answers a failed turn with a
/// JSON-RPC error instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    Cancelled,
    MaxTokens,
    Refusal,
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentChunk {
    pub content: ContentBlock,
    /// One id per message: every chunk of a message carries the same.
    pub message_id: String,
}

/// Content as the agent writes it (text only: jucode's events carry text).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text { text: String },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }
}

/// A tool call, new or changed. For `tool_call` the title is always set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolStatus>,
    /// Replaces the call's content collection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<Location>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    Other,
    /// The dashboards' protocol names four kinds (`read`, `write`, `command`, `other`):
    /// these two are its own, never sent to an ACP client.
    Write,
    Command,
}

impl ToolKind {
    /// The kind as the dashboards' protocol names it: what the call does to the
    /// workspace, in its four words.
    pub fn for_dashboard(self) -> ToolKind {
        match self {
            ToolKind::Read | ToolKind::Search | ToolKind::Fetch => ToolKind::Read,
            ToolKind::Edit | ToolKind::Delete | ToolKind::Move | ToolKind::Write => ToolKind::Write,
            ToolKind::Execute | ToolKind::Command => ToolKind::Command,
            ToolKind::Think | ToolKind::Other => ToolKind::Other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[serde(rename_all_fields = "camelCase")]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    Diff {
        path: String,
        /// `null` for a new file.
        old_text: Option<String>,
        new_text: String,
    },
    Terminal {
        terminal_id: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Location {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct PlanEntry {
    pub content: String,
    pub priority: &'static str,
    pub status: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct AvailableCommand {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<CommandInput>,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct CommandInput {
    pub hint: String,
}

/// ACP's `usage_update` (context used of the window, cumulative cost); the dashboard
/// dialect adds the turn's real token counts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageUpdate {
    pub used: u64,
    pub size: u64,
    pub cost: Cost,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_write_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, schemars::JsonSchema)]
pub struct Cost {
    pub amount: f64,
    pub currency: &'static str,
}

/// `session/request_permission` params (without `sessionId`, which the caller adds).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionAsk {
    pub tool_call: ToolCallUpdate,
    pub options: Vec<PermissionOption>,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: &'static str,
    pub name: &'static str,
    pub kind: &'static str,
}

/// The four answers, with the ids the answer names. `reject_always` denies this call:
/// jucode has no standing denial (the next call asks again).
pub const PERMISSION_OPTIONS: [PermissionOption; 4] = [
    PermissionOption {
        option_id: "allow_once",
        name: "Allow",
        kind: "allow_once",
    },
    PermissionOption {
        option_id: "allow_always",
        name: "Always allow this tool",
        kind: "allow_always",
    },
    PermissionOption {
        option_id: "reject_once",
        name: "Deny",
        kind: "reject_once",
    },
    PermissionOption {
        option_id: "reject_always",
        name: "Deny (ask again next time)",
        kind: "reject_always",
    },
];

/// `modes` of `session/new` and friends.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModeState {
    pub current_mode_id: String,
    pub available_modes: Vec<Mode>,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Mode {
    pub id: &'static str,
    pub name: &'static str,
    pub description: &'static str,
}

/// A `select` config option (model, reasoning effort).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOption {
    pub id: &'static str,
    pub name: &'static str,
    pub category: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub current_value: String,
    pub options: Vec<ConfigValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ConfigValue {
    pub value: String,
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn updates_are_tagged_and_camel_case() {
        let chunk = SessionUpdate::AgentMessageChunk(ContentChunk {
            content: ContentBlock::text("hi"),
            message_id: "m1".into(),
        });
        assert_eq!(
            serde_json::to_value(&chunk).unwrap(),
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"},"messageId":"m1"})
        );
        let diff = ToolCallContent::Diff {
            path: "/a".into(),
            old_text: None,
            new_text: "x".into(),
        };
        assert_eq!(
            serde_json::to_value(&diff).unwrap(),
            json!({"type":"diff","path":"/a","oldText":null,"newText":"x"})
        );
        let state = SessionUpdate::StateUpdate {
            state: TurnState::Idle,
            stop_reason: Some(StopReason::EndTurn),
            message: None,
        };
        assert_eq!(
            serde_json::to_value(&state).unwrap(),
            json!({"sessionUpdate":"state_update","state":"idle","stopReason":"end_turn"})
        );
        let mode = SessionUpdate::CurrentModeUpdate {
            current_mode_id: "auto".into(),
        };
        assert_eq!(
            serde_json::to_value(&mode).unwrap(),
            json!({"sessionUpdate":"current_mode_update","currentModeId":"auto"})
        );
    }
}
