//! Running hooks: `sh -c <command>` in the session's directory, with the session's
//! environment, the event as JSON on stdin, and a deadline.
//!
//! A hook never stops the session: a hook that cannot start, exits non-zero or outlives
//! its timeout is reported (the session turns that into an `error`), and its process
//! group is killed so nothing it started keeps running (and so is the group of a hook
//! running when jucode dies: `crate::reaper`). Output is capped, since it is shown to
//! the user as events.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::config::hooks::Hook;
use crate::engine::ports::project::HookRun;

/// Output of one hook shown at most (its start).
const MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// Runs `hooks` one after the other (their order in the config is their order).
pub async fn run_all(
    hooks: Vec<Hook>,
    cwd: &Path,
    env: &HashMap<String, String>,
    payload: &serde_json::Value,
) -> Vec<HookRun> {
    let input = payload.to_string();
    let mut runs = Vec::with_capacity(hooks.len());
    for hook in hooks {
        runs.push(run_one(&hook, cwd, env, &input).await);
    }
    runs
}

async fn run_one(hook: &Hook, cwd: &Path, env: &HashMap<String, String>, input: &str) -> HookRun {
    let event = serde_json::from_str::<serde_json::Value>(input)
        .ok()
        .and_then(|payload| {
            payload
                .get("event")
                .and_then(|e| e.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(&hook.command)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter())
        .env("JUCODE_HOOK_EVENT", &event)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, killed by the reaper if jucode dies while the hook runs;
    // released when this returns, the shell reaped or its group killed.
    let (mut child, _watch) = match crate::reaper::spawn(&mut command) {
        Ok(spawned) => spawned,
        Err(err) => return failed(hook, String::new(), format!("cannot start: {err}")),
    };
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its input closes the pipe early: not a failure.
        let input = input.as_bytes().to_vec();
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
        });
    }
    let outcome = tokio::time::timeout(hook.timeout, child.wait_with_output()).await;
    if outcome.is_err()
        && let Some(group) = group
    {
        // The shell is killed (dropped) but not reaped yet, so its group id is still
        // its own: whatever it started goes with it.
        let _ = killpg(group, Signal::SIGKILL);
    }
    match outcome {
        Err(_) => failed(
            hook,
            String::new(),
            format!("timed out after {} ms", hook.timeout.as_millis()),
        ),
        Ok(Err(err)) => failed(hook, String::new(), format!("cannot run: {err}")),
        Ok(Ok(output)) => {
            let stdout = capped(&output.stdout);
            if output.status.success() {
                HookRun {
                    command: hook.command.clone(),
                    output: stdout,
                    failure: None,
                }
            } else {
                let stderr = capped(&output.stderr);
                let status = match output.status.code() {
                    Some(code) => format!("exited with status {code}"),
                    None => "was killed by a signal".to_owned(),
                };
                let why = if stderr.is_empty() {
                    status
                } else {
                    format!("{status}: {stderr}")
                };
                failed(hook, stdout, why)
            }
        }
    }
}

fn failed(hook: &Hook, output: String, why: String) -> HookRun {
    HookRun {
        command: hook.command.clone(),
        output,
        failure: Some(why),
    }
}

fn capped(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text.len() <= MAX_OUTPUT_BYTES {
        return text.to_owned();
    }
    let mut cut = MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[… {} more bytes not shown]",
        &text[..cut],
        text.len() - cut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hook(command: &str, timeout_ms: u64) -> Hook {
        Hook {
            command: command.into(),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    #[tokio::test]
    async fn hooks_read_the_event_and_report_failures() {
        let dir = tempfile::tempdir().unwrap();
        let env: HashMap<String, String> =
            [("PATH".to_owned(), std::env::var("PATH").unwrap_or_default())].into();
        let payload = serde_json::json!({"event": "session_start", "cwd": "/p"});
        let runs = run_all(
            vec![
                hook("cat; echo; echo \"$JUCODE_HOOK_EVENT\" in \"$PWD\"", 5000),
                hook("echo partial; echo broken >&2; exit 3", 5000),
                hook("sleep 30", 100),
                hook("true", 5000),
            ],
            dir.path(),
            &env,
            &payload,
        )
        .await;
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(
            runs[0].output,
            format!("{payload}\nsession_start in {}", real.display())
        );
        assert_eq!(runs[0].failure, None);
        assert_eq!(runs[1].output, "partial");
        assert_eq!(
            runs[1].failure.as_deref(),
            Some("exited with status 3: broken")
        );
        assert_eq!(runs[2].failure.as_deref(), Some("timed out after 100 ms"));
        assert_eq!(
            (runs[3].output.as_str(), runs[3].failure.as_ref()),
            ("", None)
        );
    }
}
