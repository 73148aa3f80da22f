//! Advisory lock files: "one daemon per socket" and "one starter at a time".
//!
//! `std::fs::File::try_lock` (an `flock` on Unix, `LockFileEx` on Windows) is released
//! by the kernel when the holder dies, so a crashed daemon never leaves a lock behind,
//! only a harmless file.
//!
//! The daemon removes its lock file when it stops. That opens a classic race: a waiter
//! that opened the old file can lock it after it was unlinked while a newcomer creates
//! and locks a new file at the same path, and both believe they hold "the" lock. So a
//! lock counts only once the path still names the very file that was locked (same
//! device and inode); otherwise it is dropped and taken again.
//!
//! A lock file is opened without following a symbolic link (`O_NOFOLLOW`): the holder
//! writes its pid into it, so a link planted at `daemon.sock.lock` would have the daemon
//! cut and overwrite whatever it points to. Such a link is refused, naming it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A held lock. Dropping it releases the lock (and removes the file when
/// [`LockFile::remove_on_drop`] was set).
#[derive(Debug)]
pub(crate) struct LockFile {
    file: File,
    path: PathBuf,
    remove_on_drop: bool,
}

impl LockFile {
    /// Takes the lock if nobody holds it; `None` when somebody does.
    pub(crate) fn try_acquire(path: &Path) -> io::Result<Option<LockFile>> {
        loop {
            let file = open(path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => return Ok(None),
                Err(TryLockError::Error(err)) => return Err(lock_error(path, err)),
            }
            if still_at(path, &file)? {
                return Ok(Some(Self::held(file, path)));
            }
        }
    }

    /// Waits for the lock (blocking the thread) and takes it.
    pub(crate) fn acquire_blocking(path: &Path) -> io::Result<LockFile> {
        loop {
            let file = open(path)?;
            file.lock().map_err(|err| lock_error(path, err))?;
            if still_at(path, &file)? {
                return Ok(Self::held(file, path));
            }
        }
    }

    fn held(file: File, path: &Path) -> LockFile {
        LockFile {
            file,
            path: path.to_owned(),
            remove_on_drop: false,
        }
    }

    /// Removes the file when the lock is released (the daemon's own lock).
    pub(crate) fn remove_on_drop(mut self) -> Self {
        self.remove_on_drop = true;
        self
    }

    /// Records the holder's pid in the file, for a person wondering who holds it.
    pub(crate) fn write_pid(&mut self) {
        let _ = self.file.set_len(0);
        let _ = writeln!(self.file, "{}", std::process::id());
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Unlink while still holding the lock, so nobody can lock this inode, find it
        // at the path, and then see it vanish.
        if self.remove_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

fn open(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    options.open(path).map_err(|err| {
        // The error code of a refused link differs between systems (ELOOP, EMLINK):
        // look at the path instead.
        let link = std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink());
        if link {
            return io::Error::new(
                err.kind(),
                format!(
                    "{} is a symbolic link, which jucode will not follow: remove it",
                    path.display()
                ),
            );
        }
        crate::paths::with_context(err, format!("cannot open {}", path.display()))
    })
}

fn lock_error(path: &Path, err: io::Error) -> io::Error {
    crate::paths::with_context(err, format!("cannot lock {}", path.display()))
}

#[cfg(unix)]
fn still_at(path: &Path, file: &File) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata()?;
    // The path itself, not what a link there (put in after the open) points to.
    match std::fs::symlink_metadata(path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}

#[cfg(not(unix))]
fn still_at(_path: &Path, _file: &File) -> io::Result<bool> {
    // Windows cannot delete a file another process has open, so the race cannot happen.
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_until_the_first_lets_go() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.lock");
        let first = LockFile::try_acquire(&path).unwrap().expect("free lock");
        assert!(LockFile::try_acquire(&path).unwrap().is_none());
        drop(first);
        assert!(path.exists(), "a plain lock keeps its file");
        let second = LockFile::try_acquire(&path)
            .unwrap()
            .expect("released lock");
        drop(second.remove_on_drop());
        assert!(!path.exists());
    }

    #[test]
    fn a_waiter_on_a_removed_file_takes_the_new_one() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.lock");
        let first = LockFile::try_acquire(&path)
            .unwrap()
            .unwrap()
            .remove_on_drop();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || LockFile::acquire_blocking(&path).unwrap())
        };
        drop(first);
        let held = waiter.join().unwrap();
        // Whoever holds it holds the file that is at the path now.
        assert!(still_at(&path, &held.file).unwrap());
        assert!(LockFile::try_acquire(&path).unwrap().is_none());
    }

    #[cfg(unix)]
    #[test]
    fn a_linked_lock_file_is_refused_and_its_target_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let path = tmp.path().join("daemon.sock.lock");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = LockFile::try_acquire(&path).unwrap_err().to_string();
        assert!(err.contains("daemon.sock.lock is a symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    }
}
