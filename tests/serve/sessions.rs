//! Sessions that last, in process: the file survives `kill -9`, resuming by id, branches,
//! checkpoints, compaction.

use serde_json::{Value, json};

use crate::common::mock::{
    Gate, MockModel, Reply, Step, finish, text, text_reply, tool_call, usage,
};
use crate::common::serve::{Home, Serve, session_file, types};

fn setup(extra: &str) -> (MockModel, Home) {
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config(&model.base_url(), extra);
    (model, home)
}

/// Starts `serve --in-process --session id`, checks its startup batch.
fn resume(home: &Home, id: &str) -> (Serve, Vec<Value>) {
    let mut serve = Serve::builder(home).arg("--session").arg(id).start();
    let batch = serve.skip_startup();
    assert_eq!(batch[0]["session_id"], id, "{batch:#?}");
    (serve, batch)
}

fn transcript(serve: &mut Serve) -> Vec<Value> {
    serve.send(json!({"op": "command", "input": "/transcript"}));
    let event = serve.expect_one("transcript");
    event["items"].as_array().unwrap().clone()
}

/// The text of the messages of a recorded model request, without the system prompt.
fn request_texts(request: &crate::common::mock::Recorded) -> Vec<String> {
    request.messages()[1..]
        .iter()
        .map(|m| {
            format!(
                "{}:{}",
                m["role"].as_str().unwrap_or("?"),
                m["content"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[test]
fn a_killed_session_keeps_every_completed_turn_and_resumes_by_id() {
    let (model, home) = setup("");
    model.push(text_reply(&["first answer"]));
    let never = Gate::new();
    model.push(Reply::Sse(vec![text("partial"), Step::Wait(never.clone())]));
    let mut serve = Serve::ready(&home);
    let id = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user("one");
    serve.until_ready();
    serve.user("two");
    serve.until("assistant_delta");
    // kill -9 in the middle of a streaming reply.
    serve.child.kill().unwrap();
    serve.wait();
    drop(serve);

    let path = session_file(home.path(), &id);
    let (mut serve, batch) = resume(&home, &id);
    assert!(!batch.iter().any(|e| e["type"] == "error"), "{batch:#?}");
    let items = transcript(&mut serve);
    assert_eq!(
        items,
        [
            json!({"role": "user", "content": "one"}),
            json!({"role": "assistant", "content": "first answer"}),
            json!({"role": "user", "content": "two"}),
        ],
        "the reply still streaming is the only thing lost"
    );
    // The conversation goes on from there, in the same file.
    model.push(text_reply(&["third answer"]));
    serve.user("three");
    serve.until_ready();
    let requests = model.wait_requests(3);
    assert_eq!(
        request_texts(&requests[2]),
        [
            "user:one",
            "assistant:first answer",
            "user:two",
            "user:three"
        ]
    );
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    never.open();

    // A torn last line (a process killed while writing it) is ignored, with a notice.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"id\":\"e99\",\"parent\":\"e5\",\"kind\":\"user\",\"cont");
    std::fs::write(&path, &bytes).unwrap();
    let (mut serve, batch) = resume(&home, &id);
    let notice = serve.next();
    assert_eq!(notice["type"], "info", "{batch:#?}");
    assert!(
        notice["message"].as_str().unwrap().contains("cut short"),
        "{notice}"
    );
    assert_eq!(transcript(&mut serve).len(), 5);
    model.push(text_reply(&["fourth"]));
    serve.user("four");
    serve.until_ready();
    serve.send(json!({"op": "shutdown"}));
    serve.rest();
    // Appending after a torn line cut it off first: every line of the file parses.
    let text = std::fs::read_to_string(&path).unwrap();
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|err| panic!("{err}: {line}"));
    }
    assert!(text.ends_with('\n'));
}

#[test]
fn an_unknown_session_is_an_error_and_exit_2() {
    let home = Home::new();
    let mut serve = Serve::builder(&home).arg("--session").arg("nope").start();
    assert_eq!(serve.next()["type"], "hello");
    let error = serve.next();
    assert_eq!(error["type"], "error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("unknown session: nope"),
        "{error}"
    );
    assert_eq!(serve.wait().code(), Some(2));
}

#[test]
fn resume_lists_saved_sessions_and_switches_to_one() {
    let (model, home) = setup("");
    model.push(text_reply(&["about cats"]));
    let mut first = Serve::ready(&home);
    let cats = first.seen[1]["session_id"].as_str().unwrap().to_owned();
    first.user("tell me about cats");
    first.until_ready();
    first.send(json!({"op": "shutdown"}));
    first.rest();

    model.push(text_reply(&["about dogs"]));
    let mut serve = Serve::ready(&home);
    let dogs = serve.seen[1]["session_id"].as_str().unwrap().to_owned();
    serve.user("and dogs?");
    serve.until_ready();
    serve.send(json!({"op": "command", "input": "/resume"}));
    let view = serve.expect_one("resume_view");
    let items = view["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{view}");
    assert_eq!(items[0]["id"], dogs.as_str(), "newest first");
    assert_eq!(items[0]["active"], true);
    assert!(items[0]["label"].as_str().unwrap().starts_with("and dogs?"));
    assert_eq!(items[1]["id"], cats.as_str());
    assert_eq!(items[1]["active"], false);

    serve.send(json!({"op": "command", "input": format!("/resume {cats}")}));
    let batch = serve.until("mcp_servers");
    assert_eq!(batch[0]["type"], "startup");
    assert_eq!(batch[0]["session_id"], cats.as_str());
    let shown = serve.expect_one("transcript");
    assert_eq!(shown["session"], cats.as_str());
    assert_eq!(shown["items"][1]["content"], "about cats");
    model.push(text_reply(&["more cats"]));
    serve.user("more");
    serve.until_ready();
    let request = &model.wait_requests(3)[2];
    assert_eq!(
        request_texts(request),
        [
            "user:tell me about cats",
            "assistant:about cats",
            "user:more"
        ]
    );
    serve.send(json!({"op": "command", "input": "/resume no-such-session"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("unknown session")
    );
}

#[test]
fn a_branch_from_an_earlier_turn_is_all_the_model_reads() {
    let (model, home) = setup("");
    for answer in ["A1", "A2", "A3"] {
        model.push(text_reply(&[answer]));
    }
    let mut serve = Serve::ready(&home);
    for message in ["Q1", "Q2", "Q3"] {
        serve.user(message);
        serve.until_ready();
    }
    serve.send(json!({"op": "command", "input": "/tree"}));
    let tree = serve.expect_one("tree_view");
    let nodes = tree["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 4, "{tree:#}");
    let q1 = nodes
        .iter()
        .find(|n| n["label"].as_str().unwrap().starts_with("Q1"))
        .unwrap();
    let q2 = nodes
        .iter()
        .find(|n| n["label"].as_str().unwrap().starts_with("Q2"))
        .unwrap();
    assert_eq!(q2["parent_id"], q1["id"]);
    assert!(nodes.iter().all(|n| n["active"] == true));

    serve.send(json!({"op": "command", "input": format!("/tree {}", q1["id"].as_str().unwrap())}));
    let shown = serve.expect_one("transcript");
    let items = shown["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{shown:#}");
    assert_eq!(items[2]["role"], "branch");
    model.push(text_reply(&["B2"]));
    serve.user("Q2 again");
    serve.until_ready();
    let request = &model.wait_requests(4)[3];
    assert_eq!(
        request_texts(request),
        ["user:Q1", "assistant:A1", "user:Q2 again"],
        "only the branch"
    );
    serve.send(json!({"op": "command", "input": "/tree"}));
    let tree = serve.expect_one("tree_view");
    let nodes = tree["nodes"].as_array().unwrap();
    let old = nodes
        .iter()
        .find(|n| n["label"].as_str().unwrap().starts_with("Q3"))
        .unwrap();
    assert_eq!(old["active"], false, "the old path is kept, off the branch");
    serve.send(json!({"op": "command", "input": "/tree e404"}));
    assert_eq!(serve.expect_one("error")["type"], "error");
}

#[test]
fn checkout_puts_files_back_byte_for_byte_and_continues_before_the_turn() {
    let (model, home) = setup("");
    home.prepend_config("approval_mode = \"full-access\"\n");
    let project = home.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let kept = b"line one\r\nline two, no newline at the end";
    std::fs::write(project.join("kept.txt"), kept).unwrap();
    let write = |id: &str, path: &str, content: &str| {
        Reply::Sse(vec![
            tool_call(
                0,
                id,
                "write_file",
                &json!({"path": path, "content": content}).to_string(),
            ),
            finish("tool_calls"),
            usage(10, 2),
            Step::Done,
        ])
    };
    model.push(write("c1", "kept.txt", "changed by turn one\n"));
    model.push(write("c2", "new.txt", "created by turn one\n"));
    model.push(text_reply(&["turn one done"]));
    model.push(write("c3", "kept.txt", "changed again by turn two\n"));
    model.push(text_reply(&["turn two done"]));
    let mut serve = Serve::builder(&home).cwd(&project).start();
    serve.skip_startup();
    serve.user("first change");
    serve.until_ready();
    serve.user("second change");
    serve.until_ready();
    assert!(project.join("new.txt").exists());

    serve.send(json!({"op": "command", "input": "/checkout"}));
    let view = serve.expect_one("checkpoint_view");
    let items = view["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{view:#}");
    assert_eq!(items[0]["label"], "first change");
    let detail = items[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("kept.txt") && detail.contains("new.txt"),
        "{detail}"
    );
    let first = items[0]["id"].as_str().unwrap().to_owned();

    serve.send(json!({"op": "command", "input": format!("/checkout {first}")}));
    let events = serve.expect(&["info", "transcript", "fill_input"]);
    assert!(
        events[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("restored 2 files")
    );
    assert_eq!(events[2]["content"], "first change");
    assert_eq!(std::fs::read(project.join("kept.txt")).unwrap(), kept);
    assert!(
        !project.join("new.txt").exists(),
        "a file the turn created is removed"
    );
    let items = events[1]["items"].as_array().unwrap();
    assert_eq!(types_of(items), ["branch"], "{items:#?}");

    model.push(text_reply(&["fresh start"]));
    serve.user("first change, differently");
    serve.until_ready();
    let request = &model.wait_requests(6)[5];
    assert_eq!(request_texts(request), ["user:first change, differently"]);
}

fn types_of(items: &[Value]) -> Vec<&str> {
    items.iter().map(|i| i["role"].as_str().unwrap()).collect()
}

/// A message of about `tokens` o200k tokens.
fn big(word: &str, tokens: usize) -> String {
    format!("{word}{}", format!(" {word}").repeat(tokens - 1))
}

#[test]
fn a_long_conversation_is_compacted_before_it_overflows() {
    // A 16000-token window: the limit is 12800, each message about 3000 tokens beside
    // the system prompt and tool schemas (some 2000), so the fourth request would pass it.
    let (model, home) = setup("context_window = 16000");
    for answer in ["A1", "A2", "A3"] {
        model.push(text_reply(&[answer]));
    }
    model.push(text_reply(&[
        "SUMMARY: talked about apples, pears and plums.",
    ]));
    model.push(text_reply(&["A4"]));
    let mut serve = Serve::ready(&home);
    for word in ["apple", "pear", "plum"] {
        serve.user(&big(word, 3000));
        let events = serve.until_ready();
        assert!(!types(&events).contains(&"compaction_start"), "{word}");
    }
    serve.user(&big("cherry", 3000));
    let events = serve.until_ready();
    let kinds = types(&events);
    let start = kinds
        .iter()
        .position(|k| *k == "compaction_start")
        .expect("compacted");
    let end = kinds
        .iter()
        .position(|k| *k == "compaction_end")
        .expect("compaction_end");
    assert!(start < end && end < kinds.iter().rposition(|k| *k == "connecting").unwrap());
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "status" && e["message"] == "compacting")
    );
    let requests = model.wait_requests(5);
    let summary_request = &requests[3];
    assert!(summary_request.tool_names().is_empty());
    let after = &requests[4];
    let first = after.messages()[1]["content"].as_str().unwrap();
    assert!(first.contains("SUMMARY: talked about apples"), "{first}");
    let all = after.body["messages"].to_string();
    assert!(
        !all.contains("apple apple"),
        "the old turns are not sent again"
    );
    assert!(
        all.contains("cherry cherry"),
        "the turn running is kept verbatim"
    );
    let context = events
        .iter()
        .rev()
        .find(|e| e["type"] == "context_usage")
        .unwrap();
    assert!(context["tokens"].as_u64().unwrap() < 8000, "{context}");
    // The history stays: the transcript still has the first turn.
    let items = transcript(&mut serve);
    assert!(items[0]["content"].as_str().unwrap().starts_with("apple"));
    assert!(items.iter().any(|i| i["role"] == "compaction"));
}

#[test]
fn compact_on_request_and_when_it_fails() {
    let (model, home) = setup("");
    model.push(text_reply(&["A1"]));
    model.push(text_reply(&["A2"]));
    let mut serve = Serve::ready(&home);
    serve.send(json!({"op": "command", "input": "/compact"}));
    let events = serve.until_ready();
    assert_eq!(
        types(&events),
        ["status", "compaction_start", "compaction_failed", "status"],
        "nothing to compact yet"
    );
    serve.user("Q1");
    serve.until_ready();
    serve.user("Q2");
    serve.until_ready();

    model.push(Reply::Status {
        code: 400,
        body: r#"{"error":{"message":"no summaries today"}}"#.into(),
        headers: vec![],
    });
    serve.send(json!({"op": "command", "input": "/compact"}));
    let events = serve.until_ready();
    let failed = events
        .iter()
        .find(|e| e["type"] == "compaction_failed")
        .unwrap();
    assert!(
        failed["error"]
            .as_str()
            .unwrap()
            .contains("no summaries today")
    );

    model.push(text_reply(&["SUMMARY: two questions"]));
    serve.send(json!({"op": "command", "input": "/compact"}));
    let events = serve.until_ready();
    assert!(types(&events).contains(&"compaction_end"), "{events:#?}");
    model.push(text_reply(&["A3"]));
    serve.user("Q3");
    serve.until_ready();
    let last = model.requests().pop().unwrap();
    let texts = request_texts(&last);
    assert!(texts[0].contains("SUMMARY: two questions"), "{texts:?}");
    assert_eq!(texts.last().unwrap(), "user:Q3");
    assert!(!texts.iter().any(|t| t == "user:Q1"), "{texts:?}");
}

#[test]
fn a_turn_too_large_for_the_window_is_refused_once_and_set_aside() {
    let (model, home) = setup("context_window = 4000");
    model.push(text_reply(&["fine"]));
    let mut serve = Serve::ready(&home);
    serve.user(&big("huge", 6000));
    let events = serve.until_ready();
    let error = events
        .iter()
        .find(|e| e["type"] == "error")
        .expect("an error");
    assert!(
        error["message"].as_str().unwrap().contains("does not fit"),
        "{error}"
    );
    assert!(!types(&events).contains(&"connecting"), "nothing was sent");
    // The next turn is not refused too.
    serve.user("small");
    let events = serve.until_ready();
    assert!(!types(&events).contains(&"error"), "{events:#?}");
    let request = &model.wait_requests(1)[0];
    assert_eq!(request_texts(request), ["user:small"]);
}

#[test]
fn a_turn_that_cannot_be_saved_says_so_before_its_closing_status() {
    let (model, home) = setup("");
    // The sessions path is a file: no session file can be created under it.
    std::fs::write(home.path().join("sessions"), "not a directory").expect("write");
    model.push(text_reply(&["fine"]));
    let mut serve = Serve::ready(&home);
    // Known from the start: the startup batch says it, before any turn.
    let startup = serve.next();
    assert_eq!(startup["type"], "error", "{startup}");
    let message = startup["message"].as_str().unwrap();
    assert!(
        message.contains("this session cannot be saved") && message.contains("not a directory"),
        "{message}"
    );
    serve.user("hello");
    let turn = serve.until_ready();
    let error = turn
        .iter()
        .position(|event| {
            event["type"] == "error"
                && event["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("jucode keeps trying to save it"))
        })
        .unwrap_or_else(|| panic!("no save error in the turn: {turn:?}"));
    let ready = turn.len() - 1;
    assert!(error < ready, "{:?}", types(&turn));
    // The session goes on in memory.
    model.push(text_reply(&["still here"]));
    serve.user("again");
    let next = serve.until_ready();
    assert!(
        next.iter().any(|event| event["delta"] == "still here"),
        "{:?}",
        types(&next)
    );
}

#[test]
fn the_profile_is_private_whatever_the_umask() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    for umask in ["000", "022"] {
        let model = MockModel::start();
        let root = Home::new();
        // A profile that does not exist yet: jucode makes it.
        let profile = root.path().join("profile");
        std::fs::create_dir_all(&profile).expect("profile");
        std::fs::write(
            profile.join("config.toml"),
            format!(
                "model = \"mock/mock-1\"\n[providers.mock]\nkind = \"openai\"\n\
                 base_url = \"{}\"\napi_key = \"k\"\n",
                model.base_url()
            ),
        )
        .expect("config");
        std::fs::set_permissions(&profile, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        model.push(text_reply(&["ok"]));
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("umask {umask} && exec \"$0\" serve --in-process"))
            .arg(env!("CARGO_BIN_EXE_jucode"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", root.path())
            .env("JUCODE_HOME", &profile)
            .current_dir(root.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(b"{\"op\":\"user_message\",\"content\":\"hi\"}\n")
            .expect("send");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        loop {
            let line = lines.next().expect("a line before ready").expect("read");
            if line.contains("\"type\":\"status\"") && line.contains("\"ready\"") {
                break;
            }
        }
        stdin
            .write_all(b"{\"op\":\"shutdown\"}\n")
            .expect("shutdown");
        drop(stdin);
        lines.for_each(drop);
        assert!(child.wait().expect("wait").success());

        let mode = |path: &std::path::Path| {
            std::fs::metadata(path).expect("meta").permissions().mode() & 0o777
        };
        let sessions = profile.join("sessions");
        assert_eq!(mode(&sessions), 0o700, "umask {umask}: sessions/");
        let mut files = 0;
        for project in std::fs::read_dir(&sessions).expect("sessions") {
            let project = project.expect("entry").path();
            assert_eq!(
                mode(&project),
                0o700,
                "umask {umask}: {}",
                project.display()
            );
            for file in std::fs::read_dir(&project).expect("project") {
                let file = file.expect("entry").path();
                assert_eq!(mode(&file), 0o600, "umask {umask}: {}", file.display());
                files += 1;
            }
        }
        assert!(files >= 2, "a session file and its lock");
    }
}

#[test]
fn a_profile_someone_else_could_write_is_refused_and_runs_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let root = Home::new();
    let marker = root.path().join("hook-ran");
    let profile = root.path().join("profile");
    std::fs::create_dir_all(&profile).expect("profile");
    std::fs::write(
        profile.join("config.toml"),
        format!(
            "[hooks]\nsession_start = [\"touch {}\"]\n",
            marker.display()
        ),
    )
    .expect("config");
    let run = |profile: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_jucode"))
            .args(["serve", "--in-process"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", root.path())
            .env("JUCODE_HOME", profile)
            .current_dir(root.path())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run")
    };
    let set_mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod")
    };

    // Owned by another user (the tests run as root, which may chown).
    std::os::unix::fs::chown(&profile, Some(4242), Some(4242)).expect("chown");
    let foreign = run(&profile);
    assert_eq!(foreign.status.code(), Some(2), "{foreign:?}");
    let said = String::from_utf8_lossy(&foreign.stderr);
    assert!(said.contains("owned by uid 4242"), "{said}");
    assert!(foreign.stdout.is_empty());
    std::os::unix::fs::chown(&profile, Some(0), Some(0)).expect("chown back");

    // Writable by its group, then a config writable by everyone.
    set_mode(&profile, 0o770);
    let group = run(&profile);
    assert_eq!(group.status.code(), Some(2), "{group:?}");
    assert!(String::from_utf8_lossy(&group.stderr).contains("writable by its group"));
    set_mode(&profile, 0o700);
    set_mode(&profile.join("config.toml"), 0o666);
    let config = run(&profile);
    assert_eq!(config.status.code(), Some(2), "{config:?}");
    assert!(String::from_utf8_lossy(&config.stderr).contains("writable by everyone"));
    assert!(!marker.exists(), "no hook ran from a refused profile");

    // Made private, the same profile is used, hook and all.
    set_mode(&profile.join("config.toml"), 0o600);
    let fine = run(&profile);
    assert_eq!(fine.status.code(), Some(0), "{fine:?}");
    assert!(marker.exists(), "the hook of a private profile runs");
}
