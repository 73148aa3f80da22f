//! A remote MCP server that needs a sign-in, for the tests: one loopback HTTP server
//! that is both the protected resource (a streamable-HTTP MCP endpoint at `/mcp`
//! answering `401` with a `WWW-Authenticate` challenge without a valid bearer token)
//! and its OAuth 2.1 authorization server (RFC 9728 and RFC 8414 metadata, RFC 7591
//! dynamic registration, an `/authorize` that signs the "user" in at once and
//! redirects, a `/token` that checks PKCE S256, refresh, RFC 7009 revocation). Written
//! from the specifications, not from jucode's client.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use sha2::Digest;

/// What the server saw and holds.
#[derive(Default)]
pub struct Seen {
    pub registrations: Vec<Value>,
    pub authorize: Vec<HashMap<String, String>>,
    pub token: Vec<HashMap<String, String>>,
    pub revoked: Vec<String>,
    /// The `Authorization` header of each `/mcp` request (or `-`).
    pub mcp_authorization: Vec<String>,
    codes: HashMap<String, HashMap<String, String>>,
    access: Vec<String>,
    refresh: Vec<String>,
    next: u64,
    /// `expires_in` of the tokens it issues.
    pub expires_in: u64,
}

pub struct Protected {
    port: u16,
    seen: Arc<Mutex<Seen>>,
    _runtime: tokio::runtime::Runtime,
}

impl Protected {
    pub fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen {
            expires_in: 3600,
            ..Seen::default()
        }));
        let shared = seen.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(request, port, shared).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Self {
            port,
            seen,
            _runtime: runtime,
        }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base())
    }

    pub fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap()
    }

    /// Every token it issued stops working (as a user revoking the app would do).
    pub fn revoke_everything(&self) {
        let mut seen = self.seen();
        seen.access.clear();
        seen.refresh.clear();
    }

    /// The tokens it issued, access and refresh.
    pub fn issued(&self) -> Vec<String> {
        let seen = self.seen();
        let mut all = Vec::new();
        for n in 1..=seen.next {
            all.push(format!("access-{n}-secret"));
            all.push(format!("refresh-{n}-secret"));
        }
        all
    }
}

/// A browser's GET of `url`, redirects not followed: its status and `Location`.
pub fn browse(url: &str) -> (u16, Option<String>) {
    let rest = url.strip_prefix("http://").expect("a loopback http URL");
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let mut stream = TcpStream::connect(authority).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let location = response.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("location")
            .then(|| value.trim().to_owned())
    });
    (status, location)
}

/// A query string's parameters.
pub fn query_of(url: &str) -> HashMap<String, String> {
    url.split_once('?')
        .map(|(_, query)| form(query.as_bytes()))
        .unwrap_or_default()
}

fn form(body: &[u8]) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

type Body = Full<Bytes>;

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn json_reply(status: StatusCode, body: Value) -> Response<Body> {
    reply(status, "application/json", body.to_string())
}

async fn handle(
    request: Request<hyper::body::Incoming>,
    port: u16,
    seen: Arc<Mutex<Seen>>,
) -> Response<Body> {
    let base = format!("http://127.0.0.1:{port}");
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let authorization = request
        .headers()
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|body| body.to_bytes())
        .unwrap_or_default();
    let mut seen = seen.lock().unwrap();
    match (method.as_str(), path.as_str()) {
        ("GET", p) if p.starts_with("/.well-known/oauth-protected-resource") => json_reply(
            StatusCode::OK,
            json!({"resource": format!("{base}/mcp"), "authorization_servers": [base],
                "scopes_supported": ["tracker"], "bearer_methods_supported": ["header"]}),
        ),
        ("GET", p)
            if p.starts_with("/.well-known/oauth-authorization-server")
                || p.starts_with("/.well-known/openid-configuration") =>
        {
            json_reply(
                StatusCode::OK,
                json!({"issuer": base, "authorization_endpoint": format!("{base}/authorize"),
                    "token_endpoint": format!("{base}/token"),
                    "registration_endpoint": format!("{base}/register"),
                    "revocation_endpoint": format!("{base}/revoke"),
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["authorization_code", "refresh_token"],
                    "code_challenge_methods_supported": ["S256"],
                    "token_endpoint_auth_methods_supported": ["none"],
                    "scopes_supported": ["tracker"]}),
            )
        }
        ("POST", "/register") => {
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            seen.registrations.push(request.clone());
            let client = format!("client-{}", seen.registrations.len());
            json_reply(
                StatusCode::CREATED,
                json!({"client_id": client, "redirect_uris": request["redirect_uris"],
                    "token_endpoint_auth_method": "none",
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"]}),
            )
        }
        ("GET", "/authorize") => {
            let params = form(query.as_bytes());
            seen.authorize.push(params.clone());
            let (Some(redirect), Some(state)) = (params.get("redirect_uri"), params.get("state"))
            else {
                return reply(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    "no redirect_uri or state".into(),
                );
            };
            if params.get("code_challenge_method").map(String::as_str) != Some("S256")
                || params.get("response_type").map(String::as_str) != Some("code")
            {
                return reply(
                    StatusCode::BAD_REQUEST,
                    "text/plain",
                    "PKCE S256 and code only".into(),
                );
            }
            seen.next += 1;
            let code = format!("code-{}", seen.next);
            seen.codes.insert(code.clone(), params.clone());
            let location = format!(
                "{redirect}?code={code}&state={}",
                url::form_urlencoded::byte_serialize(state.as_bytes()).collect::<String>()
            );
            Response::builder()
                .status(StatusCode::FOUND)
                .header("location", location)
                .body(Full::new(Bytes::new()))
                .unwrap()
        }
        ("POST", "/token") => {
            let params = form(&body);
            seen.token.push(params.clone());
            let invalid = || json_reply(StatusCode::BAD_REQUEST, json!({"error": "invalid_grant"}));
            match params.get("grant_type").map(String::as_str) {
                Some("authorization_code") => {
                    let Some(asked) = params.get("code").and_then(|code| seen.codes.remove(code))
                    else {
                        return invalid();
                    };
                    let verifier = params.get("code_verifier").cloned().unwrap_or_default();
                    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .encode(sha2::Sha256::digest(verifier.as_bytes()));
                    if asked.get("code_challenge") != Some(&challenge)
                        || asked.get("redirect_uri") != params.get("redirect_uri")
                    {
                        return invalid();
                    }
                    issue(&mut seen)
                }
                Some("refresh_token") => {
                    let token = params.get("refresh_token").cloned().unwrap_or_default();
                    if !seen.refresh.contains(&token) {
                        return invalid();
                    }
                    seen.next += 1;
                    issue(&mut seen)
                }
                _ => json_reply(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "unsupported_grant_type"}),
                ),
            }
        }
        ("POST", "/revoke") => {
            let params = form(&body);
            if let Some(token) = params.get("token") {
                seen.revoked.push(token.clone());
                seen.access.retain(|held| held != token);
                seen.refresh.retain(|held| held != token);
            }
            reply(StatusCode::OK, "text/plain", String::new())
        }
        ("POST", "/mcp") => {
            seen.mcp_authorization.push(authorization.clone());
            let token = authorization.strip_prefix("Bearer ").unwrap_or_default();
            if !seen.access.iter().any(|held| held == token) {
                return Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .header(
                        "www-authenticate",
                        format!(
                            "Bearer error=\"invalid_token\", resource_metadata=\"{base}/.well-known/oauth-protected-resource\""
                        ),
                    )
                    .body(Full::new(Bytes::new()))
                    .unwrap();
            }
            let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let Some(id) = message.get("id").cloned() else {
                return reply(StatusCode::ACCEPTED, "text/plain", String::new());
            };
            let result = match message["method"].as_str() {
                Some("initialize") => {
                    json!({"protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}}, "serverInfo": {"name": "tracker", "version": "1.0.0"}})
                }
                Some("tools/list") => {
                    json!({"tools": [{"name": "whoami", "description": "Who is signed in",
                    "inputSchema": {"type": "object", "properties": {}},
                    "annotations": {"readOnlyHint": true}}]})
                }
                Some("tools/call") => {
                    json!({"content": [{"type": "text", "text": "hello from the protected tracker"}]})
                }
                _ => {
                    return json_reply(
                        StatusCode::OK,
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}}),
                    );
                }
            };
            json_reply(
                StatusCode::OK,
                json!({"jsonrpc": "2.0", "id": id, "result": result}),
            )
        }
        ("GET" | "DELETE", "/mcp") => {
            reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", String::new())
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", String::new()),
    }
}

fn issue(seen: &mut Seen) -> Response<Body> {
    let n = seen.next;
    let access = format!("access-{n}-secret");
    let refresh = format!("refresh-{n}-secret");
    seen.access.push(access.clone());
    seen.refresh.push(refresh.clone());
    json_reply(
        StatusCode::OK,
        json!({"access_token": access, "token_type": "Bearer", "expires_in": seen.expires_in,
            "refresh_token": refresh, "scope": "tracker"}),
    )
}
