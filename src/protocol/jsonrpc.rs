//! JSON-RPC 2.0 messages, as `jucode acp` (one message a line), the daemon driving an ACP
//! agent it hosts (`engines::acp`, the same framing) and the WebSocket server
//! (one message a text frame) read and write them. Only what those protocols use: no
//! batches (an array is an invalid request); ids are a string, a number or null (any other
//! id is an invalid request, answered with id null), echoed exactly as they came: a
//! number `serde_json::Value` would round (`123456789012345678901234567890`) keeps its
//! text ([`RpcId`]).
//!
//! Reading never fails hard: input that is not a message becomes the error response
//! the specification names (`-32700` parse error, `-32600` invalid request) for the
//! caller to send, and the connection goes on.

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP: the request was cancelled (`$/cancel_request`).
pub const REQUEST_CANCELLED: i64 = -32800;
/// ACP: no such resource (an unknown session).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// A message's id as the peer wrote it: a string, a number or null, serialized back
/// byte for byte (a peer matches its answer by it, and an id read as a float would
/// come back changed).
#[derive(Debug, Clone)]
pub struct RpcId(Box<RawValue>);

impl RpcId {
    pub fn null() -> Self {
        Self::of(&Value::Null)
    }

    /// The id of a request jucode sends.
    pub fn number(id: i64) -> Self {
        Self::of(&Value::from(id))
    }

    /// An integer id (jucode's own requests are numbered).
    pub fn as_i64(&self) -> Option<i64> {
        self.0.get().parse().ok()
    }

    /// Whether `value` (an id a peer quotes, as `$/cancel_request` does) names this id.
    pub fn is(&self, value: &Value) -> bool {
        serde_json::from_str::<Value>(self.0.get()).is_ok_and(|mine| mine == *value)
    }

    fn of(value: &Value) -> Self {
        // A string, an integer or null always serializes.
        let raw = serde_json::value::to_raw_value(value)
            .or_else(|_| RawValue::from_string("null".to_owned()));
        match raw {
            Ok(raw) => Self(raw),
            Err(_) => unreachable!("`null` is valid JSON"),
        }
    }
}

impl PartialEq for RpcId {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl std::fmt::Display for RpcId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.get())
    }
}

impl Serialize for RpcId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// The id of `value` (a string, a number or null), from the message's own text when it
/// is a number a `Value` does not hold exactly.
fn id_of(value: &Value, text: &[u8]) -> RpcId {
    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        #[serde(borrow)]
        id: &'a RawValue,
    }
    let inexact = matches!(value, Value::Number(number) if number.is_f64());
    if inexact && let Ok(raw) = serde_json::from_slice::<Raw<'_>>(text) {
        return RpcId(raw.id.to_owned());
    }
    RpcId::of(value)
}

/// One message received.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: RpcId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: RpcId,
        result: Result<Value, RpcError>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(INTERNAL_ERROR, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self {
            code: METHOD_NOT_FOUND,
            message: "Method not found".into(),
            data: Some(Value::String(method.to_owned())),
        }
    }

    pub fn unknown_session(id: &str) -> Self {
        Self::new(RESOURCE_NOT_FOUND, format!("unknown session: {id}"))
    }
}

/// Reads one message; `Err` is the error response to send (with the id when known).
pub fn parse(text: &[u8]) -> Result<Message, Bytes> {
    parse_as(text, Version::Required)
}

/// Whether a message must say `"jsonrpc":"2.0"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// JSON-RPC 2.0 to the letter: what jucode's own servers take.
    Required,
    /// The member may be absent (Codex's app server leaves it out); when present it
    /// must still be `"2.0"`.
    Optional,
}

/// [`parse`], with the `jsonrpc` member as `version` wants it.
pub fn parse_as(text: &[u8], version: Version) -> Result<Message, Bytes> {
    let value: Value = match serde_json::from_slice(text) {
        Ok(value) => value,
        Err(err) => {
            let error = RpcError::new(PARSE_ERROR, format!("Parse error: {err}"));
            return Err(error_response(&RpcId::null(), &error));
        }
    };
    let Value::Object(mut object) = value else {
        let error = RpcError::new(
            INVALID_REQUEST,
            "Invalid Request: expected a JSON-RPC 2.0 object (batches are not supported)",
        );
        return Err(error_response(&RpcId::null(), &error));
    };
    let id = object.remove("id");
    // JSON-RPC 2.0 allows only a string, a number or null as an id; any other id is not
    // one the caller could match an answer to, so the answer carries null.
    if matches!(
        id,
        Some(Value::Object(_) | Value::Array(_) | Value::Bool(_))
    ) {
        let error = RpcError::new(
            INVALID_REQUEST,
            "Invalid Request: \"id\" must be a string, a number or null",
        );
        return Err(error_response(&RpcId::null(), &error));
    }
    let id = id.map(|id| id_of(&id, text));
    let invalid = |why: &str, id: &Option<RpcId>| {
        let error = RpcError::new(INVALID_REQUEST, format!("Invalid Request: {why}"));
        error_response(id.as_ref().unwrap_or(&RpcId::null()), &error)
    };
    let absent_allowed = version == Version::Optional && !object.contains_key("jsonrpc");
    if !absent_allowed && object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("\"jsonrpc\" must be \"2.0\"", &id));
    }
    if let Some(method) = object.remove("method") {
        let Value::String(method) = method else {
            return Err(invalid("\"method\" must be a string", &id));
        };
        let params = match object.remove("params") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(params @ (Value::Object(_) | Value::Array(_))) => params,
            Some(_) => return Err(invalid("\"params\" must be an object or an array", &id)),
        };
        return Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        });
    }
    let Some(id) = id else {
        return Err(invalid("neither a request nor a response", &None));
    };
    if let Some(error) = object.remove("error") {
        let code = error
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(INTERNAL_ERROR);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let data = error.get("data").cloned();
        return Ok(Message::Response {
            id,
            result: Err(RpcError {
                code,
                message,
                data,
            }),
        });
    }
    match object.remove("result") {
        Some(result) => Ok(Message::Response {
            id,
            result: Ok(result),
        }),
        None => Err(invalid(
            "a response needs \"result\" or \"error\"",
            &Some(id),
        )),
    }
}

/// A response line: `{"jsonrpc":"2.0","id":..,"result":..}` and `\n`.
pub fn response(id: &RpcId, result: &impl Serialize) -> Bytes {
    #[derive(Serialize)]
    struct Response<'a, T: Serialize> {
        jsonrpc: &'static str,
        id: &'a RpcId,
        result: &'a T,
    }
    line(&Response {
        jsonrpc: "2.0",
        id,
        result,
    })
}

pub fn error_response(id: &RpcId, error: &RpcError) -> Bytes {
    #[derive(Serialize)]
    struct Response<'a> {
        jsonrpc: &'static str,
        id: &'a RpcId,
        error: &'a RpcError,
    }
    line(&Response {
        jsonrpc: "2.0",
        id,
        error,
    })
}

pub fn request(id: &RpcId, method: &str, params: &impl Serialize) -> Bytes {
    #[derive(Serialize)]
    struct Request<'a, T: Serialize> {
        jsonrpc: &'static str,
        id: &'a RpcId,
        method: &'a str,
        params: &'a T,
    }
    line(&Request {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
}

pub fn notification(method: &str, params: &impl Serialize) -> Bytes {
    #[derive(Serialize)]
    struct Notification<'a, T: Serialize> {
        jsonrpc: &'static str,
        method: &'a str,
        params: &'a T,
    }
    line(&Notification {
        jsonrpc: "2.0",
        method,
        params,
    })
}

/// Serializes `value` and a newline (a WebSocket server trims it off).
fn line(value: &impl Serialize) -> Bytes {
    crate::protocol::encode_line(value)
}

/// Reads typed params; an error says which field is wrong, as `-32602`.
pub fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params)
        .map_err(|err| RpcError::invalid_params(format!("Invalid params: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error_of(text: &str) -> Value {
        serde_json::from_slice(&parse(text.as_bytes()).unwrap_err()).unwrap()
    }

    #[test]
    fn the_version_member_may_be_absent_only_when_optional() {
        let bare = br#"{"id":0,"method":"item/commandExecution/requestApproval","params":{}}"#;
        assert!(parse(bare).is_err());
        assert!(matches!(
            parse_as(bare, Version::Optional),
            Ok(Message::Request { .. })
        ));
        assert!(parse_as(br#"{"id":3,"result":{}}"#, Version::Optional).is_ok());
        assert!(
            parse_as(
                br#"{"jsonrpc":"1.0","id":3,"result":{}}"#,
                Version::Optional
            )
            .is_err()
        );
    }

    #[test]
    fn requests_notifications_responses() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}"#).unwrap(),
            Message::Request {
                id: RpcId::number(1),
                method: "initialize".into(),
                params: json!({"a":1})
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","method":"session/cancel"}"#).unwrap(),
            Message::Notification {
                method: "session/cancel".into(),
                params: json!({})
            }
        );
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":"x","error":{"code":-32800,"message":"c"}}"#).unwrap(),
            Message::Response {
                id: RpcId::of(&json!("x")),
                result: Err(RpcError::new(-32800, "c"))
            }
        );
    }

    #[test]
    fn bad_input_is_answered_with_the_named_codes() {
        assert_eq!(error_of("{nope")["error"]["code"], PARSE_ERROR);
        assert_eq!(error_of("{nope")["id"], Value::Null);
        assert_eq!(error_of("[1,2]")["error"]["code"], INVALID_REQUEST);
        let no_version = error_of(r#"{"id":3,"method":"x"}"#);
        assert_eq!(no_version["error"]["code"], INVALID_REQUEST);
        assert_eq!(no_version["id"], 3);
        assert_eq!(
            error_of(r#"{"jsonrpc":"2.0","id":3,"method":7}"#)["error"]["code"],
            INVALID_REQUEST
        );
        assert_eq!(
            error_of(r#"{"jsonrpc":"2.0","id":3,"method":"x","params":5}"#)["error"]["code"],
            INVALID_REQUEST
        );
    }

    #[test]
    fn an_id_that_is_not_a_string_number_or_null_is_refused_with_id_null() {
        for id in [r#"{"a":1}"#, "[1]", "true"] {
            for rest in [r#""method":"x""#, r#""result":1"#] {
                let text = format!(r#"{{"jsonrpc":"2.0","id":{id},{rest}}}"#);
                let answer = error_of(&text);
                assert_eq!(answer["error"]["code"], INVALID_REQUEST, "{text}");
                assert_eq!(answer["id"], Value::Null, "{text}");
            }
        }
        assert!(parse(br#"{"jsonrpc":"2.0","id":null,"method":"x"}"#).is_ok());
    }

    #[test]
    fn ids_are_echoed_exactly_as_they_came() {
        for id in [
            "123456789012345678901234567890",
            "1.50",
            "-0.0",
            "1E5",
            "18446744073709551615",
            "7",
            "\"x\"",
            "null",
        ] {
            let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"x"}}"#);
            let Ok(Message::Request { id: parsed, .. }) = parse(text.as_bytes()) else {
                panic!("{text} is a request");
            };
            let line = response(&parsed, &json!({}));
            let line = std::str::from_utf8(&line).unwrap();
            assert!(line.contains(&format!(r#""id":{id},"#)), "{id}: {line}");
        }
        // Refused messages echo the exact id too.
        let text = r#"{"jsonrpc":"1.0","id":123456789012345678901234567890,"method":"x"}"#;
        let answer = parse(text.as_bytes()).unwrap_err();
        assert!(
            std::str::from_utf8(&answer)
                .unwrap()
                .contains(r#""id":123456789012345678901234567890"#)
        );
    }
}
