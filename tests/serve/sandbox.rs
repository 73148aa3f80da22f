//! The sandbox end to end: bash calls of a scripted model, run by the real binary, in a
//! workspace whose temp directory lies inside it (so `/tmp`, where the "outside"
//! directory of each test lives, is not writable). Every case that needs Landlock skips,
//! saying why, on a kernel without it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call};
use crate::common::serve::{Home, Serve, types};

/// The sandbox the startup batch announces (`startup.sandbox`).
fn announced(batch: &[Value]) -> &Value {
    let sandbox = &batch[0]["sandbox"];
    assert!(sandbox.is_object(), "startup.sandbox: {:?}", batch[0]);
    sandbox
}

/// Whether this kernel has Landlock: `startup.sandbox` says so.
fn enforced(batch: &[Value]) -> bool {
    let sandbox = announced(batch);
    if sandbox["enforced"] != true {
        eprintln!(
            "skipped: the sandbox is not enforced here: {}",
            sandbox["limits"]
        );
        return false;
    }
    true
}

fn bash(id: &str, arguments: Value) -> Reply {
    Reply::Sse(vec![
        tool_call(0, id, "bash", &arguments.to_string()),
        finish("tool_calls"),
        Step::Done,
    ])
}

/// A profile, a workspace inside it (with its own temp directory) and a directory
/// outside both.
struct Setup {
    model: MockModel,
    home: Home,
    workspace: PathBuf,
    outside: tempfile::TempDir,
}

impl Setup {
    fn new(mode: &str, sandbox: &str) -> Self {
        let model = MockModel::start();
        let home = Home::new();
        home.mock_config_in_mode(&model.base_url(), mode);
        home.append_config(&format!("[sandbox]\n{sandbox}\n"));
        let workspace = home.path().join("workspace");
        std::fs::create_dir_all(workspace.join("tmp")).unwrap();
        Self {
            model,
            workspace: workspace.canonicalize().unwrap(),
            home,
            outside: tempfile::tempdir().unwrap(),
        }
    }

    fn outside(&self) -> PathBuf {
        self.outside.path().canonicalize().unwrap()
    }

    fn serve(&self, env: &[(&str, &str)]) -> (Serve, Vec<Value>) {
        let tmp = self.workspace.join("tmp");
        let mut builder = Serve::builder(&self.home)
            .cwd(&self.workspace)
            .env("TMPDIR", tmp.to_str().unwrap());
        for (key, value) in env {
            builder = builder.env(key, value);
        }
        let mut serve = builder.start();
        let batch = serve.skip_startup();
        (serve, batch)
    }

    /// Runs `command` as one bash call in a full-access session; `None` when the
    /// sandbox is not enforced here (skipped), else the `tool_output` event.
    fn run(&self, command: &str) -> Option<Value> {
        self.model.push(bash("c1", json!({ "command": command })));
        self.model.push(text_reply(&["done"]));
        let (mut serve, batch) = self.serve(&[]);
        if !enforced(&batch) {
            return None;
        }
        serve.send(json!({"op": "user_message", "content": "go"}));
        let events = serve.until_ready();
        Some(
            events
                .iter()
                .find(|e| e["type"] == "tool_output")
                .cloned()
                .unwrap_or_else(|| panic!("no tool_output: {events:#?}")),
        )
    }
}

fn text(output: &Value) -> &str {
    output["output"].as_str().unwrap()
}

/// Runs `command` (which writes `target`) sandboxed and checks that it was refused,
/// said so, and wrote nothing.
fn assert_refused(setup: &Setup, command: &str, target: &Path) {
    let Some(output) = setup.run(command) else {
        return;
    };
    assert_eq!(output["is_error"], true, "{output}");
    assert!(!target.exists(), "{command} wrote {}", target.display());
    let text = text(&output);
    assert!(text.contains("Permission denied"), "{text}");
    assert!(
        text.contains(&format!(
            "the sandbox refused a write to {}",
            target.display()
        )),
        "{text}"
    );
    assert!(text.contains("\"unsandboxed\": true"), "{text}");
}

#[test]
fn a_write_inside_the_workspace_works() {
    let setup = Setup::new("full-access", "");
    let Some(output) = setup.run("mkdir -p a/b && echo hi > a/b/f && cat a/b/f") else {
        return;
    };
    assert_eq!(output["is_error"], false, "{output}");
    assert_eq!(text(&output), "exit code: 0\nhi\n");
    assert!(setup.workspace.join("a/b/f").exists());
}

#[test]
fn a_write_outside_is_refused() {
    let setup = Setup::new("full-access", "");
    let target = setup.outside().join("x");
    assert_refused(&setup, &format!("echo x > {}", target.display()), &target);
}

#[test]
fn a_write_through_a_symlink_pointing_out_is_refused() {
    let setup = Setup::new("full-access", "");
    std::os::unix::fs::symlink(setup.outside(), setup.workspace.join("out")).unwrap();
    let target = setup.outside().join("x");
    let Some(output) = setup.run("echo x > out/x") else {
        return;
    };
    assert_eq!(output["is_error"], true, "{output}");
    assert!(!target.exists());
    // Named as written: the link resolved shows it lies outside.
    assert!(
        text(&output).contains("the sandbox refused a write to"),
        "{}",
        text(&output)
    );
}

#[test]
fn a_write_through_dotdot_is_refused() {
    let setup = Setup::new("full-access", "");
    // The home (the workspace's parent) is outside the workspace.
    let target = setup.home.path().canonicalize().unwrap().join("escaped");
    assert_refused(&setup, "echo x > ../escaped", &target);
}

#[test]
fn a_write_by_a_child_of_a_child_is_refused() {
    let setup = Setup::new("full-access", "");
    let target = setup.outside().join("x");
    let command = format!("bash -c 'sh -c \"echo x > {}\"'", target.display());
    assert_refused(&setup, &command, &target);
}

#[test]
fn a_write_by_python_is_refused() {
    let setup = Setup::new("full-access", "");
    let target = setup.outside().join("x");
    let command = format!("python3 -c 'open(\"{}\", \"w\")'", target.display());
    let Some(output) = setup.run(&command) else {
        return;
    };
    assert_eq!(output["is_error"], true, "{output}");
    assert!(!target.exists());
    let text = text(&output);
    assert!(text.contains("PermissionError"), "{text}");
    assert!(text.contains("the sandbox refused a write to"), "{text}");
}

#[test]
fn a_write_after_cd_slash_is_refused() {
    let setup = Setup::new("full-access", "");
    let target = setup.outside().join("x");
    let relative = target.strip_prefix("/").unwrap().display().to_string();
    let Some(output) = setup.run(&format!("cd / && echo x > {relative}")) else {
        return;
    };
    assert_eq!(output["is_error"], true, "{output}");
    assert!(!target.exists());
    assert!(text(&output).contains("Permission denied"), "{output}");
}

#[test]
fn reading_outside_the_workspace_works() {
    let setup = Setup::new("full-access", "");
    std::fs::write(setup.outside().join("notes"), "outside\n").unwrap();
    let command = format!(
        "cat {}/notes && head -c 0 /etc/passwd",
        setup.outside().display()
    );
    let Some(output) = setup.run(&command) else {
        return;
    };
    assert_eq!(output["is_error"], false, "{output}");
    assert_eq!(text(&output), "exit code: 0\noutside\n");
}

fn connect(port: u16) -> String {
    format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"connected\")'"
    )
}

#[test]
fn a_tcp_connect_is_refused_with_the_network_off() {
    let setup = Setup::new("full-access", "network = false");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let Some(output) = setup.run(&connect(port)) else {
        return;
    };
    assert_eq!(output["is_error"], true, "{output}");
    let text = text(&output);
    assert!(!text.contains("\nconnected"), "{text}");
    assert!(text.contains("PermissionError"), "{text}");
    assert!(text.contains("network: off"), "{text}");
}

#[test]
fn a_tcp_connect_works_with_the_network_on() {
    let setup = Setup::new("full-access", "network = true");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let Some(output) = setup.run(&connect(port)) else {
        return;
    };
    assert_eq!(output["is_error"], false, "{output}");
    assert_eq!(text(&output), "exit code: 0\nconnected\n");
}

#[test]
fn a_setuid_binary_gains_nothing() {
    let setup = Setup::new("full-access", "");
    let own = nix_euid();
    if own != 0 {
        eprintln!("skipped: making a setuid binary of another user needs root");
        return;
    }
    // A copy of `id` owned by `nobody` with the setuid bit, inside the workspace.
    let id = setup.workspace.join("id-setuid");
    std::fs::copy("/usr/bin/id", &id).unwrap();
    let status = std::process::Command::new("chown")
        .args(["65534", id.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&id, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let free = std::process::Command::new(&id).arg("-u").output().unwrap();
    if String::from_utf8_lossy(&free.stdout).trim() != "65534" {
        eprintln!("skipped: setuid bits are ignored on this file system");
        return;
    }
    let Some(output) = setup.run("./id-setuid -u; grep NoNewPrivs /proc/self/status") else {
        return;
    };
    assert_eq!(
        text(&output),
        "exit code: 0\n0\nNoNewPrivs:\t1\n",
        "{output}"
    );
}

fn nix_euid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse().ok())
        .unwrap()
}

/// After a refusal, the model asks for the same command unsandboxed: an
/// `approval_request` saying so, even in full-access; nothing runs before the answer;
/// after `allow` it runs without the sandbox.
#[test]
fn the_escalation_runs_unsandboxed_only_after_approval() {
    let setup = Setup::new("full-access", "");
    let target = setup.outside().join("x");
    let command = format!("echo x > {}", target.display());
    setup.model.push(bash("c1", json!({ "command": command })));
    setup.model.push(bash(
        "c2",
        json!({ "command": command, "unsandboxed": true }),
    ));
    setup.model.push(text_reply(&["done"]));
    let (mut serve, batch) = setup.serve(&[]);
    if !enforced(&batch) {
        return;
    }
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until("approval_request");
    let first = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(first["is_error"], true, "{first}");
    assert!(
        text(first).contains("the sandbox refused a write to"),
        "{first}"
    );
    let request = events.last().unwrap();
    assert_eq!(request["call_id"], "c2");
    let summary = request["summary"].as_str().unwrap();
    assert!(summary.contains("WITHOUT the sandbox"), "{summary}");
    assert!(summary.ends_with(&command), "{summary}");
    assert!(!target.exists(), "ran before the approval");
    serve.send(json!({"op": "approve", "call_id": "c2", "decision": "allow"}));
    let rest = serve.until_ready();
    let second = rest.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(second["is_error"], false, "{second}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n");
}

/// A denied escalation does not run; `always` on bash earlier does not cover it.
#[test]
fn a_denied_escalation_does_not_run_and_the_allowlist_does_not_cover_it() {
    let setup = Setup::new("manual", "");
    let target = setup.outside().join("x");
    let command = format!("echo x > {}", target.display());
    setup
        .model
        .push(bash("c1", json!({ "command": "echo ok > f" })));
    setup.model.push(bash(
        "c2",
        json!({ "command": command, "unsandboxed": true }),
    ));
    setup.model.push(text_reply(&["done"]));
    let (mut serve, batch) = setup.serve(&[]);
    if !enforced(&batch) {
        return;
    }
    serve.send(json!({"op": "user_message", "content": "go"}));
    serve.until("approval_request");
    serve.send(json!({"op": "approve", "call_id": "c1", "decision": "allow", "always": true}));
    let events = serve.until("approval_request");
    assert_eq!(events.last().unwrap()["call_id"], "c2", "{events:#?}");
    serve.send(json!({"op": "approve", "call_id": "c2", "decision": "deny"}));
    serve.until_ready();
    assert!(!target.exists());
    assert!(setup.workspace.join("f").exists());
}

/// Plan mode refuses an escalation; an unattended session defers it.
#[test]
fn plan_mode_refuses_and_an_unattended_session_defers_an_escalation() {
    let setup = Setup::new("plan", "");
    let target = setup.outside().join("x");
    let command = format!("echo x > {}", target.display());
    setup.model.push(bash(
        "c1",
        json!({ "command": command, "unsandboxed": true }),
    ));
    setup.model.push(text_reply(&["done"]));
    let (mut serve, batch) = setup.serve(&[]);
    if !enforced(&batch) {
        return;
    }
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until_ready();
    assert!(!types(&events).contains(&"approval_request"), "{events:#?}");
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert!(text(output).contains("plan mode"), "{output}");
    drop(serve);

    let setup = Setup::new("full-access", "");
    setup.model.push(bash(
        "c1",
        json!({ "command": command, "unsandboxed": true }),
    ));
    setup.model.push(text_reply(&["done"]));
    let (mut serve, _) = setup.serve(&[]);
    serve.send(json!({"op": "set_attended", "attended": false}));
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until_ready();
    let deferred = events
        .iter()
        .find(|e| e["type"] == "action_deferred")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert!(!types(&events).contains(&"approval_request"), "{events:#?}");
    assert!(!target.exists());
    // It runs, unsandboxed, only once the user allows the deferred action.
    let id = deferred["id"].as_str().unwrap().to_owned();
    assert!(
        deferred["summary"]
            .as_str()
            .unwrap()
            .contains("WITHOUT the sandbox"),
        "{deferred}"
    );
    setup.model.push(text_reply(&["noted"]));
    serve.send(json!({"op": "decide_action", "action": id, "decision": "allow"}));
    let decided = serve.expect_one("action_decided");
    assert_eq!(decided["is_error"], false, "{decided}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n");
    serve.until_ready();
}

/// In auto-edit a command the sandbox contains runs without asking; with the sandbox
/// off (or the network on) it asks as before.
#[test]
fn auto_edit_runs_contained_commands_without_asking() {
    for (sandbox, asks) in [
        ("", false),
        ("mode = \"off\"", true),
        ("network = true", true),
    ] {
        let setup = Setup::new("auto-edit", sandbox);
        setup
            .model
            .push(bash("c1", json!({ "command": "echo hi > f" })));
        setup.model.push(text_reply(&["done"]));
        let (mut serve, batch) = setup.serve(&[]);
        if !asks && !enforced(&batch) {
            continue;
        }
        serve.send(json!({"op": "user_message", "content": "go"}));
        let first = loop {
            let event = serve.next();
            if event["type"] == "approval_request" || event["type"] == "tool_output" {
                break event;
            }
        };
        assert_eq!(
            first["type"] == "approval_request",
            asks,
            "[sandbox] {sandbox}: {first}"
        );
        if asks {
            serve.send(json!({"op": "approve", "call_id": "c1", "decision": "deny"}));
        }
        serve.until_ready();
    }
}

/// `/sandbox read-only` and `set_sandbox_mode` change the mode for the next command,
/// and every change is shown as a `sandbox` event.
#[test]
fn the_mode_changes_by_command_and_op() {
    let setup = Setup::new("full-access", "");
    setup
        .model
        .push(bash("c1", json!({ "command": "echo x > f" })));
    setup.model.push(text_reply(&["done"]));
    setup
        .model
        .push(bash("c2", json!({ "command": "echo x > f" })));
    setup.model.push(text_reply(&["done"]));
    let (mut serve, batch) = setup.serve(&[]);
    if !enforced(&batch) {
        return;
    }
    let first = announced(&batch);
    assert_eq!(first["mode"], "workspace-write");
    let roots = first["writable_roots"].as_array().unwrap();
    assert_eq!(roots[0], setup.workspace.display().to_string());
    serve.send(json!({"op": "command", "input": "/sandbox read-only"}));
    let changed = serve.expect_one("sandbox");
    assert_eq!(changed["mode"], "read-only");
    assert_eq!(changed["writable_roots"], json!([]));
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until_ready();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["is_error"], true, "{output}");
    assert!(text(output).contains("sandbox `read-only`"), "{output}");
    assert!(!setup.workspace.join("f").exists());

    serve.send(json!({"op": "set_sandbox_mode", "mode": "workspace-write"}));
    let changed = serve.expect_one("sandbox");
    assert_eq!(changed["mode"], "workspace-write");
    serve.send(json!({"op": "user_message", "content": "again"}));
    let events = serve.until_ready();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["is_error"], false, "{output}");
    assert!(setup.workspace.join("f").exists());
}

/// A kernel without Landlock (simulated): the `sandbox` event says it is not enforced
/// and why, an `info` says commands run with approvals alone, and they do.
#[test]
fn without_landlock_the_session_says_so_and_claims_nothing() {
    let setup = Setup::new("full-access", "");
    let target = setup.outside().join("x");
    setup.model.push(bash(
        "c1",
        json!({ "command": format!("echo x > {}", target.display()) }),
    ));
    setup.model.push(text_reply(&["done"]));
    let (mut serve, batch) = setup.serve(&[("JUCODE_SANDBOX_SIMULATE_UNSUPPORTED", "1")]);
    let sandbox = announced(&batch);
    assert_eq!(sandbox["mode"], "workspace-write");
    assert_eq!(sandbox["enforced"], false);
    assert!(
        sandbox["limits"]
            .as_str()
            .unwrap()
            .contains("Landlock is not available"),
        "{sandbox}"
    );
    let info = serve.expect_one("info");
    let message = info["message"].as_str().unwrap();
    assert!(
        message.contains("sandbox `workspace-write` is not enforced"),
        "{message}"
    );
    assert!(message.contains("approvals alone"), "{message}");
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until_ready();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["is_error"], false, "{output}");
    assert!(!text(output).contains("sandbox"), "{output}");
    assert!(target.exists());
}

/// An older Landlock ABI (simulated: only ABI 3's rules are applied): the `sandbox`
/// event and an `info` say what is not enforced; what is, still is.
#[test]
fn an_older_abi_says_what_it_does_not_enforce() {
    let setup = Setup::new("full-access", "");
    let target = setup.outside().join("x");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut outside = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let command = format!(
        "kill -0 {} && echo signalled; {}; echo x > {}",
        outside.id(),
        connect(port),
        target.display()
    );
    setup.model.push(bash("c1", json!({ "command": command })));
    setup.model.push(text_reply(&["done"]));
    let (mut serve, batch) = setup.serve(&[("JUCODE_SANDBOX_SIMULATE_ABI", "3")]);
    if !enforced(&batch) {
        outside.kill().unwrap();
        outside.wait().unwrap();
        return;
    }
    let sandbox = announced(&batch);
    let limits = sandbox["limits"].as_str().unwrap_or_default();
    assert!(limits.contains("Landlock ABI 3"), "{sandbox}");
    assert!(limits.contains("signals to processes outside"), "{limits}");
    let info = serve.expect_one("info");
    let message = info["message"].as_str().unwrap();
    assert!(
        message.contains("is enforced, but not entirely"),
        "{message}"
    );
    serve.send(json!({"op": "user_message", "content": "go"}));
    let events = serve.until_ready();
    outside.kill().unwrap();
    outside.wait().unwrap();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    let text = text(output);
    // Signals are not scoped before ABI 6: the outside process is reachable, as said.
    assert!(text.contains("signalled"), "{text}");
    // The seccomp filter still refuses sockets; the file system rules still hold.
    assert!(!text.contains("\nconnected"), "{text}");
    assert!(!target.exists(), "{text}");
}
