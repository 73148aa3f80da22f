//! The conversation of a session, in two views kept side by side.
//!
//! `messages` is what the model reads on its next request; `transcript` is what a
//! client renders (the `transcript` event): user text without the attachment notes the
//! model sees, tool calls with their names, plans. Appending to both in one place keeps
//! them from drifting apart.

use super::model::{ImageData, Message, ToolCall};
use crate::protocol::{PlanStatus, TranscriptItem, UserMessageEvent};

#[derive(Debug, Default)]
pub struct History {
    pub messages: Vec<Message>,
    pub transcript: Vec<TranscriptItem>,
}

impl History {
    pub fn push_user(&mut self, message: Message, shown: UserMessageEvent) {
        self.messages.push(message);
        self.transcript.push(TranscriptItem::User(shown));
    }

    pub fn push_assistant(&mut self, text: String, reasoning: String, tool_calls: Vec<ToolCall>) {
        if text.is_empty() && tool_calls.is_empty() {
            return;
        }
        if !text.is_empty() {
            self.transcript.push(TranscriptItem::Assistant {
                content: text.clone(),
            });
        }
        self.messages.push(Message::Assistant {
            text,
            reasoning,
            tool_calls,
        });
    }

    pub fn push_tool_result(&mut self, call: &ToolCall, output: String, is_error: bool) {
        self.transcript.push(TranscriptItem::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            output: output.clone(),
            is_error,
        });
        self.messages.push(Message::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            output,
            is_error,
        });
    }

    /// Images that tool calls returned, for the model only: one user message after the
    /// reply's tool results, since providers take images in user messages and a message
    /// between the results of one reply would break the call/result pairing they check.
    pub fn push_tool_images(&mut self, images: Vec<(ToolCall, Vec<ImageData>)>) {
        let names: Vec<String> = images
            .iter()
            .map(|(call, images)| format!("{} ({}): {}", call.name, call.id, images.len()))
            .collect();
        self.messages.push(Message::User {
            text: format!(
                "[Images returned by tool calls, in order: {}]",
                names.join(", ")
            ),
            images: images.into_iter().flat_map(|(_, images)| images).collect(),
        });
    }

    /// The plan with this id: `(title, markdown, status)`.
    pub fn plan(&self, id: &str) -> Option<(&str, &str, PlanStatus)> {
        self.transcript.iter().find_map(|item| match item {
            TranscriptItem::Plan {
                id: plan_id,
                title,
                content,
                status,
            } if plan_id == id => Some((title.as_str(), content.as_str(), *status)),
            _ => None,
        })
    }

    pub fn set_plan_status(&mut self, id: &str, new_status: PlanStatus) {
        for item in &mut self.transcript {
            if let TranscriptItem::Plan {
                id: plan_id,
                status,
                ..
            } = item
                && plan_id == id
            {
                *status = new_status;
            }
        }
    }
}
