//! The params of the client's requests, as ACP shapes them.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

use crate::protocol::Op;
use crate::transport::translate::prompt::PromptBlock;

/// The methods an editor may call, one variant each: the connection dispatches on this
/// (an exhaustive match) and each arm reads the params type of this file it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
pub(super) enum Method {
    #[strum(serialize = "initialize")]
    Initialize,
    #[strum(serialize = "authenticate")]
    Authenticate,
    #[strum(serialize = "session/new")]
    New,
    #[strum(serialize = "session/load")]
    Load,
    #[strum(serialize = "session/resume")]
    Resume,
    #[strum(serialize = "session/list")]
    List,
    #[strum(serialize = "session/close")]
    Close,
    #[strum(serialize = "session/prompt")]
    Prompt,
    #[strum(serialize = "session/set_mode")]
    SetMode,
    #[strum(serialize = "session/set_config_option")]
    SetConfigOption,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Initialize {
    #[serde(default)]
    pub(super) protocol_version: Option<u64>,
    #[serde(default)]
    pub(super) client_capabilities: ClientCapabilities,
}

/// What the client serves, from `initialize` (omitted = unsupported).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ClientCapabilities {
    #[serde(default)]
    pub(super) fs: FsCapabilities,
    #[serde(default)]
    pub(super) terminal: bool,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct FsCapabilities {
    #[serde(default)]
    pub(super) read_text_file: bool,
    #[serde(default)]
    pub(super) write_text_file: bool,
}

impl ClientCapabilities {
    /// The op that makes this client serve a session's files and commands.
    pub(super) fn op(self) -> Option<Op> {
        (self.fs.read_text_file || self.fs.write_text_file || self.terminal).then_some(
            Op::ClientCapabilities {
                read_text_file: self.fs.read_text_file,
                write_text_file: self.fs.write_text_file,
                terminal: self.terminal,
            },
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct NewSession {
    pub(super) cwd: PathBuf,
    #[serde(default)]
    pub(super) mcp_servers: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SessionRef {
    pub(super) session_id: String,
    #[serde(default)]
    pub(super) mcp_servers: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListSessions {
    #[serde(default)]
    pub(super) cwd: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptParams {
    pub(super) session_id: String,
    pub(super) prompt: Vec<PromptBlock>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SetMode {
    pub(super) session_id: String,
    pub(super) mode_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SetConfig {
    pub(super) session_id: String,
    pub(super) config_id: String,
    pub(super) value: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CancelRequest {
    pub(super) request_id: Value,
}
