//! MCP servers in the daemon: every session starts its own, and they end with it.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::daemon::DaemonGuard;
use crate::common::mcp::server_toml;
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::{Home, Serve};

/// Whether a process with this pid exists (a zombie counts until it is reaped).
fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// The `pid=` of the test server's `whoami` output.
fn pid_of(output: &str) -> i32 {
    output
        .rsplit("pid=")
        .next()
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {output:?}"))
}

#[test]
fn every_session_has_its_own_servers_and_they_end_with_it() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    home.append_config(&server_toml("notes", &[], ""));
    let _daemon = DaemonGuard(&home);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut sessions = Vec::new();
    let mut pids = Vec::new();
    for (n, dir) in dirs.iter().enumerate() {
        let mut serve = Serve::shim(&home).cwd(dir.path()).start();
        serve.skip_startup();
        serve.wait_server("notes", "connected");
        model.push(tool_reply(
            &format!("call_{n}"),
            "mcp__notes__whoami",
            json!({}),
        ));
        model.push(text_reply(&["ok"]));
        serve.user("who serves you?");
        let events = serve.until_ready();
        let output = events
            .iter()
            .find(|e| e["type"] == "tool_output")
            .and_then(|e| e["output"].as_str())
            .unwrap()
            .to_owned();
        let cwd = dir.path().canonicalize().unwrap();
        assert!(
            output.starts_with(&format!("cwd={} ", cwd.display())),
            "session {n} was served by {output:?}"
        );
        pids.push(pid_of(&output));
        sessions.push(serve);
    }
    assert_ne!(pids[0], pids[1], "two sessions, two servers");

    // The first session ends: its server goes, the other session's stays.
    let mut first = sessions.remove(0);
    first.send(json!({"op": "shutdown"}));
    assert_eq!(first.wait().code(), Some(0));
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pids[0]) {
        assert!(
            Instant::now() < deadline,
            "the ended session's server still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(alive(pids[1]));
}
