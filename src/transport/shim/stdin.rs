//! The shim's stdin: read on a thread of its own, forwarded as it arrives, and cut
//! exactly where `jucode serve --in-process` would stop reading.
//!
//! In process, the engine stops at a quit op (`shutdown`, `/quit`, `/exit`): nothing
//! after it is ever handled. The shim must not forward what in-process serve would
//! never read, or the daemon would answer it. So this reader looks for quit ops line
//! by line (they are tiny: a line longer than [`QuitScanner::MAX`] is never one, and is
//! not buffered), forwards everything up to and including the first one, and stops.
//! At EOF a last line without its newline still counts, as it does in process.

use std::io::Read;

use tokio::sync::mpsc;

use crate::protocol::parse_op;

/// What the stdin thread hands the relay.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StdinChunk {
    /// Bytes to forward as they are.
    Data(Vec<u8>),
    /// The last bytes to forward: they end with a quit op (and its newline). One item,
    /// so the relay knows it quit before the daemon can answer the quit.
    Quit(Vec<u8>),
    /// End of input. `unterminated`: the last forwarded line had no newline.
    End { unterminated: bool },
}

pub(super) fn spawn(chunks: mpsc::Sender<StdinChunk>) {
    let spawned = std::thread::Builder::new()
        .name("stdin-forward".into())
        .spawn(move || forward(std::io::stdin().lock(), &chunks));
    if let Err(err) = spawned {
        tracing::error!(%err, "cannot start the stdin thread");
    }
}

fn forward(mut input: impl Read, chunks: &mpsc::Sender<StdinChunk>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut scanner = QuitScanner::default();
    let mut ends_line = true;
    loop {
        let read = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let bytes = &buf[..read];
        match scanner.feed(bytes) {
            Some(end) => {
                let _ = chunks.blocking_send(StdinChunk::Quit(bytes[..end].to_vec()));
                return;
            }
            None => {
                ends_line = bytes.last() == Some(&b'\n');
                if chunks
                    .blocking_send(StdinChunk::Data(bytes.to_vec()))
                    .is_err()
                {
                    return;
                }
            }
        }
    }
    if !ends_line && scanner.pending_is_quit() {
        // In process, a last quit op without its newline still quits.
        let _ = chunks.blocking_send(StdinChunk::Quit(b"\n".to_vec()));
        return;
    }
    let _ = chunks.blocking_send(StdinChunk::End {
        unterminated: !ends_line,
    });
}

/// Finds quit ops in the byte stream without buffering long lines.
#[derive(Default)]
pub(super) struct QuitScanner {
    line: Vec<u8>,
    too_long: bool,
}

impl QuitScanner {
    /// No quit op is longer than this (they are a few dozen bytes).
    pub(super) const MAX: usize = 4096;

    /// Feeds bytes; returns the length of the prefix of `bytes` that ends with the
    /// first complete quit line, if one completes in them.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Option<usize> {
        for (at, &byte) in bytes.iter().enumerate() {
            if byte == b'\n' {
                let quits = !self.too_long && is_quit_line(&self.line);
                self.line.clear();
                self.too_long = false;
                if quits {
                    return Some(at + 1);
                }
            } else if !self.too_long {
                if self.line.len() == Self::MAX {
                    self.too_long = true;
                    self.line = Vec::new();
                } else {
                    self.line.push(byte);
                }
            }
        }
        None
    }

    /// Whether the unterminated line seen last is a quit op.
    pub(super) fn pending_is_quit(&self) -> bool {
        !self.too_long && is_quit_line(&self.line)
    }
}

/// The engine's own test: the line parses as an op that ends the session.
fn is_quit_line(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    parse_op(line).is_ok_and(|op| crate::engine::commands::ends_session(&op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quit_ops_are_found_across_chunks_and_long_lines_skipped() {
        let mut scanner = QuitScanner::default();
        assert_eq!(
            scanner.feed(b"{\"op\":\"user_message\",\"content\":\"/quit\"}\n{\"op\":\"shut"),
            None
        );
        assert_eq!(scanner.feed(b"down\"}\n{\"op\":\"after\"}\n"), Some(7));
        let mut scanner = QuitScanner::default();
        assert_eq!(
            scanner.feed(b"{\"op\":\"command\",\"input\":\" /exit \"}\r\n"),
            Some(36)
        );
        assert_eq!(
            scanner.feed(b"{\"op\":\"command\",\"input\":\"/quit now\"}\n"),
            None
        );
        assert_eq!(scanner.feed(b"[\"shutdown\"]\n"), None, "arrays never act");
        let long = format!("{{\"op\":\"shutdown\",\"pad\":\"{}\"}}\n", "x".repeat(5000));
        assert_eq!(
            scanner.feed(long.as_bytes()),
            None,
            "long lines are never quit ops"
        );
        assert!(scanner.line.capacity() <= QuitScanner::MAX);
    }

    fn run(input: &[u8]) -> Vec<StdinChunk> {
        let (tx, mut rx) = mpsc::channel(64);
        forward(input, &tx);
        drop(tx);
        let mut got = Vec::new();
        while let Some(chunk) = rx.blocking_recv() {
            got.push(chunk);
        }
        got
    }

    #[test]
    fn nothing_after_a_quit_is_forwarded() {
        let got = run(b"{\"op\":\"user_message\",\"content\":\"a\"}\n{\"op\":\"shutdown\"}\n{\"op\":\"user_message\",\"content\":\"b\"}\n");
        assert_eq!(
            got,
            [StdinChunk::Quit(
                b"{\"op\":\"user_message\",\"content\":\"a\"}\n{\"op\":\"shutdown\"}\n".to_vec()
            )]
        );
    }

    #[test]
    fn a_last_line_without_newline_counts() {
        assert_eq!(
            run(b"{\"op\":\"shutdown\"}"),
            [
                StdinChunk::Data(b"{\"op\":\"shutdown\"}".to_vec()),
                StdinChunk::Quit(b"\n".to_vec())
            ]
        );
        assert_eq!(
            run(b"{\"op\":\"agent_runs\"}"),
            [
                StdinChunk::Data(b"{\"op\":\"agent_runs\"}".to_vec()),
                StdinChunk::End { unterminated: true }
            ]
        );
        assert_eq!(
            run(b""),
            [StdinChunk::End {
                unterminated: false
            }]
        );
    }
}
