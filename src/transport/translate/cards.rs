//! What a tool card shows: its kind, title, locations and content. The tool says what its
//! call is (`tool_start`'s `title`, `kind`, `path`, `line`: each tool describes its own
//! calls); a card adds the diff an edit will make, when the arguments carry one. A call
//! described by nothing (a history replayed from an older session) is `other`, titled
//! by its tool's name.

use serde_json::Value;

use super::updates::{
    ContentBlock, Location, ToolCallContent, ToolCallUpdate, ToolKind, ToolStatus,
};
use crate::protocol::{CallCard, CallKind};

/// The parts of a card known when the call starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    pub name: String,
    pub kind: ToolKind,
    pub title: String,
    pub locations: Vec<Location>,
    /// What the call will do, when it can be shown before it runs (an edit's diff).
    pub preview: Vec<ToolCallContent>,
    pub arguments: Option<Value>,
}

/// The card of a call of `name` with `arguments`, as its tool described it (`told`).
pub fn card(name: &str, arguments: Option<&Value>, told: &CallCard) -> Card {
    let kind = told.kind.map_or(ToolKind::Other, kind_of);
    let title = told
        .title
        .clone()
        .filter(|title| !title.is_empty())
        .unwrap_or_else(|| name.to_owned());
    let locations = told
        .path
        .iter()
        .map(|path| Location {
            path: path.clone(),
            line: told.line,
        })
        .collect();
    let preview = match (&told.path, told.kind) {
        (Some(path), Some(CallKind::Edit)) => diff_preview(path, arguments),
        _ => Vec::new(),
    };
    Card {
        name: name.to_owned(),
        kind,
        title,
        locations,
        preview,
        arguments: arguments.cloned(),
    }
}

/// An edit's diff, from the arguments the file tools take: a whole new `content`, or
/// `old_string` replaced by `new_string`.
fn diff_preview(path: &str, arguments: Option<&Value>) -> Vec<ToolCallContent> {
    let field = |key: &str| {
        arguments
            .and_then(|args| args.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let diff = match (field("content"), field("new_string")) {
        (Some(content), _) => ToolCallContent::Diff {
            path: path.to_owned(),
            old_text: None,
            new_text: content,
        },
        (None, Some(new_text)) => ToolCallContent::Diff {
            path: path.to_owned(),
            old_text: field("old_string"),
            new_text,
        },
        (None, None) => return Vec::new(),
    };
    vec![diff]
}

/// The protocol's kind as ACP's (the dashboards' four words come from it in turn).
fn kind_of(kind: CallKind) -> ToolKind {
    match kind {
        CallKind::Read => ToolKind::Read,
        CallKind::Edit => ToolKind::Edit,
        CallKind::Delete => ToolKind::Delete,
        CallKind::Move => ToolKind::Move,
        CallKind::Search => ToolKind::Search,
        CallKind::Execute => ToolKind::Execute,
        CallKind::Think => ToolKind::Think,
        CallKind::Fetch => ToolKind::Fetch,
        CallKind::Other => ToolKind::Other,
    }
}

/// A card's text content.
pub fn text(text: impl Into<String>) -> ToolCallContent {
    ToolCallContent::Content {
        content: ContentBlock::text(text),
    }
}

/// The last update of a card: completed or failed, with what it produced.
pub(super) fn closed_card(
    call_id: &str,
    name: &str,
    open: Option<&super::OpenCard>,
    output: &str,
    is_error: bool,
) -> ToolCallUpdate {
    let mut content = Vec::new();
    if let Some(terminal) = open.and_then(|open| open.terminal.clone()) {
        content.push(ToolCallContent::Terminal {
            terminal_id: terminal,
        });
    } else if let Some(open) = open.filter(|_| !is_error) {
        content.extend(open.card.preview.iter().cloned());
    }
    if is_error || open.is_none_or(|open| open.terminal.is_none() && open.card.preview.is_empty()) {
        content.push(text(output));
    }
    // The title again: a dashboard may read it from any update of the card.
    let title = open.map_or_else(|| name.to_owned(), |open| open.card.title.clone());
    ToolCallUpdate {
        tool_call_id: call_id.to_owned(),
        title: Some(title),
        status: Some(if is_error {
            ToolStatus::Failed
        } else {
            ToolStatus::Completed
        }),
        content: Some(content),
        // And its kind and places: a card keeps what it showed when it opened.
        kind: open.map(|open| open.card.kind),
        locations: open.map(|open| open.card.locations.clone()),
        ..ToolCallUpdate::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cards_are_what_the_tool_told() {
        let told = CallCard {
            title: Some("Edit /x".into()),
            kind: Some(CallKind::Edit),
            path: Some("/x".into()),
            line: Some(3),
            activity: None,
        };
        let edit = card(
            "edit_file",
            Some(&json!({"path": "x", "old_string": "a", "new_string": "b"})),
            &told,
        );
        assert_eq!(
            (edit.kind, edit.title.as_str()),
            (ToolKind::Edit, "Edit /x")
        );
        assert_eq!(
            edit.locations,
            vec![Location {
                path: "/x".into(),
                line: Some(3)
            }]
        );
        assert_eq!(
            edit.preview,
            vec![ToolCallContent::Diff {
                path: "/x".into(),
                old_text: Some("a".into()),
                new_text: "b".into()
            }]
        );
        let written = card("w", Some(&json!({"content": "new"})), &told);
        assert_eq!(
            written.preview,
            vec![ToolCallContent::Diff {
                path: "/x".into(),
                old_text: None,
                new_text: "new".into()
            }]
        );
        // Nothing told: the tool's name, `other`, no preview.
        let bare = card(
            "mcp__fs__read",
            Some(&json!({"content": "x"})),
            &CallCard::default(),
        );
        assert_eq!(
            (bare.kind, bare.title.as_str(), bare.preview.len()),
            (ToolKind::Other, "mcp__fs__read", 0)
        );
    }
}
