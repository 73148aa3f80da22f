//! jucode: a coding-agent engine built to be embedded.
//!
//! Front-ends drive sessions through serve protocol v2 (newline-delimited JSON); see
//! `docs/ARCHITECTURE.md` for the bird's-eye view.
//!
//! # Layout
//! Bottom up; a module only ever imports the ones listed before it.
//! - [`protocol`]: wire types of serve protocol v2 and the line codec. Knows no engine.
//! - [`config`]: the profile directory and `config.toml`.
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
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod host;
pub mod mcp;
pub mod project;
pub mod protocol;
pub mod providers;
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

    /// rmcp changes often: one wrapper module names it, so an upgrade is one file.
    #[test]
    fn only_the_mcp_client_names_rmcp() {
        for dir in ["src", "daemon/src"] {
            for (path, code) in sources(dir) {
                if path.ends_with("src/mcp/client.rs") {
                    continue;
                }
                // Built here so that this very test does not match itself.
                let needles = [["rmcp", "::"].concat(), ["use ", "rmcp"].concat()];
                assert!(
                    needles.iter().all(|needle| !code.contains(needle.as_str())),
                    "{path} names rmcp: only src/mcp/client.rs may"
                );
            }
        }
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
