//! JSON-RPC 2.0 messages, as `jucode acp` (one message a line) and the WebSocket server
//! (one message a text frame) read and write them. Only what those protocols use: no
//! batches (an array is an invalid request); ids are a string, a number or null (any other
//! id is an invalid request, answered with id null), echoed as they came.
//!
//! Reading never fails hard: input that is not a message becomes the error response
//! the specification names (`-32700` parse error, `-32600` invalid request) for the
//! caller to send, and the connection goes on.

use bytes::Bytes;
use serde::Serialize;
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

/// One message received.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: Value,
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
    let value: Value = match serde_json::from_slice(text) {
        Ok(value) => value,
        Err(err) => {
            let error = RpcError::new(PARSE_ERROR, format!("Parse error: {err}"));
            return Err(error_response(&Value::Null, &error));
        }
    };
    let Value::Object(mut object) = value else {
        let error = RpcError::new(
            INVALID_REQUEST,
            "Invalid Request: expected a JSON-RPC 2.0 object (batches are not supported)",
        );
        return Err(error_response(&Value::Null, &error));
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
        return Err(error_response(&Value::Null, &error));
    }
    let invalid = |why: &str, id: &Option<Value>| {
        let error = RpcError::new(INVALID_REQUEST, format!("Invalid Request: {why}"));
        error_response(id.as_ref().unwrap_or(&Value::Null), &error)
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
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
pub fn response(id: &Value, result: &impl Serialize) -> Bytes {
    #[derive(Serialize)]
    struct Response<'a, T: Serialize> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a T,
    }
    line(&Response {
        jsonrpc: "2.0",
        id,
        result,
    })
}

pub fn error_response(id: &Value, error: &RpcError) -> Bytes {
    #[derive(Serialize)]
    struct Response<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        error: &'a RpcError,
    }
    line(&Response {
        jsonrpc: "2.0",
        id,
        error,
    })
}

pub fn request(id: &Value, method: &str, params: &impl Serialize) -> Bytes {
    #[derive(Serialize)]
    struct Request<'a, T: Serialize> {
        jsonrpc: &'static str,
        id: &'a Value,
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
    fn requests_notifications_responses() {
        assert_eq!(
            parse(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}"#).unwrap(),
            Message::Request {
                id: json!(1),
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
                id: json!("x"),
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
}
