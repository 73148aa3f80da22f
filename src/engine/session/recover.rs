//! A conversation a stopped process left halfway: the latest reply's calls without a
//! result (`kill -9`, a power cut, a crash while a tool ran or waited for approval).
//!
//! Every model request must answer each call of a reply (providers refuse one that
//! does not), so nothing is left unanswered once the session is open: a call that ran
//! or never started gets a result saying the session stopped, written to the file;
//! the call that was waiting for the user's approval, and those after it (they never
//! started), go through approval again in a turn that continues where the stopped
//! one was, deferred like any other when nobody watches.

use super::Session;
use crate::engine::ports::model::ToolCall;
use crate::engine::turn::{self, tool_result};
use crate::protocol::SessionStatus;

/// What the model reads for a call the stopped process never finished.
const STOPPED: &str = "interrupted: the session stopped before this call finished";

impl Session {
    /// Answers the calls that ran or never started and returns the notices saying so,
    /// and the calls to put to the user again (from the one that was waiting on).
    pub(super) fn recover_calls(&mut self) -> (Vec<String>, Vec<ToolCall>) {
        let unanswered = self
            .emitter
            .change(|shared| shared.store.unanswered_calls());
        if unanswered.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let waiting_from = unanswered
            .iter()
            .position(|(_, waiting)| *waiting)
            .unwrap_or(unanswered.len());
        let mut calls: Vec<ToolCall> = unanswered.into_iter().map(|(call, _)| call).collect();
        let again = calls.split_off(waiting_from);
        let mut notices = Vec::new();
        if !calls.is_empty() {
            self.emitter.change(|shared| {
                for call in &calls {
                    shared.store.append(tool_result(
                        call,
                        STOPPED.to_owned(),
                        true,
                        &crate::protocol::CallCard::default(),
                    ));
                }
            });
            notices.push(format!(
                "the session stopped before {} finished: {} recorded as interrupted, and the conversation goes on from there",
                names(&calls),
                if calls.len() == 1 { "it is" } else { "they are" },
            ));
        }
        if let Some(first) = again.first() {
            notices.push(format!(
                "the session stopped while `{}` ({}) waited for approval: it is asked again{}",
                first.name,
                first.id,
                if again.len() > 1 {
                    ", then the rest of that reply's calls run as they would have"
                } else {
                    ""
                }
            ));
        }
        (notices, again)
    }

    /// Keeps what loading found for later snapshots, and logs it: a daemon's clients
    /// attach after the startup batch, and whoever reads the log should see it too.
    pub(super) fn keep_load_notices(&mut self, notices: &[String]) {
        for notice in notices {
            tracing::warn!(session = %self.params.session_id, "{notice}");
        }
        self.load_notices = notices.to_vec();
    }

    /// Continues the stopped turn with `calls`.
    pub(super) fn resume_turn(&mut self, calls: Vec<ToolCall>) {
        if calls.is_empty() {
            return;
        }
        let (ctx, running) = self.turn_context(SessionStatus::Streaming);
        let handle = tokio::spawn(turn::resume(ctx, calls));
        let mut running = running(handle);
        running.resumed = true;
        self.turn = Some(running);
    }
}

/// `` `bash` (call_1) and `read_file` (call_2) ``.
fn names(calls: &[ToolCall]) -> String {
    let named: Vec<String> = calls
        .iter()
        .map(|call| format!("`{}` ({})", call.name, call.id))
        .collect();
    match named.as_slice() {
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        [] => String::new(),
    }
}
