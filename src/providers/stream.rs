//! A reply stream from a streamed (server-sent events) body, through a pure parser of
//! its `data:` payloads: what the Messages and Responses clients share. The parser sees
//! each payload as it comes, then the end of the body; it says when the reply is done,
//! after which nothing more is read.

use std::collections::VecDeque;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures_util::{StreamExt, future, stream};

use super::openai::stream_failure;
use crate::engine::{ModelError, ModelEvent, ModelStream};

/// Incremental state of one streamed reply (see `anthropic::EventParser`,
/// `responses::EventParser`).
pub(crate) trait ReplyParser: Default + Send + 'static {
    /// The events one payload yields.
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError>;
    /// The events the end of the body yields (or why the reply is incomplete).
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError>;
    /// The reply has ended: nothing after this is read.
    fn done(&self) -> bool;
}

/// The reply's events from its body's bytes, however they are cut into chunks.
pub(crate) fn reply<P, E>(
    body: impl futures_util::Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> ModelStream
where
    P: ReplyParser,
    E: std::error::Error + Send + 'static,
{
    // A last event without its blank line still counts.
    let terminator = stream::once(future::ready(Ok(Bytes::from_static(b"\n\n"))));
    let events = body.chain(terminator).eventsource().boxed();
    let state = (events, P::default(), VecDeque::new(), false);
    stream::unfold(
        state,
        |(mut events, mut parser, mut ready, mut ended)| async move {
            loop {
                if let Some(item) = ready.pop_front() {
                    return Some((item, (events, parser, ready, ended)));
                }
                if ended {
                    return None;
                }
                let outcome = match events.next().await {
                    Some(Ok(event)) => parser.push(&event.data),
                    Some(Err(err)) => Err(stream_failure(err)),
                    None => {
                        ended = true;
                        parser.finish()
                    }
                };
                match outcome {
                    Ok(items) => {
                        ended |= parser.done();
                        ready.extend(items.into_iter().map(Ok));
                    }
                    Err(err) => {
                        ended = true;
                        ready.push_back(Err(err));
                    }
                }
            }
        },
    )
    .boxed()
}
