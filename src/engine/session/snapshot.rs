//! What a client sees first: the startup batch when the session starts, and for a
//! client attaching later, the startup batch plus the state it needs to render.

use super::Session;
use bytes::Bytes;

use crate::engine::builtin::plan_steps;
use crate::engine::emitter::SnapshotPart;
use crate::engine::ports::tools::Sandbox;
use crate::engine::shared::Shared;
use crate::protocol::{ApprovalMode, Event, TranscriptItem, VERSION};

impl Session {
    /// The fixed part of the startup batch, up to `mcp_servers`.
    pub(super) async fn emit_startup(&mut self) {
        let (mode, sandbox) = self
            .emitter
            .change(|shared| (shared.mode, shared.sandbox.clone()));
        let [startup, _, command_list, approval_mode, mcp_servers] =
            self.startup_batch(mode, &sandbox);
        self.emitter.emit(startup).await;
        self.emit_model_status().await;
        for event in [command_list, approval_mode, mcp_servers] {
            self.emitter.emit(event).await;
        }
    }

    /// The rest of the startup batch: `trust_prompt` when the project waits for a
    /// decision, what the `session_start` hooks printed, then problems and notices.
    pub(super) async fn emit_startup_notices(&mut self, errors: Vec<String>, notices: Vec<String>) {
        if let Some(prompt) = self.trust_prompt() {
            self.emitter.emit(prompt).await;
        }
        let payload = serde_json::json!({
            "chat": self.params.chat,
            "resumed": self.resumed,
        });
        let runs = self
            .params
            .project
            .run_hooks(
                crate::engine::ports::project::HookEvent::SessionStart,
                payload,
            )
            .await;
        self.report_hooks(runs).await;
        for error in errors {
            self.emitter.error(error).await;
        }
        if let Some(notice) = self.model.notice.clone() {
            self.emitter.info(notice).await;
        }
        for notice in notices {
            self.emitter.info(notice).await;
        }
    }

    /// `startup` (with the sandbox), `model_status`, `command_list`, `approval_mode`,
    /// `mcp_servers`: the specification's five, in its order.
    fn startup_batch(&self, mode: ApprovalMode, sandbox: &Sandbox) -> [Event; 5] {
        let params = &self.params;
        [
            Event::Startup {
                version: VERSION.to_owned(),
                session_id: params.session_id.clone(),
                profile_dir: params.profile_dir.display().to_string(),
                config_path: params.config_path.display().to_string(),
                cwd: params.cwd.display().to_string(),
                model: self.model.full_name(),
                context_window: self.model.info.context_window,
                sandbox: Some(super::gating::sandbox_view(sandbox)),
            },
            Event::ModelStatus(self.model_status()),
            Event::CommandList {
                commands: self.command_list(),
            },
            Event::ApprovalMode { mode },
            Event::McpServers {
                servers: self.mcp_view(),
            },
        ]
    }

    /// Answers a late joiner: the startup batch, the conversation so far (with the
    /// reply streaming right now), the queue, the goal, the step list, the subagents,
    /// open approval requests, whether the session is attended, deferred actions
    /// waiting for a decision, the last context usage, and the current status. Built and queued under the shared
    /// lock, so the live events that follow it continue exactly where it ends.
    pub(super) async fn snapshot(&mut self, token: u64) {
        let pending = self.pending_contents();
        self.emitter
            .snapshot(token, |shared| {
                let events: Vec<SnapshotPart> = self
                    .startup_batch(shared.mode, &shared.sandbox)
                    .into_iter()
                    .map(|event| SnapshotPart::Event(Box::new(event)))
                    .collect();
                let mut events = Parts(events);
                events.extend(self.trust_prompt());
                events.extend(self.load_notices.iter().map(Event::info));
                events
                    .0
                    .push(SnapshotPart::Transcript(transcript_with_streaming(shared)));
                events.push(Event::PendingMessages { messages: pending });
                if let Some(goal) = shared.goal.current() {
                    events.push(Event::Goal {
                        goal: Some(goal.clone()),
                    });
                }
                if let Some(plan) = plan_steps::current(&shared.store) {
                    events.push(Event::Plan { plan });
                }
                if !shared.agents.is_empty() {
                    events.push(shared.agents.runs_event(std::time::Instant::now()));
                }
                for pending in &shared.approvals {
                    events.push(Event::ApprovalRequest {
                        call_id: pending.call_id.clone(),
                        name: pending.name.clone(),
                        summary: pending.summary.clone(),
                        subagent_id: pending.subagent_id.clone(),
                        hunks: pending.hunks.clone(),
                    });
                }
                if !shared.attended {
                    events.push(Event::Attended { attended: false });
                }
                events.extend(
                    shared
                        .deferred
                        .open()
                        .map(|action| action.announced.clone()),
                );
                if let Some((tokens, tokenizer, cost)) = self.last_context_usage {
                    events.push(Event::ContextUsage {
                        tokens,
                        tokenizer: tokenizer.to_owned(),
                        cost,
                    });
                }
                events.push(Event::status(shared.status.clone()));
                events.0
            })
            .await;
    }

    /// `trust_prompt`, while the project waits for a decision.
    pub(super) fn trust_prompt(&self) -> Option<Event> {
        let (cwd, repo_root) = self.params.project.trust_prompt()?;
        Some(Event::TrustPrompt { cwd, repo_root })
    }

    /// The transcript's encoded items (reference counts).
    pub(super) fn transcript_items(&self) -> Vec<Bytes> {
        self.emitter
            .change(|shared| shared.store.transcript_items())
    }
}

/// Snapshot parts, with `push` and `extend` for events.
struct Parts(Vec<SnapshotPart>);

impl Parts {
    fn push(&mut self, event: Event) {
        self.0.push(SnapshotPart::Event(Box::new(event)));
    }

    fn extend(&mut self, events: impl IntoIterator<Item = Event>) {
        self.0.extend(
            events
                .into_iter()
                .map(|event| SnapshotPart::Event(Box::new(event))),
        );
    }
}

/// The active branch's items, and the reply streaming right now as the last one.
fn transcript_with_streaming(shared: &Shared) -> Vec<Bytes> {
    let mut items = shared.store.transcript_items();
    if let Some(text) = &shared.streaming {
        let item = TranscriptItem::Assistant {
            content: text.clone(),
        };
        if let Ok(encoded) = serde_json::to_vec(&item) {
            items.push(Bytes::from(encoded));
        }
    }
    items
}
