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
//! - The command runs in the session's sandbox (`super::sandbox`) when the kernel
//!   enforces one: its assessment then says the sandbox contains it (with the network
//!   off), which lets `auto-edit` run it without asking. A failure that looks like the
//!   sandbox's refusal says so, and how to ask for the same command with
//!   `"unsandboxed": true`: that call is assessed as leaving the sandbox, which the
//!   approval policy always puts to a person (and plan mode refuses).

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::args::Args;
use super::exec::{self, End, Job};
use super::sandbox::{Policy, Prepared, explain_refusal};
use super::shell::{ShellClass, classify_with_home};
use crate::engine::ports::model::ToolSpec;
use crate::engine::{Assessment, Confinement, Effect, Tool, ToolContext, ToolOutput};
use crate::engine::{DescribeCall, string_arg};
use crate::protocol::{CallCard, CallKind};

const NAME: &str = "bash";
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;

/// The `bash` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bash;

struct Request {
    command: String,
    timeout_ms: u64,
    /// Run without the session's sandbox (asked for after a refusal; always approved
    /// by a person).
    unsandboxed: bool,
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
        let unsandboxed = args.optional_bool("unsandboxed")?.unwrap_or(false);
        Ok(Self {
            command,
            timeout_ms: timeout_ms.min(MAX_TIMEOUT_MS),
            unsandboxed,
        })
    }
}

impl Tool for Bash {
    fn describe(&self, args: &Value, _cwd: &std::path::Path) -> CallCard {
        let Some(command) = string_arg(args, "command") else {
            return CallCard::named("bash");
        };
        CallCard::of(
            shell_kind(command),
            command.to_owned(),
            None,
            format!("Running {command}"),
        )
    }

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
                output to a file. The command may run in a sandbox that limits where it \
                writes and whether it reaches the network; when the sandbox refuses \
                something, the result says so and how to ask for running it unsandboxed."
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
                    },
                    "unsandboxed": {
                        "type": "boolean",
                        "description": "Run the command without the sandbox. Only after a result \
                            said the sandbox refused something the command needs: the user is \
                            asked to approve it first."
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
            .map(|request| assess(&request, ctx));
        Box::pin(async move { assessment })
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let request = match Request::parse(&args) {
                Ok(request) => request,
                Err(message) => return ToolOutput::error(message),
            };
            let policy = (ctx.sandbox.enforced() && !request.unsandboxed).then(|| Policy {
                writable: ctx.sandbox.writable().to_vec(),
                network: ctx.sandbox.network,
            });
            // Fail closed: a sandbox that cannot be prepared runs nothing.
            let prepared = match policy.as_ref().map(Prepared::new).transpose() {
                Ok(prepared) => prepared,
                Err(err) => {
                    return ToolOutput::error(format!(
                        "{NAME}: cannot prepare the sandbox ({err}); the command did not run"
                    ));
                }
            };
            let job = Job {
                command: &request.command,
                cwd: &ctx.cwd,
                env: &ctx.env,
                timeout: Duration::from_millis(request.timeout_ms),
                cancel: &ctx.cancel,
                progress: &ctx.progress,
                sandbox: prepared.as_ref(),
            };
            match exec::run(job).await {
                Ok(finished) => {
                    let mut output = render(finished, request.timeout_ms);
                    if output.is_error
                        && let Some(policy) = &policy
                        && let Some(note) = explain_refusal(
                            &output.output,
                            &ctx.cwd,
                            policy,
                            ctx.sandbox.mode.as_str(),
                        )
                    {
                        output.output.push('\n');
                        output.output.push_str(&note);
                    }
                    output
                }
                Err(err) => ToolOutput::error(format!("{NAME}: cannot start the shell: {err}")),
            }
        })
    }
}

fn assess(request: &Request, ctx: &ToolContext) -> Assessment {
    let command = request.command.as_str();
    // The shell runs with the session's environment, so its `~` is the session's HOME
    // (a daemon's own may differ); without one, bash falls back to the user's home.
    let home = match ctx.env.get("HOME").filter(|home| !home.is_empty()) {
        Some(home) => Some(PathBuf::from(home)),
        None => directories::BaseDirs::new().map(|dirs| dirs.home_dir().to_path_buf()),
    };
    let class = classify_with_home(command, &ctx.cwd, home.as_deref());
    if request.unsandboxed && ctx.sandbox.enforced() {
        let danger = match class {
            ShellClass::Dangerous(reason) => Some(reason),
            ShellClass::ReadOnly | ShellClass::Mutating => None,
        };
        return Assessment {
            effect: Effect::Exec {
                danger,
                confinement: Confinement::Unsandboxed,
            },
            summary: format!(
                "run WITHOUT the sandbox (`{}` would not apply: it could write anywhere you can{}): {command}",
                ctx.sandbox.mode,
                if ctx.sandbox.network {
                    ""
                } else {
                    " and reach the network"
                }
            ),
            hunks: None,
        };
    }
    let confinement = if ctx.sandbox.contains_effects() {
        Confinement::Contained
    } else {
        Confinement::Unconfined
    };
    let effect = match class {
        ShellClass::ReadOnly => Effect::ReadOnly,
        ShellClass::Mutating => Effect::Exec {
            danger: None,
            confinement,
        },
        ShellClass::Dangerous(reason) => Effect::Exec {
            danger: Some(reason),
            confinement,
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

/// `rm` and `mv` as the whole command are deletes and moves; any other command (also
/// one that merely contains them) executes.
fn shell_kind(command: &str) -> CallKind {
    let simple = !command.contains(['|', ';', '&', '>', '<', '`', '$', '\n']);
    match command.split_whitespace().next() {
        Some("rm" | "rmdir") if simple => CallKind::Delete,
        Some("mv") if simple => CallKind::Move,
        _ => CallKind::Execute,
    }
}
