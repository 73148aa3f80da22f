//! Landlock and seccomp on Linux: the ruleset and the filter built in the parent, and
//! the three system calls the child makes before `exec`.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, AccessNet, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::Policy;

/// The newest ABI whose rights jucode asks for; older kernels get what they offer, and
/// [`super::Support::gaps`] says what is lost.
const TARGET_ABI: i32 = 6;

/// Devices every command may write to, whatever the policy.
const DEVICES: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];

/// The Landlock ABI version of the running kernel, 0 when it has none.
pub(super) fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the call only
    // returns a number; it creates nothing and restricts nothing.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// A policy made ready to apply: the Landlock ruleset (a file descriptor, rules added)
/// and, with the network off, the seccomp program. Built in the parent, once per command.
pub struct Prepared {
    ruleset: OwnedFd,
    filter: Option<Arc<[libc::sock_filter]>>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("ruleset", &self.ruleset)
            .field("filter", &self.filter.as_ref().map(|filter| filter.len()))
            .finish()
    }
}

impl Prepared {
    /// Builds the ruleset and the filter for `policy`. Writable roots that do not exist
    /// are skipped (nothing can be written there anyway until something creates them,
    /// which the sandbox then refuses).
    pub fn new(policy: &Policy) -> io::Result<Self> {
        let ruleset = build_ruleset(policy)?;
        let filter = if policy.network {
            None
        } else {
            match network_filter() {
                Ok(program) => Some(to_libc(program)),
                // An architecture without a filter: Landlock still refuses TCP, and the
                // session's `sandbox` event says what is not refused.
                Err(_) => None,
            }
        };
        Ok(Self { ruleset, filter })
    }

    /// Makes `command` restrict its child before `exec`.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        let ruleset = self.ruleset.as_raw_fd();
        let filter = self.filter.clone();
        // SAFETY: the closure runs in the child after `fork`; it makes only system calls
        // (no allocation, no lock) and reads memory the parent prepared, which the child's
        // copy of the address space holds until `exec`. The ruleset descriptor outlives
        // the spawn: `self` is borrowed by the caller across it.
        unsafe {
            command.pre_exec(move || restrict_child(ruleset, filter.as_deref()));
        }
    }
}

/// The child's side: `no_new_privs`, the Landlock domain, the seccomp filter. Any failure
/// stops the spawn with that error: the command never runs unrestricted.
fn restrict_child(ruleset: i32, filter: Option<&[libc::sock_filter]>) -> io::Result<()> {
    // SAFETY: plain system calls on values owned by this process.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some(filter) = filter {
            let program = libc::sock_fprog {
                len: u16::try_from(filter.len()).unwrap_or(u16::MAX),
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0u32,
                &raw const program,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn build_ruleset(policy: &Policy) -> io::Result<OwnedFd> {
    build_landlock(policy)
        .map_err(io::Error::other)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "Landlock is not available"))
}

fn build_landlock(
    policy: &Policy,
) -> Result<Option<OwnedFd>, Box<dyn std::error::Error + Send + Sync>> {
    // The rights of the ABI the probe found (capped: `JUCODE_SANDBOX_SIMULATE_ABI`), so
    // what is asked for is exactly what `Support::gaps` does not list.
    let version = super::support().landlock_abi.min(TARGET_ABI);
    let abi = ABI::from(version);
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(abi))?;
    if !policy.network && version >= 4 {
        // Handled and never granted: no TCP connect or bind at all.
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    if version >= 6 {
        if !policy.network {
            // No connecting to an abstract unix socket made outside the sandbox.
            ruleset = ruleset.scope(Scope::AbstractUnixSocket)?;
        }
        // Signals only to processes inside the sandbox (the command's own), always.
        ruleset = ruleset.scope(Scope::Signal)?;
    }
    let mut created = ruleset.create()?;
    created = created.add_rule(PathBeneath::new(
        PathFd::new("/")?,
        AccessFs::from_read(abi),
    ))?;
    for device in DEVICES {
        if let Ok(fd) = PathFd::new(device) {
            created = created.add_rule(PathBeneath::new(fd, AccessFs::from_file(abi)))?;
        }
    }
    for root in &policy.writable {
        let Ok(fd) = PathFd::new(root) else { continue };
        let access = if root.is_dir() {
            AccessFs::from_all(abi)
        } else {
            AccessFs::from_file(abi)
        };
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    Ok(created.into())
}

/// The seccomp program for the network off: `socket` refused for every family (TCP is
/// Landlock's too; this covers UDP, raw, netlink, unix sockets that could connect to
/// the daemon's socket or a session bus, and the rest), `socketpair` only for unix
/// pairs, and `io_uring` (whose requests would bypass the filter). Refusals are
/// `EPERM`; every other call is allowed.
pub(super) fn network_filter() -> Result<BpfProgram, seccompiler::BackendError> {
    let arch: TargetArch = std::env::consts::ARCH.try_into()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let not_unix = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )?])?;
    // `c_long` is `i64` only on 64-bit targets.
    #[allow(clippy::useless_conversion)]
    let numbers = |nr: libc::c_long| {
        let mut all = vec![i64::from(nr)];
        // x86-64 also accepts the x32 ABI's numbers (the same audit architecture).
        if cfg!(target_arch = "x86_64") {
            all.push(i64::from(nr) | 0x4000_0000);
        }
        all
    };
    for nr in numbers(libc::SYS_socket) {
        rules.insert(nr, Vec::new());
    }
    for nr in numbers(libc::SYS_socketpair) {
        rules.insert(nr, vec![not_unix.clone()]);
    }
    for call in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        for nr in numbers(call) {
            rules.insert(nr, Vec::new());
        }
    }
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?
    .try_into()
}

fn to_libc(program: BpfProgram) -> Arc<[libc::sock_filter]> {
    program
        .into_iter()
        .map(|insn| libc::sock_filter {
            code: insn.code,
            jt: insn.jt,
            jf: insn.jf,
            k: insn.k,
        })
        .collect()
}
