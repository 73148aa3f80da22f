//! What a session knows of its project and its user, read from the file system: the
//! instructions and skills that go into the system prompt, custom commands, trust
//! decisions and hooks. [`ProjectContext`] is the host's implementation of the engine's
//! [`Project`] trait.
//!
//! Everything is found when the session starts and again when the user decides about
//! trust, never on a turn's path: the prompt and the command list are kept ready, so
//! the engine's questions cost a lock and a clone.
//!
//! Trust, in one rule: the project's resources (instruction files from the repository
//! root down to the cwd, `.jucode/skills`, `.jucode/commands`, `.jucode/config.toml`
//! with its hooks and MCP servers) are used only once the user trusted the directory or
//! its repository; the user's own resources (in the profile) always are. A chat session
//! has no project.

pub mod hooks;
pub mod resources;
pub mod trust;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;

use crate::config::hooks::{Hook, HooksConfig};
use crate::config::{LoadedConfig, McpServerConfig};
use crate::engine::ports::project::{
    CustomCommand, HookEvent, HookRun, Project, TrustChange, TrustDecision,
};
use crate::protocol::SessionStatus;
use resources::{Found, Instructions, Skill};
use trust::{Trust, TrustStore};

/// Where a session runs and who it runs for.
pub struct ProjectSetup {
    pub profile_dir: PathBuf,
    pub cwd: PathBuf,
    /// A chat session: no project, only the user's own resources.
    pub chat: bool,
    /// The mode's prompt (coding or chat), to which instructions and skills are added.
    pub base_prompt: String,
    pub env: Arc<HashMap<String, String>>,
    pub session_id: String,
    /// `[hooks]` of the user's config.
    pub user_hooks: HooksConfig,
}

pub struct ProjectContext {
    setup: ProjectSetup,
    repo_root: PathBuf,
    trust: TrustStore,
    state: Mutex<State>,
}

/// What the resources amount to as things stand.
#[derive(Default)]
struct State {
    decision: Option<Trust>,
    /// The project's resources exist (whether or not they are used).
    has_local: bool,
    prompt: String,
    commands: Vec<CustomCommand>,
    hooks: HooksConfig,
    project_hooks: Vec<HooksConfig>,
    /// The trusted project's MCP servers (`[mcp_servers]` of its configs).
    mcp_servers: BTreeMap<String, McpServerConfig>,
    /// Problems found in the project's configs.
    problems: Vec<String>,
}

impl ProjectContext {
    /// Reads the profile and the project (blocking).
    pub fn load(setup: ProjectSetup) -> Self {
        let repo_root = resources::repo_root(&setup.cwd);
        let trust = TrustStore::new(&setup.profile_dir);
        let context = Self {
            repo_root,
            trust,
            setup,
            state: Mutex::new(State::default()),
        };
        context.refresh();
        context
    }

    pub fn repo_root(&self) -> &Path {
        &self.repo_root
    }

    /// Problems in the trusted project's configs, for the startup batch.
    pub fn problems(&self) -> Vec<String> {
        self.lock().problems.clone()
    }

    /// The MCP servers the trusted project defines (none until it is trusted).
    pub fn mcp_servers(&self) -> BTreeMap<String, McpServerConfig> {
        self.lock().mcp_servers.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Finds everything again and rebuilds the prompt and the command list.
    fn refresh(&self) {
        let setup = &self.setup;
        let user = resources::user(&setup.profile_dir);
        let found = if setup.chat {
            Found::default()
        } else {
            resources::project(&self.repo_root, &setup.cwd)
        };
        let decision = if found.is_empty() {
            None
        } else {
            self.trust.lookup(&setup.cwd, &self.repo_root)
        };
        let trusted = decision == Some(Trust::Trusted);
        let mut instructions = user.instructions.clone();
        let mut skills = user.skills.clone();
        let mut commands = user.commands.clone();
        let mut project_hooks = Vec::new();
        let mut mcp_servers = BTreeMap::new();
        let mut problems = Vec::new();
        if trusted {
            instructions.extend(found.instructions.iter().cloned());
            resources::merge_skills(&mut skills, found.skills.clone());
            resources::merge_commands(&mut commands, found.commands.clone());
            for path in &found.configs {
                let loaded = LoadedConfig::load(path);
                problems.extend(loaded.problems);
                project_hooks.push(loaded.config.hooks);
                mcp_servers.extend(loaded.config.mcp_servers);
            }
        }
        let prompt = compose_prompt(&setup.base_prompt, &instructions, &skills);
        *self.lock() = State {
            decision,
            has_local: !found.is_empty(),
            prompt,
            commands,
            hooks: setup.user_hooks.clone(),
            project_hooks,
            mcp_servers,
            problems,
        };
    }

    fn hooks_of(&self, event: HookEvent) -> Vec<Hook> {
        let state = self.lock();
        std::iter::once(&state.hooks)
            .chain(state.project_hooks.iter())
            .flat_map(|hooks| match event {
                HookEvent::SessionStart => hooks.session_start(),
                HookEvent::UserPromptSubmit => hooks.user_prompt_submit(),
            })
            .collect()
    }
}

impl Project for ProjectContext {
    fn system_prompt(&self) -> String {
        self.lock().prompt.clone()
    }

    fn commands(&self) -> Vec<CustomCommand> {
        self.lock().commands.clone()
    }

    fn problems(&self) -> Vec<String> {
        self.lock().problems.clone()
    }

    fn mcp_servers(&self) -> BTreeMap<String, McpServerConfig> {
        self.lock().mcp_servers.clone()
    }

    fn trust_prompt(&self) -> Option<(String, String)> {
        let state = self.lock();
        (state.has_local && state.decision.is_none()).then(|| {
            (
                self.setup.cwd.display().to_string(),
                self.repo_root.display().to_string(),
            )
        })
    }

    fn trust(&self, decision: TrustDecision) -> Result<TrustChange, String> {
        if self.setup.chat {
            return Err("a chat session has no project to trust".to_owned());
        }
        let was_trusted = self.lock().decision == Some(Trust::Trusted);
        self.trust
            .decide(&self.setup.cwd, &self.repo_root, decision)?;
        self.refresh();
        let state = self.lock();
        let status = match decision {
            TrustDecision::Yes => SessionStatus::Trusted(self.setup.cwd.display().to_string()),
            TrustDecision::Repo => {
                SessionStatus::Trusted(format!("{} (repository)", self.repo_root.display()))
            }
            TrustDecision::No => SessionStatus::Untrusted(self.setup.cwd.display().to_string()),
        };
        Ok(TrustChange {
            status,
            newly_trusted: !was_trusted && state.decision == Some(Trust::Trusted),
            problems: state.problems.clone(),
        })
    }

    fn run_hooks(
        &self,
        event: HookEvent,
        payload: serde_json::Value,
    ) -> BoxFuture<'static, Vec<HookRun>> {
        let hooks = self.hooks_of(event);
        let cwd = self.setup.cwd.clone();
        let env = self.setup.env.clone();
        let mut payload = payload;
        if let Some(object) = payload.as_object_mut() {
            object.insert("event".into(), event_name(event).into());
            object.insert("session_id".into(), self.setup.session_id.clone().into());
            object.insert("cwd".into(), cwd.display().to_string().into());
        }
        Box::pin(async move {
            if hooks.is_empty() {
                return Vec::new();
            }
            hooks::run_all(hooks, &cwd, &env, &payload).await
        })
    }
}

fn event_name(event: HookEvent) -> &'static str {
    match event {
        HookEvent::SessionStart => "session_start",
        HookEvent::UserPromptSubmit => "user_prompt_submit",
    }
}

/// The mode's prompt, then the instructions (each under its path, the most specific
/// last), then the skills.
fn compose_prompt(base: &str, instructions: &[Instructions], skills: &[Skill]) -> String {
    let mut prompt = base.trim_end().to_owned();
    if !instructions.is_empty() {
        prompt.push_str(
            "\n\n# Instructions\n\nThe user's and the project's instructions follow, each under \
             the path of its file. Follow them; where they disagree, the later (more specific) \
             ones win.",
        );
        for file in instructions {
            prompt.push_str(&format!("\n\n## {}\n\n{}", file.path.display(), file.text));
        }
    }
    if !skills.is_empty() {
        prompt.push_str(
            "\n\n# Skills\n\nA skill is a file of instructions for one kind of task. When a task \
             matches a skill's description, read the skill's file before you start, and follow it.\n",
        );
        for skill in skills {
            let description = if skill.description.is_empty() {
                "(no description)"
            } else {
                skill.description.as_str()
            };
            prompt.push_str(&format!(
                "\n- {}: {} ({})",
                skill.name,
                description,
                skill.path.display()
            ));
        }
    }
    prompt
}

#[cfg(test)]
mod tests;
