//! A client's one outbound queue, and the task that writes it to the socket.
//!
//! Every line for a client goes through its [`Outbox`]: event lines of all its sessions,
//! snapshots, daemon answers. Producers (session fan-outs, the connection's own reader)
//! call [`Outbox::push`], which never waits: a session must never slow down because one
//! of its clients does. The queue is bounded twice, in lines and in bytes, counting
//! what is queued *and* what the writer is still writing; a push past either bound
//! trips the outbox into the overflowed state, which frees the queue at once and makes
//! the writer abandon its write, send one final error line (with a short timeout, since
//! the client is evidently not reading) and close. That is zellij's answer to a slow
//! client rather than tmux's: the client reconnects and re-attaches, getting a fresh
//! snapshot, instead of the daemon buffering without limit.
//!
//! The writer takes everything queued at once and hands it to one vectored write, so a
//! burst of deltas costs one syscall, and nothing waits in a buffer while the session
//! is idle.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How far a client may fall behind before it is disconnected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Lines queued or being written.
    pub max_lines: usize,
    /// Bytes queued or being written.
    pub max_bytes: usize,
    /// How long the writer tries to deliver the final "disconnected" line.
    pub final_write_timeout: Duration,
}

impl Default for ClientLimits {
    fn default() -> Self {
        Self {
            max_lines: 8192,
            max_bytes: 32 * 1024 * 1024,
            final_write_timeout: Duration::from_secs(30),
        }
    }
}

impl ClientLimits {
    /// The last line a client that fell behind gets.
    pub fn overflow_line(&self) -> Bytes {
        let message = format!(
            "disconnected: this client fell more than {} events / {} behind; \
             reconnect and attach to resume",
            self.max_lines,
            size(self.max_bytes)
        );
        crate::wire::error_line(&message, None)
    }
}

/// `32 MiB`, `64 KiB`, `100 bytes`: whole units, rounded down.
fn size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// The push failed: the client is gone or going (overflowed, or finished).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closed;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// No more lines will come; write what is queued, then close.
    Finish,
    /// Fell behind: drop everything, send the final error line, close.
    Overflow,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Bytes>,
    /// Lines and bytes queued plus those in the writer's current batch.
    lines: usize,
    bytes: usize,
    end: Option<End>,
}

/// See the module docs. Its mutex is a leaf: nothing else is locked while it is held.
#[derive(Debug)]
pub(crate) struct Outbox {
    state: Mutex<State>,
    ready: Notify,
    /// Cancelled on overflow, to interrupt a write blocked on a client that stopped
    /// reading.
    overflowed: CancellationToken,
    limits: ClientLimits,
}

/// What the writer should do next.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Write,
    Finish,
    Overflow,
}

impl Outbox {
    pub(crate) fn new(limits: ClientLimits) -> Self {
        Self {
            state: Mutex::new(State::default()),
            ready: Notify::new(),
            overflowed: CancellationToken::new(),
            limits,
        }
    }

    /// Queues one line without ever waiting. Past a limit the client is cut off; a
    /// single line larger than the byte limit (a huge snapshot) still goes through when
    /// nothing else is pending, or such a session could never be attached.
    pub(crate) fn push(&self, line: Bytes) -> Result<(), Closed> {
        let mut state = self.lock();
        if state.end.is_some() {
            return Err(Closed);
        }
        let too_many = state.lines + 1 > self.limits.max_lines;
        let too_big = state.bytes + line.len() > self.limits.max_bytes;
        if state.lines > 0 && (too_many || too_big) {
            state.end = Some(End::Overflow);
            state.queue = VecDeque::new();
            drop(state);
            self.overflowed.cancel();
            self.ready.notify_one();
            return Err(Closed);
        }
        state.lines += 1;
        state.bytes += line.len();
        state.queue.push_back(line);
        drop(state);
        self.ready.notify_one();
        Ok(())
    }

    /// No more lines: the writer drains the queue and closes the connection.
    pub(crate) fn finish(&self) {
        let mut state = self.lock();
        if state.end.is_none() {
            state.end = Some(End::Finish);
        }
        drop(state);
        self.ready.notify_one();
    }

    /// True once the client is going: nothing new may be attached to it.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().end.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the queue inconsistent (every
        // update is a few plain assignments), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for work and moves every queued line into `batch` (which must be empty).
    async fn next(&self, batch: &mut VecDeque<Bytes>) -> Step {
        loop {
            {
                let mut state = self.lock();
                if state.end == Some(End::Overflow) {
                    return Step::Overflow;
                }
                if !state.queue.is_empty() {
                    std::mem::swap(&mut state.queue, batch);
                    return Step::Write;
                }
                if state.end == Some(End::Finish) {
                    return Step::Finish;
                }
            }
            self.ready.notified().await;
        }
    }

    /// The writer is done with `lines` lines of `bytes` bytes.
    fn written(&self, lines: usize, bytes: usize) {
        let mut state = self.lock();
        state.lines = state.lines.saturating_sub(lines);
        state.bytes = state.bytes.saturating_sub(bytes);
    }
}

/// Writes the outbox to `out` until it is finished, overflows, the client goes away, or
/// `hard_stop` fires. Returns when the connection should be closed.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    mut out: W,
    outbox: &Outbox,
    hard_stop: &CancellationToken,
) {
    let mut batch = VecDeque::new();
    loop {
        let step = tokio::select! {
            step = outbox.next(&mut batch) => step,
            () = hard_stop.cancelled() => return,
        };
        match step {
            Step::Write => {
                let lines = batch.len();
                let total: usize = batch.iter().map(Bytes::len).sum();
                let mut buf = Lines::new(&batch, total);
                let result = tokio::select! {
                    biased;
                    () = outbox.overflowed.cancelled() => {
                        let partial = buf.remaining() != total;
                        send_final_line(&mut out, &outbox.limits, partial).await;
                        return;
                    }
                    () = hard_stop.cancelled() => return,
                    result = write_all(&mut out, &mut buf) => result,
                };
                if let Err(err) = result {
                    tracing::debug!(%err, "client write failed");
                    return;
                }
                outbox.written(lines, total);
                batch.clear();
                if batch.capacity() > 1024 {
                    // A burst grew it; an idle client should not keep that memory.
                    batch = VecDeque::new();
                }
            }
            Step::Finish => return,
            Step::Overflow => {
                send_final_line(&mut out, &outbox.limits, false).await;
                return;
            }
        }
    }
}

async fn write_all<W: AsyncWrite + Unpin>(out: &mut W, buf: &mut Lines<'_>) -> std::io::Result<()> {
    out.write_all_buf(buf).await?;
    out.flush().await
}

/// Best effort: the client is probably not reading, so this may well time out. After a
/// write cut off mid-line the message starts with `\n` to stand on a line of its own
/// (the cut line before it is not valid JSON and the client's parser says so).
async fn send_final_line<W: AsyncWrite + Unpin>(out: &mut W, limits: &ClientLimits, partial: bool) {
    let line = limits.overflow_line();
    let attempt = async {
        if partial {
            out.write_all(b"\n").await?;
        }
        out.write_all(&line).await?;
        out.flush().await
    };
    match tokio::time::timeout(limits.final_write_timeout, attempt).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(%err, "final line to a slow client failed"),
        Err(_) => tracing::debug!("final line to a slow client timed out"),
    }
}

/// A batch of lines as one [`Buf`], so `write_all_buf` can use vectored writes.
struct Lines<'a> {
    lines: &'a VecDeque<Bytes>,
    /// Index of the current line and offset into it.
    index: usize,
    offset: usize,
    remaining: usize,
}

impl<'a> Lines<'a> {
    fn new(lines: &'a VecDeque<Bytes>, total: usize) -> Self {
        let mut this = Self {
            lines,
            index: 0,
            offset: 0,
            remaining: total,
        };
        this.skip_empty();
        this
    }

    fn skip_empty(&mut self) {
        while self.index < self.lines.len() && self.offset == self.lines[self.index].len() {
            self.index += 1;
            self.offset = 0;
        }
    }
}

impl Buf for Lines<'_> {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        match self.lines.get(self.index) {
            Some(line) => &line[self.offset..],
            None => &[],
        }
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advanced past the end of a batch");
        self.remaining -= cnt;
        while cnt > 0 {
            let left = self.lines[self.index].len() - self.offset;
            if cnt < left {
                self.offset += cnt;
                return;
            }
            cnt -= left;
            self.index += 1;
            self.offset = 0;
        }
        self.skip_empty();
    }

    fn chunks_vectored<'b>(&'b self, dst: &mut [IoSlice<'b>]) -> usize {
        let mut filled = 0;
        let mut offset = self.offset;
        for line in self.lines.iter().skip(self.index) {
            if filled == dst.len() {
                break;
            }
            if offset < line.len() {
                dst[filled] = IoSlice::new(&line[offset..]);
                filled += 1;
            }
            offset = 0;
        }
        filled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn limits(max_lines: usize, max_bytes: usize) -> ClientLimits {
        ClientLimits {
            max_lines,
            max_bytes,
            final_write_timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn lines_buf_walks_every_byte_once() {
        let lines: VecDeque<Bytes> = ["ab", "", "cde", "f"]
            .into_iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect();
        let mut buf = Lines::new(&lines, 6);
        let mut out = Vec::new();
        while buf.has_remaining() {
            let chunk = buf.chunk();
            let take = chunk.len().min(2);
            out.extend_from_slice(&chunk[..take]);
            buf.advance(take);
        }
        assert_eq!(out, b"abcdef");
        let buf = Lines::new(&lines, 6);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(buf.chunks_vectored(&mut slices), 3);
    }

    #[test]
    fn limits_count_lines_and_bytes_but_let_one_huge_line_through() {
        let outbox = Outbox::new(limits(3, 10));
        outbox.push(Bytes::from(vec![b'x'; 50])).unwrap();
        assert_eq!(outbox.push(Bytes::from_static(b"y\n")), Err(Closed));

        let outbox = Outbox::new(limits(3, 1000));
        for _ in 0..3 {
            outbox.push(Bytes::from_static(b"y\n")).unwrap();
        }
        assert_eq!(outbox.push(Bytes::from_static(b"y\n")), Err(Closed));
        assert!(outbox.is_closed());
        assert!(
            outbox.lock().queue.is_empty(),
            "an overflowed queue is freed at once"
        );
    }

    #[tokio::test]
    async fn writes_everything_then_finishes() {
        let outbox = Outbox::new(limits(100, 1 << 20));
        let (client, server) = tokio::io::duplex(1 << 16);
        outbox.push(Bytes::from_static(b"a\n")).unwrap();
        outbox.push(Bytes::from_static(b"b\n")).unwrap();
        outbox.finish();
        assert_eq!(outbox.push(Bytes::from_static(b"c\n")), Err(Closed));
        write_loop(server, &outbox, &CancellationToken::new()).await;
        let mut text = String::new();
        let mut client = client;
        client.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "a\nb\n");
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_is_cut_off_with_a_final_line() {
        let outbox = std::sync::Arc::new(Outbox::new(limits(1000, 4096)));
        // A pipe that holds only 64 bytes: the writer blocks almost at once.
        let (mut client, server) = tokio::io::duplex(64);
        let writer = {
            let outbox = outbox.clone();
            tokio::spawn(
                async move { write_loop(server, &outbox, &CancellationToken::new()).await },
            )
        };
        let line = Bytes::from(format!("{}\n", "x".repeat(99)));
        let mut pushed = 0;
        while outbox.push(line.clone()).is_ok() {
            pushed += 1;
            tokio::task::yield_now().await;
        }
        assert!(pushed < 50, "the byte limit must trip ({pushed} pushed)");
        assert!(outbox.is_closed());
        let mut text = String::new();
        client.read_to_string(&mut text).await.unwrap();
        writer.await.unwrap();
        let last = text.lines().last().unwrap();
        assert_eq!(
            last,
            "{\"type\":\"error\",\"message\":\"disconnected: this client fell more than 1000 \
             events / 4 KiB behind; reconnect and attach to resume\"}"
        );
        for earlier in text.lines().filter(|l| !l.is_empty()).rev().skip(1) {
            assert!(
                earlier.chars().all(|c| c == 'x'),
                "only whole or cut event lines"
            );
        }
    }
}
