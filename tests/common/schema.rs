//! Checks lines against the committed protocol schema (`docs/serve-protocol.schema.json`),
//! so every event an end-to-end test reads is also a schema test.

use std::sync::OnceLock;

use serde_json::{Value, json};

fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/serve-protocol.schema.json"
        );
        let text = std::fs::read_to_string(path).expect("read docs/serve-protocol.schema.json");
        serde_json::from_str(&text).expect("the committed schema is JSON")
    })
}

/// A validator for one definition of the document (`Op` or `Event`).
fn validator(definition: &str) -> jsonschema::Validator {
    let document = document();
    let root = json!({
        "$schema": document["$schema"],
        "$defs": document["$defs"],
        "$ref": format!("#/$defs/{definition}"),
    });
    jsonschema::validator_for(&root).expect("the committed schema compiles")
}

fn events() -> &'static jsonschema::Validator {
    static EVENTS: OnceLock<jsonschema::Validator> = OnceLock::new();
    EVENTS.get_or_init(|| validator("Event"))
}

fn ops() -> &'static jsonschema::Validator {
    static OPS: OnceLock<jsonschema::Validator> = OnceLock::new();
    OPS.get_or_init(|| validator("Op"))
}

/// Why `line` is not a valid event, if it is not.
pub fn event_error(line: &Value) -> Option<String> {
    let errors: Vec<String> = events()
        .iter_errors(line)
        .map(|err| format!("{} at {}", err, err.instance_path()))
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

pub fn op_error(line: &Value) -> Option<String> {
    let errors: Vec<String> = ops()
        .iter_errors(line)
        .map(|err| format!("{} at {}", err, err.instance_path()))
        .collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// Fails the test when `line` is not a valid event.
pub fn assert_event(line: &Value) {
    if let Some(error) = event_error(line) {
        panic!("event does not match the protocol schema: {error}\n{line}");
    }
}
