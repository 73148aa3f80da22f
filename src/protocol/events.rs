//! Engine → client events. Field names and order follow serve protocol v2 exactly; the
//! `session` field every event carries is appended by [`super::EventEncoder`], not stored
//! here, so an event value never needs to know which session it belongs to.

use serde::Serialize;

/// One event of serve protocol v2.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    Startup {
        version: String,
        session_id: String,
        profile_dir: String,
        config_path: String,
        cwd: String,
        model: String,
        context_window: u64,
    },
    ModelStatus(ModelStatus),
    CommandList {
        commands: Vec<CommandInfo>,
    },
    ApprovalMode {
        mode: String,
    },
    McpServers {
        servers: Vec<serde_json::Value>,
    },
    Info {
        message: String,
    },
    Error {
        message: String,
    },
    Status {
        message: String,
    },
    UserMessage(UserMessageEvent),
    PendingMessages {
        messages: Vec<String>,
    },
    Unqueued(UnqueuedEvent),
    Connecting,
    ThinkingStart,
    ReasoningDelta {
        delta: String,
    },
    AssistantStart,
    AssistantDelta {
        delta: String,
    },
    Retrying {
        attempt: u32,
    },
    ToolStart {
        call_id: String,
        name: String,
    },
    ToolUpdate {
        call_id: String,
        name: String,
        output: String,
    },
    ToolOutput {
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
    },
    Usage(TurnUsage),
    ContextUsage {
        tokens: u64,
        tokenizer: String,
        cost: f64,
    },
    ModelView {
        models: Vec<ModelViewEntry>,
        active_effort: Option<String>,
    },
    AgentRuns {
        workflows: Vec<serde_json::Value>,
        agents: Vec<serde_json::Value>,
    },
    Transcript {
        items: Vec<serde_json::Value>,
    },
    ApprovalRequest {
        call_id: String,
        name: String,
        summary: String,
        subagent_id: Option<String>,
        hunks: Option<Vec<Hunk>>,
    },
    /// jucode addition: an approval request was answered (or turned into a deferred
    /// action), so every client can close its dialog.
    ApprovalResolved {
        call_id: String,
        decision: String,
    },
    Attended {
        attended: bool,
    },
    ActionDeferred {
        id: String,
        session_id: String,
        cwd: String,
        call_id: String,
        name: String,
        arguments: serde_json::Value,
        summary: String,
        subagent_id: Option<String>,
        digest: String,
        created_at: u64,
    },
    ActionDecided {
        id: String,
        decision: String,
        output: Option<String>,
        is_error: bool,
    },
    PlanDraft {
        id: String,
        title: String,
        append: String,
    },
    ProposedPlan {
        id: String,
        title: String,
        markdown: String,
        status: String,
    },
}

impl Event {
    pub fn info(message: impl Into<String>) -> Self {
        Event::Info {
            message: message.into(),
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Event::Error {
            message: message.into(),
        }
    }

    pub fn status(message: impl Into<String>) -> Self {
        Event::Status {
            message: message.into(),
        }
    }
}

/// One hunk of a proposed edit, for partial approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hunk {
    /// Stable for the same file content and arguments, e.g. `f0h1`.
    pub id: String,
    pub file: String,
    /// The unified-diff header, e.g. `@@ -12,7 +12,8 @@`.
    pub header: String,
    /// Unified-diff lines, each starting with ` `, `-` or `+`.
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelStatus {
    pub provider: String,
    pub model: String,
    pub reasoning_effort: Option<String>,
    pub context_window: u64,
    pub context_limit: u64,
    pub max_output_tokens: u64,
    pub reasoning_efforts: Vec<String>,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandInfo {
    pub command: String,
    pub marker: Option<String>,
    pub args: String,
    pub description: String,
}

/// The echo of a user message (`user_message`) or of a message taken back out of the
/// queue (`unqueued`). Attachments appear only when the message had some, so the common
/// text-only line stays `{"type":"user_message","content":"..."}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UserMessageEvent {
    pub content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// `unqueued` always carries `images` (possibly empty) and carries `files` only when the
/// message had some, as the spec words it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnqueuedEvent {
    pub content: String,
    pub images: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TurnUsage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
}

impl TurnUsage {
    pub fn add(&mut self, other: &TurnUsage) {
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.output_tokens += other.output_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelViewEntry {
    pub model: String,
    pub active: bool,
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub reasoning_efforts: Vec<String>,
}
