//! `--remote [user@]host`: the same command run on another machine over the system's
//! OpenSSH client, this process only relaying.
//!
//! Nothing here speaks a protocol of its own. The remote end is the remote's own
//! `jucode serve` (or `acp`, or `sessions`) with every other flag passed through, so
//! its daemon starts there as it would locally and the lines are exactly the remote's.
//! stdin is ssh's own (inherited: ssh forwards it and its end); stdout is copied chunk
//! by chunk, flushed as it comes, only to know where a line ends and which session it
//! serves, so that a connection that breaks can be reported as one more whole line.
//!
//! Keys, agents, host keys and per-host options are OpenSSH's: `~/.ssh/config` is
//! read by ssh, nothing of jucode's stores a secret. `JUCODE_SSH_COMMAND` replaces the
//! `ssh` program (a shell command, as git's `GIT_SSH_COMMAND`), for a config file or a
//! wrapper of one's own.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

use crate::protocol::DaemonEvent;

/// What the remote command speaks on stdout, which decides how a failure of the
/// connection is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// serve protocol v2: a failure is one more `error` event line (then stderr).
    Serve,
    /// JSON-RPC (ACP) or text for people (`sessions`): stderr only, as no line of
    /// the dialect can carry it.
    Other,
}

/// Where to run, and what.
#[derive(Debug, Clone)]
pub struct Remote {
    /// `[user@]host` or a `Host` alias of `~/.ssh/config`.
    pub host: String,
    /// The remote's jucode (default `jucode`, found on the remote's `PATH`).
    pub program: String,
}

/// What a POSIX shell answers for a command it cannot find.
const COMMAND_NOT_FOUND: i32 = 127;

/// The exit codes jucode itself gives (0, 1, 2, and 130 for SIGINT) are the remote
/// command's, passed on. Anything else is the connection's: ssh's own 255, a death by
/// a signal (or 128 + N from the shell that `JUCODE_SSH_COMMAND` runs in).
fn passed_on(code: i32) -> bool {
    matches!(code, 0..=2 | 130)
}

impl Remote {
    /// Checks what ssh would otherwise read as an option or a second argument.
    pub fn new(host: String, program: String) -> Result<Self, String> {
        if host.is_empty() || host.starts_with('-') || host.chars().any(char::is_whitespace) {
            return Err(format!(
                "--remote {host:?}: expected [user@]host or an alias of ~/.ssh/config"
            ));
        }
        if program.is_empty() {
            return Err("--remote-program: expected a program name or path".to_owned());
        }
        Ok(Self { host, program })
    }

    /// Runs `program args...` on the host and relays it; returns the exit code.
    pub fn run(&self, args: &[OsString], dialect: Dialect) -> u8 {
        let mut command = self.ssh_command(args);
        command
            .stdin(Stdio::inherit())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                return self.report(
                    dialect,
                    &Relayed::default(),
                    &format!("cannot run ssh to reach {}: {err}", self.host),
                );
            }
        };
        let stderr = child.stderr.take().map(|stderr| {
            std::thread::Builder::new()
                .name("jucode-ssh-stderr".into())
                .spawn(move || last_line_of(stderr))
        });
        let relayed = match child.stdout.take() {
            Some(stdout) => relay(stdout),
            None => Relayed::default(),
        };
        let status = child.wait();
        let ssh_said = match stderr {
            Some(Ok(thread)) => thread.join().unwrap_or_default(),
            _ => String::new(),
        };
        let code = status
            .as_ref()
            .ok()
            .and_then(std::process::ExitStatus::code);
        let ssh_said = if ssh_said.is_empty() {
            match &status {
                Ok(status) => format!("ssh ended ({status})"),
                Err(err) => format!("ssh could not be waited for: {err}"),
            }
        } else {
            ssh_said
        };
        match code {
            Some(COMMAND_NOT_FOUND) if relayed.nothing_printed() => self.report(
                dialect,
                &relayed,
                &format!(
                    "{} has no `{}` on the PATH of a non-interactive ssh session ({}); \
                     install jucode there or give its path with --remote-program",
                    self.host, self.program, ssh_said
                ),
            ),
            Some(code) if passed_on(code) => u8::try_from(code).unwrap_or(1),
            _ if relayed.nothing_printed() => self.report(
                dialect,
                &relayed,
                &format!("cannot reach {} over ssh: {}", self.host, ssh_said),
            ),
            _ => {
                let again = match &relayed.session {
                    Some(id) => format!(
                        "; the session keeps running there: `jucode serve --remote {} --session {id}` attaches to it again",
                        self.host
                    ),
                    None => String::new(),
                };
                self.report(
                    dialect,
                    &relayed,
                    &format!(
                        "the connection to {} was lost: {}{again}",
                        self.host, ssh_said
                    ),
                )
            }
        }
    }

    /// `ssh -T [options] -- host 'program' 'arg'...`: ssh joins the words of a remote
    /// command with spaces for the remote's shell, so each is quoted for it.
    fn ssh_command(&self, args: &[OsString]) -> Command {
        let mut ssh_args: Vec<OsString> = vec![
            "-T".into(),
            // A connection that dies without a word (a laptop's lid, a dropped
            // route) ends within a minute instead of hanging the client forever.
            "-o".into(),
            "ServerAliveInterval=15".into(),
            "-o".into(),
            "ServerAliveCountMax=3".into(),
            "--".into(),
            self.host.clone().into(),
        ];
        let mut remote = shell_quote(OsStr::new(&self.program));
        for arg in args {
            remote.push(" ");
            remote.push(shell_quote(arg));
        }
        ssh_args.push(remote);
        match std::env::var_os("JUCODE_SSH_COMMAND").filter(|command| !command.is_empty()) {
            Some(custom) => {
                let mut script = custom;
                script.push(" \"$@\"");
                let mut command = Command::new("sh");
                command.arg("-c").arg(script).arg("ssh").args(ssh_args);
                command
            }
            None => {
                let mut command = Command::new("ssh");
                command.args(ssh_args);
                command
            }
        }
    }

    fn report(&self, dialect: Dialect, relayed: &Relayed, message: &str) -> u8 {
        if dialect == Dialect::Serve {
            let mut stdout = std::io::stdout().lock();
            let line = DaemonEvent::error(message, relayed.session.as_deref()).line();
            let newline: &[u8] = if relayed.at_line_start { b"" } else { b"\n" };
            let _ = stdout
                .write_all(newline)
                .and_then(|()| stdout.write_all(&line))
                .and_then(|()| stdout.flush());
        }
        eprintln!("jucode: {message}");
        1
    }
}

/// What went through stdout.
struct Relayed {
    bytes: u64,
    at_line_start: bool,
    /// The session the remote serves, from its latest `startup` line.
    session: Option<String>,
}

impl Default for Relayed {
    fn default() -> Self {
        Self {
            bytes: 0,
            at_line_start: true,
            session: None,
        }
    }
}

impl Relayed {
    fn nothing_printed(&self) -> bool {
        self.bytes == 0
    }
}

/// Copies the remote's stdout to ours as it comes, noting where lines end and which
/// session a `startup` line names. A client that stops reading ends the copy (ssh then
/// sees its stdout closed, as the remote shim would).
fn relay(mut from: impl Read) -> Relayed {
    let mut stdout = std::io::stdout().lock();
    let mut relayed = Relayed::default();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut probe = StartupProbe::default();
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buffer[..read];
        if stdout
            .write_all(chunk)
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
        relayed.bytes += read as u64;
        relayed.at_line_start = chunk.ends_with(b"\n");
        probe.feed(chunk, &mut relayed.session);
    }
    relayed
}

/// The line being relayed, kept only while it may still be a `startup` line (they are
/// short and start with their type), so a long delta costs nothing.
#[derive(Default)]
struct StartupProbe {
    line: Vec<u8>,
    hopeless: bool,
}

impl StartupProbe {
    const STARTUP: &'static [u8] = b"{\"type\":\"startup\"";
    const LONGEST: usize = 64 * 1024;

    fn feed(&mut self, chunk: &[u8], session: &mut Option<String>) {
        for piece in chunk.split_inclusive(|&byte| byte == b'\n') {
            if !self.hopeless {
                self.line.extend_from_slice(piece);
                let n = self.line.len().min(Self::STARTUP.len());
                if self.line[..n] != Self::STARTUP[..n] || self.line.len() > Self::LONGEST {
                    self.hopeless = true;
                    self.line.clear();
                }
            }
            if piece.ends_with(b"\n") {
                if !self.hopeless {
                    #[derive(serde::Deserialize)]
                    struct Startup {
                        session_id: String,
                    }
                    if let Ok(startup) = serde_json::from_slice::<Startup>(&self.line) {
                        *session = Some(startup.session_id);
                    }
                }
                self.line.clear();
                self.hopeless = false;
            }
        }
    }
}

/// Passes ssh's stderr (its own messages and the remote command's) through, and keeps
/// the last line that says something, for the error a failure reports.
fn last_line_of(mut from: impl Read) -> String {
    let mut stderr = std::io::stderr();
    let mut text = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => {
                let _ = stderr.write_all(&buffer[..read]);
                text.extend_from_slice(&buffer[..read]);
                if text.len() > 16 * 1024 {
                    text.drain(..text.len() - 8 * 1024);
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&text)
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// One word for a POSIX shell: single quotes, a quote inside closed, escaped, reopened.
fn shell_quote(word: &OsStr) -> OsString {
    let text = word.to_string_lossy();
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_./=:@,+%".contains(&byte));
    if plain {
        return text.into_owned().into();
    }
    format!("'{}'", text.replace('\'', r"'\''")).into()
}

/// The command line's arguments after the subcommand's name, without the flags that
/// only this end reads (`--remote`, `--remote-program`, `--log-file`), in either form
/// (`--flag value`, `--flag=value`).
pub fn passed_through(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    const LOCAL: [&str; 3] = ["--remote", "--remote-program", "--log-file"];
    let mut out = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            out.push(arg);
            out.extend(args);
            break;
        }
        if LOCAL.contains(&text.as_ref()) {
            args.next();
            continue;
        }
        if LOCAL.iter().any(|flag| {
            text.strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='))
        }) {
            continue;
        }
        out.push(arg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_this_ends_flags_are_dropped() {
        assert_eq!(
            passed_through(words(&[
                "serve",
                "--remote",
                "box",
                "--session",
                "abc",
                "--remote-program=/opt/jucode",
                "--log-file",
                "/tmp/l",
                "--chat",
                "--remote=x",
            ])),
            words(&["serve", "--session", "abc", "--chat"])
        );
        assert_eq!(
            passed_through(words(&["serve", "--", "--remote", "x"])),
            words(&["serve", "--", "--remote", "x"])
        );
    }

    #[test]
    fn words_reach_the_remote_shell_whole() {
        assert_eq!(shell_quote(OsStr::new("serve")), OsString::from("serve"));
        assert_eq!(shell_quote(OsStr::new("")), OsString::from("''"));
        assert_eq!(
            shell_quote(OsStr::new("a b'c;$(x)")),
            OsString::from(r"'a b'\''c;$(x)'")
        );
        let quoted = shell_quote(OsStr::new("it's $HOME `x`"));
        let echoed = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", quoted.to_string_lossy()))
            .output()
            .expect("sh");
        assert_eq!(echoed.stdout, b"it's $HOME `x`");
    }

    #[test]
    fn hosts_that_ssh_would_read_as_options_are_refused() {
        assert!(Remote::new("-oProxyCommand=x".into(), "jucode".into()).is_err());
        assert!(Remote::new("a b".into(), "jucode".into()).is_err());
        assert!(Remote::new(String::new(), "jucode".into()).is_err());
        assert!(Remote::new("me@box".into(), "jucode".into()).is_ok());
    }

    #[test]
    fn the_session_is_read_from_startup_lines_however_cut() {
        let stream = b"{\"type\":\"hello\",\"protocol\":2}\n{\"type\":\"assistant_delta\",\"delta\":\"{\\\"type\\\":\\\"startup\\\"\"}\n{\"type\":\"startup\",\"version\":\"1\",\"session_id\":\"s-42\",\"session\":\"s-42\"}\n{\"type\":\"status\"";
        for cut in 1..stream.len() {
            let mut probe = StartupProbe::default();
            let mut session = None;
            let (a, b) = stream.split_at(cut);
            probe.feed(a, &mut session);
            probe.feed(b, &mut session);
            assert_eq!(session.as_deref(), Some("s-42"), "cut at {cut}");
        }
    }
}
