//! Deferred actions: gated calls recorded while nobody watches the session.
//!
//! An unattended session cannot ask, so a call that would need approval is recorded
//! instead and the model is told it was submitted for confirmation. The same call
//! (tool, arguments, working directory) made again reuses the open action, or the
//! decision already made for it, rather than piling up duplicates.

use std::path::{Path, PathBuf};

use crate::engine::ports::tools::ToolOutput;
use crate::protocol::Event;

#[derive(Debug, Clone)]
pub struct DeferredAction {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    pub summary: String,
    pub cwd: PathBuf,
    pub state: ActionState,
    /// The `action_deferred` event that announced it, shown again to a client that
    /// attaches while the action waits for a decision.
    pub announced: Event,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionState {
    Open,
    /// Allowed; the call is running in the background.
    Running,
    Allowed(ToolOutput),
    Denied,
}

#[derive(Debug, Default)]
pub struct DeferredActions {
    actions: Vec<DeferredAction>,
}

impl DeferredActions {
    /// The latest action for the same call: same tool, same arguments (object keys in
    /// any order) and same working directory. Compared in full, never by `digest`: two
    /// different calls must never share a decision, however unlikely a collision.
    pub fn same_call(
        &self,
        name: &str,
        arguments: &serde_json::Value,
        cwd: &Path,
    ) -> Option<&DeferredAction> {
        self.actions.iter().rev().find(|action| {
            action.name == name && action.cwd == cwd && action.arguments == *arguments
        })
    }

    /// The actions still waiting for a decision, oldest first.
    pub fn open(&self) -> impl Iterator<Item = &DeferredAction> {
        self.actions
            .iter()
            .filter(|action| action.state == ActionState::Open)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut DeferredAction> {
        self.actions.iter_mut().find(|action| action.id == id)
    }

    pub fn insert(&mut self, action: DeferredAction) {
        self.actions.push(action);
    }
}

/// A short fingerprint of the call (tool, canonical arguments with object keys sorted,
/// cwd) for the `action_deferred` event, so a front-end can group identical calls.
/// Only a label: the engine matches calls with [`DeferredActions::same_call`].
pub fn digest(name: &str, arguments: &serde_json::Value, cwd: &Path) -> String {
    // serde_json's map is ordered by key, so `to_string` is canonical.
    let canonical = format!("{name}\0{arguments}\0{}", cwd.display());
    format!(
        "{:016x}",
        crate::engine::conversation::o200k::fnv1a(canonical.as_bytes())
    )
}

/// `act-<epoch ms>-<8 hex>`, as the protocol's examples spell action ids.
pub fn new_action_id(now_ms: u64) -> String {
    let random = uuid::Uuid::new_v4().as_u128() as u32;
    format!("act-{now_ms}-{random:08x}")
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digest_ignores_key_order_but_not_values_or_cwd() {
        let a = digest(
            "bash",
            &json!({"command": "make", "timeout_ms": 5}),
            Path::new("/p"),
        );
        let b = digest(
            "bash",
            &json!({"timeout_ms": 5, "command": "make"}),
            Path::new("/p"),
        );
        let c = digest("bash", &json!({"command": "make deploy"}), Path::new("/p"));
        let d = digest(
            "bash",
            &json!({"command": "make", "timeout_ms": 5}),
            Path::new("/q"),
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert_eq!(a.len(), 16);
    }

    #[test]
    fn the_same_call_is_matched_in_full() {
        let mut actions = DeferredActions::default();
        let arguments = json!({"command": "make", "timeout_ms": 5});
        actions.insert(DeferredAction {
            id: "act-1".into(),
            name: "bash".into(),
            arguments: arguments.clone(),
            summary: "make".into(),
            cwd: PathBuf::from("/p"),
            state: ActionState::Open,
            announced: Event::info("announced"),
        });
        let reordered = json!({"timeout_ms": 5, "command": "make"});
        let found = actions.same_call("bash", &reordered, Path::new("/p"));
        assert_eq!(found.map(|a| a.id.as_str()), Some("act-1"));
        assert!(
            actions
                .same_call("bash", &json!({"command": "make"}), Path::new("/p"))
                .is_none()
        );
        assert!(
            actions
                .same_call("bash", &arguments, Path::new("/q"))
                .is_none()
        );
        assert!(
            actions
                .same_call("write_file", &arguments, Path::new("/p"))
                .is_none()
        );
    }

    #[test]
    fn action_ids_look_like_the_spec() {
        let id = new_action_id(1_727_500_000_000);
        assert!(id.starts_with("act-1727500000000-"), "{id}");
        assert_eq!(id.len(), "act-1727500000000-3f9a1c2b".len());
    }
}
