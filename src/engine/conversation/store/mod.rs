//! One session's conversation: an append-only tree of immutable, shared entries.
//!
//! Every entry has a parent, so going back to an earlier point (`/tree`, `/checkout`) or
//! compacting never rewrites anything: it appends. The *active branch* is the path
//! from the root to the current leaf; the model reads it (from its last compaction on),
//! clients are shown it (`transcript`), and new entries extend it.
//!
//! The store hands out `Arc<Entry>` clones: a model request is a vector of them, a
//! snapshot is a vector of the entries' pre-encoded transcript items. Nothing is ever
//! re-serialized or deep-copied on those paths. Every entry is handed to the
//! [`Journal`] as it is appended, which writes the session file (see `crate::sessions`).

mod entry;
mod views;

use std::collections::HashMap;
use std::sync::Arc;

pub use entry::{
    ApprovalMark, Entry, EntryBody, EntryId, FileBefore, HostedEngine, SUMMARY_PREFIX, SavedAgent,
    SessionMeta, first_line, plan_item, summary_message,
};

use crate::engine::ports::model::{Message, ToolCall};
use crate::protocol::PlanStatus;

/// Where appended entries go to be persisted. Implemented by the session file writer.
pub trait Journal: Send + Sync {
    /// Queues an entry to be written; never blocks (the entry is already in memory, so
    /// the queue holds references, not copies).
    fn append(&self, entry: &Arc<Entry>);
    /// Asks for everything appended so far to be made durable (`fsync`), without
    /// waiting for it: the end of a turn must not wait on a disk.
    fn sync(&self);
    /// Resolves once everything appended so far is handed to the kernel (written, not
    /// necessarily `fsync`ed): from then on a `kill -9` cannot lose it. A few
    /// microseconds normally; the session waits on it only at a turn's start and end.
    fn written(&self) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
    /// A failure to report (once), if persisting failed since the last call.
    fn take_error(&self) -> Option<String> {
        None
    }
    /// Persisting works again after a failure (once): what to tell the session.
    fn take_recovered(&self) -> Option<String> {
        None
    }
}

/// How long a session waits for its journal's writes before it goes on anyway: a disk
/// that hangs must not hang the session (a failure is reported when it comes).
const WRITE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits for [`Journal::written`], at most [`WRITE_WAIT`].
pub async fn wait_written(written: futures_util::future::BoxFuture<'static, ()>) {
    if tokio::time::timeout(WRITE_WAIT, written).await.is_err() {
        tracing::warn!("the session file's writes take longer than {WRITE_WAIT:?}; going on");
    }
}

/// A journal that keeps nothing (tests, benchmarks of the store itself).
pub struct NoJournal;

impl Journal for NoJournal {
    fn append(&self, _: &Arc<Entry>) {}
    fn sync(&self) {}
}

/// An entry body about to be appended (its token count when it is known).
pub struct Prepared {
    body: EntryBody,
    tokens: Option<u64>,
}

impl Prepared {
    /// A body whose tokens are counted when first asked for.
    pub fn new(body: EntryBody) -> Self {
        Self { body, tokens: None }
    }

    /// A body the model reads nothing of, or whose count is known.
    pub fn counted(body: EntryBody, tokens: u64) -> Self {
        Self {
            body,
            tokens: Some(tokens),
        }
    }

    pub fn body(&self) -> &EntryBody {
        &self.body
    }
}

pub struct Store {
    /// Every entry, in the order it was appended (the session file's order).
    order: Vec<Arc<Entry>>,
    by_id: HashMap<EntryId, usize>,
    /// Indexes into `order` of each entry's children, oldest first.
    children: HashMap<EntryId, Vec<usize>>,
    /// Root to leaf.
    branch: Vec<Arc<Entry>>,
    next: u64,
    journal: Arc<dyn Journal>,
}

impl Store {
    /// A new session: its metadata is the root entry.
    pub fn new(meta: SessionMeta, journal: Arc<dyn Journal>) -> Self {
        let mut store = Self::empty(journal);
        store.append(Prepared::counted(EntryBody::Session(meta), 0));
        store
    }

    /// A session read back from its file, in file order. Entries whose parent is not
    /// among those before them are dropped (with a warning each). The leaf is the last
    /// entry. `Err` when there is no metadata entry to start from.
    pub fn load(
        entries: Vec<Entry>,
        journal: Arc<dyn Journal>,
    ) -> Result<(Self, Vec<String>), String> {
        let mut store = Self::empty(journal);
        let mut warnings = Vec::new();
        for entry in entries {
            let fits = match &entry.parent {
                None => store.order.is_empty() && matches!(entry.body, EntryBody::Session(_)),
                Some(parent) => store.by_id.contains_key(parent),
            };
            if !fits || store.by_id.contains_key(&entry.id) {
                warnings.push(format!(
                    "entry {} does not continue the conversation and was skipped",
                    entry.id
                ));
                continue;
            }
            if let Some(number) = entry
                .id
                .strip_prefix('e')
                .and_then(|n| n.parse::<u64>().ok())
            {
                store.next = store.next.max(number + 1);
            }
            store.insert(Arc::new(entry));
        }
        if store.order.is_empty() {
            return Err("the session file has no session entry".to_owned());
        }
        let leaf = store.order[store.order.len() - 1].id.clone();
        store.rebuild_branch(&leaf);
        Ok((store, warnings))
    }

    fn empty(journal: Arc<dyn Journal>) -> Self {
        Self {
            order: Vec::new(),
            by_id: HashMap::new(),
            children: HashMap::new(),
            branch: Vec::new(),
            next: 1,
            journal,
        }
    }

    fn insert(&mut self, entry: Arc<Entry>) {
        let index = self.order.len();
        self.by_id.insert(entry.id.clone(), index);
        if let Some(parent) = &entry.parent {
            self.children.entry(parent.clone()).or_default().push(index);
        }
        self.order.push(entry);
    }

    /// Appends after the leaf, which it becomes; hands it to the journal.
    pub fn append(&mut self, prepared: Prepared) -> Arc<Entry> {
        let id: EntryId = Arc::from(format!("e{}", self.next));
        self.next += 1;
        let parent = self.branch.last().map(|leaf| leaf.id.clone());
        let entry = Arc::new(Entry::with_tokens(
            id,
            parent,
            now_ms(),
            prepared.body,
            prepared.tokens,
        ));
        self.insert(entry.clone());
        self.branch.push(entry.clone());
        self.journal.append(&entry);
        entry
    }

    /// Makes `id` the leaf: what is appended next continues from it.
    pub fn move_to(&mut self, id: &str) -> Result<(), String> {
        if !self.by_id.contains_key(id) {
            return Err(format!("unknown entry: {id}"));
        }
        let id = self.order[self.by_id[id]].id.clone();
        self.rebuild_branch(&id);
        Ok(())
    }

    fn rebuild_branch(&mut self, leaf: &EntryId) {
        let mut path = Vec::new();
        let mut at = Some(leaf.clone());
        while let Some(id) = at {
            let Some(&index) = self.by_id.get(&id) else {
                break;
            };
            let entry = self.order[index].clone();
            at = entry.parent.clone();
            path.push(entry);
        }
        path.reverse();
        self.branch = path;
    }

    pub fn get(&self, id: &str) -> Option<&Arc<Entry>> {
        self.by_id.get(id).map(|&index| &self.order[index])
    }

    /// Every entry, on every branch, in the order they were made.
    pub fn entries(&self) -> &[Arc<Entry>] {
        &self.order
    }

    /// Root to leaf.
    pub fn branch(&self) -> &[Arc<Entry>] {
        &self.branch
    }

    pub fn leaf(&self) -> &Arc<Entry> {
        // Never empty: the root is appended first, and moves only go to entries.
        &self.branch[self.branch.len() - 1]
    }

    pub fn meta(&self) -> Option<&SessionMeta> {
        match &self.order.first()?.body {
            EntryBody::Session(meta) => Some(meta),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn journal(&self) -> &Arc<dyn Journal> {
        &self.journal
    }

    /// The calls of the active branch's latest reply that have no result (the process
    /// stopped while they waited or ran), in the reply's order, each with whether it
    /// was waiting for the user's approval (its latest mark says it was asked).
    pub fn unanswered_calls(&self) -> Vec<(ToolCall, bool)> {
        let Some(reply) = self
            .branch
            .iter()
            .rposition(|entry| matches!(entry.body, EntryBody::Assistant(_)))
        else {
            return Vec::new();
        };
        let EntryBody::Assistant(Message::Assistant { tool_calls, .. }) = &self.branch[reply].body
        else {
            return Vec::new();
        };
        let mut answered = std::collections::HashSet::new();
        let mut marks = HashMap::new();
        for entry in &self.branch[reply + 1..] {
            match &entry.body {
                EntryBody::ToolResult(Message::Tool { call_id, .. }) => {
                    answered.insert(call_id.as_str());
                }
                EntryBody::Approval { call_id, mark } => {
                    marks.insert(call_id.as_str(), *mark);
                }
                _ => {}
            }
        }
        tool_calls
            .iter()
            .filter(|call| !answered.contains(call.id.as_str()))
            .map(|call| {
                let waiting = marks.get(call.id.as_str()) == Some(&ApprovalMark::Asked);
                (call.clone(), waiting)
            })
            .collect()
    }

    /// What the next model request carries: the active branch from its last compaction
    /// on (the summary, then the entries it kept, then what followed), entries the
    /// model reads only. Reference counts, no copies.
    pub fn request(&self) -> Vec<Arc<Entry>> {
        let start = self.request_start();
        let mut out = Vec::with_capacity(self.branch.len() - start.0);
        if let Some(compaction) = start.1 {
            out.push(self.branch[compaction].clone());
            out.extend(
                self.branch[start.0..compaction]
                    .iter()
                    .filter(|e| e.message().is_some())
                    .cloned(),
            );
            out.extend(
                self.branch[compaction + 1..]
                    .iter()
                    .filter(|e| e.message().is_some())
                    .cloned(),
            );
        } else {
            out.extend(
                self.branch
                    .iter()
                    .filter(|e| e.message().is_some())
                    .cloned(),
            );
        }
        out
    }

    /// Tokens of [`Store::request`]'s messages: a sum of cached counts (entries never
    /// counted are counted now: call it outside the session's lock when they may be
    /// long, see [`Store::request`]).
    pub fn request_tokens(&self) -> u64 {
        self.request().iter().map(|entry| entry.tokens()).sum()
    }

    /// `(index of the first entry read after the summary, index of the last compaction)`.
    fn request_start(&self) -> (usize, Option<usize>) {
        let Some(compaction) = self
            .branch
            .iter()
            .rposition(|e| matches!(e.body, EntryBody::Compaction { .. }))
        else {
            return (0, None);
        };
        let kept = match &self.branch[compaction].body {
            EntryBody::Compaction {
                kept_from: Some(kept),
                ..
            } => self
                .branch
                .iter()
                .position(|e| &e.id == kept)
                .unwrap_or(compaction),
            _ => compaction,
        };
        (kept, Some(compaction))
    }

    /// The latest status of each plan delivered on the active branch.
    fn plan_statuses(&self) -> HashMap<&str, PlanStatus> {
        let mut statuses = HashMap::new();
        for entry in &self.branch {
            match &entry.body {
                EntryBody::Plan { id, status, .. } => {
                    statuses.insert(id.as_str(), *status);
                }
                EntryBody::PlanStatus { plan, status } => {
                    statuses.insert(plan.as_str(), *status);
                }
                _ => {}
            }
        }
        statuses
    }

    /// A plan delivered on the active branch: `(title, markdown, latest status)`.
    pub fn plan(&self, wanted: &str) -> Option<(String, String, PlanStatus)> {
        let statuses = self.plan_statuses();
        self.branch.iter().find_map(|entry| match &entry.body {
            EntryBody::Plan {
                id,
                title,
                markdown,
                ..
            } if id == wanted => Some((
                title.clone(),
                markdown.clone(),
                statuses.get(id.as_str()).copied()?,
            )),
            _ => None,
        })
    }
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
