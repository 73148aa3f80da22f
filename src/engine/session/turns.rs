//! Starting a turn (or a compaction) and what follows its end: usage, the goal, the
//! queue, and the session file's durability before the closing `status`.

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{RunningTurn, Session};
use crate::engine::agents::Track;
use crate::engine::conversation::tokens;
use crate::engine::turn::{self, SteerInbox, TurnContext, TurnEnd, TurnOutcome};
use crate::protocol::{Event, SessionStatus, TurnUsage, UserInput};

impl Session {
    pub(super) fn start_turn(&mut self, input: UserInput) {
        let (ctx, running) = self.turn_context(SessionStatus::Streaming);
        let handle = tokio::spawn(turn::run(ctx, input));
        self.turn = Some(running(handle));
    }

    /// `/compact`: a summary of the conversation, run like a turn (an interrupt stops
    /// it; messages sent meanwhile queue behind it).
    pub(super) async fn compact(&mut self) {
        if self.turn.is_some() {
            self.reply_error(
                "/compact waits for the running turn: interrupt it, or try again when it ends",
            )
            .await;
            return;
        }
        self.emitter.status(SessionStatus::Compacting).await;
        let (ctx, running) = self.turn_context(SessionStatus::Compacting);
        let handle = tokio::spawn(turn::compact(ctx));
        self.turn = Some(running(handle));
    }

    /// What a turn (or a compaction) runs with; the second half makes its record once
    /// it is spawned.
    pub(super) fn turn_context(
        &mut self,
        status: SessionStatus,
    ) -> (
        TurnContext,
        impl FnOnce(JoinHandle<TurnOutcome>) -> RunningTurn + use<>,
    ) {
        let cancel = CancellationToken::new();
        let steer = SteerInbox::default();
        let (mode, goal) = self.emitter.change(|shared| {
            shared.status = status;
            shared.turn_starts();
            (shared.mode, shared.goal.prompt())
        });
        let ctx = TurnContext {
            emitter: self.emitter.clone(),
            model: self.model.clone(),
            reasoning_effort: self.effort.clone(),
            system: crate::engine::builtin::goal::system_with(&self.system_prompt, goal.clone()),
            plan_system: {
                let system = crate::engine::builtin::goal::system_with(&self.system_prompt, goal);
                Arc::from(format!(
                    "{system}\n\n{}",
                    crate::engine::conversation::prompt::PLAN_MODE.trim_end()
                ))
            },
            project: self.params.project.clone(),
            tools: self.params.tools.clone(),
            cwd: self.params.cwd.clone(),
            env: self.params.env.clone(),
            session_id: self.params.session_id.clone(),
            mode,
            steer: steer.clone(),
            cancel: cancel.clone(),
            turn: std::sync::OnceLock::new(),
            checkpointed: Mutex::new(std::collections::HashSet::new()),
            base: std::sync::OnceLock::new(),
            pending_write: Mutex::new(None),
            track: Track::Main,
            agents: self.agents.clone(),
            delegation: self.delegation.clone(),
        };
        let running = move |handle| RunningTurn {
            cancel,
            handle,
            steer,
            resumed: false,
        };
        (ctx, running)
    }

    pub(super) async fn finish_turn(
        &mut self,
        outcome: Result<TurnOutcome, tokio::task::JoinError>,
    ) {
        let Some(turn) = self.turn.take() else { return };
        self.requeue_steered(&turn.steer);
        // A turn closes its own requests; any left (a turn that panicked) close here.
        self.resolve_open_approvals(crate::protocol::Resolution::Interrupted)
            .await;
        // What a client is told has ended is on disk (written; the fsync follows
        // without waiting): a `kill -9` after `ready` loses nothing of the turn.
        let written = self.emitter.change(|shared| {
            let journal = shared.store.journal();
            let written = journal.written();
            journal.sync();
            written
        });
        crate::engine::conversation::store::wait_written(written).await;
        // A failure to save the turn is said before its closing status: a client that
        // stops reading at `ready` must still learn that the turn is not on disk.
        self.report_journal().await;
        let end = match &outcome {
            Ok(outcome) => outcome.end,
            Err(_) => TurnEnd::Failed,
        };
        let completed = end == TurnEnd::Completed;
        match outcome {
            Ok(TurnOutcome {
                end: TurnEnd::Completed,
                usage,
            }) => {
                // Its subagents' usage counts in the turn's (their cost at their prices).
                let total = self.with_agent_usage(usage);
                self.emitter.emit(Event::Usage(total)).await;
                self.emit_context_usage(&usage).await;
                self.goal_turn_end(Some(&total)).await;
                self.emitter.status(SessionStatus::Ready).await;
            }
            Ok(TurnOutcome {
                end: TurnEnd::Failed,
                usage,
            }) => {
                let total = self.with_agent_usage(usage);
                self.cost += tokens::cost(&usage, &self.model.info);
                self.goal_turn_end(Some(&total)).await;
                self.emitter.status(SessionStatus::Ready).await;
            }
            Ok(TurnOutcome {
                end: TurnEnd::Interrupted,
                ..
            }) => {
                self.goal_turn_end(None).await;
                self.emitter.status(SessionStatus::Interrupted).await;
            }
            Err(err) => {
                tracing::error!(%err, "turn task failed");
                self.emitter
                    .error(format!(
                        "internal error: the turn stopped unexpectedly ({err})"
                    ))
                    .await;
                self.goal_turn_end(None).await;
                self.emitter.status(SessionStatus::Ready).await;
            }
        }
        if let Some(observer) = &self.params.turn_ends
            && !turn.resumed
        {
            let _ = observer.send(end);
        }
        self.start_next().await;
        if completed {
            self.continue_goal();
        }
    }

    /// What a client is about to be told has happened is written (not waiting for the
    /// fsync), and a failure to save it, or saving working again, is said.
    pub(super) async fn saved_point(&mut self) {
        let written = self.emitter.change(|shared| {
            let journal = shared.store.journal();
            let written = journal.written();
            journal.sync();
            written
        });
        crate::engine::conversation::store::wait_written(written).await;
        self.report_journal().await;
    }

    /// Says (to every client) that the session cannot be saved, or is saved again.
    pub(super) async fn report_journal(&mut self) {
        let (failure, recovered) = self.emitter.change(|shared| {
            let journal = shared.store.journal();
            (journal.take_error(), journal.take_recovered())
        });
        if let Some(message) = failure {
            self.emitter.error(message).await;
        }
        if let Some(message) = recovered {
            self.emitter.info(message).await;
        }
    }

    pub(super) async fn emit_context_usage(&mut self, usage: &TurnUsage) {
        self.cost += tokens::cost(usage, &self.model.info);
        let (tokens, tokenizer) = self.context_tokens();
        self.last_context_usage = Some((tokens, tokenizer, self.cost));
        self.emitter
            .emit(Event::ContextUsage {
                tokens,
                tokenizer: tokenizer.to_owned(),
                cost: self.cost,
            })
            .await;
    }
}
