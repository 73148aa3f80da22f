//! `edit_file`: replace an exact piece of text in an existing file.
//!
//! Why it looks the way it does:
//! - The `old_string`/`new_string` shape is the one models are trained on (Claude Code's
//!   Edit). An exact match is required, and it must be unique unless `replace_all`:
//!   a guessed or ambiguous edit fails with a message that says what to do (how many
//!   matches, add context or set `replace_all`) instead of changing the wrong place.
//! - Uniqueness counts overlapping occurrences (`aa` occurs twice in `aaa`), so "exactly
//!   once" really means one possible place.
//! - Models write `\n` line ends even when the file uses CRLF. When the text is not found
//!   as given but is found with CRLF line ends, the edit applies with CRLF on both sides
//!   so the file keeps its style.
//! - Problems are found at assessment (nobody is asked to approve an edit that cannot
//!   apply) and again at run time against the file as it is then.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::args::Args;
use super::diff::LineDiff;
use super::files::{self, Current, Target};
use crate::engine::ports::model::ToolSpec;
use crate::engine::{Assessment, Tool, ToolContext, ToolOutput};
use crate::engine::{DescribeCall, shown_path, string_arg};
use crate::protocol::{CallCard, CallKind};

const NAME: &str = "edit_file";

/// The `edit_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct EditFile;

/// One edit call's arguments, as read by the local tool and by the client-served one
/// (`delegated`).
pub(super) struct Request {
    pub path: String,
    old_string: String,
    new_string: String,
    replace_all: bool,
    /// Insert `new_string` after this line (0: at the start) instead of replacing text.
    /// Not in the schema: it is what Claude's text editor `insert` command becomes.
    insert_line: Option<u64>,
}

impl Request {
    pub(super) fn parse(value: &Value) -> Result<Self, String> {
        let args = Args::new(NAME, value)?;
        let insert_line = args.optional_u64("insert_line")?;
        if let Some(insert_line) = insert_line {
            return Ok(Self {
                path: args.required_str("path")?.to_owned(),
                old_string: String::new(),
                new_string: args.required_str("new_string")?.to_owned(),
                replace_all: false,
                insert_line: Some(insert_line),
            });
        }
        let request = Self {
            path: args.required_str("path")?.to_owned(),
            old_string: args.required_str("old_string")?.to_owned(),
            new_string: args.required_str("new_string")?.to_owned(),
            replace_all: args.optional_bool("replace_all")?.unwrap_or(false),
            insert_line: None,
        };
        if request.old_string.is_empty() {
            return Err(format!(
                "{NAME}: old_string is empty; give the exact text to replace (use write_file to create a file)"
            ));
        }
        if request.old_string == request.new_string {
            return Err(format!(
                "{NAME}: old_string and new_string are the same; nothing would change"
            ));
        }
        Ok(request)
    }
}

impl Tool for EditFile {
    fn describe(&self, args: &Value, cwd: &std::path::Path) -> CallCard {
        let Some(path) = string_arg(args, "path") else {
            return CallCard::named("edit_file");
        };
        CallCard::of(
            CallKind::Edit,
            format!("Edit {}", shown_path(cwd, path)),
            Some(shown_path(cwd, path)),
            format!("Editing {path}"),
        )
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: "Replace text in an existing file. `old_string` must match the file \
                exactly, including whitespace and indentation, and must occur exactly once \
                unless `replace_all` is true (then every occurrence is replaced). Include \
                enough surrounding lines to make it unique. Read the file first; when \
                copying from read_file output, leave out the line-number prefix. Use \
                write_file to create new files."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to edit: relative to the working directory, or absolute."
                    },
                    "old_string": {
                        "type": "string",
                        "description": "The exact text to replace."
                    },
                    "new_string": {
                        "type": "string",
                        "description": "The text to put in its place (must differ from old_string)."
                    },
                    "replace_all": {
                        "type": "boolean",
                        "description": "Replace every occurrence instead of requiring exactly one. Default false."
                    }
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        }
    }

    fn assess(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        let request = Request::parse(args);
        let ctx = ctx.clone();
        Box::pin(async move {
            let request = request.map_err(ToolOutput::error)?;
            let target = Target::new(&ctx, &request.path);
            files::blocking(NAME, &ctx.cancel, move || {
                let edit = plan(&target, &request)?;
                let diff = LineDiff::new(&edit.old, &edit.new);
                let mut summary = format!("edit {} ({})", target.shown, diff.stat());
                if edit.count > 1 {
                    summary.push_str(&format!(", {} occurrences", edit.count));
                }
                let hunks = diff.hunks(0, &target.shown);
                Ok(target.assessment(summary, Some(hunks)))
            })
            .await
        })
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let request = match Request::parse(&args) {
                Ok(request) => request,
                Err(message) => return ToolOutput::error(message),
            };
            let target = Target::new(&ctx, &request.path);
            let selected = ctx.hunks.clone();
            let job = move || {
                let edit = plan(&target, &request)?;
                let (text, note) =
                    files::select_hunks(NAME, &edit.old, &edit.new, selected.as_deref())?;
                if text == edit.old {
                    return Ok(format!("{} unchanged {note}", target.shown));
                }
                files::write(NAME, &target, &text)?;
                Ok(format!("edited {} {note}", target.shown))
            };
            match files::blocking(NAME, &ctx.cancel, job).await {
                Ok(text) => ToolOutput::ok(text),
                Err(output) => output,
            }
        })
    }
}

/// The file's current text, the text after the edit, and how many places changed.
struct Edit {
    old: String,
    new: String,
    count: usize,
}

fn plan(target: &Target, request: &Request) -> Result<Edit, String> {
    let shown = &target.shown;
    let old = match files::read_current(NAME, target)? {
        Current::Text(text) => text,
        Current::Missing => {
            return Err(format!(
                "{NAME}: no such file: {shown} (use write_file to create a file)"
            ));
        }
        Current::NotText(why) => return Err(format!("{NAME}: cannot edit {why}")),
    };
    let (new, count) = edited(&old, request, shown)?;
    Ok(Edit { old, new, count })
}

/// `old` after the edit, and how many places changed; `shown` names the file in errors.
pub(super) fn edited(old: &str, request: &Request, shown: &str) -> Result<(String, usize), String> {
    if let Some(line) = request.insert_line {
        return inserted(old, line, &request.new_string, shown).map(|new| (new, 1));
    }
    let (needle, replacement, count) = find(old, &request.old_string, &request.new_string);
    match count {
        0 => Err(format!(
            "{NAME}: old_string was not found in {shown}. It must match the file exactly, \
             including whitespace and indentation; read the file again and copy the text \
             without the line-number prefix."
        )),
        1 => Ok((old.replacen(&needle, &replacement, 1), count)),
        _ if request.replace_all => Ok((
            old.replace(&needle, &replacement),
            old.matches(needle.as_str()).count(),
        )),
        n => Err(format!(
            "{NAME}: old_string matches {n} times in {shown}; include more surrounding \
             lines to make it unique, or set replace_all to true to replace every occurrence."
        )),
    }
}

/// `text` with `insertion` as whole lines after line `after` (0: before the first), in
/// the file's line ends.
fn inserted(text: &str, after: u64, insertion: &str, shown: &str) -> Result<String, String> {
    let ending = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut insertion = insertion.replace("\r\n", "\n");
    if !insertion.ends_with('\n') {
        insertion.push('\n');
    }
    let insertion = insertion.replace('\n', ending);
    let total = text.lines().count() as u64;
    if after > total {
        return Err(format!(
            "{NAME}: cannot insert after line {after}: {shown} has {total} lines"
        ));
    }
    let mut at = 0;
    for _ in 0..after {
        at += text[at..].find('\n').map_or(text.len() - at, |end| end + 1);
    }
    let mut out = String::with_capacity(text.len() + insertion.len() + 1);
    out.push_str(&text[..at]);
    // After a last line without a newline, the insertion starts on a line of its own.
    if at == text.len() && !text.is_empty() && !text.ends_with('\n') {
        out.push_str(ending);
    }
    out.push_str(&insertion);
    out.push_str(&text[at..]);
    Ok(out)
}

/// The text to look for and its replacement (as given, or with CRLF line ends when only
/// that matches), and the number of overlapping occurrences.
fn find(text: &str, old: &str, new: &str) -> (String, String, usize) {
    let count = occurrences(text, old);
    if count == 0 && old.contains('\n') && !old.contains('\r') && text.contains("\r\n") {
        let crlf_old = old.replace('\n', "\r\n");
        let crlf_count = occurrences(text, &crlf_old);
        if crlf_count > 0 {
            return (
                crlf_old,
                new.replace("\r\n", "\n").replace('\n', "\r\n"),
                crlf_count,
            );
        }
    }
    (old.to_owned(), new.to_owned(), count)
}

/// Occurrences of `needle` in `text`, overlapping ones included.
fn occurrences(text: &str, needle: &str) -> usize {
    let mut count = 0;
    let mut from = 0;
    while let Some(at) = text[from..].find(needle) {
        count += 1;
        // Step one character, not one byte, to stay on a char boundary.
        let step = text[from + at..].chars().next().map_or(1, char::len_utf8);
        from += at + step;
    }
    count
}

#[cfg(test)]
mod tests {
    use std::fs;

    use serde_json::json;

    use super::*;
    use crate::engine::Effect;
    use crate::tools::tests::context;

    fn setup(content: &str) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.rs"), content).unwrap();
        let ctx = context(dir.path());
        (dir, ctx)
    }

    fn read(dir: &tempfile::TempDir) -> String {
        fs::read_to_string(dir.path().join("a.rs")).unwrap()
    }

    #[tokio::test]
    async fn edits_once() {
        let (dir, ctx) = setup("fn a() {\n    1\n}\n");
        let args = json!({"path": "a.rs", "old_string": "    1\n", "new_string": "    2\n    3\n"});
        let assessment = EditFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(assessment.summary, "edit a.rs (+2 -1)");
        assert_eq!(
            assessment.effect,
            Effect::Edit {
                paths: vec![dir.path().join("a.rs")]
            }
        );
        let hunks = assessment.hunks.unwrap();
        assert_eq!(
            hunks[0].lines,
            [" fn a() {", "-    1", "+    2", "+    3", " }"]
        );
        let out = EditFile.run(args.clone(), ctx.clone()).await;
        assert_eq!(out, ToolOutput::ok("edited a.rs (+2 -1)"));
        assert_eq!(read(&dir), "fn a() {\n    2\n    3\n}\n");
        // The file changed: the same call now fails to find its text.
        let out = EditFile.run(args, ctx).await;
        assert!(
            out.is_error && out.output.contains("was not found in a.rs"),
            "{}",
            out.output
        );
    }

    #[tokio::test]
    async fn replace_all_and_ambiguity() {
        let (dir, ctx) = setup("x = 1;\ny = 1;\nz = 1;\n");
        let args = json!({"path": "a.rs", "old_string": "1;", "new_string": "2;"});
        let err = EditFile.assess(&args, &ctx).await.unwrap_err();
        assert!(
            err.output.contains("matches 3 times in a.rs"),
            "{}",
            err.output
        );
        assert!(err.output.contains("replace_all"));
        let out = EditFile.run(args, ctx.clone()).await;
        assert!(out.is_error);
        assert_eq!(read(&dir), "x = 1;\ny = 1;\nz = 1;\n");

        let args =
            json!({"path": "a.rs", "old_string": "1;", "new_string": "2;", "replace_all": true});
        let assessment = EditFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(assessment.summary, "edit a.rs (+3 -3), 3 occurrences");
        EditFile.run(args, ctx).await;
        assert_eq!(read(&dir), "x = 2;\ny = 2;\nz = 2;\n");
    }

    #[tokio::test]
    async fn insert_line_puts_whole_lines_after_a_line() {
        let (dir, ctx) = setup("a\r\nb\r\n");
        let args = json!({"path": "a.rs", "insert_line": 1, "new_string": "x\ny"});
        let assessment = EditFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(assessment.summary, "edit a.rs (+2 -0)");
        EditFile.run(args, ctx.clone()).await;
        assert_eq!(read(&dir), "a\r\nx\r\ny\r\nb\r\n");
        let at_start = json!({"path": "a.rs", "insert_line": 0, "new_string": "0\n"});
        EditFile.run(at_start, ctx.clone()).await;
        assert_eq!(read(&dir), "0\r\na\r\nx\r\ny\r\nb\r\n");
        let past = json!({"path": "a.rs", "insert_line": 9, "new_string": "z"});
        let err = EditFile.assess(&past, &ctx).await.unwrap_err();
        assert_eq!(
            err.output,
            "edit_file: cannot insert after line 9: a.rs has 5 lines"
        );
        assert_eq!(inserted("a", 1, "b", "f").unwrap(), "a\nb\n");
        assert_eq!(inserted("", 0, "b", "f").unwrap(), "b\n");
    }

    #[tokio::test]
    async fn overlapping_matches_are_ambiguous() {
        let (_dir, ctx) = setup("aaa\n");
        let args = json!({"path": "a.rs", "old_string": "aa", "new_string": "b"});
        let err = EditFile.assess(&args, &ctx).await.unwrap_err();
        assert!(err.output.contains("matches 2 times"), "{}", err.output);
        assert_eq!(occurrences("éé", "é"), 2);
    }

    #[tokio::test]
    async fn argument_and_file_errors() {
        let (dir, ctx) = setup("text\n");
        let cases = [
            (
                json!({"path": "a.rs", "old_string": "", "new_string": "x"}),
                "old_string is empty",
            ),
            (
                json!({"path": "a.rs", "old_string": "t", "new_string": "t"}),
                "are the same",
            ),
            (
                json!({"path": "a.rs", "old_string": "t"}),
                "missing required argument \"new_string\"",
            ),
            (
                json!({"path": "a.rs", "old_string": "t", "new_string": "u", "replace_all": "yes"}),
                "must be a boolean",
            ),
            (
                json!({"path": "nope.rs", "old_string": "t", "new_string": "u"}),
                "no such file: nope.rs",
            ),
            (
                json!({"path": "a.rs", "old_string": "absent", "new_string": "u"}),
                "was not found",
            ),
        ];
        for (args, expected) in cases {
            let err = EditFile.assess(&args, &ctx).await.unwrap_err();
            assert!(
                err.is_error && err.output.contains(expected),
                "{}",
                err.output
            );
            let out = EditFile.run(args, ctx.clone()).await;
            assert!(
                out.is_error && out.output.contains(expected),
                "{}",
                out.output
            );
        }
        fs::write(dir.path().join("b.bin"), [0xc3, 0x28]).unwrap();
        let args = json!({"path": "b.bin", "old_string": "t", "new_string": "u"});
        let err = EditFile.assess(&args, &ctx).await.unwrap_err();
        assert_eq!(err.output, "edit_file: cannot edit b.bin is not UTF-8 text");
        assert_eq!(read(&dir), "text\n");
    }

    #[tokio::test]
    async fn partial_hunks_byte_for_byte() {
        let line = |n: usize| match n {
            2 | 25 => "marker\r\nnext\r\n".to_owned(),
            n => format!("line {n}\r\n"),
        };
        let old: String = (1..=30).map(line).collect::<String>() + "end";
        let (dir, ctx) = setup(&old);
        // Both places change with replace_all; LF in the arguments, CRLF in the file.
        let args = json!({
            "path": "a.rs",
            "old_string": "marker\nnext\n",
            "new_string": "changed\n",
            "replace_all": true
        });
        let assessment = EditFile.assess(&args, &ctx).await.unwrap();
        let ids: Vec<String> = assessment
            .hunks
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(ids, ["f0h0", "f0h1"]);
        let mut partial = ctx.clone();
        partial.hunks = Some(vec!["f0h1".to_owned()]);
        let out = EditFile.run(args.clone(), partial).await;
        assert!(!out.is_error, "{}", out.output);
        let second = old.rfind("marker").unwrap();
        let expected = format!(
            "{}changed\r\n{}",
            &old[..second],
            &old[second + "marker\r\nnext\r\n".len()..]
        );
        assert_eq!(read(&dir), expected);

        let mut unknown = ctx.clone();
        unknown.hunks = Some(vec!["f0h7".to_owned()]);
        let out = EditFile.run(args, unknown).await;
        assert!(
            out.is_error && out.output.contains("unknown hunk id \"f0h7\""),
            "{}",
            out.output
        );
        assert_eq!(read(&dir), expected);
    }
}
