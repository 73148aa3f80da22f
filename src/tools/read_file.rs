//! `read_file`: a window of a text file, with line numbers.
//!
//! Why it looks the way it does:
//! - `cat -n` numbering (`{:>6}\t{text}`) is the format models are most used to; the
//!   numbers let the model cite and page by line without counting.
//! - The file is streamed, never loaded: lines before the window are skipped with a
//!   bounded buffer, and lines after it are only counted, so a multi-GB log (even one
//!   with no newline at all) costs memory proportional to the window, not the file.
//! - The total line count is always known, which makes the continuation note exact
//!   (`offset=` to call next) and lets an offset past the end say how long the file is.
//! - Limits (2000 lines, 2000 chars per line, 256 KiB in all) keep one call from
//!   flooding the context; every limit that bites says so in the output.
//! - A NUL byte in the first 8 KiB marks a binary file (the same heuristic as git and
//!   ripgrep); showing one would only waste context. Other bad UTF-8 is shown lossily.
//! - A trailing `\r` is dropped, so CRLF files read like any other.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Cursor, Read};
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

const NAME: &str = "read_file";
const DEFAULT_LIMIT: u64 = 2000;
const MAX_LINE_CHARS: usize = 2000;
/// Enough bytes for `MAX_LINE_CHARS` characters of any width, plus one to tell a cut.
const MAX_LINE_BYTES: usize = MAX_LINE_CHARS * 4 + 4;
const MAX_OUTPUT_BYTES: usize = 256 * 1024;
const BINARY_SNIFF_BYTES: u64 = 8 * 1024;
const TRUNCATED_LINE: &str = "… [truncated at 2000 chars]";
/// Lines skipped or counted between two looks at the cancellation token.
const CANCEL_CHECK_LINES: u64 = 4096;

/// The `read_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFile;

impl Tool for ReadFile {
    fn describe(&self, args: &Value, cwd: &std::path::Path) -> CallCard {
        let Some(path) = string_arg(args, "path") else {
            return CallCard::named("read_file");
        };
        let mut card = CallCard::of(
            CallKind::Read,
            format!("Read {}", shown_path(cwd, path)),
            Some(shown_path(cwd, path)),
            format!("Reading {path}"),
        );
        card.line = args
            .get("offset")
            .and_then(Value::as_u64)
            .and_then(|line| u32::try_from(line).ok());
        card
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: "Read a text file. Output is in `cat -n` style: every line is \
                prefixed by its 1-based line number (right-aligned to 6 columns) and a tab; \
                that prefix is not part of the file. Returns at most `limit` lines (default \
                2000) starting at line `offset` (default 1). When more lines follow, the \
                output ends with a note like `[lines 1-2000 of 5000 shown; call read_file \
                with offset=2001 to continue]`. Lines longer than 2000 characters are cut \
                and marked `… [truncated at 2000 chars]`; the whole output is capped at \
                256 KiB (a note then says where to continue). An empty file reads as \
                `(empty file)`. Binary files are refused; use list_dir for directories \
                and grep to find where something is before reading large files."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to read: relative to the working directory, or absolute."
                    },
                    "offset": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "1-based number of the first line to return. Default 1."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Maximum number of lines to return. Default 2000."
                    }
                },
                "required": ["path"],
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
            let path = resolve(&ctx, &request.path);
            let shown = display_path(&ctx.cwd, &path);
            let cancel = ctx.cancel.clone();
            run_blocking(NAME, ctx.cancel, move || {
                match read(&path, &shown, request.window, &cancel) {
                    Ok(text) => ToolOutput::ok(text),
                    Err(message) => ToolOutput::error(message),
                }
            })
            .await
        })
    }
}

struct Request {
    path: String,
    window: Window,
}

/// Which lines to show: `offset` is 1-based, `limit` at least 1.
#[derive(Debug, Clone, Copy)]
struct Window {
    offset: u64,
    limit: u64,
}

impl Request {
    fn parse(value: &Value) -> Result<Self, String> {
        let args = Args::new(NAME, value)?;
        let path = args.required_str("path")?.to_owned();
        // Models used to 0-based indices send 0; reading from the start is what they mean.
        let offset = args.optional_u64("offset")?.unwrap_or(1).max(1);
        let limit = args.optional_u64("limit")?.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 {
            return Err(format!("{NAME}: argument \"limit\" must be at least 1"));
        }
        Ok(Self {
            path,
            window: Window { offset, limit },
        })
    }
}

fn read(
    path: &Path,
    shown: &str,
    window: Window,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let io_error = |err: io::Error| format!("{NAME}: cannot read {shown}: {err}");
    let metadata = match fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Err(format!("{NAME}: no such file: {shown}"));
        }
        Err(err) => return Err(io_error(err)),
    };
    if metadata.is_dir() {
        return Err(format!(
            "{NAME}: {shown} is a directory; use list_dir to see its entries"
        ));
    }
    // FIFOs and devices could block forever or never end.
    if !metadata.is_file() {
        return Err(format!("{NAME}: {shown} is not a regular file"));
    }

    let mut file = File::open(path).map_err(io_error)?;
    let mut head = Vec::new();
    (&mut file)
        .take(BINARY_SNIFF_BYTES)
        .read_to_end(&mut head)
        .map_err(io_error)?;
    if head.is_empty() {
        return Ok("(empty file)".to_owned());
    }
    if head.contains(&0) {
        return Err(format!("{NAME}: {shown} is a binary file"));
    }

    let mut reader = BufReader::with_capacity(64 * 1024, Cursor::new(head).chain(file));
    match render(&mut reader, window, cancel).map_err(io_error)? {
        Rendered::Text(text) => Ok(text),
        Rendered::PastEnd { total } => Err(format!(
            "{NAME}: offset {} is past the end of {shown}, which has {total} line{}",
            window.offset,
            if total == 1 { "" } else { "s" }
        )),
    }
}

enum Rendered {
    Text(String),
    PastEnd { total: u64 },
}

/// Formats the window of a non-empty text stream and counts the lines after it.
fn render(
    reader: &mut impl BufRead,
    window: Window,
    cancel: &CancellationToken,
) -> io::Result<Rendered> {
    let mut buf = Vec::new();
    // Lines consumed from the reader so far.
    let mut consumed: u64 = 0;
    while consumed + 1 < window.offset {
        if read_line(reader, &mut buf, 0)?.is_none() {
            return Ok(Rendered::PastEnd { total: consumed });
        }
        consumed += 1;
        check_cancel(consumed, cancel)?;
    }

    let last_wanted = window.offset.saturating_add(window.limit - 1);
    let mut out = String::new();
    let mut shown_through = consumed;
    let mut capped = false;
    while consumed < last_wanted {
        let Some(full_len) = read_line(reader, &mut buf, MAX_LINE_BYTES)? else {
            break;
        };
        consumed += 1;
        let entry = format!("{consumed:>6}\t{}\n", line_text(&mut buf, full_len));
        if out.len() + entry.len() > MAX_OUTPUT_BYTES && !out.is_empty() {
            capped = true;
            break;
        }
        out.push_str(&entry);
        shown_through = consumed;
    }
    if out.is_empty() {
        return Ok(Rendered::PastEnd { total: consumed });
    }

    let total = consumed + count_lines(reader, cancel)?;
    out.pop(); // the last line's newline
    if shown_through < total {
        out.push_str(&format!(
            "\n[{}lines {}-{shown_through} of {total} shown; call read_file with offset={} to continue]",
            if capped { "output capped at 256 KiB; " } else { "" },
            window.offset,
            shown_through + 1,
        ));
    }
    Ok(Rendered::Text(out))
}

/// The displayable text of a line read by [`read_line`]: lossy UTF-8, without a
/// trailing `\r`, cut at `MAX_LINE_CHARS` with a marker.
fn line_text(buf: &mut Vec<u8>, full_len: usize) -> String {
    let complete = full_len == buf.len();
    if complete && buf.last() == Some(&b'\r') {
        buf.pop();
    }
    let text = String::from_utf8_lossy(buf);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}{TRUNCATED_LINE}", &text[..cut]),
        None if !complete => format!("{text}{TRUNCATED_LINE}"),
        None => text.into_owned(),
    }
}

/// Reads the next line into `buf` without its `\n`, keeping at most `cap` bytes and
/// skipping the rest of the line. Returns the line's full length in bytes, or `None`
/// at the end of the stream.
fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> io::Result<Option<usize>> {
    buf.clear();
    let mut full_len = 0;
    let mut any = false;
    loop {
        let chunk = fill(reader)?;
        if chunk.is_empty() {
            return Ok(any.then_some(full_len));
        }
        any = true;
        let newline = chunk.iter().position(|&byte| byte == b'\n');
        let content = &chunk[..newline.unwrap_or(chunk.len())];
        let room = cap.saturating_sub(buf.len());
        buf.extend_from_slice(&content[..content.len().min(room)]);
        full_len += content.len();
        let used = newline.map_or(chunk.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(Some(full_len));
        }
    }
}

/// Counts the lines left in the stream; a last line without `\n` counts too.
fn count_lines(reader: &mut impl BufRead, cancel: &CancellationToken) -> io::Result<u64> {
    let mut count: u64 = 0;
    let mut last_byte = None;
    loop {
        let chunk = fill(reader)?;
        let Some(&last) = chunk.last() else { break };
        last_byte = Some(last);
        count += chunk.iter().filter(|&&byte| byte == b'\n').count() as u64;
        let len = chunk.len();
        reader.consume(len);
        if cancel.is_cancelled() {
            return Err(io::Error::other("cancelled"));
        }
    }
    Ok(count + u64::from(last_byte.is_some_and(|byte| byte != b'\n')))
}

/// `fill_buf`, retrying reads interrupted by a signal.
fn fill(reader: &mut impl BufRead) -> io::Result<&[u8]> {
    loop {
        match reader.fill_buf() {
            Ok(_) => break,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    reader.fill_buf()
}

fn check_cancel(lines: u64, cancel: &CancellationToken) -> io::Result<()> {
    if lines.is_multiple_of(CANCEL_CHECK_LINES) && cancel.is_cancelled() {
        return Err(io::Error::other("cancelled"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::context;

    async fn call(dir: &Path, args: Value) -> ToolOutput {
        ReadFile.run(args, context(dir)).await
    }

    fn numbered(lines: impl IntoIterator<Item = (u64, &'static str)>) -> String {
        lines
            .into_iter()
            .map(|(number, text)| format!("{number:>6}\t{text}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn lines_file(dir: &Path, name: &str, count: usize) {
        let text: String = (1..=count).map(|n| format!("line {n}\n")).collect();
        fs::write(dir.join(name), text).unwrap();
    }

    #[tokio::test]
    async fn reads_whole_small_file_cat_n_style() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.txt"), "alpha\n\tbeta\r\ngamma").unwrap();
        let out = call(dir.path(), json!({"path": "a.txt"})).await;
        assert_eq!(
            out,
            ToolOutput::ok(numbered([(1, "alpha"), (2, "\tbeta"), (3, "gamma")]))
        );
    }

    #[tokio::test]
    async fn window_and_continuation_note() {
        let dir = tempfile::tempdir().unwrap();
        lines_file(dir.path(), "n.txt", 10);
        let out = call(
            dir.path(),
            json!({"path": "n.txt", "offset": 3, "limit": 2}),
        )
        .await;
        let expected = format!(
            "{}\n[lines 3-4 of 10 shown; call read_file with offset=5 to continue]",
            numbered([(3, "line 3"), (4, "line 4")])
        );
        assert_eq!(out, ToolOutput::ok(expected));

        // The last window has no note; offset 0 means the start.
        let out = call(dir.path(), json!({"path": "n.txt", "offset": 9})).await;
        assert_eq!(
            out,
            ToolOutput::ok(numbered([(9, "line 9"), (10, "line 10")]))
        );
        let out = call(
            dir.path(),
            json!({"path": "n.txt", "offset": 0, "limit": 1}),
        )
        .await;
        assert!(
            out.output
                .starts_with("     1\tline 1\n[lines 1-1 of 10 shown")
        );
    }

    #[tokio::test]
    async fn default_limit_is_2000_lines() {
        let dir = tempfile::tempdir().unwrap();
        lines_file(dir.path(), "big.txt", 5000);
        let out = call(dir.path(), json!({"path": "big.txt"})).await;
        assert!(!out.is_error);
        assert!(out.output.contains("  2000\tline 2000\n"));
        assert!(!out.output.contains("line 2001"));
        assert!(out.output.ends_with(
            "[lines 1-2000 of 5000 shown; call read_file with offset=2001 to continue]"
        ));
    }

    #[tokio::test]
    async fn offset_past_end_says_how_long_the_file_is() {
        let dir = tempfile::tempdir().unwrap();
        lines_file(dir.path(), "n.txt", 3);
        let out = call(dir.path(), json!({"path": "n.txt", "offset": 4})).await;
        assert_eq!(
            out,
            ToolOutput::error("read_file: offset 4 is past the end of n.txt, which has 3 lines")
        );
        let out = call(dir.path(), json!({"path": "n.txt", "offset": 100})).await;
        assert!(out.is_error && out.output.ends_with("which has 3 lines"));
    }

    #[tokio::test]
    async fn empty_binary_directory_missing_and_special_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("empty"), "").unwrap();
        fs::write(dir.path().join("blob.bin"), b"text\0more").unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();

        let out = call(dir.path(), json!({"path": "empty"})).await;
        assert_eq!(out, ToolOutput::ok("(empty file)"));
        let out = call(dir.path(), json!({"path": "blob.bin"})).await;
        assert_eq!(
            out,
            ToolOutput::error("read_file: blob.bin is a binary file")
        );
        let out = call(dir.path(), json!({"path": "sub"})).await;
        assert_eq!(
            out,
            ToolOutput::error("read_file: sub is a directory; use list_dir to see its entries")
        );
        let out = call(dir.path(), json!({"path": "nope/x.txt"})).await;
        assert_eq!(
            out,
            ToolOutput::error("read_file: no such file: nope/x.txt")
        );
        #[cfg(unix)]
        {
            let out = call(dir.path(), json!({"path": "/dev/null"})).await;
            assert_eq!(
                out,
                ToolOutput::error("read_file: /dev/null is not a regular file")
            );
        }
    }

    #[tokio::test]
    async fn invalid_utf8_is_lossy_and_long_lines_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = b"ok \xff\xfe end\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', 10_000));
        bytes.extend(b"\nlast\n");
        fs::write(dir.path().join("mixed.txt"), bytes).unwrap();
        let out = call(dir.path(), json!({"path": "mixed.txt"})).await;
        assert!(!out.is_error);
        let lines: Vec<&str> = out.output.lines().collect();
        assert_eq!(lines[0], "     1\tok \u{fffd}\u{fffd} end");
        assert_eq!(
            lines[1],
            format!("     2\t{}{TRUNCATED_LINE}", "x".repeat(2000))
        );
        assert_eq!(lines[2], "     3\tlast");
        assert_eq!(lines.len(), 3);
    }

    #[tokio::test]
    async fn output_is_capped_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let line = "y".repeat(1999);
        let text: String = (0..300).map(|_| format!("{line}\n")).collect();
        fs::write(dir.path().join("wide.txt"), text).unwrap();
        let out = call(dir.path(), json!({"path": "wide.txt"})).await;
        assert!(!out.is_error);
        assert!(out.output.len() <= MAX_OUTPUT_BYTES + 200);
        // Each line takes 2007 bytes, so 130 fit in 256 KiB.
        assert!(out.output.ends_with(
            "[output capped at 256 KiB; lines 1-130 of 300 shown; \
             call read_file with offset=131 to continue]"
        ));
    }

    #[tokio::test]
    async fn absolute_paths_outside_cwd_are_shown_absolute() {
        let cwd = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let target = other.path().join("gone.txt");
        let out = call(cwd.path(), json!({"path": target.to_str().unwrap()})).await;
        assert_eq!(
            out,
            ToolOutput::error(format!("read_file: no such file: {}", target.display()))
        );
        fs::write(&target, "hi\n").unwrap();
        let out = call(cwd.path(), json!({"path": target.to_str().unwrap()})).await;
        assert_eq!(out, ToolOutput::ok("     1\thi"));
    }

    #[tokio::test]
    async fn argument_errors() {
        let dir = tempfile::tempdir().unwrap();
        let out = call(dir.path(), json!({})).await;
        assert_eq!(
            out,
            ToolOutput::error("read_file: missing required argument \"path\"")
        );
        let out = call(dir.path(), json!({"path": "a", "offset": "3"})).await;
        assert_eq!(
            out,
            ToolOutput::error(
                "read_file: argument \"offset\" must be a non-negative integer, got string \"3\""
            )
        );
        let out = call(dir.path(), json!({"path": "a", "limit": 0})).await;
        assert_eq!(
            out,
            ToolOutput::error("read_file: argument \"limit\" must be at least 1")
        );
    }

    #[test]
    fn read_line_bounds_memory_and_reports_length() {
        let mut reader =
            BufReader::with_capacity(16, Cursor::new(b"0123456789abcdef0123\nxy".to_vec()));
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut reader, &mut buf, 5).unwrap(), Some(20));
        assert_eq!(buf, b"01234");
        assert_eq!(read_line(&mut reader, &mut buf, 5).unwrap(), Some(2));
        assert_eq!(buf, b"xy");
        assert_eq!(read_line(&mut reader, &mut buf, 5).unwrap(), None);
    }
}
