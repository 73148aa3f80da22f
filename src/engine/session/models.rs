//! Slash commands, and choosing the model and its reasoning effort.

use super::{Flow, Session};
use crate::engine::commands::{self, Command};
use crate::engine::conversation::tokens::context_limit;
pub(super) use crate::engine::ports::model::pick_effort;
use crate::protocol::{Event, ModelStatus, ModelViewEntry};

impl Session {
    pub(super) async fn command(&mut self, input: &str) -> Flow {
        if let Some(flow) = self.prompt_command(input).await {
            return flow;
        }
        if let Some(flow) = self.custom_command(input).await {
            return flow;
        }
        let command = match commands::parse(input) {
            Ok(command) => command,
            Err(message) => {
                self.reply_error(message).await;
                return Flow::Continue;
            }
        };
        match command {
            Command::Help => self.reply(Event::info(commands::help_text())).await,
            Command::Quit => return Flow::Stop,
            Command::ModelView => self.emit_model_view().await,
            Command::SwitchModel { name, effort } => self.switch_model(name, effort).await,
            Command::Transcript => {
                let items = self.transcript_items();
                self.emitter.reply_transcript(self.origin, &items).await;
            }
            Command::Approve {
                call_id,
                decision,
                always,
                hunks,
            } => self.approve(call_id, decision, always, hunks).await,
            Command::Plan(args) => self.plan_command(args).await,
            Command::Goal(args) => self.goal_command(args).await,
            Command::SandboxView => {
                let event = self
                    .emitter
                    .change(|shared| Event::Sandbox(super::gating::sandbox_view(&shared.sandbox)));
                self.reply(event).await;
            }
            Command::SetSandbox(mode) => self.apply_sandbox_mode(mode).await,
            Command::ResumeView => self.resume_view().await,
            Command::Resume(id) => self.resume(id).await,
            Command::TreeView => self.tree_view().await,
            Command::MoveTo(id) => self.move_to(id).await,
            Command::CheckpointView => self.checkpoint_view().await,
            Command::Checkout(id) => self.checkout(id).await,
            Command::Compact => self.compact().await,
            Command::McpView => self.mcp_list().await,
            Command::McpRetry(name) => self.mcp_retry(name).await,
            Command::McpLogin(name) => self.mcp_login(name).await,
            Command::McpLogout(name) => self.mcp_logout(name).await,
            Command::Trust(decision) => self.trust(decision).await,
            Command::Surface(_) => self.reply_error(NO_TERMINAL).await,
        }
        Flow::Continue
    }

    pub(super) async fn switch_model(&mut self, name: &str, effort: Option<&str>) {
        let model = match self
            .params
            .catalog
            .resolve(name, Some(&self.model.provider))
        {
            Ok(model) => model,
            Err(message) => {
                self.reply_error(message).await;
                return;
            }
        };
        if let Some(effort) = effort
            && !model.info.reasoning_efforts.iter().any(|e| e == effort)
        {
            let message = if model.info.reasoning_efforts.is_empty() {
                format!("{} takes no reasoning effort", model.full_name())
            } else {
                format!(
                    "unknown reasoning effort {effort:?} for {}: expected one of {}",
                    model.full_name(),
                    model.info.reasoning_efforts.join(", ")
                )
            };
            self.reply_error(message).await;
            return;
        }
        self.effort = pick_effort(&model, effort, self.effort.as_deref());
        model.client.warm_up();
        self.model = model;
        self.emit_model_status().await;
    }

    pub(super) async fn emit_model_view(&mut self) {
        let active = self.model.full_name();
        let mut models: Vec<ModelViewEntry> = self
            .params
            .catalog
            .list()
            .into_iter()
            .map(|(name, info)| ModelViewEntry {
                active: name == active,
                model: name,
                context_window: info.context_window,
                max_output_tokens: info.max_output_tokens,
                reasoning_efforts: info.reasoning_efforts,
            })
            .collect();
        if !models.iter().any(|entry| entry.active) {
            models.insert(
                0,
                ModelViewEntry {
                    model: active,
                    active: true,
                    context_window: self.model.info.context_window,
                    max_output_tokens: self.model.info.max_output_tokens,
                    reasoning_efforts: self.model.info.reasoning_efforts.clone(),
                },
            );
        }
        self.reply(Event::ModelView {
            models,
            active_effort: self.effort.clone(),
        })
        .await;
    }

    pub(super) fn model_status(&self) -> ModelStatus {
        let info = &self.model.info;
        ModelStatus {
            provider: self.model.provider.clone(),
            model: self.model.model.clone(),
            reasoning_effort: self.effort.clone(),
            context_window: info.context_window,
            context_limit: context_limit(info.context_window),
            max_output_tokens: info.max_output_tokens,
            reasoning_efforts: info.reasoning_efforts.clone(),
            state: self.model.state,
        }
    }

    /// Emits `model_status` unless it would repeat the last one verbatim.
    pub(super) async fn emit_model_status(&mut self) {
        let status = self.model_status();
        if self.last_model_status.as_ref() == Some(&status) {
            return;
        }
        self.last_model_status = Some(status.clone());
        self.emitter.emit(Event::ModelStatus(status)).await;
    }
}

/// Why `surface` and `/terminal` do nothing on jucode's own sessions.
pub(super) const NO_TERMINAL: &str = "jucode's own engine has no TUI to move the conversation to: surface and /terminal are for daemon sessions of Claude Code, Codex and ACP engines with a `tui`";
