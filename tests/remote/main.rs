//! `--remote` against a real OpenSSH server: Debian's `sshd`, started by each test on a
//! loopback port with throwaway host and user keys and a config of its own (nothing of
//! the machine's ssh setup is read or touched). The "remote" is this machine: its jucode
//! runs with a profile of its own, found on the `PATH` sshd gives the session.

#[path = "../common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use common::acp::Acp;
use common::mock::{Gate, MockModel, Reply, Step, finish, text, usage};
use common::serve::{Home, Serve};

const SSHD: &str = "/usr/sbin/sshd";
const HOST: &str = "jucode-test";

/// An sshd of the test's own, and the client config that reaches it as `jucode-test`.
struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    /// The profile of the remote side (its daemon, its sessions).
    remote: Home,
}

impl Sshd {
    /// `None`, saying why on stderr, where no sshd can run here.
    fn start() -> Option<Sshd> {
        if !Path::new(SSHD).exists() {
            eprintln!(
                "skipped: {SSHD} is not installed (Debian's openssh-server; .ci/run installs it)"
            );
            return None;
        }
        let root = std::fs::metadata("/proc/self")
            .map(|me| std::os::unix::fs::MetadataExt::uid(&me) == 0)
            .unwrap_or(false);
        if !root {
            eprintln!("skipped: sshd needs root to log a session in");
            return None;
        }
        // sshd's privilege separation directory, which Debian's service unit makes at
        // boot (`RuntimeDirectory`); nothing is in it.
        std::fs::create_dir_all("/run/sshd").expect("/run/sshd");
        let dir = tempfile::tempdir().expect("sshd dir");
        let at = |name: &str| dir.path().join(name);
        for key in ["host_key", "user_key"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(at(key))
                .status()
                .expect("ssh-keygen");
            assert!(made.success(), "ssh-keygen {key}");
        }
        std::fs::copy(at("user_key.pub"), at("authorized_keys")).expect("authorized_keys");
        let remote = Home::new();
        let bin = Path::new(env!("CARGO_BIN_EXE_jucode"))
            .parent()
            .expect("the binary's directory")
            .to_owned();
        // Several tests start their own sshd at once: a port taken between the probe
        // and sshd's bind is tried again.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free port")
                .port();
            std::fs::write(
                at("sshd_config"),
                format!(
                    "Port {port}\n\
                     ListenAddress 127.0.0.1\n\
                     HostKey {host_key}\n\
                     AuthorizedKeysFile {authorized}\n\
                     PasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\n\
                     PermitRootLogin prohibit-password\n\
                     UsePAM no\n\
                     StrictModes no\n\
                     PidFile none\n\
                     SetEnv PATH={bin}:/usr/local/bin:/usr/bin:/bin JUCODE_HOME={remote_home} RUST_LOG=warn\n",
                    host_key = at("host_key").display(),
                    authorized = at("authorized_keys").display(),
                    bin = bin.display(),
                    remote_home = remote.path().display(),
                ),
            )
            .expect("sshd_config");
            let host_key = std::fs::read_to_string(at("host_key.pub")).expect("host key");
            std::fs::write(
                at("known_hosts"),
                format!("[127.0.0.1]:{port} {}", host_key.trim()),
            )
            .expect("known_hosts");
            std::fs::write(
                at("ssh_config"),
                format!(
                    "Host {HOST}\n\
                     \tHostName 127.0.0.1\n\
                     \tPort {port}\n\
                     \tUser root\n\
                     \tIdentityFile {key}\n\
                     \tIdentitiesOnly yes\n\
                     \tUserKnownHostsFile {known}\n\
                     \tStrictHostKeyChecking yes\n\
                     \tBatchMode yes\n\
                     \tLogLevel ERROR\n",
                    key = at("user_key").display(),
                    known = at("known_hosts").display(),
                ),
            )
            .expect("ssh_config");
            let mut child = Command::new(SSHD)
                .args(["-D", "-e", "-f"])
                .arg(at("sshd_config"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start sshd");
            let stderr = child.stderr.take().expect("sshd stderr");
            let mut lines = BufReader::new(stderr).lines();
            let mut said = Vec::new();
            let listening = loop {
                match lines.next() {
                    Some(Ok(line)) if line.contains("Server listening on") => break true,
                    Some(Ok(line)) => said.push(line),
                    _ => break false,
                }
            };
            if listening {
                // sshd keeps logging (one line per connection): drain it so it never
                // blocks on a full pipe.
                std::thread::spawn(move || lines.for_each(drop));
                return Some(Sshd { child, dir, remote });
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("sshd did not start on port {port}: {said:?}");
        }
        panic!("sshd could not start on any port");
    }

    fn ssh_command(&self) -> String {
        format!("ssh -F {}", self.dir.path().join("ssh_config").display())
    }

    /// A config for the remote side whose model is the mock.
    fn remote_model(&self, model: &MockModel) {
        self.remote.mock_config(&model.base_url(), "");
    }

    /// `jucode <args>` on this side, reaching the remote through this sshd.
    fn local(&self, local: &Home, args: &[&str]) -> Serve {
        let mut builder =
            Serve::command(local, args).env("JUCODE_SSH_COMMAND", &self.ssh_command());
        builder = builder.cwd(local.path());
        builder.start()
    }

    fn local_output(&self, local: &Home, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_jucode"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", local.path())
            .env("JUCODE_HOME", local.path())
            .env("JUCODE_SSH_COMMAND", self.ssh_command())
            .current_dir(local.path())
            .stdin(Stdio::null())
            .output()
            .expect("run jucode")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // The remote daemon was started by the remote shim, as it would be there.
        let _ = self.remote.jucode(&["daemon", "stop"]);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes below `pid`, children first.
fn descendants(pid: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            break;
        };
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces, so read after the ')'.
            let Some((head, tail)) = stat.rsplit_once(')') else {
                continue;
            };
            let comm = head.split_once('(').map(|(_, c)| c).unwrap_or_default();
            let ppid = tail.split_whitespace().nth(1).and_then(|p| p.parse().ok());
            if ppid == Some(parent) {
                found.push((child, comm.to_owned()));
                parents.push(child);
            }
        }
    }
    found
}

fn startup_session(serve: &mut Serve) -> String {
    let batch = serve.skip_startup();
    batch[0]["session_id"]
        .as_str()
        .expect("startup names the session")
        .to_owned()
}

#[test]
fn a_turn_runs_on_the_remote_and_its_sessions_are_listed_there() {
    let Some(sshd) = Sshd::start() else { return };
    let model = MockModel::start();
    sshd.remote_model(&model);
    model.push(common::mock::text_reply(&["Hello", " from afar"]));
    let local = Home::new();
    let mut serve = sshd.local(&local, &["serve", "--remote", HOST]);
    let session = startup_session(&mut serve);
    serve.send(json!({"op": "user_message", "content": "hi"}));
    let turn = serve.until_ready();
    let said: String = turn
        .iter()
        .filter(|event| event["type"] == "assistant_delta")
        .filter_map(|event| event["delta"].as_str())
        .collect();
    assert_eq!(said, "Hello from afar", "{turn:?}");
    serve.close_stdin();
    assert_eq!(serve.wait().code(), Some(0));

    // The session ran on the remote side: its file is in the remote profile, none here.
    let listed = sshd.local_output(&local, &["sessions", "--remote", HOST]);
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{listed:?}");
    assert!(stdout.contains(&session), "{stdout}");
    let here = sshd.local_output(&local, &["sessions"]);
    assert!(!String::from_utf8_lossy(&here.stdout).contains(&session));
}

#[test]
fn a_dropped_connection_is_an_error_and_the_session_waits_there() {
    let Some(sshd) = Sshd::start() else { return };
    let model = MockModel::start();
    sshd.remote_model(&model);
    let gate = Gate::new();
    model.push(Reply::Sse(vec![
        text("Working"),
        Step::Wait(gate.clone()),
        text(" on it."),
        finish("stop"),
        usage(10, 3),
        Step::Done,
    ]));
    let local = Home::new();
    let mut serve = sshd.local(&local, &["serve", "--remote", HOST]);
    let session = startup_session(&mut serve);
    serve.send(json!({"op": "user_message", "content": "long job"}));
    serve.until("assistant_delta");

    let ssh: Vec<u32> = descendants(serve.child.id())
        .into_iter()
        .filter(|(_, comm)| comm == "ssh")
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(ssh.len(), 1, "one ssh below the client");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ssh[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill ssh");
    let error = serve.until("error");
    let error = error.last().expect("an error");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("connection to jucode-test was lost") && message.contains(&session),
        "{error}"
    );
    assert_eq!(error["session"], session.as_str());
    assert_eq!(serve.wait().code(), Some(1));

    // The turn went on without anyone watching; attaching again shows where it is.
    let mut again = sshd.local(&local, &["serve", "--remote", HOST, "--session", &session]);
    assert_eq!(again.next()["type"], "hello");
    let snapshot = again.until("status");
    assert_eq!(snapshot[0]["type"], "startup");
    assert_eq!(snapshot[0]["session_id"], session.as_str());
    assert_eq!(
        snapshot.last().expect("status")["message"],
        "streaming",
        "{snapshot:?}"
    );
    gate.open();
    let rest = again.until_ready();
    assert!(
        rest.iter()
            .any(|event| event["type"] == "assistant_delta" && event["delta"] == " on it."),
        "{rest:?}"
    );
    again.close_stdin();
    assert_eq!(again.wait().code(), Some(0));
}

#[test]
fn unknown_hosts_and_hosts_without_jucode_are_clear_errors() {
    let Some(sshd) = Sshd::start() else { return };
    let local = Home::new();

    let mut unknown = sshd.local(&local, &["serve", "--remote", "no-such-host.invalid"]);
    let error = unknown.next();
    assert_eq!(error["type"], "error", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("cannot reach no-such-host.invalid over ssh: ")
            && message.contains("resolve"),
        "{message}"
    );
    assert_eq!(unknown.wait().code(), Some(1));

    // The remote's PATH has jucode (sshd's SetEnv), not a program of this name.
    let mut missing = sshd.local(
        &local,
        &[
            "serve",
            "--remote",
            HOST,
            "--remote-program",
            "jucode-not-installed",
        ],
    );
    let error = missing.next();
    assert_eq!(error["type"], "error", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("jucode-test has no `jucode-not-installed` on the PATH"),
        "{message}"
    );
    assert_eq!(missing.wait().code(), Some(1));

    // ACP and `sessions` have no event line for it: stderr and the exit code say it.
    let listed = sshd.local_output(
        &local,
        &[
            "sessions",
            "--remote",
            HOST,
            "--remote-program",
            "jucode-not-installed",
        ],
    );
    assert_eq!(listed.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&listed.stderr).contains("has no `jucode-not-installed`"),
        "{listed:?}"
    );
}

#[test]
fn every_flag_reaches_the_remote_whole() {
    let Some(sshd) = Sshd::start() else { return };
    let local = Home::new();
    // A session id that is not there, with spaces and quotes the remote shell must not
    // read: the remote's own error comes back as is.
    let mut serve = sshd.local(
        &local,
        &["serve", "--remote", HOST, "--session", "it's $HOME `x`"],
    );
    let lines: Vec<Value> = serve.rest();
    let error = lines
        .iter()
        .find(|event| event["type"] == "error")
        .unwrap_or_else(|| panic!("an error: {lines:?}"));
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("it's $HOME `x`"),
        "{error}"
    );
}

#[test]
fn an_editor_speaks_acp_to_the_remote() {
    let Some(sshd) = Sshd::start() else { return };
    let model = MockModel::start();
    sshd.remote_model(&model);
    model.push(common::mock::text_reply(&["remote ", "answer"]));
    let local = Home::new();
    let ssh = sshd.ssh_command();
    let mut acp = Acp::start_with(
        &local,
        &["--remote", HOST],
        &[("JUCODE_SSH_COMMAND", ssh.as_str())],
    );
    let init = acp.initialize(json!({}));
    assert_eq!(init["agentInfo"]["name"], "jucode", "{init}");
    let session = acp.new_session(local.path());
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
    );
    let seen = acp.collect_until(|message| message["id"] == id);
    assert_eq!(
        seen.last().expect("the answer")["result"]["stopReason"],
        "end_turn"
    );
    let said: String = common::acp::updates(&seen)
        .iter()
        .filter(|update| update["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|update| update["content"]["text"].as_str())
        .collect();
    assert_eq!(said, "remote answer");
    // The session lives in the remote daemon.
    assert!(sshd.remote.path().join("sessions").exists());
    assert_eq!(acp.finish().code(), Some(0));
}
