//! `write_file`: create a file or replace its whole content.
//!
//! Why it looks the way it does:
//! - The assessment carries the diff against the file as it is, hunk by hunk, so a
//!   person can approve part of a rewrite; a new file has no hunks (there is nothing to
//!   keep), and neither has an unchanged one.
//! - Missing parent directories are created: a model writing `src/new/mod.rs` means it.
//! - The result states what happened in the same terms as the summary (`new file, 12
//!   lines` or `+3 -1`), and which hunks were applied when only some were approved.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::args::Args;
use super::diff::LineDiff;
use super::files::{self, Current, Target};
use crate::engine::ports::model::ToolSpec;
use crate::engine::{Assessment, Tool, ToolContext, ToolOutput};
use crate::engine::{DescribeCall, shown_path, string_arg};
use crate::protocol::{CallCard, CallKind};

const NAME: &str = "write_file";

/// The `write_file` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFile;

struct Request {
    path: String,
    content: String,
}

impl Request {
    fn parse(value: &Value) -> Result<Self, String> {
        let args = Args::new(NAME, value)?;
        Ok(Self {
            path: args.required_str("path")?.to_owned(),
            content: args.required_str("content")?.to_owned(),
        })
    }
}

impl Tool for WriteFile {
    fn describe(&self, args: &Value, cwd: &std::path::Path) -> CallCard {
        let Some(path) = string_arg(args, "path") else {
            return CallCard::named("write_file");
        };
        CallCard::of(
            CallKind::Edit,
            format!("Write {}", shown_path(cwd, path)),
            Some(shown_path(cwd, path)),
            format!("Writing {path}"),
        )
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: "Create a file, or replace the whole content of an existing one. \
                Missing parent directories are created. Prefer edit_file for changing part \
                of an existing file: it is shorter and cannot lose unrelated content. The \
                content is written exactly as given (no trailing newline is added)."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "File to write: relative to the working directory, or absolute."
                    },
                    "content": {
                        "type": "string",
                        "description": "The complete new content of the file."
                    }
                },
                "required": ["path", "content"],
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
            files::blocking(NAME, &ctx.cancel, move || assess(&target, &request.content)).await
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
            let job = move || write(&target, &request.content, selected.as_deref());
            match files::blocking(NAME, &ctx.cancel, job).await {
                Ok(text) => ToolOutput::ok(text),
                Err(output) => output,
            }
        })
    }
}

fn assess(target: &Target, content: &str) -> Result<Assessment, String> {
    let shown = &target.shown;
    Ok(match files::read_current(NAME, target)? {
        Current::Missing => target.assessment(
            format!(
                "write {shown} (new file, {})",
                files::lines(content.lines().count())
            ),
            None,
        ),
        Current::NotText(why) => target.assessment(
            format!(
                "write {shown} (replaces it whole: {why}; {})",
                files::lines(content.lines().count())
            ),
            None,
        ),
        Current::Text(old) => {
            let diff = LineDiff::new(&old, content);
            if diff.has_changes() {
                target.assessment(
                    format!("write {shown} ({})", diff.stat()),
                    Some(diff.hunks(0, shown)),
                )
            } else {
                target.assessment(format!("write {shown} (unchanged)"), None)
            }
        }
    })
}

fn write(target: &Target, content: &str, selected: Option<&[String]>) -> Result<String, String> {
    let shown = &target.shown;
    let (text, note) = match files::read_current(NAME, target)? {
        Current::Text(old) => {
            let (text, note) = files::select_hunks(NAME, &old, content, selected)?;
            if text == old {
                return Ok(format!("{shown} unchanged {note}"));
            }
            (text, note)
        }
        current => {
            if let Some(ids) = selected.filter(|ids| !ids.is_empty()) {
                return Err(format!(
                    "{NAME}: unknown hunk ids {} ({shown} has no hunks: {})",
                    ids.join(", "),
                    match current {
                        Current::Missing => "it is a new file",
                        _ => "it is not a text file",
                    }
                ));
            }
            if selected.is_some() {
                return Ok(format!("no hunks selected; {shown} not written"));
            }
            let count = files::lines(content.lines().count());
            let note = match current {
                Current::Missing => format!("(new file, {count})"),
                _ => format!("(replaced whole, {count})"),
            };
            (content.to_owned(), note)
        }
    };
    files::write(NAME, target, &text)?;
    Ok(format!("wrote {shown} {note}"))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use serde_json::json;

    use super::*;
    use crate::engine::Effect;
    use crate::tools::tests::context;

    fn numbered(lines: usize) -> String {
        (1..=lines).map(|n| format!("line {n}\n")).collect()
    }

    #[tokio::test]
    async fn new_file_with_parents() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let args = json!({"path": "src/new/a.rs", "content": "fn a() {}\nfn b() {}\n"});
        let assessment = WriteFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(assessment.summary, "write src/new/a.rs (new file, 2 lines)");
        assert_eq!(assessment.hunks, None);
        let abs = dir.path().join("src/new/a.rs");
        assert_eq!(
            assessment.effect,
            Effect::Edit {
                paths: vec![abs.clone()]
            }
        );

        let out = WriteFile.run(args, ctx).await;
        assert_eq!(
            out,
            ToolOutput::ok("wrote src/new/a.rs (new file, 2 lines)")
        );
        assert_eq!(fs::read_to_string(abs).unwrap(), "fn a() {}\nfn b() {}\n");
    }

    #[tokio::test]
    async fn replaces_with_hunks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let old = numbered(30);
        fs::write(&path, &old).unwrap();
        let new = old.replace("line 2\n", "two\n").replace("line 29\n", "");
        let args = json!({"path": "./a.txt", "content": new});
        let ctx = context(dir.path());
        let assessment = WriteFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(assessment.summary, "write a.txt (+1 -2)");
        let hunks = assessment.hunks.unwrap();
        assert_eq!(hunks.len(), 2);
        assert_eq!(
            (hunks[0].id.as_str(), hunks[0].file.as_str()),
            ("f0h0", "a.txt")
        );
        // Stable: the same content and arguments give the same hunks.
        let again = WriteFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(again.hunks.unwrap(), hunks);

        let mut partial = ctx.clone();
        partial.hunks = Some(vec!["f0h1".to_owned()]);
        let out = WriteFile.run(args.clone(), partial).await;
        assert!(!out.is_error, "{}", out.output);
        assert!(
            out.output.contains("applied 1 of 2 hunks: f0h1"),
            "{}",
            out.output
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            old.replace("line 29\n", "")
        );

        let out = WriteFile.run(args.clone(), ctx.clone()).await;
        assert_eq!(out, ToolOutput::ok("wrote a.txt (+1 -1)"));
        assert_eq!(fs::read_to_string(&path).unwrap(), new);
        let unchanged = WriteFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(unchanged.summary, "write a.txt (unchanged)");
        assert_eq!(unchanged.hunks, None);
    }

    #[tokio::test]
    async fn errors() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let missing = WriteFile
            .assess(&json!({"path": "a"}), &ctx)
            .await
            .unwrap_err();
        assert_eq!(
            missing,
            ToolOutput::error("write_file: missing required argument \"content\"")
        );
        let out = WriteFile
            .run(json!({"path": 1, "content": ""}), ctx.clone())
            .await;
        assert!(out.is_error && out.output.contains("must be a string"));

        fs::create_dir(dir.path().join("d")).unwrap();
        let args = json!({"path": "d", "content": "x"});
        let err = WriteFile.assess(&args, &ctx).await.unwrap_err();
        assert_eq!(err, ToolOutput::error("write_file: d is a directory"));

        let mut unknown = ctx.clone();
        unknown.hunks = Some(vec!["f0h0".to_owned()]);
        let out = WriteFile
            .run(json!({"path": "new.txt", "content": "x\n"}), unknown)
            .await;
        assert!(
            out.is_error && out.output.contains("unknown hunk ids f0h0"),
            "{}",
            out.output
        );
        assert!(!dir.path().join("new.txt").exists());

        fs::write(dir.path().join("b.txt"), "a\n").unwrap();
        let mut unknown = ctx.clone();
        unknown.hunks = Some(vec!["f0h3".to_owned()]);
        let out = WriteFile
            .run(json!({"path": "b.txt", "content": "b\n"}), unknown)
            .await;
        assert!(
            out.is_error && out.output.contains("unknown hunk id \"f0h3\""),
            "{}",
            out.output
        );
        assert_eq!(fs::read_to_string(dir.path().join("b.txt")).unwrap(), "a\n");
    }

    #[tokio::test]
    async fn replaces_a_binary_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("b.bin"), [0xff, 0xfe, 0]).unwrap();
        let ctx = context(dir.path());
        let args = json!({"path": "b.bin", "content": "text\n"});
        let assessment = WriteFile.assess(&args, &ctx).await.unwrap();
        assert_eq!(
            assessment.summary,
            "write b.bin (replaces it whole: b.bin is not UTF-8 text; 1 line)"
        );
        assert_eq!(assessment.hunks, None);
        let out = WriteFile.run(args, ctx).await;
        assert_eq!(out, ToolOutput::ok("wrote b.bin (replaced whole, 1 line)"));
    }
}
