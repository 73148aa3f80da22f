//! `list_dir`: the entries of one directory.
//!
//! Why it looks the way it does:
//! - One level only: the model explores top-down and picks where to look next; a
//!   recursive dump of a real project would drown the context (`grep` covers search).
//! - Nothing is hidden or filtered: the model asked about this directory, and dotfiles
//!   (`.github/`, `.env.example`) and ignored build output are often exactly what it
//!   wants to see. `grep` is where ignore rules apply.
//! - Sorted by name (byte order) so the same directory always reads the same.
//! - A trailing `/` marks directories and `name -> target` marks symlinks, as `ls -F`
//!   and `ls -l` do; links are not followed, so a link loop is just a line.
//! - At most 1000 entries. Only the first 1000 names in order are kept while reading,
//!   so even a directory with millions of entries costs bounded memory.

use std::cmp::Ordering;
use std::ffi::OsString;
use std::fs::{self, FileType};
use std::io;
use std::path::Path;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::args::Args;
use super::{display_path, resolve, run_blocking};
use crate::engine::ports::model::ToolSpec;
use crate::engine::{DescribeCall, shown_path, string_arg};
use crate::engine::{Tool, ToolContext, ToolOutput};
use crate::protocol::{CallCard, CallKind};

const NAME: &str = "list_dir";
const MAX_ENTRIES: usize = 1000;

/// The `list_dir` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListDir;

impl Tool for ListDir {
    fn describe(&self, args: &Value, cwd: &std::path::Path) -> CallCard {
        let path = string_arg(args, "path").unwrap_or(".");
        CallCard::of(
            CallKind::Search,
            format!("List {}", shown_path(cwd, path)),
            Some(shown_path(cwd, path)),
            format!("Listing {path}"),
        )
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: "List the entries of one directory (not recursive), one per line, \
                sorted by name. Directories end with `/`; symbolic links are shown as \
                `name -> target`. Hidden files are included and nothing is filtered by \
                .gitignore. At most 1000 entries are listed; a final note says how many \
                were left out. An empty directory lists as `(empty directory)`. Use \
                read_file to read a file and grep to search a whole tree."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "Directory to list: relative to the working directory (\".\" for the working directory itself), or absolute."
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let path = match Args::new(NAME, &args).and_then(|args| args.required_str("path")) {
                Ok(path) => resolve(&ctx, path),
                Err(message) => return ToolOutput::error(message),
            };
            let shown = display_path(&ctx.cwd, &path);
            let cancel = ctx.cancel.clone();
            run_blocking(NAME, ctx.cancel, move || {
                match list(&path, &shown, &cancel) {
                    Ok(text) => ToolOutput::ok(text),
                    Err(message) => ToolOutput::error(message),
                }
            })
            .await
        })
    }
}

struct Entry {
    name: OsString,
    file_type: Option<FileType>,
}

fn by_name(a: &Entry, b: &Entry) -> Ordering {
    a.name.cmp(&b.name)
}

fn list(dir: &Path, shown: &str, cancel: &CancellationToken) -> Result<String, String> {
    let io_error = |err: io::Error| format!("{NAME}: cannot list {shown}: {err}");
    match fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(metadata) if metadata.is_file() => {
            return Err(format!(
                "{NAME}: {shown} is a file, not a directory; use read_file to read it"
            ));
        }
        Ok(_) => return Err(format!("{NAME}: {shown} is not a directory")),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(format!("{NAME}: no such directory: {shown}"));
        }
        Err(err) => return Err(io_error(err)),
    }

    let mut kept: Vec<Entry> = Vec::new();
    let mut total: usize = 0;
    let mut unreadable: usize = 0;
    for entry in fs::read_dir(dir).map_err(io_error)? {
        let Ok(entry) = entry else {
            unreadable += 1;
            continue;
        };
        total += 1;
        kept.push(Entry {
            name: entry.file_name(),
            file_type: entry.file_type().ok(),
        });
        // Keep the smallest names only; sorting in batches bounds memory.
        if kept.len() == 2 * MAX_ENTRIES {
            if cancel.is_cancelled() {
                return Err(format!("{NAME}: cancelled"));
            }
            kept.select_nth_unstable_by(MAX_ENTRIES, by_name);
            kept.truncate(MAX_ENTRIES);
        }
    }
    kept.sort_unstable_by(by_name);
    kept.truncate(MAX_ENTRIES);

    let mut lines: Vec<String> = kept.iter().map(|entry| render(dir, entry)).collect();
    if lines.is_empty() && unreadable == 0 {
        return Ok("(empty directory)".to_owned());
    }
    if total > kept.len() {
        lines.push(format!(
            "[{} of {total} entries shown; {} more not listed]",
            kept.len(),
            total - kept.len()
        ));
    }
    if unreadable > 0 {
        lines.push(format!(
            "[{unreadable} entr{} could not be read]",
            if unreadable == 1 { "y" } else { "ies" }
        ));
    }
    Ok(lines.join("\n"))
}

fn render(dir: &Path, entry: &Entry) -> String {
    let name = entry.name.to_string_lossy();
    match entry.file_type {
        Some(kind) if kind.is_dir() => format!("{name}/"),
        Some(kind) if kind.is_symlink() => match fs::read_link(dir.join(&entry.name)) {
            Ok(target) => format!("{name} -> {}", target.display()),
            Err(_) => format!("{name} -> (unreadable link)"),
        },
        _ => name.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::context;

    async fn call(dir: &Path, args: Value) -> ToolOutput {
        ListDir.run(args, context(dir)).await
    }

    #[tokio::test]
    async fn lists_sorted_with_markers_and_hidden_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join("b.txt"), "b").unwrap();
        fs::write(root.join(".hidden"), "h").unwrap();
        fs::write(root.join(".gitignore"), "b.txt\n").unwrap();
        fs::create_dir(root.join("a_dir")).unwrap();
        fs::create_dir(root.join("c")).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("b.txt", root.join("link")).unwrap();
            std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        }
        let out = call(root, json!({"path": "."})).await;
        let mut expected = vec![".gitignore", ".hidden", "a_dir/", "b.txt", "c/"];
        if cfg!(unix) {
            expected.extend(["link -> b.txt", "loop -> loop"]);
        }
        assert_eq!(out, ToolOutput::ok(expected.join("\n")));
    }

    #[tokio::test]
    async fn empty_missing_and_not_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("empty")).unwrap();
        fs::write(dir.path().join("f.txt"), "x").unwrap();
        let out = call(dir.path(), json!({"path": "empty"})).await;
        assert_eq!(out, ToolOutput::ok("(empty directory)"));
        let out = call(dir.path(), json!({"path": "f.txt"})).await;
        assert_eq!(
            out,
            ToolOutput::error(
                "list_dir: f.txt is a file, not a directory; use read_file to read it"
            )
        );
        let out = call(dir.path(), json!({"path": "gone"})).await;
        assert_eq!(out, ToolOutput::error("list_dir: no such directory: gone"));
    }

    #[tokio::test]
    async fn caps_at_1000_entries_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..2500 {
            fs::write(dir.path().join(format!("f{n:04}")), "").unwrap();
        }
        let out = call(dir.path(), json!({"path": "."})).await;
        assert!(!out.is_error);
        let lines: Vec<&str> = out.output.lines().collect();
        assert_eq!(lines.len(), 1001);
        assert_eq!(lines[0], "f0000");
        assert_eq!(lines[999], "f0999");
        assert_eq!(
            lines[1000],
            "[1000 of 2500 entries shown; 1500 more not listed]"
        );
    }

    #[tokio::test]
    async fn absolute_path_and_argument_errors() {
        let cwd = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        fs::create_dir(other.path().join("inner")).unwrap();
        let out = call(cwd.path(), json!({"path": other.path().to_str().unwrap()})).await;
        assert_eq!(out, ToolOutput::ok("inner/"));

        let out = call(cwd.path(), json!({})).await;
        assert_eq!(
            out,
            ToolOutput::error("list_dir: missing required argument \"path\"")
        );
        let out = call(cwd.path(), json!({"path": ["a"]})).await;
        assert_eq!(
            out,
            ToolOutput::error("list_dir: argument \"path\" must be a string, got an array")
        );
    }
}
