//! The process groups jucode starts (the `bash` tool's commands, hooks, MCP stdio
//! servers, hosted agents and their TUIs) are killed when jucode dies, however it dies:
//! `kill -9` of `serve --in-process` or of the daemon included.
//!
//! Each of those runs in a process group of its own, so that one `killpg` stops all of it
//! (pipelines, `cmd &`, a wrapper's children); the same choice takes it out of reach of
//! anything aimed at jucode. `PR_SET_PDEATHSIG` would reach only the direct child, not
//! its children, and fires when the spawning *thread* exits (tokio's blocking pool ends
//! idle threads), so it is not the answer. This is: a small process, the reaper, started
//! with the first group and kept for the life of the process (one, not one per group),
//! reads a channel whose other end only jucode holds. Each group is registered on it
//! (`+ PGID`, below) and released (`- PGID`) once it is no longer jucode's business;
//! when the channel reaches its end (jucode exited or was killed: the kernel closes
//! jucode's end either way), the reaper sends `SIGKILL` to every group still
//! registered, and exits.
//!
//! Why the reaper is `/bin/sh` running [`SCRIPT`] and not something else:
//! - A `fork` of jucode without `exec` may call only async-signal-safe functions (jucode
//!   is multi-threaded: another thread may hold the allocator's lock), so its loop would
//!   be hand-written without allocation; and it would keep a copy-on-write image of the
//!   whole process, which grows toward jucode's size as jucode changes its pages.
//! - A re-`exec` of the jucode binary needs a hidden mode in every binary that uses this
//!   library (its test binaries do not have one), and the binary on disk may have been
//!   replaced by an upgrade since jucode started.
//! - `sh` is already required (hooks run in it, and it is the commands' last fallback);
//!   the script uses only builtins (`read`, `case`, parameter expansion, `kill`), so it
//!   forks nothing and stays about a megabyte; the parent's side is a plain `Command`.
//!
//! What the reaper is given, and why:
//! - Its own session (`setsid`): a `killpg` of jucode's group, a terminal's `^C` or its
//!   hang-up do not reach it, and it has no controlling terminal. `SIGINT`, `SIGHUP`,
//!   `SIGTERM` and `SIGQUIT` are ignored before `exec` (a shell cannot undo a signal
//!   ignored on entry), so only `SIGKILL` ends it early.
//! - No descriptor but its end of the channel (stdin; stdout and stderr are
//!   `/dev/null`): every other one is marked close-on-exec before `exec`
//!   (`close_range`), so the reaper holds no session file, lock, socket or directory.
//!   jucode's end is close-on-exec too, so no command keeps it past its `exec` (one that
//!   did would keep the channel open after jucode's death). It runs in `/`, so it keeps
//!   no directory busy.
//! - Writes do not wait (`MSG_DONTWAIT`): a reaper that stopped reading (stopped, or
//!   killed) makes a write fail at once, never hangs a spawn. A failed write replaces
//!   the reaper: the old one is killed first (so it never sees an end of file and kills
//!   live groups), and the new one is told every group still registered.
//!
//! A group started by [`spawn`] registers itself: its leader writes `+ PGID` on the
//! channel between `fork` and `exec` (it holds jucode's end until `exec` closes it), so
//! no command, hook or server runs a single instruction unregistered, however long the
//! scheduler keeps jucode from writing after the spawn (a loaded machine showed that
//! window to be wide enough for a whole compound command to start). The channel is a
//! socket pair, so that write can say `MSG_NOSIGNAL`: a child has the default `SIGPIPE`
//! and would die of a reaper gone. Spawns of registered groups hold the supervisor's
//! lock, so the end they write to is the current reaper's. A child that cannot write
//! fails its `exec`; the reaper is replaced and the spawn made again. A TUI's terminal
//! (`portable-pty`) takes no `pre_exec`: it is registered by [`watch`] just after its
//! spawn, and its terminal's hang-up covers the moment before.
//!
//! A group is released when its owner stops vouching for the id: when the leader was
//! reaped and the group killed, or when the leader exited on its own (what a command
//! left running in the background then is left alone, as when jucode exits normally).
//! A released id may belong to someone else later, and the reaper must never kill a
//! stranger's group.

use std::sync::atomic::{AtomicBool, Ordering};

/// A process group registered with the reaper: killed if jucode dies while this is held.
/// [`Watch::release`] (or dropping it) unregisters the group.
pub struct Watch {
    group: i32,
    released: AtomicBool,
}

/// Spawns `command` as the leader of a new process group (`process_group(0)`: its
/// group id is its pid) registered with the reaper by the child itself before `exec`.
/// Call it once per `Command` (it adds a `pre_exec` step). The reaper not starting is
/// logged once and the command spawned all the same, as safe as it was without one.
pub fn spawn(
    command: &mut tokio::process::Command,
) -> std::io::Result<(tokio::process::Child, Watch)> {
    imp::spawn(command)
}

/// Registers the process group `group` (its leader's pid), already running, with the
/// reaper, starting the reaper if it is not running; for spawns that take no `pre_exec`
/// ([`spawn`] is for those that do). Never fails, as [`spawn`].
pub fn watch(group: u32) -> Watch {
    let group = i32::try_from(group).unwrap_or(0);
    // 0 and 1 are never a command's group (`kill -9 -1` would be everyone).
    if group > 1 {
        imp::with_global(|supervisor| supervisor.watch(group));
    }
    Watch {
        group,
        released: AtomicBool::new(group <= 1),
    }
}

impl Watch {
    /// Unregisters the group (once; later calls do nothing).
    pub fn release(&self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            imp::with_global(|supervisor| supervisor.release(self.group));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.release();
    }
}

/// The reaper's program (`sh -c`): a multiset of group ids in one string, each one with
/// a space on both sides. Lines are `+ PGID` and `- PGID`; anything else is ignored.
const SCRIPT: &str = r#"set -f
watched=' '
while read -r op group; do
  case $group in ''|*[!0-9]*|0*|1) continue ;; esac
  case $op in
    +) watched="$watched$group " ;;
    -) case $watched in
         *" $group "*) watched="${watched%% $group *} ${watched#* $group }" ;;
       esac ;;
  esac
done
for group in $watched; do kill -9 -"$group" 2>/dev/null; done
"#;

#[cfg(unix)]
mod imp {
    use std::collections::BTreeMap;
    use std::io;
    use std::os::fd::{AsRawFd, OwnedFd, RawFd};
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};

    use nix::libc;
    use nix::sys::signal::{SigHandler, Signal, signal};

    use super::Watch;

    /// Where the shell is looked for; the path first, since the daemon's `PATH` is
    /// whatever it was started with.
    const SHELLS: [&str; 2] = ["/bin/sh", "sh"];

    static GLOBAL: Mutex<Supervisor> = Mutex::new(Supervisor::new());

    pub(super) fn with_global<T>(f: impl FnOnce(&mut Supervisor) -> T) -> T {
        f(&mut GLOBAL.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(super) fn spawn(
        command: &mut tokio::process::Command,
    ) -> io::Result<(tokio::process::Child, Watch)> {
        with_global(|supervisor| supervisor.spawn(command))
    }

    /// jucode's side: the reaper process and the groups registered with it (a multiset:
    /// an id released and reused by a new group of ours may be registered twice).
    pub struct Supervisor {
        reaper: Option<Reaper>,
        /// jucode's end of the current reaper's channel (-1: none), read by children
        /// between `fork` and `exec`; it changes only under the supervisor's lock, which
        /// every registering spawn holds.
        channel: Option<Arc<AtomicI32>>,
        watched: BTreeMap<i32, usize>,
        warned: bool,
    }

    pub struct Reaper {
        pub process: Child,
        pub channel: UnixStream,
    }

    impl Supervisor {
        pub const fn new() -> Self {
            Supervisor {
                reaper: None,
                channel: None,
                watched: BTreeMap::new(),
                warned: false,
            }
        }

        fn channel(&mut self) -> Arc<AtomicI32> {
            self.channel
                .get_or_insert_with(|| Arc::new(AtomicI32::new(-1)))
                .clone()
        }

        /// See [`super::spawn`].
        pub fn spawn(
            &mut self,
            command: &mut tokio::process::Command,
        ) -> io::Result<(tokio::process::Child, Watch)> {
            let channel = self.channel();
            command.process_group(0);
            // SAFETY: the hook makes only async-signal-safe calls (getpid, send).
            unsafe {
                command.pre_exec(move || register_in_child(channel.load(Ordering::SeqCst)));
            }
            if !self.alive() {
                self.stop();
                self.restart();
            }
            let mut spawned = command.spawn();
            if let Err(err) = &spawned
                && self.reaper.is_some()
                && refused_by_channel(err)
            {
                // The reaper went away or stopped reading: another, and again.
                self.stop();
                self.restart();
                spawned = command.spawn();
            }
            let child = spawned?;
            let group = child.id().and_then(|pid| i32::try_from(pid).ok());
            if let Some(group) = group {
                // The child told the reaper itself (or there is no reaper, and the next
                // one will be told of it with the rest).
                *self.watched.entry(group).or_default() += 1;
            }
            let watch = Watch {
                group: group.unwrap_or(0),
                released: AtomicBool::new(group.is_none()),
            };
            Ok((child, watch))
        }

        pub fn watch(&mut self, group: i32) {
            *self.watched.entry(group).or_default() += 1;
            self.send('+', group, true);
        }

        pub fn release(&mut self, group: i32) {
            let Some(count) = self.watched.get_mut(&group) else {
                return;
            };
            *count -= 1;
            if *count == 0 {
                self.watched.remove(&group);
            }
            self.send('-', group, false);
        }

        /// The running reaper, if any (for tests: its pid).
        #[cfg(test)]
        pub fn reaper(&mut self) -> Option<&mut Reaper> {
            self.reaper.as_mut()
        }

        /// Closes jucode's end as its death would: the reaper kills what is registered.
        /// Returns it, to be waited for.
        #[cfg(test)]
        pub fn die(&mut self) -> Option<Child> {
            self.set_channel(-1);
            self.reaper.take().map(|reaper| reaper.process)
        }

        fn set_channel(&mut self, fd: RawFd) {
            self.channel().store(fd, Ordering::SeqCst);
        }

        fn send(&mut self, op: char, group: i32, start: bool) {
            if self.alive()
                && let Some(reaper) = &self.reaper
                && send_line(reaper.channel.as_raw_fd(), op, group).is_ok()
            {
                return;
            }
            if self.reaper.is_none() && !start {
                return;
            }
            self.stop();
            self.restart();
        }

        /// Whether the reaper runs. Asked of the process itself, not of the channel: a
        /// child forked elsewhere in jucode at the moment the reaper was started holds a
        /// copy of the reaper's end until its own `exec`, and a write into it then
        /// succeeds although nobody will read it.
        fn alive(&mut self) -> bool {
            self.reaper
                .as_mut()
                .is_some_and(|reaper| matches!(reaper.process.try_wait(), Ok(None)))
        }

        /// Kills the reaper before its channel closes, so it does not take the end of
        /// file for jucode's death.
        fn stop(&mut self) {
            self.set_channel(-1);
            if let Some(mut reaper) = self.reaper.take() {
                let _ = reaper.process.kill();
                let _ = reaper.process.wait();
            }
        }

        /// A new reaper, told every group registered.
        fn restart(&mut self) {
            let reaper = match start() {
                Ok(reaper) => reaper,
                Err(err) => {
                    if !std::mem::replace(&mut self.warned, true) {
                        tracing::warn!(
                            "cannot start the process reaper ({err}): commands and servers \
                             will outlive jucode if it is killed"
                        );
                    }
                    return;
                }
            };
            let fd = reaper.channel.as_raw_fd();
            for (&group, &count) in &self.watched {
                for _ in 0..count {
                    if let Err(err) = send_line(fd, '+', group) {
                        tracing::warn!("cannot talk to the process reaper: {err}");
                        let mut process = reaper.process;
                        let _ = process.kill();
                        let _ = process.wait();
                        return;
                    }
                }
            }
            self.set_channel(fd);
            self.reaper = Some(reaper);
        }
    }

    /// A failed spawn whose child could not write on the channel.
    fn refused_by_channel(err: &io::Error) -> bool {
        matches!(
            err.raw_os_error(),
            Some(libc::EPIPE | libc::EAGAIN | libc::ECONNRESET | libc::ENOTCONN)
        )
    }

    /// In a registered command's child, before `exec`: `+ <own pid>` on the channel (its
    /// group id, since the group is its own). Only async-signal-safe calls, no
    /// allocation.
    fn register_in_child(channel: RawFd) -> io::Result<()> {
        if channel < 0 {
            return Ok(());
        }
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() };
        send_line(channel, '+', pid)
    }

    /// Writes `<op> <group>\n` in one system call that neither waits nor raises
    /// `SIGPIPE`. Shorter than a socket's buffer unit, so written whole or not at all.
    /// Async-signal-safe (it runs in children before `exec`).
    fn send_line(channel: RawFd, op: char, group: i32) -> io::Result<()> {
        let mut line = [0u8; 16];
        line[0] = op as u8;
        line[1] = b' ';
        let mut digits = [0u8; 10];
        let mut count = 0;
        let mut rest = group.unsigned_abs();
        loop {
            digits[count] = b'0' + (rest % 10) as u8;
            count += 1;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        for at in 0..count {
            line[2 + at] = digits[count - 1 - at];
        }
        line[2 + count] = b'\n';
        let len = 3 + count;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
        // Elsewhere the socket is non-blocking and Rust ignores SIGPIPE in the parent.
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let flags = 0;
        // SAFETY: the buffer is valid for `len` bytes.
        let sent = unsafe { libc::send(channel, line.as_ptr().cast(), len, flags) };
        match usize::try_from(sent) {
            Ok(sent) if sent == len => Ok(()),
            Ok(_) => Err(io::Error::new(io::ErrorKind::WriteZero, "a short write")),
            Err(_) => Err(io::Error::last_os_error()),
        }
    }

    pub fn start() -> io::Result<Reaper> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no shell");
        for shell in SHELLS {
            // Both ends close-on-exec; the reaper's becomes its stdin.
            let (ours, theirs) = UnixStream::pair()?;
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            ours.set_nonblocking(true)?;
            let mut command = Command::new(shell);
            command
                .arg("-c")
                .arg(super::SCRIPT)
                .arg("jucode-reaper")
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .current_dir("/")
                .stdin(Stdio::from(OwnedFd::from(theirs)))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: only async-signal-safe system calls between fork and exec.
            unsafe {
                command.pre_exec(detach);
            }
            match command.spawn() {
                Ok(process) => {
                    return Ok(Reaper {
                        process,
                        channel: ours,
                    });
                }
                Err(err) if err.kind() == io::ErrorKind::NotFound => last = err,
                Err(err) => return Err(err),
            }
        }
        Err(last)
    }

    /// In the reaper's child, before `exec`: its own session, the signals aimed at jucode
    /// or its terminal ignored, and no descriptor beyond stdin, stdout and stderr kept.
    fn detach() -> io::Result<()> {
        nix::unistd::setsid()?;
        for ignored in [
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGTERM,
            Signal::SIGQUIT,
        ] {
            // SAFETY: setting a disposition to SIG_IGN installs no handler.
            unsafe { signal(ignored, SigHandler::SigIgn) }?;
        }
        #[cfg(target_os = "linux")]
        // SAFETY: a system call on plain integers. Best effort: kernels before 5.11 lack
        // it, and std's descriptors are close-on-exec anyway.
        unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
        }
        Ok(())
    }
}

/// No reaper outside Unix: the groups are registered nowhere.
#[cfg(not(unix))]
mod imp {
    use super::Watch;

    pub struct Supervisor;

    impl Supervisor {
        pub fn watch(&mut self, _group: i32) {}
        pub fn release(&mut self, _group: i32) {}
    }

    pub(super) fn with_global<T>(f: impl FnOnce(&mut Supervisor) -> T) -> T {
        f(&mut Supervisor)
    }

    pub(super) fn spawn(
        command: &mut tokio::process::Command,
    ) -> std::io::Result<(tokio::process::Child, Watch)> {
        let child = command.spawn()?;
        let watch = Watch {
            group: 0,
            released: std::sync::atomic::AtomicBool::new(true),
        };
        Ok((child, watch))
    }
}

#[cfg(all(test, unix))]
mod tests;
