//! One session's state machine and turn loop.
//!
//! The engine knows nothing of stdio, sockets or JSON lines beyond the protocol types:
//! it takes [`Input`]s on a channel and emits encoded event lines ([`Outbound`]) on
//! another. Model providers and tools come in through the [`ModelCatalog`] and
//! [`ToolRegistry`] given to [`spawn`]; the engine never names a concrete one.

mod agents;
mod builtin;
pub mod commands;
pub mod conversation;
pub mod delegate;
mod emitter;
pub mod ports;
mod session;
mod shared;
mod turn;

pub use builtin::session_builtin_specs;
pub use emitter::{EVENT_QUEUE, Outbound, Output};
pub use ports::mcp::{McpServers, PromptArgument, PromptCommand};
pub use ports::model::{
    ChatRequest, FinishReason, FreeformTool, ImageData, Message, ModelCatalog, ModelClient,
    ModelError, ModelEvent, ModelInfo, ModelStream, ProviderItem, ProviderItems, ResolvedModel,
    Retry, RetryPolicy, ToolCall, ToolSpec,
};
pub use ports::project::{
    CustomCommand, HookEvent, HookRun, NoProject, Project, TrustChange, TrustDecision,
};
pub use ports::tools::{
    Assessment, Confinement, DescribeCall, Effect, Hunk, Progress, Sandbox, Tool, ToolContext,
    ToolOutput, ToolRegistry, ToolSource, normalize, resolve_existing, shown_path, string_arg,
};
pub use session::{
    INPUT_QUEUE, Input, SOLE_CLIENT, SessionParams, queue_index, resume_items, spawn,
};
pub use turn::TurnEnd;
pub use turn::attach::{PreparedInput, prepare as prepare_input};
