//! Saved sessions as the engine sees them: what `/resume` lists and opens. The host
//! implements it (it knows where session files live and how a session is built).

use std::path::Path;

use crate::engine::SessionParams;

/// A saved session in `/resume`'s picker.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    pub id: String,
    /// Its first user message's first line.
    pub label: String,
    /// Milliseconds since the Unix epoch.
    pub updated: u64,
    /// Why it cannot be continued, when its file is broken (listed all the same).
    pub broken: Option<String>,
    /// The other agent it runs on; `None` for jucode's own engine.
    pub engine: Option<String>,
}

/// Both methods do file-system work: call them on the blocking pool.
pub trait Library: Send + Sync {
    /// Saved sessions, newest first, those of `cwd` first; an error when the place
    /// they are kept in cannot be listed.
    fn list(&self, cwd: &Path) -> Result<Vec<Saved>, String>;
    /// Everything to continue saved session `id` in this process (its file locked for
    /// it), or why it cannot be continued.
    fn open(&self, id: &str) -> Result<SessionParams, String>;
}

/// A library with nothing in it (tests, benchmarks).
pub struct NoLibrary;

impl Library for NoLibrary {
    fn list(&self, _: &Path) -> Result<Vec<Saved>, String> {
        Ok(Vec::new())
    }

    fn open(&self, id: &str) -> Result<SessionParams, String> {
        Err(format!("unknown session: {id}"))
    }
}
