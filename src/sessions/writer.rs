//! The one writer of a session file: a task that appends each entry's line as it
//! comes, and `fsync`s at the end of every turn.
//!
//! The engine hands entries over without waiting ([`Journal::append`]); the task writes
//! them in order, one `write` per batch, on the blocking pool. Every line is handed to
//! the kernel as soon as it is written, so a `kill -9` loses nothing already appended;
//! the `fsync` at a turn's end is for power cuts. A new session's file is created only
//! with its first user message, so sessions that never said anything leave no file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::files::{self, SessionLock};
use super::format;
use crate::engine::conversation::store::{Entry, Journal};

enum Job {
    Entry(Arc<Entry>),
    Sync,
    /// Answered once the entries queued before it are written.
    Written(tokio::sync::oneshot::Sender<()>),
}

/// The journal of one session file.
pub struct FileJournal {
    // Unbounded on purpose: every queued entry is already held by the store, so the
    // queue costs a reference per entry, and appending must never wait under the
    // session's lock.
    tx: mpsc::UnboundedSender<Job>,
    error: Arc<Mutex<Option<String>>>,
}

impl Journal for FileJournal {
    fn append(&self, entry: &Arc<Entry>) {
        let _ = self.tx.send(Job::Entry(entry.clone()));
    }

    fn sync(&self) {
        let _ = self.tx.send(Job::Sync);
    }

    fn written(&self) -> futures_util::future::BoxFuture<'static, ()> {
        let (done, wait) = tokio::sync::oneshot::channel();
        let _ = self.tx.send(Job::Written(done));
        // A writer that is gone answers by dropping the sender: nothing more to wait for.
        Box::pin(async move {
            let _ = wait.await;
        })
    }

    fn take_error(&self) -> Option<String> {
        self.error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// Where the writer writes.
pub enum Target {
    /// A new session: the file is created (and locked) with its first user message.
    New {
        dir: PathBuf,
        id: String,
        by: String,
    },
    /// A saved session, already locked by this process and opened for appending.
    Existing {
        file: std::fs::File,
        lock: SessionLock,
    },
}

/// Writer tasks still running, so a process can let them finish before it exits.
fn writers() -> &'static TaskTracker {
    static WRITERS: OnceLock<TaskTracker> = OnceLock::new();
    WRITERS.get_or_init(TaskTracker::new)
}

/// Waits (at most `limit`) for every session file writer to finish what it was given:
/// what a process does after its sessions ended and before it exits.
pub async fn flush_all(limit: std::time::Duration) {
    writers().close();
    let _ = tokio::time::timeout(limit, writers().wait()).await;
}

/// Starts the writer of one session on the current runtime.
pub fn spawn(target: Target) -> Arc<FileJournal> {
    let (tx, rx) = mpsc::unbounded_channel();
    let error = Arc::new(Mutex::new(None));
    writers().spawn(run(target, rx, error.clone()));
    Arc::new(FileJournal { tx, error })
}

struct Writer {
    file: Option<std::fs::File>,
    lock: Option<SessionLock>,
    /// A new session's entries before its file exists.
    waiting: Vec<Arc<Entry>>,
    new: Option<(PathBuf, String, String)>,
    error: Arc<Mutex<Option<String>>>,
    failed: bool,
}

async fn run(
    target: Target,
    mut rx: mpsc::UnboundedReceiver<Job>,
    error: Arc<Mutex<Option<String>>>,
) {
    let mut writer = match target {
        Target::New { dir, id, by } => Writer {
            file: None,
            lock: None,
            waiting: Vec::new(),
            new: Some((dir, id, by)),
            error,
            failed: false,
        },
        Target::Existing { file, lock } => Writer {
            file: Some(file),
            lock: Some(lock),
            waiting: Vec::new(),
            new: None,
            error,
            failed: false,
        },
    };
    let mut jobs = Vec::new();
    while rx.recv_many(&mut jobs, 512).await > 0 {
        let mut bytes = Vec::new();
        let mut sync = false;
        let mut answers = Vec::new();
        for job in jobs.drain(..) {
            match job {
                Job::Sync => sync = true,
                Job::Written(done) => answers.push(done),
                Job::Entry(entry) if writer.file.is_none() => {
                    let starts = entry.starts_turn();
                    writer.waiting.push(entry);
                    if starts {
                        writer.create().await;
                        for waiting in std::mem::take(&mut writer.waiting) {
                            bytes.extend(format::encode(&waiting));
                        }
                    }
                }
                Job::Entry(entry) => bytes.extend(format::encode(&entry)),
            }
        }
        if sync && !answers.is_empty() {
            // The waiters need the write, not the fsync: answer in between.
            writer.write(bytes, false).await;
            for done in answers.drain(..) {
                let _ = done.send(());
            }
            writer.write(Vec::new(), true).await;
        } else {
            writer.write(bytes, sync).await;
        }
        for done in answers {
            let _ = done.send(());
        }
    }
    writer.write(Vec::new(), true).await;
    drop(writer.lock.take());
}

impl Writer {
    async fn create(&mut self) {
        let Some((dir, id, by)) = self.new.take() else {
            return;
        };
        let created = tokio::task::spawn_blocking(move || {
            let lock = files::lock(&dir, &id, &by)?;
            let path = dir.join(format!("{id}.jsonl"));
            let file = std::fs::OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&path)
                .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
            Ok::<_, String>((file, lock))
        })
        .await
        .unwrap_or_else(|err| Err(format!("internal error: {err}")));
        match created {
            Ok((file, lock)) => {
                self.file = Some(file);
                self.lock = Some(lock);
            }
            Err(message) => self.fail(format!("the session will not be saved: {message}")),
        }
    }

    async fn write(&mut self, bytes: Vec<u8>, sync: bool) {
        if self.failed || (bytes.is_empty() && !sync) {
            return;
        }
        let Some(mut file) = self.file.take() else {
            return;
        };
        let done = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let result = file
                .write_all(&bytes)
                .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
            (file, result)
        })
        .await;
        match done {
            Ok((file, Ok(()))) => self.file = Some(file),
            Ok((_, Err(err))) => self.fail(format!("cannot write the session file: {err}")),
            Err(err) => self.fail(format!("internal error writing the session file: {err}")),
        }
    }

    /// The first failure is reported (through the session), and writing stops: a file
    /// with a hole would resume as a conversation that never happened.
    fn fail(&mut self, message: String) {
        tracing::error!("{message}");
        self.failed = true;
        *self
            .error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(message);
    }
}
