//! What the engine needs from a tool: a schema to offer the model and a way to run it.
//! Implementations live in `crate::tools`; the engine only sees [`Tool`] objects in a
//! [`ToolRegistry`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::model::ToolSpec;

/// Everything a running tool may use from its session.
#[derive(Clone)]
pub struct ToolContext {
    /// The session's working directory; relative paths resolve against it.
    pub cwd: PathBuf,
    /// Cancelled when the turn is interrupted. Tools that can take long watch it.
    pub cancel: CancellationToken,
}

impl ToolContext {
    pub fn resolve(&self, path: &str) -> PathBuf {
        resolve_path(&self.cwd, path)
    }
}

/// Resolves a path the model gave against `cwd`. `~` and `~/...` mean the home directory.
pub fn resolve_path(cwd: &Path, path: &str) -> PathBuf {
    if (path == "~" || path.starts_with("~/"))
        && let Some(home) = directories::BaseDirs::new()
    {
        return home
            .home_dir()
            .join(path.trim_start_matches('~').trim_start_matches('/'));
    }
    cwd.join(path)
}

/// The result of one tool call, as the model and the client see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub output: String,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(output: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            is_error: false,
        }
    }

    pub fn error(output: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            is_error: true,
        }
    }
}

pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;

    /// Runs one call. `args` is the parsed argument object; argument errors come back as
    /// an error [`ToolOutput`] for the model to correct, never as a panic.
    fn run(&self, args: serde_json::Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput>;
}

/// The tools of a session, by name. Cheap to share between turns.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, tool: impl Tool) {
        self.tools.insert(tool.spec().name, Arc::new(tool));
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|tool| tool.spec()).collect()
    }
}
