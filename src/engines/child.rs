//! An agent's process as every driver handles it: what its messages call it, how it
//! exited, and what is left to say when it fails to start or goes away.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::mpsc;

use super::agent::Launch;
use crate::mcp::process::{Group, StderrTail};

/// How messages name the agent: `engine NAME (\`command\`)`.
pub fn describe(launch: &Launch) -> String {
    format!("engine {} (`{}`)", launch.name, launch.command)
}

/// Why an agent did not start.
pub enum Failure {
    /// Its output ended: the process is gone, its exit status says why.
    Closed,
    Other(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Other(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Self {
        Failure::Other(message.to_owned())
    }
}

/// Kills an agent that failed to start and says why, with its last stderr lines.
pub async fn abandon(
    mut child: Child,
    group: Group,
    stderr: StderrTail,
    what: &str,
    failure: Failure,
) -> String {
    group.signal(nix::sys::signal::Signal::SIGKILL);
    let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    stderr.drained(Duration::from_millis(500)).await;
    let how = match (failure, status) {
        (Failure::Other(message), _) => message,
        (Failure::Closed, Ok(Ok(status))) => format!("exited with {}", exit_words(status)),
        (Failure::Closed, _) => "closed its output".to_owned(),
    };
    format!("{what} {how}{}", stderr.suffix())
}

/// What to tell the session when a running agent's output ended.
pub async fn gone(mut child: Child, group: &Group, stderr: &StderrTail, what: &str) -> String {
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    group.reaper().reaped();
    stderr.drained(Duration::from_millis(500)).await;
    let how = match status {
        Ok(Ok(status)) => format!("exited with {}", exit_words(status)),
        _ => "closed its output".to_owned(),
    };
    format!("{what} {how}{}", stderr.suffix())
}

fn exit_words(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("status {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "an unknown status".to_owned(),
    }
}

/// Stops an agent the session no longer wants and waits (a little) until it is gone,
/// so that whoever runs on its conversation next is the only one on it.
pub async fn stop(mut child: Child, group: Group) {
    group.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    group.reaper().reaped();
}

/// Writes each line to the agent's stdin as it comes, until either side is gone.
pub async fn write_lines(mut input: impl AsyncWrite + Unpin, mut lines: mpsc::Receiver<Bytes>) {
    while let Some(line) = lines.recv().await {
        if input.write_all(&line).await.is_err() || input.flush().await.is_err() {
            break;
        }
    }
}
