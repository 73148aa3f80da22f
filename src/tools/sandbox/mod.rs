//! The sandbox every command a tool starts runs in (`docs/security.md`, "The sandbox").
//!
//! Why it works this way:
//! - The restriction is set in the child between `fork` and `exec` (`pre_exec`), never
//!   in the engine or the daemon: `no_new_privs`, then a Landlock domain (file system,
//!   TCP, scoping), then, with the network off, a seccomp filter for what Landlock does
//!   not reach (every other socket family, `io_uring`). Whatever the shell starts
//!   inherits all three and can never shed them.
//! - Everything that allocates or opens paths (the Landlock ruleset with its rules, the
//!   BPF program) is built in the parent ([`Prepared`]); the child only makes three
//!   system calls, which is all that is safe after `fork` in a threaded process.
//! - Fail closed: if a step fails in the child, the command does not run (the spawn
//!   fails with that error). A policy is applied only when [`support`] says the kernel
//!   can enforce it; otherwise the caller says so (the session's `sandbox` event and
//!   `info`), and nothing claims a sandbox that is not there.
//! - `JUCODE_SANDBOX_SIMULATE_UNSUPPORTED=1` in the engine's environment makes
//!   [`support`] answer as a kernel without Landlock would, `JUCODE_SANDBOX_SIMULATE_ABI=N`
//!   as one with at most ABI `N` (and only that ABI's rules are applied): for tests.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

#[cfg(target_os = "linux")]
mod linux;
mod refusal;

#[cfg(target_os = "linux")]
pub use linux::Prepared;
#[cfg(not(target_os = "linux"))]
pub use other::Prepared;
pub use refusal::explain_refusal;

/// The environment variable that simulates a kernel without Landlock.
pub const SIMULATE_UNSUPPORTED: &str = "JUCODE_SANDBOX_SIMULATE_UNSUPPORTED";
/// The environment variable that simulates an older Landlock ABI (`JUCODE_SANDBOX_SIMULATE_ABI=3`):
/// the probe reports at most that version, and only its rights are asked for.
pub const SIMULATE_ABI: &str = "JUCODE_SANDBOX_SIMULATE_ABI";

/// What a command may do, as the child is restricted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Where it may write (directories and everything beneath them). Empty: nowhere
    /// (`read-only`), except the harmless devices (`/dev/null`, `/dev/zero`, `/dev/full`).
    pub writable: Vec<PathBuf>,
    /// TCP and every other socket family allowed.
    pub network: bool,
}

/// What this kernel can enforce, probed once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI version the kernel offers (0: none).
    pub landlock_abi: i32,
    /// Whether the seccomp filter for the network can be installed (the architecture is
    /// one the filter is built for).
    pub seccomp: bool,
    /// Why nothing is enforced, when nothing is.
    pub unsupported: Option<String>,
    /// What is not enforced although the rest is, one short phrase each.
    pub gaps: Vec<String>,
}

impl Support {
    /// Whether commands can be sandboxed at all (file system rules).
    pub fn enforced(&self) -> bool {
        self.unsupported.is_none()
    }
}

/// The kernel's support, probed on first use (the probe makes no restriction).
pub fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let simulated = std::env::var(SIMULATE_UNSUPPORTED).is_ok_and(|value| value == "1");
        let mut support = probe(simulated);
        if let Some(cap) = std::env::var(SIMULATE_ABI)
            .ok()
            .and_then(|value| value.parse::<i32>().ok())
            .filter(|cap| *cap >= 1 && *cap < support.landlock_abi)
        {
            support = describe(cap, support.seccomp);
            support.gaps.insert(
                0,
                format!("an older ABI is simulated ({SIMULATE_ABI}={cap})"),
            );
        }
        support
    })
}

fn probe(simulate_unsupported: bool) -> Support {
    if simulate_unsupported {
        return Support {
            landlock_abi: 0,
            seccomp: false,
            unsupported: Some(format!(
                "Landlock is not available ({SIMULATE_UNSUPPORTED}=1 simulates a kernel without it)"
            )),
            gaps: Vec::new(),
        };
    }
    platform_probe()
}

#[cfg(target_os = "linux")]
fn platform_probe() -> Support {
    let abi = linux::landlock_abi();
    let seccomp = linux::network_filter().is_ok();
    if abi < 1 {
        return Support {
            landlock_abi: 0,
            seccomp,
            unsupported: Some(
                "this Linux kernel offers no Landlock (not built in, or not enabled at boot: \
                 `lsm=` must list `landlock`)"
                    .to_owned(),
            ),
            gaps: Vec::new(),
        };
    }
    describe(abi, seccomp)
}

/// What a kernel with Landlock ABI `abi` (at least 1) enforces, and what it does not.
fn describe(abi: i32, seccomp: bool) -> Support {
    let mut gaps = Vec::new();
    if abi < 2 {
        gaps.push("renaming or linking files between directories is always refused".to_owned());
    }
    if abi < 3 {
        gaps.push(
            "truncating a file outside the writable places (truncate(2)) is not refused".to_owned(),
        );
    }
    if abi < 4 {
        gaps.push(
            "TCP is refused only by the seccomp filter (Landlock's TCP rules need ABI 4)"
                .to_owned(),
        );
    }
    if abi < 5 {
        gaps.push("ioctl on devices is not restricted".to_owned());
    }
    if abi < 6 {
        gaps.push(
            "signals to processes outside the sandbox and abstract unix sockets are not restricted"
                .to_owned(),
        );
    }
    if !seccomp {
        gaps.push(format!(
            "no seccomp filter for {}: with the network off, only TCP is refused (Landlock), not other socket families",
            std::env::consts::ARCH
        ));
    }
    Support {
        landlock_abi: abi,
        seccomp,
        unsupported: None,
        gaps,
    }
}

#[cfg(not(target_os = "linux"))]
fn platform_probe() -> Support {
    Support {
        landlock_abi: 0,
        seccomp: false,
        unsupported: Some(format!(
            "commands are sandboxed only on Linux (Landlock); {} is not supported yet",
            std::env::consts::OS
        )),
        gaps: Vec::new(),
    }
}

/// The places a `workspace-write` command may write: the working directory, the temp
/// directory of the session's environment (`TMPDIR`, else `/tmp`) and the configured
/// extra roots. Relative extra roots resolve against `cwd`.
pub fn workspace_roots(cwd: &Path, tmpdir: Option<&str>, extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots = vec![cwd.to_path_buf()];
    let tmp = tmpdir
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    roots.push(tmp);
    roots.extend(extra.iter().map(|root| cwd.join(root)));
    roots.dedup();
    roots
}

/// Elsewhere no policy can be prepared: [`support`] says so, and callers never try.
#[cfg(not(target_os = "linux"))]
mod other {
    use std::io;

    #[derive(Debug)]
    pub struct Prepared(());

    impl Prepared {
        pub fn new(_policy: &super::Policy) -> io::Result<Self> {
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "commands are sandboxed only on Linux",
            ))
        }

        pub fn apply(&self, _command: &mut tokio::process::Command) {}
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
