//! `[mcp_servers.<name>]`: reading, checking and writing back MCP server definitions.
//!
//! A definition is checked twice over: key by key like every other table (so each bad
//! key is reported), then as a whole ([`validate`]: a `command` or a `url`, never both,
//! keys that fit its transport). A server with any problem is not started: one read
//! in part could start another program, or send its headers to another place, than
//! the user wrote.
//!
//! `mcp_set`, `mcp_remove` and `mcp_toggle` write to the user's file with `toml_edit`,
//! which keeps the file's comments and layout; only the server's own table changes.

use std::path::Path;

use toml::de::{DeTable, DeValue};
use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, value};

use super::{Reader, Scope, is_http_url, key_path};
use crate::protocol::McpServerConfig;

/// What `timeout_ms` is when a server does not set it: the handshake and each tool
/// call. Generous because `npx`-started servers may download themselves first.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// The longest server name: names become part of tool names, which providers cap at 64.
const MAX_NAME: usize = 32;

impl Reader<'_> {
    /// `[mcp_servers]`: each server on its own. A server with a problem is removed from
    /// the table (so the config never holds it) and reported.
    pub(super) fn mcp_servers(&mut self, servers: &mut DeTable<'_>) {
        let mut dropped = Vec::new();
        for (name, server) in servers.iter_mut() {
            let name: &str = name.get_ref();
            let path = key_path("mcp_servers", name);
            let span = server.span();
            let scope = Scope::McpServer(name);
            if let Err(problem) = check_name(name) {
                self.report(Some(span), format!("{path}: {problem}"), false, scope);
                dropped.push(name.to_owned());
                continue;
            }
            let DeValue::Table(table) = server.get_mut() else {
                let what = format!(
                    "{path}: expected a table, found {}",
                    server.get_ref().type_str()
                );
                self.report(Some(span), what, false, scope);
                dropped.push(name.to_owned());
                continue;
            };
            let before = self.problems.len();
            let read = self.prune::<McpServerConfig>(&path, table, span.clone(), &[], scope);
            let problem = match read {
                _ if self.problems.len() > before => true,
                None => true,
                Some(config) => match validate(name, &config) {
                    Ok(()) => false,
                    Err(what) => {
                        self.report(Some(span), what, false, scope);
                        true
                    }
                },
            };
            if problem {
                dropped.push(name.to_owned());
            }
        }
        for name in dropped {
            servers.remove(name.as_str());
        }
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if fine {
        Ok(())
    } else {
        Err(format!(
            "a server name is 1 to {MAX_NAME} ASCII letters, digits, `_` or `-` (got {name:?})"
        ))
    }
}

/// Checks one definition as a whole. The error names the server and says what to fix.
pub fn validate(name: &str, config: &McpServerConfig) -> Result<(), String> {
    let at = key_path("mcp_servers", name);
    check_name(name).map_err(|problem| format!("{at}: {problem}"))?;
    let stdio_only = [
        ("args", !config.args.is_empty()),
        ("env", !config.env.is_empty()),
        ("cwd", config.cwd.is_some()),
    ];
    match (&config.command, &config.url) {
        (None, None) => {
            return Err(format!(
                "{at}: needs `command` (a stdio server) or `url` (a streamable HTTP server)"
            ));
        }
        (Some(_), Some(_)) => {
            return Err(format!(
                "{at}: has both `command` and `url`; a server is one or the other"
            ));
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(format!("{at}.command: is empty"));
            }
            if !config.headers.is_empty() {
                return Err(format!(
                    "{at}.headers: only for HTTP servers (with `url`), not with `command`"
                ));
            }
            for key in config.env.keys() {
                if key.is_empty() || key.contains(['=', '\0']) {
                    return Err(format!("{at}.env: {key:?} is not a variable name"));
                }
            }
        }
        (None, Some(url)) => {
            if !is_http_url(url) {
                return Err(format!(
                    "{at}.url: must start with http:// or https:// (got {url:?})"
                ));
            }
            if let Some((key, _)) = stdio_only.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "{at}.{key}: only for stdio servers (with `command`), not with `url`"
                ));
            }
            for (header, text) in &config.headers {
                if header.is_empty() || !header.bytes().all(is_token_byte) {
                    return Err(format!("{at}.headers: {header:?} is not a header name"));
                }
                expand_vars(text, |_| Some(String::new()))
                    .map_err(|problem| format!("{at}.headers.{header}: {problem}"))?;
            }
        }
    }
    if config.timeout_ms == Some(0) {
        return Err(format!("{at}.timeout_ms: must be at least 1"));
    }
    Ok(())
}

/// HTTP's `token` characters, which header names are made of.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Replaces each `${NAME}` in `text` by `lookup(NAME)`. The error says which variable
/// is missing, or where the syntax is wrong; `$` not followed by `{` is kept as is.
pub fn expand_vars(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("`${` without a closing `}`".to_owned());
        };
        let name = &after[..end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "`${{{name}}}` does not name an environment variable"
            ));
        }
        let Some(found) = lookup(name) else {
            return Err(format!("environment variable {name} is not set"));
        };
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `mcp_set`: writes `[mcp_servers.<name>]` (replacing an existing one, keeping the
/// comments above it).
pub fn persist_set(path: &Path, name: &str, config: &McpServerConfig) -> Result<(), String> {
    edit(path, |servers| {
        let mut table = server_table(config);
        if let Some(Item::Table(old)) = servers.get(name) {
            *table.decor_mut() = old.decor().clone();
            table.set_position(old.position());
        }
        servers.insert(name, Item::Table(table));
        Ok(())
    })
}

/// `mcp_remove`: deletes `[mcp_servers.<name>]` (nothing to do when it is not there).
pub fn persist_remove(path: &Path, name: &str) -> Result<(), String> {
    edit(path, |servers| {
        servers.remove(name);
        Ok(())
    })
}

/// `mcp_toggle`: sets `enabled` in `[mcp_servers.<name>]`.
pub fn persist_enabled(path: &Path, name: &str, enabled: bool) -> Result<(), String> {
    edit(path, |servers| match servers.get_mut(name) {
        Some(Item::Table(table)) => {
            table.insert("enabled", value(enabled));
            Ok(())
        }
        _ => Err(format!(
            "MCP server {name} is not in {} (was the file edited meanwhile?)",
            path.display()
        )),
    })
}

fn server_table(config: &McpServerConfig) -> Table {
    let mut table = Table::new();
    let strings = |items: &mut dyn Iterator<Item = &String>| {
        let mut array = Array::new();
        for item in items {
            array.push(item.as_str());
        }
        array
    };
    let map = |entries: &std::collections::BTreeMap<String, String>| {
        let mut inline = InlineTable::new();
        for (key, text) in entries {
            inline.insert(key, text.as_str().into());
        }
        inline
    };
    if let Some(command) = &config.command {
        table.insert("command", value(command.as_str()));
    }
    if !config.args.is_empty() {
        table.insert("args", value(strings(&mut config.args.iter())));
    }
    if !config.env.is_empty() {
        table.insert("env", value(map(&config.env)));
    }
    if let Some(cwd) = &config.cwd {
        table.insert("cwd", value(cwd.display().to_string()));
    }
    if let Some(url) = &config.url {
        table.insert("url", value(url.as_str()));
    }
    if !config.headers.is_empty() {
        table.insert("headers", value(map(&config.headers)));
    }
    if let Some(enabled) = config.enabled {
        table.insert("enabled", value(enabled));
    }
    if let Some(timeout) = config.timeout_ms {
        table.insert(
            "timeout_ms",
            value(i64::try_from(timeout).unwrap_or(i64::MAX)),
        );
    }
    table
}

/// Reads the file (none yet is an empty one), lets `change` edit `[mcp_servers]`, and
/// replaces the file in one rename, so a crash never leaves half a config behind.
fn edit(path: &Path, change: impl FnOnce(&mut Table) -> Result<(), String>) -> Result<(), String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(format!("cannot read {}: {err}", path.display())),
    };
    let mut doc: DocumentMut = text.parse().map_err(|err: toml_edit::TomlError| {
        format!(
            "cannot update {}: it is not valid TOML ({}); fix it first",
            path.display(),
            err.message().trim_end()
        )
    })?;
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut table = Table::new();
            table.set_implicit(true);
            Item::Table(table)
        })
        .as_table_mut()
        .ok_or_else(|| {
            format!(
                "cannot update {}: `mcp_servers` is not a table; write each server as \
                 [mcp_servers.<name>]",
                path.display()
            )
        })?;
    change(servers)?;
    write_atomically(path, doc.to_string().as_bytes())
        .map_err(|err| format!("cannot write {}: {err}", path.display()))
}

/// Replaces `path` with `bytes` in one rename (a crash never leaves half a file), keeping
/// its permissions.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        crate::config::private::create_dir_all(dir)?;
    }
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".{}.tmp", std::process::id()));
    let temp = std::path::PathBuf::from(temp);
    {
        use std::io::Write;
        // A new file is the user's alone (a config may hold keys); an existing one
        // keeps its mode below.
        let mut file = crate::config::private::file_options()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&temp)?;
        file.write_all(bytes)?;
    }
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&temp, meta.permissions());
    }
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LoadedConfig;

    fn stdio(command: &str) -> McpServerConfig {
        McpServerConfig {
            command: Some(command.into()),
            ..Default::default()
        }
    }

    #[test]
    fn servers_are_read_and_bad_ones_reported_and_dropped() {
        let text = r#"model = "a/b"
[mcp_servers.fs]
command = "npx"
args = ["-y", "srv"]
env = { A = "1" }
timeout_ms = 5000
[mcp_servers.web]
url = "https://example.com/mcp"
headers = { Authorization = "Bearer ${TOKEN}" }
enabled = false
[mcp_servers.both]
command = "x"
url = "http://x"
[mcp_servers.typo]
comand = "x"
[mcp_servers."bad.name"]
command = "x"
[mcp_servers.hdr]
command = "x"
headers = { A = "b" }
"#;
        let loaded = LoadedConfig::parse(Path::new("/p/config.toml"), text);
        let servers = &loaded.config.mcp_servers;
        assert_eq!(servers.keys().collect::<Vec<_>>(), ["fs", "web"]);
        assert_eq!(servers["fs"].args, ["-y", "srv"]);
        assert_eq!(servers["fs"].timeout_ms, Some(5000));
        assert_eq!(servers["web"].enabled, Some(false));
        assert_eq!(loaded.config.model.as_deref(), Some("a/b"));
        let wanted = [
            ("line 11:", "mcp_servers.both: has both `command` and `url`"),
            ("line 15:", "unknown field `comand`"),
            ("line 16:", "mcp_servers.\"bad.name\": a server name is"),
            ("line 18:", "mcp_servers.hdr.headers: only for HTTP servers"),
        ];
        assert_eq!(
            loaded.problems.len(),
            wanted.len(),
            "{:#?}",
            loaded.problems
        );
        for (problem, (line, what)) in loaded.problems.iter().zip(wanted) {
            assert!(
                problem.starts_with(&format!("config error in /p/config.toml {line}"))
                    && problem.contains(what)
                    && problem.ends_with("is not started until this is fixed"),
                "{problem:?} should be at {line} and say {what:?}"
            );
        }
    }

    #[test]
    fn definitions_are_validated_as_a_whole() {
        assert!(validate("fs", &stdio("npx")).is_ok());
        let http = McpServerConfig {
            url: Some("http://127.0.0.1:1/mcp".into()),
            ..Default::default()
        };
        assert!(validate("web", &http).is_ok());
        let cases = [
            ("fs", McpServerConfig::default(), "needs `command`"),
            ("fs", stdio(" "), "command: is empty"),
            ("a b", stdio("x"), "a server name is"),
            (&"x".repeat(33), stdio("x"), "a server name is"),
            (
                "w",
                McpServerConfig {
                    url: Some("ftp://x".into()),
                    ..Default::default()
                },
                "must start with http",
            ),
            (
                "w",
                McpServerConfig {
                    url: Some("http://x".into()),
                    args: vec!["a".into()],
                    ..Default::default()
                },
                "mcp_servers.w.args: only for stdio",
            ),
            (
                "w",
                McpServerConfig {
                    url: Some("http://x".into()),
                    headers: [("A".to_owned(), "${OPEN".to_owned())].into(),
                    ..Default::default()
                },
                "without a closing",
            ),
            (
                "fs",
                McpServerConfig {
                    timeout_ms: Some(0),
                    ..stdio("x")
                },
                "at least 1",
            ),
        ];
        for (name, config, what) in cases {
            let err = validate(name, &config).unwrap_err();
            assert!(err.contains(what), "{err:?} should say {what:?}");
        }
    }

    #[test]
    fn variables_expand() {
        let env = |name: &str| (name == "T").then(|| "secret".to_owned());
        assert_eq!(expand_vars("Bearer ${T}", env).unwrap(), "Bearer secret");
        assert_eq!(
            expand_vars("a$b ${T}${T}", env).unwrap(),
            "a$b secretsecret"
        );
        assert_eq!(
            expand_vars("${NOPE}", env).unwrap_err(),
            "environment variable NOPE is not set"
        );
        assert!(expand_vars("${a-b}", env).is_err());
    }

    #[test]
    fn edits_keep_comments_and_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let original = "# my settings\nmodel = \"a/b\"   # the model\n\n\
                        # the file server\n[mcp_servers.fs]\ncommand = \"old\"\n\n\
                        [providers.x]\nkind = \"openai\"\n";
        std::fs::write(&path, original).unwrap();
        let config = McpServerConfig {
            args: vec!["-y".into()],
            env: [("K".to_owned(), "v".to_owned())].into(),
            timeout_ms: Some(100),
            ..stdio("new")
        };
        persist_set(&path, "fs", &config).unwrap();
        persist_set(
            &path,
            "web",
            &McpServerConfig {
                url: Some("http://h/mcp".into()),
                headers: [("Authorization".to_owned(), "Bearer ${T}".to_owned())].into(),
                ..Default::default()
            },
        )
        .unwrap();
        persist_enabled(&path, "fs", false).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# my settings\nmodel = \"a/b\"   # the model\n\n# the file server\n[mcp_servers.fs]\ncommand = \"new\"\n"), "{text}");
        assert!(
            text.contains("[providers.x]\nkind = \"openai\"\n"),
            "{text}"
        );
        let loaded = LoadedConfig::parse(&path, &text);
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let servers = &loaded.config.mcp_servers;
        assert_eq!(
            servers["fs"],
            McpServerConfig {
                enabled: Some(false),
                ..config
            }
        );
        assert_eq!(servers["web"].headers["Authorization"], "Bearer ${T}");
        persist_remove(&path, "fs").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("mcp_servers.fs"), "{text}");
        assert!(text.contains("[mcp_servers.web]"), "{text}");
        assert!(persist_enabled(&path, "fs", true).is_err());
        // A broken file is never overwritten.
        std::fs::write(&path, "model = \n").unwrap();
        let err = persist_set(&path, "fs", &stdio("x")).unwrap_err();
        assert!(err.contains("not valid TOML"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "model = \n");
    }

    #[test]
    fn a_missing_file_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new/config.toml");
        persist_set(&path, "fs", &stdio("srv")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "[mcp_servers.fs]\ncommand = \"srv\"\n");
    }
}
