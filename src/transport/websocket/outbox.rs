//! A dashboard connection's way out: a queue bounded in bytes that never makes its
//! producers wait (a connection that would pass the bound is cut off instead), the task
//! that writes it to the socket, and the close frames that say why a connection ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::SinkExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;

/// Messages for the client, bounded by their bytes: pushing never waits, and a
/// connection whose queue would pass the limit is cut off.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<Message>,
    queued: Arc<AtomicUsize>,
    max: usize,
    cut: CancellationToken,
}

pub type Sink = futures_util::stream::SplitSink<WebSocketStream<TcpStream>, Message>;

impl Outbox {
    /// An outbox of at most `max` bytes, and the task that writes it to `sink` (to be
    /// spawned; it ends when every `Outbox` clone is dropped, or on a cut-off).
    pub fn new(max: usize, sink: Sink) -> (Self, impl Future<Output = ()> + Send) {
        let (tx, rx) = mpsc::unbounded_channel();
        let outbox = Self {
            tx,
            queued: Arc::default(),
            max,
            cut: CancellationToken::new(),
        };
        let writer = write_loop(sink, rx, outbox.queued.clone(), outbox.cut.clone());
        (outbox, writer)
    }

    pub fn push(&self, mut line: bytes::Bytes) {
        if self.cut.is_cancelled() {
            return;
        }
        if line.last() == Some(&b'\n') {
            line.truncate(line.len() - 1);
        }
        let size = line.len();
        // A single message larger than the bound (a long history's snapshot) still goes
        // out when the queue is otherwise empty enough: only falling behind cuts off.
        if self.queued.fetch_add(size, Ordering::SeqCst) + size > self.max && size < self.max {
            tracing::warn!(max = self.max, "a dashboard fell behind; cutting it off");
            self.cut.cancel();
            return;
        }
        let text = String::from_utf8_lossy(&line).into_owned();
        if self.tx.send(Message::text(text)).is_err() {
            self.cut.cancel();
        }
    }

    /// Sends `frame` after what is queued, and nothing after it.
    pub fn close(&self, code: CloseCode, reason: &str) {
        let _ = self
            .tx
            .send(Message::Close(Some(close_frame(code, reason))));
    }

    /// Completes when the connection was cut off (it fell behind, or its socket failed).
    pub async fn cut_off(&self) {
        self.cut.cancelled().await;
    }
}

/// Writes queued messages until every sender is gone (the connection ended), a close
/// frame was sent, or the queue overflowed. It holds no sender itself, so it always ends.
async fn write_loop(
    mut sink: Sink,
    mut rx: mpsc::UnboundedReceiver<Message>,
    queued: Arc<AtomicUsize>,
    cut: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            biased;
            () = cut.cancelled() => break,
            message = rx.recv() => match message {
                Some(message) => message,
                None => break,
            },
        };
        if let Message::Close(_) = message {
            // The connection's own last word (a reason to close it): nothing follows.
            let _ = tokio::time::timeout(CLOSE_WRITE, sink.send(message)).await;
            return;
        }
        let size = message.len();
        let sent = tokio::select! {
            () = cut.cancelled() => break,
            sent = sink.send(message) => sent,
        };
        queued.fetch_sub(size, Ordering::SeqCst);
        if sent.is_err() {
            cut.cancel();
            return;
        }
    }
    // Say why, if the socket takes it in time (a client that reads nothing never makes
    // room for it); then close.
    let frame = if cut.is_cancelled() {
        close_frame(
            CloseCode::Policy,
            "this client fell too far behind; reconnect and attach to resume",
        )
    } else {
        close_frame(CloseCode::Normal, "")
    };
    let _ = tokio::time::timeout(CLOSE_WRITE, sink.send(Message::Close(Some(frame)))).await;
}

/// How long the last frame of a connection may take to write.
const CLOSE_WRITE: std::time::Duration = std::time::Duration::from_secs(1);

/// A close frame; its reason cut to the 123 bytes a control frame has room for.
fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    CloseFrame {
        code,
        reason: reason[..end].into(),
    }
}

/// The close code for a failed read, when the peer may still hear it.
pub fn read_failure(err: &tungstenite::Error) -> Option<CloseCode> {
    match err {
        tungstenite::Error::Capacity(_) => Some(CloseCode::Size),
        tungstenite::Error::Protocol(_) => Some(CloseCode::Protocol),
        tungstenite::Error::Utf8(_) => Some(CloseCode::Invalid),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_reason_fits_a_control_frame() {
        let long = "é".repeat(100);
        let frame = close_frame(CloseCode::Protocol, &long);
        assert!(frame.reason.len() <= 123);
        assert!(long.starts_with(frame.reason.as_str()));
        assert_eq!(close_frame(CloseCode::Normal, "bye").reason.as_str(), "bye");
    }
}
