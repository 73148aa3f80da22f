//! jucode: a coding-agent engine built to be embedded.
//!
//! Front-ends drive sessions through serve protocol v2 (newline-delimited JSON); see
//! `docs/ARCHITECTURE.md` for the bird's-eye view.
//!
//! # Layout
//! Bottom up; a module only ever imports the ones listed before it.
//! - [`protocol`]: wire types of serve protocol v2 and the line codec. Knows no engine.
//! - [`config`]: the profile directory and `config.toml`.
//! - [`reaper`]: the process groups jucode starts, killed when it dies however it dies.
//! - [`engine`]: one session's state machine and turn loop. Defines the [`engine::ModelClient`]
//!   and [`engine::Tool`] traits it needs and never names a concrete provider or tool.
//! - [`providers`], [`tools`]: implementations of those traits.
//! - [`sessions`]: session files on disk (the engine's journal, loading, listing).
//! - [`providers`], [`tools`], [`mcp`]: implementations of those traits (`mcp` wraps
//!   the `rmcp` client of the Model Context Protocol).
//! - [`project`]: the project and the user's own resources (instructions, skills,
//!   custom commands, trust, hooks), behind the engine's [`engine::Project`].
//! - [`host`]: wires an engine session from a profile (config, catalog, tools).
//! - [`transport`]: moves lines between a byte stream and a session.

pub mod config;
pub mod engine;
pub mod engines;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
pub mod mcp;
pub mod project;
pub mod protocol;
pub mod providers;
pub mod reaper;
pub mod sessions;
pub mod tools;
pub mod transport;

/// The layering the crate docs state, checked on the sources: an import rule is a test,
/// not a sentence. Comments may name other layers; code may not.
#[cfg(test)]
mod tidy {
    use std::path::Path;

    /// The code (comments stripped) of every `.rs` file under `dir`, by path.
    fn sources(dir: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read a source directory") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|ext| ext == "rs") {
                    let text = std::fs::read_to_string(&path).expect("read a source file");
                    let code: String = text
                        .lines()
                        .filter(|line| !line.trim_start().starts_with("//"))
                        .collect::<Vec<_>>()
                        .join("\n");
                    out.push((path.display().to_string(), code));
                }
            }
        }
        assert!(!out.is_empty(), "no sources under {dir}");
        out
    }

    fn forbid(dir: &str, needles: &[&str], why: &str) {
        for (path, code) in sources(dir) {
            for needle in needles {
                assert!(!code.contains(needle), "{path} uses `{needle}`: {why}");
            }
        }
    }

    #[test]
    fn the_protocol_imports_nothing_above_it() {
        forbid(
            "src/protocol",
            &[
                "crate::config",
                "crate::engine",
                "crate::providers",
                "crate::tools",
                "crate::host",
                "crate::transport",
            ],
            "the protocol is the bottom layer",
        );
    }

    #[test]
    fn the_engine_names_no_provider_tool_or_transport() {
        forbid(
            "src/engine",
            &[
                "crate::providers",
                "crate::tools",
                "crate::mcp",
                "crate::host",
                "crate::transport",
                "rmcp",
            ],
            "the engine defines traits and is given implementations",
        );
        // Wire shapes are the protocol's: the engine derives none.
        forbid(
            "src/engine",
            &["Serialize", "Deserialize", "serde("],
            "the protocol layer owns every JSON field name",
        );
    }

    /// A hosted agent's session is a session like the engine's: the host opens it and
    /// the transports carry it, never the other way round.
    #[test]
    fn hosted_engines_know_no_host_or_transport() {
        forbid(
            "src/engines",
            &["crate::host", "crate::transport", "jucode_daemon"],
            "the host opens hosted sessions; transports carry their lines",
        );
    }

    #[test]
    fn providers_and_tools_know_no_transport() {
        for dir in ["src/providers", "src/tools", "src/mcp", "src/project"] {
            forbid(
                dir,
                &["crate::host", "crate::transport"],
                "transports sit above providers and tools",
            );
        }
    }

    /// `docs/ARCHITECTURE.md`'s code map names every source file: under the deepest
    /// `### \`path\`` heading that contains it, by its path from there (`turn/calls.rs`), or
    /// by its name (`calls.rs`) where that section names its folder (`turn/`) too. A
    /// folder's `mod.rs` is covered by its folder; unit tests (`tests.rs`, `*_tests.rs`)
    /// by the code they test.
    fn name_of(path: &str) -> &str {
        path.trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(path)
            .trim_end_matches(".rs")
    }

    #[test]
    fn the_code_map_names_every_source_file() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("read the doc");
        let mut sections: Vec<(String, String)> = Vec::new();
        for part in doc.split("\n### `").skip(1) {
            let Some((heading, body)) = part.split_once('`') else {
                continue;
            };
            sections.push((heading.to_owned(), body.to_owned()));
        }
        let mut missing = Vec::new();
        for dir in ["src", "daemon/src"] {
            for (path, _) in sources(dir) {
                let path = path
                    .strip_prefix(&format!("{}/", root.display()))
                    .unwrap_or(&path)
                    .to_owned();
                let name = path.rsplit('/').next().unwrap_or(&path);
                if name == "tests.rs" || name.ends_with("_tests.rs") {
                    continue;
                }
                // A file's section: the deepest heading that is its path or a folder of it
                // (`src/config.rs` also heads `src/config/`).
                let folder_of = |heading: &str| match heading.strip_suffix(".rs") {
                    Some(stem) => format!("{stem}/"),
                    None => heading.to_owned(),
                };
                let Some((heading, body)) = sections
                    .iter()
                    .filter(|(heading, _)| {
                        path == *heading
                            || folder_of(heading).ends_with('/')
                                && path.starts_with(folder_of(heading).as_str())
                    })
                    .max_by_key(|(heading, _)| heading.len())
                else {
                    missing.push(format!("{path} (no section)"));
                    continue;
                };
                if path == *heading {
                    continue;
                }
                let base = if path.starts_with(heading.as_str()) {
                    heading.clone()
                } else {
                    folder_of(heading)
                        .trim_end_matches(&format!("{}/", name_of(heading)))
                        .to_owned()
                };
                let relative = &path[base.len()..];
                let named = |text: &str| body.contains(&format!("`{text}`"));
                // Named by any tail of its path (`store/entry.rs`), or by its name where
                // its folder is named (`store/` ... `entry.rs`).
                let parts: Vec<&str> = relative.split('/').collect();
                let by_path =
                    (0..parts.len().saturating_sub(1)).any(|from| named(&parts[from..].join("/")));
                let folder = parts.len().checked_sub(2).map(|at| parts[at]);
                let folder_named = match folder {
                    None | Some("src") => true,
                    Some(folder) => named(&format!("{folder}/")) || by_path,
                };
                let covered = by_path || folder_named && (name == "mod.rs" || named(name));
                if !covered {
                    missing.push(path);
                }
            }
        }
        assert!(
            missing.is_empty(),
            "docs/ARCHITECTURE.md's code map does not name:\n{}",
            missing.join("\n")
        );
    }

    /// The Agent Client Protocol is the transports' business: outside `src/transport/`
    /// only the protocol's delegation module names its methods (the serve protocol's
    /// `client_request` borrows them on purpose, so an editor answers them as they are),
    /// and the one driver that speaks it to a hosted agent as its client.
    #[test]
    fn only_the_transports_name_acp_methods() {
        // Built here so that this very test does not match itself.
        let methods: Vec<String> = [
            ["fs/", "read_text_file"],
            ["fs/", "write_text_file"],
            ["terminal/", "create"],
            ["session/", "request_permission"],
            ["session/", "update"],
        ]
        .iter()
        .map(|parts| parts.concat())
        .collect();
        for dir in ["src", "daemon/src"] {
            for (path, code) in sources(dir) {
                if path.contains("src/transport/")
                    || path.ends_with("src/protocol/delegation.rs")
                    || path.ends_with("src/engines/acp.rs")
                {
                    continue;
                }
                for method in &methods {
                    assert!(
                        !code.contains(method.as_str()),
                        "{path} names ACP's {method}"
                    );
                }
            }
        }
    }

    /// Each tool describes its own calls (`Tool::describe`): the engine's code (its tests
    /// aside) names none of the tools it is given.
    #[test]
    fn the_engine_names_no_concrete_tool() {
        let tools = [
            "read_file",
            "list_dir",
            "grep",
            "bash",
            "write_file",
            "edit_file",
            "web_fetch",
            "web_search",
        ];
        for (path, code) in sources("src/engine") {
            if path.ends_with("tests.rs") {
                continue;
            }
            let code = code.split("#[cfg(test)]").next().unwrap_or_default();
            for tool in tools {
                let quoted = format!("\"{tool}\"");
                assert!(!code.contains(&quoted), "{path} names the tool {quoted}");
            }
        }
    }

    /// rmcp changes often: one wrapper module names it, so an upgrade is one file.
    #[test]
    fn only_the_mcp_client_names_rmcp() {
        for dir in ["src", "daemon/src"] {
            for (path, code) in sources(dir) {
                if path.contains("src/mcp/client/") {
                    continue;
                }
                // Built here so that this very test does not match itself.
                let needles = [["rmcp", "::"].concat(), ["use ", "rmcp"].concat()];
                assert!(
                    needles.iter().all(|needle| !code.contains(needle.as_str())),
                    "{path} names rmcp: only src/mcp/client/ may"
                );
            }
        }
    }

    /// The engine's layers, bottom up, by module path (the longest prefix decides); a
    /// file imports nothing from a layer above its own. The parts of the session's state
    /// and the output are below the state, the state below the work that changes it,
    /// and that below the session task: so emitting an event never needs the session.
    const ENGINE_LAYERS: &[(&str, u8)] = &[
        ("ports", 0),
        ("conversation", 0),
        ("commands", 0),
        ("emitter", 0),
        ("delegate", 0),
        ("turn::deferred", 0),
        ("agents::record", 0),
        ("agents::items", 0),
        ("agents::activity", 0),
        ("builtin::goal::state", 0),
        ("shared", 1),
        // A turn starts subagents, and a subagent's work is a turn: one layer.
        ("turn", 2),
        ("agents", 2),
        ("builtin", 2),
        // Opening a saved session yields a whole session's parameters.
        ("ports::library", 3),
        ("session", 3),
        ("", 3),
    ];

    fn engine_layer(module: &[String]) -> u8 {
        let path = module.join("::");
        ENGINE_LAYERS
            .iter()
            .filter(|(prefix, _)| {
                prefix.is_empty() || path == *prefix || path.starts_with(&format!("{prefix}::"))
            })
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, layer)| *layer)
            .expect("the empty prefix matches every path")
    }

    /// The paths a `use` tree stands for (`a::{b, c::d}` is `a::b` and `a::c::d`).
    fn use_paths(tree: &str) -> Vec<String> {
        // `x as y` names x.
        let mut words = tree.split_whitespace().peekable();
        let mut plain = String::new();
        while let Some(word) = words.next() {
            if word == "as" {
                let renamed = words.next().unwrap_or_default();
                plain.push_str(
                    renamed.trim_start_matches(|c: char| c == '_' || c.is_alphanumeric()),
                );
            } else {
                plain.push_str(word);
            }
        }
        let tree = plain;
        let Some(open) = tree.find('{') else {
            return vec![tree];
        };
        let (head, body) = (&tree[..open], &tree[open + 1..tree.len() - 1]);
        let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
        for (at, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&body[start..at]);
                    start = at + 1;
                }
                _ => {}
            }
        }
        parts.push(&body[start..]);
        parts
            .into_iter()
            .filter(|part| !part.is_empty())
            .flat_map(|part| use_paths(&format!("{head}{part}")))
            .collect()
    }

    /// The engine modules `code` (of the file at `module`, declaring `children`) names.
    fn engine_imports(module: &[String], children: &[String], code: &str) -> Vec<Vec<String>> {
        let mut paths = Vec::new();
        let mut rest = code;
        while let Some(at) = rest.find("use ") {
            let before = rest[..at].chars().last();
            let statement = &rest[at + 4..];
            let end = statement.find(';').unwrap_or(statement.len());
            if before.is_none_or(|c| c.is_whitespace() || c == ')') {
                paths.extend(use_paths(&statement[..end]));
            }
            rest = &statement[end..];
        }
        for start in ["super::", "crate::engine::"] {
            let mut rest = code;
            while let Some(at) = rest.find(start) {
                let path: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                paths.push(path);
                rest = &rest[at + start.len()..];
            }
        }
        paths
            .into_iter()
            .filter_map(|path| {
                let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
                let (mut base, mut segments) = match segments.first() {
                    Some(&"crate") if segments.get(1) == Some(&"engine") => {
                        (Vec::new(), &segments[2..])
                    }
                    Some(&"self") => (module.to_vec(), &segments[1..]),
                    Some(&"super") => (module.to_vec(), &segments[..]),
                    Some(first) if children.iter().any(|child| child == first) => {
                        (module.to_vec(), &segments[..])
                    }
                    _ => return None,
                };
                while segments.first() == Some(&"super") {
                    base.pop();
                    segments = &segments[1..];
                }
                base.extend(segments.iter().map(|s| s.to_string()));
                Some(base)
            })
            .collect()
    }

    #[test]
    fn the_engine_imports_no_layer_above_a_file() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
        let mut wrong = Vec::new();
        for (path, code) in sources("src/engine") {
            let relative = Path::new(&path)
                .strip_prefix(&root)
                .expect("under src/engine");
            let mut module: Vec<String> = relative
                .with_extension("")
                .iter()
                .map(|part| part.to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|last| last == "tests") {
                continue;
            }
            if module.last().is_some_and(|last| last == "mod") {
                module.pop();
            }
            let code = code
                .split("#[cfg(test)]\nmod tests {")
                .next()
                .unwrap_or_default();
            let children: Vec<String> = code
                .lines()
                .filter_map(|line| {
                    let line = line.trim_start().trim_start_matches("pub(super) ");
                    let line = line
                        .trim_start_matches("pub(crate) ")
                        .trim_start_matches("pub ");
                    line.strip_prefix("mod ")?
                        .strip_suffix(';')
                        .map(str::to_owned)
                })
                .collect();
            let own = engine_layer(&module);
            for import in engine_imports(&module, &children, code) {
                if engine_layer(&import) > own {
                    wrong.push(format!(
                        "{path} (layer {own}) imports engine::{} (layer {})",
                        import.join("::"),
                        engine_layer(&import)
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "see ENGINE_LAYERS:\n{}", wrong.join("\n"));
    }

    #[test]
    fn the_daemon_crate_knows_no_engine() {
        forbid(
            "daemon/src",
            &["jucode::", "crate::engine"],
            "the daemon hosts any Host and reads only `op` and `session`",
        );
    }
}
