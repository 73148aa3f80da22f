//! What a tool card shows: its kind, title, locations and content, from the tool's name
//! and arguments (`tool_start.arguments`). The engine's tool names are the serve
//! protocol's (`docs/serve-protocol.md`, Tools); anything else (MCP tools, tools added
//! later) is `other` with its name as the title.

use std::path::Path;

use serde_json::Value;

use super::updates::{
    ContentBlock, Location, ToolCallContent, ToolCallUpdate, ToolKind, ToolStatus,
};

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

/// The card of a call of `name` with `arguments`, paths resolved against `cwd`.
pub fn card(name: &str, arguments: Option<&Value>, cwd: &str) -> Card {
    let field = |key: &str| {
        arguments
            .and_then(|args| args.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let path = field("path").map(|path| absolute(cwd, &path));
    let at = |path: &Option<String>| {
        path.iter()
            .map(|path| Location {
                path: path.clone(),
                line: None,
            })
            .collect::<Vec<_>>()
    };
    let shown = |path: &Option<String>| path.clone().unwrap_or_default();
    let (kind, title, locations, preview) = match name {
        "read_file" => {
            let line = arguments
                .and_then(|args| args.get("offset"))
                .and_then(Value::as_u64)
                .and_then(|line| u32::try_from(line).ok());
            let locations = path
                .iter()
                .map(|path| Location {
                    path: path.clone(),
                    line,
                })
                .collect();
            (
                ToolKind::Read,
                format!("Read {}", shown(&path)),
                locations,
                vec![],
            )
        }
        "list_dir" => (
            ToolKind::Search,
            format!("List {}", shown(&path)),
            at(&path),
            vec![],
        ),
        "grep" => {
            let pattern = field("pattern").unwrap_or_default();
            let within = path.clone().unwrap_or_else(|| cwd.to_owned());
            (
                ToolKind::Search,
                format!("Search {pattern:?} in {within}"),
                vec![],
                vec![],
            )
        }
        "bash" => {
            let command = field("command").unwrap_or_default();
            (shell_kind(&command), command, vec![], vec![])
        }
        "write_file" => {
            let preview = path
                .iter()
                .map(|path| ToolCallContent::Diff {
                    path: path.clone(),
                    old_text: None,
                    new_text: field("content").unwrap_or_default(),
                })
                .collect();
            (
                ToolKind::Edit,
                format!("Write {}", shown(&path)),
                at(&path),
                preview,
            )
        }
        "edit_file" => {
            let preview = path
                .iter()
                .map(|path| ToolCallContent::Diff {
                    path: path.clone(),
                    old_text: field("old_string"),
                    new_text: field("new_string").unwrap_or_default(),
                })
                .collect();
            (
                ToolKind::Edit,
                format!("Edit {}", shown(&path)),
                at(&path),
                preview,
            )
        }
        "web_fetch" => (
            ToolKind::Fetch,
            format!("Fetch {}", field("url").unwrap_or_default()),
            vec![],
            vec![],
        ),
        "web_search" => (
            ToolKind::Fetch,
            format!(
                "Search the web for {:?}",
                field("query").unwrap_or_default()
            ),
            vec![],
            vec![],
        ),
        // The engine's own tools: work on the session's plan and agents, not the machine.
        "spawn_agent" => (
            ToolKind::Think,
            format!("Subagent {}", field("task_name").unwrap_or_default()),
            vec![],
            vec![],
        ),
        "wait_agents" => (
            ToolKind::Think,
            "Wait for subagents".to_owned(),
            vec![],
            vec![],
        ),
        "message_agent" => (
            ToolKind::Think,
            format!("Message {}", field("agent_id").unwrap_or_default()),
            vec![],
            vec![],
        ),
        "close_agent" => (
            ToolKind::Think,
            format!("Close {}", field("agent_id").unwrap_or_default()),
            vec![],
            vec![],
        ),
        "update_plan" => (
            ToolKind::Think,
            "Update the plan".to_owned(),
            vec![],
            vec![],
        ),
        "update_goal" => (
            ToolKind::Think,
            "Update the goal".to_owned(),
            vec![],
            vec![],
        ),
        _ => (ToolKind::Other, name.to_owned(), vec![], vec![]),
    };
    // Without its arguments (a replayed history keeps only name and result) a title
    // such as "Read " says less than the tool's name.
    let title = match arguments {
        Some(_) if !title.trim().is_empty() => title.trim().to_owned(),
        _ => name.to_owned(),
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

/// `rm` and `mv` as the whole command are deletes and moves; any other command (also
/// one that merely contains them) executes.
fn shell_kind(command: &str) -> ToolKind {
    let simple = !command.contains(['|', ';', '&', '>', '<', '`', '$', '\n']);
    match command.split_whitespace().next() {
        Some("rm" | "rmdir") if simple => ToolKind::Delete,
        Some("mv") if simple => ToolKind::Move,
        _ => ToolKind::Execute,
    }
}

fn absolute(cwd: &str, path: &str) -> String {
    if Path::new(path).is_absolute() || path.starts_with('~') {
        path.to_owned()
    } else {
        Path::new(cwd).join(path).display().to_string()
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
    fn kinds_titles_and_locations() {
        let read = card(
            "read_file",
            Some(&json!({"path": "src/a.rs", "offset": 3})),
            "/p",
        );
        assert_eq!(read.kind, ToolKind::Read);
        assert_eq!(read.title, "Read /p/src/a.rs");
        assert_eq!(
            read.locations,
            vec![Location {
                path: "/p/src/a.rs".into(),
                line: Some(3)
            }]
        );
        let edit = card(
            "edit_file",
            Some(&json!({"path": "/x", "old_string": "a", "new_string": "b"})),
            "/p",
        );
        assert_eq!(edit.kind, ToolKind::Edit);
        assert_eq!(
            edit.preview,
            vec![ToolCallContent::Diff {
                path: "/x".into(),
                old_text: Some("a".into()),
                new_text: "b".into()
            }]
        );
        assert_eq!(
            card("bash", Some(&json!({"command": "rm -rf build"})), "/p").kind,
            ToolKind::Delete
        );
        assert_eq!(
            card("bash", Some(&json!({"command": "mv a b"})), "/p").kind,
            ToolKind::Move
        );
        assert_eq!(
            card("bash", Some(&json!({"command": "rm a && make"})), "/p").kind,
            ToolKind::Execute
        );
        assert_eq!(card("grep", None, "/p").kind, ToolKind::Search);
        let mcp = card("mcp__fs__read", None, "/p");
        assert_eq!(
            (mcp.kind, mcp.title.as_str()),
            (ToolKind::Other, "mcp__fs__read")
        );
        let fetch = card(
            "web_fetch",
            Some(&json!({"url": "https://a.example/"})),
            "/p",
        );
        assert_eq!(
            (fetch.kind, fetch.title.as_str()),
            (ToolKind::Fetch, "Fetch https://a.example/")
        );
        let spawn = card(
            "spawn_agent",
            Some(&json!({"task_name": "tests", "prompt": "run them"})),
            "/p",
        );
        assert_eq!(
            (spawn.kind, spawn.title.as_str()),
            (ToolKind::Think, "Subagent tests")
        );
    }
}
