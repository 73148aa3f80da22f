//! Web research: `web_fetch` (a page as readable text) and `web_search` (a configured
//! search service). See `docs/web.md`.
//!
//! Why it works this way:
//! - Both tools assess as [`Effect::Network`], which the policy gates like any call
//!   that reaches the network (asks in `manual`, runs in plan mode since it changes
//!   nothing here). A host that decides its sessions may browse freely (chat sessions)
//!   registers them with `network_gated = false`, and they assess as read-only.
//! - Every call is bounded twice: by a total time (`timeout_secs`, connecting, each
//!   redirect and the body together) and by bytes (the body is streamed and reading
//!   stops at a limit), and it ends at once when the turn is interrupted. A slow or
//!   endless server costs the turn at most the bound.
//! - The HTTP clients are process-wide and built on first use, one per policy (fetch,
//!   fetch with private addresses blocked, search), so calls share warm connections
//!   and a session that never browses never loads the TLS roots.
//! - Errors are tool errors written for the model: what was refused or failed, and
//!   what to do instead; reqwest's error chain is read for the cause (a refused
//!   address, a refused redirect) rather than shown as "error sending request".
//! - Search backends sit behind one small function each ([`search`]): adding a
//!   backend is a request builder and a result parser, documented in `docs/web.md`.

mod address;
mod content;
mod fetch;
mod search;

#[cfg(test)]
mod fetch_tests;
#[cfg(test)]
mod search_tests;
#[cfg(test)]
mod test_server;

use std::error::Error as _;
use std::sync::OnceLock;
use std::time::Duration;

use reqwest::Url;

use crate::config::{WebFetchConfig, WebSearchConfig};
use crate::engine::{Assessment, Effect, ToolRegistry};

pub use fetch::WebFetch;
pub use search::WebSearch;

use address::Refused;

/// Most redirects `web_fetch` follows (the 11th is refused).
const MAX_REDIRECTS: usize = 10;
/// A connection that cannot be opened in this long is given up, even when the total
/// bound is longer: the time is better spent telling the model.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const USER_AGENT: &str = concat!("jucode/", env!("CARGO_PKG_VERSION"), " (web research)");

/// Registers `web_fetch` and, when a backend is configured, `web_search`. With
/// `network_gated` false (chat sessions) both assess as read-only, so no mode asks.
pub fn register_web(
    registry: &mut ToolRegistry,
    fetch: &WebFetchConfig,
    search: Option<&WebSearchConfig>,
    network_gated: bool,
) {
    registry.register(WebFetch::new(fetch, network_gated));
    if let Some(search) = search {
        registry.register(WebSearch::new(search, network_gated));
    }
}

/// The assessment of a call to `host`: a network effect, or read-only when the host
/// does not gate network access.
fn assessment(gated: bool, host: String, summary: String) -> Assessment {
    Assessment {
        effect: if gated {
            Effect::Network { host }
        } else {
            Effect::ReadOnly
        },
        summary,
        hunks: None,
    }
}

/// Which process-wide client a request uses.
#[derive(Clone, Copy)]
enum ClientKind {
    /// `web_fetch`: redirects checked for their scheme and count.
    Fetch,
    /// `web_fetch` with `block_private`: also every address, by its resolver and
    /// redirect policy; no proxy (a proxy would resolve names out of our sight).
    FetchPublicOnly,
    /// `web_search`: no redirects, which would replay an API key elsewhere.
    Search,
}

fn client(kind: ClientKind) -> Result<reqwest::Client, String> {
    static CLIENTS: [OnceLock<Result<reqwest::Client, String>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let slot = match kind {
        ClientKind::Fetch => &CLIENTS[0],
        ClientKind::FetchPublicOnly => &CLIENTS[1],
        ClientKind::Search => &CLIENTS[2],
    };
    slot.get_or_init(|| build_client(kind, &[])).clone()
}

/// A client of `kind`. `overrides` map host names to addresses without asking DNS (or
/// the address policy): tests use them to stand in for public hosts.
fn build_client(
    kind: ClientKind,
    overrides: &[(&str, std::net::SocketAddr)],
) -> Result<reqwest::Client, String> {
    // Already installed (by the providers or the embedding program) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder();
    for (host, addr) in overrides {
        builder = builder.resolve(host, *addr);
    }
    let builder = builder
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(USER_AGENT);
    let builder = match kind {
        ClientKind::Fetch => builder.redirect(redirect_policy(false)),
        ClientKind::FetchPublicOnly => builder
            .redirect(redirect_policy(true))
            .dns_resolver(address::PublicOnly)
            .no_proxy(),
        ClientKind::Search => builder.redirect(reqwest::redirect::Policy::none()),
    };
    builder
        .build()
        .map_err(|err| format!("cannot set up the HTTP client: {err}"))
}

/// Follows at most [`MAX_REDIRECTS`] redirects, each to http or https, and with
/// `public_only` each to a host whose IP literal passes (names are checked when
/// resolved).
fn redirect_policy(public_only: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        // `previous` holds every URL requested so far, the first one included.
        if attempt.previous().len() > MAX_REDIRECTS {
            let refused = Refused(format!(
                "more than {MAX_REDIRECTS} redirects (the last to {})",
                attempt.url()
            ));
            return attempt.error(refused);
        }
        if let Err(refused) = check_scheme(attempt.url()) {
            return attempt.error(Refused(format!("a redirect to {}", refused.0)));
        }
        if public_only && let Err(refused) = address::check_literal(attempt.url()) {
            let message = format!("a redirect to {}: {}", attempt.url(), refused.0);
            return attempt.error(Refused(message));
        }
        attempt.follow()
    })
}

/// Whether a URL may be fetched at all: http and https only.
fn check_scheme(url: &Url) -> Result<(), Refused> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        scheme => Err(Refused(format!(
            "{url}: only http:// and https:// URLs can be fetched, not {scheme}:"
        ))),
    }
}

/// What went wrong with a request, for the model: a refusal of ours when there is one
/// in the chain, else the kind of failure and its causes (reqwest's own message only
/// repeats the URL, which the caller shows already).
fn describe(err: &reqwest::Error) -> String {
    let mut source = err.source();
    let mut causes: Vec<String> = Vec::new();
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return format!("refused: {refused}");
        }
        let text = cause.to_string();
        // Layers often repeat their cause's text in their own.
        if !causes.iter().any(|known| known.contains(&text)) {
            causes.push(text);
        }
        source = cause.source();
    }
    let kind = if err.is_connect() {
        "cannot connect"
    } else if err.is_timeout() {
        "timed out"
    } else if err.is_redirect() {
        "bad redirect"
    } else if err.is_body() || err.is_decode() {
        "the answer broke off"
    } else {
        "request failed"
    };
    if causes.is_empty() {
        causes.push(err.to_string());
    }
    format!("{kind}: {}", causes.join(": "))
}

/// Reads at most `limit` bytes of a body. The flag says whether the body went on.
async fn read_capped(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
        if body.len() == limit {
            // Whether anything follows is only known by asking for more.
            return Ok((body, response.chunk().await?.is_some_and(|c| !c.is_empty())));
        }
    }
    Ok((body, false))
}

/// `text` cut to at most `max` bytes, at a char boundary.
fn cut_at(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_search_only_with_a_backend() {
        let names = |search: Option<&WebSearchConfig>| {
            let mut registry = ToolRegistry::new();
            register_web(&mut registry, &WebFetchConfig::default(), search, true);
            registry
                .specs()
                .into_iter()
                .map(|spec| spec.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(None), ["web_fetch"]);
        let searxng = WebSearchConfig::new(
            crate::config::SearchBackend::Searxng,
            Some("http://127.0.0.1:1".into()),
        );
        assert_eq!(names(Some(&searxng)), ["web_fetch", "web_search"]);
    }

    #[test]
    fn cuts_at_char_boundaries() {
        assert_eq!(cut_at("héllo", 2), "h");
        assert_eq!(cut_at("héllo", 3), "hé");
        assert_eq!(cut_at("abc", 10), "abc");
    }
}
