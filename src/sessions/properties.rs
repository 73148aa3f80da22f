//! The conversation store against a plain model of it (`docs/reliability.md`): any
//! sequence of appends, branches, checkouts, compactions and reloads (through the real
//! file format and loader) gives the same conversation as a list of `(id, parent)` pairs
//! with a leaf pointer, and the model reads what the plain rule says it reads.

use std::sync::Arc;

use proptest::prelude::*;

use crate::engine::Message;
use crate::engine::conversation::store::{EntryBody, NoJournal, Prepared, SessionMeta, Store};
use crate::protocol::UserMessageEvent;

#[derive(Debug, Clone)]
enum Step {
    User(String),
    Reply(String),
    /// `/tree`: continue from the entry at this position (modulo the count) of all.
    Branch(usize),
    /// `/checkout`: go back to before the user entry at this position of the branch's.
    Checkout(usize),
    /// A summary keeping the branch from this position (modulo its length) on.
    Compact(usize),
    Reload,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => "[a-z ]{0,12}".prop_map(Step::User),
        3 => "[a-z ]{0,12}".prop_map(Step::Reply),
        1 => any::<usize>().prop_map(Step::Branch),
        1 => any::<usize>().prop_map(Step::Checkout),
        1 => any::<usize>().prop_map(Step::Compact),
        1 => Just(Step::Reload),
    ]
}

/// The plain model: every entry as `(id, parent, text the model reads or None, is a
/// compaction keeping from)`, and the leaf.
#[derive(Debug, Default)]
struct Plain {
    entries: Vec<PlainEntry>,
    leaf: usize,
}

#[derive(Debug, Clone)]
struct PlainEntry {
    id: String,
    parent: Option<usize>,
    reads: Option<String>,
    user: bool,
    /// A compaction: the index of the first entry it keeps (`None`: keeps nothing).
    compaction: Option<Option<usize>>,
}

impl Plain {
    fn append(&mut self, reads: Option<String>, user: bool, compaction: Option<Option<usize>>) {
        let parent = (!self.entries.is_empty()).then_some(self.leaf);
        self.entries.push(PlainEntry {
            id: format!("e{}", self.entries.len() + 1),
            parent,
            reads,
            user,
            compaction,
        });
        self.leaf = self.entries.len() - 1;
    }

    fn branch(&self) -> Vec<usize> {
        let mut path = vec![self.leaf];
        while let Some(parent) = self.entries[*path.last().unwrap_or(&0)].parent {
            path.push(parent);
        }
        path.reverse();
        path
    }

    /// What the model reads: from the last compaction on the branch, its summary, the
    /// entries it kept and what follows it; else the whole branch.
    fn request(&self) -> Vec<String> {
        let branch = self.branch();
        let reads = |indexes: &[usize]| -> Vec<String> {
            indexes
                .iter()
                .filter_map(|&i| self.entries[i].reads.clone())
                .collect()
        };
        let Some(at) = branch
            .iter()
            .rposition(|&i| self.entries[i].compaction.is_some())
        else {
            return reads(&branch);
        };
        let kept = self.entries[branch[at]]
            .compaction
            .flatten()
            .and_then(|kept| branch.iter().position(|&i| i == kept))
            .unwrap_or(at);
        let mut out = reads(&[branch[at]]);
        out.extend(reads(&branch[kept.min(at)..at]));
        out.extend(reads(&branch[at + 1..]));
        out
    }
}

fn meta() -> SessionMeta {
    SessionMeta {
        id: "s".into(),
        cwd: "/p".into(),
        model: "m/m".into(),
        created: 1,
        chat: false,
        engine: None,
    }
}

fn user(text: &str) -> Prepared {
    Prepared::counted(
        EntryBody::User {
            message: Message::User {
                text: text.into(),
                images: vec![],
            },
            shown: UserMessageEvent {
                content: text.into(),
                ..Default::default()
            },
            steered: false,
        },
        1,
    )
}

fn reply(text: &str) -> Prepared {
    Prepared::counted(
        EntryBody::Assistant(Message::Assistant {
            text: text.into(),
            reasoning: String::new(),
            tool_calls: vec![],
            provider_items: None,
        }),
        1,
    )
}

/// The text of what a store's next request carries.
fn request_texts(store: &Store) -> Vec<String> {
    store
        .request()
        .iter()
        .filter_map(|entry| match entry.message()? {
            Message::User { text, .. } | Message::Assistant { text, .. } => Some(text.clone()),
            Message::Tool { output, .. } => Some(output.clone()),
        })
        .collect()
}

/// Writes every entry as the session file's lines and reads them back.
fn reload(store: &Store) -> Store {
    let path = crate::fuzzing::scratch_file("properties.jsonl");
    let bytes: Vec<u8> = store
        .entries()
        .iter()
        .flat_map(|entry| super::format::encode(entry))
        .collect();
    std::fs::write(&path, bytes).expect("write the scratch file");
    let loaded = super::files::read(&path).expect("read it back");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let (reloaded, warnings) = Store::load(loaded.entries, Arc::new(NoJournal)).expect("it loads");
    assert!(warnings.is_empty(), "{warnings:?}");
    // Every move appends, so the file's last entry is where the session was.
    assert_eq!(
        reloaded.leaf().id,
        store.leaf().id,
        "a reload continues at the leaf"
    );
    reloaded
}

fn run(steps: Vec<Step>) {
    let mut store = Store::new(meta(), Arc::new(NoJournal));
    let mut plain = Plain::default();
    plain.append(None, false, None);
    for step in steps {
        match step {
            Step::User(text) => {
                store.append(user(&text));
                plain.append(Some(text), true, None);
            }
            Step::Reply(text) => {
                store.append(reply(&text));
                plain.append(Some(text), false, None);
            }
            Step::Branch(n) => {
                let target = n % plain.entries.len();
                store
                    .move_to(&plain.entries[target].id)
                    .expect("a known entry");
                plain.leaf = target;
                store.append(Prepared::counted(
                    EntryBody::Branch { label: "b".into() },
                    0,
                ));
                plain.append(None, false, None);
            }
            Step::Checkout(n) => {
                let turns: Vec<usize> = plain
                    .branch()
                    .into_iter()
                    .filter(|&i| plain.entries[i].user)
                    .collect();
                if turns.is_empty() {
                    continue;
                }
                let turn = turns[n % turns.len()];
                let parent = plain.entries[turn].parent.expect("a turn has a parent");
                store
                    .move_to(&plain.entries[parent].id)
                    .expect("its parent");
                plain.leaf = parent;
                store.append(Prepared::counted(
                    EntryBody::Branch { label: "c".into() },
                    0,
                ));
                plain.append(None, false, None);
            }
            Step::Compact(n) => {
                let branch = plain.branch();
                let kept = branch.get(n % (branch.len() + 1)).copied();
                store.append(Prepared::counted(
                    EntryBody::Compaction {
                        summary: "summary".into(),
                        kept_from: kept.map(|k| plain.entries[k].id.as_str().into()),
                    },
                    1,
                ));
                let summary = match crate::engine::conversation::store::summary_message("summary") {
                    Message::User { text, .. } => text,
                    other => panic!("a summary is read as a user message: {other:?}"),
                };
                plain.append(Some(summary), false, Some(kept));
            }
            Step::Reload => store = reload(&store),
        }
        let ids: Vec<&str> = store.branch().iter().map(|entry| &*entry.id).collect();
        let plain_ids: Vec<&str> = plain
            .branch()
            .into_iter()
            .map(|i| plain.entries[i].id.as_str())
            .collect();
        assert_eq!(ids, plain_ids, "the active branch");
        assert_eq!(store.len(), plain.entries.len(), "every entry is kept");
        assert_eq!(
            request_texts(&store),
            plain.request(),
            "what the model reads"
        );
    }
    // And once more from the file, whatever came last.
    let reloaded = reload(&store);
    assert_eq!(request_texts(&reloaded), request_texts(&store));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_store_is_its_plain_model(steps in proptest::collection::vec(step(), 0..40)) {
        run(steps);
    }
}
