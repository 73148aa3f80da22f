//! Codex's patch format, the input of `apply_patch`: parsed into file changes, and an
//! update's chunks applied to a file's text.
//!
//! Why it looks the way it does:
//! - The format is the one GPT-5 models are trained on (`*** Begin Patch`, `*** Add
//!   File:`, `*** Update File:` with `@@` chunks of ` `/`-`/`+` lines, `*** Move to:`,
//!   `*** Delete File:`, `*** End of File`, `*** End Patch`). Chunks carry no line
//!   numbers: each is found by its lines, searched forward from the previous chunk, so
//!   a patch applies to the file as it is, or fails saying which lines were not found.
//! - Models copy lines with trailing spaces dropped or indentation changed now and then.
//!   A chunk is looked for exactly first, then ignoring trailing whitespace, then ignoring
//!   surrounding whitespace; never more loosely, so a patch cannot land on a guess.
//! - Line ends are the file's: lines are compared without `\r`, and new lines get `\r\n`
//!   in a file that uses it. Lines the patch does not touch keep their bytes.
//! - A chunk with nothing to remove inserts its lines after its `@@` context line, or at
//!   the end of the file when it has none.

/// One file's change in a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FileChange {
    /// Create the file (or replace its whole text) with `content`.
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

impl FileChange {
    pub(super) fn path(&self) -> &str {
        match self {
            Self::Add { path, .. } | Self::Delete { path } | Self::Update { path, .. } => path,
        }
    }
}

/// One `@@` section of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Chunk {
    /// The text after `@@ `: a line (a function's signature, say) to find first, so the
    /// chunk's lines are looked for after it.
    pub context: Option<String>,
    pub lines: Vec<Line>,
    /// `*** End of File` followed: the old lines end the file.
    pub at_end: bool,
}

/// A line of a chunk, by its first character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Line {
    /// ` `: in the file before and after; the file's bytes are kept.
    Same(String),
    /// `-`
    Removed(String),
    /// `+`
    Added(String),
}

impl Chunk {
    /// The lines the chunk expects in the file.
    fn old(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|line| match line {
                Line::Same(text) | Line::Removed(text) => Some(text.as_str()),
                Line::Added(_) => None,
            })
            .collect()
    }
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

/// The file changes of a patch, in order; an error says which line is wrong and why.
pub(super) fn parse(text: &str) -> Result<Vec<FileChange>, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    // Blank lines around the markers are forgiven; nothing else outside them is.
    let first = lines.iter().position(|line| !line.trim().is_empty());
    let last = lines.iter().rposition(|line| !line.trim().is_empty());
    let (Some(first), Some(last)) = (first, last) else {
        return Err(format!("the patch is empty; it must start with {BEGIN:?}"));
    };
    if lines[first].trim() != BEGIN {
        return Err(format!(
            "the first line must be {BEGIN:?}, not {:?}",
            lines[first]
        ));
    }
    if last == first || lines[last].trim() != END {
        return Err(format!("the last line must be {END:?}"));
    }
    let body = &lines[first + 1..last];
    let mut changes = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let line = body[at];
        let number = first + at + 2;
        if let Some(path) = line.strip_prefix(ADD) {
            at += 1;
            let mut content = String::new();
            while at < body.len() && !is_file_marker(body[at]) {
                match body[at].strip_prefix('+') {
                    Some(added) => {
                        content.push_str(added);
                        content.push('\n');
                    }
                    None => {
                        return Err(format!(
                            "line {}: every line of an added file starts with '+', got {:?}",
                            first + at + 2,
                            body[at]
                        ));
                    }
                }
                at += 1;
            }
            changes.push(FileChange::Add {
                path: file_path(path, number)?,
                content,
            });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            at += 1;
            changes.push(FileChange::Delete {
                path: file_path(path, number)?,
            });
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = file_path(path, number)?;
            at += 1;
            let mut move_to = None;
            if let Some(dest) = body.get(at).and_then(|line| line.strip_prefix(MOVE)) {
                move_to = Some(file_path(dest, first + at + 2)?);
                at += 1;
            }
            let start = at;
            while at < body.len() && !is_file_marker(body[at]) {
                at += 1;
            }
            let chunks = parse_chunks(&body[start..at], first + start + 2)?;
            if chunks.is_empty() && move_to.is_none() {
                return Err(format!(
                    "line {number}: the update of {path} changes nothing"
                ));
            }
            changes.push(FileChange::Update {
                path,
                move_to,
                chunks,
            });
        } else {
            return Err(format!(
                "line {number}: expected \"*** Add File: \", \"*** Update File: \" or \
                 \"*** Delete File: \", got {line:?}"
            ));
        }
    }
    if changes.is_empty() {
        return Err("the patch changes no file".to_owned());
    }
    Ok(changes)
}

fn is_file_marker(line: &str) -> bool {
    [ADD, DELETE, UPDATE]
        .iter()
        .any(|marker| line.starts_with(marker))
}

fn file_path(path: &str, number: usize) -> Result<String, String> {
    let path = path.trim();
    if path.is_empty() {
        return Err(format!("line {number}: the file name is missing"));
    }
    Ok(path.to_owned())
}

/// The chunks of one update; `number` is the first line's number in the patch.
fn parse_chunks(lines: &[&str], number: usize) -> Result<Vec<Chunk>, String> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut open = false;
    for (offset, &line) in lines.iter().enumerate() {
        if let Some(header) = line.strip_prefix("@@") {
            let context = header.trim();
            chunks.push(Chunk {
                context: (!context.is_empty()).then(|| context.to_owned()),
                ..Chunk::default()
            });
            open = true;
            continue;
        }
        if line.trim_end() == END_OF_FILE {
            match chunks.last_mut() {
                Some(chunk) if open => {
                    chunk.at_end = true;
                    open = false;
                    continue;
                }
                _ => {
                    return Err(format!(
                        "line {}: {END_OF_FILE:?} must follow a chunk's lines",
                        number + offset
                    ));
                }
            }
        }
        if !open {
            // The first chunk may start without `@@`; a line after `*** End of File`
            // would be a chunk without a header, which is a mistake.
            if !chunks.is_empty() {
                return Err(format!(
                    "line {}: a new chunk must start with \"@@\", got {line:?}",
                    number + offset
                ));
            }
            chunks.push(Chunk::default());
            open = true;
        }
        let Some(chunk) = chunks.last_mut() else {
            continue;
        };
        let (kind, rest) = match line.chars().next() {
            Some(kind @ (' ' | '-' | '+')) => (kind, &line[1..]),
            // An empty line in a chunk is an unchanged empty line: models drop the space.
            None => (' ', ""),
            Some(_) => {
                return Err(format!(
                    "line {}: a chunk's lines start with ' ', '-' or '+', got {line:?}",
                    number + offset
                ));
            }
        };
        let rest = rest.to_owned();
        chunk.lines.push(match kind {
            '-' => Line::Removed(rest),
            '+' => Line::Added(rest),
            _ => Line::Same(rest),
        });
    }
    chunks.retain(|chunk| !chunk.lines.is_empty());
    Ok(chunks)
}

/// `text` with the update's chunks applied; `shown` names the file in errors.
pub(super) fn apply(text: &str, chunks: &[Chunk], shown: &str) -> Result<String, String> {
    // `split` keeps a last empty element when the text ends with a newline: it stands for
    // "after the last line" and is never matched.
    let lines: Vec<&str> = text.split('\n').collect();
    let content: Vec<&str> = lines
        .iter()
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    // An empty text has no lines, only the place after them.
    let ends_with_newline = text.is_empty() || text.ends_with('\n');
    let searchable = if ends_with_newline {
        lines.len() - 1
    } else {
        lines.len()
    };
    let crlf = text.contains("\r\n");
    // (where, how many of the file's lines, the chunk)
    let mut replacements: Vec<(usize, usize, &Chunk)> = Vec::new();
    let mut cursor = 0;
    for chunk in chunks {
        if let Some(context) = &chunk.context {
            let found = seek(&content[..searchable], &[context.as_str()], cursor, false)
                .ok_or_else(|| format!("could not find the line {context:?} in {shown}"))?;
            cursor = found + 1;
        }
        let old = chunk.old();
        if old.is_empty() {
            let at = if chunk.context.is_some() {
                cursor
            } else {
                searchable
            };
            replacements.push((at, 0, chunk));
            continue;
        }
        let mut found = seek(&content[..searchable], &old, cursor, chunk.at_end);
        let mut old_len = old.len();
        // A trailing blank line the model added to the chunk may not be in the file.
        if found.is_none() && old.last().is_some_and(|line| line.trim().is_empty()) {
            old_len -= 1;
            found = seek(
                &content[..searchable],
                &old[..old_len],
                cursor,
                chunk.at_end,
            );
        }
        let Some(start) = found else {
            return Err(format!(
                "could not find these lines in {shown}:\n{}",
                old.join("\n")
            ));
        };
        replacements.push((start, old_len, chunk));
        cursor = start + old_len;
    }
    let mut pieces: Vec<String> = Vec::with_capacity(lines.len());
    let mut next = 0;
    for (start, len, chunk) in replacements {
        pieces.extend(lines[next..start].iter().map(|line| (*line).to_owned()));
        // Walk the chunk against the file's lines it matched: unchanged lines keep the
        // file's bytes, removed ones go, added ones come in the file's line ends.
        let mut in_file = start;
        for line in &chunk.lines {
            match line {
                Line::Same(_) if in_file < start + len => {
                    pieces.push(lines[in_file].to_owned());
                    in_file += 1;
                }
                // The dropped trailing blank line.
                Line::Same(_) => {}
                Line::Removed(_) => in_file += 1,
                Line::Added(text) if crlf => pieces.push(format!("{text}\r")),
                Line::Added(text) => pieces.push(text.clone()),
            }
        }
        next = start + len;
    }
    pieces.extend(lines[next..].iter().map(|line| (*line).to_owned()));
    // A text without a final newline keeps none: the last line, old or new, ends it.
    Ok(pieces.join("\n"))
}

/// Where `needle` starts in `lines` at or after `from`: exactly, then ignoring trailing
/// whitespace, then ignoring surrounding whitespace. `at_end` wants the match that ends
/// the file first.
fn seek(lines: &[&str], needle: &[&str], from: usize, at_end: bool) -> Option<usize> {
    if needle.is_empty() || needle.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - needle.len();
    let equal: [fn(&str, &str) -> bool; 3] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
    ];
    for same in equal {
        let matches = |start: usize| {
            lines[start..start + needle.len()]
                .iter()
                .zip(needle)
                .all(|(line, wanted)| same(line, wanted))
        };
        if at_end && last_start >= from && matches(last_start) {
            return Some(last_start);
        }
        if let Some(start) = (from..=last_start).find(|&start| matches(start)) {
            return Some(start);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(body: &str) -> Vec<Chunk> {
        let patch = format!("*** Begin Patch\n*** Update File: a.txt\n{body}*** End Patch\n");
        match parse(&patch).unwrap().remove(0) {
            FileChange::Update { chunks, .. } => chunks,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_every_kind_of_change() {
        let patch = "*** Begin Patch\n\
            *** Add File: new/b.txt\n+one\n+two\n\
            *** Delete File: old.txt\n\
            *** Update File: src/a.rs\n*** Move to: src/c.rs\n@@ fn main() {\n-    1\n+    2\n     3\n*** End of File\n\
            *** End Patch";
        let changes = parse(patch).unwrap();
        assert_eq!(
            changes,
            [
                FileChange::Add {
                    path: "new/b.txt".into(),
                    content: "one\ntwo\n".into()
                },
                FileChange::Delete {
                    path: "old.txt".into()
                },
                FileChange::Update {
                    path: "src/a.rs".into(),
                    move_to: Some("src/c.rs".into()),
                    chunks: vec![Chunk {
                        context: Some("fn main() {".into()),
                        lines: vec![
                            Line::Removed("    1".into()),
                            Line::Added("    2".into()),
                            Line::Same("    3".into()),
                        ],
                        at_end: true,
                    }],
                },
            ]
        );
    }

    #[test]
    fn malformed_patches_say_what_is_wrong() {
        let cases = [
            ("", "the patch is empty"),
            ("hello\n*** End Patch", "the first line must be"),
            (
                "*** Begin Patch\n*** Add File: a\n+x\n",
                "the last line must be",
            ),
            ("*** Begin Patch\n*** End Patch", "changes no file"),
            (
                "*** Begin Patch\nrm -rf /\n*** End Patch",
                "line 2: expected",
            ),
            (
                "*** Begin Patch\n*** Add File: a\nx\n*** End Patch",
                "line 3: every line",
            ),
            (
                "*** Begin Patch\n*** Add File:  \n*** End Patch",
                "file name is missing",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n*** End Patch",
                "changes nothing",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n-x\n*** End of File\n+y\n*** End Patch",
                "line 6: a new chunk must start",
            ),
            (
                "*** Begin Patch\n*** Update File: a\n@@\n~x\n*** End Patch",
                "line 4: a chunk",
            ),
        ];
        for (patch, expected) in cases {
            let err = parse(patch).unwrap_err();
            assert!(err.contains(expected), "{patch:?}: {err}");
        }
    }

    #[test]
    fn chunks_apply_in_order_after_their_context() {
        let text = "fn a() {\n    x\n}\nfn b() {\n    x\n}\n";
        let chunks = update("@@ fn b() {\n-    x\n+    y\n");
        assert_eq!(
            apply(text, &chunks, "a.txt").unwrap(),
            "fn a() {\n    x\n}\nfn b() {\n    y\n}\n"
        );
        // Without the context the first match changes.
        let chunks = update("@@\n-    x\n+    y\n");
        assert_eq!(
            apply(text, &chunks, "a.txt").unwrap(),
            "fn a() {\n    y\n}\nfn b() {\n    x\n}\n"
        );
        // Two chunks: the second is looked for after the first.
        let chunks = update("@@\n-    x\n+    1\n@@\n-    x\n+    2\n");
        assert_eq!(
            apply(text, &chunks, "a.txt").unwrap(),
            "fn a() {\n    1\n}\nfn b() {\n    2\n}\n"
        );
    }

    #[test]
    fn end_of_file_and_insertions() {
        let text = "x\ny\nx\n";
        let chunks = update("@@\n-x\n+z\n*** End of File\n");
        assert_eq!(apply(text, &chunks, "a.txt").unwrap(), "x\ny\nz\n");
        // Nothing removed and no context: appended.
        let chunks = update("@@\n+w\n");
        assert_eq!(apply(text, &chunks, "a.txt").unwrap(), "x\ny\nx\nw\n");
        // Nothing removed after a context line: inserted after it.
        let chunks = update("@@ y\n+w\n");
        assert_eq!(apply(text, &chunks, "a.txt").unwrap(), "x\ny\nw\nx\n");
        // A text without a final newline keeps none; an empty one gets lines.
        let chunks = update("@@\n+w\n");
        assert_eq!(apply("x", &chunks, "a.txt").unwrap(), "x\nw");
        assert_eq!(apply("", &chunks, "a.txt").unwrap(), "w\n");
        // Its last line replaced: it stays without one.
        let chunks = update("@@\n-x\n+z\n");
        assert_eq!(apply("a\nx", &chunks, "a.txt").unwrap(), "a\nz");
    }

    #[test]
    fn whitespace_is_forgiven_in_steps_and_line_ends_are_kept() {
        let text = "a  \r\n    b\r\nc\r\n";
        let chunks = update("@@\n a\n-b\n+B\n");
        assert_eq!(apply(text, &chunks, "a.txt").unwrap(), "a  \r\nB\r\nc\r\n");
        let err = apply(text, &update("@@\n-q\n+r\n"), "a.txt").unwrap_err();
        assert_eq!(err, "could not find these lines in a.txt:\nq");
        let err = apply(text, &update("@@ nothing\n-a\n"), "a.txt").unwrap_err();
        assert_eq!(err, "could not find the line \"nothing\" in a.txt");
        // A trailing blank line the file does not have is dropped from the search.
        let chunks = update("@@\n-c\n+C\n \n");
        assert_eq!(apply("c\n", &chunks, "a.txt").unwrap(), "C\n");
    }
}
