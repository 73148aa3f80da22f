//! The daemon benchmark: the shim against in-process serve side by side, `hello` from a
//! warm daemon, daemon memory per idle session, and one session streaming to 1 vs 100
//! attached clients. Run with `cargo bench --bench daemon`; figures go to
//! `docs/performance.md`. A measuring tool: it asserts nothing about timings.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_jucode");

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().expect("temp home"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn socket(&self) -> PathBuf {
        self.path().join("daemon.sock")
    }

    fn command(&self, args: &[&str]) -> Command {
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

    fn jucode(&self, args: &[&str]) -> Value {
        let output = self.command(args).output().expect("run jucode");
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
    }

    /// A replay model whose every reply is `deltas` one-character deltas.
    fn long_replies(&self, deltas: usize, replies: usize) {
        let line = json!({"text": "x".repeat(deltas), "chunk": 1}).to_string();
        let script: String = (0..replies).map(|_| format!("{line}\n")).collect();
        std::fs::write(self.path().join("long.jsonl"), script).expect("script");
        std::fs::write(
            self.path().join("config.toml"),
            "model = \"bench/long\"\n[providers.bench]\nkind = \"replay\"\nscript = \"long.jsonl\"\n",
        )
        .expect("config");
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = self.command(&["daemon", "stop"]).output();
    }
}

struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl Serve {
    fn start(home: &Home, in_process: bool) -> (Serve, Instant) {
        let args: &[&str] = if in_process {
            &["serve", "--in-process"]
        } else {
            &["serve"]
        };
        let started = Instant::now();
        let mut child = home
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn");
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

    fn read_line(&mut self) -> &str {
        self.line.clear();
        let n = self.stdout.read_line(&mut self.line).expect("read");
        assert!(n > 0, "closed");
        &self.line
    }

    fn until(&mut self, needle: &str) {
        while !self.read_line().contains(needle) {}
    }

    fn send(&mut self, op: &Value) {
        writeln!(self.stdin, "{op}").expect("write");
        self.stdin.flush().expect("flush");
    }

    fn quit(mut self) {
        self.send(&json!({"op": "shutdown"}));
        let _ = self.child.wait();
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Round trip of a small op (`agent_runs` → its event), and streaming throughput.
fn side_by_side() {
    println!("shim vs in-process (same machine, same build):");
    let mut rows = Vec::new();
    for in_process in [true, false] {
        let home = Home::new();
        home.long_replies(100_000, 3);
        let (mut serve, _) = Serve::start(&home, in_process);
        serve.until("\"mcp_servers\"");
        let op = json!({"op": "agent_runs"});
        let mut samples = Vec::new();
        for _ in 0..2000 {
            let sent = Instant::now();
            serve.send(&op);
            serve.until("\"agent_runs\"");
            samples.push(sent.elapsed());
        }
        let mut rates = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            serve.send(&json!({"op": "user_message", "content": "go"}));
            serve.until("\"ready\"");
            rates.push(100_000.0 / started.elapsed().as_secs_f64());
        }
        rates.sort_by(f64::total_cmp);
        let p50 = percentile(&mut samples, 0.5);
        let p95 = percentile(&mut samples, 0.95);
        rows.push((p50, rates[1]));
        println!(
            "  {:<11} op round trip p50 {:>6.1} µs  p95 {:>6.1} µs   streaming {:>9.0} deltas/s (median of 3 × 100k)",
            if in_process { "in-process" } else { "shim" },
            us(p50),
            us(p95),
            rates[1]
        );
        serve.quit();
    }
    println!(
        "  the shim adds {:.1} µs per round trip at p50 (two line hops), streams at {:.0} % of in-process",
        us(rows[1].0) - us(rows[0].0),
        rows[1].1 / rows[0].1 * 100.0
    );
}

fn warm_hello() {
    let home = Home::new();
    home.jucode(&["daemon", "start"]);
    let mut samples = Vec::new();
    for _ in 0..30 {
        let (mut serve, started) = Serve::start(&home, false);
        let hello = serve.read_line().to_owned();
        samples.push(started.elapsed());
        assert!(hello.contains("hello"));
        serve.until("\"mcp_servers\"");
        serve.quit();
    }
    println!(
        "start → hello with a warm daemon: p50 {:.2} ms, p95 {:.2} ms (30 starts)",
        us(percentile(&mut samples, 0.5)) / 1000.0,
        us(percentile(&mut samples, 0.95)) / 1000.0
    );
}

fn rss_kib(pid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

struct Raw {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
    line: String,
}

impl Raw {
    fn connect(home: &Home) -> Raw {
        let stream = UnixStream::connect(home.socket()).expect("connect");
        let reader = BufReader::with_capacity(1 << 20, stream.try_clone().expect("clone"));
        let mut raw = Raw {
            stream,
            reader,
            line: String::new(),
        };
        raw.until("\"hello\"");
        raw
    }

    fn send(&mut self, op: &Value) {
        writeln!(self.stream, "{op}").expect("write");
    }

    /// Reads raw bytes until the stream ends with `marker` (the turn's last line):
    /// only the tail is examined, so the reader costs little more than `read` itself.
    fn until_bytes(mut self, marker: &[u8]) -> Instant {
        use std::io::Read;
        let mut buf = vec![0u8; 1 << 20];
        let mut tail: Vec<u8> = self.reader.buffer().to_vec();
        loop {
            let window = &tail[tail.len().saturating_sub(marker.len() + 64)..];
            if window.windows(marker.len()).any(|w| w == marker) {
                return Instant::now();
            }
            let n = self.reader.get_mut().read(&mut buf).expect("read");
            assert!(n > 0, "closed");
            let keep = tail.len().min(marker.len() + 64);
            tail.drain(..tail.len() - keep);
            tail.extend_from_slice(&buf[..n]);
        }
    }

    fn until(&mut self, needle: &str) {
        loop {
            self.line.clear();
            let n = self.reader.read_line(&mut self.line).expect("read");
            assert!(n > 0, "closed");
            if self.line.contains(needle) {
                return;
            }
        }
    }
}

fn idle_sessions() {
    let home = Home::new();
    home.jucode(&["daemon", "start"]);
    let pid = home.jucode(&["daemon", "status"])["pid"]
        .as_u64()
        .expect("pid");
    let mut raw = Raw::connect(&home);
    // Warm up one session so one-time costs (tokenizer, runtime threads) are excluded.
    raw.send(&json!({"op": "open", "cwd": home.path(), "env": {}}));
    raw.until("\"mcp_servers\"");
    let before = rss_kib(pid);
    let sessions = 1000;
    for _ in 0..sessions {
        raw.send(&json!({"op": "open", "cwd": home.path(), "env": {"PATH": "/usr/bin"}}));
        raw.until("\"mcp_servers\"");
    }
    let after = rss_kib(pid);
    println!(
        "daemon memory: {} KiB before, {} KiB with {} more idle sessions: {:.1} KiB per session",
        before,
        after,
        sessions,
        (after.saturating_sub(before)) as f64 / sessions as f64
    );
}

fn fan_out() {
    let deltas = 100_000;
    let mut times = Vec::new();
    for clients in [1usize, 100] {
        let home = Home::new();
        home.long_replies(deltas, 1);
        home.jucode(&["daemon", "start"]);
        let mut driver = Raw::connect(&home);
        driver.send(&json!({"op": "open", "cwd": home.path(), "env": {}}));
        driver.line.clear();
        let mut session = String::new();
        while session.is_empty() {
            driver.line.clear();
            driver.reader.read_line(&mut driver.line).expect("read");
            let value: Value = serde_json::from_str(&driver.line).unwrap_or(Value::Null);
            if value["type"] == "startup" {
                session = value["session_id"].as_str().unwrap_or_default().to_owned();
            }
        }
        driver.until("\"mcp_servers\"");
        let mut readers = Vec::new();
        for _ in 1..clients {
            let mut raw = Raw::connect(&home);
            raw.send(&json!({"op": "attach", "session": session}));
            raw.until("\"status\"");
            readers.push(raw);
        }
        let started = Instant::now();
        // Readers scan raw bytes for the end marker: parsing 100 × 100k lines in the
        // bench itself would measure the bench, not the daemon.
        let handles: Vec<_> = readers
            .into_iter()
            .map(|raw| std::thread::spawn(move || raw.until_bytes(b"\"message\":\"ready\"")))
            .collect();
        driver.send(&json!({"op": "user_message", "content": "go"}));
        driver.until("\"ready\"");
        let mut last = Instant::now();
        for handle in handles {
            last = last.max(handle.join().expect("reader"));
        }
        let elapsed = last - started;
        println!(
            "one session, {deltas} deltas to {clients:>3} client(s): {:>7.1} ms until the last client has everything",
            elapsed.as_secs_f64() * 1e3
        );
        times.push(elapsed);
    }
    println!(
        "  100 clients cost {:.2}x one client",
        times[1].as_secs_f64() / times[0].as_secs_f64()
    );
}

fn main() {
    println!("jucode daemon benchmark ({BIN})");
    side_by_side();
    warm_hello();
    idle_sessions();
    fan_out();
}
