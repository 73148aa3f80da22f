//! Extracts the o200k vocabulary from `tiktoken-rs` into a compact table the engine
//! embeds (see `src/engine/o200k.rs` for why it does not use `tiktoken-rs` at run time).
//!
//! Layout of `$OUT_DIR/o200k.bin`, little-endian: token count `n` (u32), then `n + 1`
//! byte offsets (u32), then the concatenated token bytes. Token `r` (its rank) is
//! `bytes[offsets[r]..offsets[r + 1]]`.

use std::io::Write;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let bpe = tiktoken_rs::o200k_base().expect("load o200k from tiktoken-rs");
    let mut tokens: Vec<Vec<u8>> = Vec::new();
    // Ordinary ranks are 0..n; the special tokens sit above them.
    while let Ok(bytes) = bpe.decode_bytes(&[tokens.len() as u32]) {
        if bytes.starts_with(b"<|") && bytes.ends_with(b"|>") && bytes.len() > 4 {
            break;
        }
        tokens.push(bytes);
    }
    assert!(
        tokens.len() > 199_000,
        "unexpected o200k size {}",
        tokens.len()
    );
    let mut out = Vec::new();
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    let mut offset = 0u32;
    out.extend_from_slice(&offset.to_le_bytes());
    for token in &tokens {
        offset += token.len() as u32;
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for token in &tokens {
        out.extend_from_slice(token);
    }
    let path = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("o200k.bin");
    std::fs::File::create(path)
        .and_then(|mut file| file.write_all(&out))
        .expect("write o200k table");
}
