//! `/goal`, and the session working toward its goal: each completed turn, while the
//! goal is active and nothing is queued, is followed by another (see `engine::builtin::goal` for
//! the goal itself).

use super::Session;
use crate::engine::builtin::goal::{self, GoalCommand};
use crate::protocol::{Event, TurnUsage, UserInput};

impl Session {
    /// `/goal`: shows the goal (to the asker), `/goal clear` clears it, `/goal <objective>
    /// [--budget TOKENS]` sets it and, when the session is idle, starts on it at once.
    pub(super) async fn goal_command(&mut self, args: &str) {
        let command = match goal::parse_command(args) {
            Ok(command) => command,
            Err(message) => {
                self.reply_error(message).await;
                return;
            }
        };
        match command {
            GoalCommand::Show => {
                let goal = self.emitter.change(|shared| shared.goal.current().cloned());
                self.reply(Event::Goal { goal }).await;
            }
            GoalCommand::Clear => {
                self.emitter
                    .emit_with(|shared| {
                        shared.goal.clear();
                        (Some(goal::announce(shared)), ())
                    })
                    .await;
            }
            GoalCommand::Set { objective, budget } => {
                let message = goal::start_message(&objective);
                self.emitter
                    .emit_with(|shared| {
                        shared.goal.set(objective, budget);
                        (Some(goal::announce(shared)), ())
                    })
                    .await;
                // A running turn is followed by the goal's turns when it ends.
                if self.turn.is_none() {
                    self.submit(UserInput::text(message)).await;
                }
            }
        }
    }

    /// A turn ended, having used `usage` (`None`: unknown, it was interrupted): the
    /// goal counts it if it was one of its turns, and is announced as it stands.
    pub(super) async fn goal_turn_end(&mut self, usage: Option<&TurnUsage>) {
        let tokens = usage.map_or(0, |usage| usage.input_tokens + usage.output_tokens);
        self.emitter
            .emit_with(|shared| {
                if shared.goal.turn_ends(tokens, std::time::Instant::now()) {
                    (Some(goal::announce(shared)), ())
                } else {
                    (None, ())
                }
            })
            .await;
    }

    /// After a completed turn, with nothing queued: another turn toward an active goal.
    pub(super) fn continue_goal(&mut self) {
        if self.turn.is_some() || !self.queue.is_empty() {
            return;
        }
        let objective = self.emitter.change(|shared| {
            shared
                .goal
                .is_active()
                .then(|| shared.goal.current().map(|goal| goal.objective.clone()))
                .flatten()
        });
        if let Some(objective) = objective {
            self.start_turn(UserInput::text(goal::continue_message(&objective)));
        }
    }
}
