//! A session's history (its `transcript`) as updates, for a client loading or attaching
//! to it: ACP's `session/load` must replay the whole conversation before it answers.
//!
//! The transcript keeps what the model and the user said and each tool call's result,
//! not the reasoning or a call's arguments, so replayed cards are titled by the tool's
//! name and carry their output.

use super::updates::{ContentBlock, ContentChunk, SessionUpdate, ToolCallUpdate, ToolStatus};
use super::{Dialect, Translator, cards};
use crate::protocol::TranscriptItem;

pub(super) fn item(session: &mut Translator, item: &TranscriptItem) -> Vec<SessionUpdate> {
    let chunk = |session: &mut Translator, kind: &str, text: &str| ContentChunk {
        content: ContentBlock::text(text),
        message_id: session.new_id(kind),
    };
    match item {
        TranscriptItem::User(user) => {
            let chunk = chunk(session, "user", &user.content);
            vec![match session.dialect {
                Dialect::Acp => SessionUpdate::UserMessageChunk(chunk),
                Dialect::Dashboard => SessionUpdate::UserMessage(chunk),
            }]
        }
        TranscriptItem::Assistant { content } => {
            vec![SessionUpdate::AgentMessageChunk(chunk(
                session, "msg", content,
            ))]
        }
        TranscriptItem::Tool {
            call_id,
            name,
            output,
            is_error,
            card: told,
        } => {
            let mut card = cards::card(name, None, told);
            if session.dialect == Dialect::Dashboard {
                card.kind = card.kind.for_dashboard();
            }
            let update = ToolCallUpdate {
                tool_call_id: call_id.clone(),
                title: Some(card.title),
                kind: Some(card.kind),
                status: Some(if *is_error {
                    ToolStatus::Failed
                } else {
                    ToolStatus::Completed
                }),
                content: Some(vec![cards::text(output.clone())]),
                ..ToolCallUpdate::default()
            };
            vec![match session.dialect {
                Dialect::Acp => SessionUpdate::ToolCall(update),
                Dialect::Dashboard => SessionUpdate::ToolCallUpdate(update),
            }]
        }
        TranscriptItem::Plan { title, content, .. } => {
            let text = format!("**Plan: {title}**\n\n{content}");
            vec![SessionUpdate::AgentMessageChunk(chunk(
                session, "plan", &text,
            ))]
        }
        TranscriptItem::PlanSteps { plan, .. } => vec![SessionUpdate::Plan {
            entries: super::options::plan(plan),
        }],
        TranscriptItem::Compaction { summary } => {
            let text = format!("Summary of the conversation before this point:\n{summary}");
            vec![SessionUpdate::AgentThoughtChunk(chunk(
                session, "thought", &text,
            ))]
        }
        TranscriptItem::Branch { .. } => Vec::new(),
    }
}
