//! Messages while a turn runs: queueing, steering, unqueueing, interrupting.

use super::{Session, SteerInbox};
use crate::protocol::{Event, Resolution, SessionStatus, UnqueuedEvent, UserInput};

impl Session {
    /// A message that is one of the session's commands (`/help`, `/compact`) goes to the
    /// model as text, as the protocol says a `user_message` does; the sender is told,
    /// once per such message, how it would have run the command instead.
    pub(super) async fn advise_command_as_message(&self, content: &str) {
        let line = content.trim();
        if !line.starts_with('/') || line.contains('\n') {
            return;
        }
        let name = line.split_whitespace().next().unwrap_or_default();
        if !self
            .command_list()
            .iter()
            .any(|known| known.command == name)
        {
            return;
        }
        let op = serde_json::to_string(&crate::protocol::Op::Command {
            input: line.to_owned(),
        })
        .unwrap_or_default();
        self.reply(Event::info(format!(
            "{name} is a command, but it came as a user_message, so the model reads it as \
             text; to run it, send {op}"
        )))
        .await;
    }

    pub(super) async fn submit(&mut self, input: UserInput) {
        if self.turn.is_some() {
            self.queue.push_back(input);
            self.emit_pending().await;
            self.emitter
                .status(SessionStatus::Queued(self.queue.len()))
                .await;
        } else {
            self.start_turn(input);
        }
    }

    /// Messages steered too late for the turn to read run next, in their order.
    pub(super) fn requeue_steered(&mut self, inbox: &SteerInbox) {
        let mut inbox = inbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(input) = inbox.pop_back() {
            self.queue.push_front(input);
        }
    }

    pub(super) async fn start_next(&mut self) {
        if self.turn.is_some() {
            return;
        }
        if let Some(next) = self.queue.pop_front() {
            self.emit_pending().await;
            self.start_turn(next);
        }
    }

    pub(super) async fn steer(&mut self, index: Option<i64>) {
        if self.turn.is_none() {
            return;
        }
        let Some(position) = pick(self.queue.len(), index) else {
            return;
        };
        if !self.queue[position].images.is_empty() {
            // Images cannot join a request mid-turn: the message starts a turn of its own.
            self.interrupt(Some(position as i64)).await;
            return;
        }
        let Some(input) = self.queue.remove(position) else {
            return;
        };
        if let Some(turn) = &self.turn {
            turn.steer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push_back(input);
        }
        self.emitter.status(SessionStatus::Steering).await;
        self.emit_pending().await;
    }

    pub(super) async fn unqueue(&mut self, index: Option<i64>) {
        let Some(position) = pick(self.queue.len(), index) else {
            return;
        };
        let Some(input) = self.queue.remove(position) else {
            return;
        };
        self.emit_pending().await;
        // What it held goes back to the client that took it out, to edit again.
        self.reply(Event::Unqueued(UnqueuedEvent {
            content: input.content,
            images: input.images,
            files: input.files,
        }))
        .await;
    }

    pub(super) async fn interrupt(&mut self, index: Option<i64>) {
        // A server's question belongs to the call the interrupt stops (or to none the
        // user still wants): it is cancelled either way.
        self.close_elicitations(crate::protocol::ElicitationAction::Cancel)
            .await;
        let Some(turn) = self.turn.take() else {
            // No turn runs, but subagents it left in the background may: they stop.
            self.interrupt_agents().await;
            return;
        };
        turn.cancel.cancel();
        self.interrupt_agents().await;
        if let Err(err) = turn.handle.await {
            tracing::error!(%err, "turn task failed while interrupted");
        }
        self.requeue_steered(&turn.steer);
        // The turn closed its tool card and approval requests as it stopped; anything
        // left is closed here, before `info` and `status`, so nothing of the turn
        // follows those two.
        self.resolve_open_approvals(Resolution::Interrupted).await;
        self.emitter.change(|shared| shared.streaming = None);
        // "Interrupt and send": the chosen message goes first; start_next then announces
        // the new queue and starts it.
        if let Some(position) = pick(self.queue.len(), index)
            && let Some(input) = self.queue.remove(position)
        {
            self.queue.push_front(input);
        }
        self.goal_turn_end(None).await;
        self.emitter.info("request interrupted").await;
        self.emitter.status(SessionStatus::Interrupted).await;
        if let Some(observer) = &self.params.turn_ends {
            let _ = observer.send(super::TurnEnd::Interrupted);
        }
        self.start_next().await;
    }

    pub(super) async fn emit_pending(&self) {
        let messages = self.pending_contents();
        self.emitter.emit(Event::PendingMessages { messages }).await;
    }

    pub(super) fn pending_contents(&self) -> Vec<String> {
        self.queue.iter().map(|m| m.content.clone()).collect()
    }
}

/// Index semantics of steer/unqueue/interrupt (every engine's, hosted ones too): absent = the next (0), negative counts
/// from the end, out of range = nothing.
pub fn pick(len: usize, index: Option<i64>) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let index = index.unwrap_or(0);
    let position = if index < 0 { len + index } else { index };
    (0..len).contains(&position).then_some(position as usize)
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn index_semantics() {
        assert_eq!(pick(3, None), Some(0));
        assert_eq!(pick(3, Some(2)), Some(2));
        assert_eq!(pick(3, Some(3)), None);
        assert_eq!(pick(3, Some(-1)), Some(2));
        assert_eq!(pick(3, Some(-3)), Some(0));
        assert_eq!(pick(3, Some(-4)), None);
        assert_eq!(pick(0, None), None);
    }
}
