//! File reads, writes and shell commands through the editor (ACP's `fs/*` and
//! `terminal/*`), for a session in the daemon.

use serde_json::json;

use crate::common::acp::{Acp, updates};
use crate::common::daemon::DaemonGuard;
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::Home;

#[test]
fn reads_writes_and_commands_go_through_the_client() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "full-access");
    let _daemon = DaemonGuard(&home);
    std::fs::write(home.path().join("a.txt"), "on disk\n").unwrap();
    model.push(tool_reply("call_1", "read_file", json!({"path": "a.txt"})));
    model.push(tool_reply(
        "call_2",
        "edit_file",
        json!({"path": "a.txt", "old_string": "buffer", "new_string": "edited buffer"}),
    ));
    model.push(tool_reply("call_3", "bash", json!({"command": "echo hi"})));
    model.push(text_reply(&["done"]));

    let mut acp = Acp::start(&home, false);
    acp.initialize(json!({"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true}));
    let session = acp.new_session(home.path());
    let path = home.path().join("a.txt").display().to_string();
    let id = acp.request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}),
    );

    let read = acp.agent_request("fs/read_text_file");
    assert_eq!(read["params"]["sessionId"], session);
    assert_eq!(read["params"]["path"], path);
    acp.respond(&read["id"], json!({"content": "unsaved buffer\n"}));

    // The edit reads the buffer (to assess it, then to apply it), then writes it back
    // through the editor.
    for _ in 0..2 {
        let read = acp.agent_request("fs/read_text_file");
        acp.respond(&read["id"], json!({"content": "unsaved buffer\n"}));
    }
    let write = acp.agent_request("fs/write_text_file");
    assert_eq!(write["params"]["path"], path);
    assert_eq!(write["params"]["content"], "unsaved edited buffer\n");
    acp.respond(&write["id"], json!({}));

    let create = acp.agent_request("terminal/create");
    assert_eq!(create["params"]["command"], "bash");
    assert_eq!(create["params"]["args"], json!(["-c", "echo hi"]));
    assert_eq!(create["params"]["cwd"], home.path().display().to_string());
    acp.respond(&create["id"], json!({"terminalId": "term-1"}));
    let embedded = acp.until(|m| {
        m["params"]["update"]["toolCallId"] == "call_3"
            && m["params"]["update"]["content"][0]["type"] == "terminal"
    });
    assert_eq!(
        embedded["params"]["update"]["content"][0]["terminalId"],
        "term-1"
    );
    let wait = acp.agent_request("terminal/wait_for_exit");
    assert_eq!(wait["params"]["terminalId"], "term-1");
    acp.respond(&wait["id"], json!({"exitCode": 0, "signal": null}));
    let output = acp.agent_request("terminal/output");
    acp.respond(&output["id"], json!({"output": "hi\n", "truncated": false}));
    let release = acp.agent_request("terminal/release");
    acp.respond(&release["id"], json!({}));

    let messages = acp.collect_until(|m| m["id"] == id);
    assert_eq!(messages.last().unwrap()["result"]["stopReason"], "end_turn");
    // The disk never saw the edit; the model saw the editor's buffer and terminal.
    assert_eq!(
        std::fs::read_to_string(home.path().join("a.txt")).unwrap(),
        "on disk\n"
    );
    let requests = model.requests();
    let tool_text = |n: usize| {
        requests[n].last_message()["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(tool_text(1).contains("unsaved buffer"), "{}", tool_text(1));
    assert!(tool_text(2).starts_with("edited a.txt"), "{}", tool_text(2));
    assert_eq!(tool_text(3), "exit code: 0\nhi\n");
    let cards: Vec<_> = updates(&acp.seen)
        .into_iter()
        .filter(|u| u["toolCallId"] == "call_3")
        .collect();
    let last = cards.last().unwrap();
    assert_eq!(last["status"], "completed");
    assert_eq!(
        last["content"][0],
        json!({"type": "terminal", "terminalId": "term-1"})
    );
}
