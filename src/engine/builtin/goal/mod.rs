//! `update_goal`, the tool that ends work on the session's goal, and how a goal change is
//! recorded and announced. The goal itself, and how turns count toward it, is
//! [`state`].

pub mod state;

use serde_json::{Value, json};

use crate::engine::conversation::store::{EntryBody, Prepared};
use crate::engine::ports::model::ToolSpec;
use crate::engine::ports::tools::ToolOutput;
use crate::engine::shared::Shared;
use crate::engine::turn::TurnContext;
use crate::protocol::{Event, GoalStatus};
pub use state::{GoalCommand, continue_message, parse_command, start_message, system_with};

pub const UPDATE_GOAL: &str = "update_goal";

/// Records the goal as it stands in the session file; its `goal` event.
pub fn announce(shared: &mut Shared) -> Event {
    let goal = shared.goal.current().cloned();
    shared
        .store
        .append(Prepared::counted(EntryBody::Goal(goal.clone()), 0));
    Event::Goal { goal }
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: UPDATE_GOAL.to_owned(),
        description: "End work on the session's goal: `achieved` when it is reached, \
                      `blocked` when you cannot make progress without the user. The session \
                      stops continuing on its own."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["achieved", "blocked"]},
                "summary": {"type": "string", "description": "What was done, or what blocks it."}
            },
            "required": ["status", "summary"],
            "additionalProperties": false
        }),
    }
}

impl TurnContext {
    /// `update_goal`: the goal is achieved or blocked (`goal` follows).
    pub(super) async fn update_goal(&self, args: &Value) -> ToolOutput {
        let status = match args.get("status").and_then(Value::as_str) {
            Some("achieved") => GoalStatus::Achieved,
            Some("blocked") => GoalStatus::Blocked,
            other => {
                return ToolOutput::error(format!(
                    "update_goal: `status` must be \"achieved\" or \"blocked\", not {other:?}"
                ));
            }
        };
        let summary = args
            .get("summary")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_owned();
        let marked = self
            .emitter
            .emit_with(|shared| match shared.goal.mark(status) {
                Ok(()) => (Some(announce(shared)), Ok(())),
                Err(message) => (None, Err(message)),
            })
            .await;
        match marked {
            Ok(()) => ToolOutput::ok(format!("The goal is marked {}. {summary}", status.as_str())),
            Err(message) => ToolOutput::error(message),
        }
    }
}
