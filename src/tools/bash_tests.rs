use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::*;
use crate::tools::tests::context;

async fn bash(ctx: &ToolContext, command: &str, timeout_ms: Option<u64>) -> ToolOutput {
    let args = match timeout_ms {
        Some(ms) => json!({"command": command, "timeout_ms": ms}),
        None => json!({"command": command}),
    };
    Bash.run(args, ctx.clone()).await
}

/// True once no process with this pid is running (gone, or a zombie awaiting its reaper).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_gone(pid: i32) -> bool {
    for _ in 0..100 {
        if gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn exit_codes_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    assert_eq!(
        bash(&ctx, "echo hi", None).await,
        ToolOutput::ok("exit code: 0\nhi\n")
    );
    assert_eq!(
        bash(&ctx, "exit 3", None).await,
        ToolOutput::error("exit code: 3\n(no output)")
    );
    let out = bash(&ctx, "echo out; echo err >&2; false", None).await;
    assert!(out.is_error);
    assert!(out.output.starts_with("exit code: 1\n"));
    assert!(out.output.contains("out\n") && out.output.contains("err\n"));
    let out = bash(&ctx, "pwd", None).await;
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(out.output, format!("exit code: 0\n{}\n", cwd.display()));
    let out = bash(&ctx, "kill -9 $$", None).await;
    assert_eq!(out, ToolOutput::error("killed: by signal 9\n(no output)"));
}

#[tokio::test]
async fn stdout_and_stderr_interleave_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let command = "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c; sleep 0.1; echo d >&2";
    let out = bash(&ctx, command, None).await;
    assert_eq!(out.output, "exit code: 0\na\nb\nc\nd\n");
}

#[tokio::test]
async fn streams_into_progress() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let command = "for i in 1 2 3; do echo line $i; sleep 0.3; done";
    let handle = tokio::spawn(Bash.run(json!({ "command": command }), ctx.clone()));
    let mut chunks = Vec::new();
    while !handle.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(chunk) = ctx.progress.take() {
            chunks.push(chunk);
        }
    }
    let out = handle.await.unwrap();
    chunks.extend(ctx.progress.take());
    assert!(chunks.len() >= 3, "{chunks:?}");
    assert_eq!(chunks.concat(), "line 1\nline 2\nline 3\n");
    assert_eq!(out.output, "exit code: 0\nline 1\nline 2\nline 3\n");
}

#[tokio::test]
async fn environment_is_exactly_the_session_env() {
    let dir = tempfile::tempdir().unwrap();
    // Variables bash sets by itself when they are missing do not prove anything.
    const SET_BY_BASH: &[&str] = &[
        "BASH", "COLUMNS", "EUID", "HOME", "HOSTNAME", "HOSTTYPE", "IFS", "LINES", "MACHTYPE",
        "OLDPWD", "OSTYPE", "PATH", "PPID", "PWD", "SHELL", "SHLVL", "TERM", "UID", "_",
    ];
    let (outside, _) = std::env::vars()
        .find(|(name, _)| {
            !SET_BY_BASH.contains(&name.as_str())
                && !name.starts_with("BASH")
                && !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .expect("the test process has some environment variable bash does not set");
    let mut env = HashMap::new();
    env.insert("JUCODE_ONLY_IN_CTX".to_owned(), "session value".to_owned());
    if let Ok(path) = std::env::var("PATH") {
        env.insert("PATH".to_owned(), path);
    }
    let mut ctx = context(dir.path());
    ctx.env = Arc::new(env);
    let command = format!("echo \"$JUCODE_ONLY_IN_CTX\"; echo \"${{{outside}-unset}}\"");
    let out = bash(&ctx, &command, None).await;
    assert_eq!(out.output, "exit code: 0\nsession value\nunset\n");
}

#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let started = Instant::now();
    let command = "sleep 100 & echo $! > bg.pid; echo started; sleep 100; echo never";
    let out = bash(&ctx, command, Some(500)).await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_millis(2000), "{elapsed:?}");
    assert_eq!(
        out,
        ToolOutput::error("killed: timed out after 500 ms\nstarted\n")
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_gone(pid).await, "background sleep {pid} survived");
}

#[tokio::test]
async fn timeout_with_a_pipeline_and_subshell_does_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let started = Instant::now();
    let out = bash(&ctx, "(sleep 100) | cat", Some(300)).await;
    assert!(started.elapsed() < Duration::from_millis(1800));
    assert_eq!(
        out,
        ToolOutput::error("killed: timed out after 300 ms\n(no output)")
    );
}

#[tokio::test]
async fn processes_ignoring_sigterm_are_killed_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let started = Instant::now();
    let command = "trap '' TERM; sleep 100 & echo $! > bg.pid; sleep 100";
    let out = bash(&ctx, command, Some(300)).await;
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(1200), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(3000), "{elapsed:?}");
    assert!(out.output.starts_with("killed: timed out after 300 ms"));
    let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_gone(pid).await, "background sleep {pid} survived");
}

#[tokio::test]
async fn cancellation_interrupts() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let cancel = ctx.cancel.clone();
    let started = Instant::now();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let out = bash(&ctx, "echo begun; sleep 100 | cat", None).await;
    assert!(started.elapsed() < Duration::from_millis(1800));
    assert_eq!(out, ToolOutput::error("killed: interrupted\nbegun\n"));
}

#[tokio::test]
async fn background_holders_do_not_block_a_finished_command() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let started = Instant::now();
    let out = bash(&ctx, "sleep 30 & echo $!", None).await;
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert!(!out.is_error, "{}", out.output);
    let mut lines = out.output.lines();
    assert_eq!(lines.next(), Some("exit code: 0"));
    let pid: i32 = lines.next().unwrap().parse().unwrap();
    assert!(lines.next().unwrap().starts_with("[output no longer read"));
    // Left running on purpose (see exec.rs); this test started it, so it ends it.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[tokio::test]
async fn long_output_keeps_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let out = bash(&ctx, "seq 1 200000; echo done", None).await;
    assert!(!out.is_error);
    let (status, rest) = out.output.split_once('\n').unwrap();
    assert_eq!(status, "exit code: 0");
    let (note, kept) = rest.split_once('\n').unwrap();
    assert!(note.starts_with("[… ") && note.ends_with(" bytes of earlier output cut …]"));
    assert!(kept.ends_with("199999\n200000\ndone\n"));
    assert!(kept.len() <= exec::KEEP_BYTES);
    let full: usize = (1..=200_000)
        .map(|n: u32| n.to_string().len() + 1)
        .sum::<usize>()
        + 5;
    let cut: usize = note
        .trim_start_matches("[… ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(cut + kept.len(), full);
}

#[tokio::test]
async fn argument_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let cases = [
        (json!({}), "bash: missing required argument \"command\""),
        (
            json!({"command": "  "}),
            "bash: argument \"command\" is empty",
        ),
        (
            json!({"command": "ls", "timeout_ms": 0}),
            "bash: argument \"timeout_ms\" must be at least 1",
        ),
        (
            json!({"command": "ls", "timeout_ms": "5"}),
            "bash: argument \"timeout_ms\" must be a non-negative integer, got string \"5\"",
        ),
    ];
    for (args, message) in cases {
        assert_eq!(
            Bash.run(args.clone(), ctx.clone()).await,
            ToolOutput::error(message)
        );
        assert_eq!(
            Bash.assess(&args, &ctx).await,
            Err(ToolOutput::error(message))
        );
    }
    let clamped = Request::parse(&json!({"command": "ls", "timeout_ms": 10_000_000})).unwrap();
    assert_eq!(clamped.timeout_ms, MAX_TIMEOUT_MS);
    let default = Request::parse(&json!({"command": "ls"})).unwrap();
    assert_eq!(default.timeout_ms, DEFAULT_TIMEOUT_MS);
}

#[tokio::test]
async fn assessment_follows_the_classifier() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let assess = |command: &str| Bash.assess(&json!({ "command": command }), &ctx);
    let read_only = assess("ls -la | head").await.unwrap();
    assert_eq!(read_only.effect, Effect::ReadOnly);
    assert_eq!(read_only.summary, "ls -la | head");
    assert_eq!(read_only.hunks, None);
    let mutating = assess("touch a").await.unwrap();
    assert_eq!(
        mutating.effect,
        Effect::Exec {
            danger: None,
            confinement: crate::engine::Confinement::Unconfined
        }
    );
    let dangerous = assess("sudo ls").await.unwrap();
    assert!(matches!(
        dangerous.effect,
        Effect::Exec {
            danger: Some(_),
            ..
        }
    ));
}

#[tokio::test]
async fn a_timeout_sends_sigterm_first_but_a_dropped_call_only_sigkill() {
    // What exec.rs says: the TERM trap runs on timeout, never when the call is dropped
    // (which is what an interrupted turn does to it).
    let command = "trap 'echo term > got_term; exit 0' TERM; sleep 100 & wait";
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let out = bash(&ctx, command, Some(300)).await;
    assert!(out.output.starts_with("killed: timed out after 300 ms"));
    assert!(
        dir.path().join("got_term").exists(),
        "no SIGTERM on timeout"
    );

    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let recorded = format!("echo $$ > shell.pid; {command}");
    let call = bash(&ctx, &recorded, None);
    assert!(
        tokio::time::timeout(Duration::from_millis(400), call)
            .await
            .is_err()
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("shell.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_gone(pid).await, "shell {pid} survived");
    assert!(
        !dir.path().join("got_term").exists(),
        "a dropped call got SIGTERM"
    );
}

#[tokio::test]
async fn dropping_the_call_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let command = "sleep 100 & echo $! > bg.pid; sleep 100";
    let call = bash(&ctx, command, None);
    assert!(
        tokio::time::timeout(Duration::from_millis(400), call)
            .await
            .is_err()
    );
    let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_gone(pid).await, "background sleep {pid} survived");
}
