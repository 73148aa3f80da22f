//! What the engine needs from a tool: a schema to offer the model, an assessment of what
//! a call would do (for the approval policy), and a way to run it. Implementations live
//! in `crate::tools`; the engine only sees [`Tool`] objects in a [`ToolRegistry`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::model::{ImageData, ToolSpec};
pub use crate::protocol::Hunk;
use crate::protocol::{CallCard, CallKind, SandboxMode};

/// The sandbox the session's commands run in: the mode in force and what the host
/// found the kernel can do. Tools that start commands apply it; the engine shows it
/// (the `sandbox` event) and lets the approval policy count on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub mode: SandboxMode,
    /// Where `workspace-write` commands may write: the working directory, the temp
    /// directory, the configured extra roots (absolute).
    pub writable_roots: Vec<PathBuf>,
    /// TCP and other sockets allowed.
    pub network: bool,
    /// Whether the kernel can enforce a sandbox at all.
    pub available: bool,
    /// Why it cannot (when it cannot), or what this kernel does not enforce.
    pub limits: Option<String>,
}

impl Sandbox {
    /// No sandbox (tests, detached contexts).
    pub fn off() -> Self {
        Self {
            mode: SandboxMode::Off,
            writable_roots: Vec::new(),
            network: true,
            available: false,
            limits: None,
        }
    }

    /// Whether commands are restricted by the kernel.
    pub fn enforced(&self) -> bool {
        self.available && self.mode != SandboxMode::Off
    }

    /// Whether a command's effects stay inside what the user chose to allow: enforced,
    /// and without the network (which reaches local sockets such as a session bus,
    /// and through them programs outside the sandbox).
    pub fn contains_effects(&self) -> bool {
        self.enforced() && !self.network
    }

    /// Where commands may write under the current mode.
    pub fn writable(&self) -> &[PathBuf] {
        match self.mode {
            SandboxMode::WorkspaceWrite => &self.writable_roots,
            SandboxMode::ReadOnly | SandboxMode::Off => &[],
        }
    }
}

/// Everything a running tool may use from its session.
#[derive(Clone)]
pub struct ToolContext {
    /// The session's working directory; relative paths resolve against it.
    pub cwd: PathBuf,
    /// The session's environment (the client's, for daemon sessions). Commands run with
    /// exactly this environment, not the engine process's.
    pub env: Arc<HashMap<String, String>>,
    /// Cancelled when the turn is interrupted. Tools that can take long watch it.
    pub cancel: CancellationToken,
    /// Intermediate output for `tool_update` events; the engine coalesces it.
    pub progress: Progress,
    /// For edits approved hunk by hunk: the hunk ids to apply. `None` = the whole call.
    pub hunks: Option<Vec<String>>,
    /// The client that serves file reads, writes and commands for the session, if one
    /// does (see `delegate`).
    pub delegate: Option<crate::engine::delegate::ToolDelegate>,
    /// The sandbox commands started for this call run in.
    pub sandbox: Arc<Sandbox>,
}

impl ToolContext {
    pub fn resolve(&self, path: &str) -> PathBuf {
        resolve_path(&self.cwd, path)
    }

    /// A context for running tools outside a session turn (tests, deferred actions).
    pub fn detached(cwd: PathBuf) -> Self {
        Self {
            cwd,
            env: Arc::new(std::env::vars().collect()),
            cancel: CancellationToken::new(),
            progress: Progress::default(),
            hunks: None,
            delegate: None,
            sandbox: Arc::new(Sandbox::off()),
        }
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
    /// Images the call returned (MCP tools can), for the model to see. The client sees
    /// only `output`, which says that they were attached.
    pub images: Vec<ImageData>,
}

impl ToolOutput {
    pub fn ok(output: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    pub fn error(output: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            is_error: true,
            images: Vec::new(),
        }
    }
}

/// What a call would do, as far as approvals care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Reads only: files, listings, searches, read-only shell commands.
    ReadOnly,
    /// Creates or changes these files (absolute, normalized paths).
    Edit { paths: Vec<PathBuf> },
    /// Runs a shell command not known to be read-only. `danger` is set when the
    /// classifier flags it as dangerous, and says why.
    Exec {
        danger: Option<String>,
        confinement: Confinement,
    },
    /// Reaches the network (fetches a page, queries a search service) without changing
    /// anything here. `host` is where the call goes, as the user would recognise it.
    Network { host: String },
}

/// What holds a command's effects besides approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// Nothing: it can do whatever the user can (no sandbox, or not started by jucode).
    Unconfined,
    /// The sandbox contains its effects ([`Sandbox::contains_effects`]).
    Contained,
    /// The model asked to run it without the sandbox that applies: always asked for.
    Unsandboxed,
}

/// A tool's account of a call before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    pub effect: Effect,
    /// What a person needs to decide: the command; the file and a diff stat.
    pub summary: String,
    /// Hunks when the call modifies existing files; `None` otherwise.
    pub hunks: Option<Vec<Hunk>>,
}

impl Assessment {
    pub fn read_only(summary: impl Into<String>) -> Self {
        Self {
            effect: Effect::ReadOnly,
            summary: summary.into(),
            hunks: None,
        }
    }
}

pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;

    /// The tool's freeform shape, for a tool registered with
    /// [`ToolRegistry::register_freeform`].
    fn freeform(&self) -> Option<super::model::FreeformTool> {
        None
    }

    /// The call as clients are shown it (`tool_start`'s card and a subagent's activity),
    /// from its arguments; paths resolve against `cwd`. A tool that says nothing is shown
    /// by its name.
    fn describe(&self, args: &serde_json::Value, cwd: &Path) -> CallCard {
        let _ = (args, cwd);
        CallCard::named(&self.spec().name)
    }

    /// Says what the call would do, without doing it. An argument error is returned as
    /// the call's result (the model corrects it; nobody is asked). Read-only tools keep
    /// the default.
    fn assess(
        &self,
        args: &serde_json::Value,
        ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        let _ = (args, ctx);
        let name = self.spec().name;
        async move { Ok(Assessment::read_only(name)) }.boxed()
    }

    /// Runs one call. `args` is the parsed argument object; argument errors come back as
    /// an error [`ToolOutput`] for the model to correct, never as a panic.
    fn run(&self, args: serde_json::Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput>;
}

/// What every tool's `describe` builds its card with.
pub trait DescribeCall {
    /// The card of a tool that says nothing of its calls: its name, `other`.
    fn named(name: &str) -> Self;
    /// A card of `kind` titled `title`, about `path` (absolute) when there is one, with
    /// `activity` for status lines.
    fn of(kind: CallKind, title: String, path: Option<String>, activity: String) -> Self;
}

impl DescribeCall for CallCard {
    fn named(name: &str) -> Self {
        Self::of(
            CallKind::Other,
            name.to_owned(),
            None,
            format!("Calling {name}"),
        )
    }

    fn of(kind: CallKind, title: String, path: Option<String>, activity: String) -> Self {
        Self {
            title: Some(title.trim().to_owned()),
            kind: Some(kind),
            path,
            line: None,
            activity: Some(activity),
        }
    }
}

/// The string argument `key` of a call, trimmed; `None` when absent or empty.
pub fn string_arg<'a>(args: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|value| !value.is_empty())
}

/// `path` resolved against `cwd` for display (a `~` path is shown as written).
pub fn shown_path(cwd: &Path, path: &str) -> String {
    if Path::new(path).is_absolute() || path.starts_with('~') {
        path.to_owned()
    } else {
        cwd.join(path).display().to_string()
    }
}

/// Lexically removes `.` and `..` components.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Canonicalizes the longest existing ancestor and re-appends the rest.
pub fn resolve_existing(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Tools that come and go while a session runs (those of MCP servers): asked for what
/// exists at every model request and every call, so a change shows from the next
/// request on, also in the middle of a turn.
pub trait ToolSource: Send + Sync + 'static {
    /// The specs of the tools offered right now.
    fn specs(&self) -> Vec<ToolSpec>;
    fn get(&self, name: &str) -> Option<Arc<dyn Tool>>;
}

/// The tools of a session, by name: its fixed tools and its tool sources. Cheap to share
/// between turns.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Tools offered only in their freeform shape, by the providers that take it: not
    /// among [`ToolRegistry::specs`], but found by name to run their calls.
    freeform: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, tool: impl Tool) {
        self.tools.insert(tool.spec().name, Arc::new(tool));
    }

    /// Registers a tool that is offered only in its freeform shape
    /// ([`Tool::freeform`]), in place of the tools it replaces, by a provider whose model
    /// is trained on it.
    pub fn register_freeform(&mut self, tool: impl Tool) {
        self.freeform.insert(tool.spec().name, Arc::new(tool));
    }

    /// The freeform shapes a provider may offer in place of the tools they replace.
    pub fn freeform_tools(&self) -> Vec<super::model::FreeformTool> {
        self.freeform
            .values()
            .filter_map(|tool| tool.freeform())
            .collect()
    }

    /// Adds tools that may change during the session. A fixed tool wins over a source's
    /// tool of the same name (sources name theirs so that this never happens).
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools
            .get(name)
            .or_else(|| self.freeform.get(name))
            .cloned()
            .or_else(|| self.sources.iter().find_map(|source| source.get(name)))
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.values().map(|tool| tool.spec()).collect();
        for source in &self.sources {
            specs.extend(
                source
                    .specs()
                    .into_iter()
                    .filter(|spec| !self.tools.contains_key(&spec.name)),
            );
        }
        specs
    }
}

/// Output a running tool produced so far and the engine has not shown yet.
///
/// Tools push as output arrives; the engine takes what accumulated a few times a second
/// and emits it as one `tool_update`, so a chatty command costs a handful of events, not
/// one per read. What waits is capped: when a tool outruns the engine, the oldest part
/// is dropped and replaced by a note.
#[derive(Clone, Default)]
pub struct Progress(Arc<Mutex<PendingOutput>>);

#[derive(Default)]
struct PendingOutput {
    text: String,
    skipped: usize,
}

/// Most progress text that waits between two `tool_update`s.
const MAX_PENDING_PROGRESS: usize = 64 * 1024;

impl Progress {
    pub fn push(&self, text: &str) {
        let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        pending.text.push_str(text);
        if pending.text.len() > MAX_PENDING_PROGRESS {
            let mut cut = pending.text.len() - MAX_PENDING_PROGRESS;
            while !pending.text.is_char_boundary(cut) {
                cut += 1;
            }
            pending.skipped += cut;
            pending.text.drain(..cut);
        }
    }

    /// What accumulated since the last call, or `None` when nothing did.
    pub fn take(&self) -> Option<String> {
        let mut pending = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.text.is_empty() && pending.skipped == 0 {
            return None;
        }
        let text = std::mem::take(&mut pending.text);
        let skipped = std::mem::take(&mut pending.skipped);
        Some(if skipped > 0 {
            format!("[… {skipped} bytes of output not shown …]\n{text}")
        } else {
            text
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_coalesces_and_caps() {
        let progress = Progress::default();
        assert_eq!(progress.take(), None);
        progress.push("a");
        progress.push("b");
        assert_eq!(progress.take().as_deref(), Some("ab"));
        progress.push(&"x".repeat(MAX_PENDING_PROGRESS + 10));
        let text = progress.take().unwrap();
        assert!(
            text.starts_with("[… 10 bytes of output not shown …]\n"),
            "{}",
            &text[..50]
        );
        assert_eq!(progress.take(), None);
    }
}
