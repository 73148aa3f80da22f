//! End-to-end tests of the daemon with real processes and a real socket in a temporary
//! `JUCODE_HOME`: the shim, several clients per session, several sessions per
//! connection, lifecycle and security.

#[path = "../common/mod.rs"]
mod common;

mod agents;
mod claude;
mod clients;
mod codex;
mod contract;
mod engines;
mod lifecycle;
mod listings;
mod mcp;
mod sessions;
mod shim;
mod terminal;
mod terminal_tuis;
