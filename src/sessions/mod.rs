//! Sessions on disk: one append-only JSONL file per session, written by one task, read
//! back to resume. The format is documented in `docs/sessions.md`.
//!
//! # Layout
//! - `format`: the file's lines (the only place that knows their field names, with
//!   `trace_lines` for those of subagents, the step list and the goal).
//! - `files`: where files live, the per-session lock, reading, listing, removing.
//! - `index`: the listing's cache of each file's head (`sessions/index.json`).
//! - `writer`: the [`Journal`](crate::engine::conversation::store::Journal) that appends entries.

mod files;
mod format;
mod index;
#[cfg(test)]
mod properties;
mod trace_lines;
mod writer;

use std::path::Path;
use std::sync::Arc;

pub use files::{RemoveError, Runner, SavedSession, find, list, remove, sessions_dir, valid_id};
pub use writer::flush_all;
/// The loader and the line encoder, for the fuzz targets (`crate::fuzzing`).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use {files::read, format::encode};

use crate::engine::conversation::store::{Entry, EntryBody, Journal};

/// The header of saved session `id` (its first line only), if it has a readable one.
pub fn header(
    profile_dir: &Path,
    id: &str,
) -> Option<crate::engine::conversation::store::SessionMeta> {
    use std::io::{BufRead, Read};
    let path = files::find(profile_dir, id)?;
    let file = std::fs::File::open(path).ok()?;
    let mut first = String::new();
    // A header is small; a first line longer than this is no header.
    std::io::BufReader::new(file.take(1 << 20))
        .read_line(&mut first)
        .ok()?;
    let line: format::Line = serde_json::from_str(first.trim_end()).ok()?;
    match format::decode(line).ok()?.body {
        EntryBody::Session(meta) => Some(meta),
        _ => None,
    }
}

/// What a host needs to start a session on a file.
pub struct Opened {
    pub journal: Arc<dyn Journal>,
    /// The saved conversation and what loading it found wrong; `None` for a new one.
    pub saved: Option<(Vec<Entry>, Vec<String>)>,
}

/// A new session `id` in `cwd`: its file appears with its first user message. Must be
/// called within a tokio runtime (the writer is a task).
pub fn new_session(profile_dir: &Path, cwd: &Path, id: &str, by: Runner) -> Opened {
    let journal = writer::spawn(writer::Target::New {
        dir: files::project_dir(profile_dir, cwd),
        id: id.to_owned(),
        by,
    });
    Opened {
        journal,
        saved: None,
    }
}

/// Why a new session in `cwd` could not be saved, if it could not: its directory (or
/// the nearest one that exists on the way to it) is not a directory jucode may write.
/// Checked without creating anything (a session that says nothing leaves nothing), so
/// the startup batch can say it before the first turn finds out.
pub fn cannot_save(profile_dir: &Path, cwd: &Path) -> Option<String> {
    let dir = files::project_dir(profile_dir, cwd);
    let mut at = dir.as_path();
    loop {
        match std::fs::metadata(at) {
            Ok(meta) if !meta.is_dir() => {
                return Some(format!(
                    "{} is not a directory, so {} cannot be created",
                    at.display(),
                    dir.display()
                ));
            }
            Ok(_) => return writable(at).err(),
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                match at.parent() {
                    Some(parent) if parent != at => at = parent,
                    _ => return None,
                }
            }
            Err(err) => return Some(format!("cannot reach {}: {err}", at.display())),
        }
    }
}

#[cfg(unix)]
fn writable(dir: &Path) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    access(dir, AccessFlags::W_OK | AccessFlags::X_OK)
        .map_err(|err| format!("cannot write in {}: {}", dir.display(), err.desc()))
}

#[cfg(not(unix))]
fn writable(_: &Path) -> Result<(), String> {
    Ok(())
}

/// Session `id` from its file, locked for this process (`by`: `daemon` or `serve`, for
/// whoever finds it taken). Blocking: it reads the file. Must be called within a tokio
/// runtime (the writer is a task).
pub fn open_saved(profile_dir: &Path, id: &str, by: Runner) -> Result<Opened, String> {
    let path = files::find(profile_dir, id).ok_or_else(|| format!("unknown session: {id}"))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let lock = files::lock(dir, id, by)?;
    let loaded = files::read(&path)?;
    // A file that does not start a conversation is never written to: appending would
    // give it a second header (or duplicate entry ids), and whatever it held is the
    // user's to recover.
    if let Some(why) = unloadable(&loaded) {
        return Err(format!(
            "session {id} cannot be continued: {} {why}; the file was left as it is",
            path.display()
        ));
    }
    let file = files::open_for_append(&path)
        .map_err(|err| format!("cannot open {} to continue it: {err}", path.display()))?;
    let journal = writer::spawn(writer::Target::Existing {
        path: path.clone(),
        file,
        lock,
        by,
    });
    Ok(Opened {
        journal,
        saved: Some((loaded.entries, loaded.warnings)),
    })
}

/// Why a read file cannot be a session's conversation, if it cannot.
fn unloadable(loaded: &files::Loaded) -> Option<String> {
    let Some(first) = loaded.entries.first() else {
        return Some(match loaded.warnings.first() {
            Some(warning) => format!("has no readable line ({warning})"),
            None => "is empty".to_owned(),
        });
    };
    if first.parent.is_none() && matches!(first.body, EntryBody::Session(_)) {
        return None;
    }
    Some(match loaded.warnings.first() {
        Some(warning) => format!("does not start with a session header ({warning})"),
        None => "does not start with a session header".to_owned(),
    })
}
