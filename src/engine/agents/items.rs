//! One subagent's transcript (`subagent_transcript.items`), kept within its limits as
//! it grows: at most [`MAX_ITEMS`] items and [`MAX_BYTES`] of text, tool input and
//! output cut to [`MAX_TOOL_TEXT`] each.
//!
//! The limits are what a front-end can always afford to ask for, however long an agent
//! works: when they are passed, the oldest steps after the task give way to one
//! [`TRIMMED`] item. The task (the first item) stays, since it says what the rest is
//! about; the newest item stays, since it is the one still growing.

use std::collections::VecDeque;

use crate::protocol::SubagentItem;

pub const MAX_ITEMS: usize = 300;
pub const MAX_BYTES: usize = 256 * 1024;
pub const MAX_TOOL_TEXT: usize = 4 * 1024;

/// The text of the item that stands for the steps trimmed away.
pub const TRIMMED: &str = "… earlier steps trimmed";

/// Marks where a tool's text was cut.
const CUT: &str = "…";

#[derive(Debug, Default, Clone)]
pub struct Items {
    list: VecDeque<SubagentItem>,
    /// Bytes of text of every item in `list`.
    bytes: usize,
    /// The trimmed marker sits at index 1.
    trimmed: bool,
}

impl Items {
    /// Items read back from a session file (already within the limits when saved).
    pub fn from_saved(items: Vec<SubagentItem>) -> Self {
        let trimmed =
            matches!(items.get(1), Some(SubagentItem::Assistant { content }) if content == TRIMMED);
        let bytes = items.iter().map(text_bytes).sum();
        let mut items = Self {
            list: items.into(),
            bytes,
            trimmed,
        };
        items.fit();
        items
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn to_vec(&self) -> Vec<SubagentItem> {
        self.list.iter().cloned().collect()
    }

    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A message the agent read: its task first, then messages from its parent.
    pub fn user(&mut self, content: String) {
        self.push(SubagentItem::User { content });
    }

    /// A new reply starts streaming text.
    pub fn assistant_start(&mut self) {
        self.push(SubagentItem::Assistant {
            content: String::new(),
        });
    }

    pub fn assistant_delta(&mut self, delta: &str) {
        match self.list.back_mut() {
            Some(SubagentItem::Assistant { content }) => content.push_str(delta),
            _ => {
                self.assistant_start();
                return self.assistant_delta(delta);
            }
        }
        self.bytes += delta.len();
        self.fit();
    }

    pub fn reasoning_delta(&mut self, delta: &str) {
        match self.list.back_mut() {
            Some(SubagentItem::Reasoning { content }) => content.push_str(delta),
            _ => {
                self.push(SubagentItem::Reasoning {
                    content: String::new(),
                });
                return self.reasoning_delta(delta);
            }
        }
        self.bytes += delta.len();
        self.fit();
    }

    pub fn tool_start(&mut self, call_id: String, name: String, input: &str) {
        self.push(SubagentItem::Tool {
            call_id,
            name,
            input: cut_start(input),
            output: String::new(),
            running: true,
            is_error: false,
        });
    }

    /// Output a running call produced since its last update.
    pub fn tool_update(&mut self, call_id: &str, more: &str) {
        self.change_tool(call_id, |output, _, _| {
            output.push_str(more);
            *output = cut_end(output);
        });
    }

    pub fn tool_end(&mut self, call_id: &str, result: &str, error: bool) {
        self.change_tool(call_id, |output, running, is_error| {
            *output = cut_end(result);
            *running = false;
            *is_error = error;
        });
    }

    fn change_tool(
        &mut self,
        call_id: &str,
        change: impl FnOnce(&mut String, &mut bool, &mut bool),
    ) {
        let Some(item) =
            self.list.iter_mut().rev().find(
                |item| matches!(item, SubagentItem::Tool { call_id: id, .. } if id == call_id),
            )
        else {
            return;
        };
        let before = text_bytes(item);
        if let SubagentItem::Tool {
            output,
            running,
            is_error,
            ..
        } = item
        {
            change(output, running, is_error);
        }
        let after = text_bytes(item);
        self.bytes = self.bytes + after - before;
        self.fit();
    }

    fn push(&mut self, item: SubagentItem) {
        self.bytes += text_bytes(&item);
        self.list.push_back(item);
        self.fit();
    }

    /// Drops the oldest steps after the task until the limits hold, then (only an item
    /// alone over the byte limit is left) cuts the largest remaining text.
    fn fit(&mut self) {
        while self.list.len() > MAX_ITEMS || self.bytes > MAX_BYTES {
            let first_step = if self.trimmed { 2 } else { 1 };
            // Keep the task and the newest item; a marker needs room of its own.
            if self.list.len() <= first_step + 1 {
                self.shrink_largest();
                return;
            }
            if let Some(dropped) = self.list.remove(first_step) {
                self.bytes -= text_bytes(&dropped);
            }
            if !self.trimmed {
                self.trimmed = true;
                let marker = SubagentItem::Assistant {
                    content: TRIMMED.to_owned(),
                };
                self.bytes += text_bytes(&marker);
                self.list.insert(1, marker);
            }
        }
    }

    /// Cuts the largest text so the items fit in [`MAX_BYTES`], keeping its end. It
    /// is cut a quarter of the budget further, so that a reply still streaming is not
    /// copied again at every delta.
    fn shrink_largest(&mut self) {
        let excess = self.bytes.saturating_sub(MAX_BYTES) + MAX_BYTES / 4;
        let Some(item) = self.list.iter_mut().max_by_key(|item| text_bytes(item)) else {
            return;
        };
        let text = match item {
            SubagentItem::User { content }
            | SubagentItem::Assistant { content }
            | SubagentItem::Reasoning { content } => content,
            SubagentItem::Tool { output, .. } => output,
        };
        let keep = text.len().saturating_sub(excess + CUT.len());
        let cut = format!("{CUT}{}", tail(text, keep));
        self.bytes = self.bytes - text.len() + cut.len();
        *text = cut;
    }
}

fn text_bytes(item: &SubagentItem) -> usize {
    match item {
        SubagentItem::User { content }
        | SubagentItem::Assistant { content }
        | SubagentItem::Reasoning { content } => content.len(),
        SubagentItem::Tool { input, output, .. } => input.len() + output.len(),
    }
}

/// At most [`MAX_TOOL_TEXT`] bytes of `text`, keeping its start.
fn cut_start(text: &str) -> String {
    if text.len() <= MAX_TOOL_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TOOL_TEXT - CUT.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT}", &text[..end])
}

/// At most [`MAX_TOOL_TEXT`] bytes of `text`, keeping its end.
fn cut_end(text: &str) -> String {
    if text.len() <= MAX_TOOL_TEXT {
        return text.to_owned();
    }
    format!("{CUT}{}", tail(text, MAX_TOOL_TEXT - CUT.len()))
}

/// The last `keep` bytes of `text` at most, on a character boundary.
fn tail(text: &str, keep: usize) -> &str {
    let mut start = text.len().saturating_sub(keep);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(items: &Items) -> Vec<&'static str> {
        items
            .list
            .iter()
            .map(|item| match item {
                SubagentItem::User { .. } => "user",
                SubagentItem::Assistant { .. } => "assistant",
                SubagentItem::Reasoning { .. } => "reasoning",
                SubagentItem::Tool { .. } => "tool",
            })
            .collect()
    }

    #[test]
    fn tool_text_is_cut_to_four_kilobytes() {
        let mut items = Items::default();
        items.user("task".into());
        items.tool_start("c1".into(), "bash".into(), &"i".repeat(10_000));
        items.tool_update("c1", &"a".repeat(3000));
        items.tool_update("c1", &format!("{}END", "b".repeat(3000)));
        let SubagentItem::Tool { input, output, .. } = &items.list[1] else {
            panic!()
        };
        assert_eq!(input.len(), MAX_TOOL_TEXT);
        assert!(input.ends_with(CUT));
        assert_eq!(output.len(), MAX_TOOL_TEXT);
        assert!(output.starts_with(CUT) && output.ends_with("bbEND"));
        items.tool_end("c1", "short", true);
        let SubagentItem::Tool {
            output,
            running,
            is_error,
            ..
        } = &items.list[1]
        else {
            panic!()
        };
        assert_eq!(
            (output.as_str(), *running, *is_error),
            ("short", false, true)
        );
        assert_eq!(items.bytes(), 4 + MAX_TOOL_TEXT + 5);
    }

    #[test]
    fn too_many_items_trim_the_oldest_steps_after_the_task() {
        let mut items = Items::default();
        items.user("the task".into());
        for n in 0..400 {
            items.tool_start(format!("c{n}"), "list_dir".into(), "{}");
            items.tool_end(&format!("c{n}"), "x", false);
        }
        assert_eq!(items.list.len(), MAX_ITEMS);
        assert_eq!(
            items.list[0],
            SubagentItem::User {
                content: "the task".into()
            }
        );
        assert_eq!(
            items.list[1],
            SubagentItem::Assistant {
                content: TRIMMED.into()
            }
        );
        assert!(
            matches!(&items.list[MAX_ITEMS - 1], SubagentItem::Tool { call_id, .. } if call_id == "c399")
        );
        let bytes: usize = items.list.iter().map(text_bytes).sum();
        assert_eq!(items.bytes(), bytes);
        // Read back, the marker is recognised and not added twice.
        let again = Items::from_saved(items.to_vec());
        assert_eq!(again.to_vec(), items.to_vec());
    }

    #[test]
    fn too_much_text_trims_too_and_a_huge_reply_is_cut() {
        let mut items = Items::default();
        items.user("task".into());
        for n in 0..100 {
            items.tool_start(format!("c{n}"), "read_file".into(), "{}");
            items.tool_end(&format!("c{n}"), &"r".repeat(5000), false);
        }
        assert!(items.bytes() <= MAX_BYTES, "{}", items.bytes());
        assert_eq!(roles(&items)[..2], ["user", "assistant"]);
        // One reply longer than the whole budget keeps its end.
        items.assistant_start();
        for _ in 0..70 {
            items.assistant_delta(&"w".repeat(4096));
        }
        items.assistant_delta("THE END");
        assert!(items.bytes() <= MAX_BYTES, "{}", items.bytes());
        assert_eq!(roles(&items), ["user", "assistant", "assistant"]);
        let SubagentItem::Assistant { content } = &items.list[2] else {
            panic!()
        };
        assert!(content.ends_with("THE END") && content.starts_with(CUT));
    }

    #[test]
    fn deltas_extend_the_item_of_their_kind() {
        let mut items = Items::default();
        items.user("task".into());
        items.reasoning_delta("let me ");
        items.reasoning_delta("think");
        items.assistant_start();
        items.assistant_delta("Hel");
        items.assistant_delta("lo");
        assert_eq!(
            items.to_vec()[1..],
            [
                SubagentItem::Reasoning {
                    content: "let me think".into()
                },
                SubagentItem::Assistant {
                    content: "Hello".into()
                }
            ]
        );
    }
}
