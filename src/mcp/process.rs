//! A stdio server's process: started in its own process group (so a server that is a
//! wrapper, `npx` starting `node` say, is stopped as a whole), its stderr kept as a
//! short tail for error messages, and killed when it is no longer wanted, or by the
//! reaper (`crate::reaper`) when jucode dies first. Hosted agents are started here too.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

/// Lines of stderr kept for error messages, and the longest line kept whole.
const TAIL_LINES: usize = 8;
const TAIL_LINE_BYTES: usize = 512;

pub struct Spawned {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub group: Group,
    pub stderr: StderrTail,
}

/// Starts `command` with exactly `env`, in `cwd`, in a new process group.
pub fn spawn(
    command: &str,
    args: &[String],
    env: &HashMap<String, String>,
    cwd: &Path,
) -> Result<Spawned, String> {
    let mut builder = Command::new(command);
    builder
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A process group of its own, registered with the reaper.
    let (mut child, watch) = crate::reaper::spawn(&mut builder)
        .map_err(|err| format!("cannot start `{command}` in {}: {err}", cwd.display()))?;
    let group = Group {
        pgid: child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw),
        live: Arc::new(AtomicBool::new(true)),
        watch: Some(Arc::new(watch)),
    };
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(format!("cannot talk to `{command}`: its pipes are missing"));
    };
    let tail = StderrTail::default();
    tokio::spawn(read_stderr(stderr, tail.clone(), command.to_owned()));
    Ok(Spawned {
        child,
        stdin,
        stdout,
        group,
        stderr: tail,
    })
}

/// The process group of one server. Dropping it kills whatever is left of the group.
pub struct Group {
    pgid: Option<Pid>,
    /// False once the leader was reaped and the group signalled a last time: from then
    /// on its id may belong to someone else, so it is never signalled again.
    live: Arc<AtomicBool>,
    /// The group's registration with the reaper, which kills it if jucode dies first;
    /// released when the group is killed a last time (reaped, or dropped).
    watch: Option<Arc<crate::reaper::Watch>>,
}

impl Group {
    pub fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid
            && self.live.load(Ordering::SeqCst)
        {
            let _ = killpg(pgid, signal);
        }
    }

    /// A handle for whoever reaps the leader (see [`Reaped::reaped`]).
    pub fn reaper(&self) -> Reaped {
        Reaped {
            pgid: self.pgid,
            live: self.live.clone(),
            watch: self.watch.clone(),
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
        if let Some(watch) = &self.watch {
            watch.release();
        }
    }
}

pub struct Reaped {
    pgid: Option<Pid>,
    live: Arc<AtomicBool>,
    watch: Option<Arc<crate::reaper::Watch>>,
}

impl Reaped {
    /// The leader has exited and was reaped: whatever it left in its group goes too,
    /// now, while the group id is still known to be ours.
    pub fn reaped(&self) {
        if let Some(pgid) = self.pgid
            && self.live.swap(false, Ordering::SeqCst)
        {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        if let Some(watch) = &self.watch {
            watch.release();
        }
    }
}

/// The last lines a server wrote to stderr, and whether all of it was read.
#[derive(Clone)]
pub struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    eof: watch::Receiver<bool>,
    eof_tx: Arc<watch::Sender<bool>>,
}

impl Default for StderrTail {
    fn default() -> Self {
        let (eof_tx, eof) = watch::channel(false);
        Self {
            lines: Arc::default(),
            eof,
            eof_tx: Arc::new(eof_tx),
        }
    }
}

impl StderrTail {
    fn push(&self, line: &str) {
        let line = line.trim_end();
        if line.is_empty() {
            return;
        }
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line.to_owned());
    }

    /// The server exited: waits (up to `bound`) until what it wrote last was read, so a
    /// crash's last words make it into the reason. A grandchild holding the pipe open
    /// only costs the bound.
    pub async fn drained(&self, bound: Duration) {
        let mut eof = self.eof.clone();
        let _ = tokio::time::timeout(bound, eof.wait_for(|done| *done)).await;
    }

    /// `"; its stderr ends: <line> | <line>"`, or nothing when the server wrote nothing.
    pub fn suffix(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.is_empty() {
            return String::new();
        }
        let joined: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("; its stderr ends: {}", joined.join(" | "))
    }
}

/// Keeps reading stderr so the server never blocks on a full pipe; lines go to the log
/// and the tail. A line longer than [`TAIL_LINE_BYTES`] is kept cut.
async fn read_stderr(mut stderr: tokio::process::ChildStderr, tail: StderrTail, name: String) {
    let mut buf = vec![0; 4096];
    let mut line: Vec<u8> = Vec::new();
    loop {
        let read = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        for &byte in &buf[..read] {
            if byte == b'\n' {
                let text = String::from_utf8_lossy(&line);
                tracing::debug!(server = %name, "stderr: {text}");
                tail.push(&text);
                line.clear();
            } else if line.len() < TAIL_LINE_BYTES {
                line.push(byte);
            }
        }
    }
    if !line.is_empty() {
        tail.push(&String::from_utf8_lossy(&line));
    }
    tail.eof_tx.send_replace(true);
}
