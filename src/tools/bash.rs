//! `bash`: run a shell command in the session's working directory.
//!
//! Why it looks the way it does:
//! - The assessment comes from the shell classifier ([`super::shell`]): commands known
//!   to only read are [`Effect::ReadOnly`], everything else is [`Effect::Exec`], with a
//!   reason when the classifier finds it dangerous. The summary is the command itself:
//!   that is what a person has to judge.
//! - The command sees exactly the session's environment (`ctx.env`), not the engine's,
//!   and no stdin: nothing can wait for input that will never come.
//! - Output streams into progress as it arrives; the result keeps the end of it (errors
//!   and summaries come last) with a note saying how much was cut.
//! - The first line of the result says how the command ended (`exit code: N`, or
//!   `killed: …`), so the model never has to guess from the output.
//! - Timeout: 120 s by default, at most 600 s; larger values are clamped, not refused,
//!   since a model asking for more time means "as long as allowed".

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::args::Args;
use super::exec::{self, End, Job};
use super::shell::{ShellClass, classify_with_home};
use crate::engine::ports::model::ToolSpec;
use crate::engine::{Assessment, Effect, Tool, ToolContext, ToolOutput};

const NAME: &str = "bash";
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;

/// The `bash` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bash;

struct Request {
    command: String,
    timeout_ms: u64,
}

impl Request {
    fn parse(value: &Value) -> Result<Self, String> {
        let args = Args::new(NAME, value)?;
        let command = args.required_str("command")?.to_owned();
        if command.trim().is_empty() {
            return Err(format!("{NAME}: argument \"command\" is empty"));
        }
        let timeout_ms = args
            .optional_u64("timeout_ms")?
            .unwrap_or(DEFAULT_TIMEOUT_MS);
        if timeout_ms == 0 {
            return Err(format!(
                "{NAME}: argument \"timeout_ms\" must be at least 1"
            ));
        }
        Ok(Self {
            command,
            timeout_ms: timeout_ms.min(MAX_TIMEOUT_MS),
        })
    }
}

impl Tool for Bash {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: "Run a shell command with `bash -c` in the working directory and \
                return its combined stdout and stderr. The first line of the result is \
                `exit code: N`, or `killed: timed out after N ms` / `killed: interrupted`. \
                stdin is empty: interactive programs cannot be used. The default timeout is \
                120000 ms, the maximum 600000 ms; on timeout the command and everything it \
                started are killed. Long output keeps only its last 30 KiB, preceded by a \
                note of how much was cut: narrow it with grep, head or tail, or redirect it \
                to a file and read that. Prefer read_file, list_dir and grep for looking at \
                files. Background processes (`cmd &`) are not waited for; redirect their \
                output to a file."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "description": "The command line to run."
                    },
                    "timeout_ms": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TIMEOUT_MS,
                        "description": "Milliseconds before the command is killed. Default 120000."
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    fn assess(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        let assessment = Request::parse(args)
            .map_err(ToolOutput::error)
            .map(|request| assess(&request.command, ctx));
        Box::pin(async move { assessment })
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let request = match Request::parse(&args) {
                Ok(request) => request,
                Err(message) => return ToolOutput::error(message),
            };
            let job = Job {
                command: &request.command,
                cwd: &ctx.cwd,
                env: &ctx.env,
                timeout: Duration::from_millis(request.timeout_ms),
                cancel: &ctx.cancel,
                progress: &ctx.progress,
                sandbox: None,
            };
            match exec::run(job).await {
                Ok(finished) => render(finished, request.timeout_ms),
                Err(err) => ToolOutput::error(format!("{NAME}: cannot start the shell: {err}")),
            }
        })
    }
}

fn assess(command: &str, ctx: &ToolContext) -> Assessment {
    // The shell runs with the session's environment, so its `~` is the session's HOME
    // (a daemon's own may differ); without one, bash falls back to the user's home.
    let home = match ctx.env.get("HOME").filter(|home| !home.is_empty()) {
        Some(home) => Some(PathBuf::from(home)),
        None => directories::BaseDirs::new().map(|dirs| dirs.home_dir().to_path_buf()),
    };
    let effect = match classify_with_home(command, &ctx.cwd, home.as_deref()) {
        ShellClass::ReadOnly => Effect::ReadOnly,
        ShellClass::Mutating => Effect::Exec { danger: None },
        ShellClass::Dangerous(reason) => Effect::Exec {
            danger: Some(reason),
        },
    };
    Assessment {
        effect,
        summary: command.to_owned(),
        hunks: None,
    }
}

fn render(finished: exec::Finished, timeout_ms: u64) -> ToolOutput {
    let (status, failed) = match finished.end {
        End::Exited(status) => match status.code() {
            Some(code) => (format!("exit code: {code}"), code != 0),
            None => {
                use std::os::unix::process::ExitStatusExt;
                let signal = status.signal().unwrap_or_default();
                (format!("killed: by signal {signal}"), true)
            }
        },
        End::TimedOut => (format!("killed: timed out after {timeout_ms} ms"), true),
        End::Interrupted => ("killed: interrupted".to_owned(), true),
    };
    let mut text = status;
    text.push('\n');
    if finished.output.is_empty() {
        text.push_str("(no output)");
    } else {
        text.push_str(&finished.output);
    }
    if finished.abandoned_pipes {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(
            "[output no longer read: a background process still holds stdout/stderr; \
             redirect its output to a file]",
        );
    }
    ToolOutput {
        output: text,
        is_error: failed,
        images: Vec::new(),
    }
}

#[cfg(test)]
#[path = "bash_tests.rs"]
mod tests;
