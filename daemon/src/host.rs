//! The contract between the daemon and what it hosts.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

/// Identifies one connection to the daemon, so that a session can answer the client
/// whose op it is handling, and only that client.
pub type ClientId = u64;

/// What the daemon hosts: a factory of sessions that speak protocol lines.
///
/// The associated types let the host use its own channel item types (no copy or extra
/// task between the engine and the fan-out): the daemon converts with `From`/`Into`
/// at the ends.
pub trait Host: Send + Sync + 'static {
    /// What a session's input channel carries; built from each routed client line.
    type Input: From<ClientInput> + Send + 'static;
    /// What a session's output channel carries.
    type Output: Into<HostOutput> + Send + 'static;

    /// The line the daemon sends first on every connection (`hello`, with `\n`).
    fn hello(&self) -> Bytes;

    /// Creates a session. Its output starts with its startup batch. It may read files
    /// (a profile, a config): the host must keep such work off the async workers.
    fn open(
        &self,
        params: OpenParams,
    ) -> impl Future<Output = Result<Hosted<Self::Input, Self::Output>, String>> + Send;

    /// The sessions saved on disk, for the `sessions` answer (file-system work: keep it
    /// off the async workers). Sessions that are also running are listed as running.
    /// An error (the place they are kept cannot be listed) is the answer instead.
    fn saved_sessions(&self) -> impl Future<Output = Result<Vec<SavedSession>, String>> + Send;

    /// Whether a client line with this `op` is one the daemon acts on for the session
    /// rather than forwards: "this client is done with the session" (the engine's
    /// `shutdown`, `/quit`, `/exit`: the daemon detaches the client, or ends the session
    /// if it was the last one), or "this client continues another session" (`/resume
    /// <id>`: the daemon moves it there). Called for every forwarded line, so it must
    /// decide cheaply from `op` before looking further into `line`.
    fn intercept(&self, op: &str, line: &[u8]) -> Intercept;
}

/// What the daemon does with a client line (see [`Host::intercept`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intercept {
    /// Forward it to the session.
    Forward,
    /// The client is done with the session.
    Quit,
    /// The client moves to session `0` (loaded from disk if it is not running).
    Switch(String),
}

/// The fields of an `open` op, and what the daemon gives every session.
#[derive(Debug, Clone)]
pub struct OpenParams {
    /// Absolute working directory; `None` lets the host choose.
    pub cwd: Option<PathBuf>,
    /// A chat session instead of a coding session.
    pub chat: bool,
    /// The client's environment; the session's tools run with it.
    pub env: HashMap<String, String>,
    /// A saved session to load (by id) instead of starting a new one: what `attach`
    /// asks for when the session is not live.
    pub resume: Option<String>,
    /// The `[engines.<name>]` entry a new session runs on; the host's own engine when
    /// `None` (a resumed session runs on the engine it was saved with).
    pub engine: Option<String>,
    /// How many clients are attached to the session right now. A session nobody
    /// watches should not wait for answers only a client can give (approvals).
    pub clients: watch::Receiver<usize>,
}

/// A live session's channels. The session ends when `output` closes; dropping `input`
/// asks it to end.
pub struct Hosted<I, O> {
    pub id: String,
    pub input: mpsc::Sender<I>,
    pub output: mpsc::Receiver<O>,
    /// Its working directory and kind, as listed by `sessions` (for a loaded session,
    /// those it was saved with).
    pub cwd: Option<PathBuf>,
    pub chat: bool,
    /// The other agent it runs on, by its config name; `None` for the host's own engine.
    pub engine: Option<String>,
}

/// A session saved on disk.
#[derive(Debug, Clone)]
pub struct SavedSession {
    pub id: String,
    pub cwd: Option<PathBuf>,
    pub chat: bool,
    /// The other agent it ran on; `None` for the host's own engine.
    pub engine: Option<String>,
    pub label: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: u64,
    pub updated: u64,
    /// Why its file cannot be continued, when it cannot (listed all the same).
    pub broken: Option<String>,
}

/// What the daemon sends into a session.
#[derive(Debug)]
pub enum ClientInput {
    /// One client line (an op), exactly as received, without its newline.
    Line { client: ClientId, line: Bytes },
    /// Asks for the state a client attaching now needs to render; the session answers
    /// with [`HostOutput::Snapshot`] carrying the same token, placed in its output
    /// exactly between the events the snapshot covers and those it does not.
    Snapshot { token: u64 },
    /// Asks the session to echo [`HostOutput::Barrier`] with this token once it has
    /// handled every input sent before it: what a client leaving with `detach` (or a
    /// quit) waits for, so the answers to its last ops still reach it.
    Barrier { token: u64 },
}

/// What comes out of a session.
#[derive(Debug)]
pub enum HostOutput {
    /// One event line, `\n`-terminated, for every attached client.
    Line(Bytes),
    /// A line for every attached client that also changes the session's state, as the
    /// `sessions` answer lists it (`ready`, `streaming`, `queued: 2` ...).
    Status { line: Bytes, state: Box<str> },
    /// One event line for one client only: the answer to that client's op (an error,
    /// a view). Dropped if the client has left.
    Reply { client: ClientId, line: Bytes },
    /// The answer to [`ClientInput::Snapshot`]: lines for the attaching client only.
    Snapshot { token: u64, lines: Vec<Bytes> },
    /// The answer to [`ClientInput::Barrier`], in order with the session's events.
    Barrier { token: u64 },
}
