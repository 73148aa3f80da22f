//! One task per session: drains its output and hands every line to its clients.
//!
//! The task is the only reader of a session's output channel, and it never waits on a
//! client: delivery is a push into each client's bounded [`Outbox`](crate::outbox),
//! which cuts off a client that falls behind instead of blocking. So a session's
//! engine only ever waits for this task, which only ever waits for the engine.
//!
//! Every client gets the same [`Bytes`](bytes::Bytes) (a reference count, not a copy),
//! never re-serialized. A snapshot goes to the one client that asked for it, at the
//! point of the output stream the engine placed it: lines before it are covered by it
//! and were withheld from that client, lines after it are delivered as usual, so a late
//! joiner loses nothing and sees nothing twice.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::host::{Host, HostOutput};
use crate::registry::Session;
use crate::server::Shared;

/// Runs until the session's output closes (or the daemon gives up waiting for it
/// during a stop), then unregisters the session and tells its clients.
pub(crate) async fn run<H: Host>(
    shared: Arc<Shared<H>>,
    session: Arc<Session<H::Input>>,
    mut output: mpsc::Receiver<H::Output>,
) {
    loop {
        let item = tokio::select! {
            item = output.recv() => item,
            () = shared.abandon_sessions.cancelled() => {
                tracing::warn!(session = %session.id, "session did not end in time; dropping it");
                None
            }
        };
        let Some(item) = item else { break };
        match item.into() {
            HostOutput::Line(line) => session.deliver(&line),
            HostOutput::Snapshot { token, lines } => session.deliver_snapshot(token, lines),
        }
    }
    drop(output);
    shared.sessions.remove(&session.id);
    session.end();
    tracing::info!(session = %session.id, "session ended");
}
