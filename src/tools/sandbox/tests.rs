//! The sandbox applied to real commands through the exec layer (`sh -c` in a child
//! restricted before `exec`). Each case skips, saying why, on a kernel without Landlock.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::engine::Progress;
use crate::tools::exec::{self, End, Job};

/// Landlock's ABI here, or `None` (printing why the test is skipped).
fn landlock() -> Option<i32> {
    let abi = linux::landlock_abi();
    if abi < 1 {
        eprintln!("skipped: this kernel offers no Landlock, so nothing can be enforced");
        return None;
    }
    Some(abi)
}

struct Run {
    code: Option<i32>,
    output: String,
}

async fn run(command: &str, cwd: &Path, policy: Option<&Policy>) -> Run {
    let env: HashMap<String, String> = std::env::vars().collect();
    let prepared = policy.map(|policy| Prepared::new(policy).expect("ruleset"));
    let job = Job {
        command,
        cwd,
        env: &env,
        timeout: Duration::from_secs(30),
        cancel: &CancellationToken::new(),
        progress: &Progress::default(),
        sandbox: prepared.as_ref(),
    };
    let finished = exec::run(job).await.expect("spawn");
    let code = match finished.end {
        End::Exited(status) => status.code(),
        other => panic!("{command}: {other:?}"),
    };
    Run {
        code,
        output: finished.output,
    }
}

/// A workspace and a directory outside it, neither under the other, and the
/// `workspace-write` policy of the workspace alone.
struct Dirs {
    _root: tempfile::TempDir,
    workspace: PathBuf,
    outside: PathBuf,
}

impl Dirs {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let workspace = root.path().join("workspace");
        let outside = root.path().join("outside");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::create_dir(&outside).unwrap();
        Self {
            workspace: workspace.canonicalize().unwrap(),
            outside: outside.canonicalize().unwrap(),
            _root: root,
        }
    }

    fn policy(&self, network: bool) -> Policy {
        Policy {
            writable: vec![self.workspace.clone()],
            network,
        }
    }
}

/// Asserts that `command` failed and left `target` absent, and that it does write
/// `target` without the sandbox (so the sandbox is what refused it).
async fn assert_refused(dirs: &Dirs, command: &str, target: &Path) {
    let sandboxed = run(command, &dirs.workspace, Some(&dirs.policy(false))).await;
    assert_ne!(sandboxed.code, Some(0), "{command}: {}", sandboxed.output);
    assert!(
        sandboxed.output.contains("Permission denied") || sandboxed.output.contains("Errno 13"),
        "{command}: {}",
        sandboxed.output
    );
    assert!(!target.exists(), "{command} wrote {}", target.display());
    let free = run(command, &dirs.workspace, None).await;
    assert_eq!(free.code, Some(0), "unsandboxed {command}: {}", free.output);
    assert!(target.exists(), "unsandboxed {command} did not write");
}

#[tokio::test]
async fn probe_reports_this_kernel() {
    let support = probe(false);
    println!(
        "landlock ABI {}, seccomp {}",
        support.landlock_abi, support.seccomp
    );
    assert_eq!(support.enforced(), support.landlock_abi >= 1);
    let simulated = probe(true);
    assert!(!simulated.enforced());
    assert!(
        simulated
            .unsupported
            .unwrap()
            .contains(SIMULATE_UNSUPPORTED)
    );
}

#[tokio::test]
async fn write_inside_the_workspace_works() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let out = run(
        "mkdir -p sub && echo hi > sub/f && cat sub/f && rm sub/f && echo ok > /dev/null",
        &dirs.workspace,
        Some(&dirs.policy(false)),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.output);
    assert_eq!(out.output, "hi\n");
}

#[tokio::test]
async fn write_outside_is_refused() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let target = dirs.outside.join("x");
    assert_refused(&dirs, &format!("echo x > {}", target.display()), &target).await;
}

#[tokio::test]
async fn write_through_a_symlink_pointing_out_is_refused() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    std::os::unix::fs::symlink(&dirs.outside, dirs.workspace.join("link")).unwrap();
    let target = dirs.outside.join("x");
    assert_refused(&dirs, "echo x > link/x", &target).await;
}

#[tokio::test]
async fn write_through_dotdot_is_refused() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let target = dirs.outside.join("x");
    assert_refused(&dirs, "echo x > ../outside/x", &target).await;
}

#[tokio::test]
async fn write_by_a_child_of_a_child_is_refused() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let target = dirs.outside.join("x");
    let command = format!("sh -c 'sh -c \"touch {}\"'", target.display());
    assert_refused(&dirs, &command, &target).await;
}

#[tokio::test]
async fn write_by_python_is_refused() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let target = dirs.outside.join("x");
    let command = format!(
        "python3 -c 'open(\"{}\", \"w\").write(\"x\")'",
        target.display()
    );
    assert_refused(&dirs, &command, &target).await;
}

#[tokio::test]
async fn write_after_cd_slash_is_refused() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let target = dirs.outside.join("x");
    let relative = target.strip_prefix("/").unwrap();
    let command = format!("cd / && echo x > {}", relative.display());
    assert_refused(&dirs, &command, &target).await;
}

#[tokio::test]
async fn read_only_refuses_writes_in_the_workspace_too() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let policy = Policy {
        writable: Vec::new(),
        network: false,
    };
    let out = run("echo x > f", &dirs.workspace, Some(&policy)).await;
    assert_ne!(out.code, Some(0));
    assert!(!dirs.workspace.join("f").exists());
    let out = run(
        "cat /etc/hostname > /dev/null && ls /",
        &dirs.workspace,
        Some(&policy),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.output);
}

#[tokio::test]
async fn reading_outside_the_workspace_works() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    std::fs::write(dirs.outside.join("r"), "outside text").unwrap();
    let out = run(
        &format!("cat {}/r && ls /etc > /dev/null", dirs.outside.display()),
        &dirs.workspace,
        Some(&dirs.policy(false)),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.output);
    assert_eq!(out.output, "outside text");
}

/// A connect to a listener this test runs on loopback, from python (a TCP client that
/// is always here); the listener never accepts, the kernel completes the handshake.
fn connect_command(port: u16) -> String {
    format!(
        "python3 -c 'import socket; s = socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"connected\")'"
    )
}

#[tokio::test]
async fn tcp_connect_is_refused_with_the_network_off() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = run(
        &connect_command(port),
        &dirs.workspace,
        Some(&dirs.policy(false)),
    )
    .await;
    assert_ne!(out.code, Some(0), "{}", out.output);
    assert!(!out.output.contains("connected"), "{}", out.output);
    assert!(out.output.contains("PermissionError"), "{}", out.output);
}

#[tokio::test]
async fn tcp_connect_works_with_the_network_on() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = run(
        &connect_command(port),
        &dirs.workspace,
        Some(&dirs.policy(true)),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.output);
    assert_eq!(out.output, "connected\n");
}

#[tokio::test]
async fn other_socket_families_are_refused_with_the_network_off() {
    let Some(_) = landlock() else { return };
    if !probe(false).seccomp {
        eprintln!("skipped: no seccomp filter for this architecture");
        return;
    }
    let dirs = Dirs::new();
    // UDP (Landlock does not cover it) and a unix socket (the daemon's, a session bus):
    // refused; a unix socketpair (no address, reaches nobody): allowed.
    let script = "import socket\n\
        for name, family, kind in (('udp', socket.AF_INET, socket.SOCK_DGRAM), ('unix', socket.AF_UNIX, socket.SOCK_STREAM)):\n\
        \x20   try:\n\
        \x20       socket.socket(family, kind)\n\
        \x20       print('created', name)\n\
        \x20   except PermissionError:\n\
        \x20       print('refused', name)\n\
        socket.socketpair()\n\
        print('pair')\n";
    std::fs::write(dirs.workspace.join("s.py"), script).unwrap();
    let out = run("python3 s.py", &dirs.workspace, Some(&dirs.policy(false))).await;
    assert_eq!(out.code, Some(0), "{}", out.output);
    assert_eq!(out.output, "refused udp\nrefused unix\npair\n");
    let out = run("python3 s.py", &dirs.workspace, Some(&dirs.policy(true))).await;
    assert_eq!(out.output, "created udp\ncreated unix\npair\n");
}

#[tokio::test]
async fn no_new_privs_is_set_and_a_setuid_binary_gains_nothing() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let out = run(
        "grep NoNewPrivs /proc/self/status",
        &dirs.workspace,
        Some(&dirs.policy(false)),
    )
    .await;
    assert_eq!(
        out.output.split_whitespace().nth(1),
        Some("1"),
        "{}",
        out.output
    );

    // A copy of `id` owned by another user with the setuid bit: run unsandboxed it takes
    // that user's id; in the sandbox (no_new_privs) the bit is ignored.
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped the setuid half: making a setuid binary of another user needs root");
        return;
    }
    let id = dirs.workspace.join("id-setuid");
    std::fs::copy("/usr/bin/id", &id).unwrap();
    nix::unistd::chown(&id, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let own = nix::unistd::geteuid().as_raw().to_string();
    let free = run("./id-setuid -u", &dirs.workspace, None).await;
    if free.output.trim() != "65534" {
        eprintln!(
            "skipped the setuid half: the file system ignores setuid bits here ({})",
            free.output.trim()
        );
        return;
    }
    let boxed = run("./id-setuid -u", &dirs.workspace, Some(&dirs.policy(false))).await;
    assert_eq!(boxed.code, Some(0), "{}", boxed.output);
    assert_eq!(boxed.output.trim(), own);
}

#[tokio::test]
async fn signals_to_processes_outside_are_refused() {
    let Some(abi) = landlock() else { return };
    if abi < 6 {
        eprintln!("skipped: signal scoping needs Landlock ABI 6 (this kernel: {abi})");
        return;
    }
    let dirs = Dirs::new();
    let mut outside = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let out = run(
        &format!("kill -0 {}", outside.id()),
        &dirs.workspace,
        Some(&dirs.policy(false)),
    )
    .await;
    outside.kill().unwrap();
    outside.wait().unwrap();
    assert_ne!(out.code, Some(0), "{}", out.output);
    // Its own children it may signal.
    let out = run(
        "sleep 30 & kill $!",
        &dirs.workspace,
        Some(&dirs.policy(false)),
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.output);
}

#[test]
fn a_refused_write_is_named_when_only_the_sandbox_explains_it() {
    let dirs = Dirs::new();
    let policy = dirs.policy(false);
    let target = dirs.outside.join("x");
    let output = format!(
        "exit code: 1\nsh: 1: cannot create {}: Permission denied\n",
        target.display()
    );
    let note = explain_refusal(&output, &dirs.workspace, &policy, "workspace-write").unwrap();
    assert!(
        note.contains(&format!(
            "the sandbox refused a write to {}",
            target.display()
        )),
        "{note}"
    );
    assert!(note.contains("\"unsandboxed\": true"), "{note}");
    // Inside the workspace the sandbox does not refuse: only "may".
    let output = format!(
        "touch: cannot touch '{}/f': Permission denied",
        dirs.workspace.display()
    );
    let note = explain_refusal(&output, &dirs.workspace, &policy, "workspace-write").unwrap();
    assert!(note.contains("may have refused"), "{note}");
    // Read-only: a write in the workspace is the sandbox's doing.
    let read_only = Policy {
        writable: Vec::new(),
        network: false,
    };
    let output = format!(
        "sh: 1: cannot create {}/f: Permission denied",
        dirs.workspace.display()
    );
    let note = explain_refusal(&output, &dirs.workspace, &read_only, "read-only").unwrap();
    assert!(note.contains("this sandbox is read-only"), "{note}");
    // Nothing that looks like a refusal: no note.
    assert_eq!(
        explain_refusal(
            "error: no such file",
            &dirs.workspace,
            &policy,
            "workspace-write"
        ),
        None
    );
}

#[tokio::test]
async fn mounts_are_refused() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    std::fs::create_dir(dirs.workspace.join("m")).unwrap();
    // Only where this process may mount at all (root with CAP_SYS_ADMIN here).
    let free = run("mount -t tmpfs none m && umount m", &dirs.workspace, None).await;
    if free.code != Some(0) {
        eprintln!(
            "skipped: mounting is not allowed here even unsandboxed: {}",
            free.output
        );
        return;
    }
    let boxed = run(
        "mount -t tmpfs none m",
        &dirs.workspace,
        Some(&dirs.policy(false)),
    )
    .await;
    assert_ne!(boxed.code, Some(0), "{}", boxed.output);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains(&dirs.workspace.join("m").display().to_string()),
        "{mounts}"
    );
}

/// A known limit (`docs/security.md`, *What is not enforced*): Landlock does not restrict
/// metadata, so a sandboxed command changes the mode of a file outside the workspace,
/// though not its content. If a kernel ever refuses it, this test says the doc is stale.
#[tokio::test]
async fn metadata_changes_are_not_restricted() {
    let Some(_) = landlock() else { return };
    let dirs = Dirs::new();
    let file = dirs.outside.join("f");
    std::fs::write(&file, "kept").unwrap();
    let command = format!("chmod 600 {0} && echo changed > {0}", file.display());
    let out = run(&command, &dirs.workspace, Some(&dirs.policy(false))).await;
    assert_ne!(out.code, Some(0), "{}", out.output);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "chmod went through: docs/security.md says so");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
}
