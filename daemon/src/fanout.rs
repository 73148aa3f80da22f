//! One task per session: drains its output and hands every line to its clients.
//!
//! The task is the only reader of a session's output channel, and it never waits on a
//! client: delivery is a push into each client's bounded [`Outbox`](crate::outbox),
//! which cuts off a client that falls behind instead of blocking. So a session's
//! engine only ever waits for this task, which only ever waits for the engine.
//!
//! It does pace itself: while every attached client is congested (thousands of lines
//! waiting, see [`PACE_LINES`](crate::outbox::PACE_LINES)) it waits for one of them to
//! drain. A session therefore streams at the pace of its fastest client, like `jucode
//! serve` in process does with its one reader, instead of cutting off a lone client
//! that is merely slower than a scripted burst; clients slower than the fastest still
//! fall behind and are cut off at their limits, so none of them holds the others back.
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

/// The most output items taken from a session at once.
const BATCH: usize = 256;

/// Runs until the session's output closes (or the daemon gives up waiting for it
/// during a stop), then unregisters the session and tells its clients.
pub(crate) async fn run<H: Host>(
    shared: Arc<Shared<H>>,
    session: Arc<Session<H::Input>>,
    mut output: mpsc::Receiver<H::Output>,
) {
    // Everything the engine has ready is taken at once and handed on as runs of lines.
    let mut items = Vec::new();
    let mut lines = Vec::new();
    // The state the last `Status` of the run of `lines` set, delivered with them.
    let mut state = None;
    loop {
        let received = tokio::select! {
            received = output.recv_many(&mut items, BATCH) => received,
            () = shared.abandon_sessions.cancelled() => {
                tracing::warn!(session = %session.id, "session did not end in time; dropping it");
                0
            }
        };
        if received == 0 {
            break;
        }
        pace(&shared, &session).await;
        for item in items.drain(..) {
            match item.into() {
                HostOutput::Line(line) => lines.push(line),
                HostOutput::Status { line, state: new } => {
                    lines.push(line);
                    state = Some(new);
                }
                HostOutput::Reply { client, line } => {
                    session.deliver_all(&lines, state.take());
                    lines.clear();
                    session.deliver_to(client, line);
                }
                HostOutput::Snapshot {
                    token,
                    lines: snapshot,
                } => {
                    // Lines before the snapshot go out first: order is the contract.
                    session.deliver_all(&lines, state.take());
                    lines.clear();
                    session.deliver_snapshot(token, snapshot);
                }
                HostOutput::Barrier { token } => {
                    session.deliver_all(&lines, state.take());
                    lines.clear();
                    session.barrier_reached(token);
                }
            }
        }
        if !lines.is_empty() {
            session.deliver_all(&lines, state.take());
            lines.clear();
        }
        // An idle session keeps no batch memory: thousands of them may wait.
        if items.capacity() > 16 {
            items = Vec::new();
            lines = Vec::new();
        }
    }
    drop(output);
    shared.sessions.remove(&session.id);
    session.end();
    tracing::info!(session = %session.id, "session ended");
}

/// Waits while every attached client is congested; re-checks at least every 50 ms, so a
/// client that leaves or is cut off never keeps the session waiting.
async fn pace<H: Host>(shared: &Shared<H>, session: &Session<H::Input>) {
    while let Some(client) = session.pacer() {
        if shared.abandon_sessions.is_cancelled() {
            return;
        }
        client
            .outbox
            .drained_or(std::time::Duration::from_millis(50))
            .await;
    }
}
