//! `web_fetch`: one page, as readable text, with where it really came from.
//!
//! The call is in two steps. The download (request, redirects, headers, the body up
//! to `max_download_bytes`) runs under the total time bound and the turn's
//! cancellation; a binary `Content-Type` ends it before the body is read. The
//! conversion (decoding, HTML to text, the cut to `max_bytes`) is CPU work on bytes
//! already bounded; it runs on a thread of its own, off the runtime, and stops at the
//! same bound (it always gets [`MIN_CONVERT_TIME`]) or the interrupt: html5ever's
//! parse is quadratic in nesting depth, so "bounded bytes" alone does not bound its
//! time. The output always starts with the final URL, the status and the content type, so the
//! model can cite the page and knows an error page when it gets one (a 4xx or 5xx
//! answer is returned with its text, as an error).

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::content::{self, Kind};
use super::{ClientKind, address, assessment, check_scheme, client, cut_at, describe, read_capped};
use crate::config::WebFetchConfig;
use crate::engine::ports::model::ToolSpec;
use crate::engine::{Assessment, Tool, ToolContext, ToolOutput};
use crate::engine::{DescribeCall, string_arg};
use crate::protocol::{CallCard, CallKind};
use crate::tools::args::Args;

const NAME: &str = "web_fetch";
/// Time the conversion of a page always gets, even past the call's time bound.
const MIN_CONVERT_TIME: Duration = Duration::from_secs(2);
/// A day: longer bounds are taken as this (they mean "no bound" and must not overflow
/// the clock).
pub(super) const MAX_TIMEOUT_SECS: u64 = 24 * 3600;
/// Stack of the conversion thread (only what is touched is committed).
const CONVERTER_STACK: usize = 64 * 1024 * 1024;
const ACCEPT_VALUE: &str =
    "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5";

/// The bounds of one call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub max_bytes: usize,
    pub max_download: usize,
    pub timeout: Duration,
    pub block_private: bool,
}

impl From<&WebFetchConfig> for Limits {
    fn from(config: &WebFetchConfig) -> Self {
        Self {
            max_bytes: config.max_bytes.max(1),
            max_download: config.max_download_bytes.max(1),
            timeout: Duration::from_secs(config.timeout_secs.clamp(1, MAX_TIMEOUT_SECS)),
            block_private: config.block_private,
        }
    }
}

/// The `web_fetch` tool.
#[derive(Debug, Clone)]
pub struct WebFetch {
    limits: Limits,
    gated: bool,
}

impl WebFetch {
    pub fn new(config: &WebFetchConfig, network_gated: bool) -> Self {
        Self::with_limits(config.into(), network_gated)
    }

    pub(super) fn with_limits(limits: Limits, network_gated: bool) -> Self {
        Self {
            limits,
            gated: network_gated,
        }
    }
}

impl Tool for WebFetch {
    fn describe(&self, args: &Value, _cwd: &std::path::Path) -> CallCard {
        let url = string_arg(args, "url").unwrap_or_default();
        CallCard::of(
            CallKind::Fetch,
            format!("Fetch {url}"),
            None,
            format!("Fetching {url}"),
        )
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.to_owned(),
            description: format!(
                "Fetch a web page (http:// or https:// only) and return it as readable text. \
                 HTML is converted to Markdown-like text: `#` headings, `*` list items, links \
                 as [text][n] with the URLs listed at the end; scripts and styles are dropped. \
                 Plain text, JSON and XML come back as they are; images, PDFs and other \
                 binary content are refused. The output starts with the final URL (after at \
                 most {max_redirects} redirects), the HTTP status and the content type; an \
                 HTTP error status comes back as an error with the page's text. At most {max} \
                 bytes of text are returned: a note at the end says when the page was cut. \
                 Use it to read documentation, issues, changelogs or pages found with \
                 web_search.",
                max_redirects = super::MAX_REDIRECTS,
                max = self.limits.max_bytes,
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "url": {
                        "type": "string",
                        "description": "The absolute http:// or https:// URL of the page."
                    }
                },
                "required": ["url"],
                "additionalProperties": false
            }),
        }
    }

    fn assess(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        let gated = self.gated;
        let assessed = parse(args).map(|url| {
            let host = url.host_str().unwrap_or_default().to_owned();
            assessment(gated, host, format!("fetch {url}"))
        });
        async move { assessed.map_err(ToolOutput::error) }.boxed()
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let limits = self.limits;
        Box::pin(async move {
            let url = match parse(&args) {
                Ok(url) => url,
                Err(message) => return ToolOutput::error(message),
            };
            let kind = if limits.block_private {
                ClientKind::FetchPublicOnly
            } else {
                ClientKind::Fetch
            };
            let client = match client(kind) {
                Ok(client) => client,
                Err(message) => return ToolOutput::error(format!("{NAME}: {message}")),
            };
            let deadline = Instant::now() + limits.timeout;
            let download =
                tokio::time::timeout_at(deadline.into(), download(&client, &url, limits));
            let page = tokio::select! {
                done = download => match done {
                    Ok(Ok(page)) => page,
                    Ok(Err(message)) => return ToolOutput::error(message),
                    Err(_) => return ToolOutput::error(format!(
                        "{NAME}: {url}: no complete answer within {} ([web_fetch] \
                         timeout_secs); the server is slow or the page is endless",
                        seconds(limits.timeout)
                    )),
                },
                () = ctx.cancel.cancelled() => {
                    return ToolOutput::error(format!("{NAME}: cancelled"));
                }
            };
            // A page that arrived just before the bound still gets a moment to convert.
            let convert_until = deadline.max(Instant::now() + MIN_CONVERT_TIME);
            let cancel = ctx.cancel.clone();
            let stop = move || Instant::now() >= convert_until || cancel.is_cancelled();
            on_converter_thread(ctx.cancel, move || render(&url, page, limits, &stop)).await
        })
    }
}

/// Runs the conversion on a thread of its own with a large stack: html2text renders
/// iteratively, but not every part of it (table sizing) is, and a page is an outsider's
/// input. An interrupted turn gets its answer at once; the thread sees the same
/// cancellation through `stop` and ends at its next read.
async fn on_converter_thread<F>(cancel: CancellationToken, job: F) -> ToolOutput
where
    F: FnOnce() -> ToolOutput + Send + 'static,
{
    let (done, result) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("web_fetch-convert".to_owned())
        .stack_size(CONVERTER_STACK)
        .spawn(move || {
            let _ = done.send(job());
        });
    if let Err(err) = spawned {
        return ToolOutput::error(format!("{NAME}: internal error: {err}"));
    }
    tokio::select! {
        output = result => output.unwrap_or_else(|_| {
            ToolOutput::error(format!("{NAME}: internal error: the conversion failed"))
        }),
        () = cancel.cancelled() => ToolOutput::error(format!("{NAME}: cancelled")),
    }
}

/// The URL argument, checked: absolute, http or https.
fn parse(args: &Value) -> Result<Url, String> {
    let args = Args::new(NAME, args)?;
    let text = args.required_str("url")?.trim();
    let url = Url::parse(text).map_err(|err| {
        if text.contains("://") {
            format!("{NAME}: {text:?} is not a valid URL: {err}")
        } else {
            format!("{NAME}: {text:?} is not an absolute URL; give it with http:// or https://")
        }
    })?;
    check_scheme(&url).map_err(|refused| format!("{NAME}: refused: {refused}"))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{NAME}: {url} has no host"));
    }
    Ok(url)
}

/// What the download brought back.
pub(super) struct Page {
    url: Url,
    status: StatusCode,
    content_type: Option<String>,
    kind: Kind,
    charset: Option<String>,
    body: Vec<u8>,
    /// The body went on past `max_download`.
    cut: bool,
}

/// Requests `url` with `client` (whose resolver and redirect policy enforce the
/// address policy past the first hop) and reads the body within the limits.
pub(super) async fn download(
    client: &reqwest::Client,
    url: &Url,
    limits: Limits,
) -> Result<Page, String> {
    let fail = |what: String| format!("{NAME}: {url}: {what}");
    if limits.block_private {
        address::check_literal(url).map_err(|refused| fail(format!("refused: {refused}")))?;
    }
    let mut response = client
        .get(url.clone())
        .header(ACCEPT, ACCEPT_VALUE)
        .send()
        .await
        .map_err(|err| fail(describe(&err)))?;
    let final_url = response.url().clone();
    // The redirect machinery leaves a Location it cannot follow (`file:`, `ftp:`) alone
    // and hands back the redirect itself; refuse it as the policy would have.
    if response.status().is_redirection()
        && let Some(location) = response.headers().get(LOCATION)
        && let Ok(next) = final_url.join(location.to_str().unwrap_or_default())
        && let Err(refused) = check_scheme(&next)
    {
        return Err(fail(format!("refused: a redirect to {refused}")));
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let (essence, charset) = content_type
        .as_deref()
        .map(content::parse_type)
        .unwrap_or_default();
    let kind = content::kind(&essence);
    if kind == Kind::Binary {
        let size = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .map(|length| format!(", {length} bytes"))
            .unwrap_or_default();
        return Err(binary(&final_url, &format!("{essence}{size}")));
    }
    let (body, cut) = read_capped(&mut response, limits.max_download)
        .await
        .map_err(|err| format!("{NAME}: {final_url}: reading the page: {}", describe(&err)))?;
    Ok(Page {
        url: final_url,
        status: response.status(),
        content_type,
        kind,
        charset,
        body,
        cut,
    })
}

fn binary(url: &Url, what: &str) -> String {
    format!(
        "{NAME}: {url} is {what}, which web_fetch does not read: it returns text only \
         (HTML pages, plain text, JSON, XML). Look for an HTML or text version of it."
    )
}

/// The page as the model reads it: a header, the text, notes on what was cut.
pub(super) fn render(
    requested: &Url,
    page: Page,
    limits: Limits,
    stop: &dyn Fn() -> bool,
) -> ToolOutput {
    if content::looks_binary(&page.body) {
        let what = match &page.content_type {
            Some(content_type) => format!("binary data (served as {content_type})"),
            None => "binary data".to_owned(),
        };
        return ToolOutput::error(binary(&page.url, &what));
    }
    let html = match page.kind {
        Kind::Html => true,
        Kind::Unknown => content::looks_like_html(&page.body),
        Kind::Text | Kind::Binary => false,
    };
    let decoded = content::decode(&page.body, page.charset.as_deref(), html);
    let (text, stopped) = if html {
        let (text, stopped) = content::html_to_text(&decoded, stop);
        (content::absolute_links(&text, &page.url), stopped)
    } else {
        (decoded, false)
    };

    let mut out = format!("URL: {}\n", page.url);
    if page.url != *requested {
        out.push_str(&format!("Redirected from: {requested}\n"));
    }
    out.push_str(&format!("Status: {}\n", page.status));
    out.push_str(&format!(
        "Content-Type: {}\n\n",
        page.content_type.as_deref().unwrap_or("(none)")
    ));
    let shown = cut_at(&text, limits.max_bytes);
    if text.trim().is_empty() {
        out.push_str("(the page has no text)");
    } else {
        out.push_str(shown);
    }
    if shown.len() < text.len() {
        out.push_str(&format!(
            "\n\n[cut: the text is {} bytes; only the first {} are shown ([web_fetch] max_bytes)]",
            text.len(),
            shown.len()
        ));
    }
    if stopped {
        out.push_str(
            "\n\n[the page's HTML is too complex to convert within the time bound; the text \
             stops where the conversion did]",
        );
    }
    if page.cut {
        out.push_str(&format!(
            "\n\n[the page is larger than {} bytes; only that much was downloaded \
             ([web_fetch] max_download_bytes)]",
            limits.max_download
        ));
    }
    if page.status.is_success() {
        ToolOutput::ok(out)
    } else {
        ToolOutput::error(out)
    }
}

fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs} s")
    } else {
        format!("{secs:.1} s")
    }
}
