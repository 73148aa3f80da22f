//! The editor's `mcpServers`: started for that session only, their tools offered to the
//! model, never written to the user's config.

use serde_json::json;

use crate::common::acp::{Acp, updates};
use crate::common::daemon::DaemonGuard;
use crate::common::mcp::server_bin;
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::{Home, Serve};

#[test]
fn the_editors_mcp_servers_serve_its_session_only() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "auto");
    let config_before = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    let _daemon = DaemonGuard(&home);
    let mut acp = Acp::start(&home, false);
    acp.initialize(json!({}));

    // A wrong entry refuses the whole request.
    let refused = acp.request(
        "session/new",
        json!({"cwd": home.path(), "mcpServers": [{"type": "sse", "name": "old", "url": "http://127.0.0.1:9/", "headers": []}]}),
    );
    let answer = acp.until(|m| m["id"] == refused);
    assert_eq!(answer["error"]["code"], -32602, "{answer}");

    let result = acp.call(
        "session/new",
        json!({"cwd": home.path(), "mcpServers": [{
            "name": "ed",
            "command": server_bin(),
            "args": [],
            "env": [{"name": "MCP_TEST_VALUE", "value": "from-the-editor"}],
        }]}),
    );
    let session = result["sessionId"].as_str().unwrap().to_owned();

    // Watched from `jucode serve --session`: the server is the session's.
    let mut serve = Serve::shim(&home).arg("--session").arg(&session).start();
    serve.until("startup");
    serve.wait_server("ed", "connected");

    model.push(tool_reply("call_1", "mcp__ed__whoami", json!({})));
    model.push(text_reply(&["done"]));
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "who are you?"}]}),
    );
    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    let requests = model.wait_requests(2);
    assert!(
        requests[0].tool_names().contains(&"mcp__ed__whoami"),
        "{:?}",
        requests[0].tool_names()
    );
    let card = updates(&messages)
        .into_iter()
        .rfind(|u| u["toolCallId"] == "call_1")
        .unwrap();
    assert_eq!(card["status"], "completed", "{card}");
    assert!(card.to_string().contains("from-the-editor"), "{card}");

    // The user's config is as it was: the server lasts as long as the session.
    let config_after = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    assert_eq!(config_before, config_after);
    // Only the editor changes it; the protocol's ops say where.
    serve.send(json!({"op": "mcp_remove", "name": "ed"}));
    let error = serve.until("error").pop().unwrap();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("for this session only"),
        "{error}"
    );
}
