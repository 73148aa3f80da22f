//! The user's trust decisions, in `<profile>/trust.json`.
//!
//! A decision is about a directory (`/trust yes`, `/trust no`: sessions whose working
//! directory is exactly this one) or about a repository (`/trust repo`: any directory
//! inside it). A directory's own decision wins over its repository's, so a user can
//! trust a repository yet refuse one directory of it.
//!
//! Several processes (serve, the daemon) may decide at once: each change re-reads the
//! file under an exclusive lock of `trust.json.lock` and replaces it in one rename, so
//! no decision is lost and a reader never sees half a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::ports::project::TrustDecision;

/// Whether the project's resources may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    Trusted,
    Untrusted,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TrustFile {
    #[serde(default)]
    dirs: BTreeMap<PathBuf, Trust>,
    #[serde(default)]
    repos: BTreeMap<PathBuf, Trust>,
}

pub struct TrustStore {
    path: PathBuf,
}

impl TrustStore {
    pub fn new(profile_dir: &Path) -> Self {
        Self {
            path: profile_dir.join("trust.json"),
        }
    }

    /// The decision that applies to `cwd` in `repo_root`, if any. An unreadable file
    /// counts as no decision (the user is asked again, nothing is used meanwhile).
    pub fn lookup(&self, cwd: &Path, repo_root: &Path) -> Option<Trust> {
        let file = self.read().ok()?;
        file.dirs
            .get(cwd)
            .or_else(|| file.repos.get(repo_root))
            .copied()
    }

    /// Records `decision` for `cwd` (or its repository, for [`TrustDecision::Repo`]).
    pub fn decide(
        &self,
        cwd: &Path,
        repo_root: &Path,
        decision: TrustDecision,
    ) -> Result<(), String> {
        let fail = |err: std::io::Error| {
            format!(
                "cannot record the decision in {}: {err}",
                self.path.display()
            )
        };
        if let Some(dir) = self.path.parent() {
            crate::config::private::create_dir_all(dir).map_err(fail)?;
        }
        let mut lock_path = self.path.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock = crate::config::private::file_options()
            .create(true)
            .truncate(true)
            .write(true)
            .open(PathBuf::from(lock_path))
            .map_err(fail)?;
        lock.lock().map_err(fail)?;
        // A file that cannot be read is not silently replaced: its decisions would be
        // lost. The user fixes or removes it.
        let mut file = self.read()?;
        match decision {
            TrustDecision::Yes => {
                file.dirs.insert(cwd.to_path_buf(), Trust::Trusted);
            }
            TrustDecision::No => {
                file.dirs.insert(cwd.to_path_buf(), Trust::Untrusted);
            }
            TrustDecision::Repo => {
                // The repository's decision must reach this directory too.
                file.dirs.remove(cwd);
                file.repos.insert(repo_root.to_path_buf(), Trust::Trusted);
            }
        }
        let mut bytes = serde_json::to_vec_pretty(&file).map_err(|err| err.to_string())?;
        bytes.push(b'\n');
        crate::config::mcp::write_atomically(&self.path, &bytes).map_err(fail)
    }

    fn read(&self) -> Result<TrustFile, String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|err| format!("{} is not a valid trust file: {err}", self.path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(TrustFile::default()),
            Err(err) => Err(format!("cannot read {}: {err}", self.path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_apply_to_directories_and_repositories() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::new(dir.path());
        let (root, app, lib) = (Path::new("/r"), Path::new("/r/app"), Path::new("/r/lib"));
        assert_eq!(store.lookup(app, root), None);
        store.decide(app, root, TrustDecision::No).unwrap();
        assert_eq!(store.lookup(app, root), Some(Trust::Untrusted));
        assert_eq!(store.lookup(lib, root), None);
        store.decide(lib, root, TrustDecision::Repo).unwrap();
        assert_eq!(store.lookup(lib, root), Some(Trust::Trusted));
        // The directory's own "no" still stands.
        assert_eq!(store.lookup(app, root), Some(Trust::Untrusted));
        store.decide(app, root, TrustDecision::Repo).unwrap();
        assert_eq!(store.lookup(app, root), Some(Trust::Trusted));
        store
            .decide(Path::new("/x"), Path::new("/x"), TrustDecision::Yes)
            .unwrap();
        assert_eq!(
            store.lookup(Path::new("/x"), Path::new("/x")),
            Some(Trust::Trusted)
        );
        std::fs::write(dir.path().join("trust.json"), "[1]").unwrap();
        assert_eq!(store.lookup(app, root), None);
        assert!(store.decide(app, root, TrustDecision::Yes).is_err());
    }
}
