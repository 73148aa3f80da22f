//! The client's side of "connect, or start the daemon and connect".
//!
//! Several clients may find no daemon at the same moment (a shell script starting three
//! front-ends). tmux's answer is a lock the starters share: only one starts a server;
//! the others wait on the lock, and find the server there when they get it. jucode
//! follows it with one change. tmux's server drops that lock as soon as it listens,
//! while the jucode daemon holds `<socket>.lock` for its whole life (it is how a second
//! daemon knows to exit). A starter that waited on *that* lock would wait for the
//! daemon to exit, and a daemon started by a starter still holding it would find it
//! taken. So starters serialize on their own lock, `<socket>.start.lock`, and only
//! *peek* at the daemon's:
//!
//! 1. connect; done unless nobody listens (`ENOENT`, `ECONNREFUSED`);
//! 2. take the start lock, waiting for another starter if need be;
//! 3. connect again: the starter we waited for has usually started the daemon;
//! 4. if the daemon lock is free, no daemon is alive: while holding it (so no daemon
//!    can bind meanwhile) remove a stale socket file, release it, and call `start`;
//!    if it is held, a daemon is starting up: do not start another;
//! 5. connect with a short backoff until it works (at most [`START_TIMEOUT`] in all),
//!    still holding the start lock, so later starters find the daemon listening.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use interprocess::local_socket::tokio::Stream;

use crate::listener::{connect, is_absent, remove_stale_socket};
use crate::lock::LockFile;
use crate::paths::{daemon_lock_path, prepare_socket_dir, start_lock_path};

/// The longest [`connect_or_start`] waits, in all, for a daemon to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the daemon at `socket`, calling `start` (which must spawn the daemon,
/// detached, and return at once) if none runs. Safe to call from many processes at
/// once: exactly one of them starts a daemon and all end up connected to it.
pub async fn connect_or_start(
    socket: &Path,
    start: impl FnOnce() -> io::Result<()>,
) -> io::Result<Stream> {
    match connect(socket).await {
        Err(err) if is_absent(&err) => {}
        other => return other,
    }
    let deadline = Instant::now() + START_TIMEOUT;
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        prepare_socket_dir(dir)?;
    }
    let _start_lock = wait_for_start_lock(socket, deadline).await?;
    match connect(socket).await {
        Err(err) if is_absent(&err) => {}
        other => return other,
    }
    if let Some(daemon_lock) = LockFile::try_acquire(&daemon_lock_path(socket))? {
        remove_stale_socket(socket)?;
        drop(daemon_lock);
        start()?;
    }
    connect_with_backoff(socket, deadline).await
}

async fn wait_for_start_lock(socket: &Path, deadline: Instant) -> io::Result<LockFile> {
    let path = start_lock_path(socket);
    if let Some(lock) = LockFile::try_acquire(&path)? {
        return Ok(lock);
    }
    // Another starter is at work; its wait is bounded by the same timeout as ours.
    let waiter = tokio::task::spawn_blocking(move || LockFile::acquire_blocking(&path));
    match tokio::time::timeout_at(deadline.into(), waiter).await {
        Ok(joined) => joined.map_err(io::Error::other)?,
        // The blocking thread keeps waiting; when it gets the lock it drops it at once.
        Err(_) => Err(timed_out(socket)),
    }
}

async fn connect_with_backoff(socket: &Path, deadline: Instant) -> io::Result<Stream> {
    let mut delay = Duration::from_millis(5);
    loop {
        match connect(socket).await {
            Err(err) if is_absent(&err) => {}
            other => return other,
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(timed_out(socket));
        }
        tokio::time::sleep(delay.min(deadline - now)).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

fn timed_out(socket: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "the jucode daemon did not start listening on {} within {} s",
            socket.display(),
            START_TIMEOUT.as_secs()
        ),
    )
}
