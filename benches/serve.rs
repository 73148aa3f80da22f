//! The serve benchmark: drives `jucode serve --in-process` as a front-end would and
//! reports start-up latency, message-to-request latency, streaming throughput and peak
//! memory. Run with `cargo bench --bench serve`; figures go to `docs/performance.md`.
//!
//! This is a measuring tool, not a test: it asserts nothing about timings.

#[path = "../tests/common/mock.rs"]
#[allow(dead_code)]
mod mock;
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{BIN, Home, Serve, micros, percentile};

fn us(d: Duration) -> String {
    format!("{:.0} µs", micros(d))
}

fn hello_latency() {
    let home = Home::new();
    let mut samples = Vec::new();
    for _ in 0..40 {
        let (mut serve, started) = Serve::start(&home, true);
        let line = serve.read_line().to_owned();
        samples.push(started.elapsed());
        assert!(line.contains("\"hello\""), "{line}");
        serve.until("\"mcp_servers\"");
        serve.quit();
    }
    println!(
        "start → hello:              p50 {}  p95 {}  (40 process starts)",
        us(percentile(&mut samples, 0.5)),
        us(percentile(&mut samples, 0.95))
    );
}

fn message_to_request() {
    let home = Home::new();
    let model = mock::MockModel::start();
    home.write_config(&format!(
        "model = \"mock/m\"\n[providers.mock]\nkind = \"openai\"\nbase_url = \"{}\"\n",
        model.base_url()
    ));
    let (mut serve, _) = Serve::start(&home, true);
    serve.until("\"mcp_servers\"");
    let turns = 60;
    let mut samples = Vec::new();
    for turn in 0..turns {
        model.push(mock::text_reply(&["ok"]));
        let sent = Instant::now();
        serve.send(&json!({"op": "user_message", "content": format!("message {turn}")}));
        let requests = model.wait_requests(turn + 1);
        samples.push(requests[turn].at.duration_since(sent));
        serve.until("\"ready\"");
    }
    let first = samples[0];
    let mut warm = samples[1..].to_vec();
    println!(
        "user_message → HTTP request: first {}  then p50 {}  p95 {}  ({turns} turns, loopback mock)",
        us(first),
        us(percentile(&mut warm, 0.5)),
        us(percentile(&mut warm, 0.95))
    );
    serve.quit();
}

/// A new session's first request, the message sent as soon as the startup batch is in
/// (as a front-end that opens a session to send a prompt does), a fresh profile each
/// time; and the same with the message sent 100 ms later, when start-up work is done.
fn fresh_first_request() {
    let model = mock::MockModel::start();
    let runs: usize = std::env::var("JUCODE_BENCH_RUNS")
        .ok()
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(12);
    let mut total = 0;
    for delay in [Duration::ZERO, Duration::from_millis(100)] {
        let mut samples = Vec::new();
        for _ in 0..runs {
            let home = Home::new();
            home.write_config(&format!(
                "model = \"mock/m\"\n[providers.mock]\nkind = \"openai\"\nbase_url = \"{}\"\n",
                model.base_url()
            ));
            model.push(mock::text_reply(&["ok"]));
            let (mut serve, _) = Serve::start(&home, true);
            serve.until("\"mcp_servers\"");
            std::thread::sleep(delay);
            let sent = Instant::now();
            serve.send(&json!({"op": "user_message", "content": "hello"}));
            total += 1;
            let requests = model.wait_requests(total);
            samples.push(requests[total - 1].at.duration_since(sent));
            serve.until("\"ready\"");
            serve.quit();
        }
        let mut sorted = samples.clone();
        sorted.sort();
        println!(
            "fresh session, first request, sent {:>3} ms after the startup batch: median {}  min {}  max {}  ({runs} fresh profiles)",
            delay.as_millis(),
            us(percentile(&mut samples, 0.5)),
            us(sorted[0]),
            us(sorted[runs - 1]),
        );
    }
}

fn streaming() {
    let home = Home::new();
    let deltas = 200_000;
    home.long_replies(deltas, 1);
    let (mut serve, _) = Serve::start(&home, true);
    serve.until("\"mcp_servers\"");
    let started = Instant::now();
    serve.send(&json!({"op": "user_message", "content": "stream"}));
    let seen = serve.until_counting("\"ready\"", "\"assistant_delta\"");
    let elapsed = started.elapsed();
    let rss = serve.peak_rss_kib();
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
    serve.quit();
}

fn main() {
    if std::env::args().any(|arg| arg == "first_request") {
        fresh_first_request();
        return;
    }
    println!("jucode serve --in-process benchmark ({BIN})");
    hello_latency();
    message_to_request();
    fresh_first_request();
    streaming();
}
