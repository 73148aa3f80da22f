//! The sandbox's cost per command: starting `sh -c true` and waiting for it, unsandboxed
//! and sandboxed (the ruleset and the filter built for each command, as `bash` does,
//! then applied in the child), and preparing alone. Run with
//! `cargo bench --bench sandbox`; figures go to `docs/performance.md`.
//!
//! This is a measuring tool, not a test: it asserts nothing about timings.

use std::process::Stdio;
use std::time::{Duration, Instant};

use jucode::tools::sandbox::{self, Policy, Prepared};

const RUNS: usize = 300;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[index]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn start_true(policy: Option<&Policy>) -> Duration {
    let started = Instant::now();
    let prepared = policy.map(|policy| Prepared::new(policy).expect("sandbox"));
    let mut command = tokio::process::Command::new("sh");
    if let Some(prepared) = &prepared {
        prepared.apply(&mut command);
    }
    let status = command
        .arg("-c")
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn")
        .wait()
        .await
        .expect("wait");
    assert!(status.success());
    started.elapsed()
}

fn report(name: &str, samples: &mut [Duration]) {
    let p50 = percentile(samples, 0.5);
    let p90 = percentile(samples, 0.9);
    let p99 = percentile(samples, 0.99);
    println!(
        "{name:<44} p50 {:>8}  p90 {:>8}  p99 {:>8}",
        us(p50),
        us(p90),
        us(p99)
    );
}

fn main() {
    let support = sandbox::support();
    println!(
        "Landlock ABI {}, seccomp filter {}",
        support.landlock_abi, support.seccomp
    );
    if !support.enforced() {
        println!(
            "no sandbox on this kernel: {}",
            support.unsupported.as_deref().unwrap_or("")
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let workspace = Policy {
        writable: sandbox::workspace_roots(dir.path(), None, &[]),
        network: false,
    };
    let read_only = Policy {
        writable: Vec::new(),
        network: false,
    };
    let with_network = Policy {
        writable: workspace.writable.clone(),
        network: true,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Warm up the page cache and the runtime's child reaper.
        for _ in 0..20 {
            start_true(None).await;
            start_true(Some(&workspace)).await;
        }
        let cases: [(&str, Option<&Policy>); 4] = [
            ("sh -c true, unsandboxed", None),
            ("sh -c true, workspace-write, network off", Some(&workspace)),
            ("sh -c true, read-only, network off", Some(&read_only)),
            (
                "sh -c true, workspace-write, network on",
                Some(&with_network),
            ),
        ];
        let mut results: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
        // Interleaved, so drift of the machine hits every case alike.
        for _ in 0..RUNS {
            for (index, (_, policy)) in cases.iter().enumerate() {
                results[index].push(start_true(*policy).await);
            }
        }
        for ((name, _), samples) in cases.iter().zip(results.iter_mut()) {
            report(name, samples);
        }
    });
    let mut prepare = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        let prepared = Prepared::new(&workspace).unwrap();
        prepare.push(started.elapsed());
        drop(prepared);
    }
    report("preparing alone (ruleset + filter)", &mut prepare);
}
