//! Slash commands, as the `command` op carries them.
//!
//! [`CommandName`] is the one definition: its variants are the commands, `strum`
//! derives their names and the list, and the exhaustive matches in
//! [`CommandName::usage`] and [`parse`] make the compiler refuse a command that is
//! advertised but not handled, or handled but not advertised.

use std::str::FromStr;

use strum::IntoEnumIterator;

use super::ports::project::TrustDecision;
use crate::protocol::{CommandInfo, Decision, SandboxMode, Surface};

/// The built-in slash commands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumIter, strum::EnumString, strum::IntoStaticStr,
)]
enum CommandName {
    #[strum(serialize = "/help")]
    Help,
    #[strum(serialize = "/model")]
    Model,
    #[strum(serialize = "/approve")]
    Approve,
    #[strum(serialize = "/plan")]
    Plan,
    #[strum(serialize = "/goal")]
    Goal,
    #[strum(serialize = "/transcript")]
    Transcript,
    #[strum(serialize = "/resume")]
    Resume,
    #[strum(serialize = "/tree")]
    Tree,
    #[strum(serialize = "/checkout")]
    Checkout,
    #[strum(serialize = "/compact")]
    Compact,
    #[strum(serialize = "/mcp")]
    Mcp,
    #[strum(serialize = "/trust")]
    Trust,
    #[strum(serialize = "/sandbox")]
    Sandbox,
    #[strum(serialize = "/terminal")]
    Terminal,
    #[strum(serialize = "/quit")]
    Quit,
    #[strum(serialize = "/exit")]
    Exit,
}

impl CommandName {
    fn as_str(self) -> &'static str {
        self.into()
    }

    /// Commands only sessions of other engines offer (`/terminal`): jucode's own
    /// session neither lists them nor runs them.
    fn hosted_only(self) -> bool {
        matches!(self, Self::Terminal)
    }

    /// `(arguments, description)` as `command_list` and `/help` show them.
    fn usage(self) -> (&'static str, &'static str) {
        match self {
            Self::Help => ("", "List the available commands"),
            Self::Model => (
                "[provider/model] [effort]",
                "Show the model picker, or switch model and reasoning effort",
            ),
            Self::Approve => (
                "<call_id> <allow|deny> [always | <hunk_id>...]",
                "Answer an approval request (same as the approve op)",
            ),
            Self::Plan => (
                "<id> approve [mode] [notes] | <id> revise <feedback>",
                "Approve a proposed plan, or ask for a revision",
            ),
            Self::Goal => (
                "[<objective> [--budget TOKENS] | clear]",
                "Show the session's goal, set one to work toward (it starts at once when idle), or clear it",
            ),
            Self::Transcript => ("", "Show the conversation so far (a transcript event)"),
            Self::Resume => (
                "[session_id]",
                "Pick a saved session to continue, or continue this one",
            ),
            Self::Tree => (
                "[node_id]",
                "Show the conversation's branches, or continue from an earlier point",
            ),
            Self::Checkout => (
                "[turn_id]",
                "List turns that changed files, or put the files back as before one and continue from there",
            ),
            Self::Compact => ("", "Summarise the conversation so far to free context"),
            Self::Mcp => (
                "[retry|login|logout <name>]",
                "Show the MCP servers (an mcp_servers event), reconnect one, or sign in to or out of one",
            ),
            Self::Trust => (
                "yes|repo|no",
                "Decide whether the project's own files (instructions, skills, commands, hooks) are used: in this directory, in the whole repository, or not",
            ),
            Self::Sandbox => (
                "[read-only|workspace-write|off]",
                "Show the sandbox commands run in (a sandbox event), or change its mode for this session",
            ),
            Self::Terminal => (
                "[chat]",
                "Move the conversation to its engine's own TUI on a terminal clients attach to (hosted Claude Code, Codex and ACP engines with a `tui`), or back",
            ),
            Self::Quit => ("", "End the session"),
            Self::Exit => ("", "End the session (same as /quit)"),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Command<'a> {
    Help,
    /// `/model` alone opens the picker (`model_view`).
    ModelView,
    SwitchModel {
        name: &'a str,
        effort: Option<&'a str>,
    },
    Transcript,
    Approve {
        call_id: &'a str,
        decision: Decision,
        always: bool,
        hunks: Option<Vec<String>>,
    },
    /// The arguments after `/plan`, parsed by the session.
    Plan(&'a str),
    /// The arguments after `/goal`, parsed by the session.
    Goal(&'a str),
    /// `/mcp`: the `mcp_servers` view.
    McpView,
    /// `/mcp retry <name>`.
    McpRetry(&'a str),
    /// `/mcp login <name>`, as `mcp_login`.
    McpLogin(&'a str),
    /// `/mcp logout <name>`, as `mcp_logout`.
    McpLogout(&'a str),
    Quit,
    /// `/resume` alone: the picker (`resume_view`).
    ResumeView,
    Resume(&'a str),
    TreeView,
    MoveTo(&'a str),
    CheckpointView,
    Checkout(&'a str),
    Compact,
    Trust(TrustDecision),
    /// `/sandbox` alone: the `sandbox` event, to the asker.
    SandboxView,
    SetSandbox(SandboxMode),
    /// `/terminal [chat]`, as the `surface` op.
    Surface(Surface),
}

pub fn command_list() -> Vec<CommandInfo> {
    CommandName::iter()
        .filter(|name| !name.hosted_only())
        .map(|name| {
            let (args, description) = name.usage();
            CommandInfo {
                command: name.as_str().to_owned(),
                marker: None,
                args: args.to_owned(),
                description: description.to_owned(),
            }
        })
        .collect()
}

pub fn help_text() -> String {
    let mut text = String::from("Commands:");
    for name in CommandName::iter().filter(|name| !name.hosted_only()) {
        let (args, description) = name.usage();
        let usage = if args.is_empty() {
            name.as_str().to_owned()
        } else {
            format!("{} {args}", name.as_str())
        };
        text.push_str(&format!("\n  {usage:<34} {description}"));
    }
    text
}

/// Parses one command line. The error is the `error` event's message.
pub fn parse(input: &str) -> Result<Command<'_>, String> {
    let input = input.trim();
    if !input.starts_with('/') {
        return Err(format!(
            "not a command: {input:?} (commands start with '/'; send text with the user_message op)"
        ));
    }
    let mut words = input.split_whitespace();
    let name = words.next().unwrap_or_default();
    let args: Vec<&str> = words.collect();
    let no_args = |command: Command<'static>| {
        if args.is_empty() {
            Ok(command)
        } else {
            Err(format!("{name} takes no arguments"))
        }
    };
    let Ok(command) = CommandName::from_str(name) else {
        return Err(format!("unknown command: {name} (try /help)"));
    };
    match command {
        CommandName::Help => no_args(Command::Help),
        CommandName::Quit | CommandName::Exit => no_args(Command::Quit),
        CommandName::Transcript => no_args(Command::Transcript),
        CommandName::Compact => no_args(Command::Compact),
        CommandName::Resume => one_optional(name, &args, Command::ResumeView, Command::Resume),
        CommandName::Tree => one_optional(name, &args, Command::TreeView, Command::MoveTo),
        CommandName::Checkout => {
            one_optional(name, &args, Command::CheckpointView, Command::Checkout)
        }
        CommandName::Approve => match args.as_slice() {
            [call_id, decision, rest @ ..] => {
                let Some(decision) = Decision::parse(decision) else {
                    return Err(format!(
                        "invalid decision {decision:?}: expected \"allow\" or \"deny\""
                    ));
                };
                let always = rest == ["always"];
                let hunks = (!always && !rest.is_empty())
                    .then(|| rest.iter().map(|id| (*id).to_owned()).collect());
                Ok(Command::Approve {
                    call_id,
                    decision,
                    always,
                    hunks,
                })
            }
            _ => Err(format!(
                "usage: /approve {}",
                CommandName::Approve.usage().0
            )),
        },
        CommandName::Plan => Ok(Command::Plan(
            input.strip_prefix(name).unwrap_or_default().trim(),
        )),
        CommandName::Goal => Ok(Command::Goal(
            input.strip_prefix(name).unwrap_or_default().trim(),
        )),
        CommandName::Mcp => match args.as_slice() {
            [] => Ok(Command::McpView),
            ["retry", name] => Ok(Command::McpRetry(name)),
            ["login", name] => Ok(Command::McpLogin(name)),
            ["logout", name] => Ok(Command::McpLogout(name)),
            _ => Err(format!("usage: /mcp {}", CommandName::Mcp.usage().0)),
        },
        CommandName::Trust => match args.as_slice() {
            ["yes"] => Ok(Command::Trust(TrustDecision::Yes)),
            ["repo"] => Ok(Command::Trust(TrustDecision::Repo)),
            ["no"] => Ok(Command::Trust(TrustDecision::No)),
            _ => Err(format!("usage: /trust {}", CommandName::Trust.usage().0)),
        },
        CommandName::Sandbox => match args.as_slice() {
            [] => Ok(Command::SandboxView),
            [mode] => SandboxMode::parse(mode)
                .map(Command::SetSandbox)
                .ok_or_else(|| {
                    format!(
                        "invalid sandbox mode {mode:?}: expected read-only, workspace-write or off"
                    )
                }),
            _ => Err(format!(
                "usage: /sandbox {}",
                CommandName::Sandbox.usage().0
            )),
        },
        CommandName::Terminal => match args.as_slice() {
            [] => Ok(Command::Surface(Surface::Terminal)),
            ["chat"] => Ok(Command::Surface(Surface::Chat)),
            _ => Err(format!(
                "usage: /terminal {}",
                CommandName::Terminal.usage().0
            )),
        },
        CommandName::Model => match args.as_slice() {
            [] => Ok(Command::ModelView),
            [model] => Ok(Command::SwitchModel {
                name: model,
                effort: None,
            }),
            [model, effort] => Ok(Command::SwitchModel {
                name: model,
                effort: Some(effort),
            }),
            _ => Err(format!("usage: /model {}", CommandName::Model.usage().0)),
        },
    }
}

/// A command taking one optional argument: the view without it, the action with it.
fn one_optional<'a>(
    name: &str,
    args: &[&'a str],
    view: Command<'a>,
    act: impl FnOnce(&'a str) -> Command<'a>,
) -> Result<Command<'a>, String> {
    match args {
        [] => Ok(view),
        [id] => Ok(act(id)),
        _ => Err(format!("usage: {name} [id]")),
    }
}

/// Whether `name` (with its slash) is a built-in command: a custom command of the same
/// name is not offered.
pub fn is_builtin(name: &str) -> bool {
    CommandName::from_str(name).is_ok()
}

/// The session a `/resume <id>` line asks to continue, if it is one.
pub fn resume_target(input: &str) -> Option<String> {
    match parse(input) {
        Ok(Command::Resume(id)) => Some(id.to_owned()),
        _ => None,
    }
}

/// `/terminal` as hosted sessions list it.
pub fn terminal_command() -> CommandInfo {
    let (args, description) = CommandName::Terminal.usage();
    CommandInfo {
        command: CommandName::Terminal.as_str().to_owned(),
        marker: None,
        args: args.to_owned(),
        description: description.to_owned(),
    }
}

/// The surface a `/terminal` line asks for, if it is one.
pub fn surface_target(input: &str) -> Option<Surface> {
    match parse(input) {
        Ok(Command::Surface(surface)) => Some(surface),
        _ => None,
    }
}

/// True for the inputs that end a client's session: `/quit` and `/exit`.
pub fn is_quit(input: &str) -> bool {
    matches!(parse(input), Ok(Command::Quit))
}

/// True for the ops that end a client's session: `shutdown`, and `command` with
/// `/quit` or `/exit`. The daemon (through its host) and the shim both ask this.
pub fn ends_session(op: &crate::protocol::Op) -> bool {
    match op {
        crate::protocol::Op::Shutdown => true,
        crate::protocol::Op::Command { input } => is_quit(input),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands() {
        assert_eq!(parse("/help"), Ok(Command::Help));
        assert_eq!(parse("  /model  "), Ok(Command::ModelView));
        assert_eq!(
            parse("/model mock/big high"),
            Ok(Command::SwitchModel {
                name: "mock/big",
                effort: Some("high")
            })
        );
        assert!(is_quit("/quit") && is_quit("/exit "));
        assert_eq!(
            parse("/approve call_1 allow f0h0 f0h2"),
            Ok(Command::Approve {
                call_id: "call_1",
                decision: Decision::Allow,
                always: false,
                hunks: Some(vec!["f0h0".into(), "f0h2".into()])
            })
        );
        assert_eq!(
            parse("/approve call_1 allow always"),
            Ok(Command::Approve {
                call_id: "call_1",
                decision: Decision::Allow,
                always: true,
                hunks: None
            })
        );
        assert_eq!(
            parse("/plan plan-1 revise more tests"),
            Ok(Command::Plan("plan-1 revise more tests"))
        );
        assert!(!is_quit("/quit now"));
        assert_eq!(
            parse("/trust repo"),
            Ok(Command::Trust(TrustDecision::Repo))
        );
        assert_eq!(parse("/trust").unwrap_err(), "usage: /trust yes|repo|no");
        assert_eq!(parse("/sandbox"), Ok(Command::SandboxView));
        assert_eq!(
            parse("/sandbox read-only"),
            Ok(Command::SetSandbox(SandboxMode::ReadOnly))
        );
        assert!(
            parse("/sandbox none")
                .unwrap_err()
                .contains("invalid sandbox mode")
        );
        assert!(is_builtin("/trust") && !is_builtin("/review"));
        assert_eq!(surface_target("/terminal"), Some(Surface::Terminal));
        assert_eq!(surface_target("/terminal chat"), Some(Surface::Chat));
        assert!(
            !command_list()
                .iter()
                .any(|info| info.command == "/terminal")
        );
        assert_eq!(parse("/mcp"), Ok(Command::McpView));
        assert_eq!(parse("/mcp retry fs"), Ok(Command::McpRetry("fs")));
        assert_eq!(parse("/mcp login gh"), Ok(Command::McpLogin("gh")));
        assert_eq!(
            parse("/mcp restart fs").unwrap_err(),
            "usage: /mcp [retry|login|logout <name>]"
        );
        assert_eq!(
            parse("/nope").unwrap_err(),
            "unknown command: /nope (try /help)"
        );
        assert!(parse("hello").unwrap_err().starts_with("not a command"));
        assert_eq!(
            parse("/approve c maybe").unwrap_err(),
            "invalid decision \"maybe\": expected \"allow\" or \"deny\""
        );
    }

    #[test]
    fn every_listed_command_parses() {
        for info in command_list() {
            let parsed = parse(&info.command);
            assert!(
                !matches!(&parsed, Err(e) if e.starts_with("unknown command")),
                "{}",
                info.command
            );
        }
        assert!(help_text().contains("/model [provider/model] [effort]"));
    }
}
