//! What both benchmarks need: a temporary profile, `jucode serve` driven over pipes, and
//! percentiles. Included with `#[path]` (bench targets share no library).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const BIN: &str = env!("CARGO_BIN_EXE_jucode");

/// A temporary `JUCODE_HOME`; a daemon started in it is stopped on drop.
pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Home {
        Home {
            dir: tempfile::tempdir().expect("temp home"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.path().join("daemon.sock")
    }

    /// `jucode <args>` in this home, with a clean environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.path())
            .env("JUCODE_HOME", self.path())
            .current_dir(self.path());
        command
    }

    /// Runs `jucode <args>` to completion; its stdout as JSON.
    pub fn jucode(&self, args: &[&str]) -> Value {
        let output = self.command(args).output().expect("run jucode");
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(self.path().join("config.toml"), text).expect("config");
    }

    /// A replay model whose replies are each `deltas` one-character deltas.
    pub fn long_replies(&self, deltas: usize, replies: usize) {
        let line = json!({"text": "x".repeat(deltas), "chunk": 1}).to_string();
        let script: String = (0..replies).map(|_| format!("{line}\n")).collect();
        std::fs::write(self.path().join("long.jsonl"), script).expect("script");
        self.write_config(
            "model = \"bench/long\"\n[providers.bench]\nkind = \"replay\"\nscript = \"long.jsonl\"\n",
        );
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = self.command(&["daemon", "stop"]).output();
    }
}

/// `jucode serve` (through the daemon, or `--in-process`) over pipes.
pub struct Serve {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Serve {
    /// Spawns it; also returns the instant just before the spawn.
    pub fn start(home: &Home, in_process: bool) -> (Serve, Instant) {
        let args: &[&str] = if in_process {
            &["serve", "--in-process"]
        } else {
            &["serve"]
        };
        Serve::start_with(home, args)
    }

    /// Spawns `jucode <args>`; also returns the instant just before the spawn.
    pub fn start_with(home: &Home, args: &[&str]) -> (Serve, Instant) {
        let started = Instant::now();
        let mut child = home
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn jucode");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().expect("stdout"));
        (
            Serve {
                child,
                stdin,
                stdout,
                line: String::new(),
            },
            started,
        )
    }

    pub fn read_line(&mut self) -> &str {
        self.line.clear();
        let n = self.stdout.read_line(&mut self.line).expect("read stdout");
        assert!(n > 0, "jucode closed stdout");
        &self.line
    }

    /// Reads until a line containing `needle`; returns how many lines contained `count`.
    pub fn until_counting(&mut self, needle: &str, count: &str) -> usize {
        let mut seen = 0;
        loop {
            let line = self.read_line();
            if !count.is_empty() && line.contains(count) {
                seen += 1;
            }
            if line.contains(needle) {
                return seen;
            }
        }
    }

    pub fn until(&mut self, needle: &str) {
        self.until_counting(needle, "");
    }

    pub fn send(&mut self, op: &Value) {
        writeln!(self.stdin, "{op}").expect("write op");
        self.stdin.flush().expect("flush");
    }

    pub fn peak_rss_kib(&self) -> u64 {
        proc_status_kib(u64::from(self.child.id()), "VmHWM:")
    }

    pub fn quit(mut self) {
        self.send(&json!({"op": "shutdown"}));
        let _ = self.child.wait();
    }
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`), 0 when unreadable.
pub fn proc_status_kib(pid: u64, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time `pid` has used so far, all its threads: the sum of each task's time on a CPU
/// (`/proc/<pid>/task/*/schedstat`, nanoseconds, unlike the ticks of `stat`).
pub fn process_cpu(pid: u64) -> Duration {
    let mut total = 0u64;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let schedstat =
                std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            total += schedstat
                .split_whitespace()
                .next()
                .and_then(|ns| ns.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(total)
}

pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
