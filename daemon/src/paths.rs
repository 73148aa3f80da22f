//! Where the socket lives, and the checks that keep other users out of it.
//!
//! The socket is the daemon's only door, and whoever can connect can run tools as the
//! daemon's user. Three layers keep it private on Unix, each enough on its own for the
//! common cases and together robust against the odd one (a shared `$HOME`, a careless
//! `chmod`):
//!
//! 1. the directory is the user's own and not writable by group or others (we create it
//!    `0700`; an existing one that fails the check is refused, never "fixed");
//! 2. the socket file is `0600`, set before `bind` (see `listener`), so no umask race;
//! 3. every accepted connection's peer uid must equal the daemon's euid.
//!
//! The Linux abstract namespace is never used: it has no permissions at all.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

/// The socket's file name inside the chosen directory.
const SOCKET_NAME: &str = "daemon.sock";

/// The default socket path, from the environment values passed in (so it is testable):
///
/// 1. `$JUCODE_HOME/daemon.sock` when `JUCODE_HOME` is set (a profile directory keeps
///    its own daemon);
/// 2. else `$XDG_RUNTIME_DIR/jucode/daemon.sock` (per-user, tmpfs, cleaned at logout);
/// 3. else `~/.jucode/daemon.sock`.
///
/// Empty values count as unset, and a relative `XDG_RUNTIME_DIR` is ignored, as the
/// XDG base directory specification asks. `None` when not even a home is known.
pub fn default_socket_path(
    jucode_home: Option<&OsStr>,
    xdg_runtime_dir: Option<&OsStr>,
    home: Option<&Path>,
) -> Option<PathBuf> {
    let set = |value: Option<&OsStr>| value.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(jucode_home) {
        return Some(dir.join(SOCKET_NAME));
    }
    if let Some(dir) = set(xdg_runtime_dir).filter(|d| d.is_absolute()) {
        return Some(dir.join("jucode").join(SOCKET_NAME));
    }
    let home = home.filter(|h| !h.as_os_str().is_empty())?;
    Some(home.join(".jucode").join(SOCKET_NAME))
}

/// [`default_socket_path`] with this process's environment.
pub fn default_socket_path_from_env() -> Option<PathBuf> {
    let home_var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    let home = std::env::var_os(home_var).map(PathBuf::from);
    default_socket_path(
        std::env::var_os("JUCODE_HOME").as_deref(),
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        home.as_deref(),
    )
}

/// The daemon's lock file, held for its whole life: `<socket>.lock`.
pub fn daemon_lock_path(socket: &Path) -> PathBuf {
    with_suffix(socket, ".lock")
}

/// The starters' lock file, held by a client while it starts a daemon and waits for it
/// to listen: `<socket>.start.lock`. See `client` for why it is not the daemon's lock.
pub fn start_lock_path(socket: &Path) -> PathBuf {
    with_suffix(socket, ".start.lock")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Creates the socket's directory (`0700`, parents included) or checks an existing one:
/// it must be a directory owned by this user and not writable by group or others.
pub fn prepare_socket_dir(dir: &Path) -> io::Result<()> {
    create_private_dir(dir)?;
    check_private_dir(dir)
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|err| with_context(err, format!("cannot create {}", dir.display())))
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|err| with_context(err, format!("cannot create {}", dir.display())))
}

#[cfg(unix)]
fn check_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)
        .map_err(|err| with_context(err, format!("cannot inspect {}", dir.display())))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let me = crate::listener::euid();
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing socket directory {}: it is owned by uid {}, not by this user (uid {me})",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing socket directory {}: it is writable by group or others (mode {mode:o}); \
                 run `chmod go-w {}`",
                dir.display(),
                dir.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_dir(dir: &Path) -> io::Result<()> {
    // Windows: the directory holds only lock files; the pipe carries its own ACL.
    let _ = dir;
    Ok(())
}

/// Prefixes an error's message with what was being done, keeping its kind.
pub(crate) fn with_context(err: io::Error, context: String) -> io::Error {
    io::Error::new(err.kind(), format!("{context}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn socket_path_precedence() {
        let home = Path::new("/home/u");
        assert_eq!(
            default_socket_path(os("/p"), os("/run/user/1"), Some(home)),
            Some(PathBuf::from("/p/daemon.sock"))
        );
        assert_eq!(
            default_socket_path(None, os("/run/user/1"), Some(home)),
            Some(PathBuf::from("/run/user/1/jucode/daemon.sock"))
        );
        assert_eq!(
            default_socket_path(os(""), os(""), Some(home)),
            Some(PathBuf::from("/home/u/.jucode/daemon.sock"))
        );
        assert_eq!(
            default_socket_path(None, os("relative/dir"), Some(home)),
            Some(PathBuf::from("/home/u/.jucode/daemon.sock"))
        );
        assert_eq!(default_socket_path(None, None, None), None);
    }

    #[test]
    fn lock_paths_sit_next_to_the_socket() {
        let socket = Path::new("/run/user/1/jucode/daemon.sock");
        assert_eq!(
            daemon_lock_path(socket),
            PathBuf::from("/run/user/1/jucode/daemon.sock.lock")
        );
        assert_eq!(
            start_lock_path(socket),
            PathBuf::from("/run/user/1/jucode/daemon.sock.start.lock")
        );
    }

    #[cfg(unix)]
    #[test]
    fn directory_checks() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let fresh = tmp.path().join("a/b");
        prepare_socket_dir(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = prepare_socket_dir(&open).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(
            err.to_string().contains("writable by group or others"),
            "{err}"
        );

        let readable = tmp.path().join("readable");
        std::fs::create_dir(&readable).unwrap();
        std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_socket_dir(&readable).unwrap();
    }
}
