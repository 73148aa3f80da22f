//! Images and files attached to user messages.

use serde_json::json;

use crate::common::mock::{MockModel, text_reply};
use crate::common::serve::{Home, Serve};

#[test]
fn images_are_attached_and_bad_paths_skipped_with_a_notice() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    let png = home.path().join("shot.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n0000").unwrap();
    let png = png.display().to_string();
    model.push(text_reply(&["nice picture"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({
        "op": "user_message",
        "content": "what is this?",
        "images": [png, "/does/not/exist.png"],
    }));
    let events = serve.expect(&["info", "user_message"]);
    let notice = events[0]["message"].as_str().unwrap();
    assert!(notice.contains("/does/not/exist.png"), "{notice}");
    assert_eq!(events[1]["content"], "what is this?");
    assert_eq!(events[1]["images"], json!([png]));
    serve.until_ready();

    let request = &model.wait_requests(1)[0];
    let content = request.last_message()["content"]
        .as_array()
        .expect("content parts");
    assert_eq!(content[0], json!({"type": "text", "text": "what is this?"}));
    assert_eq!(content[1]["type"], "image_url");
    let url = content[1]["image_url"]["url"].as_str().unwrap();
    assert_eq!(url, "data:image/png;base64,iVBORw0KGgowMDAw");
    assert_eq!(content.len(), 2);
}

#[test]
fn files_are_announced_to_the_model_but_not_echoed_as_text() {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    model.push(text_reply(&["got it"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({
        "op": "user_message",
        "content": "summarize these",
        "files": ["/data/report.pdf", "/data/notes.md"],
    }));
    let echo = serve.expect_one("user_message");
    assert_eq!(echo["content"], "summarize these");
    assert_eq!(echo["files"], json!(["/data/report.pdf", "/data/notes.md"]));
    serve.until_ready();
    let request = &model.wait_requests(1)[0];
    assert_eq!(
        request.last_message()["content"],
        "summarize these\n\
         [Attached file \"report.pdf\" is saved at: /data/report.pdf]\n\
         [Attached file \"notes.md\" is saved at: /data/notes.md]"
    );
    serve.send(json!({"op": "command", "input": "/transcript"}));
    let transcript = serve.expect_one("transcript");
    assert_eq!(
        transcript["items"][0],
        json!({"role": "user", "content": "summarize these", "files": ["/data/report.pdf", "/data/notes.md"]})
    );
    assert_eq!(
        transcript["items"][1],
        json!({"role": "assistant", "content": "got it"})
    );
}
