//! The HTTP side of the WebSocket listener: reading a request head (bounded in size and
//! time), the checks every request passes (Host, Origin, bearer token), the dashboard's
//! static files, and the upgrade answer.
//!
//! The server parses the request itself rather than letting the WebSocket library do
//! the handshake, so one listener serves both the page and the socket, and no request
//! is upgraded before it has passed every check.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest request head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The subprotocol the server speaks (and answers for browsers that offer it).
pub const SUBPROTOCOL: &str = "jucode";

/// What a request asked for, once it is read.
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// Bytes read past the head (a WebSocket client sends none before the answer).
    pub rest: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// Whether it asks to upgrade to a WebSocket.
    pub fn is_upgrade(&self) -> bool {
        self.header("upgrade")
            .is_some_and(|value| value.eq_ignore_ascii_case("websocket"))
    }

    /// Whether `Connection` lists the `upgrade` option (RFC 6455 4.2.1: a handshake
    /// without it is not one, whatever `Upgrade` says).
    pub fn asks_connection_upgrade(&self) -> bool {
        self.headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, value)| value.split(','))
            .any(|option| option.trim().eq_ignore_ascii_case("upgrade"))
    }

    /// The subprotocols offered (`Sec-WebSocket-Protocol`, comma separated).
    pub fn subprotocols(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case("sec-websocket-protocol"))
            .flat_map(|(_, value)| value.split(','))
            .map(|protocol| protocol.trim().to_owned())
            .filter(|protocol| !protocol.is_empty())
            .collect()
    }
}

/// Reads a request head; `Err` is the status line to answer with (or `None`: just
/// close, the peer sent nothing usable in time).
pub async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<Request, Option<&'static str>> {
    let mut buf = Vec::with_capacity(1024);
    let read = tokio::time::timeout(HEAD_TIMEOUT, async {
        let mut chunk = [0u8; 2048];
        loop {
            if let Some(end) = find_head_end(&buf) {
                return Ok(end);
            }
            if buf.len() > MAX_HEAD {
                return Err(Some("431 Request Header Fields Too Large"));
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return Err(None),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    let end = match read {
        Ok(Ok(end)) => end,
        Ok(Err(status)) => return Err(status),
        Err(_) => return Err(None),
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(&buf[..end]) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(Some("400 Bad Request")),
    }
    let headers = parsed
        .headers
        .iter()
        .map(|header| {
            (
                header.name.to_owned(),
                String::from_utf8_lossy(header.value).into_owned(),
            )
        })
        .collect();
    Ok(Request {
        method: parsed.method.unwrap_or("").to_owned(),
        path: parsed.path.unwrap_or("/").to_owned(),
        headers,
        rest: buf[end..].to_vec(),
    })
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Writes a short response and closes the exchange.
pub async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: &str,
    content_type: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
        body.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = tokio::time::timeout(HEAD_TIMEOUT, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        stream.flush().await
    })
    .await;
}

/// A refusal with its reason as the body.
pub async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, status: &str, why: &str) {
    let body = format!("{why}\n");
    respond(
        stream,
        status,
        "text/plain; charset=utf-8",
        body.as_bytes(),
        &[],
    )
    .await;
}

/// The dashboard's files, built into the binary.
pub fn asset(path: &str) -> Option<(&'static str, &'static [u8])> {
    let path = path.split(['?', '#']).next().unwrap_or("/");
    Some(match path {
        "/" | "/index.html" => (
            "text/html; charset=utf-8",
            include_str!("dashboard/index.html").as_bytes(),
        ),
        "/app.js" => (
            "text/javascript; charset=utf-8",
            include_str!("dashboard/app.js").as_bytes(),
        ),
        "/style.css" => (
            "text/css; charset=utf-8",
            include_str!("dashboard/style.css").as_bytes(),
        ),
        _ => return None,
    })
}

/// The page's policy: its own files only, and sockets to its own origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The answer that upgrades the connection, with the subprotocol chosen (if any).
/// RFC 6455 4.2.1: the key is the base64 of 16 bytes; anything else is not a WebSocket
/// client's handshake and gets no upgrade.
pub fn valid_key(key: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(key)
        .is_ok_and(|bytes| bytes.len() == 16)
}

pub fn upgrade_response(key: &str, protocol: Option<&str>) -> String {
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut head = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(protocol) = protocol {
        head.push_str(&format!("Sec-WebSocket-Protocol: {protocol}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Compares two secrets in time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_key_must_be_the_base64_of_16_bytes() {
        assert!(super::valid_key("dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!super::valid_key("!!"));
        assert!(!super::valid_key(""));
        assert!(!super::valid_key("dGhlIHNhbXBsZQ=="));
    }

    use super::*;

    #[tokio::test]
    async fn reads_a_head_and_its_headers() {
        let mut input: &[u8] = b"GET /socket HTTP/1.1\r\nHost: 127.0.0.1:9\r\nUpgrade: WebSocket\r\nSec-WebSocket-Protocol: jucode, bearer.abc\r\n\r\n";
        let request = read_request(&mut input).await.ok().unwrap();
        assert_eq!(request.method, "GET");
        assert_eq!(request.path, "/socket");
        assert!(request.is_upgrade());
        assert_eq!(request.header("HOST"), Some("127.0.0.1:9"));
        assert_eq!(request.subprotocols(), ["jucode", "bearer.abc"]);
        let mut garbage: &[u8] = b"\x00\x01\x02\r\n\r\n";
        assert_eq!(
            read_request(&mut garbage).await.err(),
            Some(Some("400 Bad Request"))
        );
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(asset("/").is_some() && asset("/app.js?v=1").is_some() && asset("/x").is_none());
    }
}
