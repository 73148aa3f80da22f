//! The serve benchmark: drives `jucode serve --in-process` as a front-end would and
//! reports start-up latency, message-to-request latency, streaming throughput and peak
//! memory. Run with `cargo bench --bench serve`; figures go to `docs/performance.md`.
//!
//! This is a measuring tool, not a test: it asserts nothing about timings.

#[path = "../tests/common/mock.rs"]
#[allow(dead_code)]
mod mock;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_jucode");

struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    line: String,
}

impl Proc {
    fn spawn(home: &std::path::Path) -> (Proc, Instant) {
        let started = Instant::now();
        let mut child = Command::new(BIN)
            .args(["serve", "--in-process"])
            .env("JUCODE_HOME", home)
            .env("HOME", home)
            .env_remove("OPENAI_API_KEY")
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn jucode");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::with_capacity(1 << 20, child.stdout.take().expect("stdout"));
        (
            Proc {
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
        let n = self.stdout.read_line(&mut self.line).expect("read stdout");
        assert!(n > 0, "jucode closed stdout");
        &self.line
    }

    /// Reads until a line containing `needle`; returns how many lines contained `count`.
    fn until(&mut self, needle: &str, count: &str) -> usize {
        let mut seen = 0;
        loop {
            let line = self.read_line();
            if line.contains(count) {
                seen += 1;
            }
            if line.contains(needle) {
                return seen;
            }
        }
    }

    fn send(&mut self, op: serde_json::Value) {
        writeln!(self.stdin, "{op}").expect("write op");
        self.stdin.flush().expect("flush");
    }

    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn shutdown(mut self) {
        self.send(json!({"op": "shutdown"}));
        let _ = self.child.wait();
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn hello_latency(home: &std::path::Path) {
    let mut samples = Vec::new();
    for _ in 0..40 {
        let (mut proc, started) = Proc::spawn(home);
        let line = proc.read_line().to_owned();
        samples.push(started.elapsed());
        assert!(line.contains("\"hello\""), "{line}");
        proc.until("\"mcp_servers\"", "");
        proc.shutdown();
    }
    println!(
        "start → hello:              p50 {}  p95 {}  (40 process starts)",
        micros(percentile(&mut samples, 0.5)),
        micros(percentile(&mut samples, 0.95))
    );
}

fn message_to_request(home: &std::path::Path) {
    let model = mock::MockModel::start();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"mock/m\"\n[providers.mock]\nkind = \"openai\"\nbase_url = \"{}\"\n",
            model.base_url()
        ),
    )
    .expect("config");
    let (mut proc, _) = Proc::spawn(home);
    proc.until("\"mcp_servers\"", "");
    let turns = 60;
    let mut samples = Vec::new();
    for turn in 0..turns {
        model.push(mock::text_reply(&["ok"]));
        let sent = Instant::now();
        proc.send(json!({"op": "user_message", "content": format!("message {turn}")}));
        let requests = model.wait_requests(turn + 1);
        samples.push(requests[turn].at.duration_since(sent));
        proc.until("\"ready\"", "");
    }
    let first = samples[0];
    let mut warm = samples[1..].to_vec();
    println!(
        "user_message → HTTP request: first {}  then p50 {}  p95 {}  ({turns} turns, loopback mock)",
        micros(first),
        micros(percentile(&mut warm, 0.5)),
        micros(percentile(&mut warm, 0.95))
    );
    proc.shutdown();
    let _ = std::fs::remove_file(home.join("config.toml"));
}

fn streaming(home: &std::path::Path) {
    let deltas = 200_000;
    let reply = json!({"text": "x".repeat(deltas), "chunk": 1, "usage": {"prompt_tokens": 1, "completion_tokens": deltas}});
    std::fs::write(home.join("long.jsonl"), format!("{reply}\n")).expect("script");
    std::fs::write(
        home.join("config.toml"),
        "model = \"bench/long\"\n[providers.bench]\nkind = \"replay\"\nscript = \"long.jsonl\"\n",
    )
    .expect("config");
    let (mut proc, _) = Proc::spawn(home);
    proc.until("\"mcp_servers\"", "");
    let started = Instant::now();
    proc.send(json!({"op": "user_message", "content": "stream"}));
    let seen = proc.until("\"ready\"", "\"assistant_delta\"");
    let elapsed = started.elapsed();
    let rss = proc.peak_rss_kib();
    assert_eq!(seen, deltas);
    println!(
        "streaming:                  {:.0} deltas/s  ({deltas} deltas in {:.1} ms)",
        deltas as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e3
    );
    println!(
        "peak RSS, one session with one {deltas}-delta turn: {:.1} MiB",
        rss as f64 / 1024.0
    );
    proc.shutdown();
    let _ = std::fs::remove_file(home.join("config.toml"));
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing useful.
    let home = tempfile::tempdir().expect("temp home");
    println!("jucode serve --in-process benchmark ({BIN})");
    hello_latency(home.path());
    message_to_request(home.path());
    streaming(home.path());
}
