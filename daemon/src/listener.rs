//! Getting a listening socket, safely: the daemon lock, stale files, permissions,
//! systemd's socket, and the peer check on every connection.
//!
//! Binding order on Unix (see `paths` for the three layers of privacy):
//!
//! 1. prepare the directory (`0700`, ours, not writable by others);
//! 2. take `<socket>.lock`, waiting at most a quarter second (a starter may be peeking
//!    at it, see `client`): a second daemon for the same socket exits with a clear
//!    error instead of stealing the socket;
//! 3. a socket file already there is stale only if connecting to it is refused (a
//!    daemon that was killed); it is then removed. Only the lock holder ever removes
//!    or binds the socket file, so nobody can delete a live daemon's socket;
//! 4. bind with mode `0600` applied before `bind` (interprocess does an `fchmod` on the
//!    unbound socket), so there is no window where the umask decides.
//!
//! Under systemd socket activation the listening socket is inherited instead (systemd
//! created the file with `SocketMode=0600`); the daemon still takes the lock, but leaves
//! the socket file alone when it stops, because it belongs to the `.socket` unit.
//!
//! Windows uses a named pipe derived from the socket path (interprocess rejects remote
//! clients by default). It is kept minimal and is not build-tested here.

use std::io;
use std::path::{Path, PathBuf};

use interprocess::local_socket::ListenerOptions;
use interprocess::local_socket::tokio::{Listener, Stream, prelude::*};

use crate::lock::LockFile;
use crate::paths::{daemon_lock_path, prepare_socket_dir, with_context};

/// A listening socket and what must be cleaned up when it closes.
pub(crate) struct Bound {
    pub listener: Listener,
    /// The daemon lock; its file is removed when it is dropped.
    pub lock: LockFile,
    /// The socket file to remove on stop (`None` when systemd owns it).
    pub owned_socket: Option<PathBuf>,
}

/// Takes the daemon lock and binds (or adopts `inherited`) the socket.
pub(crate) async fn bind(socket: &Path, inherited: Option<Inherited>) -> io::Result<Bound> {
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        prepare_socket_dir(dir)?;
    }
    let lock_path = daemon_lock_path(socket);
    let mut lock = take_daemon_lock(socket, &lock_path).await?;
    lock.write_pid();
    let lock = lock.remove_on_drop();
    if let Some(inherited) = inherited {
        return Ok(Bound {
            listener: inherited.into_listener()?,
            lock,
            owned_socket: None,
        });
    }
    remove_stale_socket(socket)?;
    let listener = create(socket)
        .map_err(|err| with_context(err, format!("cannot listen on {}", socket.display())))?;
    Ok(Bound {
        listener,
        lock,
        owned_socket: Some(socket.to_owned()),
    })
}

/// A starter peeking at the lock (see `client`) holds it for a few microseconds; only
/// a lock still held after a short while belongs to another daemon.
async fn take_daemon_lock(socket: &Path, lock_path: &Path) -> io::Result<LockFile> {
    for _ in 0..LOCK_ATTEMPTS {
        if let Some(lock) = LockFile::try_acquire(lock_path)? {
            return Ok(lock);
        }
        tokio::time::sleep(LOCK_RETRY).await;
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "another jucode daemon is already running for {} (it holds {})",
            socket.display(),
            lock_path.display()
        ),
    ))
}

const LOCK_ATTEMPTS: u32 = 5;
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Connects to the daemon at `socket`.
pub async fn connect(socket: &Path) -> io::Result<Stream> {
    Stream::connect(name(socket)?).await
}

/// True for the errors that mean "no daemon is listening there".
pub(crate) fn is_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

/// A listening socket passed in by the service manager.
#[derive(Debug)]
pub struct Inherited {
    #[cfg(unix)]
    fd: std::os::fd::OwnedFd,
}

impl Inherited {
    /// Adopts an already listening Unix socket (socket activation, or a test).
    #[cfg(unix)]
    pub fn from_fd(fd: std::os::fd::OwnedFd) -> Self {
        Self { fd }
    }

    /// The socket systemd passed (`LISTEN_FDS`, first descriptor), if any.
    #[cfg(unix)]
    pub fn from_systemd() -> io::Result<Option<Self>> {
        let mut fds = listenfd::ListenFd::from_env();
        Ok(fds
            .take_unix_listener(0)?
            .map(|listener| Self::from_fd(listener.into())))
    }

    #[cfg(not(unix))]
    pub fn from_systemd() -> io::Result<Option<Self>> {
        Ok(None)
    }

    #[cfg(unix)]
    fn into_listener(self) -> io::Result<Listener> {
        use interprocess::os::unix::uds_local_socket::tokio::Listener as UdsListener;
        Ok(UdsListener::try_from(self.fd)?.into())
    }

    #[cfg(not(unix))]
    fn into_listener(self) -> io::Result<Listener> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "inherited listeners are a Unix feature",
        ))
    }
}

#[cfg(unix)]
fn name(socket: &Path) -> io::Result<interprocess::local_socket::Name<'_>> {
    socket.to_fs_name::<interprocess::local_socket::GenericFilePath>()
}

/// Windows: a named pipe named after the socket path (named pipes are not files).
#[cfg(windows)]
fn name(socket: &Path) -> io::Result<interprocess::local_socket::Name<'static>> {
    let flat: String = socket
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("jucode-{flat}").to_ns_name::<interprocess::local_socket::GenericNamespaced>()
}

#[cfg(unix)]
fn create(socket: &Path) -> io::Result<Listener> {
    use interprocess::os::unix::local_socket::ListenerOptionsExt;
    ListenerOptions::new()
        .name(name(socket)?)
        .mode(0o600)
        // The daemon removes its socket file itself, and only while it is still its
        // own: interprocess would unlink whatever file bears the name on drop.
        .reclaim_name(false)
        .create_tokio()
}

#[cfg(windows)]
fn create(socket: &Path) -> io::Result<Listener> {
    ListenerOptions::new().name(name(socket)?).create_tokio()
}

/// Removes a socket file nobody listens on. Callers must hold the daemon lock.
#[cfg(unix)]
pub(crate) fn remove_stale_socket(socket: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; remove it or choose another --socket",
                socket.display()
            ),
        ));
    }
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{} is served by a process that does not hold {}",
                socket.display(),
                daemon_lock_path(socket).display()
            ),
        )),
        Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(socket = %socket.display(), "removing stale socket file");
            match std::fs::remove_file(socket) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
                _ => Ok(()),
            }
        }
        Err(err) => Err(with_context(
            err,
            format!("cannot probe existing socket {}", socket.display()),
        )),
    }
}

#[cfg(windows)]
pub(crate) fn remove_stale_socket(_socket: &Path) -> io::Result<()> {
    // A named pipe disappears with its last handle: there is never a stale one.
    Ok(())
}

/// This process's effective uid.
#[cfg(unix)]
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether the peer runs as the daemon's own user; a refusal is logged.
#[cfg(unix)]
pub(crate) fn peer_allowed(stream: &Stream) -> bool {
    let me = euid();
    match stream.peer_creds() {
        Ok(creds) => match creds.euid() {
            Some(uid) if uid == me => true,
            Some(uid) => {
                tracing::warn!(peer_uid = uid, pid = ?creds.pid(), "refused a connection from another user");
                false
            }
            None => {
                tracing::warn!("refused a connection: peer uid unknown");
                false
            }
        },
        Err(err) => {
            tracing::warn!(%err, "refused a connection: cannot read peer credentials");
            false
        }
    }
}

/// Windows gives only the peer's pid; the pipe's default security is relied upon.
#[cfg(windows)]
pub(crate) fn peer_allowed(_stream: &Stream) -> bool {
    true
}
