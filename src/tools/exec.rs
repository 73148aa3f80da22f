//! Running one shell command for the `bash` tool: streaming its output, keeping the end
//! of it, and stopping it, its children and their children on timeout or interrupt.
//!
//! Why it works this way:
//! - The command gets its own process group, so one `killpg` reaches everything it
//!   started (pipelines, subshells, `cmd &`), not only the shell we spawned.
//! - On timeout, and when `job.cancel` fires while the run is still awaited, stopping is
//!   SIGTERM to the group, up to [`GRACE`] for cleanup, then SIGKILL to whatever is left
//!   of the group. The grace ends early once the shell has exited and the group is empty.
//! - A session interrupt does not get that grace: the engine stops awaiting the call as
//!   soon as the turn is cancelled (it drops the tool's future, see `engine/turn/calls.rs`),
//!   before this code can see `job.cancel`, so the drop guard below sends SIGKILL to the
//!   group at once. No SIGTERM is sent and no `trap` handler runs.
//! - stdout and stderr are read by two tasks that push into one shared tail in arrival
//!   order. Reading stops once the shell has exited (or been killed) and the pipes stayed
//!   open a moment longer: a background or escaped process may hold them for hours, and
//!   waiting for their EOF is the classic way a tool call hangs.
//! - Memory stays bounded: only the last [`KEEP_BYTES`] (×2 before compaction) of output
//!   are kept; progress has its own cap in [`Progress`].
//! - Output is decoded as UTF-8 per pipe with a carry for sequences split across reads;
//!   invalid bytes become U+FFFD.
//! - If the tool future is dropped mid-run (an interrupt, or the engine giving up on
//!   it), a guard sends SIGKILL to the group at once, with no SIGTERM and no grace (a
//!   destructor cannot wait), so nothing outlives the turn by accident. Processes that
//!   the command put in the background and that outlive a normal exit are left alone.
//! - If jucode itself dies while the command runs (`kill -9` included), no destructor
//!   runs: the group is registered with the reaper (`crate::reaper`) by the shell itself
//!   before `exec` until the guard lets it go, and the reaper kills it.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::engine::Progress;

/// Output kept for the result: its end.
pub(super) const KEEP_BYTES: usize = 30 * 1024;
/// Time between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(1);
/// How long the pipes are still read after the shell exited on its own.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);
/// How long the pipes are still read after the group was killed.
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(200);
/// Shells tried in order; the absolute paths cover an environment without `PATH`.
const SHELLS: [&str; 5] = ["bash", "/bin/bash", "/usr/bin/bash", "sh", "/bin/sh"];

/// What to run and how.
pub(super) struct Job<'a> {
    pub command: &'a str,
    pub cwd: &'a Path,
    pub env: &'a HashMap<String, String>,
    pub timeout: Duration,
    pub cancel: &'a CancellationToken,
    pub progress: &'a Progress,
    /// The sandbox the command runs in, applied in the child before `exec`; `None`
    /// runs it unrestricted.
    pub sandbox: Option<&'a super::sandbox::Prepared>,
}

/// How a command ended.
#[derive(Debug)]
pub(super) enum End {
    Exited(ExitStatus),
    TimedOut,
    Interrupted,
}

#[derive(Debug)]
pub(super) struct Finished {
    pub end: End,
    /// The end of the combined output, with a note in front when earlier output was cut.
    pub output: String,
    /// Reading stopped while some process still held stdout or stderr open.
    pub abandoned_pipes: bool,
}

pub(super) async fn run(job: Job<'_>) -> io::Result<Finished> {
    run_with_shells(job, &SHELLS).await
}

async fn run_with_shells(job: Job<'_>, shells: &[&str]) -> io::Result<Finished> {
    let (mut child, watch) = spawn(&job, shells)?;
    let mut guard = GroupGuard(
        child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(|pid| (Pid::from_raw(pid), watch)),
    );
    let tail = Arc::new(Mutex::new(Tail::default()));
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(tokio::spawn(pump(
            stdout,
            tail.clone(),
            job.progress.clone(),
        )));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(tokio::spawn(pump(
            stderr,
            tail.clone(),
            job.progress.clone(),
        )));
    }

    let end = tokio::select! {
        status = child.wait() => End::Exited(status?),
        () = tokio::time::sleep(job.timeout) => End::TimedOut,
        () = job.cancel.cancelled() => End::Interrupted,
    };
    let drain = if let End::Exited(_) = end {
        guard.0 = None;
        DRAIN_AFTER_EXIT
    } else {
        if let Some((pgid, _)) = &guard.0 {
            terminate(*pgid, &mut child).await;
            guard.0 = None;
        }
        DRAIN_AFTER_KILL
    };

    let all_read = async {
        for reader in &mut readers {
            let _ = reader.await;
        }
    };
    let abandoned_pipes = tokio::time::timeout(drain, all_read).await.is_err();
    for reader in &readers {
        reader.abort();
    }
    let output = std::mem::take(&mut *tail.lock().unwrap_or_else(PoisonError::into_inner)).finish();
    Ok(Finished {
        end,
        output,
        abandoned_pipes,
    })
}

/// The shell, in a process group of its own registered with the reaper (see
/// `crate::reaper::spawn`).
fn spawn(job: &Job<'_>, shells: &[&str]) -> io::Result<(Child, crate::reaper::Watch)> {
    let mut last_error = io::Error::new(io::ErrorKind::NotFound, "no shell found");
    for shell in shells {
        let mut command = Command::new(shell);
        if let Some(sandbox) = job.sandbox {
            sandbox.apply(&mut command);
        }
        command
            .arg("-c")
            .arg(job.command)
            .current_dir(job.cwd)
            .env_clear()
            .envs(job.env.iter())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match crate::reaper::spawn(&mut command) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => last_error = err,
            other => return other,
        }
    }
    Err(last_error)
}

/// SIGTERM to the group, up to [`GRACE`] for the shell to exit and the group to empty,
/// then SIGKILL to what is left. Reaps the shell, waiting up to another [`GRACE`] for it
/// after the SIGKILL if it had not exited.
async fn terminate(pgid: Pid, child: &mut Child) {
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + GRACE;
    let exited = tokio::time::timeout_at(deadline, child.wait())
        .await
        .is_ok();
    // While the shell is unreaped its pid cannot be reused, so signalling the group is
    // safe. Once it is reaped, the group id stays reserved only while a member lives:
    // stop signalling as soon as the group is seen empty.
    let mut alive = true;
    if exited {
        loop {
            alive = killpg(pgid, None).is_ok();
            if !alive || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if alive {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    if !exited {
        let _ = child.start_kill();
        let _ = tokio::time::timeout(GRACE, child.wait()).await;
    }
}

/// Sends SIGKILL to the group (no SIGTERM, no grace) when the run is abandoned before the
/// shell was reaped or the group was stopped. While it is armed the group is registered
/// with the reaper, which kills it if jucode dies first; disarmed (`None`), it is
/// released.
struct GroupGuard(Option<(Pid, crate::reaper::Watch)>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some((pgid, _watch)) = self.0.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

async fn pump(mut pipe: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>, progress: Progress) {
    let mut buf = vec![0; 16 * 1024];
    let mut decoder = Utf8Decoder::default();
    let emit = |text: &str| {
        if text.is_empty() {
            return;
        }
        // One lock for both, so the result and the progress agree on the order.
        let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
        tail.push(text);
        progress.push(text);
    };
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(read) => emit(&decoder.decode(&buf[..read])),
        }
    }
    emit(&decoder.finish());
}

/// The end of a stream of text, and how much was dropped before it.
#[derive(Default)]
pub(super) struct Tail {
    text: String,
    cut: usize,
}

impl Tail {
    pub fn push(&mut self, text: &str) {
        self.text.push_str(text);
        if self.text.len() > 2 * KEEP_BYTES {
            self.keep_last(KEEP_BYTES);
        }
    }

    fn keep_last(&mut self, keep: usize) {
        let Some(mut at) = self.text.len().checked_sub(keep) else {
            return;
        };
        while !self.text.is_char_boundary(at) {
            at += 1;
        }
        self.cut += at;
        self.text.drain(..at);
    }

    /// The kept text; when something was cut, it starts at a line start if one is near
    /// and is preceded by a note saying how much is missing.
    pub fn finish(mut self) -> String {
        if self.text.len() > KEEP_BYTES {
            self.keep_last(KEEP_BYTES);
        }
        if self.cut == 0 {
            return self.text;
        }
        let window = &self.text.as_bytes()[..self.text.len().min(1024)];
        if let Some(newline) = window.iter().position(|&b| b == b'\n') {
            self.cut += newline + 1;
            self.text.drain(..=newline);
        }
        format!(
            "[… {} bytes of earlier output cut …]\n{}",
            self.cut, self.text
        )
    }
}

/// UTF-8 decoding of a byte stream read in arbitrary pieces.
#[derive(Default)]
struct Utf8Decoder {
    pending: Vec<u8>,
}

impl Utf8Decoder {
    fn decode(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0;
        while start < self.pending.len() {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(text) => {
                    out.push_str(text);
                    start = self.pending.len();
                }
                Err(err) => {
                    let valid = start + err.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[start..valid]));
                    match err.error_len() {
                        Some(len) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start = valid + len;
                        }
                        // An incomplete sequence at the end: wait for the rest.
                        None => {
                            start = valid;
                            break;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }

    fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn falls_back_to_the_next_shell() {
        let dir = std::env::temp_dir();
        let env: HashMap<String, String> = std::env::vars().collect();
        let job = Job {
            command: "echo $0",
            cwd: &dir,
            env: &env,
            timeout: Duration::from_secs(10),
            cancel: &CancellationToken::new(),
            progress: &Progress::default(),
            sandbox: None,
        };
        let finished = run_with_shells(job, &["/nonexistent/jucode-shell", "sh"])
            .await
            .unwrap();
        assert!(matches!(finished.end, End::Exited(status) if status.success()));
        assert_eq!(finished.output, "sh\n");
        let job = Job {
            command: "true",
            cwd: &dir,
            env: &env,
            timeout: Duration::from_secs(10),
            cancel: &CancellationToken::new(),
            progress: &Progress::default(),
            sandbox: None,
        };
        let err = run_with_shells(job, &["/nonexistent/jucode-shell"])
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn decoder_carries_split_sequences() {
        let mut decoder = Utf8Decoder::default();
        let bytes = "aé€😀".as_bytes();
        let mut out = String::new();
        for byte in bytes {
            out.push_str(&decoder.decode(&[*byte]));
        }
        assert_eq!(out, "aé€😀");
        assert_eq!(decoder.decode(b"x\xffy"), "x\u{fffd}y");
        assert_eq!(decoder.decode(b"\xe2\x82"), "");
        assert_eq!(decoder.finish(), "\u{fffd}");
    }

    #[test]
    fn tail_keeps_the_end_from_a_line_start() {
        let mut tail = Tail::default();
        let mut total = 0;
        for n in 0..100_000 {
            let line = format!("line {n}\n");
            total += line.len();
            tail.push(&line);
            assert!(tail.text.len() <= 2 * KEEP_BYTES);
        }
        let text = tail.finish();
        let (note, kept) = text.split_once('\n').unwrap();
        assert!(kept.starts_with("line "), "{}", &kept[..20]);
        assert!(kept.ends_with("line 99999\n"));
        assert!(kept.len() <= KEEP_BYTES);
        assert_eq!(
            note,
            format!("[… {} bytes of earlier output cut …]", total - kept.len())
        );

        let mut short = Tail::default();
        short.push("hi\n");
        assert_eq!(short.finish(), "hi\n");
    }
}
