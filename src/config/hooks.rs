//! `[hooks]`: commands run when something happens in a session (`docs/hooks.md`).
//!
//! ```toml
//! [hooks]
//! timeout_ms = 10000                       # the default of every hook here
//! session_start = ["git status --short"]
//! user_prompt_submit = [{ command = "./log-prompt.sh", timeout_ms = 2000 }]
//! ```

use serde::Deserialize;

/// How long a hook may run when its config says nothing: ten seconds.
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 10_000;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    /// The default timeout of this table's hooks.
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub session_start: Vec<HookSpec>,
    #[serde(default)]
    pub user_prompt_submit: Vec<HookSpec>,
}

/// One hook: a shell command line, alone or with its own timeout.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum HookSpec {
    Command(String),
    Detailed(DetailedHook),
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetailedHook {
    pub command: String,
    pub timeout_ms: Option<u64>,
}

/// A hook ready to run: its command and its timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub command: String,
    pub timeout: std::time::Duration,
}

impl HooksConfig {
    pub fn session_start(&self) -> Vec<Hook> {
        self.resolve(&self.session_start)
    }

    pub fn user_prompt_submit(&self) -> Vec<Hook> {
        self.resolve(&self.user_prompt_submit)
    }

    fn resolve(&self, specs: &[HookSpec]) -> Vec<Hook> {
        let default = self.timeout_ms.unwrap_or(DEFAULT_HOOK_TIMEOUT_MS);
        specs
            .iter()
            .map(|spec| {
                let (command, timeout) = match spec {
                    HookSpec::Command(command) => (command, default),
                    HookSpec::Detailed(hook) => (&hook.command, hook.timeout_ms.unwrap_or(default)),
                };
                Hook {
                    command: command.clone(),
                    timeout: std::time::Duration::from_millis(timeout),
                }
            })
            .filter(|hook| !hook.command.trim().is_empty())
            .collect()
    }
}
