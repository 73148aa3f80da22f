//! The names MCP tools are offered to the model under.
//!
//! Providers accept tool names matching `^[a-zA-Z0-9_-]{1,64}$`, and names must be
//! unique across every server of the session. A tool `read` of server `fs` is
//! `mcp__fs__read`; other characters become `_`; a name too long is cut and given a
//! short hash of the original, and a name taken already (two tools that sanitise alike)
//! gets `_2`, `_3`, ... The assignment is a pure function of the servers' names and
//! their tools in order, so it is stable while they are.

use std::collections::BTreeSet;

/// Longest tool name providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// The exposed name of every tool, per server, in the order given.
pub fn assign<'a>(servers: impl IntoIterator<Item = (&'a str, Vec<&'a str>)>) -> Vec<Vec<String>> {
    let mut taken = BTreeSet::new();
    servers
        .into_iter()
        .map(|(server, tools)| {
            tools
                .into_iter()
                .map(|tool| {
                    let base = exposed(server, tool);
                    let mut name = base.clone();
                    let mut n = 2;
                    while taken.contains(&name) {
                        let suffix = format!("_{n}");
                        name = format!("{}{suffix}", cut(&base, MAX_TOOL_NAME - suffix.len()));
                        n += 1;
                    }
                    taken.insert(name.clone());
                    name
                })
                .collect()
        })
        .collect()
}

fn exposed(server: &str, tool: &str) -> String {
    let raw = format!("mcp__{server}__{tool}");
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_TOOL_NAME {
        return clean;
    }
    let hash = format!("_{:08x}", fnv1a(raw.as_bytes()) as u32);
    format!("{}{hash}", cut(&clean, MAX_TOOL_NAME - hash.len()))
}

/// The first `max` bytes (all ASCII here).
fn cut(text: &str, max: usize) -> &str {
    &text[..text.len().min(max)]
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        (1..=MAX_TOOL_NAME).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn names_are_sanitised_unique_and_short_enough() {
        let long = "t".repeat(80);
        let names = assign([
            ("fs", vec!["read", "read.file", "read_file", "read-file"]),
            (
                "gh",
                vec!["search issues", "ünïcode", long.as_str(), long.as_str()],
            ),
        ]);
        assert_eq!(
            names[0],
            [
                "mcp__fs__read",
                "mcp__fs__read_file",
                "mcp__fs__read_file_2",
                "mcp__fs__read-file"
            ]
        );
        assert_eq!(names[1][0], "mcp__gh__search_issues");
        assert_eq!(names[1][1], "mcp__gh___n_code");
        let all: Vec<&String> = names.iter().flatten().collect();
        assert!(all.iter().all(|name| valid(name)), "{all:?}");
        let unique: BTreeSet<&&String> = all.iter().collect();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        assert_eq!(names[1][2].len(), MAX_TOOL_NAME);
        assert_ne!(names[1][2], names[1][3]);
        // Stable: the same input gives the same names.
        assert_eq!(
            assign([("fs", vec!["read", "read.file", "read_file", "read-file"])])[0],
            names[0]
        );
    }
}
