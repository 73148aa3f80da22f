//! The one way events leave a session, and the state late joiners are shown.
//!
//! An [`Output`] encodes each event once into an [`EventLine`] and sends it on a
//! bounded channel. Whoever holds the receiver decides what a full queue means: the
//! stdio transport lets the engine wait (a single client that stops reading pauses its
//! own session), the daemon's fan-out drains it without ever waiting on a client.
//!
//! Sending needs nothing else. Events that go with a change of the session's state (a
//! tool result entering the history, an approval request opening, a delta extending the
//! reply being streamed) are sent by [`Emitter::emit_with`], which adds the state's
//! lock to the output: a channel slot is reserved first, then the state
//! lock is taken, the state changed, the event encoded and sent, and the lock released.
//! A snapshot for a late-joining client is built and queued under the same lock, so in
//! the output stream every event is either reflected in the snapshot before it, or
//! comes after it: never both, never neither.

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;

use crate::protocol::{ClientId, Event, EventEncoder, EventLine};

/// Capacity of a session's outbound queue. Large enough to absorb a burst of deltas
/// while the writer is in a syscall, small enough to bound memory at a few hundred KiB.
pub const EVENT_QUEUE: usize = 1024;

/// One part of a snapshot.
pub enum SnapshotPart {
    Event(Box<Event>),
    /// A `transcript` event from encoded items.
    Transcript(Vec<bytes::Bytes>),
}

/// What a session's output channel carries.
#[derive(Debug)]
pub enum Outbound {
    /// An event line for every client of the session.
    Line(EventLine),
    /// A `status` event line for every client, with its message: the session's state
    /// as its host lists it (the daemon's `sessions` rows), told as a value rather
    /// than left for the host to find in the bytes.
    Status { line: EventLine, status: Box<str> },
    /// An event line for one client only: the answer to its op (an error, a view).
    Reply { client: ClientId, line: EventLine },
    /// The answer to [`super::Input::Snapshot`]: the lines a client attaching at this
    /// exact point needs, for that client only. A long line may come in several
    /// segments: the concatenation is whole lines.
    Snapshot { token: u64, lines: Vec<EventLine> },
    /// The answer to [`super::Input::Barrier`]: every event of earlier inputs is before it.
    Barrier { token: u64 },
}

/// The output channel of a session, and the encoder that names its lines: all that
/// sending an event takes.
#[derive(Clone)]
pub struct Output {
    encoder: EventEncoder,
    tx: mpsc::Sender<Outbound>,
}

impl Output {
    pub fn new(session_id: &str, tx: mpsc::Sender<Outbound>) -> Self {
        Self {
            encoder: EventEncoder::new(session_id),
            tx,
        }
    }

    /// The output channel (to build an emitter for another session on it).
    pub fn sender(&self) -> mpsc::Sender<Outbound> {
        self.tx.clone()
    }

    /// Sends one event. A closed receiver (the client went away) is not an error for
    /// the engine: the session carries on and the line is dropped.
    pub async fn emit(&self, event: Event) {
        let _ = self.tx.send(self.outbound(&event)).await;
    }

    /// `event` encoded for every client.
    fn outbound(&self, event: &Event) -> Outbound {
        let line = self.encoder.encode(event);
        match event {
            Event::Status { message } => Outbound::Status {
                line,
                status: message.to_string().into_boxed_str(),
            },
            _ => Outbound::Line(line),
        }
    }

    /// Sends one event to one client: the answer to the op it sent.
    pub async fn reply(&self, client: ClientId, event: Event) {
        let line = self.encoder.encode(&event);
        let _ = self.tx.send(Outbound::Reply { client, line }).await;
    }

    /// A `transcript` event of encoded items, for one client.
    pub async fn reply_transcript(&self, client: ClientId, items: &[bytes::Bytes]) {
        let line = EventLine::from(self.encoder.transcript(items).concat());
        let _ = self.tx.send(Outbound::Reply { client, line }).await;
    }

    /// A `transcript` event of encoded items, for every client.
    pub async fn emit_transcript(&self, items: &[bytes::Bytes]) {
        let line = EventLine::from(self.encoder.transcript(items).concat());
        let _ = self.tx.send(Outbound::Line(line)).await;
    }

    /// Marks this point of the output for a client leaving the session.
    pub async fn barrier(&self, token: u64) {
        let _ = self.tx.send(Outbound::Barrier { token }).await;
    }

    pub async fn info(&self, message: impl Into<String>) {
        self.emit(Event::info(message)).await;
    }

    pub async fn error(&self, message: impl Into<String>) {
        self.emit(Event::error(message)).await;
    }
}

/// An [`Output`] and the lock of the state `S` that its events announce changes of.
/// Emitting alone goes through the output (an emitter derefs to it); a change and its
/// event go through here, under the lock.
pub struct Emitter<S> {
    output: Output,
    state: Arc<Mutex<S>>,
}

impl<S> Clone for Emitter<S> {
    fn clone(&self) -> Self {
        Self {
            output: self.output.clone(),
            state: self.state.clone(),
        }
    }
}

impl<S> Deref for Emitter<S> {
    type Target = Output;

    fn deref(&self) -> &Output {
        &self.output
    }
}

impl<S> Emitter<S> {
    pub fn new(output: Output, state: Arc<Mutex<S>>) -> Self {
        Self { output, state }
    }

    /// The output alone, for code that emits but changes no state.
    pub fn output(&self) -> &Output {
        &self.output
    }

    /// Changes the state and emits the event that announces the change (if any),
    /// as one step with respect to snapshots. `change` runs under the state lock: keep
    /// it short.
    pub async fn emit_with<R>(&self, change: impl FnOnce(&mut S) -> (Option<Event>, R)) -> R {
        let permit = self.output.tx.reserve().await;
        let mut state = self.lock();
        let (event, result) = change(&mut state);
        if let (Ok(permit), Some(event)) = (permit, event) {
            permit.send(self.output.outbound(&event));
        }
        result
    }

    /// [`Emitter::emit_with`] for a change announced by several events (at most `room`;
    /// more would lose their atomicity with the change, and are sent after it).
    pub async fn emit_many_with<R>(
        &self,
        room: usize,
        change: impl FnOnce(&mut S) -> (Vec<Event>, R),
    ) -> R {
        let permits = self.output.tx.reserve_many(room).await;
        let (late, result) = {
            let mut state = self.lock();
            let (events, result) = change(&mut state);
            let Ok(permits) = permits else {
                // Nobody reads any more: the change stands, its events go nowhere.
                return result;
            };
            let mut events = events.into_iter();
            for (permit, event) in permits.zip(&mut events) {
                permit.send(self.output.outbound(&event));
            }
            (events.collect::<Vec<_>>(), result)
        };
        debug_assert!(late.is_empty(), "{} events beyond their room", late.len());
        for event in late {
            self.emit(event).await;
        }
        result
    }

    /// Like [`Emitter::emit_with`] for changes that announce themselves with no event.
    pub fn change<R>(&self, change: impl FnOnce(&mut S) -> R) -> R {
        change(&mut self.lock())
    }

    /// Builds a snapshot from the state and queues it at this point of the
    /// stream. A transcript part costs reference counts (its items are encoded
    /// already); only the small events are encoded here.
    pub async fn snapshot(&self, token: u64, build: impl FnOnce(&S) -> Vec<SnapshotPart>) {
        let permit = self.output.tx.reserve().await;
        let state = self.lock();
        let mut lines = Vec::new();
        for part in build(&state) {
            match part {
                SnapshotPart::Event(event) => lines.push(self.output.encoder.encode(&event)),
                SnapshotPart::Transcript(items) => {
                    lines.extend(self.output.encoder.transcript(&items))
                }
            }
        }
        if let Ok(permit) = permit {
            permit.send(Outbound::Snapshot { token, lines });
        }
    }

    fn lock(&self) -> MutexGuard<'_, S> {
        // A poisoned lock means a panic elsewhere mid-change; the state is still the best
        // record there is, and refusing it would stop the session for good.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
