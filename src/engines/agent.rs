//! What a hosted session and the driver of its agent say to each other, whatever the
//! agent's own protocol: the seam every kind of engine (ACP, Claude Code, Codex)
//! translates to, so the session (queue, approvals, cards, transcript, snapshots)
//! exists once.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::engine::ImageData;
use crate::protocol::{
    CallCard, CommandInfo, Decision, Hunk, OptionChoice, PlanStep, SessionOption, TurnUsage,
};

/// The id under which an agent's modes are offered as a session option.
pub const MODE_OPTION: &str = "mode";

/// The session asks its agent.
#[derive(Debug)]
pub enum Command {
    /// Starts a turn with this message.
    Prompt {
        text: String,
        images: Vec<ImageData>,
    },
    /// Gives the running turn another message (only where [`Started::steer`]).
    Steer {
        text: String,
        images: Vec<ImageData>,
    },
    /// Stops the running turn; the agent ends it with [`Event::TurnEnded`].
    Cancel,
    /// The answer to [`Event::Permission`] `request`.
    Permission {
        request: u64,
        decision: Decision,
        always: bool,
    },
    /// Switches to one of [`Settings::modes`].
    SetMode(String),
    /// Sets one of the agent's options (`set_session_option`, and the model).
    SetOption {
        id: String,
        value: serde_json::Value,
    },
}

/// The agent's settings, as the session shows them (`model_status`, `approval_mode`,
/// `session_options`): sent whole whenever one changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub model: Option<String>,
    /// The option that sets the model, and its choices.
    pub model_option: Option<(String, Vec<OptionChoice>)>,
    pub effort: Option<String>,
    /// The option that sets the effort, and its values.
    pub effort_option: Option<String>,
    pub efforts: Vec<String>,
    /// The agent's modes, and the current one.
    pub mode: Option<String>,
    pub modes: Vec<OptionChoice>,
    /// Everything else it lets a client set.
    pub options: Vec<SessionOption>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnStop {
    EndTurn,
    Cancelled,
    /// Cut off at the model's output limit.
    MaxTokens,
    Refusal,
    /// The agent failed the turn; the message says why.
    Failed(String),
}

/// The agent tells the session.
#[derive(Debug)]
pub enum Event {
    Settings(Settings),
    Commands(Vec<CommandInfo>),
    /// A new assistant message begins (the next text is not a continuation).
    MessageBreak,
    Text(String),
    Thought(String),
    ToolStart {
        call_id: String,
        name: String,
        arguments: Option<serde_json::Value>,
        card: CallCard,
    },
    ToolUpdate {
        call_id: String,
        output: String,
    },
    ToolDone {
        call_id: String,
        output: String,
        is_error: bool,
    },
    /// The agent asks before a call; answered with [`Command::Permission`].
    Permission {
        request: u64,
        call_id: String,
        name: String,
        summary: String,
        hunks: Option<Vec<Hunk>>,
    },
    /// The agent no longer waits for that answer.
    PermissionWithdrawn {
        request: u64,
    },
    Plan(Vec<PlanStep>),
    /// The turn's usage as the agent counts it.
    Usage(TurnUsage),
    /// The context's size now: tokens used, the window, the cost so far in USD.
    Context {
        tokens: u64,
        window: u64,
        cost: Option<f64>,
    },
    Info(String),
    /// The answer to [`Command::Steer`], in the order they were sent: taken into the
    /// running turn, or not (why), in which case the message is the next turn's.
    SteerTaken(Result<(), String>),
    TurnEnded(TurnStop),
    /// The agent's process is gone; why, for the user.
    Exited(String),
}

/// Which protocol the agent speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Acp,
    ClaudeCode,
    Codex,
}

/// A jucode provider the agent's model traffic is sent to, where the agent takes it
/// as arguments and a name (Codex: `-c model_providers.<id>=...`). Its key is only
/// ever in [`Launch::env`].
#[derive(Debug, Clone)]
pub struct ProviderRoute {
    /// The name the agent knows the provider by.
    pub id: String,
    /// Arguments that define it, before the entry's own `args`.
    pub args: Vec<String>,
}

/// How to start one agent.
#[derive(Debug, Clone)]
pub struct Launch {
    pub kind: Kind,
    /// The `[engines.<name>]` entry, for messages.
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: HashMap<String, String>,
    pub cwd: PathBuf,
    pub default_mode: Option<String>,
    pub default_config_options: BTreeMap<String, String>,
    /// The agent's own session to continue (ACP `session/load`, Claude Code `--resume`,
    /// Codex `thread/resume`).
    pub load: Option<String>,
    pub provider: Option<ProviderRoute>,
    /// How long `initialize` and opening the session may take.
    pub startup: Duration,
    /// The engine's own TUI, where it has one (`surface terminal`).
    pub tui: Option<Tui>,
    /// Whether the driver reads back the conversation it loads
    /// ([`Started::history`]): after the TUI, whose turns the session did not see.
    pub history: bool,
}

/// How to run an engine's TUI on a conversation.
#[derive(Debug, Clone)]
pub struct Tui {
    pub command: String,
    /// `{session}` stands for the agent's id of the conversation.
    pub args: Vec<String>,
    /// Typed into it to ask it to quit.
    pub quit: String,
    /// How long it has to quit before it is killed.
    pub grace: Duration,
}

/// One message of a conversation as the agent keeps it, read back after its TUI ran.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryItem {
    User(String),
    Assistant(String),
}

/// What the agent said about itself as it started.
#[derive(Debug, Clone)]
pub struct Started {
    /// The agent's id of the conversation.
    pub session: String,
    /// `name version` from `agentInfo`.
    pub agent: Option<String>,
    pub capabilities: Value,
    pub images: bool,
    /// Whether a message can join the running turn ([`Command::Steer`]).
    pub steer: bool,
    pub resume: bool,
    pub settings: Settings,
    /// Why `load` could not be honoured (the agent cannot load, or failed to): a new
    /// conversation was started instead.
    pub not_loaded: Option<String>,
    /// The commands the agent announced while opening, if it did.
    pub commands: Option<Vec<CommandInfo>>,
    /// The loaded conversation's messages as the agent keeps them, when
    /// [`Launch::history`] asked and the driver can read them.
    pub history: Option<Vec<HistoryItem>>,
}

/// A running agent: what the session sends it and what it reports. Dropping it stops
/// the agent (its process group is killed).
pub struct Agent {
    pub commands: mpsc::Sender<Command>,
    pub events: mpsc::Receiver<Event>,
}
