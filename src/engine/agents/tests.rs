//! The agents' records as the session keeps them: pruning, limits, when `agent_runs`
//! is pushed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::activity;
use super::record::*;
use crate::engine::conversation::store::{NoJournal, SessionMeta, Store};
use crate::protocol::{AgentKind, AgentRun, AgentState, Event, LifecycleStatus, TurnUsage};

fn agent(id: &str) -> NewAgent {
    NewAgent {
        run: AgentRun {
            id: id.to_owned(),
            label: id.to_owned(),
            model: "m/m".into(),
            effort: None,
            state: AgentState::Running,
            started_at: 0,
            duration_ms: 0,
            tokens: 0,
            tool_calls: 0,
            prompt: "task".into(),
            result: None,
            error: None,
            kind: AgentKind::Subagent,
            tool_use_id: None,
            activity: None,
        },
        store: Store::new(
            SessionMeta {
                id: id.to_owned(),
                cwd: Default::default(),
                model: String::new(),
                created: 0,
                chat: false,
                engine: None,
            },
            Arc::new(NoJournal),
        ),
    }
}

fn rows(agents: &Agents) -> Vec<AgentRun> {
    match agents.runs_event(Instant::now()) {
        Event::AgentRuns { agents, .. } => agents,
        _ => unreachable!(),
    }
}

fn ids(agents: &Agents) -> Vec<String> {
    rows(agents).into_iter().map(|run| run.id).collect()
}

#[test]
fn earlier_turns_keep_their_most_recent_agents() {
    let mut agents = Agents::default();
    let now = Instant::now();
    agents.spawn(agent("/root/long"), now).unwrap();
    for n in 0..30 {
        agents.new_turn();
        let id = format!("/root/a{n}");
        agents.spawn(agent(&id), now).unwrap();
        agents
            .finish(&id, AgentState::Completed, Some("done".into()), now)
            .unwrap();
    }
    // The running one stays, with the 24 most recent of earlier turns and this
    // turn's.
    assert_eq!(ids(&agents).len(), 1 + KEPT_EARLIER + 1);
    agents.new_turn();
    let kept = ids(&agents);
    assert_eq!(kept.len(), 1 + KEPT_EARLIER);
    assert_eq!(kept[0], "/root/long");
    assert_eq!(kept[1], "/root/a6");
    assert_eq!(agents.unique_id("/root/a29"), "/root/a29-2");
    assert_eq!(
        agents.unique_id("/root/a0"),
        "/root/a0",
        "pruned ids are free again"
    );
}

#[test]
fn spawning_is_bounded() {
    let mut agents = Agents::default();
    let now = Instant::now();
    for n in 0..MAX_RUNNING {
        agents.spawn(agent(&format!("/root/r{n}")), now).unwrap();
    }
    assert!(agents.spawn(agent("/root/one-more"), now).is_err());
    for n in 0..MAX_RUNNING {
        agents.finish(&format!("/root/r{n}"), AgentState::Closed, None, now);
    }
    for n in MAX_RUNNING..MAX_PER_TURN {
        let id = format!("/root/r{n}");
        agents.spawn(agent(&id), now).unwrap();
        agents.finish(&id, AgentState::Completed, None, now);
    }
    let refused = agents.spawn(agent("/root/too-many"), now).unwrap_err();
    assert!(refused.contains("this turn"), "{refused}");
    agents.new_turn();
    assert!(agents.spawn(agent("/root/next-turn"), now).is_ok());
}

#[test]
fn rows_are_pushed_at_most_every_push_interval_and_milestones_at_once() {
    let mut agents = Agents::default();
    let start = Instant::now();
    let events = agents.spawn(agent("/root/a"), start).unwrap();
    assert!(matches!(
        events.as_slice(),
        [Event::SubagentLifecycle { .. }, Event::AgentRuns { .. }]
    ));
    // A change right after a push waits for its turn.
    let soon = start + Duration::from_millis(100);
    assert!(
        agents
            .observe("/root/a", Event::Connecting, soon)
            .is_empty()
    );
    assert_eq!(agents.due(), Some(start + PUSH_INTERVAL));
    assert!(agents.flush(soon).is_none());
    // Deltas change no row.
    let delta = Event::ReasoningDelta { delta: "x".into() };
    assert!(agents.observe("/root/a", delta, soon).is_empty());
    let pushed = agents.flush(start + PUSH_INTERVAL).expect("due");
    let Event::AgentRuns { agents: pushed, .. } = pushed else {
        panic!()
    };
    assert_eq!(pushed[0].activity.as_deref(), Some(activity::THINKING));
    assert_eq!(pushed[0].duration_ms, PUSH_INTERVAL.as_millis() as u64);
    assert_eq!(agents.due(), None);
    // Long after, a change goes at once.
    let later = start + 3 * PUSH_INTERVAL;
    let events = agents.observe("/root/a", Event::AssistantStart, later);
    assert!(matches!(events.as_slice(), [Event::AgentRuns { .. }]));
    // An approval request goes on to clients, with a milestone, at once.
    let request = Event::ApprovalRequest {
        call_id: "c".into(),
        name: "bash".into(),
        summary: "make".into(),
        subagent_id: Some("/root/a".into()),
        hunks: None,
    };
    let events = agents.observe("/root/a", request, later);
    assert!(matches!(
        events.as_slice(),
        [
            Event::ApprovalRequest { .. },
            Event::SubagentLifecycle {
                status: LifecycleStatus::Progress,
                ..
            },
            Event::AgentRuns { .. }
        ]
    ));
    let (usage, cost) = {
        agents.add_usage(
            "/root/a",
            &TurnUsage {
                input_tokens: 7,
                output_tokens: 3,
                ..TurnUsage::default()
            },
            0.5,
            later,
        );
        agents.take_usage()
    };
    assert_eq!((usage.input_tokens, cost), (7, 0.5));
    assert_eq!(agents.take_usage().0.input_tokens, 0);
    assert_eq!(rows(&agents)[0].tokens, 10);
}
