//! Running the tool calls of one model reply: assessment, the approval policy, asking
//! (or deferring when nobody watches), executing with streamed progress, and plans.
//!
//! A call that must not run never runs: refused (plan mode), denied, or deferred calls
//! end with a `tool_output` whose text the model reads as the result, and the turn goes
//! on. Every call of the reply gets exactly one result in the history, also when the
//! turn is interrupted halfway.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::TurnContext;
use super::approvals::{Gate, gate};
use super::deferred::{self, ActionState, DeferredAction};
use super::plan::{PROPOSE_PLAN, new_plan_id};
use crate::engine::conversation::store::{ApprovalMark, EntryBody, FileBefore, Prepared};
use crate::engine::ports::model::{Message, ToolCall};
use crate::engine::ports::tools::{Assessment, Tool, ToolContext, ToolOutput};
use crate::engine::ports::tools::{Confinement, Effect};
use crate::engine::shared::{Answer, PendingApproval};
use crate::protocol::{CallCard, Event, PlanStatus, Resolution};

/// What the model reads for a call the user's interrupt stopped.
const INTERRUPTED: &str = "interrupted by the user";

/// Files larger than this are not recorded for `/checkout` (nor edited: see the tools).
const MAX_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

/// How often a running tool's output is shown (`tool_update`).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

pub enum CallsOutcome {
    Continue,
    /// `propose_plan` delivered a plan: the turn ends after this reply's calls.
    PlanProposed,
    Interrupted,
}

impl TurnContext {
    /// Runs the calls of one reply in order.
    pub(super) async fn run_calls(
        &self,
        calls: &[ToolCall],
        plan_ids: &HashMap<String, String>,
    ) -> CallsOutcome {
        let mut plan_proposed = false;
        // Images tools returned, shown to the model after all of this reply's results.
        let mut images = Vec::new();
        for (done, call) in calls.iter().enumerate() {
            if call.name == PROPOSE_PLAN && self.track.is_main() {
                let id = plan_ids.get(&call.id).cloned().unwrap_or_else(new_plan_id);
                plan_proposed |= self.propose_plan(call, id).await;
                continue;
            }
            let card = self.describe_call(call);
            self.emit(Event::ToolStart {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: parse_arguments(&call.arguments).ok(),
                card: card.clone(),
            })
            .await;
            let outcome = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                outcome = self.call(call) => Some(outcome),
            };
            let Some(mut outcome) = outcome else {
                self.close_interrupted(call, &card).await;
                let rest: Vec<Prepared> = calls[done + 1..]
                    .iter()
                    .map(|call| {
                        tool_result(call, INTERRUPTED.into(), true, &self.describe_call(call))
                    })
                    .collect();
                self.emitter.change(|shared| {
                    for entry in rest {
                        self.track.store(shared).append(entry);
                    }
                });
                return CallsOutcome::Interrupted;
            };
            if !outcome.images.is_empty() {
                images.push((call.clone(), std::mem::take(&mut outcome.images)));
            }
            let entry = tool_result(call, outcome.output.clone(), outcome.is_error, &card);
            self.emit_with(|shared| {
                self.track.store(shared).append(entry);
                let event = Event::ToolOutput {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    output: outcome.output,
                    is_error: outcome.is_error,
                };
                (Some(event), ())
            })
            .await;
        }
        if !images.is_empty() {
            self.emitter
                .change(|shared| self.track.store(shared).append(tool_images(images)));
        }
        if plan_proposed {
            CallsOutcome::PlanProposed
        } else {
            CallsOutcome::Continue
        }
    }

    /// The interrupt stopped `call` after its `tool_start`: its approval request (if it
    /// was waiting for one) and its tool card are closed, in that order, and the model
    /// reads that it was interrupted.
    async fn close_interrupted(&self, call: &ToolCall, card: &CallCard) {
        self.emit_with(|shared| {
            let resolved = shared
                .take_approval(&call.id)
                .map(|pending| Event::ApprovalResolved {
                    call_id: pending.call_id,
                    decision: Resolution::Interrupted,
                });
            (resolved, ())
        })
        .await;
        let entry = tool_result(call, INTERRUPTED.into(), true, card);
        self.emit_with(|shared| {
            self.track.store(shared).append(entry);
            let event = Event::ToolOutput {
                call_id: call.id.clone(),
                name: call.name.clone(),
                output: INTERRUPTED.into(),
                is_error: true,
            };
            (Some(event), ())
        })
        .await;
    }

    /// One call, from arguments to result, through the approval policy.
    async fn call(&self, call: &ToolCall) -> ToolOutput {
        if let Some(output) = self.builtin_call(call).await {
            return output;
        }
        let Some(tool) = self.tools.get(&call.name) else {
            return ToolOutput::error(format!("unknown tool: {}", call.name));
        };
        let args = match parse_arguments(&call.arguments) {
            Ok(args) => args,
            Err(message) => return ToolOutput::error(format!("{}: {message}", call.name)),
        };
        let mut ctx = self.tool_context();
        ctx.delegate = self.delegation.for_call(&call.id);
        let assessment = match tool.assess(&args, &ctx).await {
            Ok(assessment) => assessment,
            Err(output) => return output,
        };
        let edits = match &assessment.effect {
            Effect::Edit { paths } => paths.clone(),
            _ => Vec::new(),
        };
        match gate(
            &assessment.effect,
            self.current_mode(),
            &call.name,
            &self.cwd,
        ) {
            Gate::Run => {
                self.checkpoint(&edits).await;
                self.execute(&tool, call, args, ctx).await
            }
            Gate::Refuse(message) => ToolOutput::error(message),
            Gate::Ask => match self.ask(call, &args, assessment).await {
                Verdict::Run { hunks } => {
                    ctx.hunks = hunks;
                    self.checkpoint(&edits).await;
                    self.execute(&tool, call, args, ctx).await
                }
                Verdict::Denied => ToolOutput::error(format!(
                    "denied: the user did not allow this {} call, so it did not run. Do not \
                     retry it unchanged; ask the user or take another approach.",
                    call.name
                )),
                Verdict::Deferred(id) => ToolOutput::ok(format!(
                    "submitted for confirmation: nobody is watching this session, so the \
                     call was recorded as deferred action {id} for the user to decide later; \
                     you will be told the outcome. It has not run. Continue with work that \
                     does not depend on it."
                )),
            },
        }
    }

    /// Records, before a call changes them, how the files it edits are now (the first
    /// time this turn touches each), so `/checkout` can put them back. The record is in
    /// the session file before the change is made.
    async fn checkpoint(&self, paths: &[PathBuf]) {
        let Some(turn) = self.checkpoint_turn() else {
            return;
        };
        let fresh: Vec<PathBuf> = {
            let mut seen = self
                .checkpointed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            paths
                .iter()
                .filter(|path| seen.insert((*path).clone()))
                .cloned()
                .collect()
        };
        if fresh.is_empty() {
            return;
        }
        let files = tokio::task::spawn_blocking(move || {
            fresh
                .into_iter()
                .filter_map(|path| match std::fs::metadata(&path) {
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => Some(FileBefore {
                        path,
                        content: None,
                    }),
                    Ok(meta) if meta.is_file() && meta.len() <= MAX_CHECKPOINT_BYTES => {
                        let bytes = std::fs::read(&path).ok()?;
                        Some(FileBefore {
                            path,
                            content: Some(Arc::from(bytes)),
                        })
                    }
                    _ => {
                        tracing::warn!(path = %path.display(), "not checkpointed: not a regular file of at most 16 MiB");
                        None
                    }
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        if files.is_empty() {
            return;
        }
        let entry = Prepared::counted(EntryBody::Checkpoint { turn, files }, 0);
        self.emitter.change(|shared| shared.store.append(entry));
    }

    fn tool_context(&self) -> ToolContext {
        ToolContext {
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            cancel: self.cancel.child_token(),
            progress: Default::default(),
            hunks: None,
            delegate: None,
            sandbox: Arc::new(self.emitter.change(|shared| shared.sandbox.clone())),
        }
    }

    /// Asks for approval: waits for the answer, or records a deferred action when the
    /// session is (or becomes) unattended.
    async fn ask(
        &self,
        call: &ToolCall,
        args: &serde_json::Value,
        assessment: Assessment,
    ) -> Verdict {
        let (answer, answered) = oneshot::channel();
        let request = Event::ApprovalRequest {
            call_id: call.id.clone(),
            name: call.name.clone(),
            summary: assessment.summary.clone(),
            subagent_id: self.track.subagent_id(),
            hunks: assessment.hunks.clone(),
        };
        // The allowlist never covers leaving the sandbox: a person decides each time.
        let escalation = matches!(
            assessment.effect,
            Effect::Exec {
                confinement: Confinement::Unsandboxed,
                ..
            }
        );
        let asked = self
            .emit_with(|shared| {
                if !escalation && shared.allowlist.contains(&call.name) {
                    return (None, Some(Answer::Allow { hunks: None }));
                }
                if !shared.attended {
                    return (None, Some(Answer::Defer));
                }
                shared.approvals.push(PendingApproval {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    summary: assessment.summary.clone(),
                    hunks: assessment.hunks.clone(),
                    subagent_id: self.track.subagent_id(),
                    answer,
                });
                self.track
                    .store(shared)
                    .append(approval_mark(call, ApprovalMark::Asked));
                (Some(request), None)
            })
            .await;
        // A dropped answer means the request was cleared (interrupt): deny.
        let decision = match asked {
            Some(decision) => decision,
            None => {
                let decision = answered.await.unwrap_or(Answer::Deny);
                self.record_answer(call, &decision).await;
                decision
            }
        };
        match decision {
            Answer::Allow { hunks } => Verdict::Run { hunks },
            Answer::Deny => Verdict::Denied,
            Answer::Defer => self.defer(call, args, &assessment).await,
        }
    }

    /// Records the user's answer to `call` after its `Asked` mark. An allowed call runs
    /// only once its mark is written: a process killed while it runs must not leave a
    /// file that says it still waits for approval (it would be asked again, and run
    /// twice).
    async fn record_answer(&self, call: &ToolCall, decision: &Answer) {
        let mark = match decision {
            Answer::Allow { .. } => ApprovalMark::Allowed,
            Answer::Deny => ApprovalMark::Denied,
            Answer::Defer => ApprovalMark::Deferred,
        };
        let written = self.emitter.change(|shared| {
            let store = self.track.store(shared);
            store.append(approval_mark(call, mark));
            store.journal().written()
        });
        if mark == ApprovalMark::Allowed {
            written.await;
        }
    }

    /// Records a deferred action, or reuses the open one or the decision made for the
    /// same call. Allowed calls run; otherwise the model learns the call is pending.
    async fn defer(
        &self,
        call: &ToolCall,
        args: &serde_json::Value,
        assessment: &Assessment,
    ) -> Verdict {
        let digest = deferred::digest(&call.name, args, &self.cwd);
        let created_at = deferred::now_ms();
        let known = self
            .emit_with(|shared| {
                if let Some(action) = shared.deferred.same_call(&call.name, args, &self.cwd) {
                    return (None, (action.id.clone(), action.state.clone()));
                }
                let id = deferred::new_action_id(created_at);
                let event = Event::ActionDeferred {
                    id: id.clone(),
                    session_id: self.session_id.clone(),
                    cwd: self.cwd.display().to_string(),
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: args.clone(),
                    summary: assessment.summary.clone(),
                    subagent_id: self.track.subagent_id(),
                    digest: digest.clone(),
                    created_at,
                };
                shared.deferred.insert(DeferredAction {
                    id: id.clone(),
                    name: call.name.clone(),
                    arguments: args.clone(),
                    summary: assessment.summary.clone(),
                    cwd: self.cwd.clone(),
                    state: ActionState::Open,
                    announced: event.clone(),
                });
                (Some(event), (id, ActionState::Open))
            })
            .await;
        match known {
            (_, ActionState::Allowed(_)) => Verdict::Run { hunks: None },
            (_, ActionState::Denied) => Verdict::Denied,
            (id, ActionState::Open | ActionState::Running) => Verdict::Deferred(id),
        }
    }

    /// Runs an allowed call, turning its progress into `tool_update` events.
    async fn execute(
        &self,
        tool: &Arc<dyn Tool>,
        call: &ToolCall,
        args: serde_json::Value,
        ctx: ToolContext,
    ) -> ToolOutput {
        let progress = ctx.progress.clone();
        let run = tool.run(args, ctx);
        tokio::pin!(run);
        let mut ticks = tokio::time::interval(PROGRESS_INTERVAL);
        ticks.tick().await;
        loop {
            tokio::select! {
                output = &mut run => return output,
                _ = ticks.tick() => {
                    if let Some(output) = progress.take() {
                        self.emit(Event::ToolUpdate {
                            call_id: call.id.clone(),
                            name: call.name.clone(),
                            output,
                        })
                        .await;
                    }
                }
            }
        }
    }

    /// Shows a delivered plan and records it. False when its arguments are unusable
    /// (the model is told why and the turn continues).
    async fn propose_plan(&self, call: &ToolCall, id: String) -> bool {
        let args = parse_arguments(&call.arguments).unwrap_or_default();
        let field = |key: &str| {
            args.get(key)
                .and_then(|value| value.as_str())
                .map(str::to_owned)
                .filter(|text| !text.trim().is_empty())
        };
        let (Some(title), Some(markdown)) = (field("title"), field("markdown")) else {
            let entry = tool_result(
                call,
                "propose_plan needs a non-empty `title` and `markdown`; call it again with the complete plan.".into(),
                true,
                &CallCard::default(),
            );
            self.emitter.change(|shared| shared.store.append(entry));
            return false;
        };
        let result = tool_result(
            call,
            "The plan was delivered to the user for review. Stop here and wait for their decision."
                .into(),
            false,
            &CallCard::default(),
        );
        let plan = Prepared::counted(
            EntryBody::Plan {
                id: id.clone(),
                title: title.clone(),
                markdown: markdown.clone(),
                status: PlanStatus::Pending,
            },
            0,
        );
        self.emitter
            .emit_with(|shared| {
                shared.store.append(result);
                shared.store.append(plan);
                let event = Event::ProposedPlan {
                    id,
                    title,
                    markdown,
                    status: PlanStatus::Pending,
                };
                (Some(event), ())
            })
            .await;
        true
    }
}

/// The images tools returned in one reply, as the one user message the model reads
/// them in (Chat Completions takes images only in user messages).
fn tool_images(images: Vec<(ToolCall, Vec<crate::engine::ports::model::ImageData>)>) -> Prepared {
    let names: Vec<String> = images
        .iter()
        .map(|(call, images)| format!("{} ({}): {}", call.name, call.id, images.len()))
        .collect();
    Prepared::new(EntryBody::ToolImages(Message::User {
        text: format!(
            "[Images returned by tool calls, in order: {}]",
            names.join(", ")
        ),
        images: images.into_iter().flat_map(|(_, images)| images).collect(),
    }))
}

/// The mark of where `call` is in being approved.
fn approval_mark(call: &ToolCall, mark: ApprovalMark) -> Prepared {
    Prepared::counted(
        EntryBody::Approval {
            call_id: call.id.clone(),
            mark,
        },
        0,
    )
}

/// The store entry of one call's result.
pub(in crate::engine) fn tool_result(
    call: &ToolCall,
    output: String,
    is_error: bool,
    card: &CallCard,
) -> Prepared {
    // What a history shows of the call; a status line's words are for the moment.
    let card = CallCard {
        activity: None,
        ..card.clone()
    };
    Prepared::new(EntryBody::ToolResult(Message::Tool {
        call_id: call.id.clone(),
        name: call.name.clone(),
        output,
        is_error,
        card,
    }))
}

/// What became of a call that needed approval.
enum Verdict {
    Run {
        hunks: Option<Vec<String>>,
    },
    Denied,
    /// Recorded (or already recorded) as this deferred action; not run.
    Deferred(String),
}

pub fn parse_arguments(raw: &str) -> Result<serde_json::Value, String> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        Ok(_) => Err("arguments must be a JSON object".to_owned()),
        Err(err) => Err(format!("arguments are not valid JSON ({err})")),
    }
}
