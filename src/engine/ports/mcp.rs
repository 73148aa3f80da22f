//! What the engine needs from a session's MCP servers, and nothing more.
//!
//! The servers themselves (processes, connections, the MCP client library) live above
//! the engine; a session sees them through [`McpServers`]: a view to show, prompt
//! commands to list and expand, the four management ops, and a signal that something
//! changed. Their tools reach turns through a [`super::tools::ToolSource`] in the
//! session's registry, so the turn loop does not know MCP exists.
//!
//! Everything here is answered at once from the manager's own state: connecting, calls
//! and restarts run in the manager's tasks, so a slow or hung server can delay neither
//! an op nor a turn.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};

use crate::protocol::{ElicitationAction, McpServerConfig, McpServerView};

/// A server's `elicitation/create`, waiting for the user. The server's request stays
/// open until `answer` is used or dropped (dropping it cancels).
pub struct Elicitation {
    pub server: String,
    pub message: String,
    /// The requested schema, as the server sent it.
    pub schema: Value,
    pub answer: oneshot::Sender<ElicitationAnswer>,
}

/// What goes back to the server; `content` only with `accept`, already checked
/// against the schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitationAnswer {
    pub action: ElicitationAction,
    pub content: Option<Map<String, Value>>,
}

/// A server's prompt, offered as the slash command `/<server>:<prompt>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCommand {
    /// `/<server>:<prompt>`, as `command_list` shows it.
    pub command: String,
    pub server: String,
    /// The prompt's name as its server knows it.
    pub prompt: String,
    pub description: String,
    /// In the order the server declared them: positional values fill them in this order.
    pub arguments: Vec<PromptArgument>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptArgument {
    pub name: String,
    pub description: String,
    pub required: bool,
}

impl PromptCommand {
    /// The `args` of its `command_list` entry: `<required> [optional]`.
    pub fn usage(&self) -> String {
        self.arguments
            .iter()
            .map(|arg| {
                if arg.required {
                    format!("<{}>", arg.name)
                } else {
                    format!("[{}]", arg.name)
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A sign-in (`mcp_login`) that ended without tokens: the server, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInFailure {
    pub server: String,
    pub why: String,
}

/// A session's MCP servers, as the session task manages them.
pub trait McpServers: Send + Sync + 'static {
    /// Starts connecting the enabled servers, in the background. Called once, after the
    /// startup batch is out, so it always shows them `connecting`.
    fn start(&self);

    /// Every server, by name.
    fn view(&self) -> Vec<McpServerView>;

    /// Adds the servers a project defines, once it is trusted (started at once when
    /// the others are). A server the user defines under the same name wins.
    fn add_project(&self, servers: BTreeMap<String, McpServerConfig>);

    /// The prompts of the connected servers, by command name.
    fn prompts(&self) -> Vec<PromptCommand>;

    /// Changes whenever `view` or `prompts` may have changed. Bounded by construction:
    /// changes in a row coalesce into one wake-up.
    fn changes(&self) -> watch::Receiver<()>;

    /// `mcp_set`: validates, persists to the user's config, then (re)starts the server.
    /// The error is the `error` event's message; on error nothing changed.
    fn set(&self, name: &str, server: McpServerConfig) -> BoxFuture<'static, Result<(), String>>;

    /// `mcp_set` with `persist: false`: validates, then (re)starts the server for this
    /// session only (replacing a configured one of the same name while it lasts).
    fn set_for_session(
        &self,
        name: &str,
        server: McpServerConfig,
    ) -> BoxFuture<'static, Result<(), String>>;

    /// `mcp_remove`: persists, then stops the server.
    fn remove(&self, name: &str) -> BoxFuture<'static, Result<(), String>>;

    /// `mcp_toggle`: persists `enabled`, then stops or (re)starts the server; enabling a
    /// failed server retries it.
    fn toggle(&self, name: &str, enabled: bool) -> BoxFuture<'static, Result<(), String>>;

    /// `/mcp retry <name>`: reconnects an enabled server.
    fn retry(&self, name: &str) -> Result<(), String>;

    /// `mcp_login`: starts signing in to a remote server (or joins the sign-in already
    /// running for it) and gives the address to open in a browser. The server connects
    /// when the sign-in completes, which [`McpServers::changes`] tells.
    fn login(&self, name: &str) -> BoxFuture<'static, Result<String, String>> {
        let message = format!("MCP server {name} cannot be signed in to here");
        Box::pin(async move { Err(message) })
    }

    /// The sign-ins that failed since the last call (each is given out once); a change
    /// of [`McpServers::changes`] follows each.
    fn take_sign_in_failures(&self) -> Vec<SignInFailure> {
        Vec::new()
    }

    /// `mcp_logout`: forgets the server's sign-in (revoking its tokens where offered);
    /// it then needs a sign-in again.
    fn logout(&self, name: &str) -> BoxFuture<'static, Result<(), String>> {
        let message = format!("MCP server {name} cannot be signed out of here");
        Box::pin(async move { Err(message) })
    }

    /// Expands a prompt into the text of a user message (bounded by the server's
    /// timeout). The error is the `error` event's message.
    fn get_prompt(
        &self,
        server: &str,
        prompt: &str,
        arguments: BTreeMap<String, String>,
    ) -> BoxFuture<'static, Result<String, String>>;

    /// Stops every server (their processes are killed); the session is ending.
    fn shutdown(&self) -> BoxFuture<'static, ()>;

    /// The servers' elicitation requests, for the session to put to its clients. Given
    /// out once (later calls get `None`); without a receiver, or once it is dropped,
    /// every request is declined.
    fn elicitations(&self) -> Option<mpsc::Receiver<Elicitation>> {
        None
    }
}

/// Reads the arguments of a prompt command: `name=value` for a declared argument, any
/// other word fills the next argument not given by name, in declared order. Double
/// quotes keep spaces in a value (`topic="two words"`, `"two words"`).
pub fn parse_prompt_arguments(
    command: &PromptCommand,
    input: &str,
) -> Result<BTreeMap<String, String>, String> {
    let words = split_words(input)?;
    let mut named = BTreeMap::new();
    let mut positional = Vec::new();
    for word in words {
        match word.split_once('=') {
            Some((key, value))
                if !word.quoted_key && command.arguments.iter().any(|arg| arg.name == key) =>
            {
                if named.insert(key.to_owned(), value.to_owned()).is_some() {
                    return Err(format!("{}: {key} is given twice", command.command));
                }
            }
            _ => positional.push(word.text),
        }
    }
    let free: Vec<&PromptArgument> = command
        .arguments
        .iter()
        .filter(|arg| !named.contains_key(&arg.name))
        .collect();
    let mut free = free.into_iter();
    for value in positional {
        let Some(arg) = free.next() else {
            return Err(format!(
                "{}: too many arguments (it takes {}; quote a value that has spaces)",
                command.command,
                usage_or_none(command)
            ));
        };
        named.insert(arg.name.clone(), value);
    }
    let missing: Vec<&str> = command
        .arguments
        .iter()
        .filter(|arg| arg.required && !named.contains_key(&arg.name))
        .map(|arg| arg.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{}: missing {} (usage: {} {})",
            command.command,
            missing.join(", "),
            command.command,
            command.usage()
        ));
    }
    Ok(named)
}

fn usage_or_none(command: &PromptCommand) -> String {
    if command.arguments.is_empty() {
        "no arguments".to_owned()
    } else {
        command.usage()
    }
}

struct Word {
    text: String,
    /// The word began with a quote, so an `=` in it is part of a value, not a key.
    quoted_key: bool,
}

impl std::ops::Deref for Word {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

/// Splits on whitespace; `"..."` groups, `\"` and `\\` escape inside quotes.
fn split_words(input: &str) -> Result<Vec<Word>, String> {
    let mut words = Vec::new();
    let mut chars = input.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(&first) = chars.peek() else {
            return Ok(words);
        };
        let mut text = String::new();
        let mut quoted = false;
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    quoted = !quoted;
                }
                '\\' if quoted => match chars.next() {
                    Some(escaped) => text.push(escaped),
                    None => break,
                },
                c if c.is_whitespace() && !quoted => break,
                c => text.push(c),
            }
        }
        if quoted {
            return Err("unclosed quote in the command's arguments".to_owned());
        }
        words.push(Word {
            text,
            quoted_key: first == '"',
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review() -> PromptCommand {
        let arg = |name: &str, required| PromptArgument {
            name: name.into(),
            description: String::new(),
            required,
        };
        PromptCommand {
            command: "/fs:review".into(),
            server: "fs".into(),
            prompt: "review".into(),
            description: "Review a file".into(),
            arguments: vec![arg("path", true), arg("focus", false)],
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn named_positional_and_quoted_arguments() {
        let cmd = review();
        assert_eq!(cmd.usage(), "<path> [focus]");
        assert_eq!(
            parse_prompt_arguments(&cmd, "src/a.rs speed").unwrap(),
            map(&[("path", "src/a.rs"), ("focus", "speed")])
        );
        assert_eq!(
            parse_prompt_arguments(&cmd, "focus=speed src/a.rs").unwrap(),
            map(&[("path", "src/a.rs"), ("focus", "speed")])
        );
        assert_eq!(
            parse_prompt_arguments(&cmd, r#"path="my file.rs" focus="a \"b\"""#).unwrap(),
            map(&[("path", "my file.rs"), ("focus", "a \"b\"")])
        );
        // `=` in a value that is not a declared key is a plain value.
        assert_eq!(
            parse_prompt_arguments(&cmd, "x=1").unwrap(),
            map(&[("path", "x=1")])
        );
        assert_eq!(
            parse_prompt_arguments(&cmd, r#""focus=1""#).unwrap(),
            map(&[("path", "focus=1")])
        );
    }

    #[test]
    fn argument_errors_say_what_is_wrong() {
        let cmd = review();
        assert_eq!(
            parse_prompt_arguments(&cmd, "").unwrap_err(),
            "/fs:review: missing path (usage: /fs:review <path> [focus])"
        );
        assert!(
            parse_prompt_arguments(&cmd, "a b c")
                .unwrap_err()
                .contains("too many arguments")
        );
        assert!(
            parse_prompt_arguments(&cmd, "path=a path=b")
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            parse_prompt_arguments(&cmd, "\"open")
                .unwrap_err()
                .contains("unclosed quote")
        );
    }
}
