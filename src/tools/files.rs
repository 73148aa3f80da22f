//! What `write_file` and `edit_file` share: where a path points, what the file holds
//! now, applying only approved hunks, and writing.
//!
//! Why it works this way:
//! - The path in [`Effect::Edit`] is absolute and lexically normalized (`.` dropped,
//!   `a/..` folded), and symlinks are not resolved here: the approval summary shows the
//!   path the model asked for. The policy resolves them itself when it decides "inside
//!   the project?" (`engine::turn::approvals::is_inside` canonicalizes the longest existing
//!   ancestor), so a symlink in the project that points elsewhere counts as outside.
//! - Assessment and run both read the file afresh: the run re-validates against what is
//!   on disk then, because the user may have edited the file while the approval waited.
//! - Files are rewritten in place (truncate and write) rather than renamed over, which
//!   keeps permissions, ownership, hard links and symlinks as they are.
//! - File work runs on the blocking pool, and a started write is always waited for, even
//!   when the turn is interrupted: reporting "cancelled" for a write that then happens
//!   anyway would mislead the model.
//! - Text only: files that are not UTF-8 or larger than [`MAX_EDIT_BYTES`] get no diff
//!   (`edit_file` refuses them; `write_file` may replace them whole).

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::diff::LineDiff;
use super::display_path;
use crate::engine::{Assessment, Effect, Hunk, ToolContext, ToolOutput};

/// Largest file that is diffed and edited.
pub(super) const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// The file a call is about.
pub(super) struct Target {
    /// Absolute and lexically normalized.
    pub abs: PathBuf,
    /// As shown to the model: relative to the cwd when inside it.
    pub shown: String,
}

impl Target {
    pub fn new(ctx: &ToolContext, path: &str) -> Self {
        let joined = ctx.resolve(path);
        let absolute = std::path::absolute(&joined).unwrap_or(joined);
        let abs = normalize_lexically(&absolute);
        let shown = display_path(&ctx.cwd, &abs);
        Self { abs, shown }
    }

    /// An assessment that this call edits the target.
    pub fn assessment(&self, summary: String, hunks: Option<Vec<Hunk>>) -> Assessment {
        Assessment {
            effect: Effect::Edit {
                paths: vec![self.abs.clone()],
            },
            summary,
            hunks,
        }
    }
}

/// Drops `.`, folds `a/..`, and keeps `/..` at `/`.
pub(super) fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    out
}

/// What the file holds before the call.
pub(super) enum Current {
    Missing,
    Text(String),
    /// Exists but is not editable text; says why.
    NotText(String),
}

pub(super) fn read_current(tool: &str, target: &Target) -> Result<Current, String> {
    let shown = &target.shown;
    let metadata = match fs::metadata(&target.abs) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Current::Missing),
        Err(err) => return Err(format!("{tool}: cannot read {shown}: {err}")),
    };
    if metadata.is_dir() {
        return Err(format!("{tool}: {shown} is a directory"));
    }
    if !metadata.is_file() {
        return Err(format!("{tool}: {shown} is not a regular file"));
    }
    if metadata.len() > MAX_EDIT_BYTES {
        return Ok(Current::NotText(format!(
            "{shown} is larger than {} MiB",
            MAX_EDIT_BYTES / 1024 / 1024
        )));
    }
    let bytes =
        fs::read(&target.abs).map_err(|err| format!("{tool}: cannot read {shown}: {err}"))?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => Current::Text(text),
        Err(_) => Current::NotText(format!("{shown} is not UTF-8 text")),
    })
}

/// Writes `text`, creating missing parent directories.
pub(super) fn write(tool: &str, target: &Target, text: &str) -> Result<(), String> {
    let shown = &target.shown;
    if let Some(parent) = target.abs.parent() {
        fs::create_dir_all(parent)
            .map_err(|err| format!("{tool}: cannot create the directory for {shown}: {err}"))?;
    }
    fs::write(&target.abs, text).map_err(|err| format!("{tool}: cannot write {shown}: {err}"))
}

/// The text to write for `old → new`: all of `new`, or `old` with only the approved
/// hunks when `selected` is set. Also returns a note on what was applied.
pub(super) fn select_hunks(
    tool: &str,
    old: &str,
    new: &str,
    selected: Option<&[String]>,
) -> Result<(String, String), String> {
    let diff = LineDiff::new(old, new);
    let Some(ids) = selected else {
        return Ok((new.to_owned(), format!("({})", diff.stat())));
    };
    let numbers = diff.select(0, ids).map_err(|err| {
        format!("{tool}: {err}; the file may have changed since the edit was proposed")
    })?;
    let text = diff.apply(&numbers);
    let total = diff.hunk_count();
    let stat = LineDiff::new(old, &text).stat();
    let applied = match ids.len() {
        0 => String::new(),
        _ => format!(": {}", ids.join(", ")),
    };
    Ok((
        text,
        format!(
            "({stat}; applied {} of {total} hunks{applied})",
            numbers.len()
        ),
    ))
}

/// Runs file work on the blocking pool. Checks for an interrupted turn before starting,
/// then always waits for the job (see the module docs).
pub(super) async fn blocking<T, F>(
    tool: &'static str,
    cancel: &CancellationToken,
    job: F,
) -> Result<T, ToolOutput>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, String> + Send + 'static,
{
    if cancel.is_cancelled() {
        return Err(ToolOutput::error(format!("{tool}: cancelled")));
    }
    match tokio::task::spawn_blocking(job).await {
        Ok(result) => result.map_err(ToolOutput::error),
        Err(err) => Err(ToolOutput::error(format!("{tool}: internal error: {err}"))),
    }
}

/// `1 line`, `2 lines`.
pub(super) fn lines(count: usize) -> String {
    format!("{count} line{}", if count == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_without_the_file_system() {
        let cases = [
            ("/a/./b/../c", "/a/c"),
            ("/../x", "/x"),
            ("/a/b/../../..", "/"),
            ("a/../../b", "../b"),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize_lexically(Path::new(input)), Path::new(expected));
        }
    }

    #[test]
    fn targets_are_absolute_and_shown_relative() {
        let ctx = ToolContext::detached(PathBuf::from("/work/p"));
        let target = Target::new(&ctx, "src/../lib.rs");
        assert_eq!(target.abs, Path::new("/work/p/lib.rs"));
        assert_eq!(target.shown, "lib.rs");
        let outside = Target::new(&ctx, "../q/x");
        assert_eq!(outside.abs, Path::new("/work/q/x"));
        assert_eq!(outside.shown, "/work/q/x");
    }
}
