//! `jucode acp`: the Agent Client Protocol (stable version 1) on stdio, translated to
//! serve-protocol sessions.
//!
//! stdin carries JSON-RPC 2.0 messages, one a line; stdout carries only ACP; logs go to
//! stderr. Sessions run in the daemon by default (each on a link of its own, see
//! `link`), or in this process with `--in-process`. The ACP `sessionId` is the
//! session's id (`startup.session_id`, the daemon's `session`), so `jucode serve
//! --session <id>` attaches to a session an editor started.
//!
//! # Layout
//! - this file: the stdio threads (bounded line framing in, one writer out) and [`run`].
//! - `connection`: the ACP dialect of the peers' core (`transport::peer::core`): its
//!   methods and notifications, listing, prompts, answers to file and terminal requests.
//! - `session`: what an ACP session adds: the prompt being answered, its barriers, how
//!   its translated events reach the editor.
//!
//! One task owns all of a connection's state (the core's loop) and reacts to three
//! sources in turn: client messages, the sessions' events, and the results of work done
//! elsewhere (opening a link, listing, decoding attachments). No lock, and nothing waits
//! inside a handler but for room in the bounded output.

mod connection;
mod mcp;
mod params;
mod session;

use std::path::PathBuf;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::protocol::Frame;
use crate::transport::link::Backend;

/// Client messages read but not yet handled.
const INPUT_QUEUE: usize = 64;
/// Messages for the client not yet written.
const OUTPUT_QUEUE: usize = 1024;

/// Serves ACP on this process's stdio until stdin ends. Returns the exit code.
pub fn run(backend: Backend, attachments: PathBuf) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("jucode-acp")
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("jucode: cannot start: {err}");
            return 1;
        }
    };
    let (frames_tx, frames) = mpsc::channel(INPUT_QUEUE);
    let (out, lines) = mpsc::channel(OUTPUT_QUEUE);
    let writer = super::stdio::spawn_writer_of(std::io::stdout(), None, lines, |line: &Bytes| {
        Some(&line[..])
    });
    spawn_reader(frames_tx);
    let in_process = matches!(backend, Backend::InProcess(_));
    runtime.block_on(async move {
        connection::run(backend, out, attachments, frames).await;
        if in_process {
            // The sessions ended with their links; their files finish writing.
            crate::sessions::flush_all(std::time::Duration::from_secs(10)).await;
        }
    });
    drop(runtime);
    let _ = writer.join();
    0
}

/// A connection fed `frames` as stdin would bring them, its sessions in a daemon that is
/// not there (`socket`); every message it writes goes to `out`. For the fuzz targets
/// (`crate::fuzzing`): the real dispatch of any client messages, with no process.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) async fn serve_frames(frames: Vec<Frame>, out: mpsc::Sender<Bytes>, socket: PathBuf) {
    let (frames_tx, frames_rx) = mpsc::channel(INPUT_QUEUE);
    let feed = tokio::spawn(async move {
        for frame in frames {
            if frames_tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    let backend = Backend::Daemon {
        socket: socket.clone(),
        start: false,
    };
    connection::run(backend, out, socket, frames_rx).await;
    let _ = feed.await;
}

/// Reads stdin on its own thread: bounded lines, so one huge line costs at most the
/// limit and is answered with an error instead of ending the connection.
fn spawn_reader(frames: mpsc::Sender<Frame>) {
    let spawned = std::thread::Builder::new()
        .name("acp-stdin".into())
        .spawn(move || {
            crate::transport::stdio::read_frames(std::io::stdin().lock(), |frame| {
                frames.blocking_send(frame).is_ok()
            });
        });
    if let Err(err) = spawned {
        eprintln!("jucode: cannot start the stdin reader: {err}");
    }
}
