//! `apply_patch`: several file changes in one call, in Codex's patch format
//! ([`super::patch`]).
//!
//! Why it looks the way it does:
//! - GPT-5 models are trained to edit with this tool, written as free text in the
//!   patch grammar rather than as JSON. jucode offers it only to them (OpenAI Responses,
//!   as a freeform tool, in place of `edit_file` and `write_file`); elsewhere the tool set
//!   stays jucode's. Its arguments are `{"input": <the patch>}`, as every freeform call's.
//! - It is jucode's own file edit, not a second kind: the call is assessed on the files
//!   as they are (every change computed, nothing written), with one hunk list across the
//!   files (`f0h0`, `f1h0`, ... in the patch's order), the same `Edit` effect for
//!   approvals, plan-mode gating and checkpoints, and written hunk by hunk as approved.
//! - Everything is planned before anything is written: a patch whose third file does not
//!   apply changes no file.
//! - The answer is the one the model was trained on (`Success. Updated the following
//!   files:` and a line per file, `A`/`M`/`D`), with which hunks were applied when only
//!   some were approved.

use std::collections::BTreeSet;
use std::path::Path;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::args::Args;
use super::diff::LineDiff;
use super::files::{self, Current, Target};
use super::patch::{self, FileChange};
use crate::engine::{Assessment, DescribeCall, Effect, Tool, ToolContext, ToolOutput};
use crate::engine::{FreeformTool, ToolSpec};
use crate::protocol::{CallCard, CallKind};

const NAME: &str = "apply_patch";

const DESCRIPTION: &str = "Edit files with a patch. Use the `apply_patch` tool to add, \
    update, move or delete files. The patch starts with `*** Begin Patch` and ends with \
    `*** End Patch`; each file starts with `*** Add File: PATH` (then every line prefixed \
    with `+`), `*** Delete File: PATH`, or `*** Update File: PATH` (optionally followed by \
    `*** Move to: NEW_PATH`) and its chunks: a line `@@` (optionally followed by a line to \
    find first, such as the enclosing function's signature), then lines prefixed with ` ` \
    (unchanged context, about three lines before and after each change), `-` (removed) or \
    `+` (added). Paths are relative to the working directory. Read a file before \
    changing it.";

/// The patch grammar for models that write the tool's input constrained by it (Lark, as
/// OpenAI's custom tools take it).
const GRAMMAR: &str = r#"start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line*
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"#;

/// The `apply_patch` tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyPatch;

/// What one file of the patch does, computed against the file as it is.
struct Planned {
    target: Target,
    /// The new path of a moved file.
    dest: Option<Target>,
    /// The text before: `None` for a file that does not exist (or is not text, for a
    /// deletion, which needs no diff).
    old: Option<String>,
    /// The text after: `None` for a deletion.
    new: Option<String>,
}

impl Planned {
    fn letter(&self) -> char {
        match (&self.old, &self.new) {
            (_, None) => 'D',
            (None, Some(_)) => 'A',
            (Some(_), Some(_)) => 'M',
        }
    }

    fn diff(&self) -> LineDiff<'_> {
        LineDiff::new(
            self.old.as_deref().unwrap_or(""),
            self.new.as_deref().unwrap_or(""),
        )
    }

    fn shown(&self) -> String {
        match &self.dest {
            Some(dest) => format!("{} → {}", self.target.shown, dest.shown),
            None => self.target.shown.clone(),
        }
    }
}

fn patch_text(args: &Value) -> Result<&str, String> {
    Args::new(NAME, args)?.required_str("input")
}

/// Every file's change, or why the patch does not apply (nothing written).
fn plan(ctx: &ToolContext, text: &str) -> Result<Vec<Planned>, String> {
    let changes = patch::parse(text).map_err(|err| format!("{NAME}: invalid patch: {err}"))?;
    let mut seen = BTreeSet::new();
    let mut planned = Vec::with_capacity(changes.len());
    for change in &changes {
        let target = Target::new(ctx, change.path());
        let dest = match change {
            FileChange::Update {
                move_to: Some(dest),
                ..
            } => Some(Target::new(ctx, dest)),
            _ => None,
        };
        for path in std::iter::once(&target).chain(&dest) {
            if !seen.insert(path.abs.clone()) {
                return Err(format!(
                    "{NAME}: {} appears twice in the patch; change each file once",
                    path.shown
                ));
            }
        }
        let shown = &target.shown;
        let current = files::read_current(NAME, &target)?;
        let step = match (change, current) {
            (FileChange::Add { content, .. }, Current::Text(old)) => Planned {
                old: Some(old),
                new: Some(content.clone()),
                target,
                dest,
            },
            (FileChange::Add { content, .. }, Current::Missing) => Planned {
                old: None,
                new: Some(content.clone()),
                target,
                dest,
            },
            (FileChange::Delete { .. }, Current::Text(old)) => Planned {
                old: Some(old),
                new: None,
                target,
                dest,
            },
            (FileChange::Delete { .. }, Current::NotText(_)) => Planned {
                old: None,
                new: None,
                target,
                dest,
            },
            (FileChange::Update { chunks, .. }, Current::Text(old)) => {
                let new = patch::apply(&old, chunks, shown).map_err(|err| {
                    format!(
                        "{NAME}: {err}\n(read the file again and make the patch's lines match it)"
                    )
                })?;
                if let Some(dest) = &dest
                    && !matches!(files::read_current(NAME, dest)?, Current::Missing)
                {
                    return Err(format!(
                        "{NAME}: cannot move {shown} to {}: it exists",
                        dest.shown
                    ));
                }
                Planned {
                    old: Some(old),
                    new: Some(new),
                    target,
                    dest,
                }
            }
            (FileChange::Add { .. }, Current::NotText(why)) => {
                return Err(format!("{NAME}: cannot replace {why}"));
            }
            (FileChange::Update { .. }, Current::NotText(why)) => {
                return Err(format!("{NAME}: cannot update {why}"));
            }
            (FileChange::Delete { .. } | FileChange::Update { .. }, Current::Missing) => {
                return Err(format!(
                    "{NAME}: no such file: {shown} (use \"*** Add File: \" to create one)"
                ));
            }
        };
        planned.push(step);
    }
    Ok(planned)
}

fn assess(planned: &[Planned]) -> Assessment {
    let mut paths = Vec::new();
    let mut parts = Vec::new();
    let mut hunks = Vec::new();
    for (index, step) in planned.iter().enumerate() {
        paths.push(step.target.abs.clone());
        paths.extend(step.dest.iter().map(|dest| dest.abs.clone()));
        let diff = step.diff();
        let what = match (step.letter(), &step.dest) {
            ('A', _) => "add",
            ('D', _) => "delete",
            (_, Some(_)) => "move",
            _ => "edit",
        };
        let stat = match step.old {
            None if step.new.is_none() => "not text".to_owned(),
            _ => diff.stat().to_string(),
        };
        parts.push(format!("{what} {} ({stat})", step.shown()));
        hunks.extend(diff.hunks(index, &step.target.shown));
    }
    Assessment {
        effect: Effect::Edit { paths },
        summary: format!("patch: {}", parts.join(", ")),
        hunks: Some(hunks),
    }
}

/// Which hunks of each file were approved (all of them without a selection), given each
/// file's diff.
fn selection(
    diffs: &[LineDiff<'_>],
    selected: Option<&[String]>,
) -> Result<Vec<Vec<usize>>, String> {
    let Some(ids) = selected else {
        return Ok(diffs
            .iter()
            .map(|diff| (0..diff.hunk_count()).collect())
            .collect());
    };
    let mut chosen = vec![Vec::new(); diffs.len()];
    for id in ids {
        let known = super::diff::parse_hunk_id(id)
            .filter(|&(file, n)| diffs.get(file).is_some_and(|diff| n < diff.hunk_count()));
        let Some((file, n)) = known else {
            return Err(format!(
                "{NAME}: unknown hunk id {id:?}; the files may have changed since the patch was proposed"
            ));
        };
        chosen[file].push(n);
    }
    Ok(chosen)
}

fn write(planned: Vec<Planned>, selected: Option<&[String]>) -> Result<String, String> {
    // Each file's diff, made once.
    let diffs: Vec<LineDiff<'_>> = planned.iter().map(Planned::diff).collect();
    let chosen = selection(&diffs, selected)?;
    let partial = selected.is_some();
    let mut lines = Vec::new();
    let mut applied = 0;
    let total: usize = diffs.iter().map(LineDiff::hunk_count).sum();
    for ((step, diff), chosen) in planned.iter().zip(&diffs).zip(&chosen) {
        let all = chosen.len() == diff.hunk_count();
        applied += chosen.len();
        let letter = step.letter();
        // A deletion or a file that is not text has no hunks to pick: it goes with the
        // call, unless a selection left all of this file's hunks out.
        if chosen.is_empty() && diff.hunk_count() > 0 {
            continue;
        }
        match letter {
            'D' if all => {
                std::fs::remove_file(&step.target.abs)
                    .map_err(|err| format!("{NAME}: cannot delete {}: {err}", step.target.shown))?;
            }
            _ => {
                let text = if all {
                    step.new.clone().unwrap_or_default()
                } else {
                    diff.apply(chosen)
                };
                let into = step.dest.as_ref().unwrap_or(&step.target);
                files::write(NAME, into, &text)?;
                if step.dest.is_some() {
                    std::fs::remove_file(&step.target.abs).map_err(|err| {
                        format!(
                            "{NAME}: wrote {} but cannot remove {}: {err}",
                            into.shown, step.target.shown
                        )
                    })?;
                }
            }
        }
        let letter = if letter == 'D' && !all { 'M' } else { letter };
        lines.push(format!("{letter} {}", step.shown()));
    }
    if lines.is_empty() {
        return Ok("no hunks selected; no file changed".to_owned());
    }
    let mut out = format!(
        "Success. Updated the following files:\n{}",
        lines.join("\n")
    );
    if partial {
        out.push_str(&format!(
            "\n(applied {applied} of {total} hunks: {})",
            selected.unwrap_or_default().join(", ")
        ));
    }
    Ok(out)
}

impl Tool for ApplyPatch {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "input": {"type": "string", "description": "The whole patch."}
                },
                "required": ["input"],
                "additionalProperties": false
            }),
        }
    }

    fn freeform(&self) -> Option<FreeformTool> {
        Some(FreeformTool {
            name: NAME.to_owned(),
            description: DESCRIPTION.to_owned(),
            grammar: GRAMMAR,
            replaces: &["edit_file", "write_file"],
        })
    }

    fn describe(&self, args: &Value, cwd: &Path) -> CallCard {
        let Ok(changes) = patch_text(args).and_then(patch::parse) else {
            return CallCard::named(NAME);
        };
        let paths: Vec<String> = changes
            .iter()
            .map(|change| crate::engine::shown_path(cwd, change.path()))
            .collect();
        let title = match paths.as_slice() {
            [one] => format!("Patch {one}"),
            many => format!("Patch {} files", many.len()),
        };
        CallCard::of(
            CallKind::Edit,
            title,
            (paths.len() == 1).then(|| paths[0].clone()),
            format!("Patching {}", paths.join(", ")),
        )
    }

    fn assess(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        let text = patch_text(args).map(str::to_owned);
        let ctx = ctx.clone();
        Box::pin(async move {
            let text = text.map_err(ToolOutput::error)?;
            let cancel = ctx.cancel.clone();
            files::blocking(NAME, &cancel, move || Ok(assess(&plan(&ctx, &text)?))).await
        })
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let text = match patch_text(&args) {
                Ok(text) => text.to_owned(),
                Err(message) => return ToolOutput::error(message),
            };
            let cancel = ctx.cancel.clone();
            let job = move || write(plan(&ctx, &text)?, ctx.hunks.as_deref());
            match files::blocking(NAME, &cancel, job).await {
                Ok(text) => ToolOutput::ok(text),
                Err(output) => output,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::tools::tests::context;

    fn call(patch: &str) -> Value {
        json!({ "input": patch })
    }

    #[tokio::test]
    async fn a_patch_of_three_files_is_assessed_then_applied() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.rs"), "fn a() {\n    1\n}\n").unwrap();
        fs::write(dir.path().join("gone.txt"), "bye\n").unwrap();
        let ctx = context(dir.path());
        let args = call(
            "*** Begin Patch\n*** Update File: a.rs\n@@ fn a() {\n-    1\n+    2\n }\n\
             *** Add File: docs/b.md\n+# B\n*** Delete File: gone.txt\n*** End Patch\n",
        );
        let assessment = ApplyPatch.assess(&args, &ctx).await.unwrap();
        assert_eq!(
            assessment.summary,
            "patch: edit a.rs (+1 -1), add docs/b.md (+1 -0), delete gone.txt (+0 -1)"
        );
        let Effect::Edit { paths } = &assessment.effect else {
            panic!("{:?}", assessment.effect);
        };
        assert_eq!(paths.len(), 3);
        let ids: Vec<&str> = assessment
            .hunks
            .as_ref()
            .unwrap()
            .iter()
            .map(|hunk| hunk.id.as_str())
            .collect();
        assert_eq!(ids, ["f0h0", "f1h0", "f2h0"]);
        // Nothing is written by the assessment.
        assert_eq!(
            fs::read_to_string(dir.path().join("a.rs")).unwrap(),
            "fn a() {\n    1\n}\n"
        );
        let out = ApplyPatch.run(args, ctx).await;
        assert_eq!(
            out,
            ToolOutput::ok(
                "Success. Updated the following files:\nM a.rs\nA docs/b.md\nD gone.txt"
            )
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("a.rs")).unwrap(),
            "fn a() {\n    2\n}\n"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("docs/b.md")).unwrap(),
            "# B\n"
        );
        assert!(!dir.path().join("gone.txt").exists());
    }

    #[tokio::test]
    async fn only_the_approved_hunks_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let old: String = (1..=20).map(|n| format!("line {n}\n")).collect();
        fs::write(dir.path().join("a.txt"), &old).unwrap();
        let mut ctx = context(dir.path());
        let args = call(
            "*** Begin Patch\n*** Update File: a.txt\n@@\n-line 2\n+two\n@@\n-line 19\n+nineteen\n\
             *** Add File: new.txt\n+x\n*** End Patch",
        );
        let assessment = ApplyPatch.assess(&args, &ctx).await.unwrap();
        assert_eq!(assessment.hunks.unwrap().len(), 3);
        ctx.hunks = Some(vec!["f2h0".to_owned()]);
        let out = ApplyPatch.run(args.clone(), ctx.clone()).await;
        assert!(
            out.is_error && out.output.contains("unknown hunk id \"f2h0\""),
            "{}",
            out.output
        );
        assert_eq!(fs::read_to_string(dir.path().join("a.txt")).unwrap(), old);
        ctx.hunks = Some(vec!["f0h1".to_owned()]);
        let out = ApplyPatch.run(args.clone(), ctx.clone()).await;
        assert_eq!(
            out,
            ToolOutput::ok(
                "Success. Updated the following files:\nM a.txt\n(applied 1 of 3 hunks: f0h1)"
            )
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            old.replace("line 19\n", "nineteen\n")
        );
        assert!(
            !dir.path().join("new.txt").exists(),
            "its hunk was left out"
        );
    }

    #[tokio::test]
    async fn a_patch_that_does_not_apply_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        let ctx = context(dir.path());
        let cases = [
            (
                "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Update File: a.txt\n@@\n-two\n+2\n*** End Patch",
                "could not find these lines in a.txt:\ntwo",
            ),
            (
                "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch",
                "no such file: nope.txt",
            ),
            (
                "*** Begin Patch\n*** Update File: a.txt\n*** Move to: a.txt\n@@\n-one\n+1\n*** End Patch",
                "a.txt appears twice",
            ),
            ("not a patch", "invalid patch: the first line must be"),
        ];
        for (patch, expected) in cases {
            let err = ApplyPatch.assess(&call(patch), &ctx).await.unwrap_err();
            assert!(err.output.contains(expected), "{patch}: {}", err.output);
            let out = ApplyPatch.run(call(patch), ctx.clone()).await;
            assert!(
                out.is_error && out.output.contains(expected),
                "{}",
                out.output
            );
        }
        assert_eq!(
            fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(!dir.path().join("b.txt").exists());
        let err = ApplyPatch.assess(&json!({}), &ctx).await.unwrap_err();
        assert!(err.output.contains("missing required argument \"input\""));
    }

    #[tokio::test]
    async fn a_move_writes_the_new_path_and_removes_the_old() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("old.rs"), "a\nb\n").unwrap();
        fs::write(dir.path().join("taken.rs"), "x\n").unwrap();
        let ctx = context(dir.path());
        let args = call(
            "*** Begin Patch\n*** Update File: old.rs\n*** Move to: src/new.rs\n@@\n a\n-b\n+c\n*** End Patch",
        );
        let card = ApplyPatch.describe(&args, dir.path());
        let title = card.title.unwrap();
        assert!(
            title.starts_with("Patch /") && title.ends_with("/old.rs"),
            "{title}"
        );
        let out = ApplyPatch.run(args, ctx.clone()).await;
        assert_eq!(
            out,
            ToolOutput::ok("Success. Updated the following files:\nM old.rs → src/new.rs")
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("src/new.rs")).unwrap(),
            "a\nc\n"
        );
        assert!(!dir.path().join("old.rs").exists());
        let args = call(
            "*** Begin Patch\n*** Update File: src/new.rs\n*** Move to: taken.rs\n@@\n-a\n+b\n*** End Patch",
        );
        let err = ApplyPatch.assess(&args, &ctx).await.unwrap_err();
        assert!(
            err.output
                .contains("cannot move src/new.rs to taken.rs: it exists"),
            "{}",
            err.output
        );
    }
}
