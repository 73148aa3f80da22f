//! The session file's lines: one JSON object per entry, documented in
//! `docs/sessions.md`. This is the only place that knows the file's field names; the
//! engine's entries have no serde of their own.
//!
//! Every line has the entry's header (`id`, `parent`, `at`, `tokens`) and, keyed by
//! `kind`, its body. Readers ignore fields they do not know, so a newer jucode may add
//! some without breaking an older one's reading of the file.

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::trace_lines::{self, AgentLine, GoalLine, StepLine};
use crate::engine::conversation::store::{
    ApprovalMark, Entry, EntryBody, FileBefore, HostedEngine, SessionMeta,
};
use crate::engine::{ImageData, Message, ProviderItem, ProviderItems, ToolCall};
use crate::protocol::{PlanStatus, UserMessageEvent};

/// The version of the line format, written in the session entry.
pub const FORMAT: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
pub struct Line {
    pub id: String,
    #[serde(default)]
    pub parent: Option<String>,
    #[serde(default)]
    pub at: u64,
    /// Absent when the entry was written before it was counted (the tokenizer still
    /// loading): it is counted when first needed after a load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(flatten)]
    pub body: Body,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    Session {
        format: u32,
        session: String,
        cwd: PathBuf,
        model: String,
        created: u64,
        #[serde(default)]
        chat: bool,
        /// The other agent the session runs on, when not jucode's own engine.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        engine: Option<EngineLine>,
    },
    User {
        /// What the user wrote, as clients see it.
        content: String,
        /// What the model reads (the text plus attachment notes).
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
        /// The attached images' paths, as clients see them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        image_paths: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        files: Vec<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        steered: bool,
    },
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        reasoning: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<Call>,
        /// Provider-bound items of the reply (signed thinking, encrypted reasoning),
        /// resent only to the provider and model that made them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_items: Option<ItemsLine>,
    },
    ToolResult {
        call_id: String,
        name: String,
        output: String,
        #[serde(default)]
        is_error: bool,
        /// The call as its tool described it (for histories shown later).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_kind: Option<crate::protocol::CallKind>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
    },
    /// Images tool calls returned, as the model reads them.
    ToolImages {
        text: String,
        images: Vec<Image>,
    },
    Plan {
        plan: String,
        title: String,
        markdown: String,
        status: PlanStatus,
    },
    PlanStatus {
        plan: String,
        status: PlanStatus,
    },
    Compaction {
        summary: String,
        #[serde(default)]
        kept_from: Option<String>,
    },
    Branch {
        label: String,
    },
    Checkpoint {
        turn: String,
        files: Vec<File>,
    },
    /// A subagent as it finished.
    Agent(Box<AgentLine>),
    /// The step list as `update_plan` set it.
    Steps {
        plan: Vec<StepLine>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        explanation: Option<String>,
    },
    /// The goal after a change; `null`: cleared.
    Goal {
        goal: Option<GoalLine>,
    },
    /// A call put to the user, or the user's answer.
    Approval {
        call_id: String,
        state: MarkLine,
    },
}

/// A hosted session's engine: its `[engines.<name>]` entry, kind, and the agent's own
/// id of the conversation (to continue it).
#[derive(Debug, Serialize, Deserialize)]
pub struct EngineLine {
    pub name: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkLine {
    Asked,
    Allowed,
    Denied,
    Deferred,
}

impl From<ApprovalMark> for MarkLine {
    fn from(mark: ApprovalMark) -> Self {
        match mark {
            ApprovalMark::Asked => MarkLine::Asked,
            ApprovalMark::Allowed => MarkLine::Allowed,
            ApprovalMark::Denied => MarkLine::Denied,
            ApprovalMark::Deferred => MarkLine::Deferred,
        }
    }
}

impl From<MarkLine> for ApprovalMark {
    fn from(mark: MarkLine) -> Self {
        match mark {
            MarkLine::Asked => ApprovalMark::Asked,
            MarkLine::Allowed => ApprovalMark::Allowed,
            MarkLine::Denied => ApprovalMark::Denied,
            MarkLine::Deferred => ApprovalMark::Deferred,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Image {
    pub mime: String,
    pub data: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A reply's provider items: which API, provider and model made them, and each item's
/// JSON text (a string, kept byte for byte) with the number of calls before it.
#[derive(Debug, Serialize, Deserialize)]
pub struct ItemsLine {
    pub api: String,
    pub provider: String,
    pub model: String,
    pub items: Vec<ItemLine>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ItemLine {
    #[serde(default)]
    pub after_calls: usize,
    pub json: String,
}

/// A file before a turn changed it: `content` is base64, `null` when it did not exist.
#[derive(Debug, Serialize, Deserialize)]
pub struct File {
    pub path: PathBuf,
    pub content: Option<String>,
}

/// The line of an entry, `\n`-terminated.
pub fn encode(entry: &Entry) -> Vec<u8> {
    let line = Line {
        id: entry.id.to_string(),
        parent: entry.parent.as_ref().map(|id| id.to_string()),
        at: entry.at,
        tokens: entry.tokens_if_ready(),
        body: body_of(&entry.body),
    };
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

fn body_of(body: &EntryBody) -> Body {
    match body {
        EntryBody::Session(meta) => Body::Session {
            format: FORMAT,
            session: meta.id.clone(),
            cwd: meta.cwd.clone(),
            model: meta.model.clone(),
            created: meta.created,
            chat: meta.chat,
            engine: meta.engine.as_ref().map(|engine| EngineLine {
                name: engine.name.clone(),
                kind: engine.kind.clone(),
                session: engine.session.clone(),
            }),
        },
        EntryBody::User {
            message,
            shown,
            steered,
        } => {
            let (text, images) = match message {
                Message::User { text, images } => (text.clone(), images.as_slice()),
                _ => (String::new(), &[][..]),
            };
            Body::User {
                content: shown.content.clone(),
                text,
                images: images
                    .iter()
                    .map(|image| Image {
                        mime: image.mime.to_owned(),
                        data: image.base64.to_string(),
                    })
                    .collect(),
                image_paths: shown.images.clone(),
                files: shown.files.clone(),
                steered: *steered,
            }
        }
        EntryBody::Assistant(Message::Assistant {
            text,
            reasoning,
            tool_calls,
            provider_items,
        }) => Body::Assistant {
            provider_items: provider_items.as_deref().map(|items| ItemsLine {
                api: items.api.clone(),
                provider: items.provider.clone(),
                model: items.model.clone(),
                items: items
                    .items
                    .iter()
                    .map(|item| ItemLine {
                        after_calls: item.after_calls,
                        json: item.json.to_string(),
                    })
                    .collect(),
            }),
            text: text.clone(),
            reasoning: reasoning.clone(),
            tool_calls: tool_calls
                .iter()
                .map(|call| Call {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect(),
        },
        EntryBody::ToolResult(Message::Tool {
            call_id,
            name,
            output,
            is_error,
            card,
        }) => Body::ToolResult {
            call_id: call_id.clone(),
            name: name.clone(),
            output: output.clone(),
            is_error: *is_error,
            title: card.title.clone(),
            call_kind: card.kind,
            path: card.path.clone(),
            line: card.line,
        },
        EntryBody::ToolImages(Message::User { text, images }) => Body::ToolImages {
            text: text.clone(),
            images: images
                .iter()
                .map(|image| Image {
                    mime: image.mime.to_owned(),
                    data: image.base64.to_string(),
                })
                .collect(),
        },
        // Bodies always hold their own kind of message; these arms keep the match total.
        EntryBody::Assistant(_) | EntryBody::ToolResult(_) | EntryBody::ToolImages(_) => {
            Body::Branch {
                label: "(unreadable entry)".to_owned(),
            }
        }
        EntryBody::Plan {
            id,
            title,
            markdown,
            status,
        } => Body::Plan {
            plan: id.clone(),
            title: title.clone(),
            markdown: markdown.clone(),
            status: *status,
        },
        EntryBody::PlanStatus { plan, status } => Body::PlanStatus {
            plan: plan.clone(),
            status: *status,
        },
        EntryBody::Compaction { summary, kept_from } => Body::Compaction {
            summary: summary.clone(),
            kept_from: kept_from.as_ref().map(|id| id.to_string()),
        },
        EntryBody::Branch { label } => Body::Branch {
            label: label.clone(),
        },
        EntryBody::Checkpoint { turn, files } => Body::Checkpoint {
            turn: turn.to_string(),
            files: files
                .iter()
                .map(|file| File {
                    path: file.path.clone(),
                    content: file
                        .content
                        .as_ref()
                        .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes)),
                })
                .collect(),
        },
        EntryBody::Agent(saved) => Body::Agent(Box::new(trace_lines::agent_line(saved))),
        EntryBody::Steps { plan, explanation } => Body::Steps {
            plan: trace_lines::step_lines(plan),
            explanation: explanation.clone(),
        },
        EntryBody::Goal(goal) => Body::Goal {
            goal: goal.as_ref().map(trace_lines::goal_line),
        },
        EntryBody::Approval { call_id, mark } => Body::Approval {
            call_id: call_id.clone(),
            state: (*mark).into(),
        },
    }
}

/// The entry a line describes.
pub fn decode(line: Line) -> Result<Entry, String> {
    let body = match line.body {
        Body::Session {
            session,
            cwd,
            model,
            created,
            chat,
            engine,
            ..
        } => EntryBody::Session(SessionMeta {
            id: session,
            cwd,
            model,
            created,
            chat,
            engine: engine.map(|engine| HostedEngine {
                name: engine.name,
                kind: engine.kind,
                session: engine.session,
            }),
        }),
        Body::User {
            content,
            text,
            images,
            image_paths,
            files,
            steered,
        } => EntryBody::User {
            message: Message::User {
                text,
                images: images
                    .into_iter()
                    .filter_map(|image| {
                        Some(ImageData {
                            mime: known_mime(&image.mime)?,
                            base64: Arc::from(image.data),
                        })
                    })
                    .collect(),
            },
            shown: UserMessageEvent {
                content,
                images: image_paths,
                files,
            },
            steered,
        },
        Body::Assistant {
            text,
            reasoning,
            tool_calls,
            provider_items,
        } => EntryBody::Assistant(Message::Assistant {
            provider_items: provider_items.map(|items| {
                Arc::new(ProviderItems {
                    api: items.api,
                    provider: items.provider,
                    model: items.model,
                    items: items
                        .items
                        .into_iter()
                        .map(|item| ProviderItem {
                            after_calls: item.after_calls,
                            json: Arc::from(item.json),
                        })
                        .collect(),
                })
            }),
            text,
            reasoning,
            tool_calls: tool_calls
                .into_iter()
                .map(|call| ToolCall {
                    id: call.id,
                    name: call.name,
                    arguments: call.arguments,
                })
                .collect(),
        }),
        Body::ToolResult {
            call_id,
            name,
            output,
            is_error,
            title,
            call_kind,
            path,
            line,
        } => EntryBody::ToolResult(Message::Tool {
            call_id,
            name,
            output,
            is_error,
            card: crate::protocol::CallCard {
                title,
                kind: call_kind,
                path,
                line,
                activity: None,
            },
        }),
        Body::Plan {
            plan,
            title,
            markdown,
            status,
        } => EntryBody::Plan {
            id: plan,
            title,
            markdown,
            status,
        },
        Body::ToolImages { text, images } => EntryBody::ToolImages(Message::User {
            text,
            images: images
                .into_iter()
                .filter_map(|image| {
                    Some(ImageData {
                        mime: known_mime(&image.mime)?,
                        base64: Arc::from(image.data),
                    })
                })
                .collect(),
        }),
        Body::PlanStatus { plan, status } => EntryBody::PlanStatus { plan, status },
        Body::Compaction { summary, kept_from } => EntryBody::Compaction {
            summary,
            kept_from: kept_from.map(Arc::from),
        },
        Body::Branch { label } => EntryBody::Branch { label },
        Body::Checkpoint { turn, files } => {
            let mut restored = Vec::with_capacity(files.len());
            for file in files {
                let content = match file.content {
                    None => None,
                    Some(data) => Some(Arc::from(
                        base64::engine::general_purpose::STANDARD
                            .decode(data)
                            .map_err(|err| {
                                format!("a checkpoint's content is not base64: {err}")
                            })?,
                    )),
                };
                restored.push(FileBefore {
                    path: file.path,
                    content,
                });
            }
            EntryBody::Checkpoint {
                turn: Arc::from(turn),
                files: restored,
            }
        }
        Body::Agent(line) => EntryBody::Agent(Box::new(trace_lines::saved_agent(*line))),
        Body::Steps { plan, explanation } => EntryBody::Steps {
            plan: trace_lines::steps(plan),
            explanation,
        },
        Body::Goal { goal } => EntryBody::Goal(goal.map(trace_lines::goal)),
        Body::Approval { call_id, state } => EntryBody::Approval {
            call_id,
            mark: state.into(),
        },
    };
    Ok(Entry::with_tokens(
        Arc::from(line.id),
        line.parent.map(Arc::from),
        line.at,
        body,
        line.tokens,
    ))
}

/// Images are only ever sniffed as one of these; anything else is dropped on load.
fn known_mime(mime: &str) -> Option<&'static str> {
    ["image/png", "image/jpeg", "image/gif", "image/webp"]
        .into_iter()
        .find(|known| *known == mime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Message;

    /// An entry written before it was counted (the tokenizer still loading) has no
    /// `tokens`, and is counted when first needed after a load; one counted keeps it.
    #[test]
    fn tokens_are_written_when_known_and_counted_after_a_load_otherwise() {
        let body = EntryBody::Assistant(Message::Assistant {
            text: "hello world".into(),
            reasoning: String::new(),
            tool_calls: Vec::new(),
            provider_items: None,
        });
        let entry = Entry::with_tokens(Arc::from("e1"), None, 1, body, None);
        let line = String::from_utf8(encode(&entry)).unwrap();
        let decoded: Line = serde_json::from_str(&line).unwrap();
        let loaded = decode(decoded).unwrap();
        if !line.contains("\"tokens\"") {
            assert_eq!(loaded.tokens_at_most(), entry.tokens_at_most());
        }
        assert_eq!(loaded.tokens(), entry.tokens());
        let line = String::from_utf8(encode(&entry)).unwrap();
        assert!(
            line.contains(&format!("\"tokens\":{}", entry.tokens())),
            "{line}"
        );
        // A line without the field loads, its count made from the body.
        let bare = line.replace(&format!("\"tokens\":{},", entry.tokens()), "");
        assert!(!bare.contains("\"tokens\""), "{bare}");
        let loaded = decode(serde_json::from_str(&bare).unwrap()).unwrap();
        assert_eq!(loaded.tokens(), entry.tokens());
    }
}
