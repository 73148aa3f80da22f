//! What `web_fetch` makes of a body: which content types it reads, how bytes become
//! text, and HTML as readable text.
//!
//! - The `Content-Type` decides before the body is downloaded: HTML is converted,
//!   text-like types (`text/*`, JSON, XML, JavaScript, YAML ...) are returned as they
//!   are, and anything else known to be binary (images, PDF, archives, fonts ...) is
//!   refused without reading it. A missing type, or `application/octet-stream`, is
//!   decided by sniffing the first bytes.
//! - A NUL byte in the first 8 KiB marks binary data whatever the header says (the
//!   heuristic of git and `read_file`): a mislabelled file would only waste context.
//! - Bytes are decoded with the charset the header names, else the one a `<meta>`
//!   near the top of an HTML page names, else UTF-8 (a BOM wins over both), with
//!   `encoding_rs`, the WHATWG decoder; bad sequences become U+FFFD.
//! - HTML goes through `html2text` (html5ever's parser, the browsers' algorithm, and a
//!   renderer that walks the tree iteratively, so a hostile page nested a million
//!   deep cannot overflow the stack). Its output is Markdown-like: `#` headings, `*`
//!   list items, links as `[text][n]` with the URLs listed at the end; scripts, styles
//!   and other non-content elements are dropped. Lines are wrapped at
//!   [`HTML_WIDTH`] columns, wide enough that prose stays whole.

use encoding_rs::{Encoding, UTF_8};

/// Column width of rendered HTML.
const HTML_WIDTH: usize = 120;
/// Bytes looked at to sniff binary data, or an HTML page without a type.
const SNIFF_BYTES: usize = 8 * 1024;
/// Bytes of an HTML page searched for a `<meta charset>`.
const META_PRESCAN_BYTES: usize = 1024;

/// How a body is read, from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Html,
    Text,
    /// No usable type: decided from the bytes.
    Unknown,
    Binary,
}

/// Splits a `Content-Type` value into its lower-cased essence and charset.
pub(super) fn parse_type(value: &str) -> (String, Option<String>) {
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    let charset = parts.find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches('"').to_owned())
    });
    (essence, charset)
}

pub(super) fn kind(essence: &str) -> Kind {
    let Some((top, sub)) = essence.split_once('/') else {
        return Kind::Unknown;
    };
    let suffix = sub.rsplit_once('+').map(|(_, suffix)| suffix);
    match (top, sub) {
        (_, "html") | ("application", "xhtml+xml") => Kind::Html,
        ("text", _) => Kind::Text,
        (_, "octet-stream") => Kind::Unknown,
        _ if matches!(suffix, Some("json" | "xml" | "yaml")) => Kind::Text,
        (
            "application",
            "json"
            | "xml"
            | "javascript"
            | "ecmascript"
            | "x-javascript"
            | "yaml"
            | "x-yaml"
            | "toml"
            | "x-toml"
            | "x-ndjson"
            | "jsonl"
            | "x-sh"
            | "x-shellscript"
            | "sql"
            | "graphql"
            | "csv"
            | "x-www-form-urlencoded"
            | "x-tex"
            | "x-latex"
            | "rtf",
        ) => Kind::Text,
        _ => Kind::Binary,
    }
}

/// Whether the first bytes look like binary data.
pub(super) fn looks_binary(head: &[u8]) -> bool {
    head[..head.len().min(SNIFF_BYTES)].contains(&0)
}

/// Whether a body without a usable type is an HTML page.
pub(super) fn looks_like_html(body: &[u8]) -> bool {
    let head = &body[..body.len().min(SNIFF_BYTES)];
    let text = String::from_utf8_lossy(head);
    let start: String = text
        .trim_start_matches('\u{feff}')
        .trim_start()
        .chars()
        .take(15)
        .collect::<String>()
        .to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

/// The body as text, decoded as described in the module docs.
pub(super) fn decode(body: &[u8], charset: Option<&str>, html: bool) -> String {
    let named = charset
        .or_else(|| html.then(|| meta_charset(body)).flatten())
        .and_then(|label| Encoding::for_label(label.as_bytes()));
    let (text, _, _) = named.unwrap_or(UTF_8).decode(body);
    text.into_owned()
}

/// The charset a `<meta charset=...>` or `<meta http-equiv content="...; charset=...">`
/// near the top of a page names. A plain search, enough for the prescan's purpose
/// (the page is then parsed properly by html5ever).
fn meta_charset(body: &[u8]) -> Option<&str> {
    let head = &body[..body.len().min(META_PRESCAN_BYTES)];
    let lower = head.to_ascii_lowercase();
    let at = find(&lower, b"<meta")?;
    let after = at + find(&lower[at..], b"charset")? + b"charset".len();
    let rest = &head[after..];
    let rest = rest.strip_prefix(b"=").or_else(|| {
        let trimmed = rest.trim_ascii_start();
        trimmed.strip_prefix(b"=")
    })?;
    let rest = rest.trim_ascii_start();
    let rest = rest
        .strip_prefix(b"\"")
        .or(rest.strip_prefix(b"'"))
        .unwrap_or(rest);
    let end = rest
        .iter()
        .position(|b| matches!(b, b'"' | b'\'' | b';' | b'>' | b'/') || b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end])
        .ok()
        .filter(|label| !label.is_empty())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// An HTML page as readable text, and whether `stop` ended the parse early (the text
/// then covers the start of the page only).
///
/// html5ever's tree builder is quadratic in the nesting depth (each tag searches the
/// stack of open elements), so a hostile page of a few MB of `<div>`s would keep a
/// core busy for hours. The page is therefore fed to the parser in small reads, and
/// `stop` is asked before each: once it says so the parser sees the end of the input,
/// and what was parsed so far is rendered.
pub(super) fn html_to_text(html: &str, stop: &dyn Fn() -> bool) -> (String, bool) {
    let mut input = Stoppable {
        rest: html.as_bytes(),
        stop,
        stopped: false,
    };
    let rendered = html2text::config::plain()
        .allow_width_overflow()
        .no_link_wrapping()
        .string_from_read(&mut input, HTML_WIDTH);
    let stopped = input.stopped;
    let text = match rendered {
        Ok(text) => text,
        // The renderer gives up on nothing the parser accepts in practice; should it,
        // the page's text without structure is still worth more than an error.
        Err(_) => html2text::config::plain_no_decorate()
            .raw_mode(true)
            .string_from_read(
                Stoppable {
                    rest: html.as_bytes(),
                    stop,
                    stopped: false,
                },
                HTML_WIDTH,
            )
            .unwrap_or_default(),
    };
    (tidy(&text), stopped)
}

/// Bytes handed out [`READ_BYTES`] at a time, until `stop` says enough.
struct Stoppable<'a> {
    rest: &'a [u8],
    stop: &'a dyn Fn() -> bool,
    stopped: bool,
}

/// Bytes per read of [`Stoppable`]: small, so that the parse stops soon after `stop`
/// says so even where each tag costs a lot.
const READ_BYTES: usize = 1024;

impl std::io::Read for Stoppable<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.rest.is_empty() {
            return Ok(0);
        }
        if (self.stop)() {
            self.stopped = true;
            self.rest = &[];
            return Ok(0);
        }
        let n = buf.len().min(READ_BYTES).min(self.rest.len());
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

/// The link list html2text puts at the end (`[n]: href`) with every href made
/// absolute against the page's URL, so the model can pass it to the next `web_fetch`.
/// Only the trailing block of such lines is touched, never the page's own text.
pub(super) fn absolute_links(text: &str, base: &reqwest::Url) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let first = lines
        .iter()
        .rposition(|line| footnote(line).is_none())
        .map_or(0, |last_other| last_other + 1);
    if first == lines.len() {
        return text.to_owned();
    }
    let mut out = lines[..first].join("\n");
    for line in &lines[first..] {
        let href = footnote(line).unwrap_or_default();
        let number = &line[..line.len() - href.len()];
        let absolute = base
            .join(href)
            .map(String::from)
            .unwrap_or_else(|_| href.to_owned());
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(number);
        out.push_str(&absolute);
    }
    out
}

/// The href of a `[n]: href` line.
fn footnote(line: &str) -> Option<&str> {
    let (number, href) = line.strip_prefix('[')?.split_once("]: ")?;
    let numeric = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
    (numeric && !href.is_empty() && !href.contains(char::is_whitespace)).then_some(href)
}

/// A snippet of HTML (search results mark matches with `<strong>`) as plain text.
pub(super) fn snippet_text(html: &str) -> String {
    if !html.contains(['<', '&']) {
        return html.trim().to_owned();
    }
    let text = html2text::config::plain_no_decorate()
        .allow_width_overflow()
        .string_from_read(html.as_bytes(), usize::from(u16::MAX))
        .unwrap_or_else(|_| html.to_owned());
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Trailing spaces dropped and runs of blank lines folded into one: rendered pages
/// are full of both, and they cost context for nothing.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let kind_of = |value: &str| kind(&parse_type(value).0);
        assert_eq!(kind_of("text/html; charset=utf-8"), Kind::Html);
        assert_eq!(kind_of("application/xhtml+xml"), Kind::Html);
        assert_eq!(kind_of("text/plain"), Kind::Text);
        assert_eq!(kind_of("Text/Markdown"), Kind::Text);
        assert_eq!(kind_of("application/json"), Kind::Text);
        assert_eq!(kind_of("application/vnd.github+json"), Kind::Text);
        assert_eq!(kind_of("application/rss+xml"), Kind::Text);
        assert_eq!(kind_of("application/javascript"), Kind::Text);
        assert_eq!(kind_of("application/octet-stream"), Kind::Unknown);
        assert_eq!(kind_of(""), Kind::Unknown);
        for binary in [
            "image/png",
            "application/pdf",
            "application/zip",
            "font/woff2",
            "video/mp4",
        ] {
            assert_eq!(kind_of(binary), Kind::Binary, "{binary}");
        }
        assert_eq!(
            parse_type("text/html; Charset=\"ISO-8859-1\""),
            ("text/html".to_owned(), Some("ISO-8859-1".to_owned()))
        );
    }

    #[test]
    fn decodes_with_the_named_charset() {
        assert_eq!(decode(b"caf\xe9", Some("iso-8859-1"), false), "café");
        assert_eq!(decode("café".as_bytes(), None, false), "café");
        assert_eq!(decode(b"bad \xff byte", None, false), "bad \u{fffd} byte");
        let page =
            b"<html><head><meta charset=\"windows-1252\"></head><body>\x93hi\x94</body></html>";
        assert!(decode(page, None, true).contains("\u{201c}hi\u{201d}"));
        let equiv =
            b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=iso-8859-1\">\xe9";
        assert!(decode(equiv, None, true).ends_with('é'));
        // The header wins over the page; a BOM wins over both.
        assert!(decode(page, Some("utf-8"), true).contains('\u{fffd}'));
        assert_eq!(decode(b"\xef\xbb\xbfok", Some("iso-8859-1"), false), "ok");
    }

    #[test]
    fn sniffing() {
        assert!(looks_binary(b"PNG\0\0"));
        assert!(!looks_binary(b"plain text"));
        assert!(looks_like_html(b"\n  <!DOCTYPE html><html>"));
        assert!(looks_like_html(b"<html lang=en>"));
        assert!(!looks_like_html(b"{\"json\": true}"));
    }

    #[test]
    fn html_becomes_readable_text() {
        let html = r#"<!doctype html><html><head><title>T</title>
            <style>body { color: red }</style><script>alert("x")</script></head>
            <body><h1>Main title</h1><p>Some <b>bold</b> text and a
            <a href="https://example.com/doc">link</a>.</p>
            <h2>Sub</h2><ul><li>first</li><li>second</li></ul>
            <ol><li>one</li><li>two</li></ol><noscript>enable js</noscript>
            <pre>let x = 1;
let y = 2;</pre></body></html>"#;
        let (text, stopped) = html_to_text(html, &|| false);
        assert!(!stopped);
        assert!(text.contains("# Main title"), "{text}");
        assert!(text.contains("## Sub"), "{text}");
        assert!(text.contains("* first\n* second"), "{text}");
        assert!(text.contains("1. one\n2. two"), "{text}");
        assert!(text.contains("[link][1]"), "{text}");
        assert!(text.contains("[1]: https://example.com/doc"), "{text}");
        assert!(text.contains("let x = 1;\nlet y = 2;"), "{text}");
        for dropped in ["alert", "color: red", "\n\n\n", " \n"] {
            assert!(!text.contains(dropped), "{dropped:?} in {text}");
        }
    }

    #[test]
    fn a_page_too_costly_to_parse_is_cut_when_told() {
        // Parsing all of it would take hours (quadratic in the depth).
        let depth = 500_000;
        let html = format!("{}deep{}", "<div>".repeat(depth), "</div>".repeat(depth));
        let reads = std::cell::Cell::new(0);
        let stop = || {
            reads.set(reads.get() + 1);
            reads.get() > 20
        };
        let (text, stopped) = html_to_text(&html, &stop);
        assert!(stopped);
        assert!(!text.contains("deep"), "{text}");
        assert!(reads.get() <= 22, "asked {} times", reads.get());
    }

    #[test]
    fn deep_tables_and_lists_render() {
        for (open, close) in [
            ("<table><tr><td>", "</td></tr></table>"),
            ("<ul><li>", "</li></ul>"),
        ] {
            let html = format!("{}deep{}", open.repeat(1000), close.repeat(1000));
            let (text, stopped) = html_to_text(&html, &|| false);
            assert!(!stopped && !text.is_empty(), "{open}");
        }
    }

    #[test]
    fn trailing_links_become_absolute() {
        let base = reqwest::Url::parse("https://example.com/docs/page.html").unwrap();
        let text = "See [1]: not a link list\n\nBody [a][1] [b][2] [c][3]\n\n\
                    [1]: /root\n[2]: other.html#x\n[3]: https://else.example/";
        assert_eq!(
            absolute_links(text, &base),
            "See [1]: not a link list\n\nBody [a][1] [b][2] [c][3]\n\n\
             [1]: https://example.com/root\n[2]: https://example.com/docs/other.html#x\n\
             [3]: https://else.example/"
        );
        assert_eq!(absolute_links("no links", &base), "no links");
    }

    #[test]
    fn snippets_lose_their_markup() {
        assert_eq!(
            snippet_text("The <strong>Rust</strong> book &amp; more"),
            "The Rust book & more"
        );
        assert_eq!(snippet_text("  plain  "), "plain");
    }
}
