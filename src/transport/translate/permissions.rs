//! Approvals as ACP permission requests: what `session/request_permission` shows, and
//! the `approve` op a client's answer becomes.

use super::updates::{PERMISSION_OPTIONS, PermissionAsk, ToolCallUpdate, ToolStatus};
use super::{Translator, cards};

impl Translator {
    pub(super) fn permission(
        &self,
        call_id: &str,
        name: &str,
        summary: &str,
        hunks: Option<&[crate::protocol::Hunk]>,
    ) -> PermissionAsk {
        let card = match self.cards.get(call_id) {
            Some(open) => open.card.clone(),
            None => cards::card(name, None, &crate::protocol::CallCard::default()),
        };
        let mut content = card.preview.clone();
        if content.is_empty()
            && let Some(hunks) = hunks
        {
            let diff: Vec<String> = hunks
                .iter()
                .flat_map(|hunk| {
                    std::iter::once(format!("{} {}", hunk.file, hunk.header))
                        .chain(hunk.lines.iter().cloned())
                })
                .collect();
            content.push(cards::text(diff.join("\n")));
        }
        PermissionAsk {
            tool_call: ToolCallUpdate {
                tool_call_id: call_id.to_owned(),
                title: Some(summary.to_owned()),
                kind: Some(card.kind),
                status: Some(ToolStatus::Pending),
                content: (!content.is_empty()).then_some(content),
                locations: (!card.locations.is_empty()).then_some(card.locations),
                raw_input: card.arguments,
                raw_output: None,
            },
            options: PERMISSION_OPTIONS.to_vec(),
        }
    }
}

/// The `approve` op for a client's answer to `session/request_permission` (`outcome`:
/// its result, `None` when it answered with an error); `None` when nothing is to be
/// sent. A `cancelled` outcome or an error while the turn is being cancelled sends
/// nothing (the interrupt closes the request); otherwise anything but an allow denies,
/// so a turn never waits on an answer that will not come.
pub fn permission_answer(
    call_id: &str,
    outcome: Option<&serde_json::Value>,
    cancelling: bool,
) -> Option<crate::protocol::Op> {
    let approve = |decision, always| {
        Some(crate::protocol::Op::Approve(crate::protocol::ApproveOp {
            call_id: call_id.to_owned(),
            decision,
            always,
            hunks: None,
        }))
    };
    let deny = || approve(crate::protocol::Decision::Deny, false);
    let Some(result) = outcome else {
        return if cancelling { None } else { deny() };
    };
    let outcome = result.get("outcome");
    let kind = outcome
        .and_then(|o| o.get("outcome"))
        .and_then(|o| o.as_str());
    let option = outcome
        .and_then(|o| o.get("optionId"))
        .and_then(|o| o.as_str());
    match (kind, option) {
        (Some("selected"), Some("allow_once")) => approve(crate::protocol::Decision::Allow, false),
        (Some("selected"), Some("allow_always")) => approve(crate::protocol::Decision::Allow, true),
        (Some("cancelled"), _) if cancelling => None,
        _ => deny(),
    }
}
