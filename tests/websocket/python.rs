//! The WebSocket API with the Python `websockets` client.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::json;

use crate::common::mock::{
    Gate, MockModel, Reply, Step, finish, text, text_reply, tool_reply, usage,
};
use crate::common::serve::Home;
use crate::{WsDaemon, free_port, python, run_case};

macro_rules! python_or_skip {
    () => {
        match python() {
            Ok(python) => python,
            Err(why) => {
                crate::skipped(&why);
                return;
            }
        }
    };
}

fn setup(mode: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), mode);
    (model, home)
}

fn case(case: &str, daemon: &WsDaemon, python: &std::path::Path, extra: &[(&str, String)]) {
    let mut env = vec![
        ("WS_URL", daemon.url()),
        ("WORKDIR", daemon.home.path().display().to_string()),
    ];
    env.extend(extra.iter().cloned());
    run_case(python, case, &env);
}

fn daemon<'a>(home: &'a Home) -> WsDaemon<'a> {
    let port = free_port();
    let daemon = WsDaemon::start(home, &format!(r#"{{"port": {port}}}"#), port, &[]);
    daemon.wait_listening();
    daemon
}

#[test]
fn every_method() {
    let python = python_or_skip!();
    let (model, home) = setup("manual");
    model.push(text_reply(&["Hello", " there"]));
    let daemon = daemon(&home);
    case("every_method", &daemon, &python, &[]);
    daemon.stop();
}

#[test]
fn two_dashboards_on_one_session_and_an_approval_round_trip() {
    let python = python_or_skip!();
    let (model, home) = setup("manual");
    model.push(tool_reply(
        "call_1",
        "bash",
        json!({"command": "echo approved > approved.txt"}),
    ));
    model.push(text_reply(&["done"]));
    let daemon = daemon(&home);
    case("two_dashboards_and_an_approval", &daemon, &python, &[]);
    daemon.stop();
}

#[test]
fn cancel_really_interrupts() {
    let python = python_or_skip!();
    let (model, home) = setup("manual");
    let gate = Gate::new();
    model.push(Reply::Sse(vec![
        text("slow"),
        Step::Wait(gate.clone()),
        text(" never"),
        finish("stop"),
        Step::Done,
    ]));
    let daemon = daemon(&home);
    case("cancel", &daemon, &python, &[]);
    gate.open();
    daemon.stop();
}

#[test]
fn another_origin_is_refused() {
    let python = python_or_skip!();
    let (_model, home) = setup("manual");
    let daemon = daemon(&home);
    case("origin_refused", &daemon, &python, &[]);
    daemon.stop();
}

#[test]
fn an_oversized_frame_closes_that_connection_only() {
    let python = python_or_skip!();
    let (_model, home) = setup("manual");
    let daemon = daemon(&home);
    case("oversized_frame", &daemon, &python, &[]);
    daemon.stop();
    let log = std::fs::read_to_string(home.path().join("logs/daemon.log")).unwrap_or_default();
    assert!(log.contains("Message too long"), "{log}");
}

#[test]
fn a_dashboard_that_never_reads_is_cut_off_and_stalls_nothing() {
    let python = python_or_skip!();
    let (model, home) = setup("manual");
    home.append_config("[websocket]\nmax_queue_bytes = 524288\n");
    // 8 MB at a pace a reading client keeps up with, far more than the kernel's socket
    // buffers and the queue hold for one that does not read. Words, as a model writes:
    // the context count at the turn's end tokenizes it all.
    let delta = "the quick brown fox jumps over the lazy dog ".repeat(450);
    let mut steps: Vec<Step> = (0..400)
        .flat_map(|_| {
            [
                text(&delta),
                Step::Pause(std::time::Duration::from_millis(5)),
            ]
        })
        .collect();
    steps.extend([finish("stop"), usage(10, 4000), Step::Done]);
    model.push(Reply::Sse(steps));
    let daemon = daemon(&home);
    case("a_dashboard_that_never_reads", &daemon, &python, &[]);
    daemon.stop();
    // Cut off by the server for its queue, not by anything else that ends a stream.
    let log = std::fs::read_to_string(home.path().join("logs/daemon.log")).unwrap_or_default();
    assert!(log.contains("a dashboard fell behind"), "{log}");
}

#[test]
fn a_token_is_required_on_a_non_loopback_bind() {
    let python = python_or_skip!();
    let (_model, home) = setup("manual");
    // Without a token the daemon refuses to expose itself (and serves its socket).
    let port = free_port();
    let config = format!(r#"{{"host": "0.0.0.0", "port": {port}}}"#);
    let refusing = WsDaemon::start(&home, &config, port, &[]);
    crate::wait_daemon(&home);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    let stderr = refusing.stop();
    assert!(stderr.contains("not a loopback address"), "{stderr}");

    let port = free_port();
    let config = format!(r#"{{"host": "0.0.0.0", "port": {port}}}"#);
    let daemon = WsDaemon::start(
        &home,
        &config,
        port,
        &[("JUCODE_WEBSOCKET_TOKEN", "s3cret")],
    );
    daemon.wait_listening();
    case(
        "token_required",
        &daemon,
        &python,
        &[("WS_TOKEN", "s3cret".into())],
    );
    daemon.stop();
}

/// The example client of the peer's document, extracted from it and run unchanged
/// against `127.0.0.1:23254`, the address it names.
#[test]
fn the_seed_example_script_runs_unchanged() {
    let python = python_or_skip!();
    let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/spec/cecli-websocket-acp.txt");
    let Ok(text) = std::fs::read_to_string(&spec) else {
        let why = format!("{} is missing", spec.display());
        crate::skipped(&why);
        return;
    };
    let (Some(start), Some(end)) = (
        text.find("import asyncio"),
        text.find("asyncio.run(listen())"),
    ) else {
        panic!("the example script is not in {}", spec.display());
    };
    let script = &text[start..end + "asyncio.run(listen())".len()];
    let (model, home) = setup("manual");
    std::fs::write(home.path().join("notes.txt"), "a note\n").unwrap();
    model.push(tool_reply(
        "call_1",
        "read_file",
        json!({"path": "notes.txt"}),
    ));
    model.push(text_reply(&["All ", "good"]));
    let daemon = WsDaemon::start(&home, r#"{"host": "127.0.0.1", "port": 23254}"#, 23254, &[]);
    daemon.wait_listening();
    let path = home.path().join("seed_example.py");
    std::fs::write(&path, script).unwrap();
    let mut seed = Command::new(&python)
        .arg("-u")
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = seed.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || {
        lines
            .recv_timeout(crate::common::serve::EVENT_TIMEOUT)
            .expect("the example printed nothing more")
    };
    assert_eq!(next(), "Initialized: jucode");
    let session = next()
        .strip_prefix("Session: ")
        .expect("the example's session")
        .to_owned();
    let drive = {
        let python = python.clone();
        let url = daemon.url();
        std::thread::spawn(move || {
            run_case(
                &python,
                "drive_session",
                &[("WS_URL", url), ("SESSION", session)],
            );
        })
    };
    let mut printed = Vec::new();
    loop {
        let line = next();
        let done = line.contains("[STATE] idle");
        printed.push(line);
        if done {
            break;
        }
    }
    drive.join().expect("the driving client");
    let _ = seed.kill();
    let _ = seed.wait();
    let all = printed.join("\n");
    assert!(all.contains("[STATE] running"), "{all}");
    assert!(
        all.contains("(in_progress)") && all.contains("(completed)"),
        "{all}"
    );
    assert!(all.contains("[TOOL] Read "), "{all}");
    assert!(all.contains("All good"), "{all}");
    daemon.stop();
}

#[test]
fn serve_with_a_server_config_serves_its_own_session() {
    let python = python_or_skip!();
    let (model, home) = setup("manual");
    model.push(text_reply(&["hi", " dashboard"]));
    let _daemon = crate::common::daemon::DaemonGuard(&home);
    let port = free_port();
    let mut serve = crate::common::serve::Serve::shim(&home)
        .arg("--server-config")
        .arg(&format!(r#"{{"port": {port}}}"#))
        .start();
    let startup = serve.until("startup");
    let session = startup.last().unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = format!("ws://127.0.0.1:{port}/");
    run_case(
        &python,
        "one_serve_session",
        &[
            ("WS_URL", url),
            ("WORKDIR", home.path().display().to_string()),
            ("SESSION", session),
        ],
    );
    // The serve front-end saw the dashboard's turn, as any client of the session.
    let events = serve.until_ready();
    let user = events.iter().find(|e| e["type"] == "user_message").unwrap();
    assert_eq!(user["content"], "from the dashboard");
    serve.send(json!({"op": "shutdown"}));
    serve.wait();
}
