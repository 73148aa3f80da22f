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
//! The writer takes everything queued at once: a lone chunk (the usual case, a writer
//! keeping up gets one chunk per delivery) is written from its shared buffer, several
//! are copied into one staging buffer per write, so a burst of deltas costs one system
//! call per client rather than one per event, and nothing waits in a buffer while the
//! session is idle. (`interprocess`'s cross-platform stream does not pass vectored
//! writes on; the Unix socket inside it does, but writing several chunks with `writev`
//! measured no better: in the fan-out bench no write had more than one chunk.)

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A session pauses (and so its engine) while *every* attached client has more than
/// this many lines or bytes waiting: the session goes at the pace of its fastest client,
/// and only clients slower than that one fall behind towards the limits below.
pub(crate) const PACE_LINES: usize = 4096;
pub(crate) const PACE_BYTES: usize = 4 * 1024 * 1024;

/// The most bytes copied together into one write.
const STAGING: usize = 256 * 1024;

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
            max_lines: 131_072,
            max_bytes: 32 * 1024 * 1024,
            final_write_timeout: Duration::from_secs(30),
        }
    }
}

impl ClientLimits {
    /// The last line a client that fell behind gets.
    pub(crate) fn overflow_line(&self) -> Bytes {
        let message = format!(
            "disconnected: this client fell more than {} events / {} behind; \
             reconnect and attach to resume",
            self.max_lines,
            size(self.max_bytes)
        );
        crate::protocol::DaemonEvent::error(message, None).line()
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

/// Whole event lines sharing one buffer: a run of lines delivered together is
/// concatenated once and the same chunk goes to every client.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub bytes: Bytes,
    pub lines: usize,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Chunk>,
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
    /// Notified whenever the writer has written a batch: what a session paced by this
    /// client waits for.
    drained: Notify,
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
            drained: Notify::new(),
            overflowed: CancellationToken::new(),
            limits,
        }
    }

    /// Queues one line without ever waiting. Past a limit the client is cut off; a
    /// single line larger than the byte limit (a huge snapshot) still goes through when
    /// nothing else is pending, or such a session could never be attached.
    pub(crate) fn push(&self, line: Bytes) -> Result<(), Closed> {
        self.push_chunk(Chunk {
            bytes: line,
            lines: 1,
        })
    }

    /// Queues a chunk of whole lines with one lock and one wake-up of the writer.
    pub(crate) fn push_chunk(&self, chunk: Chunk) -> Result<(), Closed> {
        let mut state = self.lock();
        if state.end.is_some() {
            return Err(Closed);
        }
        let too_many = state.lines + chunk.lines > self.limits.max_lines;
        let too_big = state.bytes + chunk.bytes.len() > self.limits.max_bytes;
        if state.lines > 0 && (too_many || too_big) {
            state.end = Some(End::Overflow);
            state.queue = VecDeque::new();
            drop(state);
            self.overflowed.cancel();
            self.ready.notify_one();
            return Err(Closed);
        }
        state.lines += chunk.lines;
        state.bytes += chunk.bytes.len();
        state.queue.push_back(chunk);
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
    async fn next(&self, batch: &mut VecDeque<Chunk>) -> Step {
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
        drop(state);
        self.drained.notify_waiters();
    }

    /// Whether the client has more than [`PACE_LINES`] lines or [`PACE_BYTES`] bytes
    /// waiting, or half its limits when those are lower (a closed client never counts
    /// as congested).
    pub(crate) fn congested(&self) -> bool {
        let lines = PACE_LINES.min(self.limits.max_lines / 2);
        let bytes = PACE_BYTES.min(self.limits.max_bytes / 2);
        let state = self.lock();
        state.end.is_none() && (state.lines > lines || state.bytes > bytes)
    }

    /// Lines waiting (queued or being written).
    pub(crate) fn backlog(&self) -> usize {
        self.lock().lines
    }

    /// Waits until the writer writes something, or `limit` passes.
    pub(crate) async fn drained_or(&self, limit: std::time::Duration) {
        let drained = self.drained.notified();
        tokio::pin!(drained);
        drained.as_mut().enable();
        if !self.congested() {
            return;
        }
        let _ = tokio::time::timeout(limit, drained).await;
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
    let mut staging = Vec::new();
    loop {
        let step = tokio::select! {
            step = outbox.next(&mut batch) => step,
            () = hard_stop.cancelled() => return,
        };
        match step {
            Step::Write => {
                let lines: usize = batch.iter().map(|chunk| chunk.lines).sum();
                let total: usize = batch.iter().map(|chunk| chunk.bytes.len()).sum();
                let mut next = 0;
                while next < batch.len() {
                    // A lone chunk is written as it is; several small ones are copied
                    // together first (local sockets take no vectored writes, and one
                    // write per chunk would cost a system call per event when a client
                    // keeps up line by line).
                    let data: &[u8] =
                        if batch.len() - next == 1 || batch[next].bytes.len() >= STAGING {
                            next += 1;
                            &batch[next - 1].bytes
                        } else {
                            staging.clear();
                            while next < batch.len()
                                && (staging.is_empty()
                                    || staging.len() + batch[next].bytes.len() <= STAGING)
                            {
                                staging.extend_from_slice(&batch[next].bytes);
                                next += 1;
                            }
                            &staging
                        };
                    let mut written = 0;
                    let result = tokio::select! {
                        biased;
                        () = outbox.overflowed.cancelled() => {
                            // Cut mid-line unless what went out ends a line.
                            let partial = written > 0 && data[written - 1] != b'\n';
                            send_final_line(&mut out, &outbox.limits, partial).await;
                            return;
                        }
                        () = hard_stop.cancelled() => return,
                        result = write_tracked(&mut out, data, &mut written) => result,
                    };
                    if let Err(err) = result {
                        tracing::debug!(%err, "client write failed");
                        return;
                    }
                }
                outbox.written(lines, total);
                batch.clear();
                if batch.capacity() > 1024 {
                    // A burst grew it; an idle client should not keep that memory.
                    batch = VecDeque::new();
                }
                if staging.capacity() > 2 * STAGING {
                    staging = Vec::new();
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

/// Writes `buf` and flushes, counting progress in `written` so that a write cancelled
/// halfway knows where it stopped.
async fn write_tracked<W: AsyncWrite + Unpin>(
    out: &mut W,
    buf: &[u8],
    written: &mut usize,
) -> std::io::Result<()> {
    while *written < buf.len() {
        let n = out.write(&buf[*written..]).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        *written += n;
    }
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

    #[tokio::test]
    async fn a_burst_is_written_in_one_go_and_byte_for_byte() {
        let outbox = Outbox::new(limits(100, 1 << 20));
        let lines: Vec<Bytes> = (0..50)
            .map(|i| Bytes::from(format!("line {i}\n")))
            .collect();
        for line in &lines[..10] {
            outbox.push(line.clone()).unwrap();
        }
        outbox
            .push_chunk(Chunk {
                bytes: Bytes::from(lines[10..].concat()),
                lines: 40,
            })
            .unwrap();
        outbox.finish();
        let (mut client, server) = tokio::io::duplex(1 << 16);
        write_loop(server, &outbox, &CancellationToken::new()).await;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, lines.concat());
        assert_eq!(outbox.backlog(), 0);
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
