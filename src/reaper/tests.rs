//! The reaper against real process groups. Each test has its own [`Supervisor`] (not the
//! process-wide one), whose [`Supervisor::die`] closes jucode's end of the pipe as a
//! `kill -9` of jucode would.

use std::hash::{BuildHasher, RandomState};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::imp::Supervisor;

/// Above the largest pid Linux hands out (2^22): no group has it.
const NO_SUCH_GROUP: i32 = 1 << 30;

/// A unique `sleep` duration: it is in the argv of every process of the group, which
/// `/proc` finds them by.
fn marker() -> String {
    format!(
        "1000.{:020}",
        RandomState::new().hash_one(std::process::id())
    )
}

/// A group whose shell has two children, like a compound command.
fn group(marker: &str) -> Child {
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("sleep {marker} & sleep {marker}; wait"))
        .process_group(0)
        .spawn()
        .expect("start sh");
    until(|| processes_with(marker).len() == 3, "the group started");
    child
}

fn processes_with(marker: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(marker)
                .then_some(pid)
        })
        .collect()
}

/// A bounded poll of a condition only `/proc` shows.
fn until(condition: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn id(child: &Child) -> i32 {
    i32::try_from(child.id()).expect("a pid")
}

/// Kills what a test left, for tests that fail midway too.
struct Cleanup(Vec<i32>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for &group in &self.0 {
            let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
        }
    }
}

#[test]
fn at_jucodes_death_every_registered_group_is_killed_and_no_released_one() {
    let (doomed_marker, spared_marker) = (marker(), marker());
    let mut doomed = group(&doomed_marker);
    let mut spared = group(&spared_marker);
    let _cleanup = Cleanup(vec![id(&doomed), id(&spared)]);
    let mut supervisor = Supervisor::new();
    supervisor.watch(id(&doomed));
    supervisor.watch(id(&spared));
    supervisor.release(id(&spared));

    let status = supervisor.die().expect("a reaper").wait().expect("wait");
    assert!(status.success(), "the reaper ends on its own: {status:?}");
    let killed = doomed.wait().expect("wait");
    assert_eq!(killed.signal(), Some(9), "{killed:?}");
    until(
        || processes_with(&doomed_marker).is_empty(),
        "the shell's children were killed too",
    );
    assert_eq!(
        processes_with(&spared_marker).len(),
        3,
        "released: left alone"
    );
    killpg(Pid::from_raw(id(&spared)), Signal::SIGKILL).expect("kill the spared group");
    let _ = spared.wait();
}

#[test]
fn the_reaper_is_out_of_reach_of_jucodes_signals_and_holds_no_descriptor() {
    let marker = marker();
    let mut doomed = group(&marker);
    let _cleanup = Cleanup(vec![id(&doomed)]);
    let mut supervisor = Supervisor::new();
    supervisor.watch(id(&doomed));
    let pid = supervisor.reaper().expect("a reaper").process.id();
    let reaper = Pid::from_raw(i32::try_from(pid).expect("a pid"));

    assert_eq!(
        nix::unistd::getsid(Some(reaper)).expect("its session"),
        reaper,
        "a session of its own, so no group signal or terminal of jucode's reaches it"
    );
    let fds = || -> Vec<(String, String)> {
        let mut fds: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("its descriptors")
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let target = std::fs::read_link(entry.path()).ok()?;
                Some((
                    entry.file_name().to_str()?.to_owned(),
                    target.display().to_string(),
                ))
            })
            .collect();
        fds.sort();
        fds
    };
    // The dynamic loader of the shell has a library open for a moment after `exec`.
    let only_stdio = || {
        fds()
            .iter()
            .map(|(fd, _)| fd.as_str().to_owned())
            .eq(["0", "1", "2"].map(str::to_owned))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !only_stdio() {
        assert!(Instant::now() < deadline, "descriptors: {:?}", fds());
        std::thread::sleep(Duration::from_millis(5));
    }

    for signal in [
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGTERM,
        Signal::SIGQUIT,
    ] {
        kill(reaper, signal).expect("signal the reaper");
    }
    // Still there to do its job: it exits by itself, not by a signal.
    let status = supervisor.die().expect("a reaper").wait().expect("wait");
    assert!(status.success(), "{status:?}");
    assert_eq!(doomed.wait().expect("wait").signal(), Some(9));
    until(|| processes_with(&marker).is_empty(), "the group is gone");
}

#[test]
fn a_reaper_killed_or_stopped_is_replaced_by_one_that_knows_every_group() {
    let (first_marker, second_marker) = (marker(), marker());
    let mut first = group(&first_marker);
    let mut second = group(&second_marker);
    let _cleanup = Cleanup(vec![id(&first), id(&second)]);
    let mut supervisor = Supervisor::new();
    supervisor.watch(id(&first));

    // Killed: the next write fails and starts another.
    let killed = supervisor.reaper().expect("a reaper").process.id();
    let reaper = supervisor.reaper().expect("a reaper");
    reaper.process.kill().expect("kill the reaper");
    reaper.process.wait().expect("wait");
    supervisor.watch(id(&second));
    let replaced = supervisor.reaper().expect("a new reaper").process.id();
    assert_ne!(replaced, killed);

    // Stopped: once its pipe is full a write fails rather than waits.
    kill(
        Pid::from_raw(i32::try_from(replaced).expect("a pid")),
        Signal::SIGSTOP,
    )
    .expect("stop the reaper");
    let mut writes = 0;
    while supervisor.reaper().expect("a reaper").process.id() == replaced {
        assert!(writes < 1_000_000, "a stopped reaper was never replaced");
        supervisor.watch(NO_SUCH_GROUP);
        supervisor.release(NO_SUCH_GROUP);
        writes += 2;
    }

    let status = supervisor.die().expect("a reaper").wait().expect("wait");
    assert!(status.success(), "{status:?}");
    assert_eq!(first.wait().expect("wait").signal(), Some(9));
    assert_eq!(second.wait().expect("wait").signal(), Some(9));
}

/// A group spawned through the supervisor is registered by its leader before `exec`:
/// jucode dying the moment the spawn returns, before it could write anything, kills it.
#[tokio::test]
async fn a_spawned_group_registers_itself_before_it_runs() {
    let marker = marker();
    let mut supervisor = Supervisor::new();
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(format!("sleep {marker} & sleep {marker}; wait"));
    let (mut child, _watch) = supervisor.spawn(&mut command).expect("spawn");
    let _cleanup = Cleanup(vec![
        i32::try_from(child.id().expect("a pid")).expect("a pid"),
    ]);
    let status = supervisor.die().expect("a reaper").wait().expect("wait");
    assert!(status.success(), "{status:?}");
    assert_eq!(child.wait().await.expect("wait").signal(), Some(9));
    until(|| processes_with(&marker).is_empty(), "the group is gone");
}

/// A reaper gone before a spawn: the child cannot register, its spawn fails, and it is
/// spawned again with a new reaper, which kills it at jucode's death.
#[tokio::test]
async fn a_spawn_after_the_reaper_died_registers_with_the_next() {
    let mut supervisor = Supervisor::new();
    let mut first = tokio::process::Command::new("sleep");
    first.arg("1000");
    let (mut first, _first_watch) = supervisor.spawn(&mut first).expect("spawn");
    let reaper = supervisor.reaper().expect("a reaper");
    let dead = reaper.process.id();
    reaper.process.kill().expect("kill the reaper");
    reaper.process.wait().expect("wait");

    let mut second = tokio::process::Command::new("sleep");
    second.arg("1000");
    let (mut second, _second_watch) = supervisor.spawn(&mut second).expect("spawn again");
    let _cleanup = Cleanup(
        [&first, &second]
            .iter()
            .filter_map(|child| i32::try_from(child.id()?).ok())
            .collect(),
    );
    assert_ne!(
        supervisor.reaper().expect("a new reaper").process.id(),
        dead
    );
    let status = supervisor.die().expect("a reaper").wait().expect("wait");
    assert!(status.success(), "{status:?}");
    assert_eq!(first.wait().await.expect("wait").signal(), Some(9));
    assert_eq!(second.wait().await.expect("wait").signal(), Some(9));
}
