//! Engine → client events. Field names and order follow serve protocol v2 exactly; the
//! `session` field every event carries is appended by [`super::EventEncoder`], not stored
//! here, so an event value never needs to know which session it belongs to.
//!
//! Some events are declared before the engine emits them (trust, compaction, goals,
//! branches, subagents): the schema describes the whole protocol, and the issues that
//! add those features fill them in rather than inventing shapes of their own.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::values::{
    ApprovalMode, Decision, ElicitationAction, GoalStatus, LifecycleStatus, ModelState, PlanStatus,
    Resolution, SandboxMode, SessionStatus, Surface,
};

/// One event of serve protocol v2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// First event of a session; identifies it.
    Startup {
        version: String,
        session_id: String,
        profile_dir: String,
        config_path: String,
        cwd: String,
        /// `provider/model`.
        model: String,
        context_window: u64,
        /// jucode addition: the sandbox commands run in (`docs/security.md`), here so
        /// the specification's five startup events stay five; a change later comes as a
        /// `sandbox` event.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox: Option<SandboxView>,
    },
    /// The current model selection; emitted again only when it changes.
    ModelStatus(ModelStatus),
    /// The available slash commands.
    CommandList {
        commands: Vec<CommandInfo>,
    },
    ApprovalMode {
        mode: ApprovalMode,
    },
    /// jucode addition: the sandbox commands run in changed (`set_sandbox_mode`,
    /// `/sandbox MODE`), to every client; also the answer to `/sandbox`. A session's
    /// first one is `startup.sandbox`.
    Sandbox(SandboxView),
    McpServers {
        servers: Vec<McpServerView>,
    },
    /// The answer to `mcp_login`: the address to open in a browser to sign in to
    /// `server` (the same for every client while that sign-in runs).
    McpLogin {
        server: String,
        url: String,
    },
    /// An MCP server asks the user for input (`elicitation/create`); answered by an
    /// `elicitation_response` op. `schema` is the server's `requestedSchema` (a flat
    /// object of strings, numbers, integers, booleans and enums).
    ElicitationRequest {
        id: String,
        server: String,
        message: String,
        schema: serde_json::Value,
    },
    /// An elicitation request was closed (answered by a client, cancelled by an
    /// interrupt, declined as the session is unattended), so every client can close its
    /// dialog. Every `elicitation_request` gets exactly one.
    ElicitationResolved {
        id: String,
        action: ElicitationAction,
    },
    /// The project has local resources and no stored trust decision.
    TrustPrompt {
        cwd: String,
        repo_root: String,
    },
    Info {
        message: String,
        /// Only on the `info` that says why a turn's reply ended early.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<super::values::ReplyStop>,
    },
    Error {
        message: String,
    },
    Status {
        message: SessionStatus,
    },
    /// A user message was accepted and started (or was read by the running turn).
    UserMessage(UserMessageEvent),
    /// The queue after it changed: the queued messages' text, oldest first.
    PendingMessages {
        messages: Vec<String>,
    },
    /// The answer to `unqueue`: the message taken out, for the client to edit again.
    Unqueued(UnqueuedEvent),
    /// The front-end should pre-fill its input box with this.
    FillInput {
        content: String,
    },
    /// A model request is starting.
    Connecting,
    /// The model accepted the request; its first token is on the way.
    ThinkingStart,
    ReasoningDelta {
        delta: String,
    },
    AssistantStart,
    AssistantDelta {
        delta: String,
    },
    /// The request is retried after a transient failure, for this reason.
    Retrying {
        attempt: u32,
        message: String,
    },
    ToolStart {
        call_id: String,
        name: String,
        /// jucode addition: the call's arguments as the model gave them (an object), so
        /// a front-end can title the card and show what the call will touch; absent
        /// when they are not a JSON object (the call then fails with that error).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<serde_json::Value>,
        /// jucode addition: the call as its tool describes it: a title for its card
        /// (`Read /abs/src/lib.rs`, a command line), what kind of thing it does, the file
        /// or folder it is about (absolute) and the line, and a few words for a status
        /// line (`Running cargo test`).
        #[serde(flatten)]
        card: CallCard,
    },
    /// Output the call produced since its previous update.
    ToolUpdate {
        call_id: String,
        name: String,
        output: String,
    },
    /// The call finished; every `tool_start` gets exactly one.
    ToolOutput {
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
    },
    /// Real API usage of the completed turn.
    Usage(TurnUsage),
    /// Tokenizer-counted size of the next request; `cost` is cumulative USD.
    ContextUsage {
        tokens: u64,
        tokenizer: String,
        cost: f64,
    },
    CompactionStart,
    CompactionProgress {
        output_tokens: u64,
    },
    CompactionEnd,
    CompactionFailed {
        error: String,
    },
    /// jucode addition: the answer to `sync` with its token; every event of this
    /// client's earlier ops is before it.
    Synced {
        token: String,
    },
    /// Model picker data (`/model`).
    ModelView {
        models: Vec<ModelViewEntry>,
        active_effort: Option<String>,
    },
    /// The session's branch tree (`/tree`).
    TreeView {
        nodes: Vec<TreeNode>,
    },
    /// Session picker data (`/resume`).
    ResumeView {
        items: Vec<ResumeItem>,
    },
    CheckpointView {
        items: Vec<CheckpointItem>,
    },
    /// Every subagent of the session, oldest first.
    AgentRuns {
        workflows: Vec<serde_json::Value>,
        agents: Vec<AgentRun>,
    },
    /// A subagent was spawned, reached a milestone, or finished.
    SubagentLifecycle {
        /// Its id (`/root/<task_name>`).
        path: String,
        status: LifecycleStatus,
        message: String,
        label: String,
        model: String,
        tool_use_id: Option<String>,
    },
    /// One agent's work, or `error` (and no `items`) for an unknown id.
    SubagentTranscript {
        agent_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        items: Option<Vec<SubagentItem>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The session's goal; `null` clears it.
    Goal {
        goal: Option<Goal>,
    },
    /// The goal's step list.
    Plan {
        plan: Vec<PlanStep>,
    },
    /// A hosted engine's session (daemon sessions of other agents only): what the
    /// engine can do, sent once it has started. `capabilities` is the engine's own
    /// description (an ACP agent's `agentCapabilities` as given).
    EngineCaps {
        /// The `[engines.<name>]` entry.
        engine: String,
        /// `acp`, `claude-code` or `codex`.
        kind: String,
        /// The agent's name and version, where it says them.
        agent: Option<String>,
        images: bool,
        /// Whether `steer` reaches the running turn.
        steer: bool,
        /// Whether a conversation can be continued after the engine restarts.
        resume: bool,
        capabilities: serde_json::Value,
    },
    /// A hosted engine's settings besides model and effort (an ACP agent's config
    /// options whose category is neither `model` nor `thought_level`, and its modes),
    /// set with `set_session_option`.
    SessionOptions {
        options: Vec<SessionOption>,
    },
    /// The jucode provider a hosted engine's model traffic goes to; `null` on the
    /// engine's own configuration.
    ToolProvider {
        provider: Option<ToolProviderView>,
    },
    /// Daemon sessions of other engines only: where the conversation is now, to every
    /// client (and in a late joiner's snapshot while on the terminal). `terminal` comes
    /// with `surface: terminal` only.
    Surface {
        surface: Surface,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        terminal: Option<TerminalView>,
    },
    /// The terminal's output, in order: `data` is the bytes, base64; `seq` counts the
    /// chunks from 1.
    TermOutput {
        id: String,
        seq: u64,
        data: String,
    },
    /// The terminal's screen for a client attaching: `screen` is base64 of an ANSI
    /// repaint which, written to a blank terminal of `cols` x `rows`, draws the screen
    /// as the output up to chunk `seq` left it; the live `term_output` follows from
    /// `seq + 1`.
    TermSnapshot {
        id: String,
        seq: u64,
        cols: u16,
        rows: u16,
        screen: String,
    },
    /// The rendered conversation (`/transcript`, and for clients attaching).
    Transcript {
        items: Vec<TranscriptItem>,
    },
    /// A gated tool call waits for an `approve` op.
    ApprovalRequest {
        call_id: String,
        name: String,
        summary: String,
        subagent_id: Option<String>,
        hunks: Option<Vec<Hunk>>,
    },
    /// jucode addition: an approval request was closed (answered, interrupted, or
    /// turned into a deferred action), so every client can close its dialog. Every
    /// `approval_request` gets exactly one.
    ApprovalResolved {
        call_id: String,
        decision: Resolution,
    },
    Attended {
        attended: bool,
    },
    /// An unattended session recorded a gated call instead of asking.
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
        /// Epoch milliseconds.
        created_at: u64,
    },
    /// A deferred action was decided; `output` is the tool's result when it ran.
    ActionDecided {
        id: String,
        decision: Decision,
        output: Option<String>,
        is_error: bool,
    },
    /// Plan mode: the plan while the model writes it. Not replayed.
    PlanDraft {
        id: String,
        title: String,
        /// Markdown added since the previous draft of this id.
        append: String,
    },
    ProposedPlan {
        id: String,
        title: String,
        markdown: String,
        status: PlanStatus,
    },
    /// jucode addition: a tool call asks the client that serves them (see the
    /// `client_capabilities` op) to read or write a file or to run a command, with ACP's
    /// method names and params (without `sessionId`). Sent to that client only; answer
    /// with `client_response`.
    ClientRequest {
        id: String,
        /// The tool call it serves.
        call_id: Option<String>,
        method: String,
        params: serde_json::Value,
    },
}

/// A tool call as its tool describes it (`tool_start`; `title` and `kind` also on the
/// transcript's `tool` items). Every field may be absent (an older session's history).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CallCard {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<super::values::CallKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<String>,
}

/// The sandbox commands run in (`docs/security.md`).
/// The terminal a hosted session's TUI runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TerminalView {
    pub id: String,
    pub cols: u16,
    pub rows: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxView {
    pub mode: SandboxMode,
    /// Whether TCP and other sockets are allowed.
    pub network: bool,
    /// Where commands may write (`workspace-write`: the working directory, the temp
    /// directory, `writable_roots`); empty for `read-only` and `off`.
    pub writable_roots: Vec<String>,
    /// Whether the kernel enforces `mode` (false for `off`, and when it cannot).
    pub enforced: bool,
    /// What is not enforced, when something is not: the reason nothing is, or the
    /// parts this kernel lacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
}

impl Event {
    pub fn info(message: impl Into<String>) -> Self {
        Event::Info {
            message: message.into(),
            stop_reason: None,
        }
    }

    /// The `info` saying why the turn's reply ended before the model finished it.
    pub fn reply_stopped(stop: super::values::ReplyStop) -> Self {
        let message = match stop {
            super::values::ReplyStop::MaxTokens => super::notices::REPLY_CUT_OFF,
            super::values::ReplyStop::Refusal => super::notices::REPLY_REFUSED,
        };
        Event::Info {
            message: message.to_owned(),
            stop_reason: Some(stop),
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Event::Error {
            message: message.into(),
        }
    }

    pub fn status(message: SessionStatus) -> Self {
        Event::Status { message }
    }
}

/// One hunk of a proposed edit, for partial approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Hunk {
    /// Stable for the same file content and arguments, e.g. `f0h1`.
    pub id: String,
    pub file: String,
    /// The unified-diff header, e.g. `@@ -12,7 +12,8 @@`.
    pub header: String,
    /// Unified-diff lines, each starting with ` `, `-` or `+`.
    pub lines: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelStatus {
    pub provider: String,
    pub model: String,
    pub reasoning_effort: Option<String>,
    pub context_window: u64,
    /// The share of the window the conversation may fill before it is compacted.
    pub context_limit: u64,
    pub max_output_tokens: u64,
    pub reasoning_efforts: Vec<String>,
    pub state: ModelState,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandInfo {
    pub command: String,
    /// Where the command comes from; `null` for built-in commands.
    pub marker: Option<String>,
    pub args: String,
    pub description: String,
}

/// The echo of a user message (`user_message`). Attachments appear only when the
/// message had some, so the common text-only line stays
/// `{"type":"user_message","content":"..."}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct UserMessageEvent {
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

/// `unqueued` always carries `images` (possibly empty) and carries `files` only when the
/// message had some, as the spec words it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnqueuedEvent {
    pub content: String,
    pub images: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUsage {
    /// Every prompt token, cached or not (OpenAI's meaning).
    pub input_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache.
    pub cached_input_tokens: u64,
    /// Of `input_tokens`, those written to the prompt cache (Anthropic's
    /// `cache_creation_input_tokens`; 0 where the API reports none).
    #[serde(default)]
    pub cache_write_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
}

impl TurnUsage {
    pub fn add(&mut self, other: &TurnUsage) {
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.cache_write_input_tokens += other.cache_write_input_tokens;
        self.output_tokens += other.output_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelViewEntry {
    pub model: String,
    pub active: bool,
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub reasoning_efforts: Vec<String>,
}

/// One MCP server in the `mcp_servers` view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerView {
    pub name: String,
    pub transport: McpTransport,
    pub state: McpState,
    /// The names of the tools it offers (as the model sees them).
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    Stdio,
    Http,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpState {
    Connecting,
    Connected,
    Failed,
    Disabled,
    /// A remote server that answers `401` until the user signs in (`mcp_login`);
    /// `error` says why (no sign-in yet, it expired or was revoked, a sign-in failed).
    NeedsAuth,
}

/// One setting of a hosted engine (`session_options`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionOption {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The engine's category for it (`mode`, ...), where it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// `select` (one of `choices`) or `boolean`.
    pub kind: String,
    pub value: serde_json::Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<OptionChoice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OptionChoice {
    pub value: String,
    pub name: String,
}

/// `tool_provider.provider`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolProviderView {
    pub id: String,
    pub name: String,
    pub model: Option<String>,
}

/// One item of the rendered conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum TranscriptItem {
    User(UserMessageEvent),
    Assistant {
        content: String,
    },
    Tool {
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
        /// jucode addition: the call as its tool described it (`title`, `kind`, `path`,
        /// `line`, as on `tool_start`); absent for calls recorded before cards were kept.
        #[serde(flatten)]
        card: CallCard,
    },
    /// A plan from `propose_plan`, with its latest status.
    Plan {
        id: String,
        title: String,
        content: String,
        status: PlanStatus,
    },
    /// Where the conversation continues on another branch.
    Branch {
        label: String,
    },
    /// jucode addition: the model reads this summary in place of the conversation
    /// before it (which stays in the session file and in `/tree`).
    Compaction {
        summary: String,
    },
    /// jucode addition: the step list as the model set it (`update_plan`), where it
    /// changed; the `plan` event carries the same list.
    PlanSteps {
        plan: Vec<PlanStep>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        explanation: Option<String>,
    },
}

/// One item of a subagent's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum SubagentItem {
    /// The task first, then messages the parent sent.
    User {
        content: String,
    },
    Assistant {
        content: String,
    },
    Reasoning {
        content: String,
    },
    Tool {
        call_id: String,
        name: String,
        input: String,
        output: String,
        running: bool,
        is_error: bool,
    },
}

/// One subagent in `agent_runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentRun {
    /// Its path, `/root/<task_name>`.
    pub id: String,
    pub label: String,
    pub model: String,
    pub effort: Option<String>,
    pub state: AgentState,
    /// Epoch milliseconds.
    pub started_at: u64,
    pub duration_ms: u64,
    pub tokens: u64,
    pub tool_calls: u64,
    pub prompt: String,
    pub result: Option<String>,
    pub error: Option<String>,
    #[serde(rename = "type")]
    pub kind: AgentKind,
    /// The parent's `spawn_agent` call.
    pub tool_use_id: Option<String>,
    /// Its latest action in a few words.
    pub activity: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentState {
    Pending,
    Running,
    Completed,
    Errored,
    Interrupted,
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    Subagent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Goal {
    pub objective: String,
    pub status: GoalStatus,
    pub token_budget: Option<u64>,
    pub tokens_used: u64,
    pub time_used_seconds: u64,
    /// Epoch milliseconds.
    pub created_at: u64,
    pub updated_at: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlanStep {
    pub step: String,
    pub status: StepStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TreeNode {
    pub id: String,
    pub parent_id: Option<String>,
    pub label: String,
    pub active: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResumeItem {
    pub id: String,
    pub label: String,
    pub active: bool,
    /// The `[engines.<name>]` entry it runs on; absent for jucode's own engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Why its file cannot be continued (it cannot be read, it is empty, it does not
    /// start with a session header, it is a symbolic link); absent when it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckpointItem {
    pub id: String,
    pub label: String,
    pub detail: String,
}
