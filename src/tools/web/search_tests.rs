//! `web_search` against loopback SearXNG-style and Brave-style mocks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::WebSearch;
use super::test_server::{Answer, TestServer};
use crate::config::{SearchBackend, WebSearchConfig};
use crate::engine::{Effect, Tool, ToolContext, ToolOutput};

/// A guard against a hanging test, never a synchronisation.
const GUARD: Duration = Duration::from_secs(20);

fn context(env: &[(&str, &str)]) -> ToolContext {
    let mut ctx = ToolContext::detached(std::env::temp_dir());
    ctx.env = Arc::new(
        env.iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect::<HashMap<_, _>>(),
    );
    ctx
}

async fn search(config: &WebSearchConfig, args: serde_json::Value, ctx: ToolContext) -> ToolOutput {
    let tool = WebSearch::new(config, true);
    tokio::time::timeout(GUARD, tool.run(args, ctx))
        .await
        .expect("web_search hung")
}

fn searxng_results(n: usize) -> String {
    let results: Vec<_> = (1..=n)
        .map(|i| {
            json!({
                "title": format!("Result {i}"),
                "url": format!("https://r{i}.example/"),
                "content": format!("about <b>{i}</b>"),
                "engine": "duckduckgo"
            })
        })
        .collect();
    json!({ "query": "q", "results": results }).to_string()
}

#[tokio::test]
async fn searxng_results_become_a_numbered_list() {
    let server = TestServer::start(|target, _| {
        if target.starts_with("/searx/search?") {
            Answer::ok("application/json", searxng_results(7))
        } else {
            Answer::status(404, "text/plain", "no")
        }
    })
    .await;
    let config = WebSearchConfig::new(SearchBackend::Searxng, Some(server.url("/searx/")));
    let out = search(
        &config,
        json!({ "query": "rust async & tokio", "count": 2 }),
        context(&[]),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::ok(
            "Results for \"rust async & tokio\" (searxng at 127.0.0.1):\n\n\
             1. Result 1\n   https://r1.example/\n   about 1\n\n\
             2. Result 2\n   https://r2.example/\n   about 2"
        )
    );
    let seen = server.seen();
    assert_eq!(
        seen[0].target,
        "/searx/search?q=rust+async+%26+tokio&format=json"
    );

    // The configured count applies when the model gives none.
    let out = search(&config, json!({ "query": "x" }), context(&[])).await;
    assert!(out.output.contains("\n5. Result 5\n"), "{}", out.output);
    assert!(!out.output.contains("6. Result 6"), "{}", out.output);
}

#[tokio::test]
async fn searxng_errors_are_clear() {
    let server = TestServer::start(|target, _| match target {
        t if t.starts_with("/forbidden/") => Answer::status(403, "text/html", "Forbidden"),
        t if t.starts_with("/broken/") => Answer::ok("application/json", "{\"results\": [tru"),
        t if t.starts_with("/shape/") => Answer::ok("application/json", "{\"answers\": []}"),
        t if t.starts_with("/empty/") => Answer::ok("application/json", "{\"results\": []}"),
        _ => Answer::status(500, "text/plain", "boom"),
    })
    .await;
    let run = |path: &str| {
        let config = WebSearchConfig::new(SearchBackend::Searxng, Some(server.url(path)));
        async move { search(&config, json!({ "query": "q" }), context(&[])).await }
    };
    let out = run("/forbidden").await;
    assert_eq!(
        out,
        ToolOutput::error(
            "web_search: searxng at 127.0.0.1 answered HTTP 403 Forbidden (a SearXNG instance \
             answers 403 when `json` is not among the `search.formats` of its settings.yml): \
             Forbidden"
        )
    );
    let out = run("/broken").await;
    assert!(out.is_error);
    assert!(
        out.output
            .starts_with("web_search: searxng at 127.0.0.1: the answer is not valid JSON: "),
        "{}",
        out.output
    );
    let out = run("/shape").await;
    assert_eq!(
        out.output,
        "web_search: searxng at 127.0.0.1: unexpected answer: no `results` list"
    );
    let out = run("/empty").await;
    assert_eq!(
        out,
        ToolOutput::ok("No results for \"q\" (searxng at 127.0.0.1).")
    );
    let out = run("/other").await;
    assert_eq!(
        out.output,
        "web_search: searxng at 127.0.0.1 answered HTTP 500 Internal Server Error: boom"
    );
    let out = search(
        &WebSearchConfig::new(SearchBackend::Searxng, Some(server.url("/"))),
        json!({ "query": "  " }),
        context(&[]),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::error("web_search: argument \"query\" is empty")
    );
}

fn brave_server() -> impl Fn(&str, &hyper::HeaderMap) -> Answer + Send + Sync + 'static {
    |target, headers| {
        let key = headers
            .get("x-subscription-token")
            .and_then(|key| key.to_str().ok());
        if key != Some("k-123") {
            return Answer::status(401, "application/json", r#"{"type":"ErrorResponse"}"#);
        }
        assert!(target.starts_with("/res/v1/web/search?"), "{target}");
        let body = json!({
            "type": "search",
            "web": { "results": [
                { "title": "Tokio", "url": "https://tokio.rs/", "description": "An <strong>async</strong> runtime" },
                { "title": "Docs", "url": "https://docs.rs/tokio", "description": "API docs" }
            ]}
        });
        Answer::ok("application/json", body.to_string())
    }
}

#[tokio::test]
async fn brave_sends_the_key_from_the_session_environment() {
    let server = TestServer::start(brave_server()).await;
    let config = WebSearchConfig::new(SearchBackend::Brave, Some(server.url("")));
    let out = search(
        &config,
        json!({ "query": "tokio", "count": 3 }),
        context(&[("BRAVE_API_KEY", "k-123")]),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::ok(
            "Results for \"tokio\" (brave at 127.0.0.1):\n\n\
             1. Tokio\n   https://tokio.rs/\n   An async runtime\n\n\
             2. Docs\n   https://docs.rs/tokio\n   API docs"
        )
    );
    let seen = server.seen();
    assert_eq!(seen[0].target, "/res/v1/web/search?q=tokio&count=3");
    assert_eq!(seen[0].headers["accept"], "application/json");

    // Another variable, named in the config.
    let config = WebSearchConfig {
        api_key_env: Some("MY_SEARCH_KEY".into()),
        ..config
    };
    let out = search(
        &config,
        json!({ "query": "tokio" }),
        context(&[("MY_SEARCH_KEY", "k-123"), ("BRAVE_API_KEY", "wrong")]),
    )
    .await;
    assert!(!out.is_error, "{}", out.output);
    assert_eq!(
        server.seen()[1].target,
        "/res/v1/web/search?q=tokio&count=5"
    );
}

#[tokio::test]
async fn brave_without_or_with_a_wrong_key_is_a_clear_error() {
    let server = TestServer::start(brave_server()).await;
    let config = WebSearchConfig::new(SearchBackend::Brave, Some(server.url("")));
    let out = search(&config, json!({ "query": "tokio" }), context(&[])).await;
    assert_eq!(
        out,
        ToolOutput::error(
            "web_search: no API key for the Brave Search API: the environment variable \
             BRAVE_API_KEY (named by [web_search] api_key_env) is not set in the session's \
             environment. Tell the user; web_search cannot work without it."
        )
    );
    assert!(server.seen().is_empty(), "nothing was sent without a key");
    let out = search(
        &config,
        json!({ "query": "tokio" }),
        context(&[("BRAVE_API_KEY", "nope")]),
    )
    .await;
    assert_eq!(
        out,
        ToolOutput::error(
            "web_search: brave at 127.0.0.1 answered HTTP 401 Unauthorized (the API key was \
             refused): {\"type\":\"ErrorResponse\"}"
        )
    );
}

#[tokio::test]
async fn assessed_as_network_unless_the_host_says_otherwise() {
    let config = WebSearchConfig::new(SearchBackend::Brave, None);
    let args = json!({ "query": "rust" });
    let gated = WebSearch::new(&config, true);
    let assessment = gated.assess(&args, &context(&[])).await.unwrap();
    assert_eq!(
        assessment.effect,
        Effect::Network {
            host: "api.search.brave.com".into()
        }
    );
    assert_eq!(
        assessment.summary,
        "search the web (brave at api.search.brave.com) for \"rust\""
    );
    let chat = WebSearch::new(&config, false);
    let assessment = chat.assess(&args, &context(&[])).await.unwrap();
    assert_eq!(assessment.effect, Effect::ReadOnly);
    let bad = gated.assess(&json!({ "query": 3 }), &context(&[])).await;
    assert_eq!(
        bad.unwrap_err(),
        ToolOutput::error("web_search: argument \"query\" must be a string, got number 3")
    );
}
