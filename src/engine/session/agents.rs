//! The trace a front-end shows beside the conversation: the `agent_runs` and
//! `subagent_transcript` ops, the subagents stopping with the turn that an interrupt
//! stops, their usage joining the session's, and the goal, step list and agents
//! announced again when the conversation shown changes.

use super::Session;
use crate::engine::agents::ROOT;
use crate::engine::builtin::plan_steps;
use crate::protocol::{AgentState, Event, Goal, PlanStep, TurnUsage};

/// The goal, step list and agents (ids and states) as clients are shown them.
pub(super) struct Trace {
    goal: Option<Goal>,
    plan: Option<Vec<PlanStep>>,
    agents: Vec<(String, AgentState)>,
}

impl Session {
    pub(super) async fn agent_runs(&mut self) {
        let event = self
            .emitter
            .change(|shared| shared.agents.runs_event(std::time::Instant::now()));
        self.reply(event).await;
    }

    pub(super) async fn subagent_transcript(&mut self, agent_id: String) {
        let items = self
            .emitter
            .change(|shared| shared.agents.transcript(&agent_id));
        let error = items
            .is_none()
            .then(|| format!("unknown agent: {agent_id}"));
        self.reply(Event::SubagentTranscript {
            agent_id,
            items,
            error,
        })
        .await;
    }

    /// What clients are shown beside the conversation, to tell what a move changed.
    pub(super) fn trace(&self) -> Trace {
        self.emitter.change(|shared| Trace {
            goal: shared.goal.current().cloned(),
            plan: plan_steps::current(&shared.store),
            agents: shared.agents.under(ROOT),
        })
    }

    /// After the conversation shown changed (`/resume`, `/tree`, `/checkout`): what
    /// differs from `before` is announced again, so clients replace it (`goal: null`
    /// and `plan: []` when the new conversation has none).
    pub(super) async fn announce_trace(&self, before: Trace) {
        let now = self.trace();
        if now.goal != before.goal {
            self.emitter.emit(Event::Goal { goal: now.goal }).await;
        }
        if now.plan != before.plan {
            let plan = now.plan.unwrap_or_default();
            self.emitter.emit(Event::Plan { plan }).await;
        }
        if now.agents != before.agents {
            let runs = self
                .emitter
                .change(|shared| shared.agents.runs_event(std::time::Instant::now()));
            self.emitter.emit(runs).await;
        }
    }

    /// Every running subagent stops, as interrupted (their cards closed, their state
    /// announced) before the interrupt's own `info` and `status`.
    pub(super) async fn interrupt_agents(&self) {
        self.agents.close_all(AgentState::Interrupted).await;
    }

    /// The subagents' usage since the last turn's end joins this one's: in its `usage`
    /// (returned) and, at their own models' prices, in the session's cost.
    pub(super) fn with_agent_usage(&mut self, own: TurnUsage) -> TurnUsage {
        let (usage, cost) = self.emitter.change(|shared| shared.agents.take_usage());
        self.cost += cost;
        let mut total = own;
        total.add(&usage);
        total
    }
}
