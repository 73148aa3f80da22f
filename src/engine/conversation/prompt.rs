//! System prompts, from the Markdown files in `src/prompts/` (built into the binary).
//!
//! A coding session gets the coding prompt; a chat session (`serve --chat`) the chat
//! prompt; plan mode adds its addendum to either. Each names the tools the session
//! offers from the tool registry itself (`{{tools}}`), so a prompt never describes a
//! tool the model does not have, nor leaves out one it has. What the project adds
//! (instructions, skills) is appended by the host (see `crate::project`).

use std::path::Path;

use crate::engine::ports::model::ToolSpec;

const CODING: &str = include_str!("../../prompts/coding.md");
const CHAT: &str = include_str!("../../prompts/chat.md");

/// Appended to the system prompt while the session is in plan mode.
pub const PLAN_MODE: &str = include_str!("../../prompts/plan.md");

/// The system prompt of a compaction request.
pub const COMPACTION_SYSTEM: &str = include_str!("../../prompts/compaction-system.md");

/// The last message of a compaction request: what the summary must hold.
pub const COMPACTION_REQUEST: &str = include_str!("../../prompts/compaction-request.md");

pub fn coding_prompt(cwd: &Path, today: &str, tools: &[ToolSpec]) -> String {
    render(
        CODING,
        &[("cwd", &cwd.display().to_string()), ("today", today)],
        tools,
    )
}

pub fn chat_prompt(today: &str, tools: &[ToolSpec]) -> String {
    render(CHAT, &[("today", today)], tools)
}

pub fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

fn render(template: &str, values: &[(&str, &str)], tools: &[ToolSpec]) -> String {
    let mut text = template.replace("{{tools}}", &tool_list(tools));
    for (key, value) in values {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    text.trim_end().to_owned()
}

/// One line per tool: its name and the first sentence of its description.
pub fn tool_list(tools: &[ToolSpec]) -> String {
    let mut tools: Vec<&ToolSpec> = tools.iter().collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools
        .iter()
        .map(|tool| format!("- `{}`: {}", tool.name, first_sentence(&tool.description)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    match text.find(". ") {
        Some(end) => &text[..=end],
        None => text,
    }
}

/// The tool names a prompt mentions as `` `name` `` (for tests of the prompts).
pub fn named_tools<'a>(prompt: &'a str, known: &[&'a str]) -> Vec<&'a str> {
    known
        .iter()
        .copied()
        .filter(|name| prompt.contains(&format!("`{name}`")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("Does {name}. More words."),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    #[test]
    fn templates_are_filled() {
        let prompt = coding_prompt(Path::new("/p"), "2026-01-01", &[spec("read_file")]);
        assert!(prompt.contains("/p") && prompt.contains("2026-01-01"));
        assert!(prompt.contains("- `read_file`: Does read_file."));
        assert!(!prompt.contains("{{"), "{prompt}");
        let chat = chat_prompt("2026-01-01", &[spec("web_fetch")]);
        assert!(chat.contains("- `web_fetch`: Does web_fetch."));
        assert!(!chat.contains("{{"));
        assert!(PLAN_MODE.contains("`propose_plan`"));
    }
}
