//! Startup, input handling, commands and exit codes.

use serde_json::{Value, json};

use crate::common::serve::{Home, Serve, types};

#[test]
fn hello_then_startup_batch_on_the_offline_default() {
    let home = Home::new();
    let mut serve = Serve::start(&home);
    let hello = serve.next_line().expect("hello line");
    assert_eq!(
        hello,
        format!(
            r#"{{"type":"hello","protocol":2,"version":"{}"}}"#,
            env!("CARGO_PKG_VERSION")
        )
    );
    let batch = serve.until("mcp_servers");
    assert_eq!(
        types(&batch),
        [
            "startup",
            "model_status",
            "command_list",
            "approval_mode",
            "mcp_servers"
        ]
    );
    let startup = &batch[0];
    let session = startup["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    assert!(!session.is_empty());
    assert_eq!(startup["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(startup["profile_dir"], home.path().display().to_string());
    assert_eq!(
        startup["config_path"],
        home.path().join("config.toml").display().to_string()
    );
    assert_eq!(startup["cwd"], home.path().display().to_string());
    assert_eq!(startup["model"], "replay/demo");
    assert_eq!(startup["context_window"], 200000);

    let status = &batch[1];
    assert_eq!(status["provider"], "replay");
    assert_eq!(status["model"], "demo");
    assert_eq!(status["state"], "ready");
    assert_eq!(status["context_window"], 200000);
    assert_eq!(status["context_limit"], 160000);
    assert_eq!(status["max_output_tokens"], 32000);
    assert_eq!(status["reasoning_effort"], "medium");
    assert_eq!(
        status["reasoning_efforts"],
        json!(["low", "medium", "high"])
    );

    let commands: Vec<&str> = batch[2]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["command"].as_str().unwrap())
        .collect();
    for expected in ["/help", "/model", "/quit", "/exit"] {
        assert!(commands.contains(&expected), "{commands:?}");
    }
    for command in batch[2]["commands"].as_array().unwrap() {
        assert!(command["marker"].is_null());
        assert!(command["args"].is_string() && command["description"].is_string());
    }
    assert_eq!(batch[3]["mode"], "manual");
    assert_eq!(batch[4]["servers"], json!([]));
    assert_eq!(batch[0]["sandbox"]["mode"], "workspace-write");
    assert_eq!(batch[0]["sandbox"]["network"], false);

    let notice = serve.next();
    assert_eq!(notice["type"], "info");
    let message = notice["message"].as_str().unwrap();
    assert!(message.contains("replay"), "{message}");
    assert!(message.contains("OPENAI_API_KEY"), "{message}");

    for event in batch.iter().chain([&notice]) {
        assert_eq!(event["session"], session.as_str(), "{event}");
    }
}

#[test]
fn broken_config_reports_every_problem_and_keeps_what_it_can() {
    let home = Home::new();
    home.write_config(
        "model = \"local/x\"\n\napproval_mode = \"sometimes\"\ncolour = \"blue\"\n\n\
         [providers.local]\nkind = \"openai\"\nbase_url = \"localhost:8000/v1\"\n",
    );
    let mut serve = Serve::start(&home);
    let batch = serve.skip_startup();
    assert_eq!(batch[0]["model"], "local/x", "the good keys are kept");
    assert_eq!(batch[1]["state"], "invalid_config", "{:?}", batch[1]);
    let path = home.path().join("config.toml").display().to_string();
    let mut errors = Vec::new();
    serve.send(json!({"op": "agent_runs"}));
    loop {
        let event = serve.next();
        match event["type"].as_str() {
            Some("error") => errors.push(event["message"].as_str().unwrap().to_owned()),
            Some("info") => panic!("no notice about a missing model after a broken file: {event}"),
            Some("agent_runs") => break,
            _ => panic!("unexpected {event}"),
        }
    }
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors[0].starts_with(&format!("config error in {path} line 3")),
        "{errors:#?}"
    );
    assert!(
        errors[1].contains("line 4") && errors[1].contains("colour"),
        "{errors:#?}"
    );
    assert!(
        errors[2].contains("base_url must start with http:// or https://"),
        "{errors:#?}"
    );
}

#[test]
fn a_configured_model_that_cannot_be_used_is_never_replaced_by_the_demo() {
    let home = Home::new();
    // A near-miss provider name, and a file that is not TOML at all.
    let configs = [
        (
            "model = \"loacl/x\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
            "loacl/x",
            "did you mean `local`?",
        ),
        (
            "model = \"local/x\"\n[providers.local\nkind = \"openai\"\n",
            "local/x",
            "cannot be read",
        ),
    ];
    for (config, model, why) in configs {
        home.write_config(config);
        let mut serve = Serve::start(&home);
        let batch = serve.skip_startup();
        assert_eq!(batch[0]["model"], model, "{config}");
        assert_eq!(batch[1]["type"], "model_status");
        assert_eq!(batch[1]["state"], "invalid_config", "{:?}", batch[1]);
        serve.send(json!({"op": "user_message", "content": "hi"}));
        let mut errors = Vec::new();
        loop {
            let event = serve.next();
            assert_ne!(
                event["type"], "assistant_delta",
                "the demo answered: {event}"
            );
            match event["type"].as_str() {
                Some("error") => errors.push(event["message"].as_str().unwrap().to_owned()),
                Some("status") if event["message"] != "thinking" => break,
                _ => {}
            }
        }
        assert!(
            errors.iter().any(|e| e.contains(why)),
            "{config}: {errors:#?}"
        );
        assert!(
            errors.iter().all(|e| !e.contains("demo")),
            "{config}: {errors:#?}"
        );
    }
}

#[test]
fn malformed_input_never_ends_the_session() {
    let home = Home::new();
    let mut serve = Serve::ready(&home);
    serve.next(); // demo notice
    serve.send_raw("");
    serve.send_raw("   ");
    serve.send_raw("this is not json");
    serve.send_raw("[1,2,3]");
    serve.send_raw(r#"{"op":"dance"}"#);
    serve.send_raw(r#"{"op":"user_message"}"#);
    serve.send_raw(r#"{"op":"steer","index":"first"}"#);
    serve.send_raw(r#"{"content":"no op"}"#);
    serve.send_bytes(b"{\"op\":\"user_message\",\"content\":\"\xff\xfe\"}\n");
    let errors: Vec<String> = (0..7)
        .map(|_| {
            let event = serve.next();
            assert_eq!(event["type"], "error", "{event}");
            event["message"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(errors[0].starts_with("invalid command: "), "{errors:?}");
    assert!(errors[1].starts_with("invalid command: "), "{errors:?}");
    assert_eq!(errors[2], "unknown op: dance");
    assert_eq!(errors[3], "invalid user_message: missing field `content`");
    assert!(errors[4].starts_with("invalid steer: "), "{errors:?}");
    assert_eq!(errors[5], "invalid command: missing \"op\" field");
    assert!(errors[6].starts_with("invalid command: "), "{errors:?}");
    serve.send(json!({"op": "agent_runs", "session": "ignored"}));
    assert_eq!(
        strip_session(serve.next()),
        json!({"type": "agent_runs", "workflows": [], "agents": []})
    );
}

#[test]
fn lines_of_sixteen_mebibytes_are_accepted_and_longer_ones_rejected() {
    let home = Home::new();
    let mut serve = Serve::ready(&home);
    serve.next();
    let pad = "x".repeat(17 * 1024 * 1024);
    serve.send_raw(&format!(r#"{{"op":"agent_runs","pad":"{pad}"}}"#));
    assert_eq!(serve.next()["type"], "agent_runs");
    let huge = "y".repeat(33 * 1024 * 1024);
    serve.send_raw(&format!(r#"{{"op":"agent_runs","pad":"{huge}"}}"#));
    let error = serve.next();
    assert_eq!(error["type"], "error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("line longer than"),
        "{error}"
    );
    serve.send(json!({"op": "agent_runs"}));
    assert_eq!(serve.next()["type"], "agent_runs");
}

#[test]
fn exits_zero_on_shutdown_eof_quit_and_exit() {
    for ending in ["shutdown", "eof", "/quit", "/exit"] {
        let home = Home::new();
        let mut serve = Serve::ready(&home);
        match ending {
            "shutdown" => serve.send(json!({"op": "shutdown"})),
            "eof" => serve.close_stdin(),
            command => serve.send(json!({"op": "command", "input": command})),
        }
        let status = serve.wait();
        assert_eq!(status.code(), Some(0), "{ending}");
    }
}

#[test]
fn commands_answer_with_events() {
    let home = Home::new();
    home.write_config(
        "model = \"mock/mock-1\"\n\
         [providers.mock]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         reasoning_efforts = [\"low\", \"high\"]\n\
         [providers.mock.models.mock-1]\n\
         [providers.mock.models.big]\ncontext_window = 1000000\nmax_output_tokens = 64000\n",
    );
    let mut serve = Serve::ready(&home);

    serve.send(json!({"op": "command", "input": "/help"}));
    let help = serve.expect_one("info");
    let text = help["message"].as_str().unwrap();
    assert!(text.contains("/model") && text.contains("/quit"), "{text}");

    serve.send(json!({"op": "command", "input": "/model"}));
    let view = serve.expect_one("model_view");
    let models = view["models"].as_array().unwrap();
    let names: Vec<&str> = models
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"mock/mock-1") && names.contains(&"mock/big"),
        "{names:?}"
    );
    let active: Vec<&Value> = models.iter().filter(|m| m["active"] == true).collect();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0]["model"], "mock/mock-1");
    assert_eq!(view["active_effort"], "low");

    serve.send(json!({"op": "command", "input": "/model mock/big high"}));
    let status = serve.expect_one("model_status");
    assert_eq!(status["model"], "big");
    assert_eq!(status["provider"], "mock");
    assert_eq!(status["reasoning_effort"], "high");
    assert_eq!(status["context_window"], 1000000);
    assert_eq!(status["context_limit"], 800000);
    assert_eq!(status["max_output_tokens"], 64000);

    // The same selection again changes nothing, so no model_status is emitted.
    serve.send(json!({"op": "command", "input": "/model big"}));
    serve.send(json!({"op": "command", "input": "/model mock/big turbo"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"].as_str().unwrap().contains("turbo"),
        "{error}"
    );

    serve.send(json!({"op": "command", "input": "/model elsewhere/x"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"].as_str().unwrap().contains("elsewhere"),
        "{error}"
    );

    serve.send(json!({"op": "command", "input": "/frobnicate"}));
    let error = serve.expect_one("error");
    assert_eq!(error["message"], "unknown command: /frobnicate (try /help)");

    serve.send(json!({"op": "subagent_transcript", "agent_id": "/root/nobody"}));
    let answer = serve.expect_one("subagent_transcript");
    assert_eq!(answer["agent_id"], "/root/nobody");
    assert!(answer["error"].as_str().unwrap().contains("/root/nobody"));
    assert!(answer.get("items").is_none(), "{answer}");

    serve.send(json!({"op": "set_approval_mode", "mode": "auto-edit"}));
    let events = serve.expect(&["status", "approval_mode"]);
    assert_eq!(events[0]["message"], "approval mode: auto-edit");
    assert_eq!(events[1]["mode"], "auto-edit");
    serve.send(json!({"op": "set_approval_mode", "mode": "yolo"}));
    serve.expect_one("error");
}

pub fn strip_session(mut event: Value) -> Value {
    if let Some(object) = event.as_object_mut() {
        object.remove("session");
    }
    event
}

#[test]
fn a_json_array_is_never_an_op() {
    let home = Home::new();
    let mut serve = Serve::ready(&home);
    serve.expect_one("info"); // the offline demo notice
    for line in [
        r#"["shutdown"]"#,
        r#"["set_approval_mode","full-access"]"#,
        r#"  ["command","/quit"]"#,
        r#""shutdown""#,
        "7",
    ] {
        serve.send_raw(line);
        let error = serve.expect_one("error");
        assert_eq!(
            error["message"], "invalid command: expected a JSON object with a string \"op\" field",
            "{line}"
        );
    }
    // Nothing acted: no mode change was announced and the session is still here.
    serve.send(json!({"op": "agent_runs"}));
    serve.expect_one("agent_runs");
    serve.send(json!({"op": "shutdown"}));
    assert!(serve.rest().is_empty());
    assert_eq!(serve.wait().code(), Some(0));
}

#[test]
fn a_message_that_is_a_command_still_runs_as_a_turn_and_says_how_to_run_the_command() {
    let home = Home::new();
    let mut serve = Serve::ready(&home);
    serve.next(); // demo notice
    serve.send(json!({"op": "user_message", "content": "  /help  "}));
    let advice = serve.next();
    assert_eq!(advice["type"], "info", "{advice}");
    let message = advice["message"].as_str().unwrap();
    assert!(
        message.contains(r#"{"op":"command","input":"/help"}"#),
        "{message}"
    );
    let echo = serve.next();
    assert_eq!(echo["type"], "user_message", "the turn still runs: {echo}");
    assert_eq!(echo["content"], "  /help  ");
    let turn = serve.until_status("ready");
    assert!(
        turn.iter().all(
            |e| e["type"] != "info" || !e["message"].as_str().unwrap().contains("is a command")
        )
    );

    // Not a command, or more than one line: no advice.
    for content in ["/nonesuch", "/help\nand then more", "help"] {
        serve.send(json!({"op": "user_message", "content": content}));
        let echo = serve.next();
        assert_eq!(echo["type"], "user_message", "{content:?}: {echo}");
        serve.until_status("ready");
    }
}

#[test]
fn typed_ops_list_and_switch_models_and_sync_answers_after_earlier_ops() {
    let home = Home::new();
    home.write_config(
        "model = \"mock/mock-1\"\n\
         [providers.mock]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         reasoning_efforts = [\"low\", \"high\"]\n\
         [providers.mock.models.mock-1]\n\
         [providers.mock.models.big]\ncontext_window = 1000000\n",
    );
    let mut serve = Serve::ready(&home);

    serve.send(json!({"op": "list_models"}));
    let view = serve.expect_one("model_view");
    assert!(
        view["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["model"] == "mock/big")
    );

    // The effort alone keeps the model; the model alone keeps the effort it can.
    serve.send(json!({"op": "set_model", "reasoning_effort": "high"}));
    let status = serve.expect_one("model_status");
    assert_eq!(
        (
            status["model"].as_str(),
            status["reasoning_effort"].as_str()
        ),
        (Some("mock-1"), Some("high"))
    );
    serve.send(json!({"op": "set_model", "model": "mock/big"}));
    let status = serve.expect_one("model_status");
    assert_eq!(
        (
            status["model"].as_str(),
            status["reasoning_effort"].as_str()
        ),
        (Some("big"), Some("high"))
    );
    serve.send(json!({"op": "set_model", "model": "mock/big", "reasoning_effort": "turbo"}));
    let error = serve.expect_one("error");
    assert!(
        error["message"].as_str().unwrap().contains("turbo"),
        "{error}"
    );

    // `synced` comes after everything the earlier ops caused, with its token.
    serve.send(json!({"op": "set_approval_mode", "mode": "auto-edit"}));
    serve.send(json!({"op": "sync", "token": "t-1"}));
    let events = serve.until("synced");
    let kinds = types(&events);
    assert_eq!(kinds, ["status", "approval_mode", "synced"], "{events:#?}");
    assert_eq!(events[2]["token"], "t-1");
    serve.send(json!({"op": "sync"}));
    assert_eq!(
        serve.expect_one("error")["type"],
        "error",
        "a sync without token is bad input"
    );
}
