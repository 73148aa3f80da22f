//! Ops that gate tool calls: the approval mode, answers to approval requests, the
//! attended flag, and decisions on deferred actions.

use super::{Internal, Session};
use crate::config::ApprovalMode;
use crate::engine::approvals::validate_answer;
use crate::engine::calls::parse_arguments;
use crate::engine::deferred::ActionState;
use crate::engine::shared::Decision;
use crate::engine::tools::ToolOutput;
use crate::protocol::{Event, UserInput};

impl Session {
    pub(super) async fn set_approval_mode(&mut self, mode: &str) {
        let Some(mode) = ApprovalMode::parse(mode) else {
            self.emitter
                .error(format!(
                    "unknown approval mode: {mode} (expected manual, plan, auto-edit, auto or full-access)"
                ))
                .await;
            return;
        };
        self.apply_mode(mode).await;
    }

    pub(super) async fn apply_mode(&mut self, mode: ApprovalMode) {
        self.emitter
            .emit(Event::status(format!("approval mode: {mode}")))
            .await;
        self.emitter
            .emit_with(|shared| {
                shared.mode = mode;
                let event = Event::ApprovalMode {
                    mode: mode.to_string(),
                };
                (Some(event), ())
            })
            .await;
    }

    /// Answers an approval request. Every validation error leaves it open.
    pub(super) async fn approve(
        &mut self,
        call_id: &str,
        decision: &str,
        always: bool,
        hunks: Option<Vec<String>>,
    ) {
        let result = self
            .emitter
            .emit_with(|shared| {
                let Some(pending) = shared.approvals.iter().find(|p| p.call_id == call_id) else {
                    let message = format!(
                        "no approval request is open for call_id {call_id:?} (it was never asked, or was already answered)"
                    );
                    return (None, Err(message));
                };
                if let Err(message) =
                    validate_answer(decision, always, hunks.as_deref(), pending.hunks.as_deref())
                {
                    return (None, Err(message));
                }
                let Some(pending) = shared.take_approval(call_id) else {
                    return (None, Err(format!("no approval request is open for {call_id:?}")));
                };
                let answer = if decision == "allow" {
                    if always {
                        shared.allowlist.insert(pending.name.clone());
                    }
                    Decision::Allow { hunks }
                } else {
                    Decision::Deny
                };
                // The turn may have been interrupted meanwhile; then nobody waits.
                let _ = pending.answer.send(answer);
                let event = Event::ApprovalResolved {
                    call_id: call_id.to_owned(),
                    decision: decision.to_owned(),
                };
                (Some(event), Ok(()))
            })
            .await;
        if let Err(message) = result {
            self.emitter.error(message).await;
        }
    }

    pub(super) async fn set_attended(&mut self, attended: bool) {
        self.emitter
            .emit_with(|shared| {
                shared.attended = attended;
                if !attended {
                    // Calls waiting for an answer become deferred actions (the turn
                    // records them and goes on).
                    for pending in shared.approvals.drain(..) {
                        let _ = pending.answer.send(Decision::Defer);
                    }
                }
                (Some(Event::Attended { attended }), ())
            })
            .await;
    }

    pub(super) async fn decide_action(&mut self, id: &str, decision: &str) {
        if decision != "allow" && decision != "deny" {
            self.emitter
                .error(format!(
                    "invalid decision {decision:?}: expected \"allow\" or \"deny\""
                ))
                .await;
            return;
        }
        let claimed = self.emitter.change(|shared| {
            let action = shared
                .deferred
                .get_mut(id)
                .ok_or_else(|| format!("unknown action: {id}"))?;
            if action.state != ActionState::Open {
                return Err(format!("action {id} was already decided"));
            }
            action.state = if decision == "allow" {
                ActionState::Running
            } else {
                ActionState::Denied
            };
            Ok(action.clone())
        });
        let action = match claimed {
            Ok(action) => action,
            Err(message) => {
                self.emitter.error(message).await;
                return;
            }
        };
        if decision == "deny" {
            self.emitter
                .emit(Event::ActionDecided {
                    id: action.id.clone(),
                    decision: "deny".into(),
                    output: None,
                    is_error: false,
                })
                .await;
            let message = format!(
                "[Deferred action {} was denied by the user, so it did not run: {} ({})]",
                action.id, action.name, action.summary
            );
            self.submit(UserInput::text(message)).await;
            return;
        }
        // Allowed: run the original call in the background; the session keeps going.
        let Some(tool) = self.params.tools.get(&action.name) else {
            self.action_ran(action.id, ToolOutput::error("the tool no longer exists"))
                .await;
            return;
        };
        let args = action.arguments.clone();
        let mut ctx = crate::engine::tools::ToolContext::detached(action.cwd.clone());
        ctx.env = self.params.env.clone();
        let done = self.internal_tx.clone();
        let id = action.id.clone();
        tokio::spawn(async move {
            let output = match parse_arguments(&args.to_string()) {
                Ok(args) => tool.run(args, ctx).await,
                Err(message) => ToolOutput::error(message),
            };
            let _ = done.send(Internal::ActionRan { id, output }).await;
        });
    }

    /// A deferred action the user allowed has run: report it and tell the model.
    pub(super) async fn action_ran(&mut self, id: String, output: ToolOutput) {
        let action = self.emitter.change(|shared| {
            let action = shared.deferred.get_mut(&id)?;
            action.state = ActionState::Allowed(output.clone());
            Some(action.clone())
        });
        self.emitter
            .emit(Event::ActionDecided {
                id: id.clone(),
                decision: "allow".into(),
                output: Some(output.output.clone()),
                is_error: output.is_error,
            })
            .await;
        let (name, summary) = action
            .map(|action| (action.name, action.summary))
            .unwrap_or_default();
        let outcome = if output.is_error {
            "failed"
        } else {
            "succeeded"
        };
        let message = format!(
            "[Deferred action {id} was allowed by the user and ran ({outcome}): {name} ({summary})\nResult:\n{}]",
            output.output
        );
        self.submit(UserInput::text(message)).await;
    }
}
