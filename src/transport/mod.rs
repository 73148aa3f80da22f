//! Transports: move protocol lines between a byte stream and a session. They know the
//! line format and the engine's input/output channels, never providers or tools.
//!
//! - `stdio`: `serve --in-process`, the engine in this process.
//! - `shim`: `serve` through the daemon (this process relays lines, runs no engine).
//! - `headless`: `--headless`, one scripted turn in process.
//! - `daemon_cli`: `daemon` in the foreground and `daemon start | stop | status`.

pub mod daemon_cli;
pub mod headless;
pub mod shim;
pub mod stdio;
