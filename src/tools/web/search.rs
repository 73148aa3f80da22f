//! `web_search`: a query to the configured search service, results as a numbered list.
//!
//! Each backend is two functions, a request builder and a result parser, joined in
//! [`Backend`]-matching code below; everything else (time bound, cancellation, the
//! status and JSON checks, rendering) is shared. The API key is looked up in the
//! session's environment ([`ToolContext::env`], the client's for a daemon session) when
//! the call runs, so a key exported after the daemon started still counts, and the
//! daemon's own environment never leaks into a client's searches. Requests never follow
//! redirects: one would replay the key to wherever it points.

use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use reqwest::Url;
use reqwest::header::ACCEPT;
use serde_json::{Value, json};

use super::{ClientKind, assessment, client, content, cut_at, describe, read_capped};
use crate::config::web::MAX_COUNT;
use crate::config::{SearchBackend, WebSearchConfig};
use crate::engine::ports::model::ToolSpec;
use crate::engine::{Assessment, Tool, ToolContext, ToolOutput};
use crate::engine::{DescribeCall, string_arg};
use crate::protocol::{CallCard, CallKind};
use crate::tools::args::Args;

const NAME: &str = "web_search";
/// Most bytes of a backend's answer read; a page of results is a few tens of KB.
const MAX_ANSWER_BYTES: usize = 2 * 1024 * 1024;
/// Most characters of an error answer quoted back.
const MAX_ERROR_QUOTE: usize = 300;

/// The `web_search` tool, for one configured backend.
#[derive(Debug, Clone)]
pub struct WebSearch {
    config: WebSearchConfig,
    gated: bool,
}

impl WebSearch {
    pub fn new(config: &WebSearchConfig, network_gated: bool) -> Self {
        Self {
            config: config.clone(),
            gated: network_gated,
        }
    }

    /// How the backend is named to the model and the user.
    fn backend_name(&self) -> String {
        let host = Url::parse(self.config.base_url())
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .unwrap_or_default();
        format!("{} at {host}", self.config.backend.as_str())
    }
}

/// One result.
#[derive(Debug, PartialEq, Eq)]
struct Hit {
    title: String,
    url: String,
    snippet: String,
}

struct Query {
    text: String,
    count: u32,
}

impl Tool for WebSearch {
    fn describe(&self, args: &Value, _cwd: &std::path::Path) -> CallCard {
        let query = string_arg(args, "query").unwrap_or_default();
        CallCard::of(
            CallKind::Fetch,
            format!("Search the web for {query:?}"),
            None,
            format!("Searching the web for {query}"),
        )
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: format!(
                "Search the web ({backend}). Returns a numbered list of results, each with \
                 its title, URL and a snippet. {count} results unless `count` says otherwise \
                 (at most {MAX_COUNT}). Read a promising result with web_fetch; refine the \
                 query rather than asking for many results.",
                backend = self.config.backend.as_str(),
                count = self.config.count,
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "What to search for, as you would type it in a search engine."
                    },
                    "count": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_COUNT,
                        "description": format!("How many results to return. Default {}.", self.config.count)
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        }
    }

    fn assess(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        let assessed = self.parse(args).map(|query| {
            let host = Url::parse(self.config.base_url())
                .ok()
                .and_then(|url| url.host_str().map(str::to_owned))
                .unwrap_or_default();
            let summary = format!(
                "search the web ({}) for {:?}",
                self.backend_name(),
                query.text
            );
            assessment(self.gated, host, summary)
        });
        async move { assessed.map_err(ToolOutput::error) }.boxed()
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let parsed = self.parse(&args);
        let config = self.config.clone();
        let backend = self.backend_name();
        Box::pin(async move {
            let query = match parsed {
                Ok(query) => query,
                Err(message) => return ToolOutput::error(message),
            };
            let timeout =
                Duration::from_secs(config.timeout_secs.clamp(1, super::fetch::MAX_TIMEOUT_SECS));
            let search = tokio::time::timeout(timeout, search(&config, &backend, &query, &ctx));
            tokio::select! {
                done = search => match done {
                    Ok(Ok(hits)) => ToolOutput::ok(render(&query.text, &backend, &hits)),
                    Ok(Err(message)) => ToolOutput::error(format!("{NAME}: {message}")),
                    Err(_) => ToolOutput::error(format!(
                        "{NAME}: {backend} did not answer within {} s ([web_search] timeout_secs)",
                        timeout.as_secs()
                    )),
                },
                () = ctx.cancel.cancelled() => ToolOutput::error(format!("{NAME}: cancelled")),
            }
        })
    }
}

impl WebSearch {
    fn parse(&self, value: &Value) -> Result<Query, String> {
        let args = Args::new(NAME, value)?;
        let text = args.required_str("query")?.trim();
        if text.is_empty() {
            return Err(format!("{NAME}: argument \"query\" is empty"));
        }
        let count = match args.optional_u64("count")? {
            None => self.config.count,
            Some(0) => return Err(format!("{NAME}: argument \"count\" must be at least 1")),
            Some(count) => u32::try_from(count).unwrap_or(MAX_COUNT).min(MAX_COUNT),
        };
        Ok(Query {
            text: text.to_owned(),
            count,
        })
    }
}

/// Sends the query and reads the hits; the error says what went wrong, for the model.
async fn search(
    config: &WebSearchConfig,
    backend: &str,
    query: &Query,
    ctx: &ToolContext,
) -> Result<Vec<Hit>, String> {
    let client = client(ClientKind::Search)?;
    let base = config.base_url();
    let request = match config.backend {
        SearchBackend::Searxng => {
            let url = endpoint(
                base,
                "/search",
                &[("q", query.text.as_str()), ("format", "json")],
            )?;
            client.get(url)
        }
        SearchBackend::Brave => {
            let env = config.api_key_env().unwrap_or_default();
            let key = ctx
                .env
                .get(env)
                .map(|key| key.trim())
                .filter(|key| !key.is_empty())
                .ok_or_else(|| {
                    format!(
                        "no API key for the Brave Search API: the environment variable {env} \
                         (named by [web_search] api_key_env) is not set in the session's \
                         environment. Tell the user; web_search cannot work without it."
                    )
                })?;
            let count = query.count.to_string();
            let url = endpoint(
                base,
                "/res/v1/web/search",
                &[("q", query.text.as_str()), ("count", &count)],
            )?;
            client.get(url).header("X-Subscription-Token", key)
        }
    };
    let mut response = request
        .header(ACCEPT, "application/json")
        .send()
        .await
        .map_err(|err| format!("{backend}: {}", describe(&err)))?;
    let status = response.status();
    let (body, _) = read_capped(&mut response, MAX_ANSWER_BYTES)
        .await
        .map_err(|err| format!("{backend}: reading the answer: {}", describe(&err)))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        let quote = cut_at(text.trim(), MAX_ERROR_QUOTE);
        let hint = match (config.backend, status.as_u16()) {
            (SearchBackend::Searxng, 403) => {
                " (a SearXNG instance answers 403 when `json` is not among the `search.formats` \
                 of its settings.yml)"
            }
            (SearchBackend::Brave, 401 | 403) => " (the API key was refused)",
            (_, 429) => " (rate limited: wait before searching again)",
            _ => "",
        };
        return Err(format!("{backend} answered HTTP {status}{hint}: {quote}"));
    }
    let answer: Value = serde_json::from_slice(&body)
        .map_err(|err| format!("{backend}: the answer is not valid JSON: {err}"))?;
    let mut hits = match config.backend {
        SearchBackend::Searxng => searxng_hits(&answer),
        SearchBackend::Brave => brave_hits(&answer),
    }
    .map_err(|problem| format!("{backend}: unexpected answer: {problem}"))?;
    hits.truncate(query.count as usize);
    Ok(hits)
}

/// `base` + `path` with a query string.
fn endpoint(base: &str, path: &str, params: &[(&str, &str)]) -> Result<Url, String> {
    let mut url = Url::parse(&format!("{base}{path}"))
        .map_err(|err| format!("the configured [web_search] url {base:?} is unusable: {err}"))?;
    url.query_pairs_mut().extend_pairs(params);
    Ok(url)
}

/// SearXNG: `{"results": [{"title", "url", "content"}]}`.
fn searxng_hits(answer: &Value) -> Result<Vec<Hit>, String> {
    let results = answer
        .get("results")
        .and_then(Value::as_array)
        .ok_or("no `results` list")?;
    Ok(results
        .iter()
        .filter_map(|result| hit(result, "content"))
        .collect())
}

/// Brave: `{"web": {"results": [{"title", "url", "description"}]}}`. An answer without
/// `web` has no web results (Brave leaves it out then).
fn brave_hits(answer: &Value) -> Result<Vec<Hit>, String> {
    if !answer.is_object() {
        return Err("not a JSON object".to_owned());
    }
    let Some(web) = answer.get("web") else {
        return Ok(Vec::new());
    };
    let results = web
        .get("results")
        .and_then(Value::as_array)
        .ok_or("no `web.results` list")?;
    Ok(results
        .iter()
        .filter_map(|result| hit(result, "description"))
        .collect())
}

/// One result object; those without a URL are skipped.
fn hit(result: &Value, snippet_key: &str) -> Option<Hit> {
    let field = |key: &str| result.get(key).and_then(Value::as_str).unwrap_or_default();
    let url = field("url").trim();
    if url.is_empty() {
        return None;
    }
    let title = content::snippet_text(field("title"));
    Some(Hit {
        title: if title.is_empty() {
            "(untitled)".to_owned()
        } else {
            title
        },
        url: url.to_owned(),
        snippet: content::snippet_text(field(snippet_key)),
    })
}

fn render(query: &str, backend: &str, hits: &[Hit]) -> String {
    if hits.is_empty() {
        return format!("No results for {query:?} ({backend}).");
    }
    let mut out = format!("Results for {query:?} ({backend}):\n");
    for (n, hit) in hits.iter().enumerate() {
        out.push_str(&format!("\n{}. {}\n   {}\n", n + 1, hit.title, hit.url));
        if !hit.snippet.is_empty() {
            out.push_str(&format!("   {}\n", hit.snippet));
        }
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_answer_shapes() {
        let searxng = json!({"results": [
            {"title": "A &amp; B", "url": "https://a.example/", "content": "about <b>a</b>"},
            {"title": "no url"},
            {"url": "https://c.example/"}
        ]});
        assert_eq!(
            searxng_hits(&searxng).unwrap(),
            [
                Hit {
                    title: "A & B".into(),
                    url: "https://a.example/".into(),
                    snippet: "about a".into()
                },
                Hit {
                    title: "(untitled)".into(),
                    url: "https://c.example/".into(),
                    snippet: String::new()
                }
            ]
        );
        assert!(searxng_hits(&json!({"answers": []})).is_err());
        let brave = json!({"web": {"results": [
            {"title": "R", "url": "https://r.example/", "description": "the <strong>R</strong> site"}
        ]}});
        assert_eq!(brave_hits(&brave).unwrap()[0].snippet, "the R site");
        assert!(brave_hits(&json!({"type": "search"})).unwrap().is_empty());
        assert!(brave_hits(&json!([])).is_err());
    }

    #[test]
    fn renders_a_numbered_list() {
        let hits = [
            Hit {
                title: "One".into(),
                url: "https://1.example/".into(),
                snippet: "first".into(),
            },
            Hit {
                title: "Two".into(),
                url: "https://2.example/".into(),
                snippet: String::new(),
            },
        ];
        assert_eq!(
            render("q", "searxng at h", &hits),
            "Results for \"q\" (searxng at h):\n\n1. One\n   https://1.example/\n   first\n\n\
             2. Two\n   https://2.example/"
        );
        assert_eq!(render("q", "b", &[]), "No results for \"q\" (b).");
    }
}
