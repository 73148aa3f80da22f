//! MCP servers: the client side of the Model Context Protocol, for one session.
//!
//! [`McpManager`] implements what the engine asks of a session's servers
//! ([`crate::engine::McpServers`]) and offers their tools to its turns
//! ([`crate::engine::ToolSource`]). Below it:
//!
//! - `client`: the wrapper around `rmcp`, the only code that names it (rmcp changes
//!   often; an upgrade touches that one file);
//! - `task`: one server's task (connect, list, re-list, notice its death);
//! - `process`: a stdio server's process group and stderr;
//! - `tool`: one server tool as an engine tool, gating by `readOnlyHint`, and results
//!   rendered for the model;
//! - `naming`: the sanitised, unique names tools are offered under.
//!
//! See `docs/mcp.md` for configuration, the protocol ops and the lifecycle.

mod client;
mod manager;
mod naming;
pub mod process;
mod task;
mod tool;

pub use manager::McpManager;

/// `jucode mcp login NAME`: signs in to the remote server `name` of the profile's
/// config outside any session. `show` gets the address to open; the future ends when
/// the browser came back (tokens saved, where every session of the profile finds them)
/// or the sign-in failed.
pub async fn login(
    config_path: &std::path::Path,
    name: &str,
    show: impl FnOnce(&str),
) -> Result<(), String> {
    let (url, oauth) = remote_server(config_path, name)?;
    let profile_dir = profile_of(config_path);
    let tokens = client::oauth::TokenFile::new(client::oauth::token_path(&profile_dir, name, &url));
    let http = client::http_client()?;
    let sign_in = client::oauth::sign_in(&url, None, oauth.as_deref(), &tokens, &http).await?;
    show(&sign_in.url);
    sign_in
        .done
        .await
        .unwrap_or_else(|err| Err(format!("the sign-in stopped: {err}")))
}

/// `jucode mcp logout NAME`: forgets the server's tokens, revoking them where its
/// authorization server offers it.
pub async fn logout(config_path: &std::path::Path, name: &str) -> Result<bool, String> {
    let (url, _) = remote_server(config_path, name)?;
    let tokens = client::oauth::TokenFile::new(client::oauth::token_path(
        &profile_of(config_path),
        name,
        &url,
    ));
    let had = tokens.exists();
    let held = tokens.remove()?;
    if let Ok(http) = client::http_client() {
        client::oauth::revoke(&url, held, &http).await;
    }
    Ok(had)
}

fn profile_of(config_path: &std::path::Path) -> std::path::PathBuf {
    config_path.parent().map_or_else(
        || std::path::PathBuf::from("."),
        std::path::Path::to_path_buf,
    )
}

/// The URL and sign-in settings of a configured remote server.
fn remote_server(
    config_path: &std::path::Path,
    name: &str,
) -> Result<(String, Option<Box<crate::protocol::McpOAuthConfig>>), String> {
    let loaded = crate::config::LoadedConfig::load(config_path);
    let Some(server) = loaded.config.mcp_servers.get(name) else {
        let known: Vec<&str> = loaded
            .config
            .mcp_servers
            .keys()
            .map(String::as_str)
            .collect();
        return Err(format!(
            "no MCP server {name} in {} (it has: {})",
            config_path.display(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ));
    };
    let Some(url) = server.url.clone() else {
        return Err(format!(
            "MCP server {name} runs as a command, not at a URL: it has no sign-in"
        ));
    };
    let mut oauth = server.oauth.clone();
    if let Some(oauth) = oauth.as_mut()
        && let Some(secret) = &oauth.client_secret
    {
        let env: std::collections::HashMap<String, String> = std::env::vars().collect();
        oauth.client_secret = Some(
            crate::config::mcp::expand_vars(secret, |var| env.get(var).cloned())
                .map_err(|problem| format!("oauth.client_secret: {problem}"))?,
        );
    }
    Ok((url, oauth))
}
