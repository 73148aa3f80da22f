//! Counting o200k tokens in a few MiB.
//!
//! `tiktoken-rs` keeps the 200k-token vocabulary in several hash maps of small `Vec`s:
//! about 50 MiB resident and 80 ms to build, more than the whole rest of a session. This
//! module counts the same tokens from a compact table generated at build time from
//! `tiktoken-rs` itself (`build.rs`): the token bytes live in the binary's read-only
//! data, and the only heap structure is one open-addressing table of `u32` ranks (1 MiB).
//! The unit tests check it against `tiktoken-rs` token for token.
//!
//! The algorithm is tiktoken's: split the text with the o200k pre-tokenizer pattern,
//! then merge each piece's bytes pairwise, lowest rank first. The pattern's one
//! look-ahead branch (`\s+(?!\S)`) is not supported by the `regex` crate and is emulated:
//! a whitespace run followed by a non-space character gives up its last character to
//! the next piece.

use std::sync::{Mutex, OnceLock, PoisonError};

use regex_automata::Input;
use regex_automata::meta::{Cache, Regex};

static TABLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k.bin"));
/// The rank lookup table, built by `build.rs` (see [`slot_of`]): `u32` ranks, `EMPTY`
/// where no token hashes.
static SLOTS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k-slots.bin"));

/// The o200k pre-tokenizer, minus the look-ahead branch (see the module docs).
const PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+",
);

/// Pieces longer than this are merged in windows of this size. BPE merging is
/// quadratic in the piece length, and a single "word" of megabytes (a base64 blob in a
/// tool output) would otherwise stall the count; tokens never span such windows in
/// practice, so counts stay within a token or two of exact.
const MAX_PIECE: usize = 1024;

/// Pieces longer than this are estimated from [`SAMPLES`] windows instead of merged
/// whole: even in windows, merging costs about `MAX_PIECE` steps a byte, and an 8 MiB
/// blob would hold a thread for seconds.
const SAMPLED_PIECE: usize = 16 * MAX_PIECE;
const SAMPLES: usize = 16;

/// The largest char boundary of `text` at or below `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

pub struct Tokenizer {
    /// Byte offsets into `bytes`; token `r` is `bytes[offsets[r]..offsets[r + 1]]`.
    offsets: &'static [u8],
    bytes: &'static [u8],
    /// Open addressing: each slot holds a rank (4 bytes, little-endian), or `EMPTY`.
    slots: &'static [u8],
    mask: u64,
    regex: Regex,
    /// The matcher's search caches (its lazily built DFA states), shared by every
    /// thread. `regex::Regex` keeps one per thread, so the warm-up's states served only
    /// the warm-up thread, and a session's first count on its own thread built them
    /// again (about 12 ms at a first turn's end). One cache per concurrent count.
    caches: Mutex<Vec<Cache>>,
}

const EMPTY: u32 = u32::MAX;

/// The shared tokenizer, built on first use (compiling its pattern: a few
/// milliseconds; its tables are static).
pub fn tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(Tokenizer::load)
}

impl Tokenizer {
    fn load() -> Self {
        let count = read_u32(TABLE, 0) as usize;
        let offsets = &TABLE[4..4 + (count + 1) * 4];
        let bytes = &TABLE[4 + (count + 1) * 4..];
        // A load factor of about 0.76 (200k tokens in 2^18 slots): 1 MiB, and short probes.
        let capacity = SLOTS.len() / 4;
        Self {
            offsets,
            bytes,
            slots: SLOTS,
            mask: capacity as u64 - 1,
            // The pattern is a constant known to compile; tests cover it.
            regex: Regex::new(PATTERN).unwrap_or_else(|err| panic!("o200k pattern: {err}")),
            caches: Mutex::new(Vec::new()),
        }
    }

    fn token(&self, rank: u32) -> &'static [u8] {
        let start = read_u32(self.offsets, rank as usize * 4) as usize;
        let end = read_u32(self.offsets, rank as usize * 4 + 4) as usize;
        &self.bytes[start..end]
    }

    fn rank(&self, piece: &[u8]) -> Option<u32> {
        let mut slot = slot_of(piece, self.mask);
        loop {
            let rank = read_u32(self.slots, slot * 4);
            if rank == EMPTY {
                return None;
            }
            if self.token(rank) == piece {
                return Some(rank);
            }
            slot = (slot + 1) & self.mask as usize;
        }
    }

    /// The number of o200k tokens in `text` (special tokens are not recognised: they
    /// count as the ordinary text they are made of, like `encode_ordinary`).
    pub fn count(&self, text: &str) -> usize {
        let pooled = self
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut cache = pooled.unwrap_or_else(|| self.regex.create_cache());
        let total = self.count_with(&mut cache, text);
        self.caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(cache);
        total
    }

    fn count_with(&self, cache: &mut Cache, text: &str) -> usize {
        let mut total = 0;
        let mut rest = text;
        while let Some(found) = self.regex.search_with(cache, &Input::new(rest)) {
            let mut end = found.end();
            let piece = &rest[found.start()..end];
            // Emulate `\s+(?!\S)`: a whitespace run of two or more characters that is
            // followed by a non-space gives its last character to the next piece.
            if piece.chars().all(char::is_whitespace)
                && !piece.ends_with(['\r', '\n'])
                && rest[end..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_whitespace())
                && let Some((last, _)) = piece.char_indices().last()
                && last > 0
            {
                end = found.start() + last;
            }
            total += self.count_piece(&rest[found.start()..end]);
            rest = &rest[end..];
        }
        total
    }

    fn count_piece(&self, piece: &str) -> usize {
        if self.rank(piece.as_bytes()).is_some() {
            return 1;
        }
        if piece.len() > SAMPLED_PIECE {
            return self.estimate_piece(piece);
        }
        let mut total = 0;
        let mut rest = piece;
        while !rest.is_empty() {
            let cut = floor_boundary(rest, MAX_PIECE);
            total += self.merge(&rest.as_bytes()[..cut]);
            rest = &rest[cut..];
        }
        total
    }

    /// A piece of more than [`SAMPLED_PIECE`] bytes (a blob with no space in it: base64,
    /// minified data): [`SAMPLES`] windows spread evenly over it are merged, and their
    /// tokens per byte scale to its length. Such a blob is uniform enough for this to
    /// stay within a few percent, and counting it costs the same at 20 KiB and at 8 MiB.
    fn estimate_piece(&self, piece: &str) -> usize {
        let stride = piece.len() / SAMPLES;
        let (mut bytes, mut tokens) = (0usize, 0usize);
        for n in 0..SAMPLES {
            let start = floor_boundary(piece, n * stride);
            let window = &piece[start..];
            let window = &window[..floor_boundary(window, MAX_PIECE)];
            bytes += window.len();
            tokens += self.merge(window.as_bytes());
        }
        if bytes == 0 {
            return 0;
        }
        let estimate = tokens as u128 * piece.len() as u128 / bytes as u128;
        usize::try_from(estimate).unwrap_or(usize::MAX).max(1)
    }

    /// tiktoken's byte-pair merge; returns how many tokens the piece becomes.
    fn merge(&self, piece: &[u8]) -> usize {
        if piece.len() <= 1 {
            return piece.len();
        }
        // (start, rank of the pair starting here)
        let mut parts: Vec<(usize, u32)> = Vec::with_capacity(piece.len() + 1);
        for i in 0..piece.len() - 1 {
            parts.push((i, self.rank(&piece[i..i + 2]).unwrap_or(u32::MAX)));
        }
        parts.push((piece.len() - 1, u32::MAX));
        parts.push((piece.len(), u32::MAX));
        let rank_at = |parts: &[(usize, u32)], i: usize| -> u32 {
            if i + 3 < parts.len() {
                self.rank(&piece[parts[i].0..parts[i + 3].0])
                    .unwrap_or(u32::MAX)
            } else {
                u32::MAX
            }
        };
        loop {
            let (i, min) = parts[..parts.len() - 1]
                .iter()
                .enumerate()
                .min_by_key(|(_, (_, rank))| *rank)
                .map(|(i, (_, rank))| (i, *rank))
                .unwrap_or((0, u32::MAX));
            if min == u32::MAX {
                break;
            }
            if i > 0 {
                parts[i - 1].1 = rank_at(&parts, i - 1);
            }
            parts[i].1 = rank_at(&parts, i);
            parts.remove(i + 1);
        }
        parts.len() - 1
    }
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// A token's first slot. FNV-1a: short keys (most tokens are under 8 bytes) and no need
/// for DoS resistance, since the table is fixed at build time. `build.rs` computes the
/// same (it builds the table).
fn slot_of(bytes: &[u8], mask: u64) -> usize {
    let hash = fnv1a(bytes);
    ((hash ^ (hash >> 32)) & mask) as usize
}

/// 64-bit FNV-1a, for the engine's small non-adversarial hashes.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(text: &str) -> usize {
        tiktoken_rs::o200k_base_singleton()
            .encode_ordinary(text)
            .len()
    }

    #[test]
    fn matches_tiktoken_on_varied_text() {
        let samples = [
            "",
            "hello world",
            "Hello, World! It's a test; we'll see what's what.",
            "  leading spaces and   inner   runs  \n\n   trailing   ",
            "fn main() {\n    println!(\"hi {}\", 42);\n}\n",
            "tabs\tand\r\nCRLF\r\n\r\n  indented\n\t\tmore",
            "numbers 1234567 3.14159 1,000,000 0xDEADBEEF",
            "unicode: naïve café — 東京タワー 🚀🚀 Ünïcödé ΑΒΓ привет",
            "CamelCaseIdentifier snake_case_identifier SCREAMING_CASE",
            "path/to/file.rs:12:34 https://example.com/a?b=c&d=e",
            "   \n",
            "x    ",
            "a \u{a0} b\u{3000}c",
            "<|endoftext|> is ordinary text here",
            "I'M SHOUTING, THEY'RE LOUD, we've been there, you'd know",
        ];
        let tokenizer = tokenizer();
        for sample in samples {
            assert_eq!(tokenizer.count(sample), reference(sample), "{sample:?}");
        }
    }

    #[test]
    fn matches_tiktoken_on_this_crates_sources() {
        let tokenizer = tokenizer();
        for path in [
            "src/engine/turn/mod.rs",
            "src/engine/session/mod.rs",
            "docs/serve-protocol.md",
        ] {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            assert_eq!(tokenizer.count(&text), reference(&text), "{path}");
        }
    }

    #[test]
    fn matches_tiktoken_on_generated_mixtures() {
        // A fixed xorshift sequence over an alphabet chosen to hit every pattern branch:
        // case changes, contractions, digit runs, punctuation, all kinds of whitespace.
        let alphabet: Vec<char> =
            "aZ'sT 0123456789  \t\n\r.,;:!?/-_()[]{}\"'éÖßж東🚀\u{a0}\u{2003}"
                .chars()
                .collect();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let tokenizer = tokenizer();
        for _ in 0..300 {
            let len = 1 + (state % 60) as usize;
            let text: String = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    alphabet[(state % alphabet.len() as u64) as usize]
                })
                .collect();
            assert_eq!(tokenizer.count(&text), reference(&text), "{text:?}");
        }
    }

    #[test]
    fn huge_pieces_count_quickly_and_nearly_exactly() {
        let blob = "QUJD".repeat(50_000);
        let ours = tokenizer().count(&blob) as f64;
        let exact = reference(&blob) as f64;
        assert!((ours - exact).abs() / exact < 0.01, "{ours} vs {exact}");
        // Varied base64 (bytes of a pseudo-random sequence), sampled rather than merged.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let varied: String = (0..100_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                alphabet[(state % 64) as usize] as char
            })
            .collect();
        let ours = tokenizer().count(&varied) as f64;
        let exact = reference(&varied) as f64;
        assert!((ours - exact).abs() / exact < 0.05, "{ours} vs {exact}");
    }

    #[test]
    fn a_blob_of_megabytes_is_counted_without_merging_it_all() {
        // Merged whole (even in 1 KiB windows) this took minutes in a debug build.
        let blob = "x".repeat(8 << 20);
        let count = tokenizer().count(&blob);
        assert!(count > 0 && count < blob.len() / 2, "{count}");
        let multibyte = "é".repeat(1 << 20);
        assert!(tokenizer().count(&multibyte) > 0);
    }
}
