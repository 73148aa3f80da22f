//! A JSON-RPC 2.0 client over a child's stdio: what the daemon speaks to an agent it
//! hosts. Requests get ids and wait for their answer; the agent's own requests and
//! notifications come out, in order, on one bounded channel for the session to act on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;

use crate::protocol::jsonrpc::{self, Message, RpcError, RpcId};
use crate::protocol::{Frame, LineCodec};

/// What the agent sends that is not an answer.
#[derive(Debug)]
pub enum Incoming {
    Request {
        id: RpcId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
}

/// Lines to the agent waiting to be written, and its messages waiting to be handled:
/// an agent that floods the session waits for it rather than growing memory.
const QUEUE: usize = 1024;

type Waiting = Arc<Mutex<HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// The sending half; cheap to clone.
#[derive(Clone)]
pub struct Rpc {
    out: mpsc::Sender<Bytes>,
    waiting: Waiting,
    next: Arc<std::sync::atomic::AtomicI64>,
}

/// Why a request got no result.
#[derive(Debug)]
pub enum CallError {
    /// The agent answered with an error.
    Rpc(RpcError),
    /// The agent's stdio closed before it answered.
    Gone,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rpc(err) => write!(f, "{} ({})", err.message, err.code),
            Self::Gone => f.write_str("the agent's connection closed"),
        }
    }
}

impl Rpc {
    /// Sends a request and waits for its answer.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, CallError> {
        let rx = self.start_call(method, params).await;
        rx.await
            .map_err(|_| CallError::Gone)?
            .map_err(CallError::Rpc)
    }

    /// Sends a request; its answer comes on the returned receiver (for requests that
    /// last a whole turn, which the session must not wait on).
    pub async fn send_call(
        &self,
        method: &str,
        params: Value,
    ) -> oneshot::Receiver<Result<Value, RpcError>> {
        self.start_call(method, params).await
    }

    async fn start_call(
        &self,
        method: &str,
        params: Value,
    ) -> oneshot::Receiver<Result<Value, RpcError>> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        let line = jsonrpc::request(&RpcId::number(id), method, &params);
        if self.out.send(line).await.is_err() {
            // The writer is gone: dropping the waiting sender answers `Gone`.
            self.waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
        }
        rx
    }

    /// A request made while the agent is starting and nobody else reads `incoming`:
    /// what the agent sends meanwhile is handled here, so it can never fill the channel
    /// the answer comes behind. Its requests are refused (nothing is served yet); its
    /// notifications go to `notified`.
    pub async fn call_draining(
        &self,
        incoming: &mut mpsc::Receiver<Incoming>,
        method: &str,
        params: Value,
        mut notified: impl FnMut(&str, &Value),
    ) -> Result<Value, CallError> {
        let answer = self.call(method, params);
        tokio::pin!(answer);
        loop {
            tokio::select! {
                result = &mut answer => return result,
                message = incoming.recv() => match message {
                    Some(Incoming::Request { id, method, .. }) => {
                        self.respond_error(&id, RpcError::method_not_found(&method)).await;
                    }
                    Some(Incoming::Notification { method, params }) => notified(&method, &params),
                    None => return answer.await,
                },
            }
        }
    }

    pub async fn notify(&self, method: &str, params: Value) {
        let _ = self.out.send(jsonrpc::notification(method, &params)).await;
    }

    pub async fn respond(&self, id: &RpcId, result: Value) {
        let _ = self.out.send(jsonrpc::response(id, &result)).await;
    }

    pub async fn respond_error(&self, id: &RpcId, error: RpcError) {
        let _ = self.out.send(jsonrpc::error_response(id, &error)).await;
    }
}

/// Connects to an agent on `input`/`output`. The returned channel ends when its
/// output ends (the agent exited or closed stdout); requests still waiting then fail
/// with [`CallError::Gone`].
pub fn connect(
    input: impl AsyncWrite + Unpin + Send + 'static,
    output: impl AsyncRead + Unpin + Send + 'static,
    version: jsonrpc::Version,
) -> (Rpc, mpsc::Receiver<Incoming>) {
    let (out, lines) = mpsc::channel(QUEUE);
    let (incoming_tx, incoming) = mpsc::channel(QUEUE);
    let waiting: Waiting = Arc::default();
    tokio::spawn(super::child::write_lines(input, lines));
    tokio::spawn(read_messages(output, version, waiting.clone(), incoming_tx));
    let rpc = Rpc {
        out,
        waiting,
        next: Arc::new(std::sync::atomic::AtomicI64::new(1)),
    };
    (rpc, incoming)
}

async fn read_messages(
    output: impl AsyncRead + Unpin,
    version: jsonrpc::Version,
    waiting: Waiting,
    incoming: mpsc::Sender<Incoming>,
) {
    let mut frames = FramedRead::new(output, LineCodec::new());
    while let Some(frame) = frames.next().await {
        let line = match frame {
            Ok(Frame::Line(line)) => line,
            Ok(_) => {
                tracing::warn!("an agent wrote a line over the length limit; skipped");
                continue;
            }
            Err(err) => {
                tracing::debug!(%err, "reading an agent's output failed");
                break;
            }
        };
        // Agents print banners and logs on stdout at times: a line that is not JSON-RPC
        // is not the session's business, only the log's.
        let message = match jsonrpc::parse_as(&line, version) {
            Ok(message) => message,
            Err(_) => {
                tracing::debug!(line = %String::from_utf8_lossy(&line), "not JSON-RPC");
                continue;
            }
        };
        let sent = match message {
            Message::Response { id, result } => {
                let waiter = id.as_i64().and_then(|id| {
                    waiting
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&id)
                });
                if let Some(waiter) = waiter {
                    let _ = waiter.send(result);
                }
                continue;
            }
            Message::Request { id, method, params } => {
                incoming
                    .send(Incoming::Request { id, method, params })
                    .await
            }
            Message::Notification { method, params } => {
                incoming
                    .send(Incoming::Notification { method, params })
                    .await
            }
        };
        if sent.is_err() {
            break;
        }
    }
    // Whoever still waits is told the agent is gone.
    waiting
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clear();
}
