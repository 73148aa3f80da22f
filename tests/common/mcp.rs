//! MCP test support: the test server (`tests/mcp_server/`, the example
//! `mcp_test_server`), config snippets that start it, and waiting for server states.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::serve::Serve;

/// The test server's binary. `cargo test` builds examples with the tests; a run limited
/// to one test target (`cargo test --test serve`) does not, so it is built here once
/// per test process (a no-op when it is up to date).
pub fn server_bin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let jucode = PathBuf::from(env!("CARGO_BIN_EXE_jucode"));
            let profile_dir = jucode.parent().expect("the binary's directory").to_owned();
            let target_dir = profile_dir
                .parent()
                .expect("the target directory")
                .to_owned();
            let mut build = Command::new(env!("CARGO"));
            // Only what cargo needs: the variables cargo sets for a test process would
            // make it see every crate as changed, and rebuild them back and forth.
            build.env_clear();
            for key in [
                "PATH",
                "HOME",
                "CARGO_HOME",
                "RUSTUP_HOME",
                "RUSTUP_TOOLCHAIN",
            ] {
                if let Some(value) = std::env::var_os(key) {
                    build.env(key, value);
                }
            }
            build
                .args(["build", "--quiet", "--example", "mcp_test_server"])
                .arg("--manifest-path")
                .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
                .env("CARGO_TARGET_DIR", &target_dir);
            if profile_dir
                .file_name()
                .is_some_and(|name| name == "release")
            {
                build.arg("--release");
            }
            let status = build
                .status()
                .expect("run cargo to build the test MCP server");
            assert!(status.success(), "building the test MCP server failed");
            let bin = profile_dir.join("examples").join("mcp_test_server");
            assert!(bin.exists(), "no test MCP server at {}", bin.display());
            bin
        })
        .clone()
}

/// `[mcp_servers.<name>]` starting the test server with `args`, plus `extra` TOML keys.
pub fn server_toml(name: &str, args: &[&str], extra: &str) -> String {
    let args: Vec<String> = args.iter().map(|arg| format!("{arg:?}")).collect();
    format!(
        "\n[mcp_servers.{name}]\ncommand = {:?}\nargs = [{}]\n{extra}\n",
        server_bin().display().to_string(),
        args.join(", ")
    )
}

/// The server `name` in an `mcp_servers` event.
pub fn server<'a>(event: &'a Value, name: &str) -> Option<&'a Value> {
    event["servers"]
        .as_array()?
        .iter()
        .find(|server| server["name"] == name)
}

impl Serve {
    /// Like [`Serve::until_server`], but the last `mcp_servers` already read counts too:
    /// for waiting on a state that may have been announced while waiting on another.
    pub fn wait_server(&mut self, name: &str, state: &str) -> Value {
        let last = self.seen.iter().rev().find(|e| e["type"] == "mcp_servers");
        if let Some(entry) = last.and_then(|view| server(view, name))
            && entry["state"] == state
        {
            return entry.clone();
        }
        self.until_server(name, state)
    }

    /// Reads events until an `mcp_servers` in which `name` is in `state`; returns that
    /// server's entry. Events read on the way are in `seen`.
    pub fn until_server(&mut self, name: &str, state: &str) -> Value {
        loop {
            let events = self.until("mcp_servers");
            let last = events.last().expect("the mcp_servers event");
            if let Some(entry) = server(last, name)
                && entry["state"] == state
            {
                return entry.clone();
            }
        }
    }
}
