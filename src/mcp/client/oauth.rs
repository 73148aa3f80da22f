//! Signing in to a remote MCP server (the MCP authorization flow, OAuth 2.1): where
//! its tokens are kept, connecting with them, and the browser sign-in that gets them.
//!
//! The protocol work (protected resource and authorization server discovery, dynamic
//! client registration, PKCE S256, the `resource` parameter, refresh) is `rmcp`'s
//! auth support; this module decides where tokens live (one file per server and
//! profile, private to the user), runs the loopback redirect, and tells every session
//! of the process when a sign-in completes.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, CredentialStore, OAuthState,
    StoredCredentials,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::protocol::McpOAuthConfig;

/// How long a started sign-in waits for the browser's redirect.
pub const SIGN_IN_WINDOW: Duration = Duration::from_secs(600);

/// The folder of the profile that holds the servers' tokens.
pub fn tokens_dir(profile_dir: &Path) -> PathBuf {
    profile_dir.join("mcp-auth")
}

/// The token file of server `name` at `url`: one per server and profile, named by a
/// digest so a server renamed or moved to another URL signs in afresh.
pub fn token_path(profile_dir: &Path, name: &str, url: &str) -> PathBuf {
    let digest = Sha256::digest(format!("{name}\n{url}").as_bytes());
    let hex: String = digest[..12]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    tokens_dir(profile_dir).join(format!("{hex}.json"))
}

/// Counts the sign-ins this process completed: a session whose server waits for one
/// tries again when it moves (another session of the daemon may have signed in).
pub fn sign_ins() -> watch::Receiver<u64> {
    sign_in_counter().subscribe()
}

fn sign_in_counter() -> &'static watch::Sender<u64> {
    static COUNTER: OnceLock<watch::Sender<u64>> = OnceLock::new();
    COUNTER.get_or_init(|| watch::channel(0).0)
}

fn signed_in() {
    sign_in_counter().send_modify(|count| *count += 1);
}

/// The sign-ins running in this process, by token file: their addresses.
fn running_sign_ins() -> std::sync::MutexGuard<'static, std::collections::HashMap<PathBuf, String>>
{
    static RUNNING: OnceLock<std::sync::Mutex<std::collections::HashMap<PathBuf, String>>> =
        OnceLock::new();
    RUNNING
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The address of the sign-in running for this token file, if one is.
pub fn running(tokens: &Path) -> Option<String> {
    running_sign_ins().get(tokens).cloned()
}

pub fn started(tokens: PathBuf, address: String) {
    running_sign_ins().insert(tokens, address);
}

pub fn ended(tokens: &Path) {
    running_sign_ins().remove(tokens);
}

/// A server's tokens on disk: a 0600 file in a 0700 folder, written whole (a temporary
/// file renamed over it), never logged.
#[derive(Debug, Clone)]
pub struct TokenFile {
    path: PathBuf,
}

impl TokenFile {
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    pub fn exists(&self) -> bool {
        self.path.is_file()
    }

    /// When the file last changed (a sign-in in another process writes it).
    pub fn modified(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|meta| meta.modified())
            .ok()
    }

    fn read(&self) -> Result<Option<StoredCredentials>, String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|err| format!("{} is not a token file: {err}", self.path.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(format!("cannot read {}: {err}", self.path.display())),
        }
    }

    fn write(&self, credentials: &StoredCredentials) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let dir = self
            .path
            .parent()
            .ok_or_else(|| format!("{} has no folder", self.path.display()))?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        // A folder made earlier with looser rights is tightened: it holds secrets.
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        let text = serde_json::to_vec(credentials)
            .map_err(|err| format!("cannot encode the tokens: {err}"))?;
        let temporary = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .map_err(|err| format!("cannot write {}: {err}", temporary.display()))?;
        file.write_all(&text)
            .and_then(|()| file.sync_all())
            .map_err(|err| format!("cannot write {}: {err}", temporary.display()))?;
        std::fs::rename(&temporary, &self.path)
            .map_err(|err| format!("cannot write {}: {err}", self.path.display()))
    }

    /// Forgets the tokens; the access and refresh tokens it held, for revocation.
    pub fn remove(&self) -> Result<Vec<String>, String> {
        let held = self
            .read()
            .ok()
            .flatten()
            .and_then(|stored| serde_json::to_value(stored.token_response).ok())
            .map(|tokens| {
                ["access_token", "refresh_token"]
                    .iter()
                    .filter_map(|field| tokens.get(field)?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(held),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(held),
            Err(err) => Err(format!("cannot remove {}: {err}", self.path.display())),
        }
    }
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let file = self.clone();
        tokio::task::spawn_blocking(move || file.read())
            .await
            .map_err(|err| AuthError::CredentialStoreError(err.to_string()))?
            .map_err(AuthError::CredentialStoreError)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let file = self.clone();
        tokio::task::spawn_blocking(move || file.write(&credentials))
            .await
            .map_err(|err| AuthError::CredentialStoreError(err.to_string()))?
            .map_err(AuthError::CredentialStoreError)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let file = self.clone();
        tokio::task::spawn_blocking(move || file.remove().map(|_| ()))
            .await
            .map_err(|err| AuthError::CredentialStoreError(err.to_string()))?
            .map_err(AuthError::CredentialStoreError)
    }
}

/// An authorization manager for the server at `url` keeping its tokens in `tokens`.
async fn manager(
    url: &str,
    tokens: &TokenFile,
    http: &reqwest::Client,
) -> Result<AuthorizationManager, String> {
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|err| format!("cannot set up the sign-in: {err}"))?;
    manager
        .with_client(http.clone())
        .map_err(|err| format!("cannot set up the sign-in: {err}"))?;
    manager.set_credential_store(tokens.clone());
    Ok(manager)
}

/// The HTTP client for a server with stored tokens (each request carries the access
/// token, refreshed before it expires), or `None` when there are none yet.
pub async fn authorized(
    url: &str,
    tokens: &TokenFile,
    http: &reqwest::Client,
) -> Result<Option<AuthClient<reqwest::Client>>, String> {
    if !tokens.exists() {
        return Ok(None);
    }
    let mut manager = manager(url, tokens, http).await?;
    let ready = manager
        .initialize_from_store()
        .await
        .map_err(|err| format!("the stored sign-in cannot be used: {err}"))?;
    Ok(ready.then(|| AuthClient::new(http.clone(), manager)))
}

/// A started sign-in: the address to open in a browser, and its end.
pub struct SignIn {
    pub url: String,
    pub done: tokio::task::JoinHandle<Result<(), String>>,
}

/// Starts signing in to the server at `url`: discovery from its `WWW-Authenticate`
/// challenge, registration (or the configured client), and a loopback listener on
/// `127.0.0.1` for the redirect. The tokens land in `tokens` when the browser comes
/// back with the right `state`; anything else ends the sign-in with the reason.
pub async fn sign_in(
    url: &str,
    challenge: Option<String>,
    config: Option<&McpOAuthConfig>,
    tokens: &TokenFile,
    http: &reqwest::Client,
) -> Result<SignIn, String> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|err| format!("cannot listen for the sign-in's redirect: {err}"))?;
    let port = listener
        .local_addr()
        .map_err(|err| format!("cannot listen for the sign-in's redirect: {err}"))?
        .port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let mut request = AuthorizationRequest::new(redirect.clone()).with_client_name("jucode");
    if let Some(challenge) = challenge {
        request = request.with_challenge(challenge);
    }
    if let Some(config) = config {
        if let Some(client_id) = &config.client_id {
            request = request.with_preregistered_client(client_id.clone());
            if let Some(secret) = &config.client_secret {
                request = request.with_client_secret(secret.clone());
            }
        }
        if !config.scopes.is_empty() {
            request = request.with_scopes(config.scopes.iter().cloned());
        }
    }
    let mut state = OAuthState::Unauthorized(manager(url, tokens, http).await?);
    state
        .start_authorization(request)
        .await
        .map_err(|err| format!("cannot start the sign-in: {err}"))?;
    let address = state
        .get_authorization_url()
        .await
        .map_err(|err| format!("cannot start the sign-in: {err}"))?;
    let done = tokio::spawn(async move {
        let result = tokio::time::timeout(SIGN_IN_WINDOW, redirected(listener, &mut state))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "no sign-in came back within {} minutes",
                    SIGN_IN_WINDOW.as_secs() / 60
                ))
            });
        if result.is_ok() {
            signed_in();
        }
        result
    });
    Ok(SignIn { url: address, done })
}

/// Waits for the browser on the loopback listener. Requests for other paths (a
/// browser's favicon) are answered 404 and waited past; the first `/callback` decides.
async fn redirected(
    listener: tokio::net::TcpListener,
    state: &mut OAuthState,
) -> Result<(), String> {
    loop {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|err| format!("the sign-in's listener failed: {err}"))?;
        let Some(target) = request_target(&mut stream).await else {
            continue;
        };
        let Some(query) = target.strip_prefix("/callback") else {
            respond(&mut stream, "404 Not Found", "Not found.").await;
            continue;
        };
        let params: Vec<(String, String)> =
            url::form_urlencoded::parse(query.trim_start_matches('?').as_bytes())
                .into_owned()
                .collect();
        let param = |name: &str| {
            params
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        if let Some(error) = param("error") {
            let why = match param("error_description") {
                Some(description) => format!("{error}: {description}"),
                None => error,
            };
            respond(&mut stream, "400 Bad Request", "The sign-in was refused.").await;
            return Err(format!(
                "the authorization server refused the sign-in ({why})"
            ));
        }
        let (Some(code), Some(csrf)) = (param("code"), param("state")) else {
            respond(&mut stream, "400 Bad Request", "The redirect had no code.").await;
            return Err("the redirect carried no code and state".to_owned());
        };
        return match state.handle_callback(&code, &csrf).await {
            Ok(()) => {
                respond(
                    &mut stream,
                    "200 OK",
                    "Signed in. You can close this tab and go back to jucode.",
                )
                .await;
                Ok(())
            }
            Err(err) => {
                respond(&mut stream, "400 Bad Request", "The sign-in failed.").await;
                Err(format!("the sign-in failed: {err}"))
            }
        };
    }
}

/// The target of the request on `stream` (its headers read and dropped).
async fn request_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .ok()?
            .ok()?;
        if read == 0 || head.len() > 16 * 1024 {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let line = head.split(|&byte| byte == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    (parts.next()? == "GET").then_some(())?;
    parts.next().map(str::to_owned)
}

async fn respond(stream: &mut tokio::net::TcpStream, status: &str, text: &str) {
    let body = format!("<!doctype html><title>jucode</title><p>{text}</p>\n");
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Revokes `held` tokens where the server's authorization server offers revocation
/// (RFC 7009); a failure is only logged, the tokens are forgotten either way.
pub async fn revoke(url: &str, held: Vec<String>, http: &reqwest::Client) {
    if held.is_empty() {
        return;
    }
    let Ok(manager) = AuthorizationManager::new(url).await else {
        return;
    };
    let Ok(resolution) = manager.resolve_metadata().await else {
        return;
    };
    let Some(endpoint) = resolution
        .metadata
        .additional_fields
        .get("revocation_endpoint")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    for token in held {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", &token)
            .finish();
        let sent = http
            .post(&endpoint)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await;
        if let Err(err) = sent {
            tracing::debug!(%err, "revoking an MCP token failed");
        }
    }
}
