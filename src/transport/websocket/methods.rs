//! The WebSocket dialect as one typed table: every method a dashboard calls with its
//! params and result types, the notifications and the request jucode sends. The
//! connection dispatches on [`Method`] (an exhaustive match), the types below are what it
//! reads and writes, and [`schema`] builds `jucode schema --websocket` from the same
//! types, so the document cannot drift from the code.

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::transport::peer::core::{CancelRequestParams, PermissionRequest};
use crate::transport::translate::prompt::PromptBlock;
use crate::transport::translate::updates::{ConfigOption, ModeState, SessionUpdate};

/// The methods a client may call.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::EnumIter,
)]
pub enum Method {
    #[strum(serialize = "initialize")]
    Initialize,
    #[strum(serialize = "session/new")]
    New,
    #[strum(serialize = "session/attach")]
    Attach,
    #[strum(serialize = "session/list")]
    List,
    #[strum(serialize = "session/prompt")]
    Prompt,
    #[strum(serialize = "session/cancel")]
    Cancel,
    #[strum(serialize = "session/close")]
    Close,
    #[strum(serialize = "session/set_mode")]
    SetMode,
}

impl Method {
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// What the method does, for the schema's readers.
    fn description(self) -> &'static str {
        match self {
            Method::Initialize => {
                "The server's identity and capabilities. Not required before other methods."
            }
            Method::New => {
                "Opens a daemon session in cwd (absolute; default: the daemon's $HOME), answered once it is ready; its first updates follow the answer."
            }
            Method::Attach => {
                "Subscribes to a running or saved session: its history as session/update notifications, then the answer; a waiting approval is asked after it."
            }
            Method::List => "The daemon's running sessions and the saved ones.",
            Method::Prompt => {
                "Sends a prompt; answered at once, the turn then streams as notifications."
            }
            Method::Cancel => "Interrupts the session's turn (also accepted as a notification).",
            Method::Close => {
                "Interrupts, then ends the session (or detaches when other clients are attached)."
            }
            Method::SetMode => "Sets the approval mode; answered once applied.",
        }
    }

    fn params(self, generator: &mut SchemaGenerator) -> Value {
        let schema = match self {
            Method::Initialize | Method::List => generator.subschema_for::<NoParams>(),
            Method::New => generator.subschema_for::<NewSession>(),
            Method::Attach | Method::Cancel | Method::Close => {
                generator.subschema_for::<SessionRef>()
            }
            Method::Prompt => generator.subschema_for::<PromptParams>(),
            Method::SetMode => generator.subschema_for::<SetMode>(),
        };
        schema.to_value()
    }

    fn result(self, generator: &mut SchemaGenerator) -> Value {
        let schema = match self {
            Method::Initialize => generator.subschema_for::<InitializeResult>(),
            Method::New | Method::Attach => generator.subschema_for::<Opened>(),
            Method::List => generator.subschema_for::<Listed>(),
            Method::Prompt | Method::Cancel | Method::Close | Method::SetMode => {
                generator.subschema_for::<Done>()
            }
        };
        schema.to_value()
    }
}

/// `initialize` and `session/list` take no params (any object, or none).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct NoParams {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef {
    pub session_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewSession {
    /// An absolute path.
    #[serde(default)]
    pub cwd: Option<std::path::PathBuf>,
    /// Another agent the daemon hosts (`[engines.<name>]`); jucode's own when absent.
    #[serde(default)]
    pub engine: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptParams {
    pub session_id: String,
    pub prompt: Vec<PromptBlock>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetMode {
    pub session_id: String,
    /// `manual`, `plan`, `auto-edit`, `auto` or `full-access`.
    pub mode_id: String,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub protocol_version: u32,
    pub capabilities: Value,
    pub info: ServerInfo,
    pub auth_methods: Vec<Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ServerInfo {
    pub name: &'static str,
    pub title: &'static str,
    pub version: &'static str,
}

impl InitializeResult {
    pub fn jucode() -> Self {
        Self {
            protocol_version: 2,
            capabilities: json!({"session": {"list": {}, "attach": {}, "cancel": {}, "close": {}, "setMode": {}}, "permissions": {}}),
            info: ServerInfo {
                name: "jucode",
                title: "jucode",
                version: crate::protocol::VERSION,
            },
            auth_methods: Vec::new(),
        }
    }
}

/// What the session is doing as it is opened.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpenState {
    Idle,
    Running,
    RequiresAction,
}

/// The answer to `session/new` and `session/attach`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Opened {
    pub session_id: String,
    pub modes: ModeState,
    pub config_options: Vec<ConfigOption>,
    pub state: OpenState,
}

/// The answer to `session/list`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Listed {
    pub sessions: Vec<ListedSession>,
    #[serde(rename = "_meta")]
    pub meta: Map<String, Value>,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListedSession {
    pub session_id: String,
    pub cwd: Option<String>,
    /// `active` (running in the daemon) or `saved`.
    pub status: &'static str,
    /// The session's status message (`ready`, `streaming` ...), `saved` when not running.
    pub state: String,
    /// Its first message's first line.
    pub title: Option<String>,
    pub clients: usize,
    pub live: bool,
    /// The `[engines.<name>]` entry it runs on; absent for jucode's own engine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub updated_at: u64,
    /// Why its file cannot be continued, only when it cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
    #[serde(rename = "_meta")]
    pub meta: Map<String, Value>,
}

/// An answer that says only "done".
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct Done {}

/// `session/update` params.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateParams<'a> {
    pub session_id: &'a str,
    pub update: &'a SessionUpdate,
}

/// The client's answer to `session/request_permission`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PermissionAnswer {
    pub outcome: PermissionOutcome,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PermissionOutcome {
    Selected {
        #[serde(rename = "optionId")]
        option_id: String,
    },
    Cancelled,
}

/// The dialect's JSON Schema (draft 2020-12): `methods` (params and result of each),
/// `notifications`, `serverRequests`, and `$defs.ClientMessage` / `$defs.ServerMessage`,
/// the JSON-RPC envelopes every message on the socket matches.
pub fn schema() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let mut methods = Map::new();
    let mut requests = Vec::new();
    for method in <Method as strum::IntoEnumIterator>::iter() {
        let params = method.params(&mut generator);
        let result = method.result(&mut generator);
        requests.push(json!({
            "type": "object",
            "required": ["jsonrpc", "id", "method"],
            "properties": {
                "jsonrpc": {"const": "2.0"},
                "id": {"$ref": "#/$defs/RequestId"},
                "method": {"const": method.name()},
                "params": params,
            }
        }));
        methods.insert(
            method.name().to_owned(),
            json!({"description": method.description(), "params": params, "result": result}),
        );
    }
    let update = generator
        .subschema_for::<UpdateParams<'static>>()
        .to_value();
    let cancel = generator.subschema_for::<CancelRequestParams>().to_value();
    let permission = generator
        .subschema_for::<PermissionRequest<'static>>()
        .to_value();
    let answer = generator.subschema_for::<PermissionAnswer>().to_value();
    let notification = |method: &str, params: &Value| {
        json!({
            "type": "object",
            "required": ["jsonrpc", "method", "params"],
            "not": {"required": ["id"]},
            "properties": {"jsonrpc": {"const": "2.0"}, "method": {"const": method}, "params": params}
        })
    };
    let mut defs: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    defs.insert(
        "RequestId".to_owned(),
        json!({"type": ["integer", "string"]}),
    );
    defs.insert(
        "RpcError".to_owned(),
        json!({
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": true}
        }),
    );
    // A client's cancel may come as a notification.
    let cancel_notification = notification("session/cancel", &methods["session/cancel"]["params"]);
    let mut client = requests;
    client.push(cancel_notification);
    client.push(json!({
        "type": "object",
        "required": ["jsonrpc", "id"],
        "oneOf": [{"required": ["result"]}, {"required": ["error"]}],
        "properties": {"jsonrpc": {"const": "2.0"}, "id": {"$ref": "#/$defs/RequestId"}, "result": answer, "error": {"$ref": "#/$defs/RpcError"}}
    }));
    defs.insert("ClientMessage".to_owned(), json!({"oneOf": client}));
    defs.insert(
        "ServerMessage".to_owned(),
        json!({"oneOf": [
            notification("session/update", &update),
            notification("$/cancel_request", &cancel),
            {
                "type": "object",
                "required": ["jsonrpc", "id", "method", "params"],
                "properties": {"jsonrpc": {"const": "2.0"}, "id": {"$ref": "#/$defs/RequestId"}, "method": {"const": "session/request_permission"}, "params": permission}
            },
            {
                "type": "object",
                "required": ["jsonrpc", "id", "result"],
                "not": {"required": ["method"]},
                "properties": {"jsonrpc": {"const": "2.0"}, "id": {"$ref": "#/$defs/RequestId"}, "result": {"type": "object"}}
            },
            {
                "type": "object",
                "required": ["jsonrpc", "id", "error"],
                "not": {"required": ["method"]},
                "properties": {"jsonrpc": {"const": "2.0"}, "id": {"anyOf": [{"$ref": "#/$defs/RequestId"}, {"type": "null"}]}, "error": {"$ref": "#/$defs/RpcError"}}
            }
        ]}),
    );
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "jucode WebSocket JSON-RPC dialect (docs/websocket.md)",
        "description": "Every message a dashboard sends matches $defs.ClientMessage, every message jucode sends $defs.ServerMessage; methods holds each method's params and result, notifications and serverRequests what jucode sends.",
        "methods": methods,
        "notifications": {
            "session/update": {"params": update},
            "$/cancel_request": {"params": cancel}
        },
        "serverRequests": {
            "session/request_permission": {"params": permission, "result": answer}
        },
        "$defs": defs,
    })
}

/// [`schema`] as the committed document's text.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap_or_default();
    text.push('\n');
    text
}
