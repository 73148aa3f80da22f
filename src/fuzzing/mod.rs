//! Entry points of the fuzz targets (`fuzz/`, `docs/reliability.md`): one per input that
//! crosses a trust boundary, each a thin function over the code that reads that input,
//! and the replay of the committed corpora in the normal test suite (`replay.rs`).
//!
//! Compiled only for tests and with the `fuzzing` feature (which `fuzz/` enables), so
//! it widens nothing of the crate's API; the few private readers it needs are re-exported
//! `pub(crate)` under the same condition where they live. Each entry point takes the
//! fuzzer's bytes and panics when a property fails; a property is stated where it is
//! checked. The daemon crate has its own (`jucode_daemon::fuzzing`) for its frame reader
//! and router.

mod properties;
#[cfg(test)]
mod replay;
mod shell_model;

pub use properties::{
    SHELL_CWD, SHELL_HOME, acp_messages, chat_stream, config, edit_hunks, messages_stream,
    responses_stream, serve_ops, session_file, shell_class, websocket,
};
pub use shell_model::shell_differential;

/// Cuts a fuzz input into the reads a pipe or socket could deliver: the first byte says
/// how (`0xff`: one byte a read; otherwise `n = b % 8` reads of the lengths the next `n`
/// bytes give, plus one, then the rest in one read). The same rule as
/// `jucode_daemon::fuzzing::chunks` (the daemon crate cannot depend on this one), so a
/// corpus file reads alike in both.
pub fn chunks(data: &[u8]) -> Vec<&[u8]> {
    let Some((&control, rest)) = data.split_first() else {
        return Vec::new();
    };
    if control == 0xff {
        return rest.chunks(1).collect();
    }
    let cuts = usize::from(control % 8).min(rest.len());
    let (lengths, mut payload) = rest.split_at(cuts);
    let mut out = Vec::new();
    for &length in lengths {
        let take = (usize::from(length) + 1).min(payload.len());
        let (chunk, tail) = payload.split_at(take);
        if !chunk.is_empty() {
            out.push(chunk);
        }
        payload = tail;
    }
    if !payload.is_empty() {
        out.push(payload);
    }
    out
}

/// A reader that returns `chunks` one read each (never more than asked for).
pub(crate) struct Reads<'a> {
    chunks: std::collections::VecDeque<&'a [u8]>,
}

impl<'a> Reads<'a> {
    pub(crate) fn new(chunks: &[&'a [u8]]) -> Self {
        Self {
            chunks: chunks.iter().copied().collect(),
        }
    }

    fn next_into(&mut self, room: usize) -> Option<&'a [u8]> {
        let chunk = self.chunks.pop_front()?;
        let take = room.min(chunk.len());
        if take < chunk.len() {
            self.chunks.push_front(&chunk[take..]);
        }
        Some(&chunk[..take])
    }
}

impl std::io::Read for Reads<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(chunk) = self.next_into(buf.len()) else {
            return Ok(0);
        };
        buf[..chunk.len()].copy_from_slice(chunk);
        Ok(chunk.len())
    }
}

impl tokio::io::AsyncRead for Reads<'_> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(chunk) = self.next_into(buf.remaining()) {
            buf.put_slice(chunk);
        }
        std::task::Poll::Ready(Ok(()))
    }
}

/// Writes go nowhere (a WebSocket's pongs and close frames).
impl tokio::io::AsyncWrite for Reads<'_> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// A file in a directory of this process's own, for the targets that read files (the
/// session loader, the config writer): rewritten by every run, removed by nobody (a
/// few kilobytes in the temp directory).
pub(crate) fn scratch_file(name: &str) -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("jucode-fuzz-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir
    });
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    dir.join(format!("{thread}-{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_payload() {
        assert_eq!(chunks(b""), Vec::<&[u8]>::new());
        assert_eq!(chunks(b"\xffab"), vec![&b"a"[..], b"b"]);
        assert_eq!(
            chunks(b"\x02\x00\x01abcdef"),
            vec![&b"a"[..], b"bc", b"def"]
        );
        assert_eq!(chunks(b"\x01"), Vec::<&[u8]>::new());
    }

    #[test]
    fn reads_never_return_more_than_asked() {
        use std::io::Read;
        let mut reads = Reads::new(&[b"abcdef"]);
        let mut buf = [0u8; 4];
        assert_eq!(reads.read(&mut buf).unwrap(), 4);
        assert_eq!(reads.read(&mut buf).unwrap(), 2);
        assert_eq!(reads.read(&mut buf).unwrap(), 0);
    }
}
