//! The one way events leave a session.
//!
//! An [`Emitter`] encodes each event once into an [`EventLine`] and sends it on a
//! bounded channel. Whoever holds the receiver decides what a full queue means: the
//! stdio transport lets the engine wait (a single client that stops reading pauses its
//! own session), the daemon's fan-out drains it without ever waiting on a client.

use tokio::sync::mpsc;

use crate::protocol::{Event, EventEncoder, EventLine};

/// Capacity of a session's outbound queue. Large enough to absorb a burst of deltas
/// while the writer is in a syscall, small enough to bound memory at a few hundred KiB.
pub const EVENT_QUEUE: usize = 1024;

#[derive(Clone)]
pub struct Emitter {
    encoder: EventEncoder,
    tx: mpsc::Sender<EventLine>,
}

impl Emitter {
    pub fn new(session_id: &str, tx: mpsc::Sender<EventLine>) -> Self {
        Self {
            encoder: EventEncoder::new(session_id),
            tx,
        }
    }

    /// Sends one event. A closed receiver (the client went away) is not an error for
    /// the engine: the session carries on and the line is dropped.
    pub async fn emit(&self, event: Event) {
        let line = self.encoder.encode(&event);
        let _ = self.tx.send(line).await;
    }

    pub async fn info(&self, message: impl Into<String>) {
        self.emit(Event::info(message)).await;
    }

    pub async fn error(&self, message: impl Into<String>) {
        self.emit(Event::error(message)).await;
    }

    pub async fn status(&self, message: impl Into<String>) {
        self.emit(Event::status(message)).await;
    }
}
