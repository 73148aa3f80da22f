//! The committed corpora (`fuzz/corpus/<target>/`), replayed through the same entry
//! points as the fuzzer, so `cargo test` on stable checks every input the fuzzer kept
//! (crashes it found are among them, as well as tests of their own).

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("the corpus {}: {err}", dir.display()))
        .map(|entry| {
            let path = entry.expect("a corpus entry").path();
            let bytes = std::fs::read(&path).expect("a corpus file");
            (path, bytes)
        })
        .collect();
    assert!(!files.is_empty(), "no corpus files in {}", dir.display());
    files.sort();
    files
}

fn replay(target: &str, run: impl Fn(&[u8])) {
    for (path, bytes) in corpus(target) {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&bytes)));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
    }
}

#[test]
fn serve_ops() {
    replay("serve_ops", super::serve_ops);
}

#[test]
fn chat_stream() {
    replay("chat_stream", super::chat_stream);
}

#[test]
fn messages_stream() {
    replay("messages_stream", super::messages_stream);
}

#[test]
fn responses_stream() {
    replay("responses_stream", super::responses_stream);
}

#[test]
fn acp_messages() {
    replay("acp_messages", super::acp_messages);
}

#[test]
fn websocket() {
    replay("websocket", super::websocket);
}

#[test]
fn session_file() {
    replay("session_file", super::session_file);
}

#[test]
fn config() {
    replay("config", super::config);
}

#[test]
fn edit_hunks() {
    replay("edit_hunks", super::edit_hunks);
}

#[test]
fn shell_class() {
    replay("shell_class", |bytes| {
        let _ = super::shell_class(bytes);
        let _ = super::shell_differential(bytes);
    });
}
