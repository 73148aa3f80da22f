//! The session's step list: the model keeps it with `update_plan`, every change is a
//! `plan` event, and the conversation records it (a `plan_steps` transcript item), so
//! the list of the active branch is what a client attaching is shown.

use serde_json::{Value, json};

use crate::engine::conversation::store::{EntryBody, Prepared, Store};
use crate::engine::ports::model::ToolSpec;
use crate::engine::ports::tools::ToolOutput;
use crate::engine::turn::TurnContext;
use crate::protocol::{Event, PlanStep, StepStatus};

pub const UPDATE_PLAN: &str = "update_plan";

/// Steps one list may hold: it is re-sent whole at every change.
const MAX_STEPS: usize = 100;

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: UPDATE_PLAN.to_owned(),
        description: "Keep the user informed of your plan for a task of several steps: call \
                      this with the whole step list whenever it changes (a step starts, is \
                      done, or the plan changes). At most one step is in_progress at a time."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "plan": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "step": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["step", "status"],
                        "additionalProperties": false
                    }
                },
                "explanation": {"type": "string", "description": "Why the plan changed, if it did."}
            },
            "required": ["plan"],
            "additionalProperties": false
        }),
    }
}

/// The step list of the active branch (the latest `update_plan`), if there is one.
pub fn current(store: &Store) -> Option<Vec<PlanStep>> {
    store
        .branch()
        .iter()
        .rev()
        .find_map(|entry| match &entry.body {
            EntryBody::Steps { plan, .. } => Some(plan.clone()),
            _ => None,
        })
}

/// The arguments of `update_plan` as a step list; `Err` says what to correct.
fn parse(args: &Value) -> Result<(Vec<PlanStep>, Option<String>), String> {
    let steps = args
        .get("plan")
        .and_then(Value::as_array)
        .ok_or("update_plan needs `plan`, a list of {step, status}")?;
    if steps.len() > MAX_STEPS {
        return Err(format!("a plan has at most {MAX_STEPS} steps"));
    }
    let mut plan = Vec::with_capacity(steps.len());
    for (index, item) in steps.iter().enumerate() {
        let step = item
            .get("step")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|step| !step.is_empty())
            .ok_or_else(|| format!("step {} needs a non-empty `step`", index + 1))?;
        let status = match item.get("status").and_then(Value::as_str) {
            Some("pending") => StepStatus::Pending,
            Some("in_progress") => StepStatus::InProgress,
            Some("completed") => StepStatus::Completed,
            other => {
                return Err(format!(
                    "step {}: `status` must be pending, in_progress or completed, not {other:?}",
                    index + 1
                ));
            }
        };
        plan.push(PlanStep {
            step: step.to_owned(),
            status,
        });
    }
    if plan
        .iter()
        .filter(|step| step.status == StepStatus::InProgress)
        .count()
        > 1
    {
        return Err("at most one step may be in_progress".to_owned());
    }
    let explanation = args
        .get("explanation")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(str::to_owned);
    Ok((plan, explanation))
}

impl TurnContext {
    /// `update_plan`: records the list and emits `plan`.
    pub(super) async fn update_plan(&self, args: &Value) -> ToolOutput {
        let (plan, explanation) = match parse(args) {
            Ok(parsed) => parsed,
            Err(message) => return ToolOutput::error(message),
        };
        let entry = Prepared::counted(
            EntryBody::Steps {
                plan: plan.clone(),
                explanation,
            },
            0,
        );
        self.emitter
            .emit_with(|shared| {
                shared.store.append(entry);
                (Some(Event::Plan { plan }), ())
            })
            .await;
        ToolOutput::ok("Plan updated.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_checked() {
        let (plan, explanation) = parse(&json!({"plan": [
            {"step": "Read", "status": "completed"},
            {"step": " Fix ", "status": "in_progress"}
        ], "explanation": "found it"}))
        .unwrap();
        assert_eq!(plan[1].step, "Fix");
        assert_eq!(plan[1].status, StepStatus::InProgress);
        assert_eq!(explanation.as_deref(), Some("found it"));
        for bad in [
            json!({}),
            json!({"plan": [{"step": "", "status": "pending"}]}),
            json!({"plan": [{"step": "a", "status": "done"}]}),
            json!({"plan": [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]}),
        ] {
            assert!(parse(&bad).is_err(), "{bad}");
        }
    }
}
