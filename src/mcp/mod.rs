//! MCP servers: the client side of the Model Context Protocol, for one session.
//!
//! [`McpManager`] implements what the engine asks of a session's servers
//! ([`crate::engine::McpServers`]) and offers their tools to its turns
//! ([`crate::engine::ToolSource`]). Below it:
//!
//! - `client`: the wrapper around `rmcp`, the only code that names it (rmcp changes
//!   often; an upgrade touches that one file);
//! - `task`: one server's task (connect, list, re-list, notice its death);
//! - `process`: a stdio server's process group and stderr;
//! - `tool`: one server tool as an engine tool, gating by `readOnlyHint`, and results
//!   rendered for the model;
//! - `naming`: the sanitised, unique names tools are offered under.
//!
//! See `docs/mcp.md` for configuration, the protocol ops and the lifecycle.

mod client;
mod manager;
mod naming;
pub mod process;
mod task;
mod tool;

pub use manager::McpManager;
