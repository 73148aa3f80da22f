//! Entry points of the daemon's fuzz targets (`fuzz/`, see `docs/reliability.md`), and
//! the replay of their committed corpora in this crate's tests. Compiled only for tests
//! and with the `fuzzing` feature, so the crate's API stays as it is.
//!
//! Each entry point takes the fuzzer's bytes and panics when a property fails.

use bytes::BytesMut;
use tokio_util::codec::Decoder;

use crate::framing::{Frame, LineCodec};
use crate::protocol::DaemonOpName;
use crate::wire::{self, Routed};

/// Cuts a fuzz input into the reads a socket could deliver: the first byte says how
/// (`0xff`: one byte a read; otherwise `n = b % 8` reads of the lengths the next `n`
/// bytes give, then the rest in one). The same rule as `jucode::fuzzing::chunks`, so
/// both crates read a corpus file alike.
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

/// The frames a connection's reader makes of `reads`, as `read_loop` decodes them.
fn frames(mut codec: LineCodec, reads: &[&[u8]]) -> Vec<Frame> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for read in reads {
        buf.extend_from_slice(read);
        while let Ok(Some(frame)) = codec.decode(&mut buf) {
            out.push(frame);
        }
    }
    while let Ok(Some(frame)) = codec.decode_eof(&mut buf) {
        out.push(frame);
    }
    out
}

/// A small line limit, so that inputs of a few kilobytes reach the over-long paths.
const SMALL_LIMIT: usize = 64;

/// The daemon's frame reader and router: any bytes, cut into any reads, give the same
/// frames as in one read (with the protocol's limit and with a small one); every line is
/// a line (no newline in it, not blank, within the limit); routing any line decides
/// without panicking, and names a daemon op only for the daemon's own.
pub fn frames_and_routes(data: &[u8]) {
    let reads = chunks(data);
    let whole = reads.concat();
    for limit in [None, Some(SMALL_LIMIT)] {
        let codec = || limit.map_or_else(LineCodec::new, LineCodec::with_max);
        let cut = frames(codec(), &reads);
        assert_eq!(
            cut,
            frames(codec(), &[&whole]),
            "frames depend on the reads"
        );
        for frame in &cut {
            match frame {
                Frame::Line(line) => {
                    assert!(!line.contains(&b'\n'), "a line holds a newline");
                    assert!(!line.iter().all(u8::is_ascii_whitespace), "a blank line");
                    assert!(line.len() <= limit.unwrap_or(crate::framing::MAX_LINE_BYTES));
                    route(line);
                }
                Frame::TooLong { limit: reported } => {
                    assert_eq!(*reported, limit.unwrap_or(crate::framing::MAX_LINE_BYTES))
                }
            }
        }
    }
}

fn route(line: &[u8]) {
    match wire::route(line) {
        // An object naming `op` or `session` twice is refused too: which one it means
        // is not for the daemon to guess.
        Routed::Unroutable(wire::Unroutable::Invalid(err))
            if err.to_string().starts_with("duplicate field") => {}
        Routed::Unroutable(_) => assert!(!is_json_object(line)),
        Routed::BadSession => {}
        Routed::Daemon(Ok(_)) => assert!(is_json_object(line)),
        Routed::Daemon(Err(message)) => assert!(message.starts_with("invalid "), "{message}"),
        Routed::Session { op: Some(op), .. } => {
            let daemon_op = serde_json::from_value::<DaemonOpName>(op.clone().into()).is_ok();
            assert!(!daemon_op, "the daemon's op {op} was sent to a session");
        }
        Routed::Session { op: None, .. } => {}
    }
}

fn is_json_object(line: &[u8]) -> bool {
    matches!(
        serde_json::from_slice::<serde_json::Value>(line),
        Ok(serde_json::Value::Object(_))
    )
}

#[cfg(test)]
mod tests {
    /// Every committed corpus file of the daemon's target, through the same entry point
    /// as the fuzzer (`cargo test` replays them on stable).
    #[test]
    fn the_committed_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/daemon_frames");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).expect("the daemon_frames corpus") {
            let path = entry.expect("a corpus entry").path();
            super::frames_and_routes(&std::fs::read(&path).expect("a corpus file"));
            count += 1;
        }
        assert!(count > 0, "no corpus files in {}", dir.display());
    }

    #[test]
    fn chunks_cover_the_payload() {
        assert_eq!(super::chunks(b""), Vec::<&[u8]>::new());
        assert_eq!(super::chunks(b"\xffab"), vec![&b"a"[..], b"b"]);
        assert_eq!(
            super::chunks(b"\x02\x00\x01abcdef"),
            vec![&b"a"[..], b"bc", b"def"]
        );
    }
}
