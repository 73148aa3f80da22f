//! Starting, finding and stopping daemons: permissions, locks, stale sockets, races.
#![cfg(unix)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use common::{Client, FakeHost, TestDaemon};
use jucode_daemon::{DaemonOptions, Inherited, connect_or_start, paths, run};
use serde_json::json;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn socket_is_0600_in_a_0700_directory() {
    let daemon = TestDaemon::start().await;
    assert_eq!(mode(&daemon.socket), 0o600);
    assert_eq!(mode(daemon.socket.parent().unwrap()), 0o700);
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn refuses_a_directory_others_can_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let options = DaemonOptions::new(dir.join("daemon.sock"));
    let err = run(
        Arc::new(FakeHost::default()),
        options,
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(
        err.to_string()
            .contains("is writable by group or others (mode 777)"),
        "{err}"
    );
}

#[tokio::test]
async fn refuses_a_directory_of_another_user() {
    // Only root can give a directory away.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: giving a directory to another user needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("theirs");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(4242), None).unwrap();
    let err = paths::prepare_socket_dir(&dir).unwrap_err();
    assert!(err.to_string().contains("owned by uid 4242"), "{err}");
}

#[tokio::test]
async fn a_second_daemon_on_the_same_socket_exits_with_a_clear_error() {
    let daemon = TestDaemon::start().await;
    let options = DaemonOptions::new(&daemon.socket);
    let err = run(
        Arc::new(FakeHost::default()),
        options,
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(
        err.to_string()
            .contains("another jucode daemon is already running"),
        "{err}"
    );
    // The first one is unharmed.
    let mut client = daemon.client().await;
    client.expect_hello().await;
    daemon.stop().await.unwrap();
}

/// What a daemon killed with SIGKILL leaves behind: a socket file nobody listens on and
/// an unlocked lock file.
fn leave_stale_files(socket: &Path) {
    paths::prepare_socket_dir(socket.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(socket).unwrap());
    std::fs::write(paths::daemon_lock_path(socket), "12345\n").unwrap();
    let refused = std::os::unix::net::UnixStream::connect(socket).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
}

/// Not a test on its own: the daemon process that `killed_daemon_is_replaced` kills.
#[test]
#[ignore = "a helper process: a_killed_daemon_is_replaced runs it and kills it"]
fn helper_daemon_process() {
    let socket = std::env::var_os(HELPER_SOCKET)
        .expect("run by a_killed_daemon_is_replaced, which sets the socket");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let options = DaemonOptions::new(PathBuf::from(socket));
    let result = runtime.block_on(run(
        Arc::new(FakeHost::default()),
        options,
        std::future::pending(),
    ));
    panic!("the helper daemon returned: {result:?}");
}

const HELPER_SOCKET: &str = "JUCODE_DAEMON_TEST_HELPER_SOCKET";

/// Never leaves the helper daemon running, even when the test fails half-way.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("run/daemon.sock");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_daemon_process",
            "--ignored",
            "--test-threads=1",
        ])
        .env(HELPER_SOCKET, &socket)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let mut old = Client::connect(&socket).await;
    old.expect_hello().await;
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    old.expect_eof().await;
    assert!(socket.exists(), "SIGKILL leaves the socket file behind");
    let refused = std::os::unix::net::UnixStream::connect(&socket).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);

    let threads = Mutex::new(Vec::new());
    let stream = connect_or_start(&socket, || {
        spawn_daemon_thread(socket.clone(), &threads);
        Ok(())
    })
    .await
    .unwrap();
    let mut client = Client::from_stream(stream);
    client.expect_hello().await;
    client.send(r#"{"op":"daemon_stop"}"#).await;
    client.expect("info").await;
    let handles = std::mem::take(&mut *threads.lock().unwrap());
    assert_eq!(handles.len(), 1);
    for handle in handles {
        tokio::task::spawn_blocking(move || handle.join().unwrap())
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn a_stale_socket_is_replaced_by_a_new_daemon() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("run/daemon.sock");
    leave_stale_files(&socket);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(run(
        Arc::new(FakeHost::default()),
        DaemonOptions::new(&socket),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut client = Client::connect(&socket).await;
    client.expect_hello().await;
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();
}

#[tokio::test]
async fn graceful_stop_ends_sessions_and_removes_socket_and_lock() {
    let daemon = TestDaemon::start().await;
    let socket = daemon.socket.clone();
    let mut client = daemon.client().await;
    client.expect_hello().await;
    let id = client.open().await;
    daemon.stop().await.unwrap();
    client.expect("bye").await;
    assert_eq!(
        client.next().await,
        json!({"type":"session_closed","session":id,"reason":"daemon_stopping"})
    );
    client.expect_eof().await;
    assert!(!socket.exists(), "socket file left behind");
    assert!(
        !paths::daemon_lock_path(&socket).exists(),
        "lock file left behind"
    );
}

#[tokio::test]
async fn stop_gives_up_on_a_session_that_does_not_end() {
    let daemon = TestDaemon::start_with(|options| {
        options.stop_grace = std::time::Duration::from_millis(200);
    })
    .await;
    let mut client = daemon.client().await;
    client.expect_hello().await;
    let id = client.open().await;
    client.send(r#"{"op":"stubborn"}"#).await;
    client.send(r#"{"op":"echo","text":"sync"}"#).await;
    client.expect("echo").await;
    daemon.stop().await.unwrap();
    client.expect("bye").await;
    assert_eq!(
        client.next().await,
        json!({"type":"session_closed","session":id,"reason":"daemon_stopping"})
    );
    client.expect_eof().await;
}

#[tokio::test]
async fn daemon_stop_op_answers_then_stops() {
    let mut daemon = TestDaemon::start().await;
    let mut client = daemon.client().await;
    client.expect_hello().await;
    let id = client.open().await;
    client.send(r#"{"op":"daemon_stop"}"#).await;
    assert_eq!(
        client.next().await,
        json!({"type":"info","message":"daemon stopping"})
    );
    client.expect("bye").await;
    assert_eq!(
        client.next().await,
        json!({"type":"session_closed","session":id,"reason":"daemon_stopping"})
    );
    client.expect_eof().await;
    daemon.join().await.unwrap();
    assert!(!daemon.socket.exists());
}

#[tokio::test]
async fn systemd_socket_is_served_and_left_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut options = DaemonOptions::new(&socket);
    options.inherited = Some(Inherited::from_fd(listener.into()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(run(Arc::new(FakeHost::default()), options, async move {
        let _ = stopped.await;
    }));
    let mut client = Client::connect(&socket).await;
    client.expect_hello().await;
    let id = client.open().await;
    client.echo(&id, "via systemd").await;
    stop.send(()).unwrap();
    daemon.await.unwrap().unwrap();
    assert!(socket.exists(), "the socket belongs to the .socket unit");
    assert!(!paths::daemon_lock_path(&socket).exists());
}

/// Starts a daemon on its own thread and runtime, like a detached process would be.
fn spawn_daemon_thread(socket: PathBuf, threads: &Mutex<Vec<JoinHandle<std::io::Result<()>>>>) {
    let handle = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(
            Arc::new(FakeHost::default()),
            DaemonOptions::new(socket),
            std::future::pending(),
        ))
    });
    threads.lock().unwrap().push(handle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starters_end_with_one_daemon() {
    const STARTERS: usize = 4;
    for round in 0..3 {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("run/daemon.sock");
        if round == 2 {
            leave_stale_files(&socket);
        }
        let starts = Arc::new(AtomicUsize::new(0));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let barrier = Arc::new(tokio::sync::Barrier::new(STARTERS));
        let mut tasks = Vec::new();
        for _ in 0..STARTERS {
            let socket = socket.clone();
            let starts = starts.clone();
            let threads = threads.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let stream = connect_or_start(&socket, || {
                    starts.fetch_add(1, Ordering::SeqCst);
                    spawn_daemon_thread(socket.clone(), &threads);
                    Ok(())
                })
                .await
                .unwrap();
                let mut client = Client::from_stream(stream);
                client.expect_hello().await;
                client
            }));
        }
        let mut clients = Vec::new();
        for task in tasks {
            clients.push(task.await.unwrap());
        }
        assert_eq!(starts.load(Ordering::SeqCst), 1, "round {round}");

        // They all talk to the same daemon.
        let id = clients[0].open().await;
        for client in &mut clients[1..] {
            assert_eq!(client.sessions().await[0]["session"], id.as_str());
        }
        clients[1].send(r#"{"op":"daemon_stop"}"#).await;
        let handles = std::mem::take(&mut *threads.lock().unwrap());
        for handle in handles {
            tokio::task::spawn_blocking(move || handle.join().unwrap())
                .await
                .unwrap()
                .unwrap();
        }
        assert!(!socket.exists());
    }
}

#[tokio::test]
async fn connect_or_start_uses_a_running_daemon() {
    let daemon = TestDaemon::start().await;
    let stream = connect_or_start(&daemon.socket, || panic!("must not start a second daemon"))
        .await
        .unwrap();
    let mut client = Client::from_stream(stream);
    client.expect_hello().await;
    daemon.stop().await.unwrap();
}

/// Not a test on its own: the other user's client of `another_users_connection_is_refused`,
/// which runs it (as another user, with `--ignored`). Prints how many bytes the daemon
/// sent before closing.
#[test]
#[ignore = "a helper process: another_users_connection_is_refused runs it as another user"]
fn helper_foreign_client() {
    use std::io::Read;
    let socket = std::env::var_os(HELPER_CLIENT_SOCKET)
        .expect("run by another_users_connection_is_refused, which sets the socket");
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    // A refused peer sees EOF at once; a timeout means it was let in.
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut received = Vec::new();
    let _ = stream.read_to_end(&mut received);
    println!("received={}", received.len());
}

const HELPER_CLIENT_SOCKET: &str = "JUCODE_DAEMON_TEST_FOREIGN_SOCKET";

/// The peer check is the last line of defence: even with the socket made world-writable
/// by mistake, another user's connection is closed before `hello`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_connection_is_refused() {
    use std::os::unix::process::CommandExt;
    // Only root can run a process as another user.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running a client as another user needs root");
        return;
    }
    let daemon = TestDaemon::start().await;
    let open = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(daemon.dir.path(), open.clone()).unwrap();
    std::fs::set_permissions(daemon.socket.parent().unwrap(), open).unwrap();
    std::fs::set_permissions(&daemon.socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = std::env::current_exe().unwrap();
    let socket = daemon.socket.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe)
            .args([
                "--exact",
                "helper_foreign_client",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(HELPER_CLIENT_SOCKET, &socket)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        // The test binary may not be reachable by `nobody` (a private target dir).
        eprintln!(
            "skipped: the foreign client could not run: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        daemon.stop().await.unwrap();
        return;
    }
    assert!(stdout.contains("received=0"), "{stdout}");
    // Our own user is still welcome.
    let mut client = daemon.client().await;
    client.expect_hello().await;
    daemon.stop().await.unwrap();
}

#[tokio::test]
async fn a_daemon_whose_socket_file_is_removed_stops() {
    let mut daemon = TestDaemon::start_with(|options| {
        options.socket_check = std::time::Duration::from_millis(20);
    })
    .await;
    std::fs::remove_file(&daemon.socket).unwrap();
    // It notices within a few checks and stops on its own.
    tokio::time::timeout(std::time::Duration::from_secs(10), daemon.join())
        .await
        .expect("the daemon stopped")
        .unwrap();
}

#[tokio::test]
async fn a_replaced_socket_file_is_left_to_its_new_owner() {
    let mut daemon = TestDaemon::start_with(|options| {
        options.socket_check = std::time::Duration::from_millis(20);
    })
    .await;
    std::fs::remove_file(&daemon.socket).unwrap();
    let other = std::os::unix::net::UnixListener::bind(&daemon.socket).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), daemon.join())
        .await
        .expect("the daemon stopped")
        .unwrap();
    assert!(
        daemon.socket.exists(),
        "the new owner's socket is not removed"
    );
    drop(other);
}
