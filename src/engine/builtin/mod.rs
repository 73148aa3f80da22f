//! Tools the engine implements itself, because they act on the session rather than on
//! the machine: subagents (`agents`), the step list (`plan_steps`), the goal (`goal`).
//!
//! They are offered next to the session's tools where they apply, take the same path
//! through `calls.rs` up to the point where a tool would be assessed, and are never
//! gated: what they start (a subagent's own calls) is.

pub(super) mod goal;
pub(super) mod plan_steps;

use super::agents::{self, CLOSE_AGENT, MESSAGE_AGENT, SPAWN_AGENT, WAIT_AGENTS};
use super::ports::model::{ToolCall, ToolSpec};
use super::ports::tools::{DescribeCall, ToolOutput, string_arg};
use super::turn::TurnContext;
use super::turn::calls::parse_arguments;
use crate::protocol::{CallCard, CallKind};
use goal::UPDATE_GOAL;
use plan_steps::UPDATE_PLAN;

/// Whether this turn may spawn subagents: its own depth is below `[agents] max_depth`.
fn spawns(ctx: &TurnContext) -> bool {
    ctx.track.depth() < ctx.agents.max_depth()
}

/// The step list and the goal are the session's: its own turns keep them.
fn keeps_plan(ctx: &TurnContext) -> bool {
    ctx.track.is_main()
}

fn ends_goal(ctx: &TurnContext) -> bool {
    ctx.track.is_main() && ctx.emitter.change(|shared| shared.goal.is_active())
}

/// The built-in tools a session's own turns are offered before any goal is set: what
/// its system prompt names beside the registry's tools.
pub fn session_builtin_specs(max_depth: u32) -> Vec<ToolSpec> {
    let mut specs = Vec::new();
    if max_depth > 0 {
        specs.extend(agents::specs());
    }
    specs.push(plan_steps::spec());
    specs
}

impl TurnContext {
    /// The built-in tools offered in this turn's next request.
    pub(super) fn builtin_specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        if spawns(self) {
            specs.extend(agents::specs());
        }
        if keeps_plan(self) {
            specs.push(plan_steps::spec());
        }
        if ends_goal(self) {
            specs.push(goal::spec());
        }
        specs
    }

    /// `call` as clients are shown it: a built-in tool's card, or what its tool says.
    pub(in crate::engine) fn describe_call(&self, call: &ToolCall) -> CallCard {
        let args = parse_arguments(&call.arguments).unwrap_or_default();
        if let Some(card) = describe_builtin(&call.name, &args) {
            return card;
        }
        match self.tools.get(&call.name) {
            Some(tool) => tool.describe(&args, &self.cwd),
            None => CallCard::named(&call.name),
        }
    }

    /// Runs `call` if it is a built-in tool this turn has; `None` otherwise.
    pub(super) async fn builtin_call(&self, call: &ToolCall) -> Option<ToolOutput> {
        let offered = match call.name.as_str() {
            SPAWN_AGENT | MESSAGE_AGENT | WAIT_AGENTS | CLOSE_AGENT => spawns(self),
            UPDATE_PLAN => keeps_plan(self),
            UPDATE_GOAL => ends_goal(self),
            _ => false,
        };
        if !offered {
            return None;
        }
        let args = match parse_arguments(&call.arguments) {
            Ok(args) => args,
            Err(message) => return Some(ToolOutput::error(format!("{}: {message}", call.name))),
        };
        Some(match call.name.as_str() {
            SPAWN_AGENT => self.spawn_agent(call, &args).await,
            MESSAGE_AGENT => self.message_agent(&args).await,
            WAIT_AGENTS => self.wait_agents(&args).await,
            CLOSE_AGENT => self.close_agent(&args).await,
            UPDATE_PLAN => self.update_plan(&args).await,
            _ => self.update_goal(&args).await,
        })
    }
}

/// The cards of the engine's own tools: work on the session's plan, goal and agents.
fn describe_builtin(name: &str, args: &serde_json::Value) -> Option<CallCard> {
    let arg = |key| string_arg(args, key);
    let (title, activity) = match name {
        SPAWN_AGENT => (
            format!("Subagent {}", arg("task_name").unwrap_or_default()),
            match arg("task_name") {
                Some(task) => format!("Starting subagent {task}"),
                None => "Starting a subagent".to_owned(),
            },
        ),
        WAIT_AGENTS => (
            "Wait for subagents".to_owned(),
            "Waiting for subagents".to_owned(),
        ),
        MESSAGE_AGENT => (
            format!("Message {}", arg("agent_id").unwrap_or_default()),
            format!("Messaging {}", arg("agent_id").unwrap_or("a subagent")),
        ),
        CLOSE_AGENT => (
            format!("Close {}", arg("agent_id").unwrap_or_default()),
            format!("Closing {}", arg("agent_id").unwrap_or("a subagent")),
        ),
        UPDATE_PLAN => ("Update the plan".to_owned(), "Updating the plan".to_owned()),
        UPDATE_GOAL => ("Update the goal".to_owned(), "Updating the goal".to_owned()),
        _ => return None,
    };
    Some(CallCard::of(CallKind::Think, title, None, activity))
}
