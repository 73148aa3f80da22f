//! The editor's `mcpServers` (of `session/new`, `session/load`, `session/resume`) as
//! `mcp_set` ops for this session only.
//!
//! ACP hands the agent the MCP servers the editor has configured, to use for that
//! session. They become session-scoped servers of the engine (`persist: false`): they
//! never land in the user's `config.toml`, and while the session lasts they take the
//! place of a configured server of the same name. Stdio and streamable HTTP are
//! supported (`mcpCapabilities.http`); the older SSE transport is not.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::protocol::{McpServerConfig, Op};
use crate::transport::jsonrpc::RpcError;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Server {
    name: String,
    #[serde(rename = "type")]
    transport: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<NameValue>,
    url: Option<String>,
    #[serde(default)]
    headers: Vec<NameValue>,
}

#[derive(Deserialize)]
struct NameValue {
    name: String,
    value: String,
}

fn pairs(list: Vec<NameValue>) -> BTreeMap<String, String> {
    list.into_iter()
        .map(|pair| (pair.name, pair.value))
        .collect()
}

/// The `mcp_set` ops for `servers` (the request's `mcpServers`, absent or a list), or
/// the invalid-params error naming the entry at fault. Nothing is sent when any entry
/// is wrong.
pub(super) fn ops(servers: Option<serde_json::Value>) -> Result<Vec<Op>, RpcError> {
    let Some(servers) = servers.filter(|value| !value.is_null()) else {
        return Ok(Vec::new());
    };
    let servers: Vec<Server> = serde_json::from_value(servers)
        .map_err(|err| RpcError::invalid_params(format!("invalid mcpServers: {err}")))?;
    let mut ops = Vec::with_capacity(servers.len());
    for server in servers {
        let name = server.name.clone();
        let invalid = |why: &str| RpcError::invalid_params(format!("mcpServers {name:?}: {why}"));
        let config = match server.transport.as_deref() {
            None | Some("stdio") => {
                let Some(command) = server.command else {
                    return Err(invalid("a stdio server needs a command"));
                };
                McpServerConfig {
                    command: Some(command),
                    args: server.args,
                    env: pairs(server.env),
                    ..McpServerConfig::default()
                }
            }
            Some("http") => {
                let Some(url) = server.url else {
                    return Err(invalid("an http server needs a url"));
                };
                McpServerConfig {
                    url: Some(url),
                    headers: pairs(server.headers),
                    ..McpServerConfig::default()
                }
            }
            Some("sse") => {
                return Err(invalid(
                    "the SSE transport is not supported (mcpCapabilities.sse is false): use stdio or http",
                ));
            }
            Some(other) => return Err(invalid(&format!("unknown transport type {other:?}"))),
        };
        ops.push(Op::McpSet {
            name,
            server: config,
            persist: false,
        });
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stdio_and_http_servers_become_session_servers() {
        let ops = ops(Some(json!([
            {"name": "fs", "command": "/bin/fs", "args": ["--root", "/p"], "env": [{"name": "K", "value": "v"}]},
            {"type": "http", "name": "web", "url": "https://mcp.example/", "headers": [{"name": "Authorization", "value": "Bearer t"}]},
        ])))
        .unwrap();
        let Op::McpSet {
            name,
            server,
            persist,
        } = &ops[0]
        else {
            panic!("{ops:?}");
        };
        assert_eq!((name.as_str(), *persist), ("fs", false));
        assert_eq!(server.command.as_deref(), Some("/bin/fs"));
        assert_eq!(server.args, ["--root", "/p"]);
        assert_eq!(server.env["K"], "v");
        let Op::McpSet { server, .. } = &ops[1] else {
            panic!("{ops:?}");
        };
        assert_eq!(server.url.as_deref(), Some("https://mcp.example/"));
        assert_eq!(server.headers["Authorization"], "Bearer t");
    }

    #[test]
    fn wrong_entries_are_invalid_params() {
        assert!(ops(None).unwrap().is_empty());
        assert!(ops(Some(json!(null))).unwrap().is_empty());
        for bad in [
            json!({"name": "x"}),
            json!([{"name": "x"}]),
            json!([{"type": "sse", "name": "x", "url": "http://h/"}]),
            json!([{"type": "ws", "name": "x"}]),
            json!([{"command": "c"}]),
        ] {
            assert!(ops(Some(bad.clone())).is_err(), "{bad}");
        }
    }
}
