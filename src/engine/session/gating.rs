//! Ops that gate tool calls: the approval mode, answers to approval requests, the
//! attended flag, and decisions on deferred actions.
//!
//! Every `approval_request` is closed by exactly one `approval_resolved`: `allow` or
//! `deny` when a client answers, `deferred` when the session turns unattended (a client
//! says so, or its last client leaves), `interrupted` when the turn stops or the
//! session ends (see [`Session::resolve_open_approvals`] and `calls.rs`).

use super::{Internal, Session};
use crate::engine::ports::tools::Sandbox;
use crate::engine::ports::tools::ToolOutput;
use crate::engine::shared::Answer;
use crate::engine::turn::approvals::validate_answer;
use crate::engine::turn::calls::parse_arguments;
use crate::engine::turn::deferred::ActionState;
use crate::protocol::{
    ApprovalMode, Decision, Event, Resolution, SandboxMode, SandboxView, SessionStatus, UserInput,
};

/// What clients are shown of `sandbox` (`startup.sandbox`, the `sandbox` event).
pub(super) fn sandbox_view(sandbox: &Sandbox) -> SandboxView {
    SandboxView {
        mode: sandbox.mode,
        network: sandbox.network,
        writable_roots: sandbox
            .writable()
            .iter()
            .map(|root| root.display().to_string())
            .collect(),
        enforced: sandbox.enforced(),
        limits: (sandbox.mode != SandboxMode::Off)
            .then(|| sandbox.limits.clone())
            .flatten(),
    }
}

impl Session {
    pub(super) async fn apply_mode(&mut self, mode: ApprovalMode) {
        self.emitter
            .emit(Event::status(SessionStatus::ApprovalMode(mode)))
            .await;
        self.emitter
            .emit_with(|shared| {
                shared.mode = mode;
                (Some(Event::ApprovalMode { mode }), ())
            })
            .await;
    }

    /// Changes the sandbox mode: from the next command on, for the session's turns and
    /// its subagents alike; every client is shown the new `sandbox`.
    pub(super) async fn apply_sandbox_mode(&mut self, mode: SandboxMode) {
        self.emitter
            .emit_with(|shared| {
                shared.sandbox.mode = mode;
                (Some(Event::Sandbox(sandbox_view(&shared.sandbox))), ())
            })
            .await;
        if let Some(notice) = self.sandbox_notice() {
            self.emitter.info(notice).await;
        }
    }

    /// The `info` for a sandbox mode the kernel cannot enforce, or not entirely.
    pub(super) fn sandbox_notice(&self) -> Option<String> {
        let sandbox = self.emitter.change(|shared| shared.sandbox.clone());
        if sandbox.mode == SandboxMode::Off {
            return None;
        }
        if !sandbox.available {
            return Some(format!(
                "sandbox `{}` is not enforced: {}. Commands run without a sandbox; approvals alone gate them.",
                sandbox.mode,
                sandbox
                    .limits
                    .as_deref()
                    .unwrap_or("the kernel cannot provide it")
            ));
        }
        sandbox.limits.as_ref().map(|limits| {
            format!(
                "sandbox `{}` is enforced, but not entirely on this kernel ({limits}).",
                sandbox.mode
            )
        })
    }

    /// Answers an approval request. Every validation error leaves it open, and goes to
    /// the client that sent the answer only.
    pub(super) async fn approve(
        &mut self,
        call_id: &str,
        decision: Decision,
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
                let answer = match decision {
                    Decision::Allow => {
                        if always {
                            shared.allowlist.insert(pending.name.clone());
                        }
                        Answer::Allow { hunks }
                    }
                    Decision::Deny => Answer::Deny,
                };
                // The turn may have been interrupted meanwhile; then nobody waits.
                let _ = pending.answer.send(answer);
                let event = Event::ApprovalResolved {
                    call_id: call_id.to_owned(),
                    decision: decision.into(),
                };
                (Some(event), Ok(()))
            })
            .await;
        if let Err(message) = result {
            self.reply_error(message).await;
        }
    }

    /// `set_attended`, or (with `by_leaving`) the session's last client leaving. Going
    /// unattended turns the requests waiting for an answer into deferred actions.
    pub(super) async fn set_attended(&mut self, attended: bool, by_leaving: bool) {
        self.emitter
            .emit_with(|shared| {
                shared.attended = attended;
                shared.unattended_by_leaving = !attended && by_leaving;
                (Some(Event::Attended { attended }), ())
            })
            .await;
        if !attended {
            self.resolve_open_approvals(Resolution::Deferred).await;
            self.close_elicitations(crate::protocol::ElicitationAction::Decline)
                .await;
        }
    }

    /// The daemon counts the clients attached: with none left nobody can answer an
    /// approval, so the session behaves as unattended until one attaches again.
    pub(super) async fn clients_changed(&mut self, count: usize) {
        let (attended, by_leaving) = self
            .emitter
            .change(|shared| (shared.attended, shared.unattended_by_leaving));
        if count == 0 && attended {
            self.set_attended(false, true).await;
        } else if count > 0 && !attended && by_leaving {
            self.set_attended(true, false).await;
        }
    }

    /// Closes every open approval request with `resolution`: each waiting call is told
    /// (deferred ones are recorded as deferred actions, interrupted ones are denied), and
    /// every client gets `approval_resolved`. One request per step, so each is either
    /// open in a snapshot or resolved after it.
    pub(super) async fn resolve_open_approvals(&self, resolution: Resolution) {
        loop {
            let resolved = self
                .emitter
                .emit_with(|shared| {
                    if shared.approvals.is_empty() {
                        return (None, false);
                    }
                    let pending = shared.approvals.remove(0);
                    let answer = match resolution {
                        Resolution::Deferred => Answer::Defer,
                        _ => Answer::Deny,
                    };
                    let _ = pending.answer.send(answer);
                    let event = Event::ApprovalResolved {
                        call_id: pending.call_id,
                        decision: resolution,
                    };
                    (Some(event), true)
                })
                .await;
            if !resolved {
                return;
            }
        }
    }

    pub(super) async fn decide_action(&mut self, id: &str, decision: Decision) {
        let claimed = self.emitter.change(|shared| {
            let action = shared
                .deferred
                .get_mut(id)
                .ok_or_else(|| format!("unknown action: {id}"))?;
            if action.state != ActionState::Open {
                return Err(format!("action {id} was already decided"));
            }
            action.state = match decision {
                Decision::Allow => ActionState::Running,
                Decision::Deny => ActionState::Denied,
            };
            Ok(action.clone())
        });
        let action = match claimed {
            Ok(action) => action,
            Err(message) => {
                self.reply_error(message).await;
                return;
            }
        };
        if decision == Decision::Deny {
            self.emitter
                .emit(Event::ActionDecided {
                    id: action.id.clone(),
                    decision: Decision::Deny,
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
        self.background += 1;
        let Some(tool) = self.params.tools.get(&action.name) else {
            self.action_ran(action.id, ToolOutput::error("the tool no longer exists"))
                .await;
            return;
        };
        let args = action.arguments.clone();
        let mut ctx = crate::engine::ports::tools::ToolContext::detached(action.cwd.clone());
        ctx.env = self.params.env.clone();
        ctx.sandbox = std::sync::Arc::new(self.emitter.change(|shared| shared.sandbox.clone()));
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
        self.background = self.background.saturating_sub(1);
        let action = self.emitter.change(|shared| {
            let action = shared.deferred.get_mut(&id)?;
            action.state = ActionState::Allowed(output.clone());
            Some(action.clone())
        });
        self.emitter
            .emit(Event::ActionDecided {
                id: id.clone(),
                decision: Decision::Allow,
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
