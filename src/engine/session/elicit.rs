//! MCP servers asking the user for input (`elicitation/create`): each request becomes an
//! `elicitation_request` to every client and stays open until one `elicitation_response`
//! fits its schema, an interrupt cancels it, or the session ends. Every request is closed
//! by exactly one `elicitation_resolved`. An unattended session declines at once: nobody
//! is there to answer, and a server must not wait on nobody.

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::Session;
use crate::engine::ports::mcp::{Elicitation, ElicitationAnswer};
use crate::protocol::{ElicitationAction, Event};

/// A request put to the clients, waiting for an answer.
pub(super) struct OpenElicitation {
    id: String,
    schema: Value,
    answer: oneshot::Sender<ElicitationAnswer>,
}

#[derive(Default)]
pub(super) struct Elicitations {
    pub(super) requests: Option<mpsc::Receiver<Elicitation>>,
    open: Vec<OpenElicitation>,
    next_id: u64,
}

impl Elicitations {
    pub(super) fn new(requests: Option<mpsc::Receiver<Elicitation>>) -> Self {
        Self {
            requests,
            ..Self::default()
        }
    }
}

/// The next request of the servers; never, once there is no receiver.
pub(super) async fn next(requests: &mut Option<mpsc::Receiver<Elicitation>>) -> Elicitation {
    match requests {
        Some(receiver) => match receiver.recv().await {
            Some(request) => request,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

impl Session {
    pub(super) async fn elicitation_arrived(&mut self, request: Elicitation) {
        let Elicitation {
            server,
            message,
            schema,
            answer,
        } = request;
        let attended = self.emitter.change(|shared| shared.attended);
        if !attended {
            tracing::info!(%server, "declined an elicitation request: the session is unattended");
            let _ = answer.send(ElicitationAnswer {
                action: ElicitationAction::Decline,
                content: None,
            });
            return;
        }
        self.elicit.next_id += 1;
        let id = format!("elicit_{}", self.elicit.next_id);
        self.elicit.open.push(OpenElicitation {
            id: id.clone(),
            schema: schema.clone(),
            answer,
        });
        self.emitter
            .emit(Event::ElicitationRequest {
                id,
                server,
                message,
                schema,
            })
            .await;
    }

    /// `elicitation_response`. A wrong answer is an error for its sender only, and the
    /// request stays open for another.
    pub(super) async fn elicitation_response(
        &mut self,
        id: &str,
        action: ElicitationAction,
        content: Option<Value>,
    ) {
        let Some(position) = self.elicit.open.iter().position(|open| open.id == id) else {
            let message = format!(
                "no elicitation request is open for id {id:?} (it was never asked, or was already answered)"
            );
            return self.reply_error(message).await;
        };
        let content = match (action, content) {
            (ElicitationAction::Accept, content) => {
                let content = match content {
                    None => Map::new(),
                    Some(Value::Object(content)) => content,
                    Some(_) => {
                        return self
                            .reply_error(format!(
                                "elicitation_response {id}: content must be an object"
                            ))
                            .await;
                    }
                };
                match check(&self.elicit.open[position].schema, content) {
                    Ok(content) => Some(content),
                    Err(message) => {
                        return self
                            .reply_error(format!("elicitation_response {id}: {message}"))
                            .await;
                    }
                }
            }
            (_, Some(_)) => {
                return self
                    .reply_error(format!(
                        "elicitation_response {id}: content goes only with accept"
                    ))
                    .await;
            }
            (_, None) => None,
        };
        let open = self.elicit.open.remove(position);
        // The server may have given up meanwhile; then nobody waits.
        let _ = open.answer.send(ElicitationAnswer { action, content });
        self.emitter
            .emit(Event::ElicitationResolved {
                id: open.id,
                action,
            })
            .await;
    }

    /// Closes every open request with `action` (an interrupt, the session ending, the
    /// session turning unattended).
    pub(super) async fn close_elicitations(&mut self, action: ElicitationAction) {
        for open in std::mem::take(&mut self.elicit.open) {
            let _ = open.answer.send(ElicitationAnswer {
                action,
                content: None,
            });
            self.emitter
                .emit(Event::ElicitationResolved {
                    id: open.id,
                    action,
                })
                .await;
        }
    }
}

/// Checks an accepted answer against an elicitation schema (MCP allows only a flat
/// object of primitive properties) and fills in the defaults of omitted fields.
pub(super) fn check(
    schema: &Value,
    mut content: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let empty = Map::new();
    let properties = schema["properties"].as_object().unwrap_or(&empty);
    if let Some(unknown) = content.keys().find(|key| !properties.contains_key(*key)) {
        let known: Vec<&str> = properties.keys().map(String::as_str).collect();
        return Err(format!(
            "unknown field {unknown:?} (the request asks for: {})",
            known.join(", ")
        ));
    }
    for (name, property) in properties {
        if !content.contains_key(name)
            && let Some(default) = property.get("default")
        {
            content.insert(name.clone(), default.clone());
        }
    }
    if let Some(required) = schema["required"].as_array() {
        let missing: Vec<&str> = required
            .iter()
            .filter_map(Value::as_str)
            .filter(|name| !content.contains_key(*name))
            .collect();
        if !missing.is_empty() {
            return Err(format!("missing required field(s): {}", missing.join(", ")));
        }
    }
    for (name, value) in &content {
        check_value(&properties[name], value)
            .map_err(|message| format!("field {name:?}: {message}"))?;
    }
    Ok(content)
}

fn check_value(property: &Value, value: &Value) -> Result<(), String> {
    let choices = property["enum"].as_array().cloned().or_else(|| {
        // Titled enums: `oneOf: [{const, title}]`.
        property["oneOf"].as_array().map(|options| {
            options
                .iter()
                .filter_map(|o| o.get("const").cloned())
                .collect()
        })
    });
    match property["type"].as_str() {
        Some("string") => {
            let Some(text) = value.as_str() else {
                return Err(format!("expected a string, got {value}"));
            };
            let length = text.chars().count() as u64;
            if let Some(min) = property["minLength"].as_u64()
                && length < min
            {
                return Err(format!("at least {min} characters expected, got {length}"));
            }
            if let Some(max) = property["maxLength"].as_u64()
                && length > max
            {
                return Err(format!("at most {max} characters expected, got {length}"));
            }
            if let Some(format) = property["format"].as_str() {
                check_format(format, text)?;
            }
        }
        Some(kind @ ("number" | "integer")) => {
            let Some(number) = value.as_f64() else {
                return Err(format!("expected a {kind}, got {value}"));
            };
            if kind == "integer" && !(value.is_i64() || value.is_u64()) {
                return Err(format!("expected an integer, got {value}"));
            }
            if let Some(min) = property["minimum"].as_f64()
                && number < min
            {
                return Err(format!("{number} is below the minimum {min}"));
            }
            if let Some(max) = property["maximum"].as_f64()
                && number > max
            {
                return Err(format!("{number} is above the maximum {max}"));
            }
        }
        Some("boolean") if !value.is_boolean() => {
            return Err(format!("expected a boolean, got {value}"));
        }
        Some("array") => {
            // Multi-select enums: an array of the item enum's values.
            let Some(items) = value.as_array() else {
                return Err(format!("expected an array, got {value}"));
            };
            let allowed = property["items"]["enum"].as_array().cloned().or_else(|| {
                property["items"]["anyOf"].as_array().map(|options| {
                    options
                        .iter()
                        .filter_map(|o| o.get("const").cloned())
                        .collect()
                })
            });
            if let Some(allowed) = allowed
                && let Some(bad) = items.iter().find(|item| !allowed.contains(item))
            {
                return Err(format!("{bad} is not one of the choices"));
            }
            if let Some(min) = property["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                return Err(format!("at least {min} choices expected"));
            }
            if let Some(max) = property["maxItems"].as_u64()
                && (items.len() as u64) > max
            {
                return Err(format!("at most {max} choices expected"));
            }
            return Ok(());
        }
        _ => {}
    }
    if let Some(choices) = choices
        && !choices.contains(value)
    {
        let listed: Vec<String> = choices.iter().map(Value::to_string).collect();
        return Err(format!("{value} is not one of {}", listed.join(", ")));
    }
    Ok(())
}

fn check_format(format: &str, text: &str) -> Result<(), String> {
    let ok = match format {
        "email" => text.split_once('@').is_some_and(|(user, host)| {
            !user.is_empty() && host.contains('.') && !host.starts_with('.')
        }),
        "uri" => text.split_once("://").is_some_and(|(scheme, rest)| {
            !rest.is_empty()
                && scheme
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }),
        "date" => is_date(text),
        "date-time" => text.split_once(['T', 't']).is_some_and(|(date, time)| {
            is_date(date) && time.len() >= 8 && time.as_bytes()[2] == b':'
        }),
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{text:?} is not a valid {format}"))
    }
}

fn is_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    matches!(parts.as_slice(), [y, m, d] if y.len() == 4 && m.len() == 2 && d.len() == 2
        && [y, m, d].iter().all(|part| part.bytes().all(|b| b.is_ascii_digit()))
        && (1..=12).contains(&m.parse::<u8>().unwrap_or(0))
        && (1..=31).contains(&d.parse::<u8>().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "color": {"type": "string", "enum": ["red", "green"], "default": "green"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "ok": {"type": "boolean", "default": true},
                "mail": {"type": "string", "format": "email"}
            },
            "required": ["name", "color"]
        })
    }

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn defaults_fill_omitted_fields() {
        let content = check(&schema(), map(json!({"name": "Ada"}))).unwrap();
        assert_eq!(
            Value::Object(content),
            json!({"name": "Ada", "color": "green", "ok": true})
        );
    }

    #[test]
    fn violations_are_named() {
        let cases = [
            (json!({"color": "red"}), "missing required field(s): name"),
            (
                json!({"name": "A", "color": "blue"}),
                "field \"color\": \"blue\" is not one of \"red\", \"green\"",
            ),
            (
                json!({"name": "A", "age": 1.5}),
                "field \"age\": expected an integer, got 1.5",
            ),
            (
                json!({"name": "A", "age": 200}),
                "field \"age\": 200 is above the maximum 150",
            ),
            (
                json!({"name": "", "age": 2}),
                "field \"name\": at least 1 characters expected, got 0",
            ),
            (
                json!({"name": "A", "ok": "yes"}),
                "field \"ok\": expected a boolean, got \"yes\"",
            ),
            (
                json!({"name": "A", "mail": "nope"}),
                "field \"mail\": \"nope\" is not a valid email",
            ),
            (json!({"name": "A", "extra": 1}), "unknown field \"extra\""),
        ];
        for (content, expected) in cases {
            let err = check(&schema(), map(content.clone())).unwrap_err();
            assert!(err.starts_with(expected), "{content}: {err}");
        }
    }

    #[test]
    fn formats() {
        assert!(check_format("date", "2026-12-02").is_ok());
        assert!(check_format("date", "2026-13-02").is_err());
        assert!(check_format("uri", "https://example.com/x").is_ok());
        assert!(check_format("uri", "example.com").is_err());
        assert!(check_format("date-time", "2026-12-02T07:00:00Z").is_ok());
    }
}
