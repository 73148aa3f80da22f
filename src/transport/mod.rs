//! Transports: move protocol lines between a byte stream and a session. They know the
//! line format and the engine's input/output channels, never providers or tools.
//!
//! - `stdio`: `serve --in-process`, the engine in this process.
//! - `shim`: `serve` through the daemon (this process relays lines, runs no engine).
//! - `headless`: `--headless`, one scripted turn in process.
//! - `daemon_cli`: `daemon` in the foreground and `daemon start | stop | status`.
//! - `remote`: `--remote HOST`, the same command run by the remote's jucode over ssh
//!   (this process relays stdio, runs nothing else).
//! - `link`: a connection to one session, through the daemon or in this process, for
//!   the translating servers below.
//! - `translate`: serve-protocol events into ACP-shaped updates (one layer, two
//!   dialects).
//! - `jsonrpc`: JSON-RPC 2.0 messages, shared by the two servers.
//! - `acp`: `jucode acp`, the Agent Client Protocol on stdio.
//! - `websocket`: the daemon's WebSocket server for dashboards, and the dashboard page.

pub mod acp;
pub mod daemon_cli;
pub mod headless;
pub use crate::protocol::jsonrpc;
pub mod link;
pub mod peer;
pub mod remote;
pub mod shim;
pub mod stdio;
pub mod translate;
pub mod websocket;
