//! Newline framing for input with a hard cap on line length.
//!
//! This lives in the daemon crate, not next to the protocol types in the engine crate,
//! because two transports frame client lines the same way: the stdio transport of
//! `jucode serve` and the daemon's socket connections. The engine crate depends on this
//! crate and re-exports the codec as `jucode::protocol::{Frame, LineCodec,
//! MAX_LINE_BYTES}`; this crate must never depend on the engine, so the shared code sits
//! on this side of the boundary.
//!
//! `tokio_util::codec::LinesCodec` reports an over-long line as a decode *error*, and a
//! `FramedRead` stops yielding after any error, which would end the session on one bad
//! line. This codec instead yields [`Frame::TooLong`] and skips to the next newline
//! without buffering the rest, so memory stays bounded by [`MAX_LINE_BYTES`] and the
//! stream keeps going. Bytes are not checked for UTF-8 here: the JSON parser does that
//! and turns a bad line into an ordinary `invalid command` error.

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// The longest accepted input line, newline excluded. The protocol promises at least
/// 16 MiB (a message with a large pasted log); anything up to 32 MiB is accepted.
pub const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// One decoded unit of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// One line without its `\n` (and without a trailing `\r`). Never empty.
    Line(BytesMut),
    /// A line longer than the limit was skipped; carries the limit for the message.
    TooLong { limit: usize },
}

/// A [`Decoder`] of `\n`-terminated lines that never buffers more than its limit.
#[derive(Debug)]
pub struct LineCodec {
    max: usize,
    /// Bytes of the current buffer already known to hold no newline.
    scanned: usize,
    /// True while skipping the remainder of an over-long line.
    discarding: bool,
}

impl LineCodec {
    /// A codec with the protocol's limit, [`MAX_LINE_BYTES`].
    pub fn new() -> Self {
        Self::with_max(MAX_LINE_BYTES)
    }

    /// A codec with another limit (tests use small ones).
    pub(crate) fn with_max(max: usize) -> Self {
        Self {
            max,
            scanned: 0,
            discarding: false,
        }
    }
}

impl Default for LineCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder for LineCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        loop {
            let newline = buf[self.scanned..].iter().position(|b| *b == b'\n');
            match (self.discarding, newline) {
                (true, Some(offset)) => {
                    buf.advance(self.scanned + offset + 1);
                    self.scanned = 0;
                    self.discarding = false;
                    return Ok(Some(Frame::TooLong { limit: self.max }));
                }
                (true, None) => {
                    buf.clear();
                    self.scanned = 0;
                    return Ok(None);
                }
                (false, Some(offset)) => {
                    let end = self.scanned + offset;
                    self.scanned = 0;
                    if end > self.max {
                        buf.advance(end + 1);
                        return Ok(Some(Frame::TooLong { limit: self.max }));
                    }
                    let mut line = buf.split_to(end + 1);
                    line.truncate(end);
                    if line.last() == Some(&b'\r') {
                        line.truncate(end - 1);
                    }
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    return Ok(Some(Frame::Line(line)));
                }
                (false, None) => {
                    if buf.len() > self.max {
                        self.discarding = true;
                        buf.clear();
                        self.scanned = 0;
                    } else {
                        self.scanned = buf.len();
                    }
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        if let Some(frame) = self.decode(buf)? {
            return Ok(Some(frame));
        }
        if self.discarding {
            self.discarding = false;
            buf.clear();
            return Ok(Some(Frame::TooLong { limit: self.max }));
        }
        // A last line without a trailing newline still counts.
        self.scanned = 0;
        let line = buf.split();
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        Ok(Some(Frame::Line(line)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(codec: &mut LineCodec, buf: &mut BytesMut, bytes: &[u8]) -> Vec<Frame> {
        buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(frame) = codec.decode(buf).unwrap() {
            out.push(frame);
        }
        out
    }

    fn line(s: &str) -> Frame {
        Frame::Line(BytesMut::from(s))
    }

    #[test]
    fn splits_lines_and_skips_blank_ones() {
        let mut codec = LineCodec::with_max(64);
        let mut buf = BytesMut::new();
        let frames = feed(&mut codec, &mut buf, b"a\n\n  \r\nb\r\nc");
        assert_eq!(frames, vec![line("a"), line("b")]);
        let frames = feed(&mut codec, &mut buf, b"d\n");
        assert_eq!(frames, vec![line("cd")]);
        assert_eq!(codec.decode_eof(&mut buf).unwrap(), None);
    }

    #[test]
    fn over_long_line_is_reported_once_and_skipped_without_buffering() {
        let mut codec = LineCodec::with_max(8);
        let mut buf = BytesMut::new();
        assert!(feed(&mut codec, &mut buf, b"0123456789").is_empty());
        assert!(buf.is_empty(), "the over-long prefix must not be kept");
        assert!(feed(&mut codec, &mut buf, b"0123456789").is_empty());
        let frames = feed(&mut codec, &mut buf, b"xx\nok\n");
        assert_eq!(frames, vec![Frame::TooLong { limit: 8 }, line("ok")]);
    }

    #[test]
    fn over_long_line_in_one_chunk() {
        let mut codec = LineCodec::with_max(4);
        let mut buf = BytesMut::new();
        let frames = feed(&mut codec, &mut buf, b"123456\n1234\n");
        assert_eq!(frames, vec![Frame::TooLong { limit: 4 }, line("1234")]);
    }

    #[test]
    fn last_line_without_newline_at_eof() {
        let mut codec = LineCodec::with_max(64);
        let mut buf = BytesMut::from("tail");
        assert_eq!(codec.decode(&mut buf).unwrap(), None);
        assert_eq!(codec.decode_eof(&mut buf).unwrap(), Some(line("tail")));
    }
}
