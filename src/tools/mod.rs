//! Tools: implementations of [`crate::engine::Tool`].
//!
//! The read-only tools ([`ReadFile`], [`ListDir`], [`Grep`]) let the model look at the
//! project without changing it; [`Bash`], [`WriteFile`] and [`EditFile`] change things
//! and describe what they would do first ([`crate::engine::Tool::assess`]): the shell
//! classifier ([`classify`]) for commands, diffs split into hunks ([`diff`]) for edits,
//! so a person can approve a whole call or only some of its hunks. They share a few
//! conventions, kept here so every tool behaves the same way for the model:
//!
//! - Argument problems come back as an error [`ToolOutput`] naming the tool and the
//!   argument (see [`args`]), so the model can fix its call instead of the turn failing.
//! - File-system work runs on tokio's blocking pool ([`run_blocking`]): a slow disk or
//!   a huge tree must never stall the runtime that streams the model's reply. An
//!   interrupted turn gets its answer at once; the blocking job sees the same
//!   cancellation token and stops at its next check.
//! - Paths the model gives resolve against the session's working directory, and paths
//!   shown back are relative to it when they lie inside it ([`display_path`]): shorter
//!   output, and exactly the form the model should pass to the next call.
//!
//! The web tools (`web_fetch`, `web_search`, in [`web`]) are registered on their own by
//! [`register_web`], from the config, because which sessions get them and how they are
//! gated is the host's decision.

mod apply_patch;
mod args;
mod bash;
mod delegated;
pub mod diff;
mod edit_file;
mod exec;
mod files;
mod grep;
mod list_dir;
mod patch;
mod read_file;
pub mod sandbox;
mod shell;
mod web;
mod write_file;

use std::path::{Component, Path, PathBuf};

use tokio_util::sync::CancellationToken;

use crate::engine::{ToolContext, ToolOutput, ToolRegistry};

pub use apply_patch::ApplyPatch;
pub use bash::Bash;
pub use edit_file::EditFile;
pub use grep::Grep;
pub use list_dir::ListDir;
pub use read_file::ReadFile;
/// The shell classifier, for the fuzz targets (`crate::fuzzing`).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use shell::{ShellClass, classify_with_home};
pub use web::{WebFetch, WebSearch, register_web};
pub use write_file::WriteFile;

/// Registers `read_file`, `list_dir` and `grep`.
fn register_read_only(registry: &mut ToolRegistry) {
    registry.register(ReadFile);
    registry.register(ListDir);
    registry.register(Grep);
}

/// Registers the tools of a chat session: the read-only file tools, for the files the
/// user attaches (no shell, no edits).
pub fn register_chat(registry: &mut ToolRegistry) {
    register_read_only(registry);
}

/// Registers every tool: the read-only ones, `bash`, `write_file` and `edit_file`, and
/// `apply_patch` in its freeform shape.
pub fn register_all(registry: &mut ToolRegistry) {
    register_read_only(registry);
    // Through the client that serves the session's files and commands, when one does.
    registry.register(delegated::Delegated::read(ReadFile));
    registry.register(delegated::Delegated::shell(Bash));
    registry.register(delegated::Delegated::write(WriteFile));
    registry.register(delegated::Delegated::edit(EditFile));
    // GPT-5's own edit tool, offered by the Responses provider in place of the two above.
    registry.register_freeform(ApplyPatch);
}

/// Runs `job` on the blocking pool and turns a panic or a cancelled turn into an error
/// output, so a tool call always ends with an answer.
async fn run_blocking<F>(tool: &'static str, cancel: CancellationToken, job: F) -> ToolOutput
where
    F: FnOnce() -> ToolOutput + Send + 'static,
{
    let handle = tokio::task::spawn_blocking(job);
    tokio::select! {
        joined = handle => joined.unwrap_or_else(|err| {
            ToolOutput::error(format!("{tool}: internal error: {err}"))
        }),
        () = cancel.cancelled() => ToolOutput::error(format!("{tool}: cancelled")),
    }
}

/// Resolves a path argument against the session's cwd. `.` components are dropped so
/// that paths built from the result (walker entries, error messages) stay clean;
/// `..` is kept, because only the file system knows what it means under symlinks.
fn resolve(ctx: &ToolContext, path: &str) -> PathBuf {
    ctx.resolve(path).components().collect()
}

/// How a path is shown to the model: relative to `cwd` when inside it (`.` for the cwd
/// itself), absolute otherwise.
fn display_path(cwd: &Path, path: &Path) -> String {
    let path = normalize(path);
    match path.strip_prefix(normalize(cwd)) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// Lexical normalization for display only: drops `.` and folds `a/..`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context whose cwd is `dir` and whose turn is never cancelled.
    pub(super) fn context(dir: &Path) -> ToolContext {
        ToolContext::detached(dir.to_path_buf())
    }

    #[test]
    fn display_path_is_relative_inside_cwd() {
        let cwd = Path::new("/work/project");
        assert_eq!(
            display_path(cwd, Path::new("/work/project/src/a.rs")),
            "src/a.rs"
        );
        assert_eq!(display_path(cwd, Path::new("/work/project/./src")), "src");
        assert_eq!(display_path(cwd, Path::new("/work/project")), ".");
        assert_eq!(display_path(cwd, Path::new("/work/project/src/../b")), "b");
        assert_eq!(
            display_path(cwd, Path::new("/work/other/x")),
            "/work/other/x"
        );
        assert_eq!(
            display_path(cwd, Path::new("/work/project/../x")),
            "/work/x"
        );
    }

    #[test]
    fn registers_all_tools() {
        let mut registry = ToolRegistry::new();
        register_all(&mut registry);
        let names: Vec<String> = registry.specs().into_iter().map(|spec| spec.name).collect();
        assert_eq!(
            names,
            [
                "bash",
                "edit_file",
                "grep",
                "list_dir",
                "read_file",
                "write_file"
            ]
        );
        for spec in registry.specs() {
            assert_eq!(spec.parameters["type"], "object");
            assert!(!spec.description.is_empty());
        }
    }

    #[test]
    fn registers_the_three_tools() {
        let mut registry = ToolRegistry::new();
        register_read_only(&mut registry);
        let names: Vec<String> = registry.specs().into_iter().map(|spec| spec.name).collect();
        assert_eq!(names, ["grep", "list_dir", "read_file"]);
        for spec in registry.specs() {
            assert_eq!(spec.parameters["type"], "object");
            assert!(!spec.description.is_empty());
        }
    }

    #[tokio::test]
    async fn cancelled_turn_ends_the_call() {
        let cancel = CancellationToken::new();
        cancel.cancel();
        let out = run_blocking("t", cancel, || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            ToolOutput::ok("late")
        })
        .await;
        assert_eq!(out, ToolOutput::error("t: cancelled"));
    }
}
