//! Where session files live, who may write them, reading them back, listing them.
//!
//! `<profile>/sessions/<project>/<id>.jsonl`, where `<project>` names the working
//! directory (`/home/me/app` → `-home-me-app`), so a project's sessions sit together and
//! listing one project's is one directory. Beside each file, `<id>.lock` is held with an
//! OS lock by the one process writing the session (released by the kernel when it
//! dies), and names it for whoever finds the lock taken.

use std::fs;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::format::{self, Body, Line};
use crate::engine::conversation::store::{Entry, first_line};

/// The sessions directory of a profile.
pub fn sessions_dir(profile_dir: &Path) -> PathBuf {
    profile_dir.join("sessions")
}

/// The directory of one project's sessions.
pub fn project_dir(profile_dir: &Path, cwd: &Path) -> PathBuf {
    sessions_dir(profile_dir).join(project_key(cwd))
}

/// `/home/me/app` → `-home-me-app`; characters that are awkward in file names become
/// `_`, and a very long path keeps its tail plus a hash of the whole.
fn project_key(cwd: &Path) -> String {
    let text = cwd.to_string_lossy();
    let key: String = text
        .chars()
        .map(|c| match c {
            '/' | '\\' => '-',
            c if c.is_alphanumeric() || "-_.".contains(c) => c,
            _ => '_',
        })
        .collect();
    const MAX: usize = 120;
    if key.chars().count() <= MAX {
        return key;
    }
    let tail: String = key
        .chars()
        .rev()
        .take(MAX - 17)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("{tail}-{:016x}", fnv(text.as_bytes()))
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Session ids are what jucode makes (UUIDs): anything else could name a path.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Who holds a session, written into its lock file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub by: Runner,
}

/// The kind of jucode process that holds a session's file, as its lock file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runner {
    /// `jucode serve --in-process` or `--headless`.
    Serve,
    Daemon,
    /// `jucode acp` running its sessions in its own process.
    Acp,
    /// `jucode sessions rm`, for the moment it removes the file.
    Remove,
    /// A lock written by a jucode that knows another kind.
    #[serde(other)]
    Other,
}

/// The one writer's claim on a session file. Dropping it releases the lock.
#[derive(Debug)]
pub struct SessionLock {
    _file: fs::File,
}

/// Takes the lock of session `id` in `dir` (`<profile>/sessions/<project>`, created
/// when missing); the error says who holds it and how to reach the session instead.
///
/// Nothing of the session's place may be a symbolic link: not the sessions folder, the
/// project's folder, the lock or the session file. jucode would lock, cut or append to
/// whatever a link points to (or create the session's files there), so a link is
/// refused, naming it, before anything opens, reads or writes through it. Every writer
/// takes this lock first (a new file, a saved one continued, one written anew, a
/// removal), so this is where that is checked.
pub fn lock(dir: &Path, id: &str, by: Runner) -> Result<SessionLock, String> {
    try_lock(dir, id, by).map_err(|err| match err {
        LockError::Held(holder) => held_message(id, holder),
        LockError::Other(message) => message,
    })
}

enum LockError {
    /// Another process holds the lock (who, when its lock file says so).
    Held(Option<Holder>),
    Other(String),
}

impl From<String> for LockError {
    fn from(message: String) -> Self {
        Self::Other(message)
    }
}

fn try_lock(dir: &Path, id: &str, by: Runner) -> Result<SessionLock, LockError> {
    let profile = dir.parent().and_then(Path::parent).unwrap_or(Path::new(""));
    crate::config::private::create_dir_below(profile, dir)?;
    crate::config::private::refuse_link(&dir.join(format!("{id}.jsonl")))?;
    let path = dir.join(format!("{id}.lock"));
    let mut file = crate::config::private::own_file_options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|err| crate::config::private::open_error("cannot open", &path, &err))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(LockError::Held(serde_json::from_str::<Holder>(&text).ok()));
        }
        Err(fs::TryLockError::Error(err)) => {
            return Err(LockError::Other(format!(
                "cannot lock {}: {err}",
                path.display()
            )));
        }
    }
    let holder = Holder {
        pid: std::process::id(),
        by,
    };
    let _ = file.set_len(0);
    let _ = file.seek(SeekFrom::Start(0));
    let _ = serde_json::to_writer(&mut file, &holder);
    let _ = file.flush();
    Ok(SessionLock { _file: file })
}

fn held_message(id: &str, holder: Option<Holder>) -> String {
    match holder {
        Some(holder) if holder.by == Runner::Daemon => format!(
            "session {id} is open in the jucode daemon (pid {}): attach to it with `jucode serve --session {id}` (without --in-process), or {{\"op\":\"attach\",\"session\":\"{id}\"}} on the daemon socket",
            holder.pid
        ),
        Some(holder) => format!(
            "session {id} is open in another jucode process (pid {}, jucode serve --in-process): end that one first, or run both through the daemon",
            holder.pid
        ),
        None => format!("session {id} is open in another jucode process"),
    }
}

/// A saved session, as listings show it.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedSession {
    /// The file's name without `.jsonl`: what `attach` and `/resume` find it by.
    pub id: String,
    /// `None` when the file is broken (its header could not be read).
    pub cwd: Option<PathBuf>,
    pub chat: bool,
    /// The `[engines.<name>]` entry it runs on; `None` for jucode's own engine.
    pub engine: Option<String>,
    /// The first user message's first line (or a placeholder).
    pub label: String,
    /// Milliseconds since the Unix epoch.
    pub created: u64,
    pub updated: u64,
    pub path: PathBuf,
    /// Why the file cannot be continued, when it cannot (it cannot be read, it is
    /// empty, it does not start with a session header, it is a symbolic link). Such a
    /// file is listed all the same: left out, it would look as if the session were gone.
    pub broken: Option<String>,
}

impl From<SavedSession> for crate::engine::ports::library::Saved {
    fn from(saved: SavedSession) -> Self {
        Self {
            id: saved.id,
            label: saved.label,
            updated: saved.updated,
            broken: saved.broken,
            engine: saved.engine,
        }
    }
}

/// The file of session `id`, in whichever project directory it is: a path where
/// something of that name is, even a symbolic link (never followed: opening it refuses
/// it, with the reason, which "unknown session" would hide).
pub fn find(profile_dir: &Path, id: &str) -> Option<PathBuf> {
    if !valid_id(id) {
        return None;
    }
    let dirs = fs::read_dir(sessions_dir(profile_dir)).ok()?;
    dirs.flatten()
        .map(|dir| dir.path().join(format!("{id}.jsonl")))
        .find(|path| fs::symlink_metadata(path).is_ok())
}

/// Every saved session of the profile, newest first, those of `cwd` (when given) first,
/// broken files among them (see [`SavedSession::broken`]).
///
/// A profile without a sessions folder has none; one whose sessions folder, or a
/// project folder in it, cannot be listed (a file, unreadable, a symbolic link) is an
/// error naming it: an empty listing would say there is nothing to lose.
pub fn list(profile_dir: &Path, cwd: Option<&Path>) -> Result<Vec<SavedSession>, String> {
    let mut sessions = Vec::new();
    let root = sessions_dir(profile_dir);
    match fs::symlink_metadata(&root) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(sessions),
        Err(err) => return Err(format!("cannot read {}: {err}", root.display())),
        Ok(meta) => listable(&root, &meta)?,
    }
    let unreadable = |path: &Path, err: std::io::Error| {
        format!(
            "cannot list the saved sessions in {}: {err}",
            path.display()
        )
    };
    let mut listing = super::index::Listing::open(&root);
    for dir in fs::read_dir(&root).map_err(|err| unreadable(&root, err))? {
        let dir = dir.map_err(|err| unreadable(&root, err))?;
        let path = dir.path();
        let meta = fs::symlink_metadata(&path).map_err(|err| unreadable(&path, err))?;
        // A stray file beside the project folders is not where jucode saves anything;
        // a link there is refused (a project folder is never followed).
        if meta.file_type().is_symlink() {
            crate::config::private::refuse_link(&path)?;
        }
        if !meta.is_dir() {
            continue;
        }
        for file in fs::read_dir(&path).map_err(|err| unreadable(&path, err))? {
            let file = file.map_err(|err| unreadable(&path, err))?.path();
            if file.extension().is_some_and(|ext| ext == "jsonl")
                && let Some(id) = file.file_stem().and_then(|stem| stem.to_str())
                // Names jucode did not make cannot be asked for by id.
                && valid_id(id)
            {
                sessions.push(listing.summary(&file, id, summary));
            }
        }
    }
    listing.save();
    sessions.sort_by(|a, b| {
        let here = |s: &SavedSession| cwd.is_some_and(|cwd| s.cwd.as_deref() == Some(cwd));
        // Ids are UUIDv7, ordered by creation: the newer one first on a tie.
        here(b)
            .cmp(&here(a))
            .then(b.updated.cmp(&a.updated))
            .then(b.id.cmp(&a.id))
    });
    Ok(sessions)
}

/// A folder of saved sessions must be a directory, not a link to one.
fn listable(path: &Path, meta: &fs::Metadata) -> Result<(), String> {
    if meta.file_type().is_symlink() {
        crate::config::private::refuse_link(path)
    } else if meta.is_dir() {
        Ok(())
    } else {
        Err(format!(
            "{} is not a directory: jucode keeps saved sessions there (move it away)",
            path.display()
        ))
    }
}

/// A session's listing from the start of its file: its metadata and first message, or
/// why it cannot be continued. Reads as loading does: blank lines are skipped, and the
/// first line must be the session's header.
fn summary(path: &Path, id: &str) -> SavedSession {
    let mut saved = SavedSession {
        id: id.to_owned(),
        cwd: None,
        chat: false,
        engine: None,
        label: String::new(),
        created: 0,
        updated: 0,
        path: path.to_owned(),
        broken: None,
    };
    let broken = |mut saved: SavedSession, why: String| {
        saved.label = format!("(broken: the file {why})");
        saved.broken = Some(format!("{} {why}", path.display()));
        saved
    };
    let modified = |meta: &fs::Metadata| {
        meta.modified()
            .ok()
            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |at| at.as_millis() as u64)
    };
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            saved.updated = modified(&meta);
            saved.created = saved.updated;
            if meta.file_type().is_symlink() {
                return broken(
                    saved,
                    "is a symbolic link, which jucode will not follow".into(),
                );
            }
            if !meta.is_file() {
                return broken(saved, "is not a regular file".into());
            }
        }
        Err(err) => return broken(saved, format!("cannot be read: {err}")),
    }
    let file = match crate::config::private::own_file_options()
        .read(true)
        .open(path)
    {
        Ok(file) => file,
        Err(err) => return broken(saved, format!("cannot be read: {err}")),
    };
    let mut lines = BufReader::new(file).split(b'\n');
    let first = loop {
        match lines.next() {
            None => return broken(saved, "is empty".into()),
            Some(Err(err)) => return broken(saved, format!("cannot be read: {err}")),
            Some(Ok(line)) if line.iter().all(u8::is_ascii_whitespace) => {}
            Some(Ok(line)) => break line,
        }
    };
    let header = match serde_json::from_slice::<Line>(&first) {
        Ok(line) => line,
        Err(err) => {
            return broken(
                saved,
                format!("does not start with a session header (its first line: {err})"),
            );
        }
    };
    let Body::Session {
        cwd,
        created,
        chat,
        engine,
        ..
    } = header.body
    else {
        return broken(saved, "does not start with a session header".into());
    };
    if header.parent.is_some() {
        return broken(saved, "does not start with a session header".into());
    }
    // The first user message is normally the second line; a few lines is enough.
    saved.label = lines
        .take(64)
        .map_while(Result::ok)
        .find_map(
            |line| match serde_json::from_slice::<Line>(&line).ok()?.body {
                Body::User { content, .. } => Some(first_line(&content, 80)),
                _ => None,
            },
        )
        .unwrap_or_else(|| "(no messages)".to_owned());
    saved.cwd = Some(cwd);
    saved.chat = chat;
    saved.engine = engine.map(|engine| engine.name);
    saved.created = created;
    saved
}

/// What reading a session file gives: the entries in file order, and what was wrong.
pub struct Loaded {
    pub entries: Vec<Entry>,
    pub warnings: Vec<String>,
}

/// Reads a session file. A last line cut short (the process died while writing it) is
/// dropped with a warning, and so is any other line that does not parse.
pub fn read(path: &Path) -> Result<Loaded, String> {
    let bytes = fs::read(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    let mut entries = Vec::new();
    let mut warnings = Vec::new();
    let complete = bytes.last().is_none_or(|&byte| byte == b'\n');
    let mut lines: Vec<&[u8]> = bytes.split(|&byte| byte == b'\n').collect();
    if complete {
        lines.pop();
    }
    let count = lines.len();
    for (index, line) in lines.into_iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let last = index + 1 == count;
        match serde_json::from_slice::<Line>(line)
            .map_err(|err| err.to_string())
            .and_then(format::decode)
        {
            Ok(entry) => entries.push(entry),
            Err(_) if last && !complete => warnings.push(format!(
                "the last line of {} was cut short (jucode was stopped while writing it) and was ignored",
                path.display()
            )),
            Err(err) => warnings.push(format!(
                "line {} of {} was ignored: {err}",
                index + 1,
                path.display()
            )),
        }
    }
    Ok(Loaded { entries, warnings })
}

/// Opens a session file to append to it, cutting off a torn last line first (it was
/// ignored when read; new lines must not be glued to it). A symbolic link is refused
/// (see [`lock`]): its target would be cut and appended to.
pub fn open_for_append(path: &Path) -> std::io::Result<fs::File> {
    let mut file = crate::config::private::own_file_options()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|err| {
            let message = crate::config::private::open_error("cannot open", path, &err);
            std::io::Error::new(err.kind(), message)
        })?;
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            // Read through the handle, not the path: it is the file being cut.
            let mut bytes = Vec::new();
            file.seek(SeekFrom::Start(0))?;
            file.read_to_end(&mut bytes)?;
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            file.set_len(keep as u64)?;
        }
    }
    file.seek(SeekFrom::End(0))?;
    Ok(file)
}

/// Deletes a saved session; refused while a process holds it.
pub fn remove(profile_dir: &Path, id: &str) -> Result<PathBuf, RemoveError> {
    let path = find(profile_dir, id)
        .ok_or_else(|| RemoveError::Other(format!("unknown session: {id}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let held = try_lock(dir, id, Runner::Remove).map_err(|err| match err {
        LockError::Held(Some(holder)) if holder.by == Runner::Daemon => RemoveError::OpenInDaemon(
            format!(
                "session {id} is open in the jucode daemon (pid {}), so its file cannot be removed: \
                 `jucode sessions rm --force {id}` closes it there first (a running turn is \
                 stopped), or close it from the front-end that shows it",
                holder.pid
            ),
        ),
        LockError::Held(Some(holder)) => RemoveError::Other(format!(
            "session {id} is open in another jucode process (pid {}, jucode serve --in-process), \
             so its file cannot be removed: end that process first (quit its front-end, or \
             `kill {}`), then run this again",
            holder.pid, holder.pid
        )),
        LockError::Held(None) => RemoveError::Other(format!(
            "session {id} is open in another jucode process, so its file cannot be removed: \
             end that process first"
        )),
        LockError::Other(message) => RemoveError::Other(message),
    })?;
    fs::remove_file(&path)
        .map_err(|err| RemoveError::Other(format!("cannot remove {}: {err}", path.display())))?;
    drop(held);
    let _ = fs::remove_file(dir.join(format!("{id}.lock")));
    Ok(path)
}

/// Why [`remove`] did not remove a session.
#[derive(Debug)]
pub enum RemoveError {
    /// The daemon runs the session: closing it there first would let the removal go on.
    OpenInDaemon(String),
    Other(String),
}

impl std::fmt::Display for RemoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OpenInDaemon(message) | Self::Other(message) => f.write_str(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_keys_are_flat_and_bounded() {
        assert_eq!(project_key(Path::new("/home/me/app")), "-home-me-app");
        assert_eq!(project_key(Path::new("/a b/ü")), "-a_b-ü");
        let long = format!("/{}", "x".repeat(500));
        let key = project_key(Path::new(&long));
        assert!(key.chars().count() <= 120, "{key}");
        assert_ne!(
            key,
            project_key(Path::new(&format!("/y{}", "x".repeat(499))))
        );
    }

    #[test]
    fn ids_cannot_name_paths() {
        assert!(valid_id("01a2b3c4-0000-7000-8000-000000000000"));
        for bad in ["", "../x", "a/b", "x.jsonl", &"a".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_second_holder_is_told_who_holds_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let held = lock(dir.path(), "s1", Runner::Daemon).unwrap();
        let err = lock(dir.path(), "s1", Runner::Serve).unwrap_err();
        assert!(err.contains("open in the jucode daemon"), "{err}");
        assert!(err.contains("jucode serve --session s1"), "{err}");
        drop(held);
        lock(dir.path(), "s1", Runner::Serve).unwrap();
    }

    const HEADER: &str = r#"{"id":"e1","parent":null,"at":1,"tokens":0,"kind":"session","format":1,"session":"good","cwd":"/p","model":"m","created":5,"chat":false}"#;
    const USER: &str = r#"{"id":"e2","parent":"e1","at":2,"tokens":1,"kind":"user","content":"hello there","text":"hello there"}"#;

    fn broken_of<'a>(listed: &'a [SavedSession], id: &str) -> &'a str {
        let saved = listed
            .iter()
            .find(|saved| saved.id == id)
            .unwrap_or_else(|| panic!("{id} is not listed: {listed:#?}"));
        saved.broken.as_deref().unwrap_or("")
    }

    #[test]
    fn broken_files_are_listed_with_why() {
        let profile = tempfile::tempdir().unwrap();
        let dir = project_dir(profile.path(), Path::new("/p"));
        fs::create_dir_all(&dir).unwrap();
        let write =
            |id: &str, text: &str| fs::write(dir.join(format!("{id}.jsonl")), text).unwrap();
        write("good", &format!("\n{HEADER}\n{USER}\n"));
        write("empty", "");
        write("blank", "\n  \n");
        write("corrupt", "{\"id\":\"e1\",\"kind\":\"sess\n");
        write("headless", &format!("{USER}\n"));
        fs::write(dir.join("notes.txt"), "not a session").unwrap();
        fs::write(dir.join("bad name.jsonl"), "").unwrap();
        let listed = list(profile.path(), Some(Path::new("/p"))).unwrap();
        assert_eq!(listed.len(), 5, "{listed:#?}");
        let good = &listed[0];
        assert_eq!(good.id, "good");
        assert_eq!(good.broken, None);
        assert_eq!(good.label, "hello there");
        assert_eq!(good.cwd.as_deref(), Some(Path::new("/p")));
        assert!(broken_of(&listed, "empty").ends_with("empty.jsonl is empty"));
        assert!(broken_of(&listed, "blank").ends_with("is empty"));
        for id in ["corrupt", "headless"] {
            let why = broken_of(&listed, id);
            assert!(
                why.contains("does not start with a session header"),
                "{why}"
            );
            assert!(why.contains(&format!("{id}.jsonl")), "{why}");
        }
        let corrupt = listed.iter().find(|saved| saved.id == "corrupt").unwrap();
        assert_eq!(corrupt.cwd, None);
        assert!(
            corrupt.label.starts_with("(broken: the file"),
            "{}",
            corrupt.label
        );
    }

    #[test]
    fn a_listing_reads_only_the_files_that_changed_since_the_last() {
        let profile = tempfile::tempdir().unwrap();
        let dir = project_dir(profile.path(), Path::new("/p"));
        fs::create_dir_all(&dir).unwrap();
        let path = |id: &str| dir.join(format!("{id}.jsonl"));
        fs::write(path("good"), format!("{HEADER}\n{USER}\n")).unwrap();
        fs::write(path("other"), format!("{HEADER}\n")).unwrap();
        let first = list(profile.path(), None).unwrap();
        let index = sessions_dir(profile.path()).join("index.json");
        assert!(index.is_file(), "the listing cached what it read");
        // What the cache says is what the files say.
        assert_eq!(list(profile.path(), None).unwrap(), first);

        // A file that grew is read again; one removed leaves the cache.
        let more = USER.replace("e2", "e3").replace("hello there", "more");
        let mut grown = fs::OpenOptions::new()
            .append(true)
            .open(path("other"))
            .unwrap();
        writeln!(
            grown,
            "{}",
            USER.replace("hello there", "a new first message")
        )
        .unwrap();
        writeln!(grown, "{more}").unwrap();
        drop(grown);
        fs::remove_file(path("good")).unwrap();
        let listed = list(profile.path(), None).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].label, "a new first message");
        let cached = fs::read_to_string(&index).unwrap();
        assert!(!cached.contains("good.jsonl"), "{cached}");

        // A cache that cannot be read is rebuilt, never believed.
        fs::write(&index, "{not json").unwrap();
        assert_eq!(list(profile.path(), None).unwrap(), listed);
        assert!(fs::read_to_string(&index).unwrap().contains("other.jsonl"));
        // Nor is one that lies about a file whose stamp it does not match.
        fs::write(
            &index,
            r#"{"version":1,"entries":{"-p/other.jsonl":{"len":1,"modified_ns":1,"cwd":"/x","chat":true,"engine":null,"label":"lie","created":0,"updated":0}}}"#,
        )
        .unwrap();
        assert_eq!(list(profile.path(), None).unwrap(), listed);
    }

    #[cfg(unix)]
    #[test]
    fn links_are_listed_as_broken_or_refused_never_followed() {
        let profile = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let dir = project_dir(profile.path(), Path::new("/p"));
        fs::create_dir_all(&dir).unwrap();
        let target = elsewhere.path().join("victim");
        fs::write(&target, format!("{HEADER}\n")).unwrap();
        std::os::unix::fs::symlink(&target, dir.join("linked.jsonl")).unwrap();
        let listed = list(profile.path(), None).unwrap();
        let why = broken_of(&listed, "linked");
        assert!(why.contains("is a symbolic link"), "{why}");

        // A linked project folder: the listing names it rather than read through it.
        std::os::unix::fs::symlink(elsewhere.path(), sessions_dir(profile.path()).join("-q"))
            .unwrap();
        let err = list(profile.path(), None).unwrap_err();
        assert!(err.contains("-q is a symbolic link"), "{err}");
    }

    #[test]
    fn a_sessions_path_that_is_not_a_directory_is_an_error_and_none_is_empty() {
        let profile = tempfile::tempdir().unwrap();
        assert_eq!(list(profile.path(), None).unwrap(), []);
        fs::write(sessions_dir(profile.path()), "a file").unwrap();
        let err = list(profile.path(), None).unwrap_err();
        assert!(err.contains("sessions is not a directory"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn the_lock_refuses_links_in_the_sessions_place() {
        use std::os::unix::fs::symlink;
        let profile = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let dir = project_dir(profile.path(), Path::new("/p"));
        fs::create_dir_all(&dir).unwrap();
        // The lock file, and the session file beside it.
        symlink(&victim, dir.join("a.lock")).unwrap();
        symlink(&victim, dir.join("b.jsonl")).unwrap();
        for id in ["a", "b"] {
            let err = lock(&dir, id, Runner::Serve).unwrap_err();
            assert!(err.contains("is a symbolic link"), "{id}: {err}");
        }
        let err = open_for_append(&dir.join("b.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("b.jsonl is a symbolic link"), "{err}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        // A linked project folder, and a linked sessions folder: nothing is created in
        // what they point to.
        let linked = project_dir(profile.path(), Path::new("/q"));
        symlink(elsewhere.path(), &linked).unwrap();
        let err = lock(&linked, "c", Runner::Serve).unwrap_err();
        assert!(err.contains("-q is a symbolic link"), "{err}");
        let other = tempfile::tempdir().unwrap();
        symlink(elsewhere.path(), sessions_dir(other.path())).unwrap();
        let err = lock(
            &project_dir(other.path(), Path::new("/p")),
            "d",
            Runner::Serve,
        )
        .unwrap_err();
        assert!(err.contains("sessions is a symbolic link"), "{err}");
        let names: Vec<_> = fs::read_dir(elsewhere.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["victim"]);
    }
}
