//! The daemon's WebSocket server for dashboards and custom UIs: JSON-RPC 2.0 over text
//! frames, in the ACP-shaped dialect of `translate` (`docs/websocket.md`), and a small
//! dashboard page on the same listener.
//!
//! Each WebSocket connection is, inside, a client of the daemon like any other: every
//! session it creates or attaches to is a link of its own over the daemon's socket, so
//! per-client answers, late-joiner snapshots and first-come approvals are the daemon's.
//! Nothing waits on a dashboard: its messages go into a queue bounded in bytes, and one
//! that falls further behind is cut off (the daemon's sessions never notice).
//!
//! # Layout
//! - this file: where it listens, the accept loop, the checks before an upgrade.
//! - `http`: request heads, static files, the upgrade answer, the token comparison.
//! - `connection`: one dashboard connection's requests and its sessions.
//! - `outbox`: a connection's byte-bounded outbound queue, its writer, close frames.

mod connection;
mod http;
pub mod methods;
mod outbox;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_util::sync::CancellationToken;

use crate::transport::link::Backend;
/// The upgrade's reader and answer, for the fuzz targets (`crate::fuzzing`).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) use http::{read_request, upgrade_response};

/// Where and how the server listens.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// Every client must present it (when set).
    pub token: Option<String>,
    /// Origins allowed besides the server's own loopback ones.
    pub allowed_origins: Vec<String>,
    /// A connection whose unsent messages exceed this many bytes is cut off.
    pub max_queue_bytes: usize,
    /// The largest message (and frame) a client may send.
    pub max_message_bytes: usize,
    /// `jucode serve --server-config`: the one session this server serves (the serve
    /// process's own, which `/resume` may change). `None`: every daemon session.
    pub pinned: Option<Pinned>,
}

/// The session a `serve` process's server is pinned to, as it changes.
pub type Pinned = tokio::sync::watch::Receiver<Option<String>>;

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 23254;
pub const DEFAULT_TOKEN_ENV: &str = "JUCODE_WEBSOCKET_TOKEN";
pub const DEFAULT_MAX_QUEUE_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The most dashboard connections served at once.
const MAX_CONNECTIONS: usize = 256;

/// `--server-config`: the seed's `{host, port, headless}`, as JSON or a flat YAML
/// mapping (block `key: value` lines, or a flow `{key: value, ...}`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerFlags {
    pub host: Option<String>,
    pub port: Option<u16>,
    /// Accepted for compatibility; jucode has no terminal UI to hide.
    pub headless: Option<bool>,
}

pub fn parse_server_flags(text: &str) -> Result<ServerFlags, String> {
    let fields: Vec<(String, String)> = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .map(|(key, value)| {
                let value = match value {
                    serde_json::Value::String(text) => text,
                    other => other.to_string(),
                };
                (key, value)
            })
            .collect(),
        Ok(_) => return Err("--server-config must be a mapping".into()),
        Err(_) => {
            let body = text.trim();
            let body = body
                .strip_prefix('{')
                .and_then(|rest| rest.strip_suffix('}'))
                .unwrap_or(body);
            body.split([',', '\n'])
                .map(str::trim)
                .filter(|item| !item.is_empty() && !item.starts_with('#'))
                .map(|item| {
                    let (key, value) = item
                        .split_once(':')
                        .ok_or_else(|| format!("--server-config: cannot read {item:?}"))?;
                    let unquote = |s: &str| s.trim().trim_matches(['"', '\'']).to_owned();
                    Ok((unquote(key), unquote(value)))
                })
                .collect::<Result<_, String>>()?
        }
    };
    let mut flags = ServerFlags::default();
    for (key, value) in fields {
        match key.as_str() {
            "host" => flags.host = Some(value),
            "port" => {
                flags.port = Some(value.parse().map_err(|_| {
                    format!("--server-config: port must be a number from 0 to 65535, got {value}")
                })?)
            }
            "headless" => {
                flags.headless = Some(value.parse().map_err(|_| {
                    format!("--server-config: headless must be true or false, got {value}")
                })?)
            }
            other => return Err(format!("--server-config: unknown field {other:?}")),
        }
    }
    Ok(flags)
}

impl ServerConfig {
    /// What to serve from `[websocket]` and `--server-config` (which wins, field by
    /// field, and defaults to `127.0.0.1:23254`). `None`: nothing listens (neither is
    /// set, or the port is 0). `Err`: it must not listen (a non-loopback bind without
    /// a token).
    pub fn resolve(
        config: &crate::config::WebSocketConfig,
        flags: Option<&ServerFlags>,
        env: impl Fn(&str) -> Option<String>,
        token_file: Option<String>,
    ) -> Result<Option<Self>, String> {
        let port = match (flags, config.port) {
            (Some(flags), _) => flags.port.or(config.port).unwrap_or(DEFAULT_PORT),
            (None, Some(port)) => port,
            (None, None) => return Ok(None),
        };
        if port == 0 {
            return Ok(None);
        }
        let host = flags
            .and_then(|flags| flags.host.clone())
            .or_else(|| config.host.clone())
            .unwrap_or_else(|| DEFAULT_HOST.to_owned());
        let token_env = config.token_env.as_deref().unwrap_or(DEFAULT_TOKEN_ENV);
        let token = env(token_env)
            .or(token_file)
            .map(|token| token.trim().to_owned())
            .filter(|token| !token.is_empty());
        if !is_loopback(&host) && token.is_none() {
            return Err(format!(
                "the WebSocket server would listen on {host}, which is not a loopback address, without a token: set {token_env} (or write <profile>/websocket.token)"
            ));
        }
        Ok(Some(Self {
            host,
            port,
            token,
            allowed_origins: config.allowed_origins.clone().unwrap_or_default(),
            max_queue_bytes: config
                .max_queue_bytes
                .unwrap_or(DEFAULT_MAX_QUEUE_BYTES)
                .max(64 * 1024),
            max_message_bytes: MAX_MESSAGE_BYTES,
            pinned: None,
        }))
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The server `profile`'s `[websocket]` and `flags` (`--server-config`) ask for:
/// `Ok(None)` when nothing should listen, `Err` when it must not (see [`ServerConfig::resolve`]).
pub fn configured(
    profile: &crate::config::Profile,
    flags: Option<&ServerFlags>,
) -> Result<Option<ServerConfig>, String> {
    let loaded = crate::config::LoadedConfig::load(&profile.config_path());
    let token_file = std::fs::read_to_string(profile.dir.join("websocket.token")).ok();
    ServerConfig::resolve(
        &loaded.config.websocket,
        flags,
        |name| std::env::var(name).ok(),
        token_file,
    )
}

/// What a foreground daemon prints on stderr once its WebSocket server listens at
/// `address`: where, the dashboard's URL, and, without a token, what that means.
pub fn announcement(config: &ServerConfig, address: std::net::SocketAddr) -> String {
    let mut text = format!("jucode daemon: WebSocket JSON-RPC on ws://{address}/");
    match &config.token {
        Some(_) => text.push_str(&format!(
            "\njucode daemon: dashboard at http://{address}/#token=<token> (the configured token)"
        )),
        None => {
            text.push_str(&format!("\njucode daemon: dashboard at http://{address}/"));
            text.push_str(
                "\njucode daemon: no token: any program of any user on this machine can connect and \
                 drive your sessions (set JUCODE_WEBSOCKET_TOKEN to require one)",
            );
        }
    }
    text
}

/// Binds the listener (so a failure to bind is reported before anything is served).
pub async fn bind(config: &ServerConfig) -> std::io::Result<TcpListener> {
    let host = config.host.trim_start_matches('[').trim_end_matches(']');
    TcpListener::bind((host, config.port)).await
}

/// Serves until `stop` is cancelled; connections end with it.
pub async fn serve(
    listener: TcpListener,
    config: ServerConfig,
    backend: Backend,
    stop: CancellationToken,
) {
    let config = Arc::new(config);
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let local = listener.local_addr().ok();
    tracing::info!(address = ?local, "WebSocket server listening");
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(%err, "WebSocket accept failed");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(std::time::Duration::from_millis(50)) => continue,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let mut stream = stream;
            tokio::spawn(async move {
                http::refuse(
                    &mut stream,
                    "503 Service Unavailable",
                    "too many connections",
                )
                .await;
            });
            continue;
        };
        let (config, backend, stop) = (config.clone(), backend.clone(), stop.clone());
        tokio::spawn(async move {
            let _slot = slot;
            handle(stream, peer, local, &config, backend, stop).await;
        });
    }
}

/// One TCP connection: a page request, or a checked upgrade to a dashboard connection.
async fn handle(
    mut stream: TcpStream,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    config: &ServerConfig,
    backend: Backend,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let request = match http::read_request(&mut stream).await {
        Ok(request) => request,
        Err(Some(status)) => return http::refuse(&mut stream, status, "bad request").await,
        Err(None) => return,
    };
    let port = local.map_or(config.port, |addr| addr.port());
    // DNS rebinding: a page of another site resolving to this address sends its own
    // name as Host; only the names this server answers to are accepted.
    let host_ok = request
        .header("host")
        .is_some_and(|host| host_allowed(host, config));
    if !host_ok {
        tracing::warn!(%peer, "refused a request for another host");
        return http::refuse(&mut stream, "403 Forbidden", "host not allowed").await;
    }
    if !request.is_upgrade() {
        if request.method != "GET" && request.method != "HEAD" {
            return http::refuse(&mut stream, "405 Method Not Allowed", "GET only").await;
        }
        return match http::asset(&request.path) {
            Some((kind, body)) => {
                let headers = [("Content-Security-Policy", http::CONTENT_SECURITY_POLICY)];
                http::respond(&mut stream, "200 OK", kind, body, &headers).await
            }
            None => http::refuse(&mut stream, "404 Not Found", "not found").await,
        };
    }
    if let Some(origin) = request.header("origin")
        && !origin_allowed(origin, port, config)
    {
        tracing::warn!(%peer, origin, "refused a WebSocket from another origin");
        return http::refuse(&mut stream, "403 Forbidden", "origin not allowed").await;
    }
    let offered = request.subprotocols();
    if let Some(token) = &config.token {
        let bearer = request
            .header("authorization")
            .and_then(|value| value.strip_prefix("Bearer ").map(str::trim));
        let presented = bearer.map(str::to_owned).or_else(|| {
            offered
                .iter()
                .find_map(|protocol| protocol.strip_prefix("bearer.").map(str::to_owned))
        });
        let valid = presented
            .is_some_and(|given| http::constant_time_eq(given.as_bytes(), token.as_bytes()));
        if !valid {
            tracing::warn!(%peer, "refused a WebSocket without a valid token");
            return http::refuse(
                &mut stream,
                "401 Unauthorized",
                "a valid bearer token is required",
            )
            .await;
        }
    }
    let key = request.header("sec-websocket-key").map(str::to_owned);
    let Some(key) = key.filter(|key| {
        request.header("sec-websocket-version") == Some("13")
            && http::valid_key(key)
            && request.asks_connection_upgrade()
    }) else {
        return http::refuse(
            &mut stream,
            "400 Bad Request",
            "not a WebSocket version 13 request",
        )
        .await;
    };
    let protocol = offered
        .iter()
        .any(|offered| offered == http::SUBPROTOCOL)
        .then_some(http::SUBPROTOCOL);
    let answer = http::upgrade_response(&key, protocol);
    {
        use tokio::io::AsyncWriteExt;
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(config.max_message_bytes))
        .max_frame_size(Some(config.max_message_bytes));
    let ws = tokio_tungstenite::WebSocketStream::from_partially_read(
        stream,
        request.rest,
        Role::Server,
        Some(ws_config),
    )
    .await;
    tracing::debug!(%peer, "dashboard connected");
    connection::run(
        ws,
        backend,
        config.max_queue_bytes,
        config.pinned.clone(),
        stop,
    )
    .await;
    tracing::debug!(%peer, "dashboard disconnected");
}

/// The host part of a `Host` header (RFC 9110: `uri-host [":" port]`), or `None` for
/// anything else: a port that is not digits (`127.0.0.1:9@evil.example`, which a
/// lenient split would read as loopback), userinfo, a path, spaces.
fn host_name(value: &str) -> Option<&str> {
    let (name, port) = if let Some(rest) = value.strip_prefix('[') {
        let (literal, after) = rest.split_once(']')?;
        let valid = !literal.is_empty()
            && literal
                .bytes()
                .all(|byte| byte.is_ascii_hexdigit() || byte == b':' || byte == b'.');
        if !valid {
            return None;
        }
        let port = match after {
            "" => None,
            after => Some(after.strip_prefix(':')?),
        };
        (literal, port)
    } else {
        let (name, port) = match value.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (value, None),
        };
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b"-._~".contains(&byte));
        if !valid {
            return None;
        }
        (name, port)
    };
    let port_ok = port.is_none_or(|port| {
        (1..=5).contains(&port.len()) && port.bytes().all(|byte| byte.is_ascii_digit())
    });
    port_ok.then_some(name)
}

fn host_allowed(value: &str, config: &ServerConfig) -> bool {
    let Some(name) = host_name(value.trim()) else {
        return false;
    };
    let bound = config.host.trim_start_matches('[').trim_end_matches(']');
    is_loopback(name) || name.eq_ignore_ascii_case(bound)
}

fn origin_allowed(origin: &str, port: u16, config: &ServerConfig) -> bool {
    if config
        .allowed_origins
        .iter()
        .any(|allowed| allowed == origin)
    {
        return true;
    }
    let bound = config.host.trim_start_matches('[').trim_end_matches(']');
    let own = ["127.0.0.1", "localhost", "[::1]", bound];
    own.iter().any(|host| {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            (*host).to_owned()
        };
        origin == format!("http://{host}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::WebSocketConfig;

    #[test]
    fn only_a_well_formed_host_is_read() {
        assert_eq!(host_name("127.0.0.1:23254"), Some("127.0.0.1"));
        assert_eq!(host_name("localhost"), Some("localhost"));
        assert_eq!(host_name("[::1]:9"), Some("::1"));
        assert_eq!(host_name("[::1]"), Some("::1"));
        assert_eq!(host_name("dash.example:443"), Some("dash.example"));
        for bad in [
            "127.0.0.1:23254@evil.example",
            "user@127.0.0.1:9",
            "127.0.0.1:9/x",
            "127.0.0.1:",
            "127.0.0.1:123456",
            "[::1]x",
            "[::1]:9@evil",
            "[]:9",
            "",
            ":9",
            "127.0.0.1 :9",
        ] {
            assert_eq!(host_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn server_config_from_the_seed_fields() {
        assert_eq!(
            parse_server_flags(r#"{"host": "127.0.0.1", "port": 23254}"#).unwrap(),
            ServerFlags {
                host: Some("127.0.0.1".into()),
                port: Some(23254),
                headless: None
            }
        );
        assert_eq!(
            parse_server_flags("port: 0\nheadless: true").unwrap().port,
            Some(0)
        );
        assert_eq!(
            parse_server_flags("{host: localhost, port: 9}")
                .unwrap()
                .host
                .as_deref(),
            Some("localhost")
        );
        assert!(parse_server_flags(r#"{"colour": 1}"#).is_err());
        assert!(parse_server_flags(r#"{"port": "x"}"#).is_err());
        let none = |_: &str| None;
        let config = WebSocketConfig::default();
        assert!(
            ServerConfig::resolve(&config, None, none, None)
                .unwrap()
                .is_none()
        );
        let flags = ServerFlags::default();
        let on = ServerConfig::resolve(&config, Some(&flags), none, None)
            .unwrap()
            .unwrap();
        assert_eq!((on.host.as_str(), on.port), ("127.0.0.1", 23254));
        let off = ServerFlags {
            port: Some(0),
            ..ServerFlags::default()
        };
        assert!(
            ServerConfig::resolve(&config, Some(&off), none, None)
                .unwrap()
                .is_none()
        );
        let wide = ServerFlags {
            host: Some("0.0.0.0".into()),
            ..ServerFlags::default()
        };
        assert!(ServerConfig::resolve(&config, Some(&wide), none, None).is_err());
        let token = |_: &str| Some("s3cret".to_owned());
        let wide = ServerConfig::resolve(&config, Some(&wide), token, None)
            .unwrap()
            .unwrap();
        assert_eq!(wide.token.as_deref(), Some("s3cret"));
    }

    #[test]
    fn hosts_and_origins() {
        let config = ServerConfig {
            host: "127.0.0.1".into(),
            port: 9,
            token: None,
            allowed_origins: vec!["https://dash.example".into()],
            max_queue_bytes: 1,
            max_message_bytes: 1,
            pinned: None,
        };
        assert!(host_allowed("127.0.0.1:9", &config));
        assert!(host_allowed("localhost:9", &config));
        assert!(host_allowed("[::1]:9", &config));
        assert!(!host_allowed("evil.example:9", &config));
        assert!(origin_allowed("http://127.0.0.1:9", 9, &config));
        assert!(origin_allowed("http://localhost:9", 9, &config));
        assert!(origin_allowed("https://dash.example", 9, &config));
        assert!(!origin_allowed("http://evil.example:9", 9, &config));
        assert!(!origin_allowed("http://127.0.0.1:10", 9, &config));
    }
}
