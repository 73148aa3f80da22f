//! What a session knows of its project and its user: the system prompt (with project
//! instructions and skills), custom slash commands, whether the project is trusted, and
//! hooks. The host implements it (`crate::project`); the engine asks it and never reads a
//! project file itself.
//!
//! A project's own resources (its instructions, skills, commands, hooks, config) are
//! used only once the user trusts it; until then the session offers `trust_prompt` and
//! runs as if they did not exist. The user's own resources (in the profile) need no
//! trust.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;

use crate::protocol::{CommandInfo, Event, McpServerConfig, SessionStatus};

/// A custom command (`/<name>`), from a Markdown file with front matter.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomCommand {
    /// Without the slash.
    pub name: String,
    pub description: String,
    /// How to call it, e.g. `<file> [focus]`.
    pub args: String,
    /// Where it comes from: `project` or `user`.
    pub marker: String,
    /// The prompt it becomes, with `$ARGUMENTS` and `$1`... in it.
    pub template: String,
}

impl CustomCommand {
    pub fn info(&self) -> CommandInfo {
        CommandInfo {
            command: format!("/{}", self.name),
            marker: Some(self.marker.clone()),
            args: self.args.clone(),
            description: self.description.clone(),
        }
    }

    /// The user message it becomes with these arguments: `$ARGUMENTS` is all of them,
    /// `$1` to `$9` each (quotes group words; a missing one is empty).
    pub fn expand(&self, arguments: &str) -> String {
        let words = split_arguments(arguments);
        let mut text = self.template.replace("$ARGUMENTS", arguments.trim());
        // Highest first, so `$1` never eats the start of `$10`-like text.
        for index in (1..=9).rev() {
            let value = words.get(index - 1).map(String::as_str).unwrap_or("");
            text = text.replace(&format!("${index}"), value);
        }
        text
    }
}

/// Words of an argument string; `"..."` and `'...'` group words.
pub fn split_arguments(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quote = None;
    let mut started = false;
    for c in text.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                started = true;
            }
            None if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut current));
                    started = false;
                }
            }
            None => {
                current.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(current);
    }
    words
}

/// An answer to `trust_prompt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustDecision {
    /// Trust this directory.
    Yes,
    /// Trust the whole repository.
    Repo,
    No,
}

/// What a trust decision changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustChange {
    /// The `status` confirming it: `trusted <dir>`, `trusted <root> (repository)` or
    /// `untrusted <dir>`.
    pub status: SessionStatus,
    /// The project's resources are in use from now on (they were not before).
    pub newly_trusted: bool,
    /// Problems found in the project's configs, for `error` events.
    pub problems: Vec<String>,
}

/// When hooks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookEvent {
    /// The session started: output becomes `info` events of the startup batch.
    SessionStart,
    /// A user message is about to start a turn.
    UserPromptSubmit,
}

/// What one hook run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// The hook, as configured (for messages).
    pub command: String,
    /// What it printed on stdout, trimmed.
    pub output: String,
    /// Why it failed (non-zero exit, timeout, not startable), if it did.
    pub failure: Option<String>,
}

impl HookRun {
    /// Its report for everyone: what it printed (`info`), then why it failed (`error`).
    pub fn report(self) -> Vec<Event> {
        let mut events = Vec::new();
        if !self.output.is_empty() {
            events.push(Event::info(self.output));
        }
        if let Some(why) = self.failure {
            events.push(Event::error(format!(
                "hook `{}` failed: {why}",
                self.command
            )));
        }
        events
    }
}

/// See the module docs. Methods that may touch the file system are called on the
/// blocking pool.
pub trait Project: Send + Sync {
    /// The system prompt as things stand (trust included), without plan mode's addendum.
    fn system_prompt(&self) -> String;
    /// Problems found reading the project (its configs), for the startup batch.
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }
    /// The custom commands available as things stand.
    fn commands(&self) -> Vec<CustomCommand>;
    /// `(cwd, repo_root)` when the project has local resources and nobody decided
    /// whether to trust it.
    fn trust_prompt(&self) -> Option<(String, String)>;
    /// Records a decision and applies it; `Err` says why it could not be recorded.
    /// Blocking (it writes the decision and reads the project again).
    fn trust(&self, decision: TrustDecision) -> Result<TrustChange, String>;
    /// The MCP servers the project defines, once trusted (the user's own come from the
    /// session's config).
    fn mcp_servers(&self) -> BTreeMap<String, McpServerConfig> {
        BTreeMap::new()
    }
    /// Runs the hooks of `event` with `payload` (a JSON description of the event) on
    /// their stdin; never fails as a whole.
    fn run_hooks(
        &self,
        event: HookEvent,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Vec<HookRun>>;
}

/// No project: no instructions, commands, trust question or hooks.
pub struct NoProject {
    pub prompt: String,
}

impl Project for NoProject {
    fn system_prompt(&self) -> String {
        self.prompt.clone()
    }

    fn commands(&self) -> Vec<CustomCommand> {
        Vec::new()
    }

    fn trust_prompt(&self) -> Option<(String, String)> {
        None
    }

    fn trust(&self, _: TrustDecision) -> Result<TrustChange, String> {
        Err("this session has no project to trust".to_owned())
    }

    fn run_hooks(&self, _: HookEvent, _: serde_json::Value) -> BoxFuture<'static, Vec<HookRun>> {
        Box::pin(async { Vec::new() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_expand_their_arguments() {
        let command = CustomCommand {
            name: "review".into(),
            description: String::new(),
            args: "<file> [focus]".into(),
            marker: "project".into(),
            template: "Review $1 for $2. All: $ARGUMENTS.".into(),
        };
        assert_eq!(
            command.expand("src/a.rs \"error handling\""),
            "Review src/a.rs for error handling. All: src/a.rs \"error handling\"."
        );
        assert_eq!(command.expand(""), "Review  for . All: .");
        assert_eq!(split_arguments(" a  'b c' \"\" d"), ["a", "b c", "", "d"]);
    }
}
