//! Serve protocol v2 on this process's stdin/stdout, with the engine in process.
//!
//! Both directions run on dedicated OS threads with plain blocking I/O: stdin and
//! stdout are pipes to one client, and a thread per direction is cheaper and faster than
//! tokio's stdio wrappers, which hand every read and write to the blocking pool. The
//! writer drains every line that is ready, writes them in one go and flushes before it
//! waits again, so no line ever sits in a buffer while the engine is idle, and a burst
//! of deltas costs one syscall rather than one per line.

use std::io::{Read, Write};
use std::thread::JoinHandle;

use bytes::BytesMut;
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;

use crate::engine::{Input, Outbound, SOLE_CLIENT};
use crate::protocol::{EventLine, Frame, LineCodec, parse_op};

/// Writes `text` to stdout and flushes: what every command that prints a result
/// (`schema`, `sessions`, `daemon status`) prints through. A reader that stopped
/// reading (`jucode schema | head`) is not a failure of the command: the rest of its
/// output was simply not wanted, so a closed pipe is `Ok` and the command exits 0
/// without a word. (Rust ignores SIGPIPE, so a closed pipe is an `EPIPE` here, and
/// `println!` would panic on it.)
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Starts the stdout writer thread of `serve` and `--headless`; `first` (the `hello`
/// line) is written and flushed before anything else. One client, attached from the
/// first line: snapshots are for late joiners of daemon sessions and never asked for
/// here, so only lines are written.
pub(super) fn spawn_writer<W: Write + Send + 'static>(
    out: W,
    first: EventLine,
    lines: mpsc::Receiver<Outbound>,
) -> JoinHandle<()> {
    spawn_writer_of(out, Some(first), lines, |item| match item {
        Outbound::Line(line) | Outbound::Status { line, .. } | Outbound::Reply { line, .. } => {
            Some(line)
        }
        Outbound::Snapshot { .. } | Outbound::Barrier { .. } => None,
    })
}

/// The one stdout writer of every stdio transport (`serve`, `--headless`, `acp`): a
/// thread that writes every item that is ready (its bytes, per `bytes`) in one go and
/// flushes before it waits again, so nothing sits in a buffer while the peer is idle
/// and a burst costs one write. It ends once every sender is dropped and all is out, or
/// when stdout is closed.
pub(super) fn spawn_writer_of<T: Send + 'static, W: Write + Send + 'static>(
    out: W,
    first: Option<EventLine>,
    mut items: mpsc::Receiver<T>,
    bytes: fn(&T) -> Option<&[u8]>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("stdout-writer".into())
        .spawn(move || {
            let mut out = std::io::BufWriter::with_capacity(64 * 1024, out);
            let write = |out: &mut std::io::BufWriter<W>, item: T| match bytes(&item) {
                Some(line) => out.write_all(line),
                None => Ok(()),
            };
            let result = (|| -> std::io::Result<()> {
                if let Some(first) = first {
                    out.write_all(&first)?;
                    out.flush()?;
                }
                while let Some(item) = items.blocking_recv() {
                    write(&mut out, item)?;
                    while let Ok(item) = items.try_recv() {
                        write(&mut out, item)?;
                    }
                    out.flush()?;
                }
                Ok(())
            })();
            if let Err(err) = result {
                tracing::debug!(%err, "stdout closed");
            }
        })
        .unwrap_or_else(|err| fatal_thread(err))
}

/// Starts the stdin reader thread: decodes lines, parses ops and forwards them to the
/// session in order. Ends at EOF (dropping the sender, which ends the session) or when
/// the session is gone.
fn spawn_reader<R: Read + Send + 'static>(input: R, inputs: mpsc::Sender<Input>) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("stdin-reader".into())
        .spawn(move || read_inputs(input, &inputs))
        .unwrap_or_else(|err| fatal_thread(err))
}

fn read_inputs<R: Read>(input: R, inputs: &mpsc::Sender<Input>) {
    read_frames(input, |frame| {
        inputs.blocking_send(frame_to_input(frame)).is_ok()
    });
}

/// Reads `input` to its end as lines (`LineCodec`: bounded, a too-long line reported
/// once), handing each frame to `deliver` until it returns false. A read error counts
/// as the end of input. Shared by every stdio transport (serve, acp).
pub(crate) fn read_frames<R: Read>(mut input: R, mut deliver: impl FnMut(Frame) -> bool) {
    let mut codec = LineCodec::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let read = match input.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::warn!(%err, "stdin read failed; treating it as end of input");
                break;
            }
        };
        buf.extend_from_slice(&chunk[..read]);
        while let Ok(Some(frame)) = codec.decode(&mut buf) {
            if !deliver(frame) {
                return;
            }
        }
    }
    while let Ok(Some(frame)) = codec.decode_eof(&mut buf) {
        if !deliver(frame) {
            return;
        }
    }
}

fn frame_to_input(frame: Frame) -> Input {
    let client = SOLE_CLIENT;
    match frame {
        Frame::Line(line) => match parse_op(&line) {
            Ok(op) => Input::Op { client, op },
            Err(message) => Input::Malformed { client, message },
        },
        Frame::TooLong { limit } => Input::Malformed {
            client,
            message: format!(
                "invalid command: line longer than {} MiB was skipped",
                limit / (1024 * 1024)
            ),
        },
    }
}

/// Runs one in-process session on stdin/stdout until `shutdown`, `/quit`, `/exit` or
/// EOF. `hello` is on stdout before the profile is even read, so a front-end sees the
/// process is alive within a millisecond or two of starting it. Returns the exit code:
/// 0, or 2 when the saved session asked for cannot be continued (an `error` event says
/// why).
pub fn serve_in_process(
    profile: crate::config::Profile,
    options: crate::host::SessionOptions,
) -> std::io::Result<u8> {
    let (events, lines) = mpsc::channel(crate::engine::EVENT_QUEUE);
    let writer = spawn_writer(std::io::stdout(), crate::protocol::hello_line(), lines);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("jucode-engine")
        .build()?;
    let code = runtime.block_on(async move {
        let params = match crate::host::build_session(&profile, options) {
            Ok(params) => params,
            Err(message) => {
                let line = crate::protocol::DaemonEvent::error(message, None).line();
                let _ = events.send(Outbound::Line(line)).await;
                return 2;
            }
        };
        let session = crate::engine::spawn(params, events);
        let _reader = spawn_reader(std::io::stdin(), session.inputs);
        if let Err(err) = session.task.await {
            tracing::error!(%err, "session task failed");
        }
        // The session file's writer finishes what it was given before the process
        // exits (bounded: a hung disk does not hang the exit).
        crate::sessions::flush_all(std::time::Duration::from_secs(10)).await;
        0
    });
    // Dropping the runtime drops every task, and with them every event sender, so the
    // writer drains what is left and ends.
    drop(runtime);
    let _ = writer.join();
    Ok(code)
}

fn fatal_thread(err: std::io::Error) -> ! {
    eprintln!("jucode: cannot start an I/O thread: {err}");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Op;

    #[test]
    fn reader_forwards_ops_and_errors_in_order() {
        let (tx, mut rx) = mpsc::channel(16);
        let text = "{\"op\":\"shutdown\"}\n\nnot json\n{\"op\":\"agent_runs\"}\n[\"shutdown\"]";
        read_inputs(text.as_bytes(), &tx);
        drop(tx);
        let mut got = Vec::new();
        while let Some(input) = rx.blocking_recv() {
            got.push(input);
        }
        assert!(matches!(
            got[0],
            Input::Op {
                op: Op::Shutdown,
                ..
            }
        ));
        assert!(
            matches!(&got[1], Input::Malformed { message, .. } if message.starts_with("invalid command:"))
        );
        assert!(matches!(
            got[2],
            Input::Op {
                op: Op::AgentRuns,
                ..
            }
        ));
        assert!(
            matches!(&got[3], Input::Malformed { message, .. } if message.starts_with("invalid command: expected a JSON object"))
        );
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn writer_puts_first_line_first() {
        #[derive(Clone, Default)]
        struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Shared::default();
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Outbound::Line(EventLine::from_static(b"b\n")))
            .unwrap();
        drop(tx);
        spawn_writer(sink.clone(), EventLine::from_static(b"a\n"), rx)
            .join()
            .unwrap();
        assert_eq!(&sink.0.lock().unwrap()[..], b"a\nb\n");
    }
}
