//! The listing's cache (`sessions/index.json`): what a listing read from the head of
//! each session file, with the file's size and modification time. A listing then only
//! reads the files that changed since (stat-ing the rest), so a profile with thousands
//! of sessions lists in milliseconds. The cache is never the truth: an entry whose file
//! changed, vanished or was never seen is read from the file, and a cache that cannot
//! be read is rebuilt.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::files::SavedSession;

const FILE: &str = "index.json";
/// Bumped when an entry's meaning changes: an index of another version is rebuilt.
const VERSION: u32 = 1;

#[derive(Default, Serialize, Deserialize)]
struct Index {
    version: u32,
    /// By the file's path below the sessions folder.
    entries: HashMap<String, Cached>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Cached {
    len: u64,
    modified_ns: u128,
    cwd: Option<PathBuf>,
    chat: bool,
    engine: Option<String>,
    label: String,
    created: u64,
    updated: u64,
}

/// One listing's use of the cache.
pub(super) struct Listing {
    root: PathBuf,
    index: Index,
    seen: HashSet<String>,
    changed: bool,
}

impl Listing {
    /// The cache of the sessions folder `root` (empty when there is none or it is not
    /// one this version wrote).
    pub(super) fn open(root: &Path) -> Self {
        let index = fs::read(root.join(FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Index>(&bytes).ok())
            .filter(|index| index.version == VERSION)
            .unwrap_or_default();
        Self {
            root: root.to_path_buf(),
            index,
            seen: HashSet::new(),
            changed: false,
        }
    }

    /// The listing of session `id` at `path`: from the cache when the file is as it
    /// was, from `read` (and cached) otherwise. Only regular files that could be read
    /// are cached: a broken one is looked at again every time.
    pub(super) fn summary(
        &mut self,
        path: &Path,
        id: &str,
        read: impl FnOnce(&Path, &str) -> SavedSession,
    ) -> SavedSession {
        let Some(key) = path
            .strip_prefix(&self.root)
            .ok()
            .and_then(Path::to_str)
            .map(str::to_owned)
        else {
            return read(path, id);
        };
        let stamp = fs::symlink_metadata(path).ok().and_then(|meta| {
            let modified = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
            meta.is_file().then_some((meta.len(), modified.as_nanos()))
        });
        self.seen.insert(key.clone());
        if let (Some((len, modified_ns)), Some(cached)) = (stamp, self.index.entries.get(&key))
            && cached.len == len
            && cached.modified_ns == modified_ns
        {
            return SavedSession {
                id: id.to_owned(),
                cwd: cached.cwd.clone(),
                chat: cached.chat,
                engine: cached.engine.clone(),
                label: cached.label.clone(),
                created: cached.created,
                updated: cached.updated,
                path: path.to_owned(),
                broken: None,
            };
        }
        let saved = read(path, id);
        match (stamp, &saved.broken) {
            (Some((len, modified_ns)), None) => {
                let cached = Cached {
                    len,
                    modified_ns,
                    cwd: saved.cwd.clone(),
                    chat: saved.chat,
                    engine: saved.engine.clone(),
                    label: saved.label.clone(),
                    created: saved.created,
                    updated: saved.updated,
                };
                self.index.entries.insert(key, cached);
                self.changed = true;
            }
            _ => {
                if self.index.entries.remove(&key).is_some() {
                    self.changed = true;
                }
            }
        }
        saved
    }

    /// Writes the cache back when it changed (entries of files gone are dropped). A
    /// cache that cannot be written only costs the next listing its reads.
    pub(super) fn save(mut self) {
        let before = self.index.entries.len();
        let seen = std::mem::take(&mut self.seen);
        self.index.entries.retain(|key, _| seen.contains(key));
        if !self.changed && self.index.entries.len() == before {
            return;
        }
        self.index.version = VERSION;
        let Ok(bytes) = serde_json::to_vec(&self.index) else {
            return;
        };
        let temporary = self.root.join(format!("{FILE}.{}.tmp", std::process::id()));
        let written = crate::config::private::own_file_options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)
            .and_then(|mut file| file.write_all(&bytes))
            .and_then(|()| fs::rename(&temporary, self.root.join(FILE)));
        if let Err(err) = written {
            let _ = fs::remove_file(&temporary);
            tracing::debug!(%err, "the sessions' listing cache was not written");
        }
    }
}
