//! Two things the binary embeds:
//!
//! - `JUCODE_BUILD_ID`: a hash of the sources the binary is built from (`src/`,
//!   `daemon/src/`, the manifests, the lock file, this file). The daemon announces it in
//!   `hello` and `daemon_status`, so a rebuilt `jucode` never hands its sessions to a
//!   daemon running other code under the same version string. A content hash rather
//!   than a timestamp: rebuilding the same sources gives the same id.
//! - `o200k.bin`: the o200k vocabulary from `tiktoken-rs` as a compact table (see
//!   `src/engine/conversation/o200k.rs` for why it does not use `tiktoken-rs` at run time). It
//!   depends on nothing in the tree, so it is built once per `OUT_DIR`.
//!
//! Layout of `$OUT_DIR/o200k.bin`, little-endian: token count `n` (u32), then `n + 1`
//! byte offsets (u32), then the concatenated token bytes. Token `r` (its rank) is
//! `bytes[offsets[r]..offsets[r + 1]]`.

use std::io::Write;

/// What the build id covers. Directories are read recursively.
const BUILD_INPUTS: &[&str] = &[
    "build.rs",
    "Cargo.toml",
    "Cargo.lock",
    "src",
    "daemon/Cargo.toml",
    "daemon/src",
];

fn main() {
    for input in BUILD_INPUTS {
        println!("cargo::rerun-if-changed={input}");
    }
    println!("cargo::rustc-env=JUCODE_BUILD_ID={}", build_id());
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let table = out_dir.join("o200k.bin");
    let slots = out_dir.join("o200k-slots.bin");
    if !table.exists() || !slots.exists() {
        write_o200k(&table, &slots);
    }
}

/// FNV-1a over every input file's relative path and contents, in sorted order.
fn build_id() -> String {
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let mut files = Vec::new();
    for input in BUILD_INPUTS {
        collect_files(&root, &root.join(input), &mut files);
    }
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &byte in bytes {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for (relative, path) in &files {
        feed(relative.as_bytes());
        feed(&[0]);
        feed(&std::fs::read(path).unwrap_or_default());
        feed(&[0]);
    }
    format!("{hash:016x}")
}

fn collect_files(
    root: &std::path::Path,
    path: &std::path::Path,
    out: &mut Vec<(String, std::path::PathBuf)>,
) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for entry in entries.flatten() {
            collect_files(root, &entry.path(), out);
        }
    } else if path.is_file() {
        let relative = path
            .strip_prefix(root)
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/");
        out.push((relative, path.to_owned()));
    }
}

fn write_o200k(path: &std::path::Path, slots_path: &std::path::Path) {
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
    // The rank lookup table, open addressing with linear probing over FNV-1a, exactly as
    // `src/engine/conversation/o200k.rs` probes it: built here so a process never spends
    // milliseconds hashing 200k tokens before its first count.
    let capacity = tokens.len().next_power_of_two();
    let mask = (capacity - 1) as u64;
    let mut slots = vec![u32::MAX; capacity];
    for (rank, token) in tokens.iter().enumerate() {
        let mut slot = slot_of(token, mask);
        while slots[slot] != u32::MAX {
            slot = (slot + 1) & mask as usize;
        }
        slots[slot] = rank as u32;
    }
    let slot_bytes: Vec<u8> = slots.iter().flat_map(|rank| rank.to_le_bytes()).collect();
    write_whole(slots_path, &slot_bytes);
    write_whole(path, &out);
}

/// The first slot of a token: must match `o200k::slot_of`.
fn slot_of(bytes: &[u8], mask: u64) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    ((hash ^ (hash >> 32)) & mask) as usize
}

/// Written aside and renamed, so an interrupted build never leaves a torn file that the
/// "built once" check would then keep.
fn write_whole(path: &std::path::Path, bytes: &[u8]) {
    let partial = path.with_extension("partial");
    std::fs::File::create(&partial)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&partial, path))
        .expect("write an o200k table");
}
