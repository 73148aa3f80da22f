//! What a failed sandboxed command's output says about the sandbox.
//!
//! The kernel does not tell a process *why* it got `EACCES` or `EPERM`: Landlock's
//! refusal and an ordinary permission problem read the same. So this reads the output
//! for the usual messages ("Permission denied", "Operation not permitted"), takes the
//! paths they name, and blames the sandbox for a path only when it lies outside the
//! writable places *and* the engine itself (unsandboxed, the same user) could write
//! there: then the sandbox is the only difference. Otherwise it says the sandbox *may*
//! have refused something (a network connection, most often), never more.

use std::path::{Path, PathBuf};

use super::Policy;
use crate::engine::{normalize, resolve_existing};

const REFUSALS: [&str; 4] = [
    "permission denied",
    "operation not permitted",
    "errno 13",
    "errno 1]",
];

/// Most paths named in the note.
const MAX_PATHS: usize = 3;

/// A note for the model when `output` (of a command that failed under `policy`, named
/// `mode`) looks like the sandbox refused something; `None` when nothing suggests it.
pub fn explain_refusal(output: &str, cwd: &Path, policy: &Policy, mode: &str) -> Option<String> {
    let lines: Vec<&str> = output
        .lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            REFUSALS.iter().any(|refusal| lower.contains(refusal))
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    let mut refused: Vec<PathBuf> = Vec::new();
    for line in &lines {
        for path in candidate_paths(line) {
            let absolute = normalize(&cwd.join(&path));
            if refused.len() < MAX_PATHS
                && !refused.contains(&absolute)
                && !is_writable_under(&absolute, &policy.writable)
                && writable_without_sandbox(&absolute)
            {
                refused.push(absolute);
            }
        }
    }
    let places = policy
        .writable
        .iter()
        .map(|root| root.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let network = if policy.network { "allowed" } else { "off" };
    let what = if refused.is_empty() {
        let writes = if places.is_empty() {
            "no writes are allowed".to_owned()
        } else {
            format!("writes are allowed only under: {places}")
        };
        format!(
            "the sandbox may have refused something this command did ({writes}; network: \
             {network}); the \"permission denied\" / \"operation not permitted\" above may \
             also be an ordinary permission problem"
        )
    } else {
        let paths: Vec<String> = refused
            .iter()
            .map(|path| format!("a write to {}", path.display()))
            .collect();
        let why = if places.is_empty() {
            "this sandbox is read-only: commands write nowhere".to_owned()
        } else {
            format!("outside the places this sandbox lets commands write ({places})")
        };
        format!("the sandbox refused {}: {why}", paths.join(", "))
    };
    Some(format!(
        "[sandbox `{mode}`: {what}. If the command needs it, call bash again with the same \
         command and \"unsandboxed\": true; the user will be asked to approve running it \
         without the sandbox.]"
    ))
}

/// Words of `line` that look like paths: quoted or bare, with a `/`, before a colon.
fn candidate_paths(line: &str) -> Vec<PathBuf> {
    line.split(|c: char| c.is_whitespace() || c == ':' || c == ',')
        .map(|word| word.trim_matches(|c| matches!(c, '\'' | '"' | '`' | '‘' | '’' | '(' | ')')))
        .filter(|word| word.contains('/') && !word.contains("://"))
        .map(PathBuf::from)
        .collect()
}

fn is_writable_under(path: &Path, roots: &[PathBuf]) -> bool {
    let path = resolve_existing(path);
    roots
        .iter()
        .any(|root| path.starts_with(root.canonicalize().unwrap_or_else(|_| root.clone())))
}

/// Whether this process (not sandboxed) could write `path`: the file, or the directory
/// it would be created in.
fn writable_without_sandbox(path: &Path) -> bool {
    use nix::unistd::{AccessFlags, access};
    let target = if path.exists() {
        path.to_path_buf()
    } else {
        match path.parent() {
            Some(parent) => parent.to_path_buf(),
            None => return false,
        }
    };
    access(&target, AccessFlags::W_OK).is_ok()
}
