//! Who is attached to what: the live sessions and, per client, its sessions.
//!
//! Two records mirror each other: a [`Session`] lists its subscribers (the clients
//! that get its lines), and a [`ClientHandle`] lists the sessions it is attached to
//! (most recent last: that one is its *current* session, the target of ops without a
//! `session` field). They are always changed together, under both locks, taken in one
//! order only — a session's lock, then a client's, then (as a leaf) an outbox's — so
//! they cannot disagree and cannot deadlock. No lock is ever held across an `.await`,
//! and no [`DashMap`] guard either (dashmap deadlocks otherwise).
//!
//! Memory per idle session is a few hundred bytes here (ids, a small `Vec` of
//! subscribers, the last status string); no buffer is preallocated per session.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::{mpsc, watch};

use crate::host::ClientId;
use crate::outbox::Outbox;
use crate::protocol::{CloseReason, DaemonEvent};

/// A session id, shared by the registry, subscribers' lists and event lines.
pub(crate) type SessionId = Arc<str>;

/// Locks a mutex whose data stays consistent even if a holder panicked (every update
/// under these locks is a handful of plain assignments).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One connected client, as sessions see it.
#[derive(Debug)]
pub(crate) struct ClientHandle {
    pub id: u64,
    pub outbox: Outbox,
    attached: Mutex<Vec<SessionId>>,
}

impl ClientHandle {
    pub(crate) fn new(id: u64, outbox: Outbox) -> Self {
        Self {
            id,
            outbox,
            attached: Mutex::new(Vec::new()),
        }
    }

    /// The session ops without `session` go to: the most recently opened or attached.
    pub(crate) fn current(&self) -> Option<SessionId> {
        lock(&self.attached).last().cloned()
    }

    pub(crate) fn is_attached(&self, session: &str) -> bool {
        lock(&self.attached).iter().any(|s| &**s == session)
    }

    pub(crate) fn attached(&self) -> Vec<SessionId> {
        lock(&self.attached).clone()
    }

    /// Ends the connection if it is attached to nothing (after a quit).
    pub(crate) fn close_if_idle(&self) {
        if lock(&self.attached).is_empty() {
            self.outbox.finish();
        }
    }

    fn forget(&self, session: &str) {
        lock(&self.attached).retain(|s| &**s != session);
    }
}

/// A client receiving a session's lines.
#[derive(Debug)]
struct Subscriber {
    client: Arc<ClientHandle>,
    /// Attached but waiting for its snapshot (this token): live lines until then are
    /// covered by the snapshot and skipped.
    waiting_for: Option<u64>,
    /// Asked to quit while it was the last client: it stays until the session has
    /// ended, then its connection closes if nothing else is attached.
    quitting: bool,
    /// Leaving (detach, or quit while others stay) once the session echoes this
    /// barrier token: until then the answers to its earlier ops still reach it.
    leaving: Option<(u64, Leave)>,
}

/// How a client leaves a session at a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    /// `detach`: it gets `detached` as its last line of the session.
    Detach,
    /// A quit while other clients stay: its connection closes if nothing else is
    /// attached.
    Quit,
    /// `/resume` of another session: it leaves silently (it is attached elsewhere).
    Switch,
}

#[derive(Debug, Default)]
struct Inner {
    subscribers: Vec<Subscriber>,
    /// The `message` of the last `status` event.
    state: Option<Box<str>>,
    /// The output has closed; nothing may attach any more.
    ended: bool,
    /// Why the daemon asked the session to end, for `session_closed.reason`.
    close_reason: Option<CloseReason>,
}

/// What the client asked for cannot be done because the session has ended (or its
/// client is going away).
#[derive(Debug)]
pub(crate) struct Gone;

/// What a quit did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum QuitOutcome {
    /// Other clients remain: this one leaves at the barrier `token` (the caller sends
    /// it), and the session goes on.
    Detached,
    /// This was the last client: the session is ending; the client stays until it has.
    Ending,
    /// The client was not attached.
    NotAttached,
}

/// One hosted session. `I` is the host's input item type.
#[derive(Debug)]
pub(crate) struct Session<I> {
    pub id: SessionId,
    pub cwd: Option<PathBuf>,
    pub chat: bool,
    /// The other agent it runs on; `None` for the host's own engine.
    pub engine: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    /// Dropping the sender asks the session to end.
    input: Mutex<Option<mpsc::Sender<I>>>,
    inner: Mutex<Inner>,
    /// How many clients are attached, for the session itself (see
    /// [`crate::OpenParams::clients`]); updated under `inner`'s lock.
    clients: watch::Sender<usize>,
}

impl<I> Session<I> {
    pub(crate) fn new(
        id: SessionId,
        cwd: Option<PathBuf>,
        chat: bool,
        engine: Option<String>,
        input: mpsc::Sender<I>,
        clients: watch::Sender<usize>,
    ) -> Self {
        let created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self {
            id,
            cwd,
            chat,
            engine,
            created_at,
            input: Mutex::new(Some(input)),
            inner: Mutex::new(Inner::default()),
            clients,
        }
    }

    /// Tells the session how many clients it has now; called under `inner`'s lock
    /// after every change of its subscribers, so the count never goes stale.
    fn publish_count(&self, inner: &Inner) {
        let count = inner.subscribers.len();
        self.clients.send_if_modified(|current| {
            let changed = *current != count;
            *current = count;
            changed
        });
    }

    /// A sender to the session's input, unless it is ending.
    pub(crate) fn input(&self) -> Option<mpsc::Sender<I>> {
        lock(&self.input).clone()
    }

    /// Drops the daemon's input sender: the session ends once it has wound down. The
    /// first reason given is the one reported.
    pub(crate) fn close_input(&self, reason: CloseReason) {
        lock(&self.inner).close_reason.get_or_insert(reason);
        lock(&self.input).take();
    }

    /// Attaches `client` (live at once when `waiting_for` is `None`) and makes this its
    /// current session. Attaching again re-arms the snapshot wait: a resync.
    pub(crate) fn subscribe(
        &self,
        client: &Arc<ClientHandle>,
        waiting_for: Option<u64>,
    ) -> Result<(), Gone> {
        let mut inner = lock(&self.inner);
        if inner.ended {
            return Err(Gone);
        }
        let mut attached = lock(&client.attached);
        if client.outbox.is_closed() {
            return Err(Gone);
        }
        match inner
            .subscribers
            .iter_mut()
            .find(|s| s.client.id == client.id)
        {
            Some(existing) => {
                existing.waiting_for = waiting_for;
                existing.quitting = false;
            }
            None => inner.subscribers.push(Subscriber {
                leaving: None,
                client: client.clone(),
                waiting_for,
                quitting: false,
            }),
        }
        attached.retain(|s| *s != self.id);
        attached.push(self.id.clone());
        self.publish_count(&inner);
        Ok(())
    }

    /// Detaches `client`; false when it was not attached.
    pub(crate) fn unsubscribe(&self, client: &ClientHandle) -> bool {
        let mut inner = lock(&self.inner);
        let before = inner.subscribers.len();
        inner.subscribers.retain(|s| s.client.id != client.id);
        client.forget(&self.id);
        self.publish_count(&inner);
        inner.subscribers.len() != before
    }

    /// Marks `client` to leave when the session echoes `token`. False when it is not
    /// attached.
    pub(crate) fn leave_at(&self, client: &ClientHandle, token: u64, how: Leave) -> bool {
        let mut inner = lock(&self.inner);
        match inner
            .subscribers
            .iter_mut()
            .find(|s| s.client.id == client.id)
        {
            Some(subscriber) => {
                subscriber.leaving = Some((token, how));
                true
            }
            None => false,
        }
    }

    /// The barrier `token` can no longer come back (the session stopped taking input):
    /// the client stays attached for the session's last events instead, and one that
    /// quit is disconnected after them.
    pub(crate) fn cancel_leave(&self, client: &ClientHandle, token: u64) {
        let mut inner = lock(&self.inner);
        if let Some(subscriber) = inner
            .subscribers
            .iter_mut()
            .find(|s| s.client.id == client.id)
            && let Some((leaving, how)) = subscriber.leaving
            && leaving == token
        {
            subscriber.leaving = None;
            subscriber.quitting |= how == Leave::Quit;
        }
    }

    /// The session echoed `token`: the client waiting for it leaves now.
    pub(crate) fn barrier_reached(&self, token: u64) {
        let mut inner = lock(&self.inner);
        let Some(index) = inner
            .subscribers
            .iter()
            .position(|s| s.leaving.is_some_and(|(t, _)| t == token))
        else {
            return;
        };
        let gone = inner.subscribers.remove(index);
        self.publish_count(&inner);
        drop(inner);
        gone.client.forget(&self.id);
        match gone.leaving {
            Some((_, Leave::Detach)) => {
                let detached = DaemonEvent::Detached {
                    session: self.id.to_string(),
                };
                let _ = gone.client.outbox.push(detached.line());
            }
            Some((_, Leave::Switch)) => {}
            _ => gone.client.close_if_idle(),
        }
    }

    /// Detaches a client whose connection ended, unless it quit this session and is
    /// waiting for its last events.
    pub(crate) fn leave_unless_quitting(&self, client: &ClientHandle) {
        let mut inner = lock(&self.inner);
        let before = inner.subscribers.len();
        inner
            .subscribers
            .retain(|s| s.client.id != client.id || s.quitting);
        if inner.subscribers.len() != before {
            client.forget(&self.id);
            self.publish_count(&inner);
        }
    }

    /// `shutdown` / `/quit` from `client`: see [`QuitOutcome`].
    pub(crate) fn quit(&self, client: &ClientHandle, token: u64) -> QuitOutcome {
        let mut inner = lock(&self.inner);
        let Some(index) = inner
            .subscribers
            .iter()
            .position(|s| s.client.id == client.id)
        else {
            return QuitOutcome::NotAttached;
        };
        if inner.subscribers.len() > 1 {
            inner.subscribers[index].leaving = Some((token, Leave::Quit));
            return QuitOutcome::Detached;
        }
        inner.subscribers[index].quitting = true;
        drop(inner);
        self.close_input(CloseReason::Quit);
        QuitOutcome::Ending
    }

    /// Queues a run of consecutive lines for every live subscriber; a client whose
    /// queue overflows (or that is going away) is dropped from the session. The run is
    /// copied into one buffer once, and that same chunk goes to every client: a hundred
    /// clients cost a hundred reference counts per burst, not per line.
    /// `state`, when one of the lines changed it, is the session's state after them.
    pub(crate) fn deliver_all(&self, lines: &[Bytes], state: Option<Box<str>>) {
        if lines.is_empty() {
            return;
        }
        if state.is_none() && lock(&self.inner).subscribers.is_empty() {
            return;
        }
        let chunk = crate::outbox::Chunk {
            bytes: match lines {
                [line] => line.clone(),
                lines => Bytes::from(lines.concat()),
            },
            lines: lines.len(),
        };
        let mut inner = lock(&self.inner);
        if let Some(state) = state {
            inner.state = Some(state);
        }
        let id = &self.id;
        let before = inner.subscribers.len();
        inner.subscribers.retain(|s| {
            if s.waiting_for.is_some() {
                return true;
            }
            let kept = s.client.outbox.push_chunk(chunk.clone()).is_ok();
            if !kept {
                s.client.forget(id);
            }
            kept
        });
        if inner.subscribers.len() != before {
            self.publish_count(&inner);
        }
    }

    /// Queues a line for one subscriber only (the answer to its own op). Delivered even
    /// while it waits for a snapshot: an answer is not state the snapshot covers. A
    /// client that has left gets nothing.
    pub(crate) fn deliver_to(&self, client: ClientId, line: Bytes) {
        let mut inner = lock(&self.inner);
        let Some(index) = inner.subscribers.iter().position(|s| s.client.id == client) else {
            return;
        };
        if inner.subscribers[index].client.outbox.push(line).is_err() {
            let gone = inner.subscribers.remove(index);
            gone.client.forget(&self.id);
            self.publish_count(&inner);
        }
    }

    /// When every live subscriber is congested, the least congested one: the session
    /// must wait for it before delivering more. `None` when anyone keeps up (or nobody
    /// is attached), so a slow client never holds back a faster one.
    pub(crate) fn pacer(&self) -> Option<Arc<ClientHandle>> {
        let inner = lock(&self.inner);
        let mut live = inner
            .subscribers
            .iter()
            .filter(|s| s.waiting_for.is_none())
            .peekable();
        live.peek()?;
        let mut fastest: Option<(usize, &Arc<ClientHandle>)> = None;
        for subscriber in live {
            if !subscriber.client.outbox.congested() {
                return None;
            }
            let backlog = subscriber.client.outbox.backlog();
            if fastest.is_none_or(|(least, _)| backlog < least) {
                fastest = Some((backlog, &subscriber.client));
            }
        }
        fastest.map(|(_, client)| client.clone())
    }

    /// Hands a snapshot to the one subscriber waiting for `token`, which is live from
    /// now on. A snapshot nobody waits for (the client left, or attached again) is
    /// dropped.
    pub(crate) fn deliver_snapshot(&self, token: u64, lines: Vec<Bytes>) {
        // A snapshot may come as many segments (a long transcript is its items, shared
        // with the engine's store): they become one chunk, counted as the whole lines
        // they make, copied once here rather than pushed one by one under the lock.
        let whole = lines
            .iter()
            .filter(|segment| segment.ends_with(b"\n"))
            .count();
        let chunk = crate::outbox::Chunk {
            bytes: match lines.as_slice() {
                [one] => one.clone(),
                segments => Bytes::from(segments.concat()),
            },
            lines: whole,
        };
        let mut inner = lock(&self.inner);
        let Some(index) = inner
            .subscribers
            .iter()
            .position(|s| s.waiting_for == Some(token))
        else {
            return;
        };
        let subscriber = &mut inner.subscribers[index];
        subscriber.waiting_for = None;
        let ok = chunk.bytes.is_empty() || subscriber.client.outbox.push_chunk(chunk).is_ok();
        if !ok {
            let gone = inner.subscribers.remove(index);
            gone.client.forget(&self.id);
            self.publish_count(&inner);
        }
    }

    /// The output has closed: nobody may attach any more. Every subscriber gets
    /// `session_closed` and loses the session; one that was quitting is disconnected
    /// when it has nothing else attached.
    pub(crate) fn end(&self) {
        let (subscribers, reason) = {
            let mut inner = lock(&self.inner);
            inner.ended = true;
            let subscribers = std::mem::take(&mut inner.subscribers);
            for s in &subscribers {
                s.client.forget(&self.id);
            }
            self.publish_count(&inner);
            (subscribers, inner.close_reason)
        };
        lock(&self.input).take();
        let closed = DaemonEvent::SessionClosed {
            session: self.id.to_string(),
            // The engine ended the session on its own when the daemon gave no reason.
            reason: reason.unwrap_or(CloseReason::Ended),
        }
        .line();
        for s in subscribers {
            let _ = s.client.outbox.push(closed.clone());
            if s.quitting {
                s.client.close_if_idle();
            }
        }
    }

    /// Attached clients, including those waiting for their snapshot.
    pub(crate) fn client_count(&self) -> usize {
        lock(&self.inner).subscribers.len()
    }

    /// The last `status` message, or `starting` before the first.
    pub(crate) fn state(&self) -> String {
        lock(&self.inner)
            .state
            .as_deref()
            .unwrap_or("starting")
            .to_owned()
    }
}

/// Every live session by id.
#[derive(Debug)]
pub(crate) struct Registry<I> {
    sessions: DashMap<SessionId, Arc<Session<I>>>,
}

impl<I> Default for Registry<I> {
    fn default() -> Self {
        Self {
            sessions: DashMap::new(),
        }
    }
}

impl<I> Registry<I> {
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Session<I>>> {
        self.sessions.get(id).map(|entry| entry.value().clone())
    }

    /// Adds a session; `Err` (giving it back) when its id is taken.
    pub(crate) fn insert(&self, session: Arc<Session<I>>) -> Result<(), Arc<Session<I>>> {
        match self.sessions.entry(session.id.clone()) {
            dashmap::Entry::Occupied(_) => Err(session),
            dashmap::Entry::Vacant(slot) => {
                slot.insert(session);
                Ok(())
            }
        }
    }

    pub(crate) fn remove(&self, id: &str) {
        self.sessions.remove(id);
    }

    pub(crate) fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Every session, oldest first (ties by id).
    pub(crate) fn all(&self) -> Vec<Arc<Session<I>>> {
        let mut all: Vec<_> = self.sessions.iter().map(|e| e.value().clone()).collect();
        all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        all
    }
}
