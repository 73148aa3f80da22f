//! `grep`: regex search over a file or a tree, ripgrep style.
//!
//! Why it looks the way it does:
//! - The tree is walked with `ignore` the way ripgrep walks it: `.gitignore`, `.ignore`
//!   and git excludes are honoured (also outside a git repository, since a fresh or
//!   unpacked project still has its `.gitignore`), hidden files and directories are
//!   skipped and symlinks are not followed. Build output and vendored code are almost
//!   never what the model is looking for, and they would crowd out real matches.
//! - `glob` only narrows the search. It is checked against the files the walk yields,
//!   instead of being an `ignore` override, because overrides re-include ignored and
//!   hidden files, and `glob: "*.rs"` dumping `target/` would surprise everyone. A glob
//!   without `/` matches file names (`*.rs`); one with `/` matches the path relative to
//!   the searched directory or to the working directory, whichever the model meant.
//! - The walk is sequential and sorted by name, so the same search gives the same
//!   output, and it stops at the 501st match instead of searching the rest.
//! - Binary files (a NUL byte, as ripgrep detects them) are skipped entirely: a
//!   match in one is noise. A file named explicitly says so instead of silently failing.
//! - `path:line:text` is the format models know from `grep -n`/`rg`, and `path` is
//!   exactly what `read_file` accepts next. Lines are cut at 500 characters so a
//!   minified file cannot fill the context; the 500-match cap bounds the rest.
//! - Files that cannot be read (permission denied, a line over 64 MiB) are skipped and
//!   counted in a note rather than failing the whole search.

use std::io;
use std::path::Path;

use futures_util::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::RegexMatcher;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::WalkBuilder;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::args::Args;
use super::{display_path, resolve, run_blocking};
use crate::engine::ports::model::ToolSpec;
use crate::engine::{DescribeCall, shown_path, string_arg};
use crate::engine::{Tool, ToolContext, ToolOutput};
use crate::protocol::{CallCard, CallKind};

const NAME: &str = "grep";
const MAX_MATCHES: usize = 500;
const MAX_LINE_CHARS: usize = 500;
/// Enough bytes for `MAX_LINE_CHARS` characters of any width, plus one to tell a cut.
const MAX_LINE_BYTES: usize = MAX_LINE_CHARS * 4 + 4;
/// The longest line the searcher will hold; longer lines fail that file only.
const HEAP_LIMIT: usize = 64 * 1024 * 1024;
const TRUNCATED_LINE: &str = "… [truncated]";
const NO_MATCHES: &str = "No matches found.";

/// The `grep` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Grep;

impl Tool for Grep {
    fn describe(&self, args: &Value, cwd: &std::path::Path) -> CallCard {
        let pattern = string_arg(args, "pattern").unwrap_or_default();
        let within = string_arg(args, "path")
            .map(|path| shown_path(cwd, path))
            .unwrap_or_else(|| cwd.display().to_string());
        let activity = if pattern.is_empty() {
            "Searching".to_owned()
        } else {
            format!("Searching for {pattern}")
        };
        CallCard::of(
            CallKind::Search,
            format!("Search {pattern:?} in {within}"),
            None,
            activity,
        )
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: "Search file contents for a regular expression (Rust regex \
                syntax, like ripgrep: `\\bfoo\\(`, `(?i)error`, `fn \\w+_test`). Searches \
                one file, or every file under a directory while skipping what .gitignore \
                ignores, hidden files and binary files. Output is one match per line as \
                `path:line_number:line_text`, paths relative to the working directory, \
                files in name order; `No matches found.` when nothing matches. Line text \
                is cut at 500 characters; the search stops after 500 matches with a note \
                to narrow it. Patterns match within one line (no `\\n`)."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "description": "Regular expression to search for (Rust regex syntax). Escape literal metacharacters such as `(`, `.`, `[`; use `(?i)` for case-insensitive search."
                    },
                    "path": {
                        "type": "string",
                        "description": "File or directory to search: relative to the working directory, or absolute. Default \".\" (the working directory)."
                    },
                    "glob": {
                        "type": "string",
                        "description": "Only search files matching this glob, e.g. \"*.rs\", \"*.{ts,tsx}\", \"src/**/*.py\"; prefix with ! to exclude instead, e.g. \"!*_test.go\". Without a `/` it matches file names; with one, paths relative to `path` or to the working directory."
                    }
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let request = match Request::parse(&args) {
                Ok(request) => request,
                Err(message) => return ToolOutput::error(message),
            };
            let root = resolve(&ctx, &request.path);
            let cancel = ctx.cancel.clone();
            run_blocking(NAME, ctx.cancel, move || {
                match search(&request, &root, &ctx.cwd, &cancel) {
                    Ok(text) => ToolOutput::ok(text),
                    Err(message) => ToolOutput::error(message),
                }
            })
            .await
        })
    }
}

struct Request {
    pattern: String,
    path: String,
    glob: Option<String>,
}

impl Request {
    fn parse(value: &Value) -> Result<Self, String> {
        let args = Args::new(NAME, value)?;
        Ok(Self {
            pattern: args.required_str("pattern")?.to_owned(),
            path: args.optional_str("path")?.unwrap_or(".").to_owned(),
            glob: args.optional_str("glob")?.map(str::to_owned),
        })
    }
}

fn search(
    request: &Request,
    root: &Path,
    cwd: &Path,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let matcher = RegexMatcher::new_line_matcher(&request.pattern)
        .map_err(|err| format!("{NAME}: invalid regex: {err}"))?;
    let filter = request.glob.as_deref().map(GlobFilter::new).transpose()?;
    let shown_root = display_path(cwd, root);
    let metadata = match std::fs::metadata(root) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(format!("{NAME}: no such file or directory: {shown_root}"));
        }
        Err(err) => return Err(format!("{NAME}: cannot search {shown_root}: {err}")),
    };

    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(HEAP_LIMIT))
        .build();
    let mut report = Report::default();

    if !metadata.is_dir() && !metadata.is_file() {
        // A FIFO or a device could block forever or never end.
        return Err(format!("{NAME}: {shown_root} is not a regular file"));
    }
    if metadata.is_file() {
        // Named explicitly: searched whatever its name, and told apart if binary.
        match search_file(&mut searcher, &matcher, root, &shown_root, &mut report) {
            Ok(FileResult::Binary) => {
                return Ok(format!("{NO_MATCHES} ({shown_root} is a binary file)"));
            }
            Ok(FileResult::Searched) => {}
            Err(err) => return Err(format!("{NAME}: cannot search {shown_root}: {err}")),
        }
        return Ok(report.finish());
    }

    let walk = WalkBuilder::new(root)
        .require_git(false)
        .current_dir(cwd)
        .sort_by_file_name(|a, b| a.cmp(b))
        .build();
    for entry in walk {
        if cancel.is_cancelled() {
            return Err(format!("{NAME}: cancelled"));
        }
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                report.failed(err.to_string());
                continue;
            }
        };
        if !entry.file_type().is_some_and(|kind| kind.is_file()) {
            continue;
        }
        let path = entry.path();
        if let Some(filter) = &filter
            && !filter.allows(path, root, cwd)
        {
            continue;
        }
        let shown = display_path(cwd, path);
        if let Err(err) = search_file(&mut searcher, &matcher, path, &shown, &mut report) {
            report.failed(format!("{shown}: {err}"));
        }
        if report.stopped {
            break;
        }
    }
    Ok(report.finish())
}

/// The matches so far and what to say about the rest.
#[derive(Default)]
struct Report {
    lines: Vec<String>,
    /// A match beyond `MAX_MATCHES` was found; the search ended there.
    stopped: bool,
    failures: usize,
    first_failure: Option<String>,
}

impl Report {
    fn failed(&mut self, error: String) {
        self.failures += 1;
        self.first_failure.get_or_insert(error);
    }

    fn finish(self) -> String {
        let mut out = if self.lines.is_empty() {
            vec![NO_MATCHES.to_owned()]
        } else {
            self.lines
        };
        if self.stopped {
            out.push(format!(
                "[stopped after {MAX_MATCHES} matches; narrow the pattern, path or glob]"
            ));
        }
        if let Some(first) = self.first_failure {
            out.push(format!(
                "[{} path{} could not be searched, e.g. {first}]",
                self.failures,
                if self.failures == 1 { "" } else { "s" }
            ));
        }
        out.join("\n")
    }
}

enum FileResult {
    Searched,
    Binary,
}

/// Searches one file, adding its matches to `report` unless it turns out binary.
fn search_file(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    path: &Path,
    shown: &str,
    report: &mut Report,
) -> io::Result<FileResult> {
    let mut sink = FileSink {
        shown,
        budget: MAX_MATCHES - report.lines.len(),
        found: Vec::new(),
        more: false,
        binary: false,
    };
    let outcome = searcher.search_path(matcher, path, &mut sink);
    if sink.binary {
        return Ok(FileResult::Binary);
    }
    report.lines.append(&mut sink.found);
    report.stopped |= sink.more;
    outcome.map(|()| FileResult::Searched)
}

/// Collects one file's matches, so that a file found to be binary part-way can be
/// dropped whole.
struct FileSink<'a> {
    shown: &'a str,
    budget: usize,
    found: Vec<String>,
    more: bool,
    binary: bool,
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> io::Result<bool> {
        if self.found.len() >= self.budget {
            self.more = true;
            return Ok(false);
        }
        let number = found.line_number().unwrap_or(0);
        self.found.push(format!(
            "{}:{number}:{}",
            self.shown,
            line_text(found.bytes())
        ));
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> io::Result<bool> {
        self.binary = true;
        Ok(false)
    }
}

/// A matched line for display: without its line ending, lossy UTF-8, cut with a marker.
fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let head = &bytes[..bytes.len().min(MAX_LINE_BYTES)];
    let text = String::from_utf8_lossy(head);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}{TRUNCATED_LINE}", &text[..cut]),
        None if head.len() < bytes.len() => format!("{text}{TRUNCATED_LINE}"),
        None => text.into_owned(),
    }
}

/// The `glob` argument: see the module docs for how it matches.
struct GlobFilter {
    matcher: GlobMatcher,
    negated: bool,
    names_only: bool,
}

impl GlobFilter {
    fn new(glob: &str) -> Result<Self, String> {
        let (negated, pattern) = match glob.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, glob),
        };
        let pattern = pattern.trim_start_matches("./").trim_start_matches('/');
        if pattern.is_empty() {
            return Err(format!("{NAME}: glob {glob:?} matches no file"));
        }
        let matcher = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|err| format!("{NAME}: invalid glob: {err}"))?
            .compile_matcher();
        Ok(Self {
            matcher,
            negated,
            names_only: !pattern.contains('/'),
        })
    }

    fn allows(&self, path: &Path, root: &Path, cwd: &Path) -> bool {
        let hit = if self.names_only {
            path.file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        } else {
            [root, cwd].into_iter().any(|base| {
                path.strip_prefix(base)
                    .is_ok_and(|rel| self.matcher.is_match(rel))
            })
        };
        hit != self.negated
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::context;
    use std::fs;

    async fn call(dir: &Path, args: Value) -> ToolOutput {
        Grep.run(args, context(dir)).await
    }

    /// A small project: sources, an ignored build dir, a hidden dir and a binary file.
    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("src/net")).unwrap();
        fs::create_dir_all(root.join("build")).unwrap();
        fs::create_dir_all(root.join(".cache")).unwrap();
        fs::write(root.join(".gitignore"), "build/\n*.log\n").unwrap();
        fs::write(root.join("src/main.rs"), "fn main() {\n    needle();\n}\n").unwrap();
        fs::write(root.join("src/net/conn.rs"), "// needle here\r\n").unwrap();
        fs::write(root.join("src/app.ts"), "const needle = 1;\n").unwrap();
        fs::write(root.join("notes.md"), "no match\nthe needle\n").unwrap();
        fs::write(root.join("build/out.rs"), "needle\n").unwrap();
        fs::write(root.join("debug.log"), "needle\n").unwrap();
        fs::write(root.join(".cache/c.rs"), "needle\n").unwrap();
        fs::write(root.join("blob.bin"), b"needle\0\x01\x02").unwrap();
        dir
    }

    #[tokio::test]
    async fn walks_sorted_honouring_gitignore_hidden_and_binary() {
        let dir = project();
        let out = call(dir.path(), json!({"pattern": "needle"})).await;
        let expected = [
            "notes.md:2:the needle",
            "src/app.ts:1:const needle = 1;",
            "src/main.rs:2:    needle();",
            "src/net/conn.rs:1:// needle here",
        ];
        assert_eq!(out, ToolOutput::ok(expected.join("\n")));
    }

    #[tokio::test]
    async fn glob_filters_by_name_or_relative_path() {
        let dir = project();
        let out = call(dir.path(), json!({"pattern": "needle", "glob": "*.rs"})).await;
        assert_eq!(
            out,
            ToolOutput::ok("src/main.rs:2:    needle();\nsrc/net/conn.rs:1:// needle here")
        );
        let out = call(dir.path(), json!({"pattern": "needle", "glob": "src/*.rs"})).await;
        assert_eq!(out, ToolOutput::ok("src/main.rs:2:    needle();"));
        // Relative to the searched directory as well as to the cwd.
        let out = call(
            dir.path(),
            json!({"pattern": "needle", "path": "src", "glob": "net/**"}),
        )
        .await;
        assert_eq!(out, ToolOutput::ok("src/net/conn.rs:1:// needle here"));
        let out = call(
            dir.path(),
            json!({"pattern": "needle", "glob": "*.{ts,md}"}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::ok("notes.md:2:the needle\nsrc/app.ts:1:const needle = 1;")
        );
        let out = call(dir.path(), json!({"pattern": "needle", "glob": "!src/**"})).await;
        assert_eq!(out, ToolOutput::ok("notes.md:2:the needle"));
        let out = call(dir.path(), json!({"pattern": "needle", "glob": "a{"})).await;
        assert!(
            out.is_error && out.output.starts_with("grep: invalid glob:"),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn explicit_file_and_subdirectory_paths() {
        let dir = project();
        let out = call(dir.path(), json!({"pattern": "needle", "path": "src/net"})).await;
        assert_eq!(out, ToolOutput::ok("src/net/conn.rs:1:// needle here"));
        // Absolute paths inside the cwd still print relative; a hidden directory named
        // explicitly is searched.
        let out = call(
            dir.path(),
            json!({"pattern": "needle", "path": dir.path().join("src/net")}),
        )
        .await;
        assert_eq!(out, ToolOutput::ok("src/net/conn.rs:1:// needle here"));
        let out = call(dir.path(), json!({"pattern": "needle", "path": ".cache"})).await;
        assert_eq!(out, ToolOutput::ok(".cache/c.rs:1:needle"));
        #[cfg(unix)]
        {
            let out = call(dir.path(), json!({"pattern": "x", "path": "/dev/null"})).await;
            assert_eq!(
                out,
                ToolOutput::error("grep: /dev/null is not a regular file")
            );
        }
        // An explicit file is searched even when ignored; a binary one says so.
        let out = call(
            dir.path(),
            json!({"pattern": "needle", "path": "debug.log"}),
        )
        .await;
        assert_eq!(out, ToolOutput::ok("debug.log:1:needle"));
        let out = call(dir.path(), json!({"pattern": "needle", "path": "blob.bin"})).await;
        assert_eq!(
            out,
            ToolOutput::ok("No matches found. (blob.bin is a binary file)")
        );
        let other = tempfile::tempdir().unwrap();
        let out = call(
            other.path(),
            json!({"pattern": "needle", "path": dir.path().join("notes.md")}),
        )
        .await;
        let expected = format!("{}:2:the needle", dir.path().join("notes.md").display());
        assert_eq!(out, ToolOutput::ok(expected));
    }

    #[tokio::test]
    async fn no_match_bad_regex_missing_path_and_arguments() {
        let dir = project();
        let out = call(dir.path(), json!({"pattern": "haystack"})).await;
        assert_eq!(out, ToolOutput::ok("No matches found."));
        let out = call(dir.path(), json!({"pattern": "fn ("})).await;
        assert!(
            out.is_error && out.output.starts_with("grep: invalid regex:"),
            "{out:?}"
        );
        let out = call(dir.path(), json!({"pattern": "x", "path": "nope"})).await;
        assert_eq!(
            out,
            ToolOutput::error("grep: no such file or directory: nope")
        );
        let out = call(dir.path(), json!({"path": "."})).await;
        assert_eq!(
            out,
            ToolOutput::error("grep: missing required argument \"pattern\"")
        );
        let out = call(dir.path(), json!({"pattern": "x", "glob": 3})).await;
        assert_eq!(
            out,
            ToolOutput::error("grep: argument \"glob\" must be a string, got number 3")
        );
    }

    #[tokio::test]
    async fn stops_after_500_matches_and_cuts_long_lines() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..300).map(|n| format!("hit {n}\n")).collect();
        fs::write(dir.path().join("a.txt"), &text).unwrap();
        fs::write(dir.path().join("b.txt"), &text).unwrap();
        let wide = format!("hit {}\n", "z".repeat(2000));
        fs::write(dir.path().join("c.txt"), wide).unwrap();
        let out = call(dir.path(), json!({"pattern": "^hit"})).await;
        let lines: Vec<&str> = out.output.lines().collect();
        assert_eq!(lines.len(), 501);
        assert_eq!(lines[0], "a.txt:1:hit 0");
        assert_eq!(lines[499], "b.txt:200:hit 199");
        assert_eq!(
            lines[500],
            "[stopped after 500 matches; narrow the pattern, path or glob]"
        );

        let out = call(dir.path(), json!({"pattern": "hit", "path": "c.txt"})).await;
        let expected = format!("c.txt:1:hit {}{TRUNCATED_LINE}", "z".repeat(496));
        assert_eq!(out, ToolOutput::ok(expected));
    }

    #[tokio::test]
    async fn exactly_500_matches_has_no_note_and_invalid_utf8_is_lossy() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..500).map(|n| format!("hit {n}\n")).collect();
        fs::write(dir.path().join("a.txt"), text).unwrap();
        let out = call(dir.path(), json!({"pattern": "hit"})).await;
        assert_eq!(out.output.lines().count(), 500);
        assert!(!out.output.contains("stopped"));

        fs::write(dir.path().join("a.txt"), b"caf\xe9 hit\n").unwrap();
        let out = call(dir.path(), json!({"pattern": "hit"})).await;
        assert_eq!(out, ToolOutput::ok("a.txt:1:caf\u{fffd} hit"));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn symlink_loops_are_harmless() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink("..", dir.path().join("d/up")).unwrap();
        std::os::unix::fs::symlink("self", dir.path().join("self")).unwrap();
        fs::write(dir.path().join("d/f.txt"), "needle\n").unwrap();
        let out = call(dir.path(), json!({"pattern": "needle"})).await;
        assert_eq!(out, ToolOutput::ok("d/f.txt:1:needle"));
    }
}
