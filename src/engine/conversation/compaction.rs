//! Compaction: the model summarises the older part of the conversation, and the summary
//! stands in for it from then on (see `store`: the summary is an entry, the history
//! stays).
//!
//! What is kept verbatim is chosen at turn boundaries, newest first, while it fits in a
//! quarter of the context limit (the turn running now is always kept): so recent user
//! messages are never paraphrased, and a tool call is never separated from its result.

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::prompt;
use super::store::{EntryBody, EntryId, Prepared, Store};
use super::tokens;
use crate::engine::emitter::Output;
use crate::engine::ports::model::{ChatRequest, Message, ModelEvent, ResolvedModel};
use crate::protocol::{Event, TurnUsage};

/// What one compaction summarises and what it keeps.
pub struct Plan {
    /// The messages to summarise, in order (a previous summary first, if any).
    summarise: Vec<Message>,
    /// The first entry kept verbatim; `None`: nothing is kept (compacting between
    /// turns, everything is summarised).
    kept_from: Option<EntryId>,
}

/// How a compaction went.
pub enum Outcome {
    /// The summary, for the caller to append (with `compaction_end`, under its lock).
    Done {
        usage: TurnUsage,
        entry: Box<Prepared>,
    },
    /// `compaction_failed` was emitted (with the reason); nothing changed.
    Failed,
    Interrupted,
}

/// Plans a compaction of the active branch; `None` when there is nothing old enough to
/// summarise. `keep`: the token budget of what stays verbatim. `running`: the turn in
/// progress (kept whatever it costs).
pub fn plan(store: &Store, keep: u64, running: Option<&EntryId>) -> Option<Plan> {
    let request = store.request();
    // Turn starts among what the model reads now, newest last.
    let starts: Vec<usize> = request
        .iter()
        .enumerate()
        .filter(|(_, entry)| entry.starts_turn())
        .map(|(index, _)| index)
        .collect();
    let mut cut = request.len();
    let mut kept = 0u64;
    for &start in starts.iter().rev() {
        let turn: u64 = request[start..cut].iter().map(|entry| entry.tokens()).sum();
        let is_running = running.is_some_and(|id| *id == request[start].id);
        if !is_running && kept + turn > keep {
            break;
        }
        kept += turn;
        cut = start;
    }
    if cut == 0 || request[..cut].iter().all(|entry| !entry.starts_turn()) {
        return None;
    }
    Some(Plan {
        summarise: request[..cut]
            .iter()
            .filter_map(|entry| entry.message().cloned())
            .collect(),
        kept_from: request.get(cut).map(|entry| entry.id.clone()),
    })
}

/// Runs the summary request and, on success, returns the compaction entry. Emits
/// `compaction_start`, `compaction_progress`, and `compaction_failed` on failure; the
/// caller announces the entry with `compaction_end`.
pub async fn run(
    plan: Plan,
    model: &ResolvedModel,
    output: &Output,
    cancel: &CancellationToken,
) -> Outcome {
    output.emit(Event::CompactionStart).await;
    let mut messages = plan.summarise;
    messages.push(Message::User {
        text: prompt::COMPACTION_REQUEST.to_owned(),
        images: Vec::new(),
    });
    let request = ChatRequest::from_messages(
        model.model.clone(),
        prompt::COMPACTION_SYSTEM,
        messages,
        Vec::new(),
    );
    let summary = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Outcome::Interrupted,
        summary = stream_summary(model, &request, output) => summary,
    };
    let (summary, usage) = match summary {
        Ok(done) => done,
        Err(error) => {
            output
                .emit(Event::CompactionFailed {
                    error: error.clone(),
                })
                .await;
            return Outcome::Failed;
        }
    };
    let entry = Prepared::new(EntryBody::Compaction {
        summary,
        kept_from: plan.kept_from,
    });
    Outcome::Done {
        usage,
        entry: Box::new(entry),
    }
}

/// Streams the summary, reporting its size as it grows (at most every 64 tokens).
async fn stream_summary(
    model: &ResolvedModel,
    request: &ChatRequest,
    output: &Output,
) -> Result<(String, TurnUsage), String> {
    let mut stream = model
        .client
        .stream(request)
        .await
        .map_err(|err| format!("the summary request failed: {}", err.message))?;
    let mut summary = String::new();
    let mut usage = TurnUsage::default();
    let mut produced = 0u64;
    let mut reported = 0u64;
    let idle = model.retry.idle_timeout;
    loop {
        let item = tokio::time::timeout(idle, stream.next())
            .await
            .map_err(|_| format!("the model sent nothing for {} s", idle.as_secs()))?;
        match item {
            None => return Err("the summary stream ended before it was complete".to_owned()),
            Some(Err(err)) => return Err(format!("the summary request failed: {}", err.message)),
            Some(Ok(ModelEvent::TextDelta(delta))) => {
                produced += tokens::count_delta(&delta);
                summary.push_str(&delta);
                if produced >= reported + 64 {
                    reported = produced;
                    output
                        .emit(Event::CompactionProgress {
                            output_tokens: produced,
                        })
                        .await;
                }
            }
            Some(Ok(ModelEvent::Usage(reply))) => usage = reply,
            Some(Ok(ModelEvent::Finished(_))) => break,
            Some(Ok(_)) => {}
        }
    }
    if summary.trim().is_empty() {
        return Err("the model returned an empty summary".to_owned());
    }
    if produced > reported {
        output
            .emit(Event::CompactionProgress {
                output_tokens: produced,
            })
            .await;
    }
    Ok((summary.trim().to_owned(), usage))
}
