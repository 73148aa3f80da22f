//! Line diffs of a proposed edit: hunks to show and approve one by one, a diff stat for
//! summaries, and applying only the approved hunks.
//!
//! Why it works this way:
//! - Lines keep their terminators (`\n`, `\r\n`, or none on a last line), so a file is
//!   exactly the concatenation of its lines. Applying a subset of hunks copies old lines
//!   and new lines verbatim, which makes partial application byte-for-byte exact for
//!   CRLF files and files without a trailing newline, with no re-encoding step.
//! - Hunks are the groups of `similar`'s Myers diff with 3 lines of context, the same
//!   grouping `diff -u` shows, so their headers read like any unified diff. The diff is a
//!   pure function of the two texts, so the same old content and arguments give the
//!   same hunks and ids (`f{file}h{n}`) at assessment and at run time.
//! - A pathological pair (huge, totally different files) could make Myers slow. After a
//!   time budget the changed middle becomes one replace hunk: coarse, still exact, and
//!   the same for both calls in practice (only a diff right at the budget could differ).
//! - A line that lacks its final newline is followed by git's `\ No newline at end of
//!   file` marker line; without it a change of only the last newline would show two
//!   identical lines.

use std::fmt;
use std::ops::Range;
use std::time::{Duration, Instant};

use similar::{Algorithm, DiffOp};

use crate::engine::Hunk;

/// Lines of unchanged context around each change, as in `diff -u`.
const CONTEXT: usize = 3;
/// Time for the exact diff before falling back to one coarse hunk.
const DIFF_BUDGET: Duration = Duration::from_secs(2);
/// Git's marker after a line that has no newline at the end of the file.
const NO_NEWLINE_MARKER: &str = "\\ No newline at end of file";

/// Lines added and removed by an edit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiffStat {
    pub added: usize,
    pub removed: usize,
}

impl fmt::Display for DiffStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{} -{}", self.added, self.removed)
    }
}

/// The line diff of two texts, grouped into hunks.
pub struct LineDiff<'a> {
    old: Vec<&'a str>,
    new: Vec<&'a str>,
    groups: Vec<Group>,
}

/// One hunk: the old and new line ranges it covers (context included) and its ops.
struct Group {
    old: Range<usize>,
    new: Range<usize>,
    ops: Vec<DiffOp>,
}

impl<'a> LineDiff<'a> {
    pub fn new(old: &'a str, new: &'a str) -> Self {
        let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
        let new_lines: Vec<&str> = new.split_inclusive('\n').collect();
        let deadline = Instant::now() + DIFF_BUDGET;
        let mut ops = similar::capture_diff_slices_deadline(
            Algorithm::Myers,
            &old_lines,
            &new_lines,
            Some(deadline),
        );
        if Instant::now() > deadline {
            ops = coarse_ops(&old_lines, &new_lines);
        }
        let groups = similar::group_diff_ops(ops, CONTEXT)
            .into_iter()
            .filter_map(|ops| {
                let first = ops.first()?;
                let last = ops.last()?;
                Some(Group {
                    old: first.old_range().start..last.old_range().end,
                    new: first.new_range().start..last.new_range().end,
                    ops,
                })
            })
            .collect();
        Self {
            old: old_lines,
            new: new_lines,
            groups,
        }
    }

    /// True when the texts differ.
    pub fn has_changes(&self) -> bool {
        !self.groups.is_empty()
    }

    pub fn hunk_count(&self) -> usize {
        self.groups.len()
    }

    pub fn stat(&self) -> DiffStat {
        let mut stat = DiffStat::default();
        for op in self.groups.iter().flat_map(|group| &group.ops) {
            if !matches!(op, DiffOp::Equal { .. }) {
                stat.added += op.new_range().len();
                stat.removed += op.old_range().len();
            }
        }
        stat
    }

    /// The hunks for display and approval; `file` is the path as shown.
    pub fn hunks(&self, file_index: usize, file: &str) -> Vec<Hunk> {
        self.groups
            .iter()
            .enumerate()
            .map(|(n, group)| Hunk {
                id: hunk_id(file_index, n),
                file: file.to_owned(),
                header: format!(
                    "@@ -{} +{} @@",
                    header_range(&group.old),
                    header_range(&group.new)
                ),
                lines: self.hunk_lines(group),
            })
            .collect()
    }

    fn hunk_lines(&self, group: &Group) -> Vec<String> {
        let mut lines = Vec::new();
        let mut push = |prefix: char, line: &str| {
            let text = line
                .strip_suffix('\n')
                .map(|text| text.strip_suffix('\r').unwrap_or(text));
            lines.push(format!("{prefix}{}", text.unwrap_or(line)));
            if text.is_none() {
                lines.push(NO_NEWLINE_MARKER.to_owned());
            }
        };
        for op in &group.ops {
            match op {
                DiffOp::Equal { .. } => {
                    for line in &self.old[op.old_range()] {
                        push(' ', line);
                    }
                }
                _ => {
                    for line in &self.old[op.old_range()] {
                        push('-', line);
                    }
                    for line in &self.new[op.new_range()] {
                        push('+', line);
                    }
                }
            }
        }
        lines
    }

    /// The old text with only the hunks numbered in `selected` applied.
    pub fn apply(&self, selected: &[usize]) -> String {
        let mut out = String::new();
        let mut next_old = 0;
        for (n, group) in self.groups.iter().enumerate() {
            out.extend(self.old[next_old..group.old.start].iter().copied());
            if selected.contains(&n) {
                out.extend(self.new[group.new.clone()].iter().copied());
            } else {
                out.extend(self.old[group.old.clone()].iter().copied());
            }
            next_old = group.old.end;
        }
        out.extend(self.old[next_old..].iter().copied());
        out
    }

    /// Hunk numbers for ids like `f0h2` of file `file_index`; an id that is malformed,
    /// for another file or past the last hunk is an error naming it.
    pub fn select(&self, file_index: usize, ids: &[String]) -> Result<Vec<usize>, String> {
        ids.iter()
            .map(|id| {
                parse_hunk_id(id)
                    .filter(|&(file, n)| file == file_index && n < self.groups.len())
                    .map(|(_, n)| n)
                    .ok_or_else(|| {
                        let known: Vec<String> = (0..self.groups.len())
                            .map(|n| hunk_id(file_index, n))
                            .collect();
                        format!(
                            "unknown hunk id {id:?} (this edit has {})",
                            if known.is_empty() {
                                "no hunks".to_owned()
                            } else {
                                known.join(", ")
                            }
                        )
                    })
            })
            .collect()
    }
}

/// The hunks of `old → new` for one file.
pub fn hunks(file_index: usize, file: &str, old: &str, new: &str) -> Vec<Hunk> {
    LineDiff::new(old, new).hunks(file_index, file)
}

/// Lines added and removed going from `old` to `new`.
pub fn diff_stat(old: &str, new: &str) -> DiffStat {
    LineDiff::new(old, new).stat()
}

/// Applies only the `selected` hunks (ids of file 0, as [`hunks`] numbers them) of the
/// diff `old → new` to `old`; everything else stays byte-for-byte as in `old`.
pub fn apply_hunks(old: &str, new: &str, selected: &[String]) -> Result<String, String> {
    let diff = LineDiff::new(old, new);
    let selected = diff.select(0, selected)?;
    Ok(diff.apply(&selected))
}

pub fn hunk_id(file_index: usize, n: usize) -> String {
    format!("f{file_index}h{n}")
}

/// The file and hunk numbers of an id like `f1h2`.
pub fn parse_hunk_id(id: &str) -> Option<(usize, usize)> {
    let (file, hunk) = id.strip_prefix('f')?.split_once('h')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits(file) || !digits(hunk) {
        return None;
    }
    Some((file.parse().ok()?, hunk.parse().ok()?))
}

/// `start,len` as in a unified-diff header: 1-based, or the line before for an empty range.
fn header_range(range: &Range<usize>) -> String {
    let start = if range.is_empty() {
        range.start
    } else {
        range.start + 1
    };
    format!("{start},{}", range.len())
}

/// One replace op for everything between the common prefix and suffix.
fn coarse_ops(old: &[&str], new: &[&str]) -> Vec<DiffOp> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut ops = Vec::new();
    if prefix > 0 {
        ops.push(DiffOp::Equal {
            old_index: 0,
            new_index: 0,
            len: prefix,
        });
    }
    let old_len = old.len() - prefix - suffix;
    let new_len = new.len() - prefix - suffix;
    ops.push(match (old_len, new_len) {
        (0, 0) => return ops,
        (0, new_len) => DiffOp::Insert {
            old_index: prefix,
            new_index: prefix,
            new_len,
        },
        (old_len, 0) => DiffOp::Delete {
            old_index: prefix,
            old_len,
            new_index: prefix,
        },
        (old_len, new_len) => DiffOp::Replace {
            old_index: prefix,
            old_len,
            new_index: prefix,
            new_len,
        },
    });
    if suffix > 0 {
        ops.push(DiffOp::Equal {
            old_index: prefix + old_len,
            new_index: prefix + new_len,
            len: suffix,
        });
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(lines: usize, eol: &str) -> String {
        (1..=lines).map(|n| format!("line {n}{eol}")).collect()
    }

    fn ids(hunks: &[Hunk]) -> Vec<&str> {
        hunks.iter().map(|hunk| hunk.id.as_str()).collect()
    }

    #[test]
    fn one_hunk_with_context() {
        let old = numbered(10, "\n");
        let new = old.replace("line 5\n", "line five\nline 5b\n");
        let hunks = hunks(0, "a.txt", &old, &new);
        assert_eq!(hunks.len(), 1);
        let hunk = &hunks[0];
        assert_eq!(hunk.id, "f0h0");
        assert_eq!(hunk.file, "a.txt");
        assert_eq!(hunk.header, "@@ -2,7 +2,8 @@");
        assert_eq!(
            hunk.lines,
            [
                " line 2",
                " line 3",
                " line 4",
                "-line 5",
                "+line five",
                "+line 5b",
                " line 6",
                " line 7",
                " line 8"
            ]
        );
        assert_eq!(
            diff_stat(&old, &new),
            DiffStat {
                added: 2,
                removed: 1
            }
        );
        assert_eq!(diff_stat(&old, &new).to_string(), "+2 -1");
    }

    #[test]
    fn distant_changes_apply_one_by_one() {
        for eol in ["\n", "\r\n"] {
            let old = numbered(40, eol);
            let new = old
                .replace(&format!("line 3{eol}"), &format!("THREE{eol}"))
                .replace(&format!("line 30{eol}"), "");
            let hunks = hunks(0, "a.txt", &old, &new);
            assert_eq!(ids(&hunks), ["f0h0", "f0h1"]);
            assert_eq!(hunks[1].header, "@@ -27,7 +27,6 @@");
            assert!(hunks[0].lines.contains(&"+THREE".to_owned()));

            let first = apply_hunks(&old, &new, &["f0h0".to_owned()]).unwrap();
            assert_eq!(
                first,
                old.replace(&format!("line 3{eol}"), &format!("THREE{eol}"))
            );
            let second = apply_hunks(&old, &new, &["f0h1".to_owned()]).unwrap();
            assert_eq!(second, old.replace(&format!("line 30{eol}"), ""));
            let both = apply_hunks(&old, &new, &["f0h1".to_owned(), "f0h0".to_owned()]);
            assert_eq!(both.unwrap(), new);
            assert_eq!(apply_hunks(&old, &new, &[]).unwrap(), old);
        }
    }

    #[test]
    fn missing_final_newline_is_exact() {
        let old = format!("{}last", numbered(20, "\n"));
        let new = old.replacen("line 2\n", "line two\n", 1) + "\n";
        let hunks = hunks(0, "a", &old, &new);
        assert_eq!(hunks.len(), 2);
        assert_eq!(
            hunks[1].lines[hunks[1].lines.len() - 3..],
            ["-last", NO_NEWLINE_MARKER, "+last"]
        );
        let only_newline = apply_hunks(&old, &new, &["f0h1".to_owned()]).unwrap();
        assert_eq!(only_newline, format!("{old}\n"));
        let only_two = apply_hunks(&old, &new, &["f0h0".to_owned()]).unwrap();
        assert_eq!(only_two, old.replacen("line 2\n", "line two\n", 1));
        assert!(!only_two.ends_with('\n'));
    }

    #[test]
    fn empty_sides_and_headers() {
        let added = hunks(0, "a", "", "one\ntwo\n");
        assert_eq!(added[0].header, "@@ -0,0 +1,2 @@");
        let removed = hunks(0, "a", "one\n", "");
        assert_eq!(removed[0].header, "@@ -1,1 +0,0 @@");
        assert!(hunks(0, "a", "same\n", "same\n").is_empty());
        assert!(!LineDiff::new("", "").has_changes());
    }

    #[test]
    fn ids_are_stable_and_checked() {
        let old = numbered(30, "\n");
        let new = old.replace("line 1\n", "x\n").replace("line 29\n", "y\n");
        assert_eq!(hunks(0, "a", &old, &new), hunks(0, "a", &old, &new));
        assert_eq!(ids(&hunks(2, "a", &old, &new)), ["f2h0", "f2h1"]);
        for bad in ["f0h2", "f1h0", "h0", "f0h", "f0hx", "f-1h0", "f0h01x"] {
            let err = apply_hunks(&old, &new, &[bad.to_owned()]).unwrap_err();
            assert!(err.contains(bad) && err.contains("f0h0, f0h1"), "{err}");
        }
    }

    #[test]
    fn coarse_fallback_is_exact() {
        let old = ["a\n", "b\n", "c\n", "d\n"];
        let new = ["a\n", "x\n", "d\n"];
        let ops = coarse_ops(&old, &new);
        assert_eq!(ops.len(), 3);
        assert_eq!(ops[1].old_range(), 1..3);
        assert_eq!(ops[1].new_range(), 1..2);
        assert_eq!(coarse_ops(&old, &old).len(), 1);
    }
}
