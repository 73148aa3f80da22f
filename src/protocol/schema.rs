//! The JSON Schema of the whole wire (serve protocol v2 and the daemon protocol),
//! generated from the Rust types with `schemars`: what `jucode schema` prints and
//! `docs/serve-protocol.schema.json` holds.
//!
//! Ops are described as they are *read* (optional fields may be left out) and events as
//! they are *written*, so the two halves come from two generators. The document then
//! flattens each side into one `oneOf`, keyed by `op` or `type`:
//!
//! - `$defs.Op`: every engine op and every daemon op. Each may carry `session` (the
//!   daemon routes on it; `jucode serve` ignores it).
//! - `$defs.Event`: every engine event, every daemon event and `hello`. Engine events
//!   carry `session` (the encoder appends it); `error` and `info` may lack it, since the
//!   daemon writes them too when no session is concerned. The daemon's `error` and
//!   `info` have the engine's shape, so they appear once.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

use super::{DaemonEvent, DaemonOp, Event, Hello, Op};

/// Event types that may come without `session`.
const SESSIONLESS: &[&str] = &["error", "info", "hello"];

/// The schema document, as `jucode schema` prints it.
pub fn document() -> Value {
    let mut ops = generator(SchemaSettings::draft2020_12().for_deserialize());
    let serve_ops = variants::<Op>(&mut ops);
    let daemon_ops = variants::<DaemonOp>(&mut ops);

    let mut events = generator(SchemaSettings::draft2020_12().for_serialize());
    let serve_events = variants::<Event>(&mut events);
    let daemon_events = variants::<DaemonEvent>(&mut events);
    let hello = events.subschema_for::<Hello>();

    let mut defs = Map::new();
    for (name, schema) in ops
        .take_definitions(true)
        .into_iter()
        .chain(events.take_definitions(true))
    {
        if let Some(existing) = defs.get(&name) {
            // One name, two shapes: an op type and an event type disagree on what the
            // name means. A programming error the schema tests catch.
            assert_eq!(
                existing, &schema,
                "conflicting schema definitions for {name}"
            );
        }
        defs.insert(name, schema);
    }
    let mut hello = resolve(&hello, &defs);
    // schemars leaves out the tag serde writes for a tagged struct; take it from serde.
    let hello_tag = serde_json::to_value(super::hello_value())
        .ok()
        .and_then(|value| value.get("type").cloned())
        .unwrap_or_default();
    add_property(
        &mut hello,
        "type",
        json!({"type": "string", "const": hello_tag}),
        true,
    );
    // The per-enum definitions are replaced by the flattened unions below (`Hello`
    // takes its name from its serde tag).
    for name in ["Op", "DaemonOp", "Event", "DaemonEvent", "Hello", "hello"] {
        defs.remove(name);
    }

    let mut op_variants = serve_ops;
    op_variants.extend(daemon_ops);
    for variant in &mut op_variants {
        add_property(
            variant,
            "session",
            json!({"type": "string", "description": "The daemon session the op is for (default: the connection's current session). `jucode serve` ignores it."}),
            false,
        );
    }

    let mut event_variants = Vec::new();
    for mut variant in serve_events {
        let required = !SESSIONLESS.contains(&tag(&variant, "type").unwrap_or_default().as_str());
        add_property(
            &mut variant,
            "session",
            json!({"type": "string", "description": "The session the event belongs to."}),
            required,
        );
        event_variants.push(variant);
    }
    let engine_types: Vec<String> = event_variants
        .iter()
        .filter_map(|variant| tag(variant, "type"))
        .collect();
    for variant in daemon_events {
        if tag(&variant, "type").is_some_and(|ty| engine_types.contains(&ty)) {
            continue;
        }
        event_variants.push(variant);
    }
    event_variants.push(hello);

    defs.insert(
        "Op".into(),
        json!({
            "description": "A client → engine (or daemon) line: a JSON object whose `op` names it.",
            "oneOf": op_variants,
        }),
    );
    defs.insert(
        "Event".into(),
        json!({
            "description": "An engine (or daemon) → client line: a JSON object whose `type` names it.",
            "oneOf": event_variants,
        }),
    );
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://jucode.dev/schema/serve-protocol-v2.json",
        "title": "jucode serve protocol v2 and daemon protocol",
        "description": "Every line is one JSON object: an op (client → engine) or an event (engine → client). Generated from jucode's Rust types by `jucode schema`; see docs/serve-protocol.md and docs/daemon-protocol.md.",
        "anyOf": [{"$ref": "#/$defs/Op"}, {"$ref": "#/$defs/Event"}],
        "$defs": Value::Object(defs),
    })
}

/// The document as `jucode schema` prints it: pretty, with a final newline.
pub fn document_text() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}

fn generator(settings: SchemaSettings) -> SchemaGenerator {
    settings.into_generator()
}

/// The `oneOf` variants of a tagged enum's schema.
fn variants<T: JsonSchema>(generator: &mut SchemaGenerator) -> Vec<Value> {
    let reference = generator.subschema_for::<T>();
    let schema = resolve(&reference, generator.definitions());
    match schema.get("oneOf") {
        Some(Value::Array(variants)) => variants.clone(),
        _ => vec![schema],
    }
}

/// A schema, following one `$ref` into the definitions.
fn resolve(schema: &schemars::Schema, defs: &Map<String, Value>) -> Value {
    let value = schema.as_value().clone();
    let Some(name) = value
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|reference| reference.strip_prefix("#/$defs/"))
    else {
        return value;
    };
    defs.get(name).cloned().unwrap_or(value)
}

/// The `const` of a variant's tag property (`op` or `type`).
fn tag(variant: &Value, key: &str) -> Option<String> {
    let property = variant.get("properties")?.get(key)?;
    property
        .get("const")
        .or_else(|| property.get("enum").and_then(|values| values.get(0)))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn add_property(variant: &mut Value, name: &str, schema: Value, required: bool) {
    let Some(object) = variant.as_object_mut() else {
        return;
    };
    let properties = object
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(properties) = properties.as_object_mut() {
        properties.entry(name).or_insert(schema);
    }
    if required {
        let list = object.entry("required").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut()
            && !list.iter().any(|item| item == name)
        {
            list.push(Value::from(name));
        }
    }
}
