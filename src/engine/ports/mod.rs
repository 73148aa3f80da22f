//! What the engine is given from outside, as traits it defines and layers above it
//! implement: a model provider ([`model`]), tools ([`tools`]), a session's MCP servers
//! ([`mcp`]), its project and user ([`project`]), and the saved sessions ([`library`]).

pub mod library;
pub mod mcp;
pub mod model;
pub mod project;
pub mod tools;
