//! The four `mcp_*` ops and `/mcp`: their answers, what they persist to the user's
//! config file (comments kept), and invalid definitions changing nothing.

use serde_json::{Value, json};

use crate::common::mcp::{server, server_bin, server_toml};
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::{Home, Serve};

fn names(view: &Value) -> Vec<&str> {
    view["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect()
}

fn config(home: &Home) -> String {
    std::fs::read_to_string(home.path().join("config.toml")).unwrap()
}

#[test]
fn every_op_answers_with_the_view_and_persists_to_the_config_file() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    home.prepend_config("# my jucode settings\n");
    home.append_config(&server_toml("notes", &[], ""));
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("notes", "connected");
    serve.until("command_list");

    serve.send(json!({"op": "mcp_list"}));
    let view = serve.expect_one("mcp_servers");
    assert_eq!(names(&view), ["notes"]);
    assert_eq!(server(&view, "notes").unwrap()["state"], "connected");
    serve.send(json!({"op": "command", "input": "/mcp"}));
    assert_eq!(serve.expect_one("mcp_servers"), view);

    // mcp_set adds a server, with its own env and cwd, and writes it to the file.
    let sub = home.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    serve.send(json!({"op": "mcp_set", "name": "more", "server": {
        "command": server_bin(), "env": {"MCP_TEST_VALUE": "42"}, "cwd": "sub", "timeout_ms": 20000,
    }}));
    let answer = serve.expect_one("mcp_servers");
    assert_eq!(names(&answer), ["more", "notes"]);
    assert_eq!(server(&answer, "more").unwrap()["state"], "connecting");
    serve.until_server("more", "connected");
    serve.until("command_list");
    let text = config(&home);
    assert!(text.starts_with("# my jucode settings\n"), "{text}");
    assert!(
        text.contains("[mcp_servers.more]\n")
            && text.contains("env = { MCP_TEST_VALUE = \"42\" }\n")
            && text.contains("cwd = \"sub\"\n")
            && text.contains("timeout_ms = 20000\n"),
        "{text}"
    );
    model.push(tool_reply("call_1", "mcp__more__whoami", json!({})));
    model.push(text_reply(&["found"]));
    serve.user("who are you");
    let events = serve.until_ready();
    let output = events.iter().find(|e| e["type"] == "tool_output").unwrap();
    let wanted = format!("cwd={} value=42 pid=", sub.display());
    assert!(
        output["output"].as_str().unwrap().starts_with(&wanted),
        "{output}"
    );

    // Invalid definitions are errors, for the asker, and change nothing.
    let before = config(&home);
    for (name, definition, error) in [
        (
            "bad",
            json!({"command": "x", "url": "http://x"}),
            "mcp_servers.bad: has both `command` and `url`; a server is one or the other",
        ),
        (
            "bad",
            json!({}),
            "mcp_servers.bad: needs `command` (a stdio server) or `url` (a streamable HTTP server)",
        ),
        (
            "bad",
            json!({"url": "ftp://x"}),
            "mcp_servers.bad.url: must start with http:// or https:// (got \"ftp://x\")",
        ),
        (
            "a b",
            json!({"command": "x"}),
            "mcp_servers.\"a b\": a server name is 1 to 32 ASCII letters, digits, `_` or `-` (got \"a b\")",
        ),
    ] {
        serve.send(json!({"op": "mcp_set", "name": name, "server": definition}));
        assert_eq!(serve.expect_one("error")["message"], error);
    }
    serve.send(json!({"op": "mcp_set", "name": "bad", "server": {"comand": "x"}}));
    let error = serve.expect_one("error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid mcp_set: unknown field `comand`"),
        "{error}"
    );
    for op in [
        json!({"op": "mcp_remove", "name": "nope"}),
        json!({"op": "mcp_toggle", "name": "nope", "enabled": true}),
    ] {
        serve.send(op);
        assert_eq!(
            serve.expect_one("error")["message"],
            "unknown MCP server: nope (configured: more, notes)"
        );
    }
    assert_eq!(config(&home), before);
    serve.send(json!({"op": "mcp_list"}));
    assert_eq!(names(&serve.expect_one("mcp_servers")), ["more", "notes"]);

    // mcp_toggle: off stops it; on starts it again.
    serve.send(json!({"op": "mcp_toggle", "name": "more", "enabled": false}));
    let answer = serve.expect_one("mcp_servers");
    assert_eq!(server(&answer, "more").unwrap()["state"], "disabled");
    assert_eq!(server(&answer, "more").unwrap()["tools"], json!([]));
    let commands = serve.expect_one("command_list");
    assert!(!commands.to_string().contains("/more:review"), "{commands}");
    assert!(
        config(&home).contains("timeout_ms = 20000\nenabled = false\n"),
        "{}",
        config(&home)
    );
    serve.send(json!({"op": "mcp_toggle", "name": "more", "enabled": true}));
    let answer = serve.expect_one("mcp_servers");
    assert_eq!(server(&answer, "more").unwrap()["state"], "connecting");
    serve.until_server("more", "connected");
    assert!(config(&home).contains("enabled = true\n"));

    // mcp_remove stops it and takes it out of the file.
    serve.send(json!({"op": "mcp_remove", "name": "more"}));
    let answer = loop {
        let event = serve.next();
        if event["type"] == "mcp_servers" && names(&event) == ["notes"] {
            break event;
        }
    };
    assert_eq!(server(&answer, "notes").unwrap()["state"], "connected");
    let text = config(&home);
    assert!(!text.contains("mcp_servers.more"), "{text}");
    assert!(
        text.starts_with("# my jucode settings\n") && text.contains("[mcp_servers.notes]"),
        "{text}"
    );
}

#[test]
fn http_servers_are_listed_as_http_and_their_header_variables_must_exist() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    home.append_config(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         headers = { Authorization = \"Bearer ${JUCODE_TEST_NO_SUCH_TOKEN}\" }\n",
    );
    let mut serve = Serve::start(&home);
    let batch = serve.skip_startup();
    let web = server(batch.last().unwrap(), "web").unwrap().clone();
    assert_eq!(web["transport"], "http");
    let failed = serve.until_server("web", "failed");
    assert_eq!(
        failed["error"],
        "headers.Authorization: environment variable JUCODE_TEST_NO_SUCH_TOKEN is not set"
    );
}
