//! System prompts.
//!
//! A coding session gets the coding prompt plus the project's own instructions
//! (`AGENTS.md` at the working directory, if any). A chat session (`serve --chat`) gets
//! the chat prompt and never reads project files into its prompt.

use std::path::Path;

/// The system prompt of a compaction request.
pub const COMPACTION_SYSTEM: &str = include_str!("../prompts/compaction-system.md");

/// The last message of a compaction request: what the summary must hold.
pub const COMPACTION_REQUEST: &str = include_str!("../prompts/compaction-request.md");

/// Project instructions above this size are cut: they are re-sent on every request.
const MAX_INSTRUCTIONS_BYTES: usize = 64 * 1024;

pub fn coding_prompt(cwd: &Path, today: &str) -> String {
    let mut prompt = format!(
        "You are jucode, a coding agent working in the user's project at {cwd}.\n\
         Today is {today}.\n\n\
         Work in small, verifiable steps. Use the tools to look at the code before you \
         answer questions about it or change it: read_file to read a file (with line \
         numbers), list_dir to list a directory, grep to search file contents with a \
         regular expression. Paths are relative to {cwd} unless absolute.\n\
         Be concise. When you refer to code, name the file and line.",
        cwd = cwd.display(),
    );
    if let Some(instructions) = project_instructions(cwd) {
        prompt.push_str("\n\n# Project instructions (AGENTS.md)\n\n");
        prompt.push_str(&instructions);
    }
    prompt
}

pub fn chat_prompt(today: &str) -> String {
    format!(
        "You are jucode in chat mode: a knowledgeable assistant for conversation and \
         research. Today is {today}. Answer clearly and concisely; say when you are \
         unsure. Files the user attaches are saved locally; read them with your tools."
    )
}

pub fn today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

fn project_instructions(cwd: &Path) -> Option<String> {
    let text = std::fs::read_to_string(cwd.join("AGENTS.md")).ok()?;
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.len() <= MAX_INSTRUCTIONS_BYTES {
        return Some(text.to_owned());
    }
    let mut cut = MAX_INSTRUCTIONS_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(format!("{}\n[AGENTS.md truncated]", &text[..cut]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coding_prompt_includes_agents_md() {
        let dir = tempfile::tempdir().unwrap();
        let without = coding_prompt(dir.path(), "2026-01-01");
        assert!(without.contains("2026-01-01"));
        assert!(!without.contains("AGENTS.md)"));
        std::fs::write(dir.path().join("AGENTS.md"), "Always run cargo fmt.\n").unwrap();
        let with = coding_prompt(dir.path(), "2026-01-01");
        assert!(with.ends_with("# Project instructions (AGENTS.md)\n\nAlways run cargo fmt."));
    }
}
