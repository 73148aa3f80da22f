//! An agent's latest action in a few words (`agent_runs.activity`), from the tool call
//! it makes: "Running cargo test", "Reading src/lib.rs".

use crate::engine::conversation::store::first_line;

/// Longest activity shown, in characters.
const MAX_CHARS: usize = 60;

pub const WAITING_FOR_MODEL: &str = "Waiting for the model";
pub const THINKING: &str = "Thinking";
pub const WRITING: &str = "Writing a reply";
pub const RETRYING: &str = "Retrying the model request";

/// What a call of tool `name` with these arguments (raw JSON text) is doing.
pub fn of_call(name: &str, arguments: &str) -> String {
    let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
    let field = |key: &str| {
        args.get(key)
            .and_then(|value| value.as_str())
            .map(str::trim)
            .filter(|value| !value.is_empty())
    };
    let text = match (name, field("command"), field("path")) {
        ("bash", Some(command), _) => format!("Running {command}"),
        ("read_file", _, Some(path)) => format!("Reading {path}"),
        ("list_dir", _, Some(path)) => format!("Listing {path}"),
        ("write_file", _, Some(path)) => format!("Writing {path}"),
        ("edit_file", _, Some(path)) => format!("Editing {path}"),
        ("grep", _, _) => match field("pattern") {
            Some(pattern) => format!("Searching for {pattern}"),
            None => "Searching".to_owned(),
        },
        ("spawn_agent", _, _) => match field("task_name") {
            Some(task) => format!("Starting subagent {task}"),
            None => "Starting a subagent".to_owned(),
        },
        ("wait_agents", _, _) => "Waiting for subagents".to_owned(),
        ("message_agent", _, _) => {
            format!("Messaging {}", field("agent_id").unwrap_or("a subagent"))
        }
        ("close_agent", _, _) => format!("Closing {}", field("agent_id").unwrap_or("a subagent")),
        ("update_plan", _, _) => "Updating the plan".to_owned(),
        _ => format!("Calling {name}"),
    };
    first_line(&text, MAX_CHARS)
}

/// What an agent waiting for an approval is doing.
pub fn waiting_for_approval(summary: &str) -> String {
    first_line(&format!("Waiting for approval: {summary}"), MAX_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_words_per_call() {
        assert_eq!(
            of_call("bash", r#"{"command":"cargo test\necho done"}"#),
            "Running cargo test"
        );
        assert_eq!(
            of_call("read_file", r#"{"path":"src/lib.rs"}"#),
            "Reading src/lib.rs"
        );
        assert_eq!(
            of_call("grep", r#"{"pattern":"fn main"}"#),
            "Searching for fn main"
        );
        assert_eq!(
            of_call("mcp__fs__stat", "not json"),
            "Calling mcp__fs__stat"
        );
        let long = of_call("bash", &format!(r#"{{"command":"{}"}}"#, "x".repeat(200)));
        assert_eq!(long.chars().count(), MAX_CHARS);
        assert!(long.ends_with('…'));
    }
}
