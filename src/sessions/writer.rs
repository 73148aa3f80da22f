//! The one writer of a session file: a task that appends each entry's line as it
//! comes, and `fsync`s at the end of every turn.
//!
//! The engine hands entries over without waiting ([`Journal::append`]); the task writes
//! them in order, one `write` per batch, on the blocking pool. Every line is handed to
//! the kernel as soon as it is written, so a `kill -9` loses nothing already appended;
//! the `fsync` at a turn's end is for power cuts. A new session's file is created only
//! with its first user message, so sessions that never said anything leave no file.
//!
//! A write that fails (a full disk, an I/O error, a read-only file system, the file or
//! its directory removed) loses nothing: the lines not written stay queued, the session
//! is told once, and the writer tries again every [`RETRY`] and with every new entry.
//! Before each attempt it cuts the file back to the last line it completed (a failed
//! write may have left part of one), so the file only ever holds whole lines, in order,
//! and what was on disk before is never touched. After a failed `fsync` the kernel may
//! have dropped the pages it could not write, so the lines since the last good `fsync`
//! are written again. A file that is gone from its path (its directory removed) is
//! written anew there, whole, from the one this process still holds open. Once writing
//! works again the session is told that too: after a failed `fsync`, only once an
//! `fsync` works (lines the kernel took but cannot make durable are not saved). While
//! saving fails, a turn's end waits (bounded) for the whole attempt, so what it says
//! before its closing status is true of that turn.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::files::{self, Runner, SessionLock};
use super::format;
use crate::engine::conversation::store::{Entry, Journal};

/// How often a writer that cannot write tries again (it also tries with every entry).
pub const RETRY: Duration = Duration::from_secs(1);

enum Job {
    Entry(Arc<Entry>),
    Sync,
    /// Answered once the entries queued before it are written (or could not be).
    Written(tokio::sync::oneshot::Sender<()>),
}

/// What the writer has to tell the session, taken at its next report.
#[derive(Default)]
struct Reports {
    error: Option<String>,
    recovered: Option<String>,
}

/// The journal of one session file.
pub struct FileJournal {
    // Unbounded on purpose: every queued entry is already held by the store, so the
    // queue costs a reference per entry, and appending must never wait under the
    // session's lock.
    tx: mpsc::UnboundedSender<Job>,
    reports: Arc<Mutex<Reports>>,
}

impl FileJournal {
    fn reports(&self) -> std::sync::MutexGuard<'_, Reports> {
        self.reports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
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
        self.reports().error.take()
    }

    fn take_recovered(&self) -> Option<String> {
        self.reports().recovered.take()
    }
}

/// Where the writer writes.
pub enum Target {
    /// A new session: the file is created (and locked) with its first user message.
    New {
        dir: PathBuf,
        id: String,
        by: Runner,
    },
    /// A saved session, already locked by this process and opened for appending (and
    /// reading: a file removed from under it is copied back from it).
    Existing {
        path: PathBuf,
        file: std::fs::File,
        lock: SessionLock,
        by: Runner,
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
    let reports = Arc::new(Mutex::new(Reports::default()));
    writers().spawn(run(target, rx, reports.clone()));
    Arc::new(FileJournal { tx, reports })
}

/// How many more attempts a writer makes, [`RETRY`] apart, once its session has ended
/// with lines still unwritten (a process that exits waits for them, bounded).
const LAST_ATTEMPTS: usize = 5;

async fn run(target: Target, mut rx: mpsc::UnboundedReceiver<Job>, reports: Arc<Mutex<Reports>>) {
    let mut writer = Writer::new(target, reports);
    let mut jobs = Vec::new();
    loop {
        let retry = writer.failing.is_some();
        let received = tokio::select! {
            received = rx.recv_many(&mut jobs, 512) => received,
            synced = sync_done(&mut writer.syncing) => {
                writer.synced(synced).await;
                continue;
            }
            () = tokio::time::sleep(RETRY), if retry => {
                writer.flush(true).await;
                continue;
            }
        };
        if received == 0 {
            break;
        }
        let mut sync = false;
        let mut answers = Vec::new();
        for job in jobs.drain(..) {
            match job {
                Job::Sync => sync = true,
                Job::Written(done) => answers.push(done),
                Job::Entry(entry) => writer.queue(entry),
            }
        }
        // A file removed from its path is written anew before anyone is told it is
        // saved. The waiters need the write, not the fsync: answer in between.
        if sync
            && writer.file.is_some()
            && let Err(message) = writer.check_place().await
        {
            writer.fail(message);
        }
        writer.flush(false).await;
        if sync && writer.failing.is_some() && !answers.is_empty() {
            // While saving fails, a turn's end waits for the whole attempt, its `fsync`
            // included (bounded by the session's wait), so that what it then says (still
            // failing, or saved again) is true of the turn it closes.
            writer.flush(true).await;
            writer.settle().await;
            sync = false;
        }
        for done in answers {
            let _ = done.send(());
        }
        if sync {
            writer.flush(true).await;
        }
    }
    for attempt in 0..=LAST_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(RETRY).await;
        }
        writer.flush(true).await;
        writer.settle().await;
        if writer.failing.is_none() {
            break;
        }
    }
    drop(writer.lock.take());
}

/// An `fsync` running on the blocking pool: how far the file was written when it began,
/// how many of the unsynced bytes that was, and its result.
type Syncing = tokio::task::JoinHandle<(u64, usize, std::io::Result<()>)>;

/// Resolves when the running `fsync` ends (never, when none runs).
async fn sync_done(syncing: &mut Option<Syncing>) -> Option<(u64, usize, std::io::Result<()>)> {
    let Some(handle) = syncing.as_mut() else {
        return std::future::pending().await;
    };
    let done = handle.await;
    *syncing = None;
    done.ok()
}

/// A test hook, documented in `docs/reliability.md`: `JUCODE_TEST_FSYNC_DELAY_MS` makes
/// every session file `fsync` take that much longer, as a slow disk's would (the fault
/// tests show that it stalls nothing). Unset, it costs one look-up per process.
fn fsync_delay() -> Option<Duration> {
    static DELAY: OnceLock<Option<Duration>> = OnceLock::new();
    *DELAY.get_or_init(|| {
        std::env::var("JUCODE_TEST_FSYNC_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
    })
}

struct Writer {
    dir: PathBuf,
    id: String,
    by: Runner,
    file: Option<std::fs::File>,
    lock: Option<SessionLock>,
    /// A new session's entries before its file is created (with the first user message).
    waiting: Vec<Arc<Entry>>,
    /// Whether the file is to be created (a new session that has not said anything yet
    /// has none), and whether its first user message came (from then on every entry is
    /// queued to be written, whether the file could be created yet or not).
    create: bool,
    started: bool,
    /// Lines not yet written, in order.
    pending: Vec<u8>,
    /// Bytes of the file that are whole lines: what a failed write left after them is
    /// cut off before the next attempt.
    written: u64,
    /// Bytes of the file known to be on the disk (the last `fsync` that succeeded) and
    /// the lines written since, kept to be written again if an `fsync` fails.
    synced: u64,
    unsynced: Vec<u8>,
    /// The `fsync` running, and whether another was asked for meanwhile.
    syncing: Option<Syncing>,
    sync_wanted: bool,
    /// The failure being reported, while writing does not work.
    failing: Option<String>,
    /// Whether that failure was an `fsync`'s: then lines written again are not yet
    /// saved, and only an `fsync` that succeeds ends it (a disk that takes writes but
    /// cannot make them durable is not told "saved again" at every write).
    sync_failed: bool,
    reports: Arc<Mutex<Reports>>,
}

impl Writer {
    fn new(target: Target, reports: Arc<Mutex<Reports>>) -> Self {
        let (dir, id, by, file, lock, create) = match target {
            Target::New { dir, id, by } => (dir, id, by, None, None, true),
            Target::Existing {
                path,
                file,
                lock,
                by,
            } => {
                let dir = path.parent().map(PathBuf::from).unwrap_or_default();
                let id = path
                    .file_stem()
                    .map(|stem| stem.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (dir, id, by, Some(file), Some(lock), false)
            }
        };
        let written = file
            .as_ref()
            .and_then(|file| file.metadata().ok())
            .map_or(0, |meta| meta.len());
        Self {
            dir,
            id,
            by,
            file,
            lock,
            waiting: Vec::new(),
            create,
            started: false,
            pending: Vec::new(),
            written,
            synced: written,
            unsynced: Vec::new(),
            syncing: None,
            sync_wanted: false,
            failing: None,
            sync_failed: false,
            reports,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.join(format!("{}.jsonl", self.id))
    }

    fn queue(&mut self, entry: Arc<Entry>) {
        if self.create && !self.started {
            let starts = entry.starts_turn();
            self.waiting.push(entry);
            if starts {
                self.started = true;
                for waiting in std::mem::take(&mut self.waiting) {
                    self.pending.extend(format::encode(&waiting));
                }
            }
        } else {
            self.pending.extend(format::encode(&entry));
        }
    }

    /// Writes what is pending (creating the file first when it is time), and with `sync`
    /// checks the file is still where it belongs and makes it durable. A failure is kept
    /// for the session and the lines stay queued for the next attempt.
    async fn flush(&mut self, sync: bool) {
        if self.file.is_none() {
            if !self.create || self.pending.is_empty() {
                return;
            }
            if let Err(message) = self.create_file().await {
                return self.fail(message);
            }
        }
        if sync && let Err(message) = self.check_place().await {
            return self.fail(message);
        }
        if let Err(message) = self.write_pending().await {
            return self.fail(message);
        }
        if sync {
            self.start_sync();
        } else if self.failing.is_some() && self.syncing.is_none() && !self.sync_failed {
            self.recovered();
        }
    }

    /// Runs `work` on the file on the blocking pool (the file travels with it).
    async fn with_file<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut std::fs::File) -> T + Send + 'static,
    ) -> Option<T> {
        let mut file = self.file.take()?;
        let done = tokio::task::spawn_blocking(move || {
            let result = work(&mut file);
            (file, result)
        })
        .await;
        match done {
            Ok((file, result)) => {
                self.file = Some(file);
                Some(result)
            }
            Err(err) => {
                tracing::error!(%err, "the session file's writer failed");
                None
            }
        }
    }

    async fn create_file(&mut self) -> Result<(), String> {
        let (dir, id, by) = (self.dir.clone(), self.id.clone(), self.by);
        let created = tokio::task::spawn_blocking(move || {
            // The lock refuses a linked folder or file in the session's place; the file
            // is opened without following one all the same (`create_new` never does).
            let lock = files::lock(&dir, &id, by)?;
            let path = dir.join(format!("{id}.jsonl"));
            let file = crate::config::private::own_file_options()
                .create_new(true)
                .read(true)
                .append(true)
                .open(&path)
                .map_err(|err| crate::config::private::open_error("cannot create", &path, &err))?;
            Ok::<_, String>((file, lock))
        })
        .await
        .unwrap_or_else(|err| Err(format!("internal error: {err}")))?;
        self.file = Some(created.0);
        self.lock = Some(created.1);
        Ok(())
    }

    async fn write_pending(&mut self) -> Result<(), String> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.pending);
        let keep = self.written;
        let done = self
            .with_file(move |file| {
                use std::io::{Seek, Write};
                let result = (|| {
                    // A failed attempt may have left part of a line: cut it off.
                    if file.metadata()?.len() != keep {
                        file.set_len(keep)?;
                        file.seek(std::io::SeekFrom::End(0))?;
                    }
                    file.write_all(&bytes)
                })();
                (bytes, result)
            })
            .await;
        let Some((bytes, result)) = done else {
            return Err("internal error writing the session file".into());
        };
        match result {
            Ok(()) => {
                self.written += bytes.len() as u64;
                self.unsynced.extend_from_slice(&bytes);
                Ok(())
            }
            Err(err) => {
                self.pending = [bytes, std::mem::take(&mut self.pending)].concat();
                Err(format!("cannot write {}: {err}", self.path().display()))
            }
        }
    }

    /// Starts an `fsync` on the blocking pool, on a handle of its own, so that writing
    /// goes on meanwhile (a slow disk delays durability, never the session); one at a
    /// time, and one more when asked for while it runs.
    fn start_sync(&mut self) {
        if self.syncing.is_some() {
            self.sync_wanted = true;
            return;
        }
        self.sync_wanted = false;
        let Some(file) = self.file.as_ref().and_then(|file| file.try_clone().ok()) else {
            return;
        };
        let (upto, count) = (self.written, self.unsynced.len());
        self.syncing = Some(tokio::task::spawn_blocking(move || {
            if let Some(delay) = fsync_delay() {
                std::thread::sleep(delay);
            }
            (upto, count, file.sync_data())
        }));
    }

    /// Waits for the running `fsync` (and any asked for meanwhile) and takes its result.
    async fn settle(&mut self) {
        while self.syncing.is_some() {
            let synced = sync_done(&mut self.syncing).await;
            self.synced(synced).await;
        }
    }

    /// An `fsync` ended: what it covered is on the disk, or, when it failed, written
    /// again (the kernel may have dropped the pages it could not write).
    async fn synced(&mut self, done: Option<(u64, usize, std::io::Result<()>)>) {
        match done {
            Some((upto, count, Ok(()))) => {
                self.sync_failed = false;
                self.synced = upto;
                self.unsynced.drain(..count.min(self.unsynced.len()));
                if self.failing.is_some() && self.pending.is_empty() {
                    self.recovered();
                }
            }
            Some((_, _, Err(err))) => {
                self.sync_failed = true;
                let lost = std::mem::take(&mut self.unsynced);
                self.pending = [lost, std::mem::take(&mut self.pending)].concat();
                self.written = self.synced;
                self.fail(format!("cannot save {}: {err}", self.path().display()));
                return;
            }
            None => {}
        }
        if self.sync_wanted {
            self.flush(true).await;
        }
    }

    /// The file this writer holds must be the one at its path: a file (or directory)
    /// removed while the session runs is written anew there, whole, from the open one.
    async fn check_place(&mut self) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path();
        let here = self
            .with_file(|file| file.metadata().map(|meta| (meta.dev(), meta.ino())))
            .await;
        let there = std::fs::symlink_metadata(&path).map(|meta| (meta.dev(), meta.ino()));
        match (here, there) {
            (Some(Ok(here)), Ok(there)) if here == there => return Ok(()),
            (Some(Ok(_)), Err(err)) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("cannot check {}: {err}", path.display()));
            }
            _ => {}
        }
        if self.failing.is_none() {
            // Said at once: the copy below may take a while, or fail.
            self.report(format!(
                "the session file {} was removed while the session ran: jucode writes it again",
                path.display()
            ));
        }
        let (dir, id, by, written) = (self.dir.clone(), self.id.clone(), self.by, self.written);
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        let done = tokio::task::spawn_blocking(move || {
            let result = rewrite(&file, &dir, &id, by, written);
            (file, result)
        })
        .await;
        match done {
            Ok((_, Ok((file, lock)))) => {
                // The new file holds everything written, none of it synced yet.
                self.file = Some(file);
                self.lock = Some(lock);
                self.synced = 0;
                Ok(())
            }
            Ok((file, Err(message))) => {
                self.file = Some(file);
                Err(message)
            }
            Err(err) => Err(format!("internal error writing the session file: {err}")),
        }
    }

    /// The first failure of a spell is reported (through the session), then the writer
    /// keeps trying, quietly.
    fn fail(&mut self, message: String) {
        if self.failing.is_none() {
            tracing::error!("{message}");
            self.report(format!(
                "{message}: the session goes on in memory and jucode keeps trying to save it"
            ));
            self.failing = Some(message);
        }
    }

    fn report(&self, message: String) {
        let mut reports = self
            .reports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        reports.error = Some(message);
        reports.recovered = None;
    }

    fn recovered(&mut self) {
        if self.failing.take().is_some() {
            let message = format!("the session is saved again in {}", self.path().display());
            tracing::info!("{message}");
            self.reports
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .recovered = Some(message);
        }
    }
}

/// Writes the first `len` bytes of `old` (a file no longer at its path) to the session's
/// path again, locked anew, through a temporary file renamed into place (so the path
/// never holds part of it). The lock refuses a folder that became a symbolic link
/// meanwhile, and a link put in the file's place is not written through.
fn rewrite(
    old: &std::fs::File,
    dir: &std::path::Path,
    id: &str,
    by: Runner,
    len: u64,
) -> Result<(std::fs::File, SessionLock), String> {
    use std::io::{Read, Seek, Write};
    let lock = files::lock(dir, id, by)?;
    let path = dir.join(format!("{id}.jsonl"));
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(format!(
            "{} was replaced by another file while the session ran: not overwriting it",
            path.display()
        ));
    }
    let temporary = dir.join(format!(".{id}.jsonl.tmp"));
    let copy = || -> std::io::Result<std::fs::File> {
        let mut source = old.try_clone()?;
        source.seek(std::io::SeekFrom::Start(0))?;
        let _ = std::fs::remove_file(&temporary);
        let mut new = crate::config::private::own_file_options()
            .create_new(true)
            .read(true)
            .append(true)
            .open(&temporary)?;
        std::io::copy(&mut source.take(len), &mut new)?;
        new.flush()?;
        std::fs::rename(&temporary, &path)?;
        Ok(new)
    };
    match copy() {
        Ok(file) => Ok((file, lock)),
        Err(err) => {
            let _ = std::fs::remove_file(&temporary);
            Err(format!("cannot write {} again: {err}", path.display()))
        }
    }
}
