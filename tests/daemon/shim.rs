//! The shim as front-ends run it: piped input that ends at any moment, in a loop, and
//! daemons that misbehave (silent, of another build).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::daemon::DaemonGuard;
use crate::common::schema::assert_event;
use crate::common::serve::{Home, Serve, types};

/// The startup batch of a session without a configured model.
const BATCH: [&str; 7] = [
    "hello",
    "startup",
    "model_status",
    "command_list",
    "approval_mode",
    "mcp_servers",
    "info",
];

/// Runs `jucode serve` (`--in-process` when asked) with `input` as its whole stdin;
/// returns its exit code and stdout lines. Fails if it does not exit within 20 s.
fn run_serve(home: &Path, in_process: bool, input: &[u8]) -> (Option<i32>, Vec<Value>) {
    use wait_timeout::ChildExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_jucode"));
    command.arg("serve");
    if in_process {
        command.arg("--in-process");
    }
    let mut child = command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("JUCODE_HOME", home)
        .current_dir(home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn jucode serve");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(input).expect("write stdin");
    drop(stdin);
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let status = child
        .wait_timeout(Duration::from_secs(20))
        .expect("wait")
        .unwrap_or_else(|| {
            let _ = child.kill();
            panic!(
                "jucode serve hung on input {:?}",
                String::from_utf8_lossy(input)
            )
        });
    let text = reader.join().expect("stdout reader");
    let lines = text
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("not JSON ({err}): {line:?}"));
            assert_event(&value);
            value
        })
        .collect();
    (status.code(), lines)
}

#[test]
fn the_shim_never_hangs_or_drops_lines_whatever_the_order_of_ops_and_eof() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    // Inputs whose output does not depend on timing, and what in-process serve prints
    // for each: the shim must print the same, every time.
    let steady: Vec<(&[u8], Vec<String>)> = [
        &b"{\"op\":\"shutdown\"}\n"[..],
        b"{\"op\":\"shutdown\"}",
        b"",
        b"{\"op\":\"agent_runs\"}\n",
        b"{\"op\":\"agent_runs\"}",
        b"{\"op\":\"command\",\"input\":\"/quit\"}\n{\"op\":\"agent_runs\"}\n",
        b"[\"shutdown\"]\n{\"op\":\"shutdown\"}\n",
    ]
    .into_iter()
    .map(|input| {
        let (code, lines) = run_serve(home.path(), true, input);
        assert_eq!(code, Some(0));
        let kinds = types(&lines).into_iter().map(str::to_owned).collect();
        (input, kinds)
    })
    .collect();
    for (_, kinds) in &steady {
        assert_eq!(kinds[..BATCH.len()], BATCH, "{kinds:?}");
    }
    // A turn cut short by the quit: how much of it shows depends on timing, in process
    // too, but the startup batch is always whole.
    let racy = b"{\"op\":\"user_message\",\"content\":\"hi\"}\n{\"op\":\"shutdown\"}\n";

    let runs = Arc::new(Mutex::new(0usize));
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let steady = steady.clone();
            let home = home.path().to_owned();
            let runs = runs.clone();
            std::thread::spawn(move || {
                for run in 0..52 {
                    let pick = (run + worker) % (steady.len() + 1);
                    let (code, lines) = if pick == steady.len() {
                        run_serve(&home, false, racy)
                    } else {
                        run_serve(&home, false, steady[pick].0)
                    };
                    assert_eq!(code, Some(0), "{lines:#?}");
                    let kinds: Vec<String> = types(&lines).into_iter().map(str::to_owned).collect();
                    if pick == steady.len() {
                        assert_eq!(kinds[..BATCH.len()], BATCH, "{kinds:?}");
                    } else {
                        assert_eq!(
                            kinds,
                            steady[pick].1,
                            "input {:?}",
                            String::from_utf8_lossy(steady[pick].0)
                        );
                    }
                    *runs.lock().unwrap() += 1;
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker failed");
    }
    assert_eq!(*runs.lock().unwrap(), 208);
}

/// A stand-in for a daemon on the home's socket. `answer` gets each line a client sends
/// and returns the lines to send back (`None`: close the connection). It serves
/// connections until one of them makes `answer` return `Stop`.
struct FakeDaemon {
    seen: Arc<Mutex<Vec<Value>>>,
}

enum Answer {
    Lines(Vec<Value>),
    /// Remove the socket (the fake is gone), then close.
    Stop,
}

impl FakeDaemon {
    fn start(
        socket: PathBuf,
        hello: Option<Value>,
        answer: impl Fn(&Value) -> Answer + Send + 'static,
    ) -> FakeDaemon {
        let listener = UnixListener::bind(&socket).expect("bind the fake daemon");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                if let Some(hello) = &hello {
                    let _ = writeln!(stream, "{hello}");
                }
                let reader = BufReader::new(stream.try_clone().expect("clone"));
                for line in reader.lines() {
                    let Ok(line) = line else { break };
                    let Ok(value) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    log.lock().unwrap().push(value.clone());
                    match answer(&value) {
                        Answer::Lines(lines) => {
                            for out in lines {
                                let _ = writeln!(stream, "{out}");
                            }
                        }
                        Answer::Stop => {
                            let _ = std::fs::remove_file(&socket);
                            return;
                        }
                    }
                }
            }
        });
        FakeDaemon { seen }
    }

    fn ops(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|op| op["op"].as_str().map(str::to_owned))
            .collect()
    }
}

fn status_with(sessions: usize) -> Value {
    json!({"type": "daemon_status", "pid": 1, "version": env!("CARGO_PKG_VERSION"),
           "build": "another-build", "socket": "/x", "sessions": sessions, "clients": 1,
           "uptime_ms": 5, "socket_activated": false})
}

fn other_build_hello() -> Value {
    json!({"type": "hello", "protocol": 2, "version": env!("CARGO_PKG_VERSION"), "build": "another-build"})
}

#[test]
fn a_daemon_that_never_says_hello_is_given_up_on_within_seconds() {
    let home = Home::new();
    let _fake = FakeDaemon::start(home.socket(), None, |_| Answer::Lines(vec![]));
    let started = Instant::now();
    let mut serve = Serve::shim(&home).start();
    // It falls back to running the session in process: the same lines.
    let batch = serve.skip_startup();
    assert_eq!(batch[0]["type"], "startup");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(15),
        "{waited:?}"
    );
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    assert_eq!(serve.wait().code(), Some(0));
}

#[test]
fn an_idle_daemon_of_another_build_is_replaced() {
    let home = Home::new();
    let _guard = DaemonGuard(&home);
    let fake = FakeDaemon::start(
        home.socket(),
        Some(other_build_hello()),
        |op| match op["op"].as_str() {
            Some("daemon_status") => Answer::Lines(vec![status_with(0)]),
            Some("daemon_stop") => Answer::Stop,
            _ => Answer::Lines(vec![]),
        },
    );
    let mut serve = Serve::shim(&home).start();
    serve.skip_startup();
    assert_eq!(fake.ops(), ["daemon_status", "daemon_stop"]);
    let status = home.daemon_status().expect("a daemon of this build runs");
    assert_ne!(status["build"], "another-build");
    assert_eq!(status["sessions"], 1);
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    assert_eq!(serve.wait().code(), Some(0));
}

#[test]
fn a_daemon_of_another_build_with_sessions_is_refused_with_the_way_out() {
    let home = Home::new();
    let fake = FakeDaemon::start(
        home.socket(),
        Some(other_build_hello()),
        |op| match op["op"].as_str() {
            Some("daemon_status") => Answer::Lines(vec![status_with(2)]),
            _ => Answer::Lines(vec![]),
        },
    );
    let mut serve = Serve::shim(&home).start();
    let error = serve.next();
    assert_eq!(error["type"], "error");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("another-build") && message.contains("2 session(s)"),
        "{message}"
    );
    assert!(message.contains("jucode daemon stop"), "{message}");
    assert!(serve.rest().is_empty());
    assert_eq!(serve.wait().code(), Some(1));
    assert_eq!(
        fake.ops(),
        ["daemon_status"],
        "a busy daemon is never stopped"
    );
}
