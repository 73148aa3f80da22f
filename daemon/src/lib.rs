//! The jucode daemon: one long-lived process that hosts many sessions behind a Unix
//! socket (a named pipe on Windows) and lets several clients attach to each.
//!
//! This crate knows nothing of the engine. It hosts whatever implements [`Host`]: a
//! factory of sessions, each a pair of channels carrying protocol lines. It reads just
//! enough of each line (`op`, `session`) to route it, and forwards every event line to
//! all attached clients as the same shared bytes.

mod host;

pub use host::{ClientInput, Host, HostOutput, Hosted, OpenParams};
