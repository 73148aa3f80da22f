//! A session and its project: instructions, skills and custom commands after trust,
//! hooks, chat sessions, and what each mode's prompt says about its tools.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::mock::{MockModel, Recorded, text_reply};
use crate::common::serve::{Home, Serve, types};

/// Every tool name a prompt could mention.
const KNOWN_TOOLS: [&str; 15] = [
    "bash",
    "edit_file",
    "grep",
    "list_dir",
    "read_file",
    "write_file",
    "web_fetch",
    "web_search",
    "propose_plan",
    "spawn_agent",
    "message_agent",
    "wait_agents",
    "close_agent",
    "update_plan",
    "update_goal",
];

/// A repository with instructions at its root and in `app/`, a project skill, a project
/// command; the session runs in `app/`.
struct Repo {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cwd: PathBuf,
}

fn repo() -> Repo {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap().join("repo");
    let cwd = root.join("app");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join("AGENTS.md"), "ROOT RULES").unwrap();
    std::fs::write(cwd.join("JUCODE.md"), "APP RULES").unwrap();
    write(
        &root.join(".jucode/skills/release/SKILL.md"),
        "---\nname: release\ndescription: Cut a release of the app\n---\nSteps.",
    );
    write(
        &cwd.join(".jucode/commands/review.md"),
        "---\ndescription: Review a file\nargs: <file> [focus]\n---\nReview $1, looking at $2. ($ARGUMENTS)",
    );
    Repo {
        _dir: dir,
        root,
        cwd,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn setup() -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    (model, home)
}

fn system_prompt(request: &Recorded) -> String {
    let first = &request.messages()[0];
    assert_eq!(first["role"], "system");
    first["content"].as_str().unwrap().to_owned()
}

fn commands(event: &Value) -> Vec<(String, Value)> {
    assert_eq!(event["type"], "command_list", "{event}");
    event["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["command"].as_str().unwrap().to_owned(),
                c["marker"].clone(),
            )
        })
        .collect()
}

/// One turn with a text reply; returns the request the model got.
fn turn(serve: &mut Serve, model: &MockModel, content: &str) -> Recorded {
    let before = model.request_count();
    model.push(text_reply(&["ok"]));
    serve.user(content);
    serve.until_ready();
    model.wait_requests(before + 1).pop().unwrap()
}

#[test]
fn project_instructions_skills_and_commands_wait_for_trust() {
    let (model, home) = setup();
    std::fs::write(home.path().join("AGENTS.md"), "USER RULES").unwrap();
    write(&home.path().join("commands/hi.md"), "Say hi to $1.");
    let repo = repo();
    let mut serve = Serve::builder(&home).cwd(&repo.cwd).start();
    let batch = serve.skip_startup();
    let listed = commands(&batch[2]);
    assert!(
        listed.contains(&("/hi".to_owned(), json!("user"))),
        "{listed:?}"
    );
    assert!(!listed.iter().any(|(name, _)| name == "/review"));
    let prompt = serve.next();
    assert_eq!(
        prompt,
        json!({"type": "trust_prompt", "cwd": repo.cwd.display().to_string(),
               "repo_root": repo.root.display().to_string(), "session": batch[0]["session_id"]})
    );

    // Untrusted: only the user's own instructions; the project's command is unknown.
    let request = turn(&mut serve, &model, "first");
    let system = system_prompt(&request);
    assert!(system.contains("USER RULES"), "{system}");
    for hidden in ["ROOT RULES", "APP RULES", "release"] {
        assert!(!system.contains(hidden), "{hidden} in {system}");
    }
    serve.send(json!({"op": "command", "input": "/review a.rs"}));
    let error = serve.next();
    assert_eq!(error["message"], "unknown command: /review (try /help)");

    serve.send(json!({"op": "command", "input": "/trust repo"}));
    let events = serve.expect(&["command_list", "status"]);
    let listed = commands(&events[0]);
    assert!(
        listed.contains(&("/review".to_owned(), json!("project"))),
        "{listed:?}"
    );
    assert_eq!(
        events[1]["message"],
        format!("trusted {} (repository)", repo.root.display())
    );

    let request = turn(&mut serve, &model, "second");
    let system = system_prompt(&request);
    let at = |text: &str| {
        system
            .find(text)
            .unwrap_or_else(|| panic!("{text} not in {system}"))
    };
    assert!(at("USER RULES") < at("ROOT RULES") && at("ROOT RULES") < at("APP RULES"));
    assert!(system.contains(&format!("## {}", repo.root.join("AGENTS.md").display())));
    assert!(system.contains(&format!(
        "- release: Cut a release of the app ({})",
        repo.root.join(".jucode/skills/release/SKILL.md").display()
    )));

    // The custom command runs as a user turn, its arguments substituted.
    model.push(text_reply(&["reviewed"]));
    serve.send(json!({"op": "command", "input": "/review src/a.rs \"error handling\""}));
    let events = serve.until_ready();
    let expanded = "Review src/a.rs, looking at error handling. (src/a.rs \"error handling\")";
    assert_eq!(events[0]["type"], "user_message");
    assert_eq!(events[0]["content"], expanded);
    let request = model.wait_requests(3).pop().unwrap();
    assert_eq!(request.last_message()["content"], expanded);

    // The decision lasts: a new session there asks nothing and uses the project.
    serve.send(json!({"op": "shutdown"}));
    assert!(serve.wait().success());
    let mut serve = Serve::builder(&home).cwd(&repo.cwd).start();
    serve.skip_startup();
    let request = turn(&mut serve, &model, "third");
    assert!(system_prompt(&request).contains("APP RULES"));
    assert!(!serve.seen.iter().any(|e| e["type"] == "trust_prompt"));
}

#[test]
fn trust_no_keeps_the_project_out_and_stops_asking() {
    let (model, home) = setup();
    let repo = repo();
    let mut serve = Serve::builder(&home).cwd(&repo.cwd).start();
    serve.skip_startup();
    assert_eq!(serve.next()["type"], "trust_prompt");
    serve.send(json!({"op": "command", "input": "/trust no"}));
    let events = serve.expect(&["command_list", "status"]);
    assert_eq!(
        events[1]["message"],
        format!("untrusted {}", repo.cwd.display())
    );
    serve.send(json!({"op": "command", "input": "/trust maybe"}));
    assert_eq!(serve.next()["message"], "usage: /trust yes|repo|no");
    serve.send(json!({"op": "shutdown"}));
    assert!(serve.wait().success());

    let mut serve = Serve::builder(&home).cwd(&repo.cwd).start();
    serve.skip_startup();
    let request = turn(&mut serve, &model, "hello");
    assert!(!system_prompt(&request).contains("ROOT RULES"));
    assert!(!serve.seen.iter().any(|e| e["type"] == "trust_prompt"));
}

#[test]
fn no_trust_prompt_without_local_resources() {
    let (model, home) = setup();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".git")).unwrap();
    // Resources of the user alone never ask.
    std::fs::write(home.path().join("AGENTS.md"), "USER RULES").unwrap();
    let mut serve = Serve::builder(&home).cwd(dir.path()).start();
    serve.skip_startup();
    let request = turn(&mut serve, &model, "hello");
    assert!(system_prompt(&request).contains("USER RULES"));
    assert!(!serve.seen.iter().any(|e| e["type"] == "trust_prompt"));
    serve.send(json!({"op": "command", "input": "/trust yes"}));
    let events = serve.expect(&["command_list", "status"]);
    assert!(
        events[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("trusted ")
    );
}

#[test]
fn hooks_report_their_output_and_their_failures() {
    let (model, home) = setup();
    let dir = tempfile::tempdir().unwrap();
    home.append_config(
        "[hooks]\n\
         session_start = [\"echo hello from a hook; cat > start.json\", \"echo oops >&2; exit 3\", \
                          { command = \"sleep 30\", timeout_ms = 200 }]\n\
         user_prompt_submit = [\"cat > prompt.json; echo prompt seen\"]\n",
    );
    let mut serve = Serve::builder(&home).cwd(dir.path()).start();
    let batch = serve.skip_startup();
    let session = batch[0]["session_id"].as_str().unwrap().to_owned();
    let events = serve.expect(&["info", "error", "error"]);
    assert_eq!(events[0]["message"], "hello from a hook");
    assert_eq!(
        events[1]["message"],
        "hook `echo oops >&2; exit 3` failed: exited with status 3: oops"
    );
    assert_eq!(
        events[2]["message"],
        "hook `sleep 30` failed: timed out after 200 ms"
    );
    let start: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("start.json")).unwrap()).unwrap();
    assert_eq!(start["event"], "session_start");
    assert_eq!(start["session_id"], session.as_str());
    assert_eq!(start["resumed"], false);

    // The session works on, and the prompt hook sees each turn's prompt.
    model.push(text_reply(&["ok"]));
    serve.user("fix the bug");
    let events = serve.until_ready();
    assert_eq!(
        types(&events[..3]),
        ["user_message", "status", "info"],
        "{events:#?}"
    );
    assert_eq!(events[2]["message"], "prompt seen");
    let prompt: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("prompt.json")).unwrap()).unwrap();
    assert_eq!(prompt["event"], "user_prompt_submit");
    assert_eq!(prompt["prompt"], "fix the bug");
    model.wait_requests(1);
}

#[test]
fn project_hooks_run_only_once_trusted() {
    let (model, home) = setup();
    let repo = repo();
    write(
        &repo.root.join(".jucode/config.toml"),
        "[hooks]\nuser_prompt_submit = [\"echo project hook\"]\n",
    );
    let mut serve = Serve::builder(&home).cwd(&repo.cwd).start();
    serve.skip_startup();
    assert_eq!(serve.next()["type"], "trust_prompt");
    model.push(text_reply(&["ok"]));
    serve.user("one");
    let events = serve.until_ready();
    assert!(!events.iter().any(|e| e["type"] == "info"), "{events:#?}");
    serve.send(json!({"op": "command", "input": "/trust yes"}));
    serve.until("status");
    model.push(text_reply(&["ok"]));
    serve.user("two");
    let events = serve.until_ready();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "info" && e["message"] == "project hook"),
        "{events:#?}"
    );
    model.wait_requests(2);
}

#[test]
fn chat_sessions_run_in_the_chats_directory_without_the_project() {
    let (model, home) = setup();
    let repo = repo();
    let mut serve = Serve::builder(&home).arg("--chat").cwd(&repo.cwd).start();
    let batch = serve.skip_startup();
    let chats = home.path().join("chats");
    assert_eq!(batch[0]["cwd"], chats.display().to_string());
    let request = turn(&mut serve, &model, "what is a monad?");
    let system = system_prompt(&request);
    assert!(system.contains("chat mode"), "{system}");
    assert!(!system.contains("ROOT RULES") && !system.contains("APP RULES"));
    let mut tools = request.tool_names();
    tools.sort();
    assert_eq!(
        tools,
        [
            "close_agent",
            "grep",
            "list_dir",
            "message_agent",
            "read_file",
            "spawn_agent",
            "update_plan",
            "wait_agents",
            "web_fetch"
        ]
    );
    assert!(!serve.seen.iter().any(|e| e["type"] == "trust_prompt"));

    // Started inside the chats directory, a plain `serve` is a chat session too.
    let inside = chats.join("topic");
    std::fs::create_dir_all(&inside).unwrap();
    let mut serve = Serve::builder(&home).cwd(&inside).start();
    serve.skip_startup();
    let request = turn(&mut serve, &model, "hi");
    assert!(system_prompt(&request).contains("chat mode"));
    assert!(!request.tool_names().contains(&"bash"));
}

/// The tools a prompt names, and the tools the request offers, are the same set.
fn assert_prompt_names_offered_tools(request: &Recorded) {
    let system = system_prompt(request);
    let mut named: Vec<&str> = KNOWN_TOOLS
        .iter()
        .copied()
        .filter(|name| system.contains(&format!("`{name}`")))
        .collect();
    let mut offered: Vec<&str> = request.tool_names();
    named.sort();
    offered.sort();
    assert_eq!(named, offered, "{system}");
}

#[test]
fn each_mode_s_prompt_names_exactly_its_tools() {
    let (model, home) = setup();
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::builder(&home).cwd(dir.path()).start();
    serve.skip_startup();
    let request = turn(&mut serve, &model, "coding");
    assert_prompt_names_offered_tools(&request);
    assert!(request.tool_names().contains(&"bash"));

    serve.send(json!({"op": "set_approval_mode", "mode": "plan"}));
    serve.until("status");
    let request = turn(&mut serve, &model, "planning");
    assert_prompt_names_offered_tools(&request);
    assert!(system_prompt(&request).contains("# Plan mode"));

    let mut chat = Serve::builder(&home).arg("--chat").start();
    chat.skip_startup();
    let request = turn(&mut chat, &model, "chatting");
    assert_prompt_names_offered_tools(&request);
}

#[test]
fn a_trusted_project_s_mcp_servers_start_and_stay_the_project_s() {
    let (_model, home) = setup();
    let repo = repo();
    write(
        &repo.root.join(".jucode/config.toml"),
        &crate::common::mcp::server_toml("proj", &[], ""),
    );
    let mut serve = Serve::builder(&home).cwd(&repo.cwd).start();
    let batch = serve.skip_startup();
    assert_eq!(
        batch[4]["servers"],
        json!([]),
        "nothing of the project before trust"
    );
    assert_eq!(serve.next()["type"], "trust_prompt");
    serve.send(json!({"op": "command", "input": "/trust yes"}));
    let entry = serve.until_server("proj", "connected");
    assert_eq!(entry["transport"], "stdio");
    // The protocol's ops edit the user's config: they leave the project's servers alone.
    serve.send(json!({"op": "mcp_toggle", "name": "proj", "enabled": false}));
    let error = serve.until("error").pop().unwrap();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("defined by the project"),
        "{error}"
    );
    assert!(
        !std::fs::read_to_string(home.path().join("config.toml"))
            .unwrap()
            .contains("proj")
    );
}
