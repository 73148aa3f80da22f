//! The daemon benchmark: the shim against in-process serve side by side, `hello` from a
//! warm daemon, daemon memory per idle session, and one session streaming to 1 vs 100
//! attached clients. Run with `cargo bench --bench daemon`; figures go to
//! `docs/performance.md`. A measuring tool: it asserts nothing about timings.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{BIN, Home, Serve, micros, percentile, proc_status_kib, process_cpu};

fn us(d: Duration) -> f64 {
    micros(d)
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
    let before = proc_status_kib(pid, "VmRSS:");
    let sessions = 1000;
    for _ in 0..sessions {
        raw.send(&json!({"op": "open", "cwd": home.path(), "env": {"PATH": "/usr/bin"}}));
        raw.until("\"mcp_servers\"");
    }
    let after = proc_status_kib(pid, "VmRSS:");
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
    let mut cpu = Vec::new();
    for clients in [1usize, 10, 100] {
        let home = Home::new();
        home.long_replies(deltas, 1);
        home.jucode(&["daemon", "start"]);
        let pid = home.jucode(&["daemon", "status"])["pid"]
            .as_u64()
            .expect("pid");
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
        let cpu_before = process_cpu(pid);
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
        let spent = process_cpu(pid) - cpu_before;
        println!(
            "one session, {deltas} deltas to {clients:>3} client(s): {:>7.1} ms until the last client has everything; daemon CPU {:>7.1} ms",
            elapsed.as_secs_f64() * 1e3,
            spent.as_secs_f64() * 1e3
        );
        times.push(elapsed);
        cpu.push((clients, spent));
    }
    println!(
        "  100 clients cost {:.2}x one client in time",
        times[2].as_secs_f64() / times[0].as_secs_f64()
    );
    // The marginal cost of a client: the daemon's extra CPU for each client beyond the
    // first, per delta.
    for &(clients, spent) in &cpu[1..] {
        let extra = spent.saturating_sub(cpu[0].1).as_secs_f64() * 1e9;
        println!(
            "  daemon CPU per extra client per delta ({clients} clients): {:.1} ns",
            extra / ((clients - 1) * deltas) as f64
        );
    }
}

fn main() {
    println!("jucode daemon benchmark ({BIN})");
    if std::env::args().any(|arg| arg == "fan_out") {
        fan_out();
        return;
    }
    side_by_side();
    warm_hello();
    idle_sessions();
    fan_out();
}
