//! `jucode acp` driven by an independent client: the official TypeScript SDK
//! (`@agentclientprotocol/sdk`, installed by `.ci/run` into `target/acp-npm`), running
//! `sdk_client.mjs` against the scripted model, through the daemon and in process.
//!
//! The SDK and node come from outside: `JUCODE_ACP_SDK` names the package directory,
//! else the install `.ci/run` leaves in `target/acp-npm`. Without them the test says
//! why it skipped; it never reaches the network itself.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use crate::common::daemon::DaemonGuard;
use crate::common::mock::{Gate, MockModel, Reply, Step, finish, text, text_reply, tool_reply};
use crate::common::serve::Home;

/// The SDK package directory, or why there is none.
pub fn sdk_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("JUCODE_ACP_SDK")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/acp-npm/node_modules/@agentclientprotocol/sdk")
        });
    if !dir.join("package.json").is_file() {
        return Err(format!(
            "@agentclientprotocol/sdk is not installed at {} (run `bash .ci/install-acp-sdk`, or set JUCODE_ACP_SDK)",
            dir.display()
        ));
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(dir),
        _ => Err("node is not installed".to_owned()),
    }
}

fn scenario(in_process: bool) {
    let sdk = match sdk_dir() {
        Ok(dir) => dir,
        Err(why) => {
            println!("SKIPPED: the ACP SDK interop test: {why}");
            return;
        }
    };
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    let _daemon = DaemonGuard(&home);
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    model.push(text_reply(&["Hello", " there"]));
    model.push(tool_reply(
        "call_w1",
        "write_file",
        json!({"path": "new.txt", "content": "made by the model\n"}),
    ));
    model.push(text_reply(&["wrote"]));
    model.push(tool_reply(
        "call_w2",
        "write_file",
        json!({"path": "denied.txt", "content": "no\n"}),
    ));
    model.push(text_reply(&["ok"]));
    model.push(tool_reply(
        "call_b1",
        "bash",
        json!({"command": "echo from-terminal"}),
    ));
    model.push(text_reply(&["ran"]));
    let gate = Gate::new();
    model.push(Reply::Sse(vec![
        text("slow"),
        Step::Wait(gate.clone()),
        text(" never"),
        finish("stop"),
        Step::Done,
    ]));
    model.push(text_reply(&["same"]));
    model.push(text_reply(&["same"]));
    model.push(text_reply(&["fine"]));

    let mut command = Command::new("node");
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/acp/sdk_client.mjs"
        ))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("JUCODE_HOME", home.path())
        .env("RUST_LOG", "warn")
        .env("JUCODE_BIN", env!("CARGO_BIN_EXE_jucode"))
        .env("ACP_SDK", &sdk)
        .env("WORKDIR", &work)
        .current_dir(&work);
    if in_process {
        command.arg("--in-process");
    }
    let output = {
        use wait_timeout::ChildExt;
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start node");
        match child
            .wait_timeout(std::time::Duration::from_secs(120))
            .expect("wait")
        {
            Some(_) => child.wait_with_output().expect("node output"),
            None => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("node output");
                panic!(
                    "the SDK client did not finish in 120 s:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    };
    gate.open();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("PASS"),
        "the SDK client failed:\n{stdout}\n{stderr}"
    );
    assert!(
        !work.join("new.txt").exists(),
        "the write went through the editor"
    );
    assert_eq!(model.unused_replies(), 0);
}

#[test]
fn the_typescript_sdk_drives_a_daemon_session() {
    scenario(false);
}

#[test]
fn the_typescript_sdk_drives_an_in_process_session() {
    scenario(true);
}
