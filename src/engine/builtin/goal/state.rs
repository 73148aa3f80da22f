//! The session's goal, as its shared state keeps it: an objective the user sets
//! (`/goal`) that the session works toward turn after turn, until the model says it is
//! achieved or blocked (`update_goal`), or its turns use up its token budget.
//!
//! The goal is part of the model's context (a section of the system prompt while it is
//! active); the session continues on its own after each completed turn while it is
//! active (see `session/goal.rs`). Every change, and every turn end, is a `goal` event
//! and a `goal` entry of the session file, so a resumed session has its goal back.

use std::time::Instant;

use crate::engine::conversation::store::{EntryBody, Store, now_ms};
use crate::protocol::{Goal, GoalStatus};

#[derive(Debug, Default)]
pub struct GoalState {
    goal: Option<Goal>,
    /// When the running turn started, if it works toward the goal (its tokens and time
    /// count in the goal's).
    turn_started: Option<Instant>,
    /// Time of the goal's turns, in milliseconds (reported in whole seconds).
    time_ms: u64,
}

/// What `/goal` asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum GoalCommand {
    Show,
    Clear,
    Set {
        objective: String,
        budget: Option<u64>,
    },
}

/// Parses the arguments of `/goal`: nothing, `clear`, or `<objective> [--budget TOKENS]`.
pub fn parse_command(args: &str) -> Result<GoalCommand, String> {
    let words: Vec<&str> = args.split_whitespace().collect();
    match words.as_slice() {
        [] => return Ok(GoalCommand::Show),
        ["clear"] => return Ok(GoalCommand::Clear),
        _ => {}
    }
    let mut objective = Vec::new();
    let mut budget = None;
    let mut rest = words.iter();
    while let Some(word) = rest.next() {
        if *word != "--budget" {
            objective.push(*word);
            continue;
        }
        let tokens = rest
            .next()
            .and_then(|value| value.replace('_', "").parse::<u64>().ok())
            .filter(|tokens| *tokens > 0)
            .ok_or("--budget takes a positive number of tokens")?;
        budget = Some(tokens);
    }
    if objective.is_empty() {
        return Err("usage: /goal [<objective> [--budget TOKENS] | clear]".to_owned());
    }
    Ok(GoalCommand::Set {
        objective: objective.join(" "),
        budget,
    })
}

impl GoalState {
    /// The goal a saved session recorded last.
    pub fn from_store(store: &Store) -> Self {
        let goal = store
            .entries()
            .iter()
            .rev()
            .find_map(|entry| match &entry.body {
                EntryBody::Goal(goal) => Some(goal.clone()),
                _ => None,
            })
            .flatten();
        let time_ms = goal
            .as_ref()
            .map_or(0, |goal| goal.time_used_seconds * 1000);
        Self {
            goal,
            turn_started: None,
            time_ms,
        }
    }

    pub fn current(&self) -> Option<&Goal> {
        self.goal.as_ref()
    }

    pub fn is_active(&self) -> bool {
        self.goal
            .as_ref()
            .is_some_and(|goal| goal.status == GoalStatus::Active)
    }

    pub fn set(&mut self, objective: String, budget: Option<u64>) {
        let now = now_ms();
        self.time_ms = 0;
        self.turn_started = None;
        self.goal = Some(Goal {
            objective,
            status: GoalStatus::Active,
            token_budget: budget,
            tokens_used: 0,
            time_used_seconds: 0,
            created_at: now,
            updated_at: now,
        });
    }

    pub fn clear(&mut self) {
        self.goal = None;
        self.turn_started = None;
    }

    /// A turn starts: it is one of the goal's while the goal is active.
    pub fn turn_starts(&mut self, now: Instant) {
        self.turn_started = self.is_active().then_some(now);
    }

    /// The running turn ended, having used `tokens` (input and output): a turn of the
    /// goal's counts in it, and an active goal past its budget is exhausted. True when
    /// there is a goal to announce.
    pub fn turn_ends(&mut self, tokens: u64, now: Instant) -> bool {
        let started = self.turn_started.take();
        let Some(goal) = &mut self.goal else {
            return false;
        };
        if let Some(started) = started {
            self.time_ms += now.duration_since(started).as_millis() as u64;
            goal.tokens_used += tokens;
            goal.time_used_seconds = self.time_ms / 1000;
            if goal.status == GoalStatus::Active
                && goal
                    .token_budget
                    .is_some_and(|budget| goal.tokens_used >= budget)
            {
                goal.status = GoalStatus::BudgetExhausted;
            }
            goal.updated_at = now_ms();
        }
        true
    }

    /// The model ends the goal.
    pub(super) fn mark(&mut self, status: GoalStatus) -> Result<(), String> {
        let Some(goal) = self
            .goal
            .as_mut()
            .filter(|goal| goal.status == GoalStatus::Active)
        else {
            return Err("there is no active goal to update".to_owned());
        };
        goal.status = status;
        goal.updated_at = now_ms();
        Ok(())
    }

    /// The section of the system prompt an active goal adds.
    pub fn prompt(&self) -> Option<String> {
        let goal = self.goal.as_ref().filter(|_| self.is_active())?;
        let budget = goal
            .token_budget
            .map(|budget| format!("\nIts token budget is {budget} tokens over its turns."))
            .unwrap_or_default();
        Some(format!(
            "# Goal\n\nThe user set a goal for this session: {}{budget}\n\
             Work toward it: the session continues on its own after each of your replies \
             while the goal is active. When it is achieved, or you cannot make progress \
             without the user, call update_goal with the status and a short summary.",
            goal.objective
        ))
    }
}

/// The user message that starts work on a new goal.
pub fn start_message(objective: &str) -> String {
    format!("Work toward this goal: {objective}")
}

/// The user message of each turn the session continues with on its own.
pub fn continue_message(objective: &str) -> String {
    format!(
        "Continue working toward the goal: {objective}\n\
         When it is achieved, or you are blocked, call update_goal."
    )
}

/// The system prompt of a turn: the session's, and the goal's section.
pub fn system_with(base: &str, goal: Option<String>) -> std::sync::Arc<str> {
    match goal {
        Some(section) => format!("{base}\n\n{section}").into(),
        None => base.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goal_commands() {
        assert_eq!(parse_command(""), Ok(GoalCommand::Show));
        assert_eq!(parse_command(" clear "), Ok(GoalCommand::Clear));
        assert_eq!(
            parse_command("ship the parser --budget 50_000"),
            Ok(GoalCommand::Set {
                objective: "ship the parser".into(),
                budget: Some(50_000)
            })
        );
        assert_eq!(
            parse_command("clear the cache"),
            Ok(GoalCommand::Set {
                objective: "clear the cache".into(),
                budget: None
            })
        );
        assert!(parse_command("x --budget").is_err());
        assert!(parse_command("x --budget 0").is_err());
        assert!(parse_command("--budget 10").is_err());
    }

    #[test]
    fn turns_count_toward_the_budget() {
        let mut state = GoalState::default();
        let start = Instant::now();
        state.turn_starts(start);
        assert!(!state.turn_ends(500, start), "no goal yet");
        state.set("ship".into(), Some(1000));
        assert!(state.prompt().unwrap().contains("ship"));
        state.turn_starts(start);
        assert!(state.turn_ends(600, start + std::time::Duration::from_millis(1500)));
        let goal = state.current().unwrap();
        assert_eq!((goal.tokens_used, goal.time_used_seconds), (600, 1));
        assert_eq!(goal.status, GoalStatus::Active);
        state.turn_starts(start);
        state.turn_ends(400, start);
        assert_eq!(state.current().unwrap().status, GoalStatus::BudgetExhausted);
        assert!(state.prompt().is_none());
        // A turn that starts after the goal ended is not one of its turns.
        state.turn_starts(start);
        state.turn_ends(999, start);
        assert_eq!(state.current().unwrap().tokens_used, 1000);
        assert!(state.mark(GoalStatus::Achieved).is_err());
    }
}
