//! The scale benchmark: one daemon with 200 open sessions, 50 of them streaming at a
//! model's pace (a delta every 20 ms) and 10 at full speed, each streaming session with
//! 2 socket clients, and a dashboard on the WebSocket attached to all 200. It reports the
//! delay of a delta from the model's socket to each client's read (p50, p99, max), the
//! daemon's CPU per delivered delta and its memory, and checks that no client lost or
//! reordered a line. Run with `cargo bench --bench scale`; figures go to
//! `docs/performance.md`. A measuring tool: it asserts nothing about timings.
//!
//! The model is a loopback server in this process, so the bench's one clock times both
//! ends: every delta's text carries the instant it was written to the socket
//! (`t<ns since start>;`) or, at full speed, its number (`s<n>;`).

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{BIN, Home, proc_status_kib, process_cpu};

const SESSIONS: usize = 200;
const PACED: usize = 50;
/// `JUCODE_BENCH_FAST=0` runs the paced sessions alone, for comparison.
fn fast_sessions() -> usize {
    std::env::var("JUCODE_BENCH_FAST")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}
/// A paced reply: this many deltas, one every `PACE`.
const PACED_DELTAS: usize = 500;
const PACE: Duration = Duration::from_millis(20);
/// A full-speed reply, long enough to stream through the paced ones.
const FAST_DELTAS: usize = 300_000;

fn start() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    start().elapsed().as_nanos() as u64
}

/// The loopback model: Chat Completions, each reply written as it goes.
fn serve_model(listener: TcpListener) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        std::thread::spawn(move || answer(stream));
    }
}

fn answer(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Some(body) = read_request(&mut stream) else {
        return;
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let event = |text: &str| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": text}}]})
        )
    };
    if body.contains("PACED") {
        for _ in 0..PACED_DELTAS {
            std::thread::sleep(PACE);
            let line = event(&format!("t{};", now_ns()));
            if stream.write_all(line.as_bytes()).is_err() {
                return;
            }
        }
    } else {
        load_generator();
        let mut out = String::new();
        for n in 0..FAST_DELTAS {
            out.push_str(&event(&format!("s{n};")));
            if out.len() > 64 * 1024 {
                if stream.write_all(out.as_bytes()).is_err() {
                    return;
                }
                out.clear();
            }
        }
        let _ = stream.write_all(out.as_bytes());
    }
    let end = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let _ = stream.write_all(end.as_bytes());
}

/// The full-speed model writers and readers are the bench's load, not what it measures:
/// at the lowest priority, on a machine of 2 cores they leave the paced deltas' readers
/// and writers the CPU they need, so the delay measured is the daemon's (which runs at
/// its normal priority). `JUCODE_BENCH_FAIR=1` keeps every thread at the same priority.
fn load_generator() {
    if std::env::var_os("JUCODE_BENCH_FAIR").is_some() {
        return;
    }
    // SAFETY: setpriority has no memory effects; on Linux, `who` 0 is the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

/// The request's body, read by its `content-length`.
fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().ok()?;
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    /// Paced deltas' delays, in ns, per kind of client.
    socket_delays: Vec<u64>,
    dashboard_delays: Vec<u64>,
    delivered: u64,
    /// Lines lost or out of order (must stay 0).
    faults: Vec<String>,
}

struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    fn connect(home: &Home) -> Client {
        let stream = UnixStream::connect(home.socket()).expect("connect");
        let reader = BufReader::with_capacity(1 << 16, stream.try_clone().expect("clone"));
        let mut client = Client {
            reader,
            writer: stream,
        };
        client.until(|line| line.contains("\"hello\""));
        client
    }

    fn send(&mut self, op: &Value) {
        writeln!(self.writer, "{op}").expect("write");
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("read");
        assert!(n > 0, "the daemon closed the connection");
        line
    }

    fn until(&mut self, done: impl Fn(&str) -> bool) -> String {
        loop {
            let line = self.line();
            if done(&line) {
                return line;
            }
        }
    }

    /// Opens a session; its id.
    fn open(&mut self, cwd: &std::path::Path) -> String {
        self.send(&json!({"op": "open", "cwd": cwd, "env": {}}));
        let startup = self.until(|line| line.contains("\"type\":\"startup\""));
        let value: Value = serde_json::from_str(&startup).expect("startup");
        let id = value["session_id"].as_str().expect("session_id").to_owned();
        self.until(|line| line.contains("\"mcp_servers\""));
        id
    }
}

/// The numbers after `marker` in `text` (`t123;s4;` ...).
fn numbers(text: &str, marker: char) -> impl Iterator<Item = u64> + '_ {
    text.split(';').filter_map(move |piece| {
        let at = piece.rfind(marker)?;
        piece[at + 1..].parse().ok()
    })
}

/// Reads a paced session's stream until its turn ends, recording each delta's delay.
fn read_paced(mut client: Client, seen: Arc<Mutex<Seen>>) {
    let mut delays = Vec::with_capacity(PACED_DELTAS);
    let mut count = 0;
    loop {
        let line = client.line();
        if line.contains("\"assistant_delta\"") {
            let read = now_ns();
            let value: Value = serde_json::from_str(&line).expect("delta");
            for sent in numbers(value["delta"].as_str().unwrap_or(""), 't') {
                delays.push(read.saturating_sub(sent));
                count += 1;
            }
        } else if line.contains("\"message\":\"ready\"") && count > 0 {
            break;
        }
    }
    let mut seen = seen.lock().unwrap();
    if count != PACED_DELTAS {
        seen.faults.push(format!(
            "a paced client read {count} of {PACED_DELTAS} deltas"
        ));
    }
    seen.delivered += count as u64;
    seen.socket_delays.extend(delays);
}

/// Reads a full-speed session's one turn; its numbers must be 0, 1, 2, ... The line is
/// scanned, not parsed: the bench must cost little next to the daemon.
fn read_fast(mut client: Client, seen: Arc<Mutex<Seen>>) -> Instant {
    load_generator();
    let mut next = 0u64;
    let mut faults = Vec::new();
    loop {
        let line = client.line();
        if line.contains("\"assistant_delta\"") {
            let Some(at) = line.find("\"delta\":\"") else {
                continue;
            };
            let text = &line[at + 9..];
            let text = &text[..text.find('"').unwrap_or(text.len())];
            for n in numbers(text, 's') {
                if n != next && faults.len() < 10 {
                    faults.push(format!(
                        "a fast client read delta {n} after {}",
                        next as i64 - 1
                    ));
                }
                next = n + 1;
            }
        } else if line.contains("\"message\":\"ready\"") && next > 0 {
            break;
        }
    }
    if next != FAST_DELTAS as u64 {
        faults.push(format!("a fast client read {next} of {FAST_DELTAS} deltas"));
    }
    let mut seen = seen.lock().unwrap();
    seen.delivered += next;
    seen.faults.extend(faults);
    Instant::now()
}

/// The dashboard: one WebSocket connection attached to every session, reading until
/// `stop`, timing paced deltas as they arrive.
fn dashboard(
    port: u16,
    sessions: Vec<String>,
    attached: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the WebSocket server");
        let (mut socket, _) = tokio_tungstenite::client_async(format!("ws://127.0.0.1:{port}/"), tcp)
            .await
            .expect("WebSocket handshake");
        for (n, id) in sessions.iter().enumerate() {
            let call = json!({"jsonrpc": "2.0", "id": n, "method": "session/attach",
                "params": {"sessionId": id}});
            socket.send(Message::text(call.to_string())).await.expect("send");
        }
        let mut answered = 0;
        let mut delays = Vec::new();
        let mut delivered = 0u64;
        let mut faults = Vec::new();
        while let Some(message) = tokio::select! {
            message = socket.next() => message,
            () = async { while !stop.load(Ordering::Relaxed) { tokio::time::sleep(Duration::from_millis(50)).await } } => None,
        } {
            let text = match message {
                Ok(Message::Text(text)) => text,
                Ok(Message::Close(frame)) => {
                    faults.push(format!("the server closed the dashboard's connection: {frame:?}"));
                    break;
                }
                Ok(_) => continue,
                Err(err) => {
                    faults.push(format!("the dashboard's connection failed: {err}"));
                    break;
                }
            };
            let read = now_ns();
            // Scanned, not parsed, past the answers: the bench must keep up.
            if answered == sessions.len() {
                if let Some(at) = text.find("\"agent_message_chunk\"") {
                    let rest = &text[at..];
                    if let Some(start) = rest.find("\"text\":\"") {
                        let chunk = &rest[start + 8..];
                        let chunk = &chunk[..chunk.find('"').unwrap_or(chunk.len())];
                        for sent in numbers(chunk, 't') {
                            delays.push(read.saturating_sub(sent));
                        }
                        delivered += chunk.matches(';').count() as u64;
                    }
                }
                continue;
            }
            let value: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
            if value.get("result").is_some() && value.get("id").is_some() {
                answered += 1;
                if answered == sessions.len() {
                    attached.store(true, Ordering::Relaxed);
                }
                continue;
            }
            if let Some(error) = value.get("error") {
                faults.push(format!("the dashboard got {error}"));
                continue;
            }
            let update = &value["params"]["update"];
            if update["sessionUpdate"] == "agent_message_chunk" {
                let chunk = update["content"]["text"].as_str().unwrap_or("");
                for sent in numbers(chunk, 't') {
                    delays.push(read.saturating_sub(sent));
                }
                delivered += chunk.matches(';').count() as u64;
            }
        }
        let mut seen = seen.lock().unwrap();
        seen.dashboard_delays.extend(delays);
        seen.delivered += delivered;
        seen.faults.extend(faults);
    });
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn report(what: &str, delays: &mut [u64]) {
    if delays.is_empty() {
        println!("  {what}: no deltas");
        return;
    }
    delays.sort_unstable();
    let at = |p: f64| delays[((delays.len() - 1) as f64 * p) as usize];
    println!(
        "  {what}: p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} deltas)",
        ms(at(0.5)),
        ms(at(0.99)),
        ms(delays[delays.len() - 1]),
        delays.len()
    );
}

fn many_streaming() {
    start();
    let model = TcpListener::bind("127.0.0.1:0").expect("bind the model");
    let model_url = format!("http://{}/v1", model.local_addr().expect("addr"));
    std::thread::spawn(move || serve_model(model));
    let home = Home::new();
    let port = free_port();
    home.write_config(&format!(
        "model = \"mock/m\"\n[providers.mock]\nkind = \"openai\"\nbase_url = \"{model_url}\"\ncontext_window = 100000000\n\
         [websocket]\nport = {port}\n"
    ));
    home.jucode(&["daemon", "start"]);
    let pid = home.jucode(&["daemon", "status"])["pid"]
        .as_u64()
        .expect("pid");
    let project = tempfile::tempdir().expect("project");
    // 140 idle sessions on one connection, 60 streaming ones on connections of their
    // own, each with a second client attached.
    let mut idle = Client::connect(&home);
    let mut ids = Vec::new();
    let fast_count = fast_sessions();
    for _ in 0..SESSIONS - PACED - fast_count {
        ids.push(idle.open(project.path()));
    }
    let mut pairs = Vec::new();
    for _ in 0..PACED + fast_count {
        let mut driver = Client::connect(&home);
        let id = driver.open(project.path());
        let mut watcher = Client::connect(&home);
        watcher.send(&json!({"op": "attach", "session": id}));
        watcher.until(|line| line.contains("\"status\""));
        ids.push(id);
        pairs.push((driver, watcher));
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let attached = Arc::new(AtomicBool::new(false));
    let watcher_board = {
        let (ids, attached, stop, seen) =
            (ids.clone(), attached.clone(), stop.clone(), seen.clone());
        std::thread::spawn(move || dashboard(port, ids, attached, stop, seen))
    };
    while !attached.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let rss_before = proc_status_kib(pid, "VmRSS:");
    let cpu_before = process_cpu(pid);
    let began = Instant::now();
    let mut paced = Vec::new();
    let mut fast = Vec::new();
    for (n, (mut driver, watcher)) in pairs.into_iter().enumerate() {
        if n < PACED {
            driver.send(&json!({"op": "user_message", "content": "PACED"}));
            for client in [driver, watcher] {
                let seen = seen.clone();
                paced.push(std::thread::spawn(move || read_paced(client, seen)));
            }
        } else {
            driver.send(&json!({"op": "user_message", "content": "FAST"}));
            for client in [driver, watcher] {
                let seen = seen.clone();
                fast.push(std::thread::spawn(move || read_fast(client, seen)));
            }
        }
    }
    for handle in paced {
        handle.join().expect("paced reader");
    }
    let paced_done = began.elapsed();
    let mut fast_done = began;
    for handle in fast {
        fast_done = fast_done.max(handle.join().expect("fast reader"));
    }
    let fast_done = fast_done - began;
    stop.store(true, Ordering::Relaxed);
    let elapsed = began.elapsed();
    let cpu = process_cpu(pid) - cpu_before;
    let rss = proc_status_kib(pid, "VmRSS:");
    let peak = proc_status_kib(pid, "VmHWM:");
    watcher_board.join().expect("dashboard");
    let mut seen = seen.lock().unwrap();
    println!(
        "{SESSIONS} sessions on one daemon: {PACED} paced (a delta every {} ms, {PACED_DELTAS} each) and {fast_count} at full speed (one {FAST_DELTAS}-delta reply each), 2 socket clients each, a WebSocket dashboard on all:",
        PACE.as_millis()
    );
    println!(
        "  paced streams done in {:.2} s, full-speed ones in {:.2} s; all done in {:.2} s",
        paced_done.as_secs_f64(),
        fast_done.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    report(
        "paced delta, model socket → socket client read",
        &mut seen.socket_delays,
    );
    report(
        "paced delta, model socket → dashboard read",
        &mut seen.dashboard_delays,
    );
    println!(
        "  daemon CPU {:.0} ms for {} delivered deltas: {:.0} ns per delivered delta",
        cpu.as_secs_f64() * 1e3,
        seen.delivered,
        cpu.as_secs_f64() * 1e9 / seen.delivered.max(1) as f64
    );
    println!(
        "  daemon RSS {:.1} MiB before streaming, {:.1} MiB after, peak {:.1} MiB",
        rss_before as f64 / 1024.0,
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    if seen.faults.is_empty() {
        println!("  no client lost or reordered a line");
    } else {
        println!("  FAULTS ({}):", seen.faults.len());
        for fault in seen.faults.iter().take(10) {
            println!("    {fault}");
        }
    }
}

fn main() {
    println!("jucode scale benchmark ({BIN})");
    many_streaming();
}
