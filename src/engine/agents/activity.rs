//! An agent's latest action in a few words (`agent_runs.activity`), from the tool call
//! it makes, as its tool words it: "Running cargo test", "Reading src/lib.rs".

use crate::engine::conversation::store::first_line;
use crate::protocol::CallCard;

/// Longest activity shown, in characters.
const MAX_CHARS: usize = 60;

pub const WAITING_FOR_MODEL: &str = "Waiting for the model";
pub const THINKING: &str = "Thinking";
pub const WRITING: &str = "Writing a reply";
pub const RETRYING: &str = "Retrying the model request";

/// What a call is doing, in the words its tool gave (`CallCard::activity`); a call
/// whose tool said nothing is "Calling <name>".
pub fn of_card(name: &str, card: &CallCard) -> String {
    let text = card
        .activity
        .clone()
        .unwrap_or_else(|| format!("Calling {name}"));
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
        let card = |activity: Option<&str>| CallCard {
            activity: activity.map(str::to_owned),
            ..CallCard::default()
        };
        assert_eq!(
            of_card("t", &card(Some("Running cargo test\necho done"))),
            "Running cargo test"
        );
        assert_eq!(
            of_card("mcp__fs__stat", &card(None)),
            "Calling mcp__fs__stat"
        );
        let long = of_card("t", &card(Some(&"x".repeat(200))));
        assert_eq!(long.chars().count(), MAX_CHARS);
        assert!(long.ends_with('…'));
    }
}
