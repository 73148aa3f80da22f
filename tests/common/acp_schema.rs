//! Checks what `jucode acp` writes against the ACP v1 JSON Schema, the one the official
//! SDK ships (`schema/v1/schema.json` of `@agentclientprotocol/sdk`, installed by
//! `.ci/run`). Without the package the check is skipped, said once on stdout.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

fn document() -> Option<&'static Value> {
    static DOCUMENT: OnceLock<Option<Value>> = OnceLock::new();
    DOCUMENT
        .get_or_init(|| {
            let dir = std::env::var_os("JUCODE_ACP_SDK")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                        .join("target/acp-npm/node_modules/@agentclientprotocol/sdk")
                });
            let path = dir.join("schema/v1/schema.json");
            match std::fs::read_to_string(&path) {
                Ok(text) => serde_json::from_str(&text).ok(),
                Err(_) => {
                    println!(
                        "NOTE: ACP messages are not checked against the ACP schema: {} is missing (run .ci/install-acp-sdk)",
                        path.display()
                    );
                    None
                }
            }
        })
        .as_ref()
}

fn validator(definition: &str) -> Option<&'static jsonschema::Validator> {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let document = document()?;
    let mut cache = VALIDATORS.get_or_init(Mutex::default).lock().unwrap();
    if let Some(validator) = cache.get(definition) {
        return Some(validator);
    }
    let root = json!({
        "$schema": document["$schema"],
        "$defs": document["$defs"],
        "$ref": format!("#/$defs/{definition}"),
    });
    let validator: &'static jsonschema::Validator = Box::leak(Box::new(
        jsonschema::validator_for(&root).expect("the ACP schema compiles"),
    ));
    cache.insert(definition.to_owned(), validator);
    Some(validator)
}

/// The schema definition of the params of an agent → client message.
fn params_definition(method: &str) -> Option<&'static str> {
    Some(match method {
        "session/update" => "SessionNotification",
        "session/request_permission" => "RequestPermissionRequest",
        "fs/read_text_file" => "ReadTextFileRequest",
        "fs/write_text_file" => "WriteTextFileRequest",
        "terminal/create" => "CreateTerminalRequest",
        "terminal/output" => "TerminalOutputRequest",
        "terminal/wait_for_exit" => "WaitForTerminalExitRequest",
        "terminal/kill" => "KillTerminalRequest",
        "terminal/release" => "ReleaseTerminalRequest",
        "$/cancel_request" => "CancelRequestNotification",
        _ => return None,
    })
}

/// The schema definition of the result of a client → agent request.
pub fn result_definition(method: &str) -> Option<&'static str> {
    Some(match method {
        "initialize" => "InitializeResponse",
        "session/new" => "NewSessionResponse",
        "session/load" => "LoadSessionResponse",
        "session/resume" => "ResumeSessionResponse",
        "session/list" => "ListSessionsResponse",
        "session/close" => "CloseSessionResponse",
        "session/set_mode" => "SetSessionModeResponse",
        "session/set_config_option" => "SetSessionConfigOptionResponse",
        "session/prompt" => "PromptResponse",
        _ => return None,
    })
}

fn check(definition: &str, value: &Value, message: &Value) {
    let Some(validator) = validator(definition) else {
        return;
    };
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|err| format!("{err} at {}", err.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not a valid {definition}: {}\n{message}",
        errors.join("; ")
    );
}

/// Fails the test when a message of the agent does not match the ACP schema.
/// `request_method` is the method of the client request a response answers.
pub fn assert_message(message: &Value, request_method: Option<&str>) {
    if let Some(method) = message["method"].as_str() {
        if let Some(definition) = params_definition(method) {
            check(definition, &message["params"], message);
        } else {
            panic!("jucode sent a method the ACP schema has no place for: {message}");
        }
    } else if let Some(error) = message.get("error") {
        check("Error", error, message);
    } else if let Some(definition) = request_method.and_then(result_definition) {
        check(definition, &message["result"], message);
    }
}
