//! One server's task: connects it, lists its tools and prompts, lists again when it says
//! they changed, and reports it failed when it dies. Every step is bounded by the
//! server's `timeout_ms` and stops at once when the task is told to stop (the server is
//! then shut down).

use std::sync::{Arc, Weak};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::{self, Endpoint, Notice, RemotePrompt, RemoteTool, SharedConnection};
use super::manager::{Inner, Status, timeout_of};
use crate::config::mcp as config;
use crate::engine::ports::tools::resolve_path;
use crate::protocol::McpServerConfig;

/// Notices a server may have waiting (list changes); more are dropped, as one pending
/// refresh covers them all.
const NOTICE_QUEUE: usize = 4;

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
        .map(|inner| (endpoint(&inner, &config), inner.elicit.clone()))
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
    let connected = tokio::select! {
        () = stop.cancelled() => return,
        connected = tokio::time::timeout(timeout, client::connect(endpoint, notices_tx, elicitor)) => connected,
    };
    let connection: SharedConnection = match connected {
        Ok(Ok(connection)) => Arc::new(connection),
        Ok(Err(message)) => return update(Status::Failed(message)),
        Err(_) => {
            return update(Status::Failed(format!(
                "no answer to the MCP handshake within {} ms (timeout_ms)",
                timeout.as_millis()
            )));
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
            Some(notice) = notices.recv() => match notice {
                Notice::ToolsChanged => refresh.0 = true,
                Notice::PromptsChanged => refresh.1 = true,
            },
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
fn endpoint(inner: &Inner, config: &McpServerConfig) -> Result<Endpoint, String> {
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
    })
}
