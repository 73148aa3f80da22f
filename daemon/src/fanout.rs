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
//! What a client costs is mostly its share of each delivery: a write on its socket and
//! the wake-up of its reader, whatever the chunk's size. So a burst (the engine producing
//! faster than its lines go out) is coalesced: the task lets the engine run again before
//! delivering, up to [`BATCH`] lines, and a burst goes out in a few large chunks instead
//! of one per turn of the engine (128 lines, tokio's cooperative budget). A session
//! streaming at a model's pace, a line at a time, is delivered at once as before.
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

/// The most output items handed on together (as many as the engine's own queue holds),
/// and at most an eighth of a client's line bound, so that one chunk never makes a
/// client that keeps up overflow.
const BATCH: usize = 1024;

/// A take of at least this many items is a burst: the engine produces faster than its
/// lines are delivered (tokio stops it after 128 sends a poll, its cooperative budget,
/// with more to come). The fan-out then lets it run again before delivering.
const BURST: usize = 32;

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
    let cap = BATCH.min(shared.limits.max_lines / 8).max(1);
    loop {
        let received = tokio::select! {
            received = output.recv_many(&mut items, cap) => received,
            () = shared.abandon_sessions.cancelled() => {
                tracing::warn!(session = %session.id, "session did not end in time; dropping it");
                0
            }
        };
        if received == 0 {
            break;
        }
        coalesce(&mut output, &mut items, cap).await;
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

/// Lets a bursting engine add to `items` (up to `cap`) before they are delivered, while
/// each of its turns brings at least [`BURST`] more. Every delivery costs each client a
/// write and its reader a wake-up, which is most of a client's cost: a burst goes out in
/// fewer, larger chunks (measured in `docs/performance.md`, "The marginal client"). A
/// yield waits only for the tasks already ready to run, never for the engine to produce
/// more, and a session streaming at a model's pace (a line per take) never yields.
async fn coalesce<T>(output: &mut mpsc::Receiver<T>, items: &mut Vec<T>, cap: usize) {
    let mut taken = items.len();
    while taken >= BURST && items.len() < cap {
        tokio::task::yield_now().await;
        let before = items.len();
        // Only what is ready now: an empty queue (or a spent budget) ends the burst, and
        // the next `recv_many` registers the real waker.
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = output.poll_recv_many(&mut context, items, cap - before);
        taken = items.len() - before;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine sending as fast as it can is stopped by tokio every 128 sends; the
    /// fan-out's take is the whole burst, not one budget of it.
    #[tokio::test]
    async fn a_burst_is_taken_whole() {
        let (sender, mut output) = mpsc::channel(BATCH);
        tokio::spawn(async move {
            for item in 0..1000 {
                if sender.send(item).await.is_err() {
                    return;
                }
            }
        });
        let mut items = Vec::new();
        output.recv_many(&mut items, BATCH).await;
        assert!(items.len() >= BURST, "one budget's worth: {}", items.len());
        coalesce(&mut output, &mut items, BATCH).await;
        assert_eq!(items, (0..1000).collect::<Vec<_>>());
    }

    /// A few lines at a time (a model's pace) go out at once, and a burst stops at the
    /// cap.
    #[tokio::test]
    async fn a_trickle_is_not_held_and_a_burst_is_capped() {
        let (sender, mut output) = mpsc::channel(BATCH);
        sender.send(1).await.unwrap();
        let mut items = Vec::new();
        output.recv_many(&mut items, BATCH).await;
        coalesce(&mut output, &mut items, BATCH).await;
        assert_eq!(items, [1]);

        for item in 0..300 {
            sender.send(item).await.unwrap();
        }
        items.clear();
        output.recv_many(&mut items, 100).await;
        coalesce(&mut output, &mut items, 200).await;
        assert_eq!(items, (0..200).collect::<Vec<_>>());
    }
}
