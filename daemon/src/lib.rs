//! The jucode daemon: one long-lived process that hosts many sessions behind a Unix
//! socket (a named pipe on Windows) and lets several clients attach to each.
//!
//! This crate knows nothing of the engine. It hosts whatever implements [`Host`]: a
//! factory of sessions, each a pair of channels carrying protocol lines. It reads just
//! enough of each line (`op`, `session`) to route it, and forwards every event line to
//! all attached clients as the same shared bytes. The wire protocol is specified in
//! `docs/daemon-protocol.md`.
//!
//! # Layout
//!
//! - [`host`](Host): the contract with what is hosted (the engine implements it).
//! - `server`: [`run`] and [`DaemonOptions`]: the accept loop and the graceful stop.
//! - `connection`: one client: reads and routes ops, runs the daemon's own ops.
//! - `registry`: sessions, their subscribers, each client's attached sessions.
//! - `fanout`: one task per session delivering its output to its clients.
//! - `outbox`: each client's bounded queue and its writer; slow clients are cut off.
//! - [`protocol`]: the daemon's own ops and events, typed (and `hello`).
//! - `wire`: the few fields the daemon reads of the lines it routes.
//! - `listener`, [`paths`], `lock`: binding safely (lock, stale sockets, permissions,
//!   peer uid, systemd).
//! - `client`: [`connect_or_start`], the race-free "connect or start" for front-ends.
//! - [`framing`]: the bounded line codec, shared with the engine's stdio transport.
//!
//! # Architecture invariants
//!
//! - Nothing waits on a client: a session's output is drained by its fan-out task,
//!   which only pushes into bounded per-client queues.
//! - An event line is encoded once, by the engine; the daemon passes the same `Bytes`
//!   to every client and never re-serializes it.
//! - Every queue is bounded: per-client outboxes by lines and bytes, input lines by
//!   [`framing::MAX_LINE_BYTES`], session channels by the host.

mod client;
mod connection;
mod fanout;
pub mod framing;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod host;
mod listener;
mod lock;
mod outbox;
pub mod paths;
pub mod protocol;
mod registry;
mod server;
mod wire;

pub use client::{START_TIMEOUT, connect_or_start};
pub use host::{
    ClientId, ClientInput, Host, HostOutput, Hosted, Intercept, OpenParams, SavedSession,
};
pub use interprocess::local_socket::tokio::Stream;
pub use listener::{Inherited, connect};
pub use outbox::ClientLimits;
pub use paths::{default_socket_path, default_socket_path_from_env};
pub use server::{DEFAULT_MAX_CLIENTS, DaemonOptions, run};
pub use wire::{is_object, strip_position};
