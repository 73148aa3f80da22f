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

use std::sync::OnceLock;

use regex::Regex;

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

pub struct Tokenizer {
    /// Byte offsets into `bytes`; token `r` is `bytes[offsets[r]..offsets[r + 1]]`.
    offsets: &'static [u8],
    bytes: &'static [u8],
    /// Open addressing: each slot holds a rank (4 bytes, little-endian), or `EMPTY`.
    slots: &'static [u8],
    mask: u64,
    regex: Regex,
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
        let mut total = 0;
        let mut rest = text;
        while let Some(found) = self.regex.find(rest) {
            let mut end = found.end();
            let piece = found.as_str();
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
        let mut total = 0;
        let mut rest = piece;
        while !rest.is_empty() {
            let mut cut = rest.len().min(MAX_PIECE);
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            total += self.merge(&rest.as_bytes()[..cut]);
            rest = &rest[cut..];
        }
        total
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
            "src/engine/turn.rs",
            "src/engine/session.rs",
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
    }
}
