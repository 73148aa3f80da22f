//! What clients are shown of the store: the transcript, the branch tree, the
//! checkpoints; and where a turn ends.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::{Entry, EntryBody, EntryId, Store, entry};
use crate::protocol::{CheckpointItem, PlanStatus, TreeNode};

impl Store {
    /// The encoded transcript items of the active branch, in order: reference counts,
    /// except for plans whose status changed since they were delivered (re-encoded, a
    /// few per session at most).
    pub fn transcript_items(&self) -> Vec<Bytes> {
        let statuses = self.plan_statuses();
        let mut items = Vec::with_capacity(self.branch.len());
        for entry in &self.branch {
            let Some(shown) = entry.shown() else { continue };
            match &entry.body {
                EntryBody::Plan { id, status, .. }
                    if statuses
                        .get(id.as_str())
                        .is_some_and(|latest| latest != status) =>
                {
                    let latest = statuses[id.as_str()];
                    if let Some(item) = entry::plan_item(&entry.body, latest) {
                        items.push(item);
                    }
                }
                _ => items.push(shown.clone()),
            }
        }
        items
    }

    /// The end of the turn that `start` (a user message starting it) began: the last
    /// entry of the chain of its own entries, which stops at the next turn or branch.
    pub fn turn_end(&self, start: &str) -> Option<EntryId> {
        let mut at = self.get(start)?.clone();
        loop {
            let next = self
                .children
                .get(&at.id)
                .into_iter()
                .flatten()
                .map(|&index| &self.order[index])
                .find(|child| {
                    !child.starts_turn() && !matches!(child.body, EntryBody::Branch { .. })
                })
                .cloned();
            match next {
                Some(child) => at = child,
                None => return Some(at.id.clone()),
            }
        }
    }

    /// The conversation's tree as `/tree` shows it: the start of the session, every turn
    /// (labelled with its user message), branch points and compactions; each node's
    /// parent is the nearest node before it. `active`: on the active branch.
    pub fn tree_nodes(&self) -> Vec<TreeNode> {
        let on_branch: std::collections::HashSet<&str> =
            self.branch.iter().map(|e| &*e.id).collect();
        let mut nearest: HashMap<&str, Option<EntryId>> = HashMap::new();
        let mut nodes = Vec::new();
        for entry in &self.order {
            let inherited = entry
                .parent
                .as_deref()
                .and_then(|parent| nearest.get(parent).cloned())
                .flatten();
            if is_node(entry) {
                nodes.push(TreeNode {
                    id: entry.id.to_string(),
                    parent_id: inherited.as_ref().map(|id| id.to_string()),
                    label: node_label(entry),
                    active: on_branch.contains(&*entry.id),
                });
                nearest.insert(&entry.id, Some(entry.id.clone()));
            } else {
                nearest.insert(&entry.id, inherited);
            }
        }
        nodes
    }

    /// The turns of the active branch that changed files, oldest first, as `/checkout`
    /// lists them: `id` is the turn's user message.
    pub fn checkpoint_items(&self) -> Vec<CheckpointItem> {
        let mut order: Vec<EntryId> = Vec::new();
        let mut files: HashMap<EntryId, Vec<String>> = HashMap::new();
        for entry in &self.branch {
            if let EntryBody::Checkpoint {
                turn,
                files: changed,
            } = &entry.body
            {
                let list = files.entry(turn.clone()).or_insert_with(|| {
                    order.push(turn.clone());
                    Vec::new()
                });
                for file in changed {
                    let path = file.path.display().to_string();
                    if !list.contains(&path) {
                        list.push(path);
                    }
                }
            }
        }
        order
            .into_iter()
            .map(|turn| CheckpointItem {
                label: self
                    .get(&turn)
                    .and_then(|entry| entry.label())
                    .unwrap_or_default(),
                detail: files.remove(&turn).unwrap_or_default().join(", "),
                id: turn.to_string(),
            })
            .collect()
    }

    /// The checkpoints to undo to get back to before turn `turn`: its own and those of
    /// every later turn on the active branch, newest first. `None` when the turn is not
    /// on the active branch.
    pub fn checkpoints_since(&self, turn: &str) -> Option<Vec<Arc<Entry>>> {
        let start = self.branch.iter().position(|e| &*e.id == turn)?;
        Some(
            self.branch[start..]
                .iter()
                .filter(|e| matches!(e.body, EntryBody::Checkpoint { .. }))
                .rev()
                .cloned()
                .collect(),
        )
    }

    /// The first user message of the session (for labels), on any branch.
    pub fn first_user_message(&self) -> Option<String> {
        self.order.iter().find_map(|entry| match &entry.body {
            EntryBody::User { shown, .. } => Some(shown.content.clone()),
            _ => None,
        })
    }

    /// Whether the session holds anything worth keeping (a user message).
    pub fn has_turns(&self) -> bool {
        self.order.iter().any(|entry| entry.starts_turn())
    }

    /// The plan statuses as they stand on the active branch.
    pub fn plan_status(&self, plan: &str) -> Option<PlanStatus> {
        self.plan_statuses().get(plan).copied()
    }
}

fn is_node(entry: &Entry) -> bool {
    matches!(
        entry.body,
        EntryBody::Session(_) | EntryBody::Branch { .. } | EntryBody::Compaction { .. }
    ) || entry.starts_turn()
}

fn node_label(entry: &Entry) -> String {
    let label = entry.label().unwrap_or_default();
    let date = chrono::DateTime::from_timestamp_millis(entry.at as i64)
        .map(|at| at.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_default();
    if date.is_empty() {
        label
    } else {
        format!("{label} ({date})")
    }
}
