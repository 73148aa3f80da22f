//! The daemon's main loop: accept connections until told to stop, then stop in order.
//!
//! A graceful stop (the `shutdown` future, or a client's `daemon_stop`) runs in phases,
//! each bounded by [`DaemonOptions::stop_grace`], mini-redis style (cancellation tokens
//! to tell tasks, task trackers to know when they are done):
//!
//! 1. stop accepting and remove the socket file (unless systemd owns it), and stop
//!    reading ops from connected clients;
//! 2. drop every session's input, so every session ends, and wait for their outputs to
//!    close (each client gets the final events and `session_closed`); a session still
//!    running after the grace period is abandoned;
//! 3. let every connection flush its queue and close; one still writing after the grace
//!    period (a client that stopped reading) is cut off;
//! 4. remove the lock file.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use interprocess::local_socket::traits::tokio::Listener as _;

use crate::host::Host;
use crate::listener::{self, Inherited};
use crate::outbox::ClientLimits;
use crate::registry::Registry;

/// How the daemon runs.
#[derive(Debug)]
pub struct DaemonOptions {
    /// The socket path (the lock file is `<socket>.lock` next to it).
    pub socket: PathBuf,
    /// The version reported by `daemon_status`.
    pub version: String,
    /// The exact build, reported by `daemon_status` (see [`crate::protocol::Hello`]).
    pub build: String,
    /// The most connections served at once; one more is told so and closed.
    pub max_clients: usize,
    /// How far a client may fall behind before it is disconnected.
    pub client_limits: ClientLimits,
    /// The bound of each phase of a graceful stop.
    pub stop_grace: Duration,
    /// A listening socket to serve instead of binding one (systemd socket activation).
    pub inherited: Option<Inherited>,
    /// How often to check that the socket file is still this daemon's; the daemon
    /// stops once it was removed or replaced.
    pub socket_check: Duration,
    /// Told once the socket listens, so that servers riding on the daemon (its
    /// WebSocket server) start only when their connections to it can succeed.
    pub on_listening: Option<tokio::sync::oneshot::Sender<()>>,
}

impl DaemonOptions {
    /// Defaults for `socket`: 131072 lines / 32 MiB per client, 1024 clients, 3 s stop
    /// phases.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            build: String::new(),
            max_clients: DEFAULT_MAX_CLIENTS,
            client_limits: ClientLimits::default(),
            stop_grace: Duration::from_secs(3),
            inherited: None,
            socket_check: Duration::from_secs(5),
            on_listening: None,
        }
    }

    /// Serves the socket systemd passed, when there is one (harmless otherwise).
    pub fn with_systemd_listener(mut self) -> io::Result<Self> {
        self.inherited = Inherited::from_systemd()?;
        Ok(self)
    }
}

/// The default bound on connections served at once. Each costs a task pair and its
/// queue; a runaway script opening connections in a loop must not exhaust the
/// daemon's descriptors or memory before a human notices.
pub const DEFAULT_MAX_CLIENTS: usize = 1024;

/// Bounds of the pause after a failed `accept` (typically EMFILE): short at first,
/// doubling while the failures go on, so the loop neither spins nor stalls for long.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What every task of the daemon shares.
pub(crate) struct Shared<H: Host> {
    pub host: Arc<H>,
    pub sessions: Registry<H::Input>,
    /// Connected clients that passed the peer check.
    pub clients: AtomicUsize,
    pub limits: ClientLimits,
    pub version: String,
    pub build: String,
    pub socket: PathBuf,
    /// One permit per connection being served.
    pub connection_slots: Arc<Semaphore>,
    pub max_clients: usize,
    /// Serving a listener handed over by systemd.
    pub socket_activated: bool,
    pub started: Instant,
    next_client: AtomicU64,
    next_token: AtomicU64,
    /// A client sent `daemon_stop`.
    pub stop_requested: CancellationToken,
    /// Phase 1: connections stop reading ops.
    pub stopping: CancellationToken,
    /// Phase 2 timed out: session fan-outs stop waiting for their output.
    pub abandon_sessions: CancellationToken,
    /// Phase 3: connections flush and close.
    pub release_clients: CancellationToken,
    /// Phase 3 timed out: writers give up.
    pub hard_stop: CancellationToken,
    /// Session fan-out tasks.
    pub session_tasks: TaskTracker,
    /// Connection tasks.
    pub connection_tasks: TaskTracker,
}

impl<H: Host> Shared<H> {
    pub(crate) fn next_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed)
    }

    /// A token no other snapshot request of this daemon carries.
    pub(crate) fn next_token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }
}

/// Serves `host` on `options.socket` until `shutdown` completes or a client sends
/// `daemon_stop`, then stops gracefully (see the module docs).
///
/// Fails at once, before serving, when another daemon holds the socket's lock, when
/// the socket directory is not private, or when the socket cannot be bound. Once
/// listening it tells systemd it is ready (a no-op outside systemd).
pub async fn run<H: Host>(
    host: Arc<H>,
    options: DaemonOptions,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let socket_activated = options.inherited.is_some();
    let listener::Bound {
        listener,
        lock,
        owned_socket,
    } = listener::bind(&options.socket, options.inherited).await?;
    notify_ready();
    if let Some(listening) = options.on_listening {
        let _ = listening.send(());
    }
    tracing::info!(socket = %options.socket.display(), pid = std::process::id(), "daemon listening");

    let shared = Arc::new(Shared {
        host,
        sessions: Registry::default(),
        clients: AtomicUsize::new(0),
        limits: options.client_limits,
        version: options.version,
        build: options.build,
        socket: options.socket,
        connection_slots: Arc::new(Semaphore::new(options.max_clients.max(1))),
        max_clients: options.max_clients.max(1),
        socket_activated,
        started: Instant::now(),
        next_client: AtomicU64::new(1),
        next_token: AtomicU64::new(1),
        stop_requested: CancellationToken::new(),
        stopping: CancellationToken::new(),
        abandon_sessions: CancellationToken::new(),
        release_clients: CancellationToken::new(),
        hard_stop: CancellationToken::new(),
        session_tasks: TaskTracker::new(),
        connection_tasks: TaskTracker::new(),
    });

    // A daemon whose socket file was removed (its profile directory deleted) or replaced
    // (by another daemon) can never be reached again: it stops instead of lingering.
    let bound = owned_socket.as_deref().and_then(socket_identity);
    let mut watch = tokio::time::interval(options.socket_check);
    watch.tick().await;
    let mut backoff = ACCEPT_BACKOFF_MIN;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            () = shared.stop_requested.cancelled() => break,
            _ = watch.tick(), if bound.is_some() => {
                // A `stat`, but on a file system that may hang (NFS): off the workers.
                let path = owned_socket.clone();
                let now = tokio::task::spawn_blocking(move || path.as_deref().and_then(socket_identity))
                    .await
                    .unwrap_or(bound);
                if now != bound {
                    tracing::warn!("the socket file was removed or replaced; stopping");
                    break;
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok(stream) => {
                backoff = ACCEPT_BACKOFF_MIN;
                match shared.connection_slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        let task = crate::connection::serve(shared.clone(), stream, slot);
                        shared.connection_tasks.spawn(task);
                    }
                    Err(_) => {
                        let task = crate::connection::refuse_full(shared.clone(), stream);
                        shared.connection_tasks.spawn(task);
                    }
                }
            }
            Err(err) => {
                // Typically EMFILE: back off rather than spin; existing clients go on.
                tracing::warn!(%err, delay_ms = backoff.as_millis() as u64, "accept failed");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shared.stop_requested.cancelled() => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
            }
        }
    }

    tracing::info!("daemon stopping");
    drop(listener);
    // The file goes with the listener, before the sessions wind down: nobody may find
    // a socket that refuses them. Only our own: a file another daemon bound since is
    // left alone. (The lock stays until the end, so no second daemon starts meanwhile.)
    if let Some(socket) = owned_socket
        && bound.is_some()
        && socket_identity(&socket) == bound
    {
        let _ = std::fs::remove_file(socket);
    }
    stop(&shared, options.stop_grace).await;
    drop(lock);
    tracing::info!("daemon stopped");
    Ok(())
}

/// The file system identity (device, inode) of a socket file.
fn socket_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(path)
            .ok()
            .map(|meta| (meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        // Named pipes have no file to watch.
        let _ = path;
        None
    }
}

async fn stop<H: Host>(shared: &Shared<H>, grace: Duration) {
    shared.stopping.cancel();
    for session in shared.sessions.all() {
        session.close_input(crate::protocol::CloseReason::DaemonStopping);
    }
    shared.session_tasks.close();
    if tokio::time::timeout(grace, shared.session_tasks.wait())
        .await
        .is_err()
    {
        shared.abandon_sessions.cancel();
        shared.session_tasks.wait().await;
    }
    shared.release_clients.cancel();
    shared.connection_tasks.close();
    if tokio::time::timeout(grace, shared.connection_tasks.wait())
        .await
        .is_err()
    {
        shared.hard_stop.cancel();
        shared.connection_tasks.wait().await;
    }
}

#[cfg(unix)]
fn notify_ready() {
    if let Err(err) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
        tracing::warn!(%err, "cannot notify systemd");
    }
}

#[cfg(not(unix))]
fn notify_ready() {}
