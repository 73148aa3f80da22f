//! The project in a running session: `/trust`, custom commands, hook reports.

use std::sync::Arc;

use super::{Flow, Session};
use crate::engine::ports::project::{HookRun, TrustDecision};
use crate::protocol::{Event, UserInput};

impl Session {
    /// Runs `input` when it names a custom command (`/<name> args`); `None` otherwise.
    /// Built-in commands win a name clash, so they are never looked up here.
    pub(super) async fn custom_command(&mut self, input: &str) -> Option<Flow> {
        let trimmed = input.trim();
        let rest = trimmed.strip_prefix('/')?;
        let (name, arguments) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let command = self
            .params
            .project
            .commands()
            .into_iter()
            .find(|command| command.name == name)?;
        if crate::engine::commands::is_builtin(&format!("/{name}")) {
            return None;
        }
        let text = command.expand(arguments);
        if text.trim().is_empty() {
            self.reply_error(format!("/{name} expands to nothing: its file has no text"))
                .await;
        } else {
            self.submit(UserInput::text(text)).await;
        }
        Some(Flow::Continue)
    }

    /// `/trust yes|repo|no`: records the decision, then the prompt, the command list and
    /// the project's MCP servers follow it at once.
    pub(super) async fn trust(&mut self, decision: TrustDecision) {
        let project = self.params.project.clone();
        let decided = tokio::task::spawn_blocking(move || project.trust(decision)).await;
        let change = match decided {
            Ok(Ok(change)) => change,
            Ok(Err(message)) => return self.reply_error(message).await,
            Err(err) => {
                return self
                    .reply_error(format!("internal error while deciding trust: {err}"))
                    .await;
            }
        };
        self.system_prompt = Arc::from(self.params.project.system_prompt());
        self.agents.set_system(self.system_prompt.clone());
        self.base_tokens = None;
        let commands = self.command_list();
        self.emitter.emit(Event::CommandList { commands }).await;
        for problem in change.problems {
            self.emitter.error(problem).await;
        }
        if change.newly_trusted {
            self.params
                .mcp
                .add_project(self.params.project.mcp_servers());
        }
        self.emitter.status(change.status).await;
    }

    /// Hook output as `info`, failures as `error`, for everyone.
    pub(super) async fn report_hooks(&self, runs: Vec<HookRun>) {
        for run in runs {
            for event in run.report() {
                self.emitter.emit(event).await;
            }
        }
    }
}
