//! One session's state machine and turn loop.

pub mod model;
pub mod tools;

pub use model::{
    ChatRequest, FinishReason, ImageData, Message, ModelCatalog, ModelClient, ModelError,
    ModelEvent, ModelInfo, ModelStream, ResolvedModel, Retry, RetryPolicy, ToolCall, ToolSpec,
};
pub use tools::{Tool, ToolContext, ToolOutput, ToolRegistry, resolve_path};
