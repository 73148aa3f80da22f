//! `[web_fetch]` and `[web_search]`: the limits of `web_fetch` and the backend of
//! `web_search` (`docs/web.md`).
//!
//! Both are read key by key like every other table. Beyond types, a few values are
//! checked: a limit of 0 would make `web_fetch` useless, so it is reported and the
//! default used. `[web_search]` is all or nothing: with any problem the tool is not
//! offered, because a backend read in part could send the user's queries (and an API
//! key) somewhere the user did not write.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::{Reader, Scope, is_http_url, key_path};

/// Most text `web_fetch` returns by default: 100 KB.
pub const DEFAULT_MAX_BYTES: usize = 100_000;
/// Most bytes `web_fetch` downloads by default: 5 MB (HTML is several times its text).
pub const DEFAULT_MAX_DOWNLOAD_BYTES: usize = 5_000_000;
/// Default bound on one `web_fetch` or `web_search` call, redirects and body included.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Results `web_search` returns when the model does not say.
pub const DEFAULT_COUNT: u32 = 5;
/// Most results one `web_search` call may ask for (Brave's own limit).
pub const MAX_COUNT: u32 = 20;
/// Where the Brave Search API lives when `url` does not say otherwise.
pub const BRAVE_URL: &str = "https://api.search.brave.com";
/// The variable holding the Brave key when `api_key_env` does not name another.
pub const BRAVE_KEY_ENV: &str = "BRAVE_API_KEY";

/// `[web_fetch]`. Every key has a default, so the table is optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebFetchConfig {
    /// Most bytes of text returned to the model; longer text is cut with a note.
    pub max_bytes: usize,
    /// Most bytes read from the server; the rest of a larger body is not downloaded.
    pub max_download_bytes: usize,
    /// Bound on the whole fetch: connecting, every redirect, the body.
    pub timeout_secs: u64,
    /// Refuse loopback, private, link-local and other non-public addresses, on every
    /// hop and after DNS resolution.
    pub block_private: bool,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            max_download_bytes: DEFAULT_MAX_DOWNLOAD_BYTES,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            block_private: false,
        }
    }
}

/// The search services `web_search` can query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchBackend {
    /// A SearXNG instance (or anything answering its `/search?format=json`).
    Searxng,
    /// The Brave Search API, with a subscription token.
    Brave,
}

impl SearchBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Searxng => "searxng",
            Self::Brave => "brave",
        }
    }
}

/// `[web_search]`. Without this table `web_search` is not offered.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    pub backend: SearchBackend,
    /// SearXNG: the instance (required). Brave: replaces [`BRAVE_URL`].
    pub url: Option<String>,
    /// Brave: the environment variable holding the key (default [`BRAVE_KEY_ENV`]).
    pub api_key_env: Option<String>,
    /// Results when the model does not ask for a number.
    #[serde(default = "default_count")]
    pub count: u32,
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_count() -> u32 {
    DEFAULT_COUNT
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

impl WebSearchConfig {
    /// A backend with the defaults for everything else.
    pub fn new(backend: SearchBackend, url: Option<String>) -> Self {
        Self {
            backend,
            url,
            api_key_env: None,
            count: DEFAULT_COUNT,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
        }
    }

    /// The URL requests are built on, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        let url = match (self.backend, self.url.as_deref()) {
            (_, Some(url)) => url,
            (SearchBackend::Brave, None) => BRAVE_URL,
            // `validate` refuses a SearXNG backend without a URL.
            (SearchBackend::Searxng, None) => "",
        };
        url.trim_end_matches('/')
    }

    /// The environment variable holding the API key, for backends that need one.
    pub fn api_key_env(&self) -> Option<&str> {
        match self.backend {
            SearchBackend::Brave => Some(self.api_key_env.as_deref().unwrap_or(BRAVE_KEY_ENV)),
            SearchBackend::Searxng => None,
        }
    }

    /// Checks the table as a whole. The error names the key and says what to fix.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let at = |key: &'static str| key_path("web_search", key);
        match (self.backend, self.url.as_deref()) {
            (SearchBackend::Searxng, None) => {
                return Err((
                    "backend",
                    "web_search: backend = \"searxng\" needs `url`, the instance to query \
                     (say \"http://127.0.0.1:8888\")"
                        .to_owned(),
                ));
            }
            (_, Some(url)) if !is_http_url(url) => {
                return Err((
                    "url",
                    format!(
                        "{} must start with http:// or https:// (got {url:?})",
                        at("url")
                    ),
                ));
            }
            _ => {}
        }
        if let Some(name) = &self.api_key_env {
            if self.backend != SearchBackend::Brave {
                return Err((
                    "api_key_env",
                    format!(
                        "{}: only for backend = \"brave\"; a SearXNG instance takes no key",
                        at("api_key_env")
                    ),
                ));
            }
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err((
                    "api_key_env",
                    format!("{}: {name:?} is not a variable name", at("api_key_env")),
                ));
            }
        }
        if !(1..=MAX_COUNT).contains(&self.count) {
            return Err((
                "count",
                format!(
                    "{}: must be 1 to {MAX_COUNT} (got {})",
                    at("count"),
                    self.count
                ),
            ));
        }
        if self.timeout_secs == 0 {
            return Err((
                "timeout_secs",
                format!("{}: must be at least 1", at("timeout_secs")),
            ));
        }
        Ok(())
    }
}

impl Reader<'_> {
    /// `[web_fetch]`: bad keys are dropped (so their defaults apply), and so are limits
    /// of 0.
    pub(super) fn web_fetch(&mut self, table: &mut DeTable<'_>, span: Range<usize>) {
        let path = "web_fetch";
        let Some(read) = self.prune::<WebFetchConfig>(path, table, span, &[], Scope::Settings)
        else {
            return;
        };
        let zero = [
            ("max_bytes", read.max_bytes == 0),
            ("max_download_bytes", read.max_download_bytes == 0),
            ("timeout_secs", read.timeout_secs == 0),
        ];
        for (key, _) in zero.iter().filter(|(_, zero)| *zero) {
            let at = table.get(*key).map(Spanned::span);
            let what = format!("{}: must be at least 1", key_path(path, key));
            self.report(at, what, false, Scope::Settings);
            table.remove(*key);
        }
    }

    /// `[web_search]`: whether the table can be used. When it cannot, the caller removes
    /// it, so the tool is not offered.
    pub(super) fn web_search(&mut self, value: &mut Spanned<DeValue<'_>>) -> bool {
        let span = value.span();
        let scope = Scope::WebSearch;
        let DeValue::Table(table) = value.get_mut() else {
            let what = format!(
                "web_search: expected a table, found {}",
                value.get_ref().type_str()
            );
            self.report(Some(span), what, false, scope);
            return false;
        };
        let before = self.problems.len();
        // `backend` is required, so every other key is tried beside a stand-in.
        let read = self.prune::<WebSearchConfig>(
            "web_search",
            table,
            span.clone(),
            &[("backend", "searxng")],
            scope,
        );
        match read {
            _ if self.problems.len() > before => false,
            None => false,
            Some(config) => match config.validate() {
                Ok(()) => true,
                Err((key, what)) => {
                    let at = table.get(key).map(Spanned::span).or(Some(span));
                    self.report(at, what, false, scope);
                    false
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::LoadedConfig;
    use super::*;

    fn parse(text: &str) -> LoadedConfig {
        LoadedConfig::parse(Path::new("/p/config.toml"), text)
    }

    #[test]
    fn defaults_without_tables() {
        let loaded = parse("model = \"a/b\"\n");
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        assert_eq!(loaded.config.web_fetch, WebFetchConfig::default());
        assert_eq!(loaded.config.web_fetch.max_bytes, 100_000);
        assert_eq!(loaded.config.web_fetch.timeout_secs, 30);
        assert!(!loaded.config.web_fetch.block_private);
        assert_eq!(loaded.config.web_search, None);
    }

    #[test]
    fn full_tables_parse() {
        let loaded = parse(
            "[web_fetch]\nmax_bytes = 2000\nmax_download_bytes = 9000\ntimeout_secs = 5\n\
             block_private = true\n[web_search]\nbackend = \"brave\"\n\
             api_key_env = \"MY_KEY\"\ncount = 8\ntimeout_secs = 7\n",
        );
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let fetch = &loaded.config.web_fetch;
        assert_eq!(
            (
                fetch.max_bytes,
                fetch.max_download_bytes,
                fetch.timeout_secs
            ),
            (2000, 9000, 5)
        );
        assert!(fetch.block_private);
        let search = loaded.config.web_search.as_ref().unwrap();
        assert_eq!(search.backend, SearchBackend::Brave);
        assert_eq!(search.base_url(), BRAVE_URL);
        assert_eq!(search.api_key_env(), Some("MY_KEY"));
        assert_eq!((search.count, search.timeout_secs), (8, 7));

        let loaded =
            parse("[web_search]\nbackend = \"searxng\"\nurl = \"http://127.0.0.1:8888/\"\n");
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let search = loaded.config.web_search.unwrap();
        assert_eq!(search.base_url(), "http://127.0.0.1:8888");
        assert_eq!(search.api_key_env(), None);
        assert_eq!(search.count, DEFAULT_COUNT);
        let brave = WebSearchConfig::new(SearchBackend::Brave, None);
        assert_eq!(brave.api_key_env(), Some(BRAVE_KEY_ENV));
    }

    #[test]
    fn bad_fetch_keys_fall_back_to_their_defaults() {
        let loaded = parse(
            "[web_fetch]\nmax_bytes = 0\ntimeout_secs = \"long\"\nblock_private = true\n\
             max_dowload_bytes = 1\n",
        );
        let wanted = [
            "line 2: web_fetch.max_bytes: must be at least 1; using the default",
            "line 3: web_fetch.timeout_secs: invalid type",
            "line 5: web_fetch: unknown field `max_dowload_bytes`",
        ];
        assert_eq!(
            loaded.problems.len(),
            wanted.len(),
            "{:#?}",
            loaded.problems
        );
        for (problem, start) in loaded.problems.iter().zip(wanted) {
            let start = format!("config error in /p/config.toml {start}");
            assert!(problem.starts_with(&start), "{problem:?} vs {start:?}");
        }
        let fetch = &loaded.config.web_fetch;
        assert_eq!(fetch.max_bytes, DEFAULT_MAX_BYTES);
        assert_eq!(fetch.timeout_secs, DEFAULT_TIMEOUT_SECS);
        assert!(fetch.block_private, "the good key is kept");
    }

    #[test]
    fn a_broken_search_table_offers_no_tool() {
        let cases = [
            (
                "[web_search]\nurl = \"http://x\"\n",
                "line 1: web_search: missing field `backend`",
            ),
            (
                "[web_search]\nbackend = \"google\"\n",
                "line 2: web_search: unknown variant `google`",
            ),
            (
                "[web_search]\nbackend = \"searxng\"\n",
                "line 2: web_search: backend = \"searxng\" needs `url`",
            ),
            (
                "[web_search]\nbackend = \"brave\"\nurl = \"api.search.brave.com\"\n",
                "line 3: web_search.url must start with http:// or https://",
            ),
            (
                "[web_search]\nbackend = \"searxng\"\nurl = \"http://x\"\napi_key_env = \"K\"\n",
                "line 4: web_search.api_key_env: only for backend = \"brave\"",
            ),
            (
                "[web_search]\nbackend = \"brave\"\ncount = 50\n",
                "line 3: web_search.count: must be 1 to 20",
            ),
            (
                "[web_search]\nbackend = \"brave\"\ncuont = 5\n",
                "line 3: web_search: unknown field `cuont`",
            ),
            (
                "web_search = \"brave\"\n",
                "line 1: web_search: expected a table",
            ),
        ];
        for (text, start) in cases {
            let loaded = parse(text);
            assert_eq!(loaded.problems.len(), 1, "{text}: {:#?}", loaded.problems);
            let problem = &loaded.problems[0];
            let start = format!("config error in /p/config.toml {start}");
            assert!(problem.starts_with(&start), "{problem:?} vs {start:?}");
            assert!(
                problem.ends_with("; web_search is not offered until this is fixed"),
                "{problem}"
            );
            assert_eq!(loaded.config.web_search, None, "{text}");
        }
    }
}
