//! One server's task: connects it, lists its tools and prompts, lists again when it says
//! they changed, and reports it failed when it dies. Every step is bounded by the
//! server's `timeout_ms` and stops at once when the task is told to stop (the server is
//! then shut down).

use std::sync::{Arc, Weak};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::{
    self, ConnectError, Endpoint, Notice, RemotePrompt, RemoteTool, SharedConnection,
};
use super::manager::{Inner, Status, timeout_of};
use crate::config::mcp as config;
use crate::engine::ports::tools::resolve_path;
use crate::protocol::McpServerConfig;

/// Notices a server may have waiting (list changes); more are dropped, as one pending
/// refresh covers them all.
const NOTICE_QUEUE: usize = 4;

/// How often a server waiting for a sign-in looks at its token file, which a sign-in
/// in another process (`jucode mcp login`) writes.
const TOKEN_FILE_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// Connects one server and keeps it connected until it is stopped or dies.
pub(super) async fn run_server(
    inner: Weak<Inner>,
    name: String,
    generation: u64,
    config: McpServerConfig,
    stop: CancellationToken,
) {
    let update = |status: Status| {
        if let Some(inner) = inner.upgrade() {
            inner.update(&name, generation, status);
        }
    };
    let Some((endpoint, elicit)) = inner
        .upgrade()
        .map(|inner| (endpoint(&inner, &name, &config), inner.elicit.clone()))
    else {
        return;
    };
    let elicitor = client::Elicitor {
        server: name.clone(),
        requests: elicit,
    };
    let endpoint = match endpoint {
        Ok(endpoint) => endpoint,
        Err(message) => return update(Status::Failed(message)),
    };
    let timeout = timeout_of(&config);
    let (notices_tx, mut notices) = mpsc::channel(NOTICE_QUEUE);
    let mut sign_ins = client::oauth::sign_ins();
    // Round again when the server stops accepting its sign-in: it waits for a new one.
    loop {
        let connection: SharedConnection = loop {
            let attempt = client::connect(endpoint.clone(), notices_tx.clone(), elicitor.clone());
            let connected = tokio::select! {
                () = stop.cancelled() => return,
                connected = tokio::time::timeout(timeout, attempt) => connected,
            };
            match connected {
                Ok(Ok(connection)) => break Arc::new(connection),
                Ok(Err(ConnectError::Failed(message))) => return update(Status::Failed(message)),
                Ok(Err(ConnectError::SignIn { challenge, why })) => {
                    update(Status::NeedsAuth { why, challenge });
                    // Until a sign-in lands: this process's (any session's `mcp_login`),
                    // or another's (`jucode mcp login` writes the token file).
                    let tokens = match &endpoint {
                        Endpoint::Http {
                            tokens: Some(tokens),
                            ..
                        } => tokens.clone(),
                        _ => return,
                    };
                    let seen = tokens.modified();
                    sign_ins.borrow_and_update();
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return,
                            changed = sign_ins.changed() => {
                                if changed.is_err() {
                                    return;
                                }
                                break;
                            }
                            () = tokio::time::sleep(TOKEN_FILE_CHECK) => {
                                if tokens.exists() && tokens.modified() != seen {
                                    break;
                                }
                            }
                        }
                    }
                    update(Status::Connecting);
                }
                Err(_) => {
                    return update(Status::Failed(format!(
                        "no answer to the MCP handshake within {} ms (timeout_ms)",
                        timeout.as_millis()
                    )));
                }
            }
        };
        let (mut tools, mut prompts) = (Vec::new(), Vec::new());
        let mut refresh = (true, true);
        loop {
            if refresh != (false, false) {
                let listed = tokio::select! {
                    () = stop.cancelled() => return connection.shutdown().await,
                    reason = connection.closed() => return update(Status::Failed(reason)),
                    listed = tokio::time::timeout(timeout, list(&connection, refresh)) => listed,
                };
                match listed {
                    Ok(Ok((new_tools, new_prompts))) => {
                        tools = new_tools.unwrap_or(tools);
                        prompts = new_prompts.unwrap_or(prompts);
                    }
                    Ok(Err(message)) => {
                        connection.shutdown().await;
                        if connection.is_signed_out() {
                            break;
                        }
                        return update(Status::Failed(message));
                    }
                    Err(_) => {
                        connection.shutdown().await;
                        return update(Status::Failed(format!(
                            "the server did not list its tools and prompts within {} ms (timeout_ms)",
                            timeout.as_millis()
                        )));
                    }
                }
                update(Status::Connected {
                    connection: connection.clone(),
                    tools: tools.clone(),
                    prompts: prompts.clone(),
                });
                refresh = (false, false);
            }
            tokio::select! {
                () = stop.cancelled() => return connection.shutdown().await,
                reason = connection.closed() => return update(Status::Failed(reason)),
                () = connection.signed_out() => {
                    connection.shutdown().await;
                    break;
                }
                Some(notice) = notices.recv() => match notice {
                    Notice::ToolsChanged => refresh.0 = true,
                    Notice::PromptsChanged => refresh.1 = true,
                },
            }
        }
    }
}

type Lists = (Option<Vec<RemoteTool>>, Option<Vec<RemotePrompt>>);

/// Lists what `which` asks for (tools, prompts); `None` for what it does not.
async fn list(connection: &client::Connection, which: (bool, bool)) -> Result<Lists, String> {
    let tools = match which.0 {
        true => Some(connection.list_tools().await?),
        false => None,
    };
    let prompts = match which.1 {
        true => Some(connection.list_prompts().await?),
        false => None,
    };
    Ok((tools, prompts))
}

/// Where a definition points, with the session's environment applied.
fn endpoint(inner: &Inner, name: &str, config: &McpServerConfig) -> Result<Endpoint, String> {
    if let Some(command) = &config.command {
        let mut env = (*inner.env).clone();
        env.extend(config.env.clone());
        let cwd = match &config.cwd {
            Some(cwd) => resolve_path(&inner.cwd, &cwd.display().to_string()),
            None => inner.cwd.clone(),
        };
        return Ok(Endpoint::Stdio {
            command: command.clone(),
            args: config.args.clone(),
            env,
            cwd,
        });
    }
    let Some(url) = &config.url else {
        return Err("the definition has neither `command` nor `url`".to_owned());
    };
    let mut headers = Vec::new();
    for (header, text) in &config.headers {
        let text = config::expand_vars(text, |name| inner.env.get(name).cloned())
            .map_err(|problem| format!("headers.{header}: {problem}"))?;
        headers.push((header.clone(), text));
    }
    Ok(Endpoint::Http {
        url: url.clone(),
        headers,
        tokens: Some(client::oauth::TokenFile::new(client::oauth::token_path(
            &inner.profile_dir(),
            name,
            url,
        ))),
    })
}
