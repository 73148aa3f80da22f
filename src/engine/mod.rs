//! One session's state machine and turn loop.
//!
//! The engine knows nothing of stdio, sockets or JSON lines beyond the protocol types:
//! it takes [`Input`]s on a channel and emits encoded event lines ([`Outbound`]) on
//! another. Model providers and tools come in through the [`ModelCatalog`] and
//! [`ToolRegistry`] given to [`spawn`]; the engine never names a concrete one.

mod agents;
pub mod approvals;
mod attach;
mod builtin;
mod calls;
pub mod commands;
mod compaction;
mod deferred;
pub mod delegate;
mod emitter;
mod goal;
pub mod library;
pub mod mcp;
pub mod model;
mod o200k;
mod plan;
mod plan_steps;
pub mod project;
pub mod prompt;
mod session;
mod shared;
pub mod store;
pub mod tokens;
pub mod tools;
mod turn;

pub use builtin::session_builtin_specs;
pub use emitter::{EVENT_QUEUE, Outbound};
pub use mcp::{McpServers, PromptArgument, PromptCommand};
pub use model::{
    ChatRequest, FinishReason, ImageData, Message, ModelCatalog, ModelClient, ModelError,
    ModelEvent, ModelInfo, ModelStream, ResolvedModel, Retry, RetryPolicy, ToolCall, ToolSpec,
};
pub use project::{
    CustomCommand, HookEvent, HookRun, NoProject, Project, TrustChange, TrustDecision,
};
pub use session::{Input, SOLE_CLIENT, SessionParams, spawn};
pub use tools::{
    Assessment, Effect, Hunk, Progress, Tool, ToolContext, ToolOutput, ToolRegistry, ToolSource,
};
pub use turn::TurnEnd;
