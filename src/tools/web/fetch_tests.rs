//! `web_fetch` against a loopback server: conversion, bounds, redirects, schemes, the
//! private-address policy, binary content, cancellation.

use std::time::Duration;

use reqwest::Url;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::fetch::{Limits, WebFetch, download};
use super::test_server::{Answer, TestServer};
use super::{ClientKind, build_client};
use crate::config::WebFetchConfig;
use crate::engine::{Effect, Tool, ToolContext, ToolOutput};

/// A guard against a hanging test, never a synchronisation.
const GUARD: Duration = Duration::from_secs(20);

const PAGE: &str = r#"<!DOCTYPE html><html><head><title>Docs</title>
<style>.x { color: blue }</style><script>document.write("tracking")</script></head>
<body><nav><a href="/">Home</a></nav>
<h1>Getting started</h1>
<p>Install it with <code>cargo add thing</code>, then read the
<a href="https://example.com/guide">guide</a>.</p>
<h2>Steps</h2><ul><li>download</li><li>build</li></ul>
</body></html>"#;

fn route(target: &str) -> Answer {
    if let Some(n) = target.strip_prefix("/hop/") {
        let n: u32 = n.parse().unwrap_or(0);
        return if n >= 11 {
            Answer::ok("text/plain", format!("arrived after hop {n}"))
        } else {
            Answer::redirect(format!("/hop/{}", n + 1))
        };
    }
    match target {
        "/page" => Answer::ok("text/html; charset=utf-8", PAGE),
        "/plain" => Answer::ok("text/plain", "just text\n  kept   as is\n"),
        "/json" => Answer::ok("application/json", r#"{"a": [1, 2], "b": "c"}"#),
        "/untyped" => Answer::Full {
            status: 200,
            headers: vec![],
            body: b"<html><body><h3>Sniffed</h3></body></html>".to_vec(),
        },
        "/big" => Answer::ok("text/plain; charset=utf-8", "aé".repeat(4000)),
        "/huge" => Answer::ok("text/plain", "x".repeat(50_000)),
        "/png" => Answer::ok("image/png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec()),
        "/mislabelled" => Answer::ok("text/plain", b"ELF\0\0\0binary".to_vec()),
        "/missing" => Answer::status(404, "text/html", "<h1>Not here</h1>"),
        "/to-file" => Answer::redirect("file:///etc/passwd"),
        "/to-ftp" => Answer::redirect("ftp://example.com/x"),
        "/stall" => Answer::Stall {
            content_type: "text/plain",
            first: b"the beginning".to_vec(),
        },
        other => Answer::status(500, "text/plain", format!("unexpected {other}")),
    }
}

async fn server() -> TestServer {
    TestServer::start(|target, _| route(target)).await
}

fn limits() -> Limits {
    (&WebFetchConfig::default()).into()
}

fn context() -> ToolContext {
    ToolContext::detached(std::env::temp_dir())
}

async fn fetch_with(limits: Limits, url: &str) -> ToolOutput {
    let tool = WebFetch::with_limits(limits, true);
    let run = tool.run(json!({ "url": url }), context());
    tokio::time::timeout(GUARD, run)
        .await
        .expect("web_fetch hung")
}

async fn fetch(url: &str) -> ToolOutput {
    fetch_with(limits(), url).await
}

fn private_blocked() -> Limits {
    Limits {
        block_private: true,
        ..limits()
    }
}

#[tokio::test]
async fn html_becomes_text_with_the_final_url_status_and_type() {
    let server = server().await;
    let out = fetch(&server.url("/page")).await;
    assert!(!out.is_error, "{}", out.output);
    let header = format!(
        "URL: {}\nStatus: 200 OK\nContent-Type: text/html; charset=utf-8\n\n",
        server.url("/page")
    );
    assert!(out.output.starts_with(&header), "{}", out.output);
    for wanted in [
        "# Getting started",
        "## Steps",
        "* download\n* build",
        "Install it with `cargo add thing`",
        "[Home][1]",
        "[guide][2]",
        "[2]: https://example.com/guide",
    ] {
        assert!(out.output.contains(wanted), "{wanted:?} in {}", out.output);
    }
    let footnotes = format!(
        "\n\n[1]: {}\n[2]: https://example.com/guide",
        server.url("/")
    );
    assert!(
        out.output.ends_with(&footnotes),
        "relative links resolved: {}",
        out.output
    );
    for dropped in ["tracking", "color: blue", "<p>", "DOCTYPE"] {
        assert!(
            !out.output.contains(dropped),
            "{dropped:?} in {}",
            out.output
        );
    }
    let seen = server.seen();
    let accept = seen[0].headers["accept"].to_str().unwrap();
    assert!(accept.starts_with("text/html"), "{accept}");
}

#[tokio::test]
async fn text_and_json_come_back_as_they_are() {
    let server = server().await;
    let out = fetch(&server.url("/plain")).await;
    assert!(
        out.output.ends_with("\n\njust text\n  kept   as is\n"),
        "{}",
        out.output
    );
    let out = fetch(&server.url("/json")).await;
    assert!(
        out.output.ends_with("\n\n{\"a\": [1, 2], \"b\": \"c\"}"),
        "{}",
        out.output
    );
    let out = fetch(&server.url("/untyped")).await;
    assert!(
        out.output.contains("Content-Type: (none)"),
        "{}",
        out.output
    );
    assert!(out.output.ends_with("### Sniffed"), "{}", out.output);
}

#[tokio::test]
async fn long_text_is_cut_at_a_char_boundary_with_a_note() {
    let server = server().await;
    let limits = Limits {
        max_bytes: 1001,
        ..limits()
    };
    let out = fetch_with(limits, &server.url("/big")).await;
    assert!(!out.is_error, "{}", out.output);
    let (_, body) = out.output.split_once("\n\n").unwrap();
    let (text, note) = body.split_once("\n\n[cut: ").expect("a cut note");
    // "aé" is 3 bytes: 333 of them are 999 bytes, and 1001 would split an "é".
    assert_eq!(text, "aé".repeat(333) + "a");
    assert_eq!(
        note,
        "the text is 12000 bytes; only the first 1000 are shown ([web_fetch] max_bytes)]"
    );
}

#[tokio::test]
async fn the_download_stops_at_its_bound() {
    let server = server().await;
    let limits = Limits {
        max_download: 5000,
        ..limits()
    };
    let out = fetch_with(limits, &server.url("/huge")).await;
    assert!(!out.is_error, "{}", out.output);
    assert!(
        out.output.contains(&"x".repeat(5000)),
        "{}",
        &out.output[..200]
    );
    assert!(!out.output.contains(&"x".repeat(5001)));
    assert!(
        out.output.ends_with(
            "[the page is larger than 5000 bytes; only that much was downloaded \
             ([web_fetch] max_download_bytes)]"
        ),
        "{}",
        &out.output[out.output.len() - 200..]
    );
}

#[tokio::test]
async fn ten_redirects_are_followed_and_the_final_url_reported() {
    let server = server().await;
    let out = fetch(&server.url("/hop/1")).await;
    assert!(!out.is_error, "{}", out.output);
    let header = format!(
        "URL: {}\nRedirected from: {}\nStatus: 200 OK\n",
        server.url("/hop/11"),
        server.url("/hop/1")
    );
    assert!(out.output.starts_with(&header), "{}", out.output);
    assert!(
        out.output.ends_with("arrived after hop 11"),
        "{}",
        out.output
    );
}

#[tokio::test]
async fn an_eleventh_redirect_is_refused() {
    let server = server().await;
    let out = fetch(&server.url("/hop/0")).await;
    assert!(out.is_error, "{}", out.output);
    assert_eq!(
        out.output,
        format!(
            "web_fetch: {}: refused: more than 10 redirects (the last to {})",
            server.url("/hop/0"),
            server.url("/hop/11")
        )
    );
    assert_eq!(
        server.seen().len(),
        11,
        "no request after the 10th redirect"
    );
}

#[tokio::test]
async fn only_http_and_https_are_fetched() {
    let tool = WebFetch::with_limits(limits(), true);
    for (url, scheme) in [
        ("file:///etc/passwd", "file:"),
        ("ftp://example.com/pub/x", "ftp:"),
        ("javascript:alert(1)", "javascript:"),
    ] {
        let expected = format!(
            "web_fetch: refused: {}: only http:// and https:// URLs can be fetched, not {scheme}",
            Url::parse(url).unwrap()
        );
        let out = tool.run(json!({ "url": url }), context()).await;
        assert_eq!(out, ToolOutput::error(&expected), "{url}");
        // Refused before anyone is asked.
        let assessed = tool.assess(&json!({ "url": url }), &context()).await;
        assert_eq!(assessed.unwrap_err(), ToolOutput::error(&expected), "{url}");
    }
    let out = tool.run(json!({ "url": "example.com/x" }), context()).await;
    assert!(
        out.output.contains("is not an absolute URL"),
        "{}",
        out.output
    );
    let out = tool.run(json!({}), context()).await;
    assert_eq!(out.output, "web_fetch: missing required argument \"url\"");

    // Nor through a redirect.
    let server = server().await;
    let out = fetch(&server.url("/to-file")).await;
    assert!(
        out.output.ends_with(
            "refused: a redirect to file:///etc/passwd: only http:// and https:// URLs can be \
             fetched, not file:"
        ),
        "{}",
        out.output
    );
    let out = fetch(&server.url("/to-ftp")).await;
    assert!(
        out.is_error && out.output.contains("not ftp:"),
        "{}",
        out.output
    );
}

#[tokio::test]
async fn private_addresses_are_allowed_by_default_and_blocked_on_request() {
    let server = server().await;
    let by_name = format!("http://localhost:{}/plain", server.addr.port());
    let out = fetch(&by_name).await;
    assert!(!out.is_error, "allowed by default: {}", out.output);
    let requests = server.seen().len();

    let out = fetch_with(private_blocked(), &server.url("/plain")).await;
    assert_eq!(
        out.output,
        format!(
            "web_fetch: {}: refused: 127.0.0.1 is a loopback address",
            server.url("/plain")
        )
    );
    let out = fetch_with(private_blocked(), &by_name).await;
    assert!(out.is_error, "{}", out.output);
    assert!(
        out.output.contains("refused: localhost resolves to ")
            && out.output.contains("a loopback address"),
        "{}",
        out.output
    );
    let v6 = format!("http://[::ffff:127.0.0.1]:{}/plain", server.addr.port());
    let out = fetch_with(private_blocked(), &v6).await;
    assert!(
        out.output.ends_with("is a loopback address"),
        "{}",
        out.output
    );
    assert_eq!(server.seen().len(), requests, "nothing reached the server");
}

#[tokio::test]
async fn every_redirect_hop_is_checked_when_blocking() {
    // `public.test` stands for a public host: a client override maps it to the server
    // without asking DNS or the policy, as a real public address would pass it.
    let server = TestServer::start(|target, _| match target {
        "/to-literal" => Answer::redirect("http://127.0.0.1:1/x"),
        "/to-name" => Answer::redirect("http://localhost:1/x"),
        "/to-mapped" => Answer::redirect("http://[::ffff:10.0.0.1]:1/x"),
        _ => Answer::ok("text/plain", "public page"),
    })
    .await;
    let client =
        build_client(ClientKind::FetchPublicOnly, &[("public.test", server.addr)]).unwrap();
    let port = server.addr.port();
    let get = |path: &str| {
        let url = Url::parse(&format!("http://public.test:{port}{path}")).unwrap();
        let client = client.clone();
        async move { download(&client, &url, private_blocked()).await }
    };
    assert!(get("/").await.is_ok(), "the first hop passes");
    let Err(err) = get("/to-literal").await else {
        panic!("a redirect to 127.0.0.1 was followed");
    };
    assert!(
        err.ends_with(
            "refused: a redirect to http://127.0.0.1:1/x: 127.0.0.1 is a loopback address"
        ),
        "{err}"
    );
    let Err(err) = get("/to-name").await else {
        panic!("a redirect to localhost was followed");
    };
    assert!(err.contains("refused: localhost resolves to "), "{err}");
    let Err(err) = get("/to-mapped").await else {
        panic!("a redirect to a mapped private address was followed");
    };
    assert!(
        err.ends_with("::ffff:10.0.0.1 is a private address"),
        "{err}"
    );
}

#[tokio::test]
async fn binary_content_is_refused() {
    let server = server().await;
    let out = fetch(&server.url("/png")).await;
    assert!(out.is_error);
    assert_eq!(
        out.output,
        format!(
            "web_fetch: {} is image/png, 16 bytes, which web_fetch does not read: it returns \
             text only (HTML pages, plain text, JSON, XML). Look for an HTML or text version \
             of it.",
            server.url("/png")
        )
    );
    let out = fetch(&server.url("/mislabelled")).await;
    assert!(out.is_error);
    assert!(
        out.output
            .contains("is binary data (served as text/plain), which web_fetch does not read"),
        "{}",
        out.output
    );
}

#[tokio::test]
async fn an_error_status_is_an_error_with_the_page() {
    let server = server().await;
    let out = fetch(&server.url("/missing")).await;
    assert!(out.is_error);
    assert!(
        out.output.contains("Status: 404 Not Found\n"),
        "{}",
        out.output
    );
    assert!(out.output.ends_with("# Not here"), "{}", out.output);
}

#[tokio::test]
async fn an_interrupt_ends_the_call_at_once() {
    let server = server().await;
    let tool = WebFetch::with_limits(limits(), true);
    let cancel = CancellationToken::new();
    let mut ctx = context();
    ctx.cancel = cancel.clone();
    let run = tokio::spawn(tool.run(json!({ "url": server.url("/stall") }), ctx));
    // The server has answered its headers and stalls in the body.
    server.requested(1).await;
    cancel.cancel();
    let out = tokio::time::timeout(GUARD, run)
        .await
        .expect("the call ended")
        .unwrap();
    assert_eq!(out, ToolOutput::error("web_fetch: cancelled"));
}

#[tokio::test]
async fn a_stalled_server_meets_the_time_bound() {
    let server = server().await;
    let limits = Limits {
        timeout: Duration::from_millis(300),
        ..limits()
    };
    let out = fetch_with(limits, &server.url("/stall")).await;
    assert_eq!(
        out.output,
        format!(
            "web_fetch: {}: no complete answer within 0.3 s ([web_fetch] timeout_secs); the \
             server is slow or the page is endless",
            server.url("/stall")
        )
    );
}

#[tokio::test]
async fn an_endless_time_bound_does_not_overflow_the_clock() {
    let server = server().await;
    let config = WebFetchConfig {
        timeout_secs: u64::MAX,
        ..WebFetchConfig::default()
    };
    let tool = WebFetch::new(&config, true);
    let out = tool
        .run(json!({ "url": server.url("/plain") }), context())
        .await;
    assert!(!out.is_error, "{}", out.output);
}

#[tokio::test]
async fn assessed_as_network_unless_the_host_says_otherwise() {
    let args = json!({ "url": "https://docs.rs/tokio" });
    let gated = WebFetch::new(&WebFetchConfig::default(), true);
    let assessment = gated.assess(&args, &context()).await.unwrap();
    assert_eq!(
        assessment.effect,
        Effect::Network {
            host: "docs.rs".into()
        }
    );
    assert_eq!(assessment.summary, "fetch https://docs.rs/tokio");
    let chat = WebFetch::new(&WebFetchConfig::default(), false);
    let assessment = chat.assess(&args, &context()).await.unwrap();
    assert_eq!(assessment.effect, Effect::ReadOnly);
    assert_eq!(assessment.summary, "fetch https://docs.rs/tokio");
}

#[tokio::test]
async fn a_page_too_costly_to_convert_stops_at_the_bound() {
    let server = TestServer::start(|_, _| {
        let depth = 200_000;
        let html = format!(
            "<html>{}deep{}",
            "<div>".repeat(depth),
            "</div>".repeat(depth)
        );
        Answer::ok("text/html", html)
    })
    .await;
    let limits = Limits {
        timeout: Duration::from_millis(100),
        ..limits()
    };
    let out = fetch_with(limits, &server.url("/deep")).await;
    assert!(!out.is_error, "{}", out.output);
    assert!(
        out.output.ends_with(
            "[the page's HTML is too complex to convert within the time bound; the text stops \
             where the conversion did]"
        ),
        "{}",
        out.output
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/");
    let out = fetch(&url).await;
    assert!(out.is_error);
    assert!(
        out.output
            .starts_with(&format!("web_fetch: {url}: cannot connect: ")),
        "{}",
        out.output
    );
}
