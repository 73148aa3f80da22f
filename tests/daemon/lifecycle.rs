//! Starting, stopping, racing, stale sockets, permissions, quitting.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::common::daemon::{DaemonGuard, Raw};
use crate::common::serve::{Home, Serve};

#[test]
fn the_shim_starts_a_daemon_and_daemon_stop_ends_it() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    assert!(home.daemon_status().is_none(), "no daemon yet");
    let status = home.jucode(&["daemon", "status"]);
    assert_ne!(status.status.code(), Some(0));

    let mut serve = Serve::shim(&home).start();
    serve.skip_startup();
    let status = home.daemon_status().expect("the shim started a daemon");
    assert_eq!(status["sessions"], 1);

    let stop = home.jucode(&["daemon", "stop"]);
    assert_eq!(stop.status.code(), Some(0), "{stop:?}");
    assert!(!home.socket().exists(), "the socket is removed");
    assert!(home.daemon_status().is_none());
    // The shim learns its daemon is gone: an error event, then a non-zero exit.
    let rest = serve.rest();
    let last = rest.last().expect("an error event");
    assert_eq!(last["type"], "error", "{rest:#?}");
    assert_eq!(serve.wait().code(), Some(1));
}

#[test]
fn quitting_ends_the_client_and_the_session_only_when_alone() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let mut a = Serve::shim(&home).start();
    let session = a.skip_startup()[0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut b = Serve::shim(&home).arg("--session").arg(&session).start();
    b.next();
    b.until_ready();
    a.send(json!({"op": "command", "input": "/quit"}));
    assert_eq!(a.wait().code(), Some(0));
    assert_eq!(
        home.daemon_status().unwrap()["sessions"],
        1,
        "b keeps it alive"
    );
    b.send(json!({"op": "agent_runs"}));
    assert_eq!(
        b.until("agent_runs").last().unwrap()["session"],
        session.as_str()
    );
    b.send(json!({"op": "shutdown"}));
    assert_eq!(b.wait().code(), Some(0));
    let status = home.daemon_status().unwrap();
    assert_eq!(status["sessions"], 0, "the last client ended it: {status}");
}

#[test]
fn attaching_to_an_unknown_session_fails_cleanly() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let mut serve = Serve::shim(&home).arg("--session").arg("nope").start();
    assert_eq!(serve.next()["type"], "hello");
    let error = serve.next();
    assert_eq!(error["type"], "error");
    assert!(error["message"].as_str().unwrap().contains("nope"));
    assert_ne!(serve.wait().code(), Some(0));
}

#[test]
fn shims_racing_to_start_end_with_one_daemon() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let mut shims: Vec<Serve> = (0..4).map(|_| Serve::shim(&home).start()).collect();
    let mut sessions = Vec::new();
    for shim in &mut shims {
        sessions.push(shim.skip_startup()[0]["session_id"].clone());
    }
    sessions.sort_by_key(|s| s.to_string());
    sessions.dedup();
    assert_eq!(sessions.len(), 4);
    let status = home.daemon_status().unwrap();
    assert_eq!(
        status["sessions"], 4,
        "all four are in one daemon: {status}"
    );
}

#[test]
fn a_stale_socket_from_a_killed_daemon_is_replaced() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    let pid = home.daemon_status().unwrap()["pid"].as_u64().unwrap();
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Wait until nothing answers on the socket any more: the process shows as a zombie
    // while its other threads (which share the listening socket) are still exiting.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(home.socket()).is_ok() {
        assert!(std::time::Instant::now() < deadline, "daemon did not die");
        std::thread::yield_now();
    }
    assert!(
        home.socket().exists(),
        "SIGKILL leaves the socket file behind"
    );
    let mut serve = Serve::shim(&home).start();
    serve.skip_startup();
    let new_pid = home.daemon_status().unwrap()["pid"].as_u64().unwrap();
    assert_ne!(new_pid, pid);
}

#[test]
fn the_socket_is_private() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    // The socket lives in JUCODE_HOME here; make it a private directory as the daemon
    // requires of its socket directory.
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    let mode = std::fs::metadata(home.socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let dir = std::fs::metadata(home.path()).unwrap().permissions().mode();
    assert_eq!(dir & 0o077, 0, "{dir:o}");
}

#[test]
fn daemon_start_is_idempotent_and_status_is_json() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let first = home.jucode(&["daemon", "start"]);
    assert_eq!(first.status.code(), Some(0));
    let second = home.jucode(&["daemon", "start"]);
    assert_eq!(second.status.code(), Some(0));
    let a: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let b: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(a["pid"], b["pid"]);
    let mut raw = Raw::connect(&home);
    raw.send(json!({"op": "daemon_status"}));
    assert_eq!(raw.next()["type"], "daemon_status");
}

#[test]
fn the_daemon_runs_in_the_foreground_until_sigterm() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_jucode"))
        .args(["daemon"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("JUCODE_HOME", home.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // Once it answers, a shim connects to it rather than starting another.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while home.daemon_status().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon did not start"
        );
    }
    let mut serve = Serve::shim(&home).start();
    serve.skip_startup();
    let status = home.daemon_status().unwrap();
    assert_eq!(status["pid"].as_u64().unwrap(), u64::from(daemon.id()));
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    assert!(daemon.wait().unwrap().success());
    assert!(!home.socket().exists());
    assert!(home.path().join("logs/daemon.log").exists());
}

/// A stand-in for a daemon of another jucode version: says hello with `version`,
/// answers `daemon_status` with `sessions`, and on `daemon_stop` goes away (removing
/// its socket, as a real daemon does).
fn fake_old_daemon(home: &Home, sessions: u64) -> std::thread::JoinHandle<Vec<String>> {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::os::unix::net::UnixListener::bind(home.socket()).unwrap();
    let socket = home.socket();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        writeln!(
            stream,
            r#"{{"type":"hello","protocol":2,"version":"0.0.1-old"}}"#
        )
        .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut ops = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return ops;
            }
            ops.push(line.clone());
            if line.contains("daemon_status") {
                let status = json!({"type": "daemon_status", "pid": 1, "version": "0.0.1-old",
                    "socket": socket, "sessions": sessions, "clients": 1, "uptime_ms": 5});
                writeln!(stream, "{status}").unwrap();
            }
            if line.contains("daemon_stop") {
                drop(listener);
                let _ = std::fs::remove_file(&socket);
                return ops;
            }
        }
    })
}

#[test]
fn a_daemon_of_another_version_with_sessions_is_refused() {
    let home = Home::new();
    let fake = fake_old_daemon(&home, 2);
    let mut serve = Serve::shim(&home).start();
    let error = serve.next();
    assert_eq!(
        error["type"], "error",
        "no hello from another version is forwarded"
    );
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("0.0.1-old"), "{message}");
    assert!(message.contains(env!("CARGO_PKG_VERSION")), "{message}");
    assert!(message.contains("jucode daemon stop"), "{message}");
    assert!(message.contains("--in-process"), "{message}");
    assert_eq!(serve.wait().code(), Some(1));
    let ops = fake.join().unwrap();
    assert!(
        !ops.iter().any(|op| op.contains("daemon_stop")),
        "sessions were kept"
    );
}

#[test]
fn an_idle_daemon_of_another_version_is_replaced() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let fake = fake_old_daemon(&home, 0);
    let mut serve = Serve::shim(&home).start();
    let hello = serve.next();
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["version"], env!("CARGO_PKG_VERSION"));
    serve.until("mcp_servers");
    let ops = fake.join().unwrap();
    assert!(ops.iter().any(|op| op.contains("daemon_stop")), "{ops:?}");
    assert_eq!(
        home.daemon_status().unwrap()["version"],
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn sessions_run_tools_with_the_environment_of_the_client_that_opened_them() {
    use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call};
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "full-access");
    let _guard = DaemonGuard(&home);
    // The daemon starts without the variable...
    assert_eq!(home.jucode(&["daemon", "start"]).status.code(), Some(0));
    model.push(Reply::Sse(vec![
        tool_call(0, "c1", "bash", r#"{"command":"echo token=$CLIENT_TOKEN"}"#),
        finish("tool_calls"),
        Step::Done,
    ]));
    model.push(text_reply(&["ok"]));
    // ...and the client that opens the session has it.
    let mut serve = Serve::shim(&home).env("CLIENT_TOKEN", "s3cret").start();
    serve.skip_startup();
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until("tool_output");
    let output = events.last().unwrap()["output"].as_str().unwrap();
    assert!(output.contains("token=s3cret"), "{output}");
    serve.until_ready();
}

#[test]
fn systemd_socket_activation_hands_the_daemon_its_listener() {
    let Ok(activator) = which("systemd-socket-activate") else {
        eprintln!("systemd-socket-activate is not installed; socket activation not exercised");
        return;
    };
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let socket = home.socket();
    let path = std::env::var("PATH").unwrap_or_default();
    let mut activated = Command::new(activator)
        .arg("--listen")
        .arg(&socket)
        .arg(format!("--setenv=JUCODE_HOME={}", home.path().display()))
        .arg(format!("--setenv=HOME={}", home.path().display()))
        .arg(format!("--setenv=PATH={path}"))
        .arg(env!("CARGO_BIN_EXE_jucode"))
        .args(["daemon", "--socket"])
        .arg(&socket)
        .env_clear()
        .env("PATH", &path)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The activator binds at once; wait for the socket file (a failure bound only).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "no socket from the activator"
        );
        std::thread::yield_now();
    }
    // The first connection starts the daemon on the inherited socket.
    let mut serve = Serve::shim(&home).start();
    serve.skip_startup();
    let status = home.daemon_status().unwrap();
    assert_eq!(status["pid"].as_u64().unwrap(), u64::from(activated.id()));
    assert_eq!(status["sessions"], 1);
    assert_eq!(status["socket_activated"], true);
    serve.send(json!({"op": "shutdown"}));
    assert_eq!(serve.wait().code(), Some(0));
    assert_eq!(home.jucode(&["daemon", "stop"]).status.code(), Some(0));
    assert!(activated.wait().unwrap().success());
    assert!(
        socket.exists(),
        "an inherited socket belongs to the socket unit"
    );
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(program))
                .find(|candidate| candidate.is_file())
        })
        .ok_or(())
}

#[test]
fn a_session_uses_the_profile_of_the_client_that_opened_it() {
    let daemon_home = Home::new();
    let _guard = DaemonGuard(&daemon_home);
    assert_eq!(
        daemon_home.jucode(&["daemon", "start"]).status.code(),
        Some(0)
    );
    let client_home = Home::new();
    client_home.write_config("model = \"replay/demo\"\napproval_mode = \"auto\"\n");
    let socket = daemon_home.socket().display().to_string();
    let mut serve = Serve::shim(&client_home)
        .arg("--socket")
        .arg(&socket)
        .start();
    let batch = serve.skip_startup();
    assert_eq!(
        batch[0]["profile_dir"],
        client_home.path().display().to_string()
    );
    assert_eq!(batch[3]["mode"], "auto", "the client's config.toml applies");
    assert_eq!(daemon_home.daemon_status().unwrap()["sessions"], 1);
}

#[test]
fn serve_runs_in_process_when_no_daemon_can_be_started() {
    let home = Home::new();
    // A socket directory others may write to is refused by the daemon (the profile
    // itself is private: a profile others may write is refused by everything,
    // `tests/serve/sessions.rs`)...
    let shared = tempfile::tempdir().expect("a shared directory");
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = shared.path().join("daemon.sock");
    let mut serve = Serve::shim(&home)
        .arg("--socket")
        .arg(&socket.display().to_string())
        .start();
    // ...and the session runs in the serve process instead, with the same lines.
    let batch = serve.skip_startup();
    assert_eq!(batch[0]["profile_dir"], home.path().display().to_string());
    serve.send(json!({"op": "agent_runs"}));
    serve.until("agent_runs");
    serve.send(json!({"op": "shutdown"}));
    assert_eq!(serve.wait().code(), Some(0));
    assert!(home.daemon_status().is_none(), "no daemon was started");
    assert!(
        !socket.exists(),
        "no daemon listens in the shared directory"
    );
}
