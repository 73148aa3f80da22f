//! Claude Code hosted by the daemon (`kind = "claude-code"`): the real `claude` binary
//! (`@anthropic-ai/claude-code`, installed by `.ci/run` into `target/claude-npm`, or
//! named by `JUCODE_CLAUDE`), its model traffic sent to the loopback mock speaking the
//! Messages API. Also `@agentclientprotocol/claude-agent-acp`, an ACP agent on the
//! Claude Agent SDK, hosted as `kind = "acp"` against the same mock. Without the
//! programs or node the tests say why they skipped; nothing reaches the network.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::daemon::DaemonGuard;
use crate::common::mock::{self, Gate, MockModel, Reply, Step};
use crate::common::serve::{Home, Serve, joined, startup_id, types};

fn claude() -> Result<PathBuf, String> {
    crate::common::daemon::npm_agent("JUCODE_CLAUDE", "claude-npm", "claude", "claude-code")
}

/// A daemon home whose `[engines.claude]` runs `program` against the mock model, with
/// a home of its own for Claude Code so nothing of the machine's settings is read or
/// written, and a working directory.
struct Hosting {
    model: MockModel,
    home: Home,
    work: tempfile::TempDir,
    _claude_home: tempfile::TempDir,
}

fn hosting(program: &Path) -> Hosting {
    let model = MockModel::start();
    let claude_home = tempfile::tempdir().unwrap();
    let home = Home::new();
    let base = model.base_url();
    let base = base.trim_end_matches("/v1");
    // The model traffic goes to the mock through `provider`, as a user would route it.
    home.write_config(&format!(
        "[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{base}/v1\"\napi_key = \"sk-test\"\n\
         [engines.claude]\nkind = \"claude-code\"\ncommand = \"{}\"\nprovider = \"mock\"\n\
         env = {{ HOME = \"{}\", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_AUTOUPDATER = \"1\" }}\n",
        program.display(),
        claude_home.path().display()
    ));
    Hosting {
        model,
        home,
        work: tempfile::tempdir().unwrap(),
        _claude_home: claude_home,
    }
}

impl Hosting {
    /// A new session on Claude Code, in the working directory.
    fn open(&self) -> Serve {
        Serve::shim(&self.home)
            .arg("--engine")
            .arg("claude")
            .cwd(self.work.path())
            .start()
    }
}

fn reply_of(blocks: Vec<Value>, stop: &str) -> Reply {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": format!("msg_{}", uuid_like()),
        "type": "message", "role": "assistant", "model": "claude-test", "content": [],
        "stop_reason": null, "usage": {"input_tokens": 40, "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
    ];
    for (index, (start, delta)) in blocks
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .enumerate()
    {
        events.push(json!({"type": "content_block_start", "index": index, "content_block": start}));
        events.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
        events.push(json!({"type": "content_block_stop", "index": index}));
    }
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": 7}}),
    );
    events.push(json!({"type": "message_stop"}));
    mock::messages_sse(&events)
}

fn uuid_like() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn said(text: &str) -> Reply {
    reply_of(
        vec![
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
        ],
        "end_turn",
    )
}

/// A reply that says `text` only once `gate` opens (it stops before the block's end).
fn held(text: &str, gate: &Gate) -> Reply {
    let Reply::Sse(mut steps) = said(text) else {
        unreachable!()
    };
    let Some(Step::Raw(body)) = steps.pop() else {
        unreachable!()
    };
    let cut = body.find("event: content_block_stop").unwrap();
    steps.push(Step::Raw(body[..cut].to_owned()));
    steps.push(Step::Wait(gate.clone()));
    steps.push(Step::Raw(body[cut..].to_owned()));
    Reply::Sse(steps)
}

fn runs(id: &str, command: &str) -> Reply {
    reply_of(
        vec![
            json!({"type": "tool_use", "id": id, "name": "Bash", "input": {}}),
            json!({"type": "input_json_delta",
                "partial_json": json!({"command": command, "description": "a test command"}).to_string()}),
        ],
        "tool_use",
    )
}

macro_rules! claude_or_skip {
    () => {
        match claude() {
            Ok(program) => program,
            Err(why) => {
                println!("SKIPPED: the hosted Claude Code test: {why}");
                return;
            }
        }
    };
}

#[test]
fn a_claude_code_session_streams_asks_and_runs_as_the_serve_protocol() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    fx.model.push(said("Hello from Claude"));
    fx.model.push(runs("toolu_no", "echo no > denied.txt"));
    fx.model.push(said("Not run."));
    fx.model.push(runs("toolu_yes", "echo yes > allowed.txt"));
    fx.model.push(said("Ran it."));

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
    assert_eq!(caps["kind"], "claude-code");
    assert!(
        caps["agent"]
            .as_str()
            .unwrap_or("")
            .starts_with("Claude Code "),
        "{caps}"
    );
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
        "Hello from Claude",
        "{:?}",
        types(&turn)
    );
    let usage = turn.iter().find(|e| e["type"] == "usage").expect("usage");
    assert_eq!(usage["input_tokens"], 140);
    assert_eq!(usage["cached_input_tokens"], 100);
    let request = &fx.model.wait_requests(1)[0];
    assert!(request.body.to_string().contains("say hello"));
    let auth = request
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .map(|(_, value)| value.as_str());
    assert_eq!(auth, Some("Bearer sk-test"), "{:?}", request.headers);

    serve.user("run the first");
    let asked = serve.until("approval_request");
    let request = asked.last().unwrap();
    assert_eq!(request["call_id"], "toolu_no");
    assert!(
        request["summary"].as_str().unwrap().contains("denied.txt"),
        "{request}"
    );
    assert!(types(&asked).contains(&"tool_start"), "{:?}", types(&asked));
    serve.send(json!({"op": "approve", "call_id": "toolu_no", "decision": "deny"}));
    let turn = serve.until_ready();
    let output = turn
        .iter()
        .find(|e| e["type"] == "tool_output")
        .expect("the card closes");
    assert_eq!(output["is_error"], true, "{output}");
    assert!(
        joined(&turn, "assistant_delta").starts_with("Not run."),
        "{turn:?}"
    );
    assert!(!fx.work.path().join("denied.txt").exists());

    serve.user("run the second");
    serve.until("approval_request");
    serve.send(json!({"op": "approve", "call_id": "toolu_yes", "decision": "allow"}));
    let turn = serve.until_ready();
    assert!(types(&turn).contains(&"approval_resolved"));
    assert_eq!(joined(&turn, "assistant_delta"), "Ran it.");
    assert_eq!(
        std::fs::read_to_string(fx.work.path().join("allowed.txt")).unwrap(),
        "yes\n"
    );

    // A mode is a Claude Code permission mode.
    serve.send(json!({"op": "set_approval_mode", "mode": "auto-edit"}));
    let changed = serve.until("approval_mode");
    assert_eq!(changed.last().unwrap()["mode"], "auto-edit");
}

#[test]
fn a_claude_code_session_is_resumed_after_the_daemon_restarts() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
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
    serve.user("which word?");
    assert_eq!(joined(&serve.until_ready(), "assistant_delta"), "Teapot.");
    // Claude Code continued its own conversation: the model saw the first exchange.
    let requests = fx.model.wait_requests(2);
    let last = requests.last().unwrap().body.to_string();
    assert!(
        last.contains("teapot") && last.contains("which word?"),
        "{last}"
    );
}

#[test]
fn a_claude_code_turn_is_interrupted_and_the_queue_goes_next() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    let gate = Gate::new();
    // The first reply stops half-way until the test lets it go on.
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
fn two_clients_share_a_claude_code_session_and_both_can_answer() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    fx.model.push(runs("toolu_1", "echo shared > shared.txt"));
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
    // The watcher answers; the one who asked sees it resolved.
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
    assert_eq!(
        std::fs::read_to_string(fx.work.path().join("shared.txt")).unwrap(),
        "shared\n"
    );
}

#[test]
fn allowed_always_becomes_a_claude_code_permission_rule() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    fx.model.push(runs("toolu_a", "echo one > one.txt"));
    fx.model.push(said("First."));
    let mut serve = fx.open();
    serve.until("status");
    serve.user("once");
    serve.until("approval_request");
    serve.send(json!({"op": "approve", "call_id": "toolu_a", "decision": "allow", "always": true}));
    assert_eq!(joined(&serve.until_ready(), "assistant_delta"), "First.");
    // Claude Code keeps the rule its prompt suggested where it suggested it: the
    // project's local settings.
    let settings = std::fs::read_to_string(fx.work.path().join(".claude/settings.local.json"))
        .expect("Claude Code wrote the rule");
    assert!(settings.contains("Bash(echo one"), "{settings}");
}

/// `@agentclientprotocol/claude-agent-acp` (an ACP agent on the Claude Agent SDK, which
/// nobody here wrote), installed by `.ci/run` or named by `JUCODE_CLAUDE_ACP`.
fn claude_acp() -> Result<PathBuf, String> {
    crate::common::daemon::npm_agent(
        "JUCODE_CLAUDE_ACP",
        "claude-agent-acp-npm",
        "claude-agent-acp",
        "claude-agent-acp",
    )
}

/// A daemon home whose `[engines.claude-acp]` runs claude-agent-acp as an ACP agent,
/// its model traffic sent to the mock through its own environment (ACP cannot carry a
/// provider), with a home of its own.
fn hosting_acp(program: &Path) -> Hosting {
    let model = MockModel::start();
    let claude_home = tempfile::tempdir().unwrap();
    let home = Home::new();
    let base = model.base_url();
    let base = base.trim_end_matches("/v1");
    home.write_config(&format!(
        "[engines.claude-acp]\nkind = \"acp\"\ncommand = \"{}\"\ndefault_mode = \"default\"\n\
         env = {{ HOME = \"{}\", ANTHROPIC_BASE_URL = \"{base}\", ANTHROPIC_API_KEY = \"sk-test\", \
         CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = \"1\", DISABLE_AUTOUPDATER = \"1\", \
         CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION = \"false\" }}\n",
        program.display(),
        claude_home.path().display()
    ));
    Hosting {
        model,
        home,
        work: tempfile::tempdir().unwrap(),
        _claude_home: claude_home,
    }
}

/// The SDK asks the model for a session title on the side, as often as it likes (a
/// title is made again as the conversation grows, even after the test's last turn).
fn answer_titles(model: &MockModel) {
    model.answer_every("Write the title", || said("A title"));
}

#[test]
fn claude_agent_acp_is_hosted_as_an_acp_agent() {
    let program = match claude_acp() {
        Ok(program) => program,
        Err(why) => {
            println!("SKIPPED: the hosted claude-agent-acp test: {why}");
            return;
        }
    };
    let fx = hosting_acp(&program);
    let _guard = DaemonGuard(&fx.home);
    answer_titles(&fx.model);
    fx.model.push(said("Hello over ACP"));
    fx.model.push(runs("toolu_no", "echo no > denied.txt"));
    fx.model.push(said("Not run."));
    fx.model.push(runs("toolu_yes", "echo yes > allowed.txt"));
    fx.model.push(said("Ran it."));

    let mut serve = Serve::shim(&fx.home)
        .arg("--engine")
        .arg("claude-acp")
        .cwd(fx.work.path())
        .start();
    let startup = serve.until("status");
    let mode = startup
        .iter()
        .find(|e| e["type"] == "approval_mode")
        .unwrap();
    assert_eq!(
        mode["mode"], "manual",
        "default_mode picked the agent's `default`"
    );
    let caps = startup.iter().find(|e| e["type"] == "engine_caps").unwrap();
    assert_eq!(caps["kind"], "acp");

    serve.user("say hello");
    let turn = serve.until_ready();
    // The Agent SDK may add notices of its own as further messages.
    assert!(
        joined(&turn, "assistant_delta").starts_with("Hello over ACP"),
        "{turn:?}"
    );

    serve.user("run the first");
    let asked = serve.until("approval_request");
    let request = asked.last().unwrap().clone();
    let call_id = request["call_id"].as_str().unwrap().to_owned();
    serve.send(json!({"op": "approve", "call_id": call_id, "decision": "deny"}));
    let turn = serve.until_ready();
    assert_eq!(joined(&turn, "assistant_delta"), "Not run.");
    assert!(!fx.work.path().join("denied.txt").exists());

    serve.user("run the second");
    let asked = serve.until("approval_request");
    let call_id = asked.last().unwrap()["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    serve.send(json!({"op": "approve", "call_id": call_id, "decision": "allow", "always": true}));
    let turn = serve.until_ready();
    assert!(
        joined(&turn, "assistant_delta").starts_with("Ran it."),
        "{turn:?}"
    );
    assert_eq!(
        std::fs::read_to_string(fx.work.path().join("allowed.txt")).unwrap(),
        "yes\n"
    );
}

#[test]
fn claude_agent_acp_resumes_its_conversation_after_the_daemon_restarts() {
    let program = match claude_acp() {
        Ok(program) => program,
        Err(why) => {
            println!("SKIPPED: the hosted claude-agent-acp test: {why}");
            return;
        }
    };
    let fx = hosting_acp(&program);
    let _guard = DaemonGuard(&fx.home);
    answer_titles(&fx.model);
    fx.model.push(said("Noted."));
    let mut serve = Serve::shim(&fx.home)
        .arg("--engine")
        .arg("claude-acp")
        .cwd(fx.work.path())
        .start();
    let id = startup_id(&serve.until("status"));
    serve.user("remember the word teapot");
    serve.until_ready();
    // A late joiner sees the conversation so far.
    let mut late = Serve::shim(&fx.home).arg("--session").arg(&id).start();
    let snapshot = late.until("status");
    assert!(
        snapshot
            .iter()
            .any(|e| e["type"] == "transcript" && e.to_string().contains("teapot"))
    );
    drop(late);
    serve.close_stdin();
    assert_eq!(serve.wait().code(), Some(0));
    assert_eq!(fx.home.jucode(&["daemon", "stop"]).status.code(), Some(0));

    fx.model.push(said("Teapot."));
    let mut serve = Serve::shim(&fx.home).arg("--session").arg(&id).start();
    let snapshot = serve.until("status");
    assert!(
        !snapshot.iter().any(|e| e["type"] == "info"
            && e["message"].as_str().unwrap_or("").contains("new one")),
        "{snapshot:?}"
    );
    serve.user("which word?");
    assert!(joined(&serve.until_ready(), "assistant_delta").starts_with("Teapot."));
    // The agent loaded its own conversation (`session/load`): the model saw it.
    let requests = fx.model.requests();
    let last = requests
        .iter()
        .rev()
        .map(|r| r.body.to_string())
        .find(|body| body.contains("which word?") && !body.contains("Write the title"))
        .expect("the question reached the model");
    assert!(last.contains("teapot"), "{last}");
}

#[test]
fn a_message_steered_into_a_claude_code_turn_is_folded_into_it() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    fx.model.push(runs("toolu_s", "echo ran > ran.txt"));
    fx.model.push(said("Both done."));
    let mut serve = fx.open();
    serve.until("status");
    serve.user("first");
    serve.until("approval_request");
    // Written while the turn waits on its tool: Claude Code reads it with the result.
    serve.user("and also this");
    serve.until("pending_messages");
    serve.send(json!({"op": "steer"}));
    serve.until_status("steering");
    serve.send(json!({"op": "approve", "call_id": "toolu_s", "decision": "allow"}));
    let turn = serve.until_ready();
    let taken = turn
        .iter()
        .find(|e| e["type"] == "user_message")
        .unwrap_or_else(|| panic!("{turn:?}"));
    assert_eq!(taken["content"], "and also this");
    assert_eq!(joined(&turn, "assistant_delta"), "Both done.", "{turn:?}");
    let readies = turn
        .iter()
        .filter(|e| e["type"] == "status" && e["message"] == "ready")
        .count();
    assert_eq!(readies, 1, "one turn: {turn:?}");
    let requests = fx.model.wait_requests(2);
    assert!(
        requests[1]
            .last_message()
            .to_string()
            .contains("and also this"),
        "{}",
        requests[1].last_message()
    );
}

#[test]
fn a_message_a_claude_code_turn_ends_without_reading_runs_next_once() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    let gate = Gate::new();
    fx.model.push(held("Working on it", &gate));
    fx.model.push(said("Second answer"));

    let mut serve = fx.open();
    serve.until("status");
    serve.user("first");
    serve.until("assistant_delta");
    serve.user("second plugh");
    serve.until("pending_messages");
    serve.send(json!({"op": "steer"}));
    serve.until_status("steering");
    gate.open();
    // The reply ends the turn without another request: Claude Code runs the message
    // as its own turn, which is the session's next.
    let first = serve.until_ready();
    assert!(
        first.iter().any(|e| e["type"] == "info"
            && e["message"]
                .as_str()
                .unwrap_or("")
                .contains("runs as the next turn")),
        "{first:?}"
    );
    let next = serve.until_ready();
    let shown = next
        .iter()
        .find(|e| e["type"] == "user_message")
        .unwrap_or_else(|| panic!("{next:?}"));
    assert_eq!(shown["content"], "second plugh");
    assert_eq!(
        joined(&next, "assistant_delta"),
        "Second answer",
        "{next:?}"
    );
    // Written once: the model saw it once.
    let requests = fx.model.wait_requests(2);
    let last = requests[1].body.to_string();
    assert_eq!(last.matches("second plugh").count(), 1, "{last}");
}

#[test]
fn claude_agent_acp_is_interrupted_and_the_queue_goes_next() {
    let program = match claude_acp() {
        Ok(program) => program,
        Err(why) => {
            println!("SKIPPED: the hosted claude-agent-acp test: {why}");
            return;
        }
    };
    let fx = hosting_acp(&program);
    let _guard = DaemonGuard(&fx.home);
    answer_titles(&fx.model);
    let gate = Gate::new();
    fx.model.push(held("Working on it", &gate));
    fx.model.push(said("Second answer"));

    let mut serve = Serve::shim(&fx.home)
        .arg("--engine")
        .arg("claude-acp")
        .cwd(fx.work.path())
        .start();
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
    assert!(
        joined(&next, "assistant_delta").starts_with("Second answer"),
        "{next:?}"
    );
}

#[test]
fn a_killed_daemon_leaves_no_claude_code_behind() {
    let program = claude_or_skip!();
    let fx = hosting(&program);
    let _guard = DaemonGuard(&fx.home);
    let mut serve = fx.open();
    serve.until("status");
    // Only this test's Claude Code has the mock's address in its environment.
    let marker = format!(
        "ANTHROPIC_BASE_URL={}",
        fx.model.base_url().trim_end_matches("/v1")
    );
    let running = || -> Vec<u32> {
        std::fs::read_dir("/proc")
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|entry| {
                        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                        let environ = std::fs::read(entry.path().join("environ")).ok()?;
                        environ
                            .split(|&byte| byte == 0)
                            .any(|pair| pair == marker.as_bytes())
                            .then_some(pid)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // Its stdin was the daemon's: it ends when the daemon does, however it died.
    crate::common::daemon::kill_daemon_and_wait_gone(&fx.home, "Claude Code", running);
}
