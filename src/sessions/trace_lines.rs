//! The lines of the session's trace (see `format`): finished subagents (`agent`), the
//! step list (`steps`) and the goal (`goal`). Fields as `docs/sessions.md` lists them.

use serde::{Deserialize, Serialize};

use crate::engine::conversation::store::SavedAgent;
use crate::protocol::{
    AgentKind, AgentRun, AgentState, Goal, GoalStatus, PlanStep, StepStatus, SubagentItem,
};

/// A subagent as it finished: its row of `agent_runs` and its transcript.
#[derive(Debug, Serialize, Deserialize)]
pub struct AgentLine {
    pub agent: String,
    pub label: String,
    pub model: String,
    #[serde(default)]
    pub effort: Option<String>,
    pub state: AgentState,
    pub started_at: u64,
    pub duration_ms: u64,
    pub agent_tokens: u64,
    pub tool_calls: u64,
    pub prompt: String,
    #[serde(default)]
    pub result: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    #[serde(default)]
    pub items: Vec<ItemLine>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ItemLine {
    User {
        content: String,
    },
    Assistant {
        content: String,
    },
    Reasoning {
        content: String,
    },
    Tool {
        call_id: String,
        name: String,
        input: String,
        output: String,
        #[serde(default)]
        is_error: bool,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct StepLine {
    pub step: String,
    pub status: StepStatus,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct GoalLine {
    pub objective: String,
    pub status: GoalStatus,
    #[serde(default)]
    pub token_budget: Option<u64>,
    pub tokens_used: u64,
    pub time_used_seconds: u64,
    pub created_at: u64,
    pub updated_at: u64,
}

pub fn agent_line(saved: &SavedAgent) -> AgentLine {
    let run = &saved.run;
    AgentLine {
        agent: run.id.clone(),
        label: run.label.clone(),
        model: run.model.clone(),
        effort: run.effort.clone(),
        state: run.state,
        started_at: run.started_at,
        duration_ms: run.duration_ms,
        agent_tokens: run.tokens,
        tool_calls: run.tool_calls,
        prompt: run.prompt.clone(),
        result: run.result.clone(),
        error: run.error.clone(),
        tool_use_id: run.tool_use_id.clone(),
        items: saved
            .items
            .iter()
            .map(|item| match item {
                SubagentItem::User { content } => ItemLine::User {
                    content: content.clone(),
                },
                SubagentItem::Assistant { content } => ItemLine::Assistant {
                    content: content.clone(),
                },
                SubagentItem::Reasoning { content } => ItemLine::Reasoning {
                    content: content.clone(),
                },
                SubagentItem::Tool {
                    call_id,
                    name,
                    input,
                    output,
                    is_error,
                    ..
                } => ItemLine::Tool {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                    output: output.clone(),
                    is_error: *is_error,
                },
            })
            .collect(),
    }
}

pub fn saved_agent(line: AgentLine) -> SavedAgent {
    SavedAgent {
        run: AgentRun {
            id: line.agent,
            label: line.label,
            model: line.model,
            effort: line.effort,
            state: line.state,
            started_at: line.started_at,
            duration_ms: line.duration_ms,
            tokens: line.agent_tokens,
            tool_calls: line.tool_calls,
            prompt: line.prompt,
            result: line.result,
            error: line.error,
            kind: AgentKind::Subagent,
            tool_use_id: line.tool_use_id,
            activity: None,
        },
        items: line
            .items
            .into_iter()
            .map(|item| match item {
                ItemLine::User { content } => SubagentItem::User { content },
                ItemLine::Assistant { content } => SubagentItem::Assistant { content },
                ItemLine::Reasoning { content } => SubagentItem::Reasoning { content },
                ItemLine::Tool {
                    call_id,
                    name,
                    input,
                    output,
                    is_error,
                } => SubagentItem::Tool {
                    call_id,
                    name,
                    input,
                    output,
                    // Saved when it finished: nothing of it runs any more.
                    running: false,
                    is_error,
                },
            })
            .collect(),
    }
}

pub fn step_lines(plan: &[PlanStep]) -> Vec<StepLine> {
    plan.iter()
        .map(|step| StepLine {
            step: step.step.clone(),
            status: step.status,
        })
        .collect()
}

pub fn steps(lines: Vec<StepLine>) -> Vec<PlanStep> {
    lines
        .into_iter()
        .map(|line| PlanStep {
            step: line.step,
            status: line.status,
        })
        .collect()
}

pub fn goal_line(goal: &Goal) -> GoalLine {
    GoalLine {
        objective: goal.objective.clone(),
        status: goal.status,
        token_budget: goal.token_budget,
        tokens_used: goal.tokens_used,
        time_used_seconds: goal.time_used_seconds,
        created_at: goal.created_at,
        updated_at: goal.updated_at,
    }
}

pub fn goal(line: GoalLine) -> Goal {
    Goal {
        objective: line.objective,
        status: line.status,
        token_budget: line.token_budget,
        tokens_used: line.tokens_used,
        time_used_seconds: line.time_used_seconds,
        created_at: line.created_at,
        updated_at: line.updated_at,
    }
}
