//! `web_fetch` and `web_search` as sessions offer them: chat sessions run them in every
//! mode, coding sessions ask in `manual` and run in plan mode; pages come back as text
//! within `[web_fetch] max_bytes`; `web_search` only with a `[web_search]` backend.
//!
//! The pages and the search service are a loopback HTTP server on a thread of the test.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Reply, Step, finish, text_reply, tool_call};
use crate::common::serve::{Home, Serve, types};

const PAGE: &str = "<html><head><title>T</title><script>var hidden = 1;</script></head>\
    <body><h1>Release notes</h1><p>Version <b>2.0</b> adds <a href=\"/more\">streams</a>.</p>\
    </body></html>";

/// A loopback server: `/page` is HTML, `/long` a long text page, `/search` answers as
/// SearXNG does. It records every request line.
struct Site {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Site {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || answer(stream, &seen));
            }
        });
        Self { base, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn answer(stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    loop {
        let mut header = String::new();
        match reader.read_line(&mut header) {
            Ok(0) | Err(_) => break,
            Ok(_) if header.trim().is_empty() => break,
            Ok(_) => {}
        }
    }
    let target = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .to_owned();
    seen.lock().unwrap().push(target.clone());
    let (content_type, body) = if target == "/page" {
        ("text/html; charset=utf-8", PAGE.to_owned())
    } else if target == "/long" {
        ("text/plain", "0123456789".repeat(1000))
    } else if target.starts_with("/search?") {
        let results = json!({"results": [
            {"title": "Tokio select", "url": "https://docs.rs/tokio/select", "content": "Waits on <strong>many</strong> branches"},
            {"title": "No URL", "content": "skipped"},
        ]});
        ("application/json", results.to_string())
    } else {
        ("text/plain", String::new())
    };
    let status = if body.is_empty() {
        "404 Not Found"
    } else {
        "200 OK"
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn call(id: &str, name: &str, arguments: Value) -> Reply {
    Reply::Sse(vec![
        tool_call(0, id, name, &arguments.to_string()),
        finish("tool_calls"),
        Step::Done,
    ])
}

fn home_for(model: &MockModel, top: &str, tables: &str) -> Home {
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    home.prepend_config(top);
    home.append_config(tables);
    home
}

/// Runs one turn whose model calls `name` once, and returns its events.
fn one_call(serve: &mut Serve, model: &MockModel, name: &str, arguments: Value) -> Vec<Value> {
    model.push(call("call_1", name, arguments));
    model.push(text_reply(&["done"]));
    serve.user("look it up");
    serve.until_ready()
}

fn output_of(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_output")
        .unwrap_or_else(|| panic!("no tool_output: {events:#?}"))
}

#[test]
fn a_chat_fetches_pages_as_text_in_any_mode() {
    let model = MockModel::start();
    let site = Site::start();
    let home = home_for(
        &model,
        "approval_mode = \"manual\"\n",
        "[web_fetch]\nmax_bytes = 500\n",
    );
    let mut serve = Serve::builder(&home).arg("--chat").start();
    serve.skip_startup();

    let events = one_call(
        &mut serve,
        &model,
        "web_fetch",
        json!({"url": format!("{}/page", site.base)}),
    );
    assert!(!types(&events).contains(&"approval_request"), "{events:#?}");
    let output = output_of(&events);
    assert_eq!(output["is_error"], false, "{output}");
    let text = output["output"].as_str().unwrap();
    assert!(text.contains(&format!("URL: {}/page", site.base)), "{text}");
    assert!(text.contains("# Release notes"), "{text}");
    assert!(text.contains("2.0") && text.contains("streams"), "{text}");
    assert!(!text.contains("<h1>") && !text.contains("hidden"), "{text}");
    assert!(text.contains(&format!("{}/more", site.base)), "{text}");
    // The model reads the same text as the tool result.
    let requests = model.wait_requests(2);
    let last = requests[1].last_message();
    assert_eq!(last["role"], "tool");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("# Release notes")
    );
    let mut offered = requests[0].tool_names();
    offered.sort();
    assert!(offered.contains(&"web_fetch"), "{offered:?}");
    assert!(!offered.contains(&"web_search"), "no backend: {offered:?}");
    assert!(!offered.contains(&"bash"), "{offered:?}");

    // Longer text is cut at `max_bytes`, saying so.
    let events = one_call(
        &mut serve,
        &model,
        "web_fetch",
        json!({"url": format!("{}/long", site.base)}),
    );
    let text = output_of(&events)["output"].as_str().unwrap().to_owned();
    assert!(text.contains("[cut: the text is 10000 bytes"), "{text}");
    assert!(text.len() < 1000, "{}", text.len());

    // Only http and https: nothing is sent for another scheme.
    let before = site.requests().len();
    let events = one_call(
        &mut serve,
        &model,
        "web_fetch",
        json!({"url": "file:///etc/passwd"}),
    );
    let output = output_of(&events);
    assert_eq!(output["is_error"], true, "{output}");
    assert!(!output["output"].as_str().unwrap().contains("root:"));
    assert_eq!(site.requests().len(), before);
}

#[test]
fn a_coding_session_asks_before_reaching_the_network_and_plans_with_it() {
    let model = MockModel::start();
    let site = Site::start();
    let home = home_for(&model, "approval_mode = \"manual\"\n", "");
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::builder(&home).cwd(dir.path()).start();
    serve.skip_startup();

    model.push(call(
        "call_1",
        "web_fetch",
        json!({"url": format!("{}/page", site.base)}),
    ));
    model.push(text_reply(&["done"]));
    serve.user("read the notes");
    let request = serve.until("approval_request").pop().unwrap();
    assert_eq!(request["name"], "web_fetch", "{request}");
    assert!(site.requests().is_empty(), "fetched before approval");
    serve.send(json!({"op": "approve", "call_id": "call_1", "decision": "allow"}));
    let events = serve.until_ready();
    let output = output_of(&events);
    assert!(
        output["output"]
            .as_str()
            .unwrap()
            .contains("# Release notes")
    );
    assert_eq!(site.requests(), ["/page"]);

    // Plan mode runs it without asking: it reads, it changes nothing here.
    serve.send(json!({"op": "set_approval_mode", "mode": "plan"}));
    let events = one_call(
        &mut serve,
        &model,
        "web_fetch",
        json!({"url": format!("{}/page", site.base)}),
    );
    assert!(!types(&events).contains(&"approval_request"), "{events:#?}");
    assert_eq!(output_of(&events)["is_error"], false);
    assert_eq!(site.requests().len(), 2);
}

#[test]
fn web_search_asks_the_configured_searxng_backend() {
    let model = MockModel::start();
    let site = Site::start();
    let home = home_for(
        &model,
        "",
        &format!(
            "[web_search]\nbackend = \"searxng\"\nurl = \"{}\"\n",
            site.base
        ),
    );
    let mut serve = Serve::builder(&home).arg("--chat").start();
    serve.skip_startup();
    let events = one_call(
        &mut serve,
        &model,
        "web_search",
        json!({"query": "tokio select"}),
    );
    let output = output_of(&events);
    assert_eq!(output["is_error"], false, "{output}");
    let text = output["output"].as_str().unwrap();
    assert!(text.contains("1. Tokio select"), "{text}");
    assert!(text.contains("https://docs.rs/tokio/select"), "{text}");
    assert!(text.contains("Waits on many branches"), "{text}");
    assert!(!text.contains("No URL"), "{text}");
    let searched = site.requests();
    assert_eq!(searched.len(), 1);
    assert!(searched[0].starts_with("/search?"), "{searched:?}");
    assert!(
        searched[0].contains("q=tokio") && searched[0].contains("format=json"),
        "{searched:?}"
    );
    let requests = model.wait_requests(1);
    let offered = requests[0].tool_names();
    assert!(offered.contains(&"web_search"), "{offered:?}");
}
