use std::sync::Arc;

use super::*;
use crate::engine::ports::model::{Message, ToolCall};
use crate::protocol::UserMessageEvent;

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
        10,
    )
}

fn reply(text: &str, calls: &[&str]) -> Prepared {
    Prepared::counted(
        EntryBody::Assistant(Message::Assistant {
            text: text.into(),
            reasoning: String::new(),
            tool_calls: calls
                .iter()
                .map(|id| ToolCall {
                    id: (*id).into(),
                    name: "read_file".into(),
                    arguments: "{}".into(),
                })
                .collect(),
            provider_items: None,
        }),
        5,
    )
}

fn result(id: &str) -> Prepared {
    Prepared::counted(
        EntryBody::ToolResult(Message::Tool {
            call_id: id.into(),
            name: "read_file".into(),
            output: "x".into(),
            is_error: false,
            card: Default::default(),
        }),
        3,
    )
}

fn texts(store: &Store) -> Vec<String> {
    store
        .request()
        .iter()
        .filter_map(|entry| match entry.message()? {
            Message::User { text, .. } => Some(format!("u:{text}")),
            Message::Assistant { text, .. } => Some(format!("a:{text}")),
            Message::Tool { call_id, .. } => Some(format!("t:{call_id}")),
        })
        .collect()
}

#[test]
fn a_branch_holds_only_its_own_entries() {
    let mut store = Store::new(meta(), Arc::new(NoJournal));
    let first = store.append(user("one"));
    store.append(reply("r1", &[]));
    let first_end = store.leaf().id.clone();
    store.append(user("two"));
    store.append(reply("r2", &[]));
    assert_eq!(texts(&store), ["u:one", "a:r1", "u:two", "a:r2"]);
    assert_eq!(store.turn_end(&first.id).as_deref(), Some(&*first_end));

    store.move_to(&first_end).unwrap();
    store.append(Prepared::counted(
        EntryBody::Branch {
            label: "again".into(),
        },
        0,
    ));
    store.append(user("three"));
    assert_eq!(texts(&store), ["u:one", "a:r1", "u:three"]);
    assert_eq!(store.request_tokens(), 10 + 5 + 10);
    // Nothing was rewritten: every entry is still there, and the tree shows both paths.
    assert_eq!(store.len(), 7);
    let nodes = store.tree_nodes();
    let labels: Vec<&str> = nodes.iter().map(|n| n.label.as_str()).collect();
    assert!(
        labels[0].starts_with("(start of the session)"),
        "{labels:?}"
    );
    let two = nodes.iter().find(|n| n.label.starts_with("two")).unwrap();
    assert!(!two.active);
    let three = nodes.iter().find(|n| n.label.starts_with("three")).unwrap();
    assert!(three.active);
    let branch = nodes.iter().find(|n| n.label.starts_with("again")).unwrap();
    assert_eq!(three.parent_id.as_deref(), Some(branch.id.as_str()));
    assert_eq!(two.parent_id.as_deref(), Some(&*first.id));
}

#[test]
fn a_compaction_replaces_what_it_summarised_and_keeps_the_rest() {
    let mut store = Store::new(meta(), Arc::new(NoJournal));
    store.append(user("old"));
    store.append(reply("", &["c1"]));
    store.append(result("c1"));
    store.append(reply("done", &[]));
    let kept = store.append(user("recent"));
    store.append(reply("r", &[]));
    store.append(Prepared::counted(
        EntryBody::Compaction {
            summary: "we read a file".into(),
            kept_from: Some(kept.id.clone()),
        },
        7,
    ));
    store.append(user("next"));
    let request = texts(&store);
    assert!(
        request[0].starts_with("u:A summary of the earlier conversation"),
        "{request:?}"
    );
    assert!(request[0].ends_with("we read a file"));
    assert_eq!(&request[1..], ["u:recent", "a:r", "u:next"]);
    // The transcript still shows everything, the summary where it happened.
    let items: Vec<String> = store
        .transcript_items()
        .iter()
        .map(|item| String::from_utf8_lossy(item).into_owned())
        .collect();
    assert_eq!(items.len(), 7, "{items:#?}");
    assert!(items[5].contains("\"role\":\"compaction\""), "{items:#?}");
}

#[test]
fn loading_skips_entries_that_do_not_fit() {
    let mut store = Store::new(meta(), Arc::new(NoJournal));
    store.append(user("one"));
    let entries: Vec<Entry> = store
        .branch()
        .iter()
        .map(|entry| {
            Entry::with_tokens(
                entry.id.clone(),
                entry.parent.clone(),
                entry.at,
                entry.body.clone(),
                Some(entry.tokens()),
            )
        })
        .chain([Entry::with_tokens(
            Arc::from("e9"),
            Some(Arc::from("e404")),
            0,
            EntryBody::Branch { label: "x".into() },
            Some(0),
        )])
        .collect();
    let (loaded, warnings) = Store::load(entries, Arc::new(NoJournal)).unwrap();
    assert_eq!(loaded.len(), 2);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(&*loaded.leaf().id, "e2");
    // New entries do not reuse ids.
    let mut loaded = loaded;
    assert_eq!(&*loaded.append(user("two")).id, "e3");
}

#[test]
fn plans_show_their_latest_status() {
    let mut store = Store::new(meta(), Arc::new(NoJournal));
    store.append(Prepared::counted(
        EntryBody::Plan {
            id: "plan-1".into(),
            title: "T".into(),
            markdown: "M".into(),
            status: crate::protocol::PlanStatus::Pending,
        },
        0,
    ));
    store.append(Prepared::counted(
        EntryBody::PlanStatus {
            plan: "plan-1".into(),
            status: crate::protocol::PlanStatus::Approved,
        },
        0,
    ));
    let (_, _, status) = store.plan("plan-1").unwrap();
    assert_eq!(status, crate::protocol::PlanStatus::Approved);
    let items = store.transcript_items();
    assert_eq!(items.len(), 1);
    assert!(String::from_utf8_lossy(&items[0]).contains("\"status\":\"approved\""));
}

#[test]
fn calls_without_results_are_found_with_whether_they_waited_for_approval() {
    let mut store = Store::new(meta(), Arc::new(NoJournal));
    store.append(user("go"));
    store.append(reply("", &["c0"]));
    store.append(result("c0"));
    assert!(store.unanswered_calls().is_empty());
    store.append(reply("", &["c1", "c2", "c3"]));
    store.append(result("c1"));
    let mark = |mark| {
        Prepared::counted(
            EntryBody::Approval {
                call_id: "c2".into(),
                mark,
            },
            0,
        )
    };
    store.append(mark(ApprovalMark::Asked));
    let found: Vec<(String, bool)> = store
        .unanswered_calls()
        .into_iter()
        .map(|(call, waiting)| (call.id, waiting))
        .collect();
    assert_eq!(found, [("c2".into(), true), ("c3".into(), false)]);
    // Answered, it was running: no longer waiting.
    store.append(mark(ApprovalMark::Allowed));
    assert!(store.unanswered_calls().iter().all(|(_, waiting)| !waiting));
    // The model never reads the marks.
    assert!(
        store
            .request()
            .iter()
            .all(|entry| entry.message().is_some())
    );
}
