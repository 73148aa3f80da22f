//! File reads, file writes and shell commands served by a client: an editor that offers
//! them sees the session's reads of its unsaved buffers,
//! its writes in its undo history, and its commands in its own terminals.
//!
//! A client announces what it serves (`client_capabilities`); from then on tools ask it
//! through [`ToolDelegate::call`]: the session sends a `client_request` to that client
//! alone and the tool waits for the matching `client_response`. The last client to
//! announce is the delegate. Every wait is bounded (a client that stops answering is
//! dropped as delegate, so later calls run here again) and ends when the turn is
//! interrupted; at most [`MAX_PENDING`] requests wait at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::emitter::Output;
use crate::protocol::delegation::ClientCall;
use crate::protocol::{ClientId, Event};

/// The most requests waiting for a client's answer at once.
const MAX_PENDING: usize = 64;

/// What a client serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub read_text_file: bool,
    pub write_text_file: bool,
    pub terminal: bool,
}

impl Capabilities {
    fn any(self) -> bool {
        self.read_text_file || self.write_text_file || self.terminal
    }
}

/// A session's delegation: who serves what, and the requests waiting for answers.
#[derive(Clone)]
pub struct Delegation(Arc<Inner>);

struct Inner {
    output: Output,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    delegate: Option<(ClientId, Capabilities)>,
    pending: HashMap<String, oneshot::Sender<Result<serde_json::Value, String>>>,
    next: u64,
}

impl Delegation {
    pub fn new(output: Output) -> Self {
        Self(Arc::new(Inner {
            output,
            state: Mutex::default(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `client` serves `capabilities` from now on (none: it stops being the delegate).
    pub fn announce(&self, client: ClientId, capabilities: Capabilities) {
        let mut state = self.lock();
        if capabilities.any() {
            state.delegate = Some((client, capabilities));
        } else if state
            .delegate
            .is_some_and(|(delegate, _)| delegate == client)
        {
            state.delegate = None;
        }
    }

    /// Nobody serves anything any more (the session has no client).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.delegate = None;
        // Dropping the senders ends every wait with an error.
        state.pending.clear();
    }

    /// A client's answer to request `id`. Unknown ids (answered late, after a timeout)
    /// are ignored.
    pub fn answer(&self, id: &str, result: Result<serde_json::Value, String>) {
        if let Some(waiting) = self.lock().pending.remove(id) {
            let _ = waiting.send(result);
        }
    }

    /// Whether a client serves the session's files (reads or writes them).
    pub fn serves_files(&self) -> bool {
        self.lock()
            .delegate
            .is_some_and(|(_, can)| can.read_text_file || can.write_text_file)
    }

    /// The delegate for one tool call, when a client serves anything.
    pub fn for_call(&self, call_id: &str) -> Option<ToolDelegate> {
        let (client, capabilities) = self.lock().delegate?;
        Some(ToolDelegate {
            delegation: self.clone(),
            client,
            capabilities,
            call_id: call_id.to_owned(),
        })
    }
}

/// What one tool call may ask of the delegate client.
#[derive(Clone)]
pub struct ToolDelegate {
    delegation: Delegation,
    client: ClientId,
    pub capabilities: Capabilities,
    call_id: String,
}

impl ToolDelegate {
    /// Asks the client `call`, within `timeout`, unless `cancel` fires first. A timeout
    /// drops the client as delegate: it is gone or stuck, and later calls run here.
    pub async fn call(
        &self,
        call: &ClientCall,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<serde_json::Value, String> {
        let (answer, answered) = oneshot::channel();
        let id = {
            let mut state = self.delegation.lock();
            if state.pending.len() >= MAX_PENDING {
                return Err(format!(
                    "the client has {MAX_PENDING} requests unanswered; not asking it more"
                ));
            }
            state.next += 1;
            let id = format!("cr-{}", state.next);
            state.pending.insert(id.clone(), answer);
            id
        };
        let (method, params) = call.method_and_params();
        let request = Event::ClientRequest {
            id: id.clone(),
            call_id: Some(self.call_id.clone()),
            method: method.clone(),
            params,
        };
        self.delegation.0.output.reply(self.client, request).await;
        let outcome = tokio::select! {
            biased;
            () = cancel.cancelled() => Err("interrupted by the user".to_owned()),
            answer = tokio::time::timeout(timeout, answered) => match answer {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err("the client that served this session has left".to_owned()),
                Err(_) => {
                    let mut state = self.delegation.lock();
                    if state.delegate.is_some_and(|(client, _)| client == self.client) {
                        state.delegate = None;
                    }
                    Err(format!(
                        "the client did not answer {method} within {} s",
                        timeout.as_secs()
                    ))
                }
            },
        };
        self.delegation.lock().pending.remove(&id);
        outcome
    }
}
