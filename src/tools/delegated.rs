//! `read_file`, `write_file`, `edit_file` and `bash` through the client that serves the
//! session's files and commands (an editor), when one does; the tools themselves
//! otherwise. The requests are the protocol's typed `ClientCall`s.
//!
//! [`Delegated`] wraps a tool: same spec and assessment, and `run` asks the client when
//! the call's context has a delegate with the capability it needs. The results read as
//! the local tools' do, so the model sees no difference. An edit is assessed (diff,
//! hunks) on the client's text too, so what a person approves is what changes.
//! Everything runs locally when no client serves it.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::args::Args;
use super::diff::LineDiff;
use super::files::{Target, select_hunks};
use crate::engine::delegate::ToolDelegate;
use crate::engine::ports::model::ToolSpec;
use crate::engine::{Assessment, Confinement, Effect, Tool, ToolContext, ToolOutput};
use crate::protocol::delegation::{
    ClientCall, CreatedTerminal, TerminalExit, TerminalOutput, TextFile, answer_as,
};

/// How long a file request may wait for the client.
const FS_TIMEOUT: Duration = Duration::from_secs(30);
/// The output a client terminal keeps for the model (the local tool keeps ~30 KiB).
const TERMINAL_OUTPUT_BYTES: u64 = 32 * 1024;
/// A command's default and largest timeout, as the local `bash` tool's.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;

#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    Edit,
    Shell,
}

pub struct Delegated<T> {
    inner: T,
    kind: Kind,
}

impl<T: Tool> Delegated<T> {
    pub fn read(inner: T) -> Self {
        Self {
            inner,
            kind: Kind::Read,
        }
    }
    pub fn write(inner: T) -> Self {
        Self {
            inner,
            kind: Kind::Write,
        }
    }
    pub fn edit(inner: T) -> Self {
        Self {
            inner,
            kind: Kind::Edit,
        }
    }
    pub fn shell(inner: T) -> Self {
        Self {
            inner,
            kind: Kind::Shell,
        }
    }
}

impl<T: Tool> Tool for Delegated<T> {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }

    fn describe(&self, args: &Value, cwd: &std::path::Path) -> crate::protocol::CallCard {
        self.inner.describe(args, cwd)
    }

    fn assess(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        // An edit is judged on the text the client has (its unsaved buffer), which is
        // what the edit will change.
        let reads = ctx
            .delegate
            .as_ref()
            .is_some_and(|d| d.capabilities.read_text_file && d.capabilities.write_text_file);
        if matches!(self.kind, Kind::Edit)
            && reads
            && let Some(delegate) = ctx.delegate.clone()
        {
            let (args, ctx) = (args.clone(), ctx.clone());
            return Box::pin(async move {
                let (target, old, new, count) = plan_edit(&delegate, &args, &ctx)
                    .await
                    .map_err(ToolOutput::error)?;
                let diff = LineDiff::new(&old, &new);
                let mut summary = format!("edit {} ({})", target.shown, diff.stat());
                if count > 1 {
                    summary.push_str(&format!(", {count} occurrences"));
                }
                let hunks = diff.hunks(0, &target.shown);
                Ok(target.assessment(summary, Some(hunks)))
            });
        }
        let terminal = ctx
            .delegate
            .as_ref()
            .is_some_and(|d| d.capabilities.terminal);
        if matches!(self.kind, Kind::Shell) && terminal {
            // The client's terminal runs it, outside jucode's sandbox.
            let assessed = self.inner.assess(args, ctx);
            return Box::pin(async move {
                let mut assessment = assessed.await?;
                if let Effect::Exec { confinement, .. } = &mut assessment.effect
                    && *confinement == Confinement::Contained
                {
                    *confinement = Confinement::Unconfined;
                }
                Ok(assessment)
            });
        }
        self.inner.assess(args, ctx)
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let serves = |delegate: &ToolDelegate| {
            let can = delegate.capabilities;
            match self.kind {
                Kind::Read => can.read_text_file,
                Kind::Write => can.write_text_file,
                Kind::Edit => can.read_text_file && can.write_text_file,
                Kind::Shell => can.terminal,
            }
        };
        let Some(delegate) = ctx.delegate.clone().filter(serves) else {
            return self.inner.run(args, ctx);
        };
        let kind = self.kind;
        Box::pin(async move {
            let result = match kind {
                Kind::Read => read(&delegate, &args, &ctx).await,
                Kind::Write => write(&delegate, &args, &ctx).await,
                Kind::Edit => edit(&delegate, &args, &ctx).await,
                Kind::Shell => shell(&delegate, &args, &ctx).await,
            };
            result.unwrap_or_else(ToolOutput::error)
        })
    }
}

fn path_of(tool: &'static str, args: &Value, ctx: &ToolContext) -> Result<String, String> {
    let path = Args::new(tool, args)?.required_str("path")?;
    Ok(ctx.resolve(path).display().to_string())
}

async fn read_text(
    delegate: &ToolDelegate,
    path: &str,
    ctx: &ToolContext,
) -> Result<String, String> {
    let call = ClientCall::ReadTextFile {
        path: path.to_owned(),
    };
    let answer = delegate.call(&call, FS_TIMEOUT, &ctx.cancel).await?;
    answer_as::<TextFile>(answer, "has no content").map(|file| file.content)
}

async fn write_text(
    delegate: &ToolDelegate,
    path: &str,
    content: &str,
    ctx: &ToolContext,
) -> Result<(), String> {
    let call = ClientCall::WriteTextFile {
        path: path.to_owned(),
        content: content.to_owned(),
    };
    delegate
        .call(&call, FS_TIMEOUT, &ctx.cancel)
        .await
        .map(drop)
}

async fn read(
    delegate: &ToolDelegate,
    args: &Value,
    ctx: &ToolContext,
) -> Result<ToolOutput, String> {
    const TOOL: &str = "read_file";
    let path = path_of(TOOL, args, ctx)?;
    let parsed = Args::new(TOOL, args)?;
    let offset = parsed.optional_u64("offset")?.unwrap_or(1).max(1);
    let limit = parsed.optional_u64("limit")?.unwrap_or(2000).max(1);
    let text = read_text(delegate, &path, ctx)
        .await
        .map_err(|err| format!("{TOOL}: {path}: {err}"))?;
    if text.is_empty() {
        return Ok(ToolOutput::ok("(empty file)"));
    }
    let total = text.lines().count() as u64;
    if offset > total {
        return Err(format!(
            "{TOOL}: offset {offset} is past the end of {path}, which has {total} lines"
        ));
    }
    let mut out = String::new();
    let mut last = offset - 1;
    for (number, line) in (1u64..).zip(text.lines()).skip((offset - 1) as usize) {
        if number >= offset + limit || out.len() > 256 * 1024 {
            break;
        }
        let line: String = line.chars().take(2000).collect();
        out.push_str(&format!("{number:>6}\t{line}\n"));
        last = number;
    }
    if last < total {
        out.push_str(&format!(
            "[lines {offset}-{last} of {total}; continue with offset {}]\n",
            last + 1
        ));
    }
    Ok(ToolOutput::ok(out.trim_end_matches('\n')))
}

async fn write(
    delegate: &ToolDelegate,
    args: &Value,
    ctx: &ToolContext,
) -> Result<ToolOutput, String> {
    const TOOL: &str = "write_file";
    let path = path_of(TOOL, args, ctx)?;
    let content = Args::new(TOOL, args)?.required_str("content")?;
    write_text(delegate, &path, content, ctx)
        .await
        .map_err(|err| format!("{TOOL}: {path}: {err}"))?;
    let lines = content.lines().count();
    Ok(ToolOutput::ok(format!(
        "wrote {} ({lines} lines)",
        shown(&path, ctx)
    )))
}

const EDIT: &str = "edit_file";

/// The edit on the client's text: the target, its text now, after, and how many
/// places change.
async fn plan_edit(
    delegate: &ToolDelegate,
    args: &Value,
    ctx: &ToolContext,
) -> Result<(Target, String, String, usize), String> {
    let request = super::edit_file::Request::parse(args)?;
    let target = Target::new(ctx, &request.path);
    let path = target.abs.display().to_string();
    let text = read_text(delegate, &path, ctx)
        .await
        .map_err(|err| format!("{EDIT}: {}: {err}", target.shown))?;
    // The same edit as on disk (exact match, CRLF, uniqueness, insertion), on the
    // client's text.
    let (edited, count) = super::edit_file::edited(&text, &request, &target.shown)?;
    Ok((target, text, edited, count))
}

async fn edit(
    delegate: &ToolDelegate,
    args: &Value,
    ctx: &ToolContext,
) -> Result<ToolOutput, String> {
    let (target, old, new, _) = plan_edit(delegate, args, ctx).await?;
    // Hunk by hunk as approved, exactly as on disk.
    let (text, note) = select_hunks(EDIT, &old, &new, ctx.hunks.as_deref())?;
    if text == old {
        return Ok(ToolOutput::ok(format!("{} unchanged {note}", target.shown)));
    }
    let path = target.abs.display().to_string();
    write_text(delegate, &path, &text, ctx)
        .await
        .map_err(|err| format!("{EDIT}: {}: {err}", target.shown))?;
    Ok(ToolOutput::ok(format!("edited {} {note}", target.shown)))
}

/// Runs the command in a client terminal: create, wait (bounded by the call's timeout,
/// ended by an interrupt), read its output, always release it.
async fn shell(
    delegate: &ToolDelegate,
    args: &Value,
    ctx: &ToolContext,
) -> Result<ToolOutput, String> {
    const TOOL: &str = "bash";
    let parsed = Args::new(TOOL, args)?;
    let command = parsed.required_str("command")?;
    let timeout_ms = parsed
        .optional_u64("timeout_ms")?
        .unwrap_or(DEFAULT_TIMEOUT_MS)
        .min(MAX_TIMEOUT_MS);
    let create = ClientCall::CreateTerminal {
        command: "bash".to_owned(),
        args: vec!["-c".to_owned(), command.to_owned()],
        cwd: ctx.cwd.display().to_string(),
        output_byte_limit: TERMINAL_OUTPUT_BYTES,
    };
    let created = delegate
        .call(&create, FS_TIMEOUT, &ctx.cancel)
        .await
        .map_err(|err| format!("{TOOL}: the client could not start the command: {err}"))?;
    let terminal = answer_as::<CreatedTerminal>(created, "has no terminal id")
        .map_err(|err| format!("{TOOL}: {err}"))?
        .terminal_id;
    let on = |make: fn(String) -> ClientCall| make(terminal.clone());
    // Requests that must go out even when the turn was interrupted.
    let never = tokio_util::sync::CancellationToken::new();
    let waited = delegate
        .call(
            &on(|terminal_id| ClientCall::WaitForTerminalExit { terminal_id }),
            Duration::from_millis(timeout_ms),
            &ctx.cancel,
        )
        .await
        .and_then(|exit| answer_as::<TerminalExit>(exit, "is no exit status"));
    let status = match &waited {
        Ok(TerminalExit {
            exit_code: Some(code),
            ..
        }) => Ok(*code),
        Ok(TerminalExit { signal, .. }) => Err(format!(
            "killed: by signal {}",
            signal.as_deref().unwrap_or("?")
        )),
        Err(_) if ctx.cancel.is_cancelled() => Err("killed: interrupted".to_owned()),
        Err(_) => Err(format!("killed: timed out after {timeout_ms} ms")),
    };
    if waited.is_err() {
        let kill = on(|terminal_id| ClientCall::KillTerminal { terminal_id });
        let _ = delegate.call(&kill, FS_TIMEOUT, &never).await;
    }
    let output = on(|terminal_id| ClientCall::TerminalOutput { terminal_id });
    let output = delegate
        .call(&output, FS_TIMEOUT, &never)
        .await
        .and_then(|output| answer_as::<TerminalOutput>(output, "has no output"))
        .map(|output| output.output)
        .unwrap_or_default();
    let release = on(|terminal_id| ClientCall::ReleaseTerminal { terminal_id });
    let _ = delegate.call(&release, FS_TIMEOUT, &never).await;
    let (mut text, failed) = match status {
        Ok(code) => (format!("exit code: {code}\n"), code != 0),
        Err(why) => (format!("{why}\n"), true),
    };
    text.push_str(if output.is_empty() {
        "(no output)"
    } else {
        &output
    });
    Ok(ToolOutput {
        output: text,
        is_error: failed,
        images: Vec::new(),
    })
}

fn shown(path: &str, ctx: &ToolContext) -> String {
    super::display_path(&ctx.cwd, std::path::Path::new(path))
}
