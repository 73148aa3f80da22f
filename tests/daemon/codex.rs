//! Codex hosted by the daemon (`kind = "codex"`): the real `codex app-server`
//! (`@openai/codex`, installed by `.ci/run` into `target/codex-npm`, or named by
//! `JUCODE_CODEX`), its model traffic sent through `provider` to the loopback mock
//! speaking the Responses API. Codex keeps its state in a home of the test's own
//! (`CODEX_HOME`). Without the binary the tests say why they skipped; nothing reaches
//! the network.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::daemon::DaemonGuard;
use crate::common::mock::{self, Gate, MockModel, Reply, Step};
use crate::common::serve::{Home, Serve, joined, startup_id, types};

fn codex() -> Result<PathBuf, String> {
    crate::common::daemon::npm_agent("JUCODE_CODEX", "codex-npm", "codex", "codex")
}

macro_rules! codex_or_skip {
    () => {
        match codex() {
            Ok(program) => program,
            Err(why) => {
                println!("SKIPPED: the hosted Codex test: {why}");
                return;
            }
        }
    };
}

/// A daemon home whose `[engines.codex]` runs `program` against the mock model in
/// `mode`, with homes of its own for Codex, and a working directory.
struct Hosting {
    model: MockModel,
    home: Home,
    work: tempfile::TempDir,
    _codex_home: tempfile::TempDir,
}

fn hosting(program: &Path, mode: &str) -> Hosting {
    let model = MockModel::start();
    let codex_home = tempfile::tempdir().unwrap();
    let home = Home::new();
    home.write_config(&format!(
        "[providers.mock]\nkind = \"openai-responses\"\nbase_url = \"{}\"\napi_key = \"sk-test\"\n\
         [engines.codex]\nkind = \"codex\"\ncommand = \"{}\"\nprovider = \"mock\"\ndefault_mode = \"{mode}\"\n\
         default_config_options = {{ model = \"gpt-test\" }}\n\
         env = {{ CODEX_HOME = \"{}\", HOME = \"{}\" }}\n",
        model.base_url(),
        program.display(),
        codex_home.path().display(),
        codex_home.path().display(),
    ));
    Hosting {
        model,
        home,
        work: tempfile::tempdir().unwrap(),
        _codex_home: codex_home,
    }
}

impl Hosting {
    fn open(&self) -> Serve {
        Serve::shim(&self.home)
            .arg("--engine")
            .arg("codex")
            .cwd(self.work.path())
            .start()
    }
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn completed(id: &str) -> Value {
    json!({"type": "response.completed", "response": {"id": id, "status": "completed",
        "output": [], "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20},
        "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 128}}})
}

/// The events of a reply that says `text`.
fn saying(text: &str) -> Vec<Value> {
    let id = format!("resp_{}", next_id());
    let item = format!("msg_{id}");
    vec![
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message",
            "id": item, "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.content_part.added", "item_id": item, "output_index": 0,
            "content_index": 0, "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_text.delta", "item_id": item, "output_index": 0,
            "content_index": 0, "delta": text}),
        json!({"type": "response.output_text.done", "item_id": item, "output_index": 0,
            "content_index": 0, "text": text}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message",
            "id": item, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text}]}}),
        completed(&id),
    ]
}

fn said(text: &str) -> Reply {
    mock::responses_sse(&saying(text))
}

/// A reply that runs `command` with Codex's `exec_command` tool.
fn runs(call: &str, command: &str) -> Reply {
    let id = format!("resp_{}", next_id());
    let item = json!({"type": "function_call", "id": format!("fc_{call}"), "call_id": call,
        "name": "exec_command", "arguments": json!({"cmd": command}).to_string(), "status": "completed"});
    mock::responses_sse(&[
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        completed(&id),
    ])
}

/// A reply that says `text` only once `gate` opens.
fn held(text: &str, gate: &Gate) -> Reply {
    let Reply::Sse(mut steps) = said(text) else {
        unreachable!()
    };
    let Some(Step::Raw(body)) = steps.pop() else {
        unreachable!()
    };
    let cut = body.find("event: response.output_text.done").unwrap();
    steps.push(Step::Raw(body[..cut].to_owned()));
    steps.push(Step::Wait(gate.clone()));
    steps.push(Step::Raw(body[cut..].to_owned()));
    Reply::Sse(steps)
}

#[test]
fn a_codex_session_streams_asks_and_runs_as_the_serve_protocol() {
    let program = codex_or_skip!();
    // `manual` is Codex's `untrusted`: it asks before a command it does not know as safe.
    let fx = hosting(&program, "manual");
    let _guard = DaemonGuard(&fx.home);
    fx.model.push(said("Hello from Codex"));
    fx.model.push(runs("call_no", "touch denied.txt"));
    fx.model.push(said("Not run."));
    fx.model.push(runs("call_yes", "touch allowed.txt"));
    fx.model.push(said("Ran it."));
    fx.model.push(runs("call_again", "touch allowed.txt"));
    fx.model.push(said("Ran it again."));

    let mut serve = fx.open();
    let startup = serve.until("status");
    let kinds = types(&startup);
    for expected in [
        "startup",
        "model_status",
        "command_list",
        "approval_mode",
        "engine_caps",
        "session_options",
        "tool_provider",
    ] {
        assert!(
            kinds.contains(&expected),
            "{expected} missing from {kinds:?}"
        );
    }
    let caps = startup.iter().find(|e| e["type"] == "engine_caps").unwrap();
    assert_eq!(caps["kind"], "codex");
    assert_eq!(caps["steer"], true, "{caps}");
    assert!(
        caps["agent"].as_str().unwrap_or("").starts_with("Codex "),
        "{caps}"
    );
    let status = startup
        .iter()
        .find(|e| e["type"] == "model_status")
        .unwrap();
    assert!(status.to_string().contains("gpt-test"), "{status}");
    let mode = startup
        .iter()
        .find(|e| e["type"] == "approval_mode")
        .unwrap();
    assert_eq!(mode["mode"], "manual");
    let provider = startup
        .iter()
        .find(|e| e["type"] == "tool_provider")
        .unwrap();
    assert_eq!(provider["provider"]["id"], "mock", "{provider}");

    serve.user("say hello");
    let turn = serve.until_ready();
    assert_eq!(
        joined(&turn, "assistant_delta"),
        "Hello from Codex",
        "{:?}",
        types(&turn)
    );
    let usage = turn.iter().find(|e| e["type"] == "usage").expect("usage");
    assert_eq!(usage["input_tokens"], 120, "{usage}");
    assert_eq!(usage["cached_input_tokens"], 20, "{usage}");
    assert!(
        types(&turn).contains(&"context_usage"),
        "{:?}",
        types(&turn)
    );
    let request = &fx.model.wait_requests(1)[0];
    assert!(request.body.to_string().contains("say hello"));
    assert_eq!(request.body["model"], "gpt-test");
    let auth = request
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str());
    assert_eq!(auth, Some("Bearer sk-test"), "{:?}", request.headers);

    serve.user("run the first");
    let asked = serve.until("approval_request");
    let request = asked.last().unwrap();
    assert_eq!(request["call_id"], "call_no");
    assert!(
        request["summary"].as_str().unwrap().contains("denied.txt"),
        "{request}"
    );
    assert!(types(&asked).contains(&"tool_start"), "{:?}", types(&asked));
    serve.send(json!({"op": "approve", "call_id": "call_no", "decision": "deny"}));
    let turn = serve.until_ready();
    let output = turn
        .iter()
        .find(|e| e["type"] == "tool_output")
        .expect("the card closes");
    assert_eq!(output["is_error"], true, "{output}");
    assert_eq!(joined(&turn, "assistant_delta"), "Not run.");
    assert!(!fx.work.path().join("denied.txt").exists());

    // Allowed always: Codex keeps the rule it proposed, and asks no more.
    serve.user("run the second");
    serve.until("approval_request");
    serve
        .send(json!({"op": "approve", "call_id": "call_yes", "decision": "allow", "always": true}));
    let turn = serve.until_ready();
    assert!(types(&turn).contains(&"approval_resolved"));
    assert_eq!(joined(&turn, "assistant_delta"), "Ran it.");
    assert!(fx.work.path().join("allowed.txt").exists());
    serve.user("run it again");
    let turn = serve.until_ready();
    assert!(
        !types(&turn).contains(&"approval_request"),
        "{:?}",
        types(&turn)
    );
    assert_eq!(joined(&turn, "assistant_delta"), "Ran it again.");

    // A mode is a pair of Codex's approval policy and sandbox, sent with the next turn.
    serve.send(json!({"op": "set_approval_mode", "mode": "full-access"}));
    let changed = serve.until("approval_mode");
    assert_eq!(changed.last().unwrap()["mode"], "full-access");
}

#[test]
fn a_codex_session_is_resumed_after_the_daemon_restarts() {
    let program = codex_or_skip!();
    let fx = hosting(&program, "auto-edit");
    let _guard = DaemonGuard(&fx.home);
    fx.model.push(said("Noted."));
    let mut serve = fx.open();
    let startup = serve.until("status");
    let id = startup_id(&startup);
    serve.user("remember the word teapot");
    serve.until_ready();
    serve.close_stdin();
    assert_eq!(serve.wait().code(), Some(0));
    assert_eq!(fx.home.jucode(&["daemon", "stop"]).status.code(), Some(0));

    fx.model.push(said("Teapot."));
    let mut serve = Serve::shim(&fx.home).arg("--session").arg(&id).start();
    let snapshot = serve.until("status");
    let transcript = snapshot
        .iter()
        .find(|e| e["type"] == "transcript")
        .expect("the conversation so far");
    assert!(transcript.to_string().contains("teapot"), "{transcript}");
    assert!(
        !snapshot.iter().any(|e| e["type"] == "info"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains("new conversation")),
        "{snapshot:?}"
    );
    serve.user("which word?");
    assert_eq!(joined(&serve.until_ready(), "assistant_delta"), "Teapot.");
    // Codex resumed its own thread: the model saw the first exchange.
    let requests = fx.model.wait_requests(2);
    let last = requests.last().unwrap();
    let body = last.body.to_string();
    assert!(
        body.contains("teapot") && body.contains("which word?"),
        "{body}"
    );
    assert_eq!(last.body["model"], "gpt-test");
}

#[test]
fn a_codex_turn_is_interrupted_and_the_queue_goes_next() {
    let program = codex_or_skip!();
    let fx = hosting(&program, "auto-edit");
    let _guard = DaemonGuard(&fx.home);
    let gate = Gate::new();
    fx.model.push(held("Working on it", &gate));
    fx.model.push(said("Second answer"));

    let mut serve = fx.open();
    serve.until("status");
    serve.user("first");
    serve.until("assistant_delta");
    serve.user("second");
    let queued = serve.until("pending_messages");
    assert_eq!(queued.last().unwrap()["messages"][0], "second");
    serve.send(json!({"op": "interrupt", "index": 0}));
    serve.until_status("interrupted");
    gate.open();
    let next = serve.until_ready();
    assert_eq!(
        joined(&next, "assistant_delta"),
        "Second answer",
        "{next:?}"
    );
}

#[test]
fn a_message_steered_into_a_codex_turn_is_read_within_it() {
    let program = codex_or_skip!();
    let fx = hosting(&program, "auto-edit");
    let _guard = DaemonGuard(&fx.home);
    let gate = Gate::new();
    fx.model.push(held("Looking", &gate));
    fx.model.push(said("Also that."));

    let mut serve = fx.open();
    serve.until("status");
    serve.user("first");
    serve.until("assistant_delta");
    serve.user("and the tests too");
    serve.until("pending_messages");
    serve.send(json!({"op": "steer"}));
    serve.until_status("steering");
    let taken = serve.until("user_message");
    assert_eq!(taken.last().unwrap()["content"], "and the tests too");
    assert!(
        !taken
            .iter()
            .any(|e| e["type"] == "status" && e["message"] == "ready")
    );
    gate.open();
    // One turn: Codex read the message before its next request, and answered it.
    let turn = serve.until_ready();
    assert_eq!(joined(&turn, "assistant_delta"), "Also that.", "{turn:?}");
    let readies = turn
        .iter()
        .filter(|e| e["type"] == "status" && e["message"] == "ready")
        .count();
    assert_eq!(readies, 1, "{turn:?}");
    let requests = fx.model.wait_requests(2);
    assert!(requests[1].body.to_string().contains("and the tests too"));
}

#[test]
fn two_clients_share_a_codex_session_and_the_watcher_answers() {
    let program = codex_or_skip!();
    let fx = hosting(&program, "manual");
    let _guard = DaemonGuard(&fx.home);
    fx.model.push(runs("call_1", "touch shared.txt"));
    fx.model.push(said("Done together."));
    let mut first = fx.open();
    let startup = first.until("status");
    let id = startup_id(&startup);
    let mut second = Serve::shim(&fx.home).arg("--session").arg(&id).start();
    let snapshot = second.until("status");
    assert!(
        types(&snapshot).contains(&"engine_caps"),
        "{:?}",
        types(&snapshot)
    );

    first.user("make the file");
    let asked = second.until("approval_request");
    let call_id = asked.last().unwrap()["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    first.until("approval_request");
    second.send(json!({"op": "approve", "call_id": call_id, "decision": "allow"}));
    let turn = first.until_ready();
    assert!(
        types(&turn).contains(&"approval_resolved"),
        "{:?}",
        types(&turn)
    );
    assert_eq!(joined(&turn, "assistant_delta"), "Done together.");
    assert_eq!(
        joined(&second.until_ready(), "assistant_delta"),
        "Done together."
    );
    assert!(fx.work.path().join("shared.txt").exists());

    // A late joiner sees the conversation so far.
    let mut late = Serve::shim(&fx.home).arg("--session").arg(&id).start();
    let snapshot = late.until("status");
    let transcript = snapshot
        .iter()
        .find(|e| e["type"] == "transcript")
        .expect("the conversation so far");
    assert!(
        transcript.to_string().contains("make the file"),
        "{transcript}"
    );
}

/// The processes whose command line holds `marker` (the mock's URL, which only this
/// test's Codex is given).
fn processes_with(marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(marker)
                .then_some(pid)
        })
        .collect()
}

#[test]
fn a_killed_daemon_leaves_no_codex_behind() {
    let program = codex_or_skip!();
    let fx = hosting(&program, "auto-edit");
    let _guard = DaemonGuard(&fx.home);
    let mut serve = fx.open();
    serve.until("status");
    let marker = fx.model.base_url();
    // Codex's stdin was the daemon's: it ends when the daemon does, however it died.
    crate::common::daemon::kill_daemon_and_wait_gone(&fx.home, "Codex", || processes_with(&marker));
}
