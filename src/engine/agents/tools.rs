//! The model's tools for subagents: `spawn_agent`, `message_agent`, `wait_agents`,
//! `close_agent`. None is gated (a subagent's own calls are), and each addresses only
//! the caller's own descendants.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::record::NewAgent;
use super::run::{self, Spawn};
use super::{AgentLink, Waited, is_under};
use crate::engine::conversation::store::{first_line, now_ms};
use crate::engine::ports::model::{ToolCall, ToolSpec, pick_effort};
use crate::engine::ports::tools::ToolOutput;
use crate::engine::turn::TurnContext;
use crate::protocol::{AgentKind, AgentRun, AgentState, UserInput};

pub const SPAWN_AGENT: &str = "spawn_agent";
pub const MESSAGE_AGENT: &str = "message_agent";
pub const WAIT_AGENTS: &str = "wait_agents";
pub const CLOSE_AGENT: &str = "close_agent";

/// `wait_agents` without `timeout_ms` waits this long at most; no wait is longer than
/// [`MAX_WAIT`].
const DEFAULT_WAIT: Duration = Duration::from_secs(10 * 60);
const MAX_WAIT: Duration = Duration::from_secs(60 * 60);

/// Longest `task_name` kept in an agent's id.
const MAX_NAME: usize = 40;

pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: SPAWN_AGENT.to_owned(),
            description: "Start a subagent: an agent with a conversation of its own, your tools \
                          and your approval mode, that works on one well-defined part of the \
                          task and answers with a final report. Give it a complete, \
                          self-contained prompt: it does not see your conversation. By default \
                          this waits for the subagent and returns its final answer; with \
                          `background: true` it returns at once, and you collect the answer \
                          with wait_agents (subagents in the background run concurrently)."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "task_name": {"type": "string", "description": "A short name for the task, in lowercase words with dashes (it becomes the agent's id, /root/<task_name>)."},
                    "prompt": {"type": "string", "description": "The complete task for the subagent."},
                    "model": {"type": "string", "description": "A model to run it on (provider/model); default: yours."},
                    "effort": {"type": "string", "description": "The reasoning effort for its model; default: yours."},
                    "background": {"type": "boolean", "description": "Return at once instead of waiting for its answer."}
                },
                "required": ["task_name", "prompt"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: MESSAGE_AGENT.to_owned(),
            description: "Send a message to a running subagent of yours; it reads it before \
                          its next step."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "agent_id": {"type": "string", "description": "The subagent's id (/root/<task_name>)."},
                    "content": {"type": "string"}
                },
                "required": ["agent_id", "content"],
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: WAIT_AGENTS.to_owned(),
            description: "Wait until subagents finish, and get their final answers. Without \
                          `agent_ids`, waits for every running subagent of yours."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "agent_ids": {"type": "array", "items": {"type": "string"}},
                    "timeout_ms": {"type": "integer", "minimum": 0, "description": "Stop waiting after this long (default 600000, at most 3600000); the answers so far are returned."}
                },
                "additionalProperties": false
            }),
        },
        ToolSpec {
            name: CLOSE_AGENT.to_owned(),
            description: "Stop a subagent of yours (and its own subagents) that is no longer \
                          needed."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {"agent_id": {"type": "string"}},
                "required": ["agent_id"],
                "additionalProperties": false
            }),
        },
    ]
}

impl TurnContext {
    /// `spawn_agent`: records the agent and starts it; waits for its answer unless it
    /// runs in the background.
    pub(in crate::engine) async fn spawn_agent(&self, call: &ToolCall, args: &Value) -> ToolOutput {
        let (Some(task_name), Some(prompt)) = (text(args, "task_name"), text(args, "prompt"))
        else {
            return ToolOutput::error("spawn_agent needs a non-empty `task_name` and `prompt`");
        };
        if self.track.depth() >= self.agents.max_depth() {
            return ToolOutput::error(format!(
                "subagents may not nest deeper than {} ([agents] max_depth): do this part yourself",
                self.agents.max_depth()
            ));
        }
        let model = match text(args, "model") {
            None => self.model.clone(),
            Some(name) => match self
                .agents
                .catalog
                .resolve(name, Some(&self.model.provider))
            {
                Ok(model) => model,
                Err(message) => return ToolOutput::error(message),
            },
        };
        let efforts = &model.info.reasoning_efforts;
        let effort = match text(args, "effort") {
            Some(effort) if efforts.iter().any(|e| e == effort) => Some(effort.to_owned()),
            Some(effort) => {
                return ToolOutput::error(format!(
                    "{} takes no reasoning effort {effort:?} (it takes: {})",
                    model.full_name(),
                    efforts.join(", ")
                ));
            }
            None => pick_effort(&model, None, self.reasoning_effort.as_deref()),
        };
        let background = args.get("background").and_then(Value::as_bool) == Some(true);
        let base = format!("{}/{}", self.track.path(), slug(task_name));
        let label = first_line(task_name, 60);
        let cwd = self.cwd.clone();
        let spawned = self
            .emitter
            .emit_many_with(2, |shared| {
                let id = shared.agents.unique_id(&base);
                let new = NewAgent {
                    run: AgentRun {
                        id: id.clone(),
                        label,
                        model: model.full_name(),
                        effort: effort.clone(),
                        state: AgentState::Running,
                        started_at: now_ms(),
                        duration_ms: 0,
                        tokens: 0,
                        tool_calls: 0,
                        prompt: prompt.to_owned(),
                        result: None,
                        error: None,
                        kind: AgentKind::Subagent,
                        tool_use_id: Some(call.id.clone()),
                        activity: None,
                    },
                    store: run::new_store(&id, cwd, &model),
                };
                match shared.agents.spawn(new, Instant::now()) {
                    Ok(events) => (events, Ok(id)),
                    Err(message) => (Vec::new(), Err(message)),
                }
            })
            .await;
        let id = match spawned {
            Ok(id) => id,
            Err(message) => return ToolOutput::error(message),
        };
        run::start(
            &self.agents,
            Spawn {
                link: AgentLink {
                    id: id.clone(),
                    depth: self.track.depth() + 1,
                    parent_turn: self.checkpoint_turn(),
                },
                task: prompt.to_owned(),
                model,
                effort,
                mode: self.current_mode(),
                emitter: self.emitter.clone(),
                tools: self.tools.clone(),
                cwd: self.cwd.clone(),
                env: self.env.clone(),
                session_id: self.session_id.clone(),
                delegation: self.delegation.clone(),
            },
        );
        if background {
            return ToolOutput::ok(format!(
                "Started subagent {id} in the background. Collect its answer with wait_agents."
            ));
        }
        let ids = [id.clone()];
        if self
            .agents
            .wait(&self.emitter, &ids, None, &self.cancel)
            .await
            == Waited::Cancelled
        {
            return ToolOutput::error("interrupted by the user");
        }
        let (state, report) = self
            .emitter
            .change(|shared| (shared.agents.state(&id), shared.agents.report(&id, false)));
        match state {
            Some(AgentState::Completed) => ToolOutput::ok(report),
            _ => ToolOutput::error(report),
        }
    }

    pub(in crate::engine) async fn message_agent(&self, args: &Value) -> ToolOutput {
        let (Some(id), Some(content)) = (text(args, "agent_id"), text(args, "content")) else {
            return ToolOutput::error("message_agent needs `agent_id` and a non-empty `content`");
        };
        if let Err(message) = self.own_agent(id) {
            return ToolOutput::error(message);
        }
        match self.agents.message(id, UserInput::text(content)) {
            Ok(true) => {
                return ToolOutput::ok(format!(
                    "Sent to {id}: it reads the message before its next step."
                ));
            }
            Ok(false) => {}
            Err(message) => return ToolOutput::error(message),
        }
        let report = self.emitter.change(|shared| shared.agents.report(id, true));
        ToolOutput::error(format!(
            "{report}. It does not run any more, so it cannot read messages: spawn a new agent for more work."
        ))
    }

    pub(in crate::engine) async fn wait_agents(&self, args: &Value) -> ToolOutput {
        let asked: Option<Vec<String>> =
            args.get("agent_ids").and_then(Value::as_array).map(|ids| {
                ids.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            });
        let timeout = args
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_WAIT, Duration::from_millis)
            .min(MAX_WAIT);
        let path = self.track.path().to_owned();
        let ids = match asked {
            Some(ids) => {
                for id in &ids {
                    if let Err(message) = self.own_agent(id) {
                        return ToolOutput::error(message);
                    }
                }
                ids
            }
            None => self.emitter.change(|shared| {
                shared
                    .agents
                    .under(&path)
                    .into_iter()
                    .filter(|(_, state)| matches!(state, AgentState::Running | AgentState::Pending))
                    .map(|(id, _)| id)
                    .collect()
            }),
        };
        if ids.is_empty() {
            return ToolOutput::ok("No subagent of yours is running.");
        }
        let waited = self
            .agents
            .wait(&self.emitter, &ids, Some(timeout), &self.cancel)
            .await;
        let reports = self.emitter.change(|shared| {
            ids.iter()
                .map(|id| {
                    let state = shared.agents.report(id, true);
                    format!("[{state}]\n{}", shared.agents.report(id, false))
                })
                .collect::<Vec<_>>()
                .join("\n\n")
        });
        match waited {
            Waited::Done => ToolOutput::ok(reports),
            Waited::TimedOut => ToolOutput::ok(format!(
                "Stopped waiting after {} ms; some are still working.\n\n{reports}",
                timeout.as_millis()
            )),
            Waited::Cancelled => ToolOutput::error("interrupted by the user"),
        }
    }

    pub(in crate::engine) async fn close_agent(&self, args: &Value) -> ToolOutput {
        let Some(id) = text(args, "agent_id") else {
            return ToolOutput::error("close_agent needs `agent_id`");
        };
        if let Err(message) = self.own_agent(id) {
            return ToolOutput::error(message);
        }
        let state = self.emitter.change(|shared| shared.agents.state(id));
        if !matches!(state, Some(AgentState::Running | AgentState::Pending)) {
            let report = self.emitter.change(|shared| shared.agents.report(id, true));
            return ToolOutput::ok(format!("{report}: it was not running."));
        }
        self.agents.close(id, AgentState::Closed).await;
        ToolOutput::ok(format!("Closed {id}."))
    }

    /// `Err` unless `id` is a listed descendant of this turn's agent.
    fn own_agent(&self, id: &str) -> Result<(), String> {
        let path = self.track.path();
        let known = self
            .emitter
            .change(|shared| shared.agents.state(id).is_some());
        if is_under(id, path) && known {
            Ok(())
        } else {
            Err(format!("{id} is not one of your subagents"))
        }
    }
}

/// A non-empty string argument, trimmed.
fn text<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|value| !value.is_empty())
}

/// A task name as one segment of an agent's path: lowercase letters, digits and dashes.
fn slug(name: &str) -> String {
    let mut slug = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() || c == '_' {
            slug.push(c);
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
        if slug.len() >= MAX_NAME {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        "agent".to_owned()
    } else {
        slug.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::slug;

    #[test]
    fn task_names_become_one_path_segment() {
        assert_eq!(slug("lister"), "lister");
        assert_eq!(slug("Find the Tests!"), "find-the-tests");
        assert_eq!(slug("../../etc"), "etc");
        assert_eq!(slug("  "), "agent");
        assert_eq!(slug("ünï"), "n");
        assert!(slug(&"x".repeat(100)).len() <= 40);
    }
}
