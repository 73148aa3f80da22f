//! One entry of a conversation: immutable once made, shared by `Arc` between the
//! store, model requests, snapshots and the session file's writer.
//!
//! An entry carries what every reader needs precomputed: its item of the `transcript`
//! event encoded once (so a snapshot or `/transcript` costs reference counts and a
//! copy of bytes, never a re-serialization), and the o200k token count of what the
//! model reads of it (so `context_usage` is a sum, not a re-count). The count is made
//! the first time it is asked for (by the session file's writer, usually, off the
//! session's path) and kept: a message must not wait for the tokenizer to be sent.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use crate::engine::conversation::tokens;
use crate::engine::ports::model::Message;
use crate::protocol::{
    AgentRun, Goal, PlanStatus, PlanStep, SubagentItem, TranscriptItem, UserMessageEvent,
};

/// Unique within one session: `e<n>` in the order entries were made.
pub type EntryId = Arc<str>;

#[derive(Debug)]
pub struct Entry {
    pub id: EntryId,
    /// The entry it follows; `None` for the session's first (its metadata).
    pub parent: Option<EntryId>,
    /// When it was made, milliseconds since the Unix epoch.
    pub at: u64,
    pub body: EntryBody,
    /// Its item of the `transcript` event, encoded; `None` when it is not shown.
    shown: Option<Bytes>,
    /// Tokens of what the model reads of it (0 when it reads nothing of it), counted
    /// once, when first asked for.
    tokens: OnceLock<u64>,
    /// What the model reads of a compaction: the summary as a user message.
    summary: Option<Message>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EntryBody {
    /// The first entry of every session.
    Session(SessionMeta),
    /// A user message (the model reads `message`, clients see `shown`). `steered`: it
    /// was read by a running turn rather than starting one.
    User {
        message: Message,
        shown: UserMessageEvent,
        steered: bool,
    },
    /// One model reply: text, reasoning and the tool calls it made.
    Assistant(Message),
    /// The result of one tool call.
    ToolResult(Message),
    /// Images tool calls returned, as the user message the model reads them in (not
    /// shown: the tool cards are).
    ToolImages(Message),
    /// A plan from `propose_plan`, as delivered (its later statuses are entries too).
    Plan {
        id: String,
        title: String,
        markdown: String,
        status: PlanStatus,
    },
    /// A plan's status changed (approved, revising).
    PlanStatus { plan: String, status: PlanStatus },
    /// A summary of the conversation before `kept_from` (the entries from there on are
    /// kept verbatim): what the model reads instead of everything before it.
    Compaction {
        summary: String,
        kept_from: Option<EntryId>,
    },
    /// The conversation continues from an earlier point (`/tree`, `/checkout`).
    Branch { label: String },
    /// What a turn was about to change, recorded before the change: enough to put the
    /// files back (`/checkout`).
    Checkpoint {
        turn: EntryId,
        files: Vec<FileBefore>,
    },
    /// A subagent as it finished, so that a resumed session still lists it and shows
    /// its work (its conversation itself is not kept: the parent read its answer).
    Agent(Box<SavedAgent>),
    /// The session's step list as `update_plan` set it.
    Steps {
        plan: Vec<PlanStep>,
        explanation: Option<String>,
    },
    /// The session's goal after it changed; `None`: cleared.
    Goal(Option<Goal>),
    /// A call of the reply before it was put to the user, or the user's answer. Not
    /// read by the model: it tells a resumed session whether a call without a result
    /// was waiting for approval (asked again) or running (interrupted).
    Approval { call_id: String, mark: ApprovalMark },
}

/// Where a call that needed approval was, as recorded in the session file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMark {
    /// Put to the user; no answer yet.
    Asked,
    /// Answered: it ran (or started to).
    Allowed,
    /// Answered: it did not run.
    Denied,
    /// Nobody could answer: recorded as a deferred action.
    Deferred,
}

/// A finished subagent: its row of `agent_runs` and its transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedAgent {
    pub run: AgentRun,
    pub items: Vec<SubagentItem>,
}

/// Session metadata: the first entry of a session file.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionMeta {
    pub id: String,
    pub cwd: PathBuf,
    pub model: String,
    /// Milliseconds since the Unix epoch.
    pub created: u64,
    pub chat: bool,
    /// Set when the session runs on another agent the daemon hosts (`src/engines/`),
    /// whose conversation this records.
    pub engine: Option<HostedEngine>,
}

/// The other agent a hosted session runs on.
#[derive(Debug, Clone, PartialEq)]
pub struct HostedEngine {
    /// Its `[engines.<name>]` entry.
    pub name: String,
    /// `acp`, `claude-code`, `codex`.
    pub kind: String,
    /// The agent's own id of the conversation, to continue it.
    pub session: Option<String>,
}

/// A file as it was before a turn changed it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileBefore {
    pub path: PathBuf,
    /// Its bytes, or `None` when it did not exist (restoring removes it).
    pub content: Option<Arc<[u8]>>,
}

/// What the model reads of a compaction summary.
pub const SUMMARY_PREFIX: &str =
    "A summary of the earlier conversation (its messages were compacted to save context):\n\n";

impl Entry {
    /// Makes an entry, encoding its transcript item; its tokens are counted when first
    /// asked for.
    pub fn new(id: EntryId, parent: Option<EntryId>, at: u64, body: EntryBody) -> Entry {
        Entry::with_tokens(id, parent, at, body, None)
    }

    /// Like [`Entry::new`], with the token count when it is known (loaded from disk).
    pub fn with_tokens(
        id: EntryId,
        parent: Option<EntryId>,
        at: u64,
        body: EntryBody,
        tokens: Option<u64>,
    ) -> Entry {
        let shown = transcript_item(&body).and_then(|item| serde_json::to_vec(&item).ok());
        let summary = match &body {
            EntryBody::Compaction { summary, .. } => Some(summary_message(summary)),
            _ => None,
        };
        let counted = OnceLock::new();
        if let Some(tokens) = tokens {
            let _ = counted.set(tokens);
        }
        Entry {
            id,
            parent,
            at,
            body,
            shown: shown.map(Bytes::from),
            tokens: counted,
            summary,
        }
    }

    /// Tokens of what the model reads of this entry (counted now if never before).
    pub fn tokens(&self) -> u64 {
        *self.tokens.get_or_init(|| body_tokens(&self.body))
    }

    /// The count when it is known, or can be made now without waiting: not while the
    /// tokenizer is still loading, which would hold up whatever runs on this thread
    /// (the writer of the session file shares the runtime with a session's first
    /// request).
    pub fn tokens_if_ready(&self) -> Option<u64> {
        self.tokens
            .get()
            .copied()
            .or_else(|| tokens::is_warm().then(|| self.tokens()))
    }

    /// At least [`Entry::tokens`], without counting: the count when it is known, else
    /// the bytes of what the model reads (a token is never shorter than a byte).
    pub fn tokens_at_most(&self) -> u64 {
        if let Some(tokens) = self.tokens.get() {
            return *tokens;
        }
        match self.message() {
            Some(message) => tokens::bound_message(message),
            None => 0,
        }
    }

    /// What the model reads of this entry, if anything.
    pub fn message(&self) -> Option<&Message> {
        match &self.body {
            EntryBody::User { message, .. }
            | EntryBody::Assistant(message)
            | EntryBody::ToolResult(message)
            | EntryBody::ToolImages(message) => Some(message),
            EntryBody::Compaction { .. } => self.summary.as_ref(),
            _ => None,
        }
    }

    /// The encoded transcript item, if the entry is shown.
    pub fn shown(&self) -> Option<&Bytes> {
        self.shown.as_ref()
    }

    /// A user message that starts a turn (not one steered into a running turn).
    pub fn starts_turn(&self) -> bool {
        matches!(self.body, EntryBody::User { steered: false, .. })
    }

    /// The first line of a user message, for labels.
    pub fn label(&self) -> Option<String> {
        match &self.body {
            EntryBody::User { shown, .. } => Some(first_line(&shown.content, 80)),
            EntryBody::Branch { label } => Some(label.clone()),
            EntryBody::Compaction { .. } => Some("(earlier messages compacted)".to_owned()),
            EntryBody::Session(_) => Some("(start of the session)".to_owned()),
            _ => None,
        }
    }
}

/// `text`'s first non-empty line, cut to `max` characters with an ellipsis.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("");
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn transcript_item(body: &EntryBody) -> Option<TranscriptItem> {
    Some(match body {
        EntryBody::User { shown, .. } => TranscriptItem::User(shown.clone()),
        EntryBody::Assistant(Message::Assistant { text, .. }) if !text.is_empty() => {
            TranscriptItem::Assistant {
                content: text.clone(),
            }
        }
        EntryBody::ToolResult(Message::Tool {
            call_id,
            name,
            output,
            is_error,
            card,
        }) => TranscriptItem::Tool {
            call_id: call_id.clone(),
            name: name.clone(),
            output: output.clone(),
            is_error: *is_error,
            card: card.clone(),
        },
        EntryBody::Plan {
            id,
            title,
            markdown,
            status,
        } => TranscriptItem::Plan {
            id: id.clone(),
            title: title.clone(),
            content: markdown.clone(),
            status: *status,
        },
        EntryBody::Branch { label } => TranscriptItem::Branch {
            label: label.clone(),
        },
        EntryBody::Compaction { summary, .. } => TranscriptItem::Compaction {
            summary: summary.clone(),
        },
        EntryBody::Steps { plan, explanation } => TranscriptItem::PlanSteps {
            plan: plan.clone(),
            explanation: explanation.clone(),
        },
        _ => return None,
    })
}

/// The encoded transcript item of a plan with another status.
pub fn plan_item(body: &EntryBody, status: PlanStatus) -> Option<Bytes> {
    let EntryBody::Plan {
        id,
        title,
        markdown,
        ..
    } = body
    else {
        return None;
    };
    let item = TranscriptItem::Plan {
        id: id.clone(),
        title: title.clone(),
        content: markdown.clone(),
        status,
    };
    serde_json::to_vec(&item).ok().map(Bytes::from)
}

/// Tokens the model reads of an entry (framing included).
pub(super) fn body_tokens(body: &EntryBody) -> u64 {
    match body {
        EntryBody::User { message, .. }
        | EntryBody::Assistant(message)
        | EntryBody::ToolResult(message)
        | EntryBody::ToolImages(message) => tokens::count_message(message),
        EntryBody::Compaction { summary, .. } => tokens::count_message(&summary_message(summary)),
        _ => 0,
    }
}

/// The message the model reads in place of the compacted conversation.
pub fn summary_message(summary: &str) -> Message {
    Message::User {
        text: format!("{SUMMARY_PREFIX}{summary}"),
        images: Vec::new(),
    }
}
