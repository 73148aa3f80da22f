//! A pseudo-terminal the daemon owns, with an engine's TUI running in it
//! (`surface terminal`): its output read on a thread of its own and handed to the
//! session in order, kept in a terminal emulator's model of the screen (`vt100`) for
//! late joiners, its input written on another thread, its size changed. The TUI runs in
//! a session of its own (so a process group of its own), which is killed when the
//! terminal is dropped, and by the reaper (`crate::reaper`) when the daemon dies: no
//! child outlives its session.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use tokio::sync::mpsc;

/// The size a terminal starts with when no client has said its own.
pub const DEFAULT_SIZE: (u16, u16) = (80, 24);
/// The largest terminal a client can ask for: it bounds the snapshot (a repaint of at
/// most this many cells).
pub const MAX_COLS: u16 = 500;
pub const MAX_ROWS: u16 = 200;
/// The most bytes one `term_output` carries (one read of the terminal): small enough
/// that the daemon's fan-out batch of them (256) stays far below a client's byte limit
/// above its pacing threshold, so a client that reads is never cut off by a burst.
const CHUNK: usize = 4 * 1024;
/// Output chunks read ahead of the session: a full queue stops reading, so the TUI
/// waits on its writes rather than memory growing.
const OUTPUT_QUEUE: usize = 64;
/// Input chunks waiting to be written; more are refused.
const INPUT_QUEUE: usize = 256;

/// A size within the bounds: at least 2 x 1, at most [`MAX_COLS`] x [`MAX_ROWS`].
pub fn clamp(cols: u16, rows: u16) -> (u16, u16) {
    (cols.clamp(2, MAX_COLS), rows.clamp(1, MAX_ROWS))
}

/// What to run on the terminal.
pub struct Spec {
    pub command: String,
    pub args: Vec<String>,
    pub env: HashMap<String, String>,
    pub cwd: PathBuf,
    pub cols: u16,
    pub rows: u16,
}

/// What the terminal reports to its session.
#[derive(Debug)]
pub enum Report {
    /// Bytes the TUI wrote, in order.
    Output(Bytes),
    /// The TUI exited and all its output was reported; how it exited.
    Exited(String),
}

pub struct Terminal {
    pub id: String,
    cols: u16,
    rows: u16,
    /// Chunks reported so far (the `seq` of the last `term_output`).
    seq: u64,
    screen: vt100::Parser,
    /// In a mutex only so that the terminal is `Sync` (the session is shared across
    /// its awaits); only the session task uses it.
    master: std::sync::Mutex<Box<dyn portable_pty::MasterPty + Send>>,
    input: std::sync::mpsc::SyncSender<Keys>,
    reports: mpsc::Receiver<Report>,
    /// The TUI's process group (it is a session leader).
    group: Option<Pid>,
}

impl Terminal {
    /// Starts `spec` on a new terminal. `Err` says why, for the client.
    pub fn start(spec: Spec) -> Result<Terminal, String> {
        let (cols, rows) = clamp(spec.cols, spec.rows);
        let pty = native_pty_system();
        let pair = pty
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|err| format!("cannot open a terminal: {err}"))?;
        let mut command = CommandBuilder::new(&spec.command);
        command.args(&spec.args);
        command.env_clear();
        for (name, value) in &spec.env {
            command.env(name, value);
        }
        command.env("TERM", "xterm-256color");
        command.env("COLORTERM", "truecolor");
        command.cwd(&spec.cwd);
        let mut child = pair
            .slave
            .spawn_command(command)
            .map_err(|err| format!("cannot start `{}` on a terminal: {err}", spec.command))?;
        // Only the child holds the terminal's other side: its output ends with it.
        drop(pair.slave);
        let group = child
            .process_id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw);
        // The TUI's group goes with jucode however it dies (one that ignores the
        // terminal's hang-up too); released by the waiter once it killed the group.
        let watch = child.process_id().map(crate::reaper::watch);
        let opened = pair
            .master
            .try_clone_reader()
            .and_then(|reader| Ok((reader, pair.master.take_writer()?)))
            .map_err(|err| err.to_string());
        let (reader, writer) = match opened {
            Ok(opened) => opened,
            Err(err) => {
                if let Some(group) = group {
                    let _ = killpg(group, Signal::SIGKILL);
                }
                let _ = child.wait();
                return Err(format!("cannot use the terminal: {err}"));
            }
        };
        let (reports_tx, reports) = mpsc::channel(OUTPUT_QUEUE);
        let (exit_tx, exit_rx) = std::sync::mpsc::channel::<String>();
        // The waiter: once the TUI is gone, whatever it left in its group goes too, so
        // the terminal's other side closes and the reader sees the end.
        std::thread::Builder::new()
            .name("tui-wait".to_owned())
            .spawn(move || {
                let how = match child.wait() {
                    Ok(status) if status.success() => "exited with status 0".to_owned(),
                    Ok(status) => match status.signal() {
                        Some(signal) => format!("was ended by {signal}"),
                        None => format!("exited with status {}", status.exit_code()),
                    },
                    Err(err) => format!("could not be waited for ({err})"),
                };
                if let Some(group) = group {
                    let _ = killpg(group, Signal::SIGKILL);
                }
                drop(watch);
                let _ = exit_tx.send(how);
            })
            .map_err(|err| format!("cannot start the terminal's waiter: {err}"))?;
        std::thread::Builder::new()
            .name("tui-read".to_owned())
            .spawn(move || read_output(reader, reports_tx, exit_rx))
            .map_err(|err| format!("cannot start the terminal's reader: {err}"))?;
        let (input, input_rx) = std::sync::mpsc::sync_channel::<Keys>(INPUT_QUEUE);
        std::thread::Builder::new()
            .name("tui-write".to_owned())
            .spawn(move || write_input(writer, input_rx))
            .map_err(|err| format!("cannot start the terminal's writer: {err}"))?;
        Ok(Terminal {
            id: uuid::Uuid::now_v7().to_string(),
            cols,
            rows,
            seq: 0,
            screen: vt100::Parser::new(
                std::num::NonZeroU16::new(rows).unwrap_or(std::num::NonZeroU16::MIN),
                std::num::NonZeroU16::new(cols).unwrap_or(std::num::NonZeroU16::MIN),
                0,
            ),
            master: std::sync::Mutex::new(pair.master),
            input,
            reports,
            group,
        })
    }

    pub fn size(&self) -> (u16, u16) {
        (self.cols, self.rows)
    }

    /// The next report, for the session's loop (cancel-safe). `None`: nothing more.
    pub async fn report(&mut self) -> Option<Report> {
        self.reports.recv().await
    }

    /// Output reported to clients: into the screen's model, numbered. Returns its `seq`.
    pub fn shown(&mut self, data: &[u8]) -> u64 {
        self.screen.process(data);
        self.seq += 1;
        self.seq
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// An ANSI repaint of the screen as the output so far left it.
    pub fn repaint(&self) -> Vec<u8> {
        self.screen.screen().state_formatted().into_bytes()
    }

    /// Keys for the TUI. `Err` when too much input is waiting already.
    pub fn write(&self, data: Bytes) -> Result<(), String> {
        self.keys(Keys::Data(data))
    }

    /// Types `text` as a user would: what comes before its final Enter, a pause, then
    /// the Enter (a TUI reading all of it at once may take it for a paste).
    pub fn type_text(&self, text: &str) -> Result<(), String> {
        match text.rfind(['\r', '\n']) {
            Some(at) if at > 0 => {
                self.keys(Keys::Data(Bytes::copy_from_slice(&text.as_bytes()[..at])))?;
                self.keys(Keys::Pause(TYPING_PAUSE))?;
                self.keys(Keys::Data(Bytes::copy_from_slice(&text.as_bytes()[at..])))
            }
            _ => self.keys(Keys::Data(Bytes::copy_from_slice(text.as_bytes()))),
        }
    }

    fn keys(&self, keys: Keys) -> Result<(), String> {
        match self.input.try_send(keys) {
            Ok(()) => Ok(()),
            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                Err("the terminal is not reading its input: these keys were dropped".to_owned())
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => {
                Err("the terminal no longer takes input".to_owned())
            }
        }
    }

    /// Changes the size (the TUI gets `SIGWINCH`). False when it did not change.
    pub fn resize(&mut self, cols: u16, rows: u16) -> bool {
        let (cols, rows) = clamp(cols, rows);
        if (cols, rows) == (self.cols, self.rows) {
            return false;
        }
        let master = self
            .master
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = master.resize(PtySize {
            rows,
            cols,
            pixel_width: 0,
            pixel_height: 0,
        });
        drop(master);
        self.screen.set_size(
            std::num::NonZeroU16::new(rows).unwrap_or(std::num::NonZeroU16::MIN),
            std::num::NonZeroU16::new(cols).unwrap_or(std::num::NonZeroU16::MIN),
        );
        self.cols = cols;
        self.rows = rows;
        true
    }

    /// Kills the TUI's process group now (it hung on quit, or the session ends).
    pub fn kill(&self) {
        if let Some(group) = self.group {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_output(
    mut reader: Box<dyn Read + Send>,
    reports: mpsc::Sender<Report>,
    exited: std::sync::mpsc::Receiver<String>,
) {
    let mut buffer = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                let chunk = Bytes::copy_from_slice(&buffer[..read]);
                if reports.blocking_send(Report::Output(chunk)).is_err() {
                    return;
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            // EIO: the other side closed (the TUI and its group are gone).
            Err(_) => break,
        }
    }
    let how = exited
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| "closed its terminal".to_owned());
    let _ = reports.blocking_send(Report::Exited(how));
}

/// What the writer is given.
enum Keys {
    Data(Bytes),
    /// Nothing for a moment (see [`Terminal::type_text`]).
    Pause(Duration),
}

/// How long [`Terminal::type_text`] waits before the Enter.
const TYPING_PAUSE: Duration = Duration::from_millis(300);

fn write_input(mut writer: Box<dyn Write + Send>, input: std::sync::mpsc::Receiver<Keys>) {
    while let Ok(keys) = input.recv() {
        match keys {
            Keys::Data(data) => {
                if writer.write_all(&data).is_err() || writer.flush().is_err() {
                    return;
                }
            }
            Keys::Pause(pause) => std::thread::sleep(pause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(script: &str) -> Spec {
        Spec {
            command: "sh".to_owned(),
            args: vec!["-c".to_owned(), script.to_owned()],
            env: std::env::vars().collect(),
            cwd: std::env::temp_dir(),
            cols: 40,
            rows: 5,
        }
    }

    /// Reports until the terminal's exit, the output fed to its screen.
    async fn until_exit(terminal: &mut Terminal) -> String {
        loop {
            match terminal.report().await {
                Some(Report::Output(data)) => {
                    terminal.shown(&data);
                }
                Some(Report::Exited(how)) => return how,
                None => return "no exit".to_owned(),
            }
        }
    }

    #[tokio::test]
    async fn output_input_and_size_go_through_the_terminal_and_its_repaint_draws_the_screen() {
        let mut terminal = Terminal::start(spec(
            "printf '\\033[1mbold\\033[0m %s\\r\\n' \"$(stty size)\"; read line; printf 'got %s' \"$line\"; exit 3",
        ))
        .unwrap();
        assert_eq!(terminal.size(), (40, 5));
        terminal.write(Bytes::from_static(b"keys\r")).unwrap();
        let how = until_exit(&mut terminal).await;
        assert_eq!(how, "exited with status 3");
        let text = terminal.screen.screen().contents();
        assert!(text.contains("bold 5 40"), "{text}");
        assert!(text.contains("got keys"), "{text}");
        assert!(terminal.seq() >= 1);
        let mut fresh = vt100::Parser::new(
            std::num::NonZeroU16::new(5).unwrap(),
            std::num::NonZeroU16::new(40).unwrap(),
            0,
        );
        fresh.process(&terminal.repaint());
        assert_eq!(fresh.screen().contents(), text);
        // The attributes too (the echo of the keys may come before or after the line).
        assert_eq!(
            fresh.screen().contents_formatted(),
            terminal.screen.screen().contents_formatted()
        );
        assert!(terminal.resize(1000, 0));
        assert_eq!(terminal.size(), (MAX_COLS, 1));
        assert!(!terminal.resize(MAX_COLS, 1));
    }

    #[tokio::test]
    async fn a_killed_terminal_reports_its_exit_and_takes_its_group_along() {
        let mut terminal = Terminal::start(spec("sleep 1000 & wait")).unwrap();
        terminal.kill();
        let how = until_exit(&mut terminal).await;
        assert_eq!(how, "was ended by Killed");
    }
}
