//! Slash commands, as the `command` op carries them.
//!
//! The table below is the single source for both parsing and the `command_list` event,
//! so a command can never be advertised without being handled or the other way round.

use crate::protocol::CommandInfo;

struct Spec {
    name: &'static str,
    args: &'static str,
    description: &'static str,
}

const COMMANDS: &[Spec] = &[
    Spec {
        name: "/help",
        args: "",
        description: "List the available commands",
    },
    Spec {
        name: "/model",
        args: "[provider/model] [effort]",
        description: "Show the model picker, or switch model and reasoning effort",
    },
    Spec {
        name: "/approve",
        args: "<call_id> <allow|deny> [always | <hunk_id>...]",
        description: "Answer an approval request (same as the approve op)",
    },
    Spec {
        name: "/plan",
        args: "<id> approve [mode] [notes] | <id> revise <feedback>",
        description: "Approve a proposed plan, or ask for a revision",
    },
    Spec {
        name: "/transcript",
        args: "",
        description: "Show the conversation so far (a transcript event)",
    },
    Spec {
        name: "/quit",
        args: "",
        description: "End the session",
    },
    Spec {
        name: "/exit",
        args: "",
        description: "End the session (same as /quit)",
    },
];

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
        decision: &'a str,
        always: bool,
        hunks: Option<Vec<String>>,
    },
    /// The arguments after `/plan`, parsed by the session.
    Plan(&'a str),
    Quit,
}

pub fn command_list() -> Vec<CommandInfo> {
    COMMANDS
        .iter()
        .map(|spec| CommandInfo {
            command: spec.name.to_owned(),
            marker: None,
            args: spec.args.to_owned(),
            description: spec.description.to_owned(),
        })
        .collect()
}

pub fn help_text() -> String {
    let mut text = String::from("Commands:");
    for spec in COMMANDS {
        let usage = if spec.args.is_empty() {
            spec.name.to_owned()
        } else {
            format!("{} {}", spec.name, spec.args)
        };
        text.push_str(&format!("\n  {usage:<34} {}", spec.description));
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
    match name {
        "/help" => no_args(Command::Help),
        "/quit" | "/exit" => no_args(Command::Quit),
        "/transcript" => no_args(Command::Transcript),
        "/approve" => match args.as_slice() {
            [call_id, decision, rest @ ..] => {
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
            _ => Err("usage: /approve <call_id> <allow|deny> [always | <hunk_id>...]".to_owned()),
        },
        "/plan" => Ok(Command::Plan(
            input.strip_prefix("/plan").unwrap_or_default().trim(),
        )),
        "/model" => match args.as_slice() {
            [] => Ok(Command::ModelView),
            [model] => Ok(Command::SwitchModel {
                name: model,
                effort: None,
            }),
            [model, effort] => Ok(Command::SwitchModel {
                name: model,
                effort: Some(effort),
            }),
            _ => Err("usage: /model [provider/model] [effort]".to_owned()),
        },
        other => Err(format!("unknown command: {other} (try /help)")),
    }
}

/// True for the inputs that end a client's session: `/quit` and `/exit`.
pub fn is_quit(input: &str) -> bool {
    matches!(parse(input), Ok(Command::Quit))
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
                decision: "allow",
                always: false,
                hunks: Some(vec!["f0h0".into(), "f0h2".into()])
            })
        );
        assert_eq!(
            parse("/approve call_1 allow always"),
            Ok(Command::Approve {
                call_id: "call_1",
                decision: "allow",
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
            parse("/nope").unwrap_err(),
            "unknown command: /nope (try /help)"
        );
        assert!(parse("hello").unwrap_err().starts_with("not a command"));
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
