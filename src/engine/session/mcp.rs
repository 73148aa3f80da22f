//! The session's side of its MCP servers: the four `mcp_*` ops, `/mcp`, prompt
//! commands, and telling clients when a server's state, tools or prompts change.
//!
//! Clients are told what the session last *announced* ([`Announced`]), not what the
//! manager holds right now: snapshots for late joiners are built from the same record,
//! so a joiner sees each change exactly once (in its snapshot, or as a live event after
//! it), as for every other piece of state.

use tokio::sync::watch;

use super::{Flow, Internal, Session};
use crate::engine::commands;
use crate::engine::ports::mcp::{McpServers, PromptCommand, parse_prompt_arguments};
use crate::protocol::{CommandInfo, Event, McpServerConfig, McpServerView, UserInput};

/// The `command_list` marker of prompt commands.
const PROMPT_MARKER: &str = "mcp";

pub(super) struct Announced {
    view: Vec<McpServerView>,
    prompts: Vec<PromptCommand>,
    pub(super) changes: watch::Receiver<()>,
}

impl Announced {
    pub(super) fn new(servers: &dyn McpServers) -> Self {
        let mut changes = servers.changes();
        changes.borrow_and_update();
        Self {
            view: servers.view(),
            prompts: servers.prompts(),
            changes,
        }
    }
}

/// The next change of the servers; never, once the manager is gone.
pub(super) async fn changed(changes: &mut watch::Receiver<()>) {
    if changes.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Session {
    /// The announced view, for the startup batch and snapshots.
    pub(super) fn mcp_view(&self) -> Vec<McpServerView> {
        self.mcp.view.clone()
    }

    /// The built-in commands, the custom ones, then the announced prompt commands.
    pub(super) fn command_list(&self) -> Vec<CommandInfo> {
        let mut list = commands::command_list();
        list.extend(
            self.params
                .project
                .commands()
                .iter()
                .filter(|command| !commands::is_builtin(&format!("/{}", command.name)))
                .map(|command| command.info()),
        );
        list.extend(self.mcp.prompts.iter().map(|prompt| CommandInfo {
            command: prompt.command.clone(),
            marker: Some(PROMPT_MARKER.to_owned()),
            args: prompt.usage(),
            description: prompt.description.clone(),
        }));
        list
    }

    /// Announces what changed since the last announcement: `mcp_servers` when the view
    /// differs, `command_list` when the prompt commands do.
    pub(super) async fn mcp_changed(&mut self) {
        self.mcp.changes.borrow_and_update();
        let view = self.params.mcp.view();
        if view != self.mcp.view {
            self.announce_view(view).await;
        }
        let prompts = self.params.mcp.prompts();
        if prompts != self.mcp.prompts {
            self.mcp.prompts = prompts;
            let commands = self.command_list();
            self.emitter.emit(Event::CommandList { commands }).await;
        }
    }

    async fn announce_view(&mut self, view: Vec<McpServerView>) {
        // A sign-in that failed is an error for everyone, besides the state that says so.
        for failure in self.params.mcp.take_sign_in_failures() {
            let message = format!(
                "MCP server {}: the sign-in failed: {}",
                failure.server, failure.why
            );
            self.emitter.emit(Event::error(message)).await;
        }
        self.mcp.view = view.clone();
        self.emitter.emit(Event::McpServers { servers: view }).await;
    }

    /// `mcp_list` and `/mcp`: the current view, for the asker.
    pub(super) async fn mcp_list(&mut self) {
        // Whatever is newer than the announcement goes to everyone first, so the
        // asker's answer never shows a state the others were not told about.
        self.mcp_changed().await;
        self.reply(Event::McpServers {
            servers: self.mcp_view(),
        })
        .await;
    }

    pub(super) async fn mcp_set(&mut self, name: &str, server: McpServerConfig, persist: bool) {
        let result = if persist {
            self.params.mcp.set(name, server).await
        } else {
            self.params.mcp.set_for_session(name, server).await
        };
        self.mcp_answer(result).await;
    }

    pub(super) async fn mcp_remove(&mut self, name: &str) {
        let result = self.params.mcp.remove(name).await;
        self.mcp_answer(result).await;
    }

    pub(super) async fn mcp_toggle(&mut self, name: &str, enabled: bool) {
        let result = self.params.mcp.toggle(name, enabled).await;
        self.mcp_answer(result).await;
    }

    /// `mcp_login`: the address to sign in at, for the asker (one browser opens, not
    /// one per client); the server's state tells everyone how it goes.
    pub(super) async fn mcp_login(&mut self, name: &str) {
        match self.params.mcp.login(name).await {
            Ok(url) => {
                self.mcp_changed().await;
                self.reply(Event::McpLogin {
                    server: name.to_owned(),
                    url,
                })
                .await;
            }
            Err(message) => self.reply_error(message).await,
        }
    }

    pub(super) async fn mcp_logout(&mut self, name: &str) {
        let result = self.params.mcp.logout(name).await;
        self.mcp_answer(result).await;
    }

    pub(super) async fn mcp_retry(&mut self, name: &str) {
        let result = self.params.mcp.retry(name);
        self.mcp_answer(result).await;
    }

    /// A management op changed the servers: everyone gets the new view (even when it
    /// looks the same, it is the op's answer). A refused op is an error for the asker.
    async fn mcp_answer(&mut self, result: Result<(), String>) {
        match result {
            Ok(()) => {
                self.mcp.changes.borrow_and_update();
                let view = self.params.mcp.view();
                self.announce_view(view).await;
                let prompts = self.params.mcp.prompts();
                if prompts != self.mcp.prompts {
                    self.mcp.prompts = prompts;
                    let commands = self.command_list();
                    self.emitter.emit(Event::CommandList { commands }).await;
                }
            }
            Err(message) => self.reply_error(message).await,
        }
    }

    /// Runs `input` if it names a prompt command (`/<server>:<prompt> args...`); `None`
    /// when it does not, for the built-in commands to have it.
    pub(super) async fn prompt_command(&mut self, input: &str) -> Option<Flow> {
        let input = input.trim();
        let (name, rest) = input.split_once(char::is_whitespace).unwrap_or((input, ""));
        if !name.contains(':') {
            return None;
        }
        let Some(prompt) = self.mcp.prompts.iter().find(|p| p.command == name).cloned() else {
            let server = name.trim_start_matches('/').split(':').next().unwrap_or("");
            let known = self.mcp.view.iter().any(|view| view.name == server);
            let message = if known {
                format!(
                    "unknown command: {name} (server {server} offers no such prompt, or is not connected; try /mcp)"
                )
            } else {
                format!("unknown command: {name} (try /help)")
            };
            self.reply_error(message).await;
            return Some(Flow::Continue);
        };
        let arguments = match parse_prompt_arguments(&prompt, rest) {
            Ok(arguments) => arguments,
            Err(message) => {
                self.reply_error(message).await;
                return Some(Flow::Continue);
            }
        };
        // The server answers in its own time; the session keeps taking ops meanwhile,
        // and the prompt's message is submitted when it arrives.
        let expand = self
            .params
            .mcp
            .get_prompt(&prompt.server, &prompt.prompt, arguments);
        let internal = self.internal_tx.clone();
        let client = self.origin;
        tokio::spawn(async move {
            let result = expand.await;
            let _ = internal
                .send(Internal::PromptReady { client, result })
                .await;
        });
        Some(Flow::Continue)
    }

    /// The expanded prompt becomes the user's message, as if typed.
    pub(super) async fn prompt_ready(&mut self, result: Result<String, String>) {
        match result {
            Ok(text) => self.submit(UserInput::text(text)).await,
            Err(message) => self.reply_error(message).await,
        }
    }
}
