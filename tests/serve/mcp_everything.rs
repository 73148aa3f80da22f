//! jucode against an MCP server nobody here wrote: `@modelcontextprotocol/server-everything`
//! from npm. `.ci/run` installs it (`.ci/install-mcp-everything`) and names it in
//! `JUCODE_MCP_EVERYTHING`. A test never reaches the network itself: without the variable
//! it uses an install left in `target/mcp-npm` by an earlier run of that script, and
//! otherwise skips, saying how to install it.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use crate::common::mcp::server;
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::{Home, Serve};

/// The package directory, or why there is none.
fn everything() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("JUCODE_MCP_EVERYTHING").filter(|dir| !dir.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let jucode = PathBuf::from(env!("CARGO_BIN_EXE_jucode"));
    let target = jucode
        .parent()
        .and_then(|dir| dir.parent())
        .expect("the target directory");
    let package = target.join("mcp-npm/node_modules/@modelcontextprotocol/server-everything");
    if package.join("dist/index.js").exists() {
        return Ok(package);
    }
    Err(format!(
        "JUCODE_MCP_EVERYTHING is not set and {} holds no install (run `bash .ci/install-mcp-everything {}`, as .ci/run does)",
        package.display(),
        target.join("mcp-npm").display()
    ))
}

#[test]
fn the_reference_server_everything_works_over_stdio() {
    let package = match everything() {
        Ok(package) => package,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let index = package.join("dist/index.js");
    assert!(index.exists(), "no {}", index.display());
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    home.append_config(&format!(
        "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\ntimeout_ms = 60000\n",
        index.display().to_string()
    ));
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    let everything = serve.wait_server("everything", "connected");
    let tools = everything["tools"].as_array().unwrap();
    for name in [
        "mcp__everything__echo",
        "mcp__everything__get-sum",
        "mcp__everything__get-tiny-image",
    ] {
        assert!(tools.contains(&json!(name)), "{name} not in {tools:?}");
    }

    model.push(tool_reply(
        "call_1",
        "mcp__everything__echo",
        json!({"message": "hi there"}),
    ));
    model.push(tool_reply(
        "call_2",
        "mcp__everything__get-sum",
        json!({"a": 2, "b": 3}),
    ));
    model.push(tool_reply(
        "call_3",
        "mcp__everything__get-tiny-image",
        json!({}),
    ));
    model.push(text_reply(&["done"]));
    serve.user("use the tools");
    let events = serve.until_ready();
    let outputs: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "tool_output")
        .collect();
    assert_eq!(outputs.len(), 3, "{events:#?}");
    assert_eq!(outputs[0]["output"], "Echo: hi there");
    assert_eq!(outputs[1]["output"], "The sum of 2 and 3 is 5.");
    let image = outputs[2]["output"].as_str().unwrap();
    assert!(
        image.contains("[image image/png, ") && image.contains(" attached]"),
        "{image}"
    );
    assert!(
        outputs.iter().all(|o| o["is_error"] == false),
        "{outputs:#?}"
    );
    let requests = model.requests();
    let last = requests[3].last_message();
    assert_eq!(
        last["role"], "user",
        "the image follows the results: {last}"
    );

    // Its prompts are commands.
    model.push(text_reply(&["sunny"]));
    serve.send(json!({"op": "command", "input": "/everything:args-prompt Paris state=Texas"}));
    let events = serve.until_ready();
    let echo = events.iter().find(|e| e["type"] == "user_message").unwrap();
    assert_eq!(echo["content"], "What's weather in Paris, Texas?");
    serve.send(json!({"op": "mcp_list"}));
    let view = serve.until("mcp_servers").pop().unwrap();
    assert_eq!(server(&view, "everything").unwrap()["state"], "connected");
}

/// Kills the HTTP server a test started, whatever happened.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_reference_server_everything_works_over_streamable_http() {
    use std::io::BufRead;
    let package = match everything() {
        Ok(package) => package,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port();
    let mut child = Command::new("node")
        .arg(package.join("dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start server-everything over HTTP");
    let stderr = child.stderr.take().expect("its stderr");
    let _server = Killed(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("server-everything did not say it listens");
        if line.contains("listening on port") {
            break;
        }
    }

    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    home.append_config(&format!(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n\
         headers = {{ X-Jucode-Test = \"Bearer ${{JUCODE_TEST_TOKEN}}\" }}\ntimeout_ms = 30000\n"
    ));
    let mut serve = Serve::builder(&home)
        .env("JUCODE_TEST_TOKEN", "t0k3n")
        .start();
    serve.skip_startup();
    let web = serve.wait_server("web", "connected");
    assert_eq!(web["transport"], "http");
    assert!(
        web["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp__web__echo")),
        "{web}"
    );
    model.push(tool_reply(
        "call_1",
        "mcp__web__echo",
        json!({"message": "over http"}),
    ));
    model.push(text_reply(&["done"]));
    serve.user("echo over http");
    let events = serve.until_ready();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    assert_eq!(output["output"], "Echo: over http");
    assert_eq!(output["is_error"], false);
}

#[test]
fn the_reference_servers_elicitation_is_answered_with_its_defaults_and_declined() {
    let package = match everything() {
        Ok(package) => package,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let index = package.join("dist/index.js");
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "full-access");
    home.append_config(&format!(
        "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\ntimeout_ms = 60000\n",
        index.display().to_string()
    ));
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    let everything = serve.wait_server("everything", "connected");
    let tool = "mcp__everything__trigger-elicitation-request";
    assert!(
        everything["tools"]
            .as_array()
            .unwrap()
            .contains(&json!(tool)),
        "the server offers its elicitation tool only to a client that declares elicitation: {everything}"
    );
    for (call, action) in [("call_1", "accept"), ("call_2", "decline")] {
        model.push(tool_reply(call, tool, json!({})));
        model.push(text_reply(&["ok"]));
        serve.user("ask me");
        let request = serve.until("elicitation_request").pop().unwrap();
        assert_eq!(request["server"], "everything");
        assert_eq!(
            request["schema"]["properties"]["integer"]["default"], 42,
            "{request}"
        );
        let id = request["id"].as_str().unwrap().to_owned();
        let answer = if action == "accept" {
            json!({"op": "elicitation_response", "id": id, "action": "accept", "content": {"name": "Ada"}})
        } else {
            json!({"op": "elicitation_response", "id": id, "action": "decline"})
        };
        serve.send(answer);
        let events = serve.until_ready();
        let output = events
            .iter()
            .find(|e| e["type"] == "tool_output")
            .and_then(|e| e["output"].as_str())
            .unwrap_or_default()
            .to_owned();
        if action == "accept" {
            // The server's own report of what came back: the name, and the defaults.
            assert!(output.contains("- Name: Ada"), "{output}");
            assert!(output.contains("- Favorite Integer: 42"), "{output}");
            assert!(
                output.contains("It was a dark and stormy night."),
                "{output}"
            );
        } else {
            assert!(output.contains("declined"), "{output}");
        }
    }
}
