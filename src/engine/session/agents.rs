//! The agent trace in the session: the `agent_runs` and `subagent_transcript` ops, the
//! subagents stopping with the turn that an interrupt stops, and their usage joining
//! the session's.

use super::Session;
use crate::protocol::{AgentState, Event, TurnUsage};

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
