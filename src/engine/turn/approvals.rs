//! The approval policy: which calls run, which ask, which plan mode refuses.
//!
//! | call                                      | manual | plan    | auto-edit | auto                 | full-access |
//! |-------------------------------------------|--------|---------|-----------|----------------------|-------------|
//! | read-only tools and shell commands        | run    | run     | run       | run                  | run         |
//! | network reads (`web_fetch`, `web_search`) | ask    | run     | run       | run                  | run         |
//! | file edits inside the session cwd         | ask    | refused | run       | run                  | run         |
//! | file edits outside the cwd                | ask    | refused | ask       | ask                  | run         |
//! | other shell commands                      | ask    | refused | ask       | run (dangerous: ask) | run         |
//! | … the sandbox contains (no network)       | ask    | refused | run (dangerous: ask) | run (dangerous: ask) | run |
//! | … asked to run unsandboxed                | ask    | refused | ask       | ask                  | ask         |
//!
//! MCP tools fall in these rows through their assessment: `readOnlyHint` tools are
//! read-only, every other MCP tool is gated as an "other shell command".
//!
//! A network read changes nothing on the machine, so plan mode runs it (research is
//! what planning needs), and only `manual` asks: there a person wants to see each place
//! the session reaches, what it sends (a URL, a query) being itself a disclosure. Chat
//! sessions register the web tools as read-only instead (`tools::register_web`).
//!
//! "Inside the cwd" is decided on resolved paths: the longest existing ancestor of each
//! path is canonicalized, so a symlink inside the project that points elsewhere counts
//! as outside.

use std::path::Path;

use crate::engine::ports::tools::{Confinement, Effect, Hunk, normalize, resolve_existing};
use crate::protocol::{ApprovalMode, Decision};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Run,
    Ask,
    /// Plan mode: the call is refused with this message for the model.
    Refuse(String),
}

pub fn gate(effect: &Effect, mode: ApprovalMode, name: &str, cwd: &Path) -> Gate {
    use ApprovalMode::*;
    let refuse = || Gate::Refuse(plan_refusal(name));
    match effect {
        Effect::ReadOnly => Gate::Run,
        Effect::Edit { paths } => {
            let inside = paths.iter().all(|path| is_inside(path, cwd));
            match mode {
                Manual => Gate::Ask,
                Plan => refuse(),
                AutoEdit | Auto if inside => Gate::Run,
                AutoEdit | Auto => Gate::Ask,
                FullAccess => Gate::Run,
            }
        }
        Effect::Network { .. } => match mode {
            Manual => Gate::Ask,
            Plan | AutoEdit | Auto | FullAccess => Gate::Run,
        },
        Effect::Exec {
            danger,
            confinement: Confinement::Unconfined,
        } => match mode {
            Manual | AutoEdit => Gate::Ask,
            Plan => refuse(),
            Auto if danger.is_some() => Gate::Ask,
            Auto | FullAccess => Gate::Run,
        },
        // The sandbox holds what it does: auto-edit runs it as auto does.
        Effect::Exec {
            danger,
            confinement: Confinement::Contained,
        } => match mode {
            Manual => Gate::Ask,
            Plan => refuse(),
            AutoEdit | Auto if danger.is_some() => Gate::Ask,
            AutoEdit | Auto | FullAccess => Gate::Run,
        },
        // Leaving the sandbox is always a person's decision.
        Effect::Exec {
            confinement: Confinement::Unsandboxed,
            ..
        } => match mode {
            Plan => refuse(),
            Manual | AutoEdit | Auto | FullAccess => Gate::Ask,
        },
    }
}

fn plan_refusal(name: &str) -> String {
    format!(
        "refused: the session is in plan mode, where only read-only tools run, so `{name}` \
         was not executed. Investigate with read-only tools, then deliver your plan with \
         the propose_plan tool instead of making changes."
    )
}

/// The mode a running turn uses: the looser of the mode it started with and the
/// session's current one. A turn's gating can only loosen while it runs.
pub fn effective_mode(started: ApprovalMode, current: ApprovalMode) -> ApprovalMode {
    if permissiveness(current) > permissiveness(started) {
        current
    } else {
        started
    }
}

fn permissiveness(mode: ApprovalMode) -> u8 {
    match mode {
        ApprovalMode::Plan => 0,
        ApprovalMode::Manual => 1,
        ApprovalMode::AutoEdit => 2,
        ApprovalMode::Auto => 3,
        ApprovalMode::FullAccess => 4,
    }
}

/// Whether `path` (absolute) lies inside `dir`, symlinks resolved.
pub fn is_inside(path: &Path, dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| normalize(dir));
    resolve_existing(&normalize(path)).starts_with(dir)
}

/// Checks an answer to an approval request; the error is the `error` event's message
/// (the request stays open so the client can retry).
pub fn validate_answer(
    decision: Decision,
    always: bool,
    hunks: Option<&[String]>,
    offered: Option<&[Hunk]>,
) -> Result<(), String> {
    let Some(hunks) = hunks else { return Ok(()) };
    if always {
        return Err("hunks cannot be combined with always".to_owned());
    }
    let Some(offered) = offered else {
        return Err("this approval request has no hunks to choose from".to_owned());
    };
    if decision == Decision::Deny {
        return Err("hunks apply to allow only; deny refuses the whole call".to_owned());
    }
    if hunks.is_empty() {
        return Err("hunks is empty: allow at least one hunk, or deny the call".to_owned());
    }
    let unknown: Vec<&str> = hunks
        .iter()
        .filter(|id| !offered.iter().any(|hunk| &hunk.id == *id))
        .map(String::as_str)
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "unknown hunk ids: {} (this request offers {})",
            unknown.join(", "),
            offered
                .iter()
                .map(|hunk| hunk.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ApprovalMode::*;
    use std::path::PathBuf;

    fn edit(path: &str) -> Effect {
        Effect::Edit {
            paths: vec![PathBuf::from(path)],
        }
    }

    #[test]
    fn the_mode_table() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path();
        let inside = cwd.join("src/lib.rs").display().to_string();
        let read = Effect::ReadOnly;
        let exec = |danger: Option<&str>, confinement| Effect::Exec {
            danger: danger.map(str::to_owned),
            confinement,
        };
        let shell = exec(None, Confinement::Unconfined);
        let dangerous = exec(Some("sudo"), Confinement::Unconfined);
        let contained = exec(None, Confinement::Contained);
        let contained_dangerous = exec(Some("git reset --hard"), Confinement::Contained);
        let unsandboxed = exec(None, Confinement::Unsandboxed);
        let network = Effect::Network {
            host: "example.com".into(),
        };
        let cases: &[(&Effect, [&str; 5])] = &[
            (&read, ["run", "run", "run", "run", "run"]),
            (&edit(&inside), ["ask", "refuse", "run", "run", "run"]),
            (&edit("/etc/hosts"), ["ask", "refuse", "ask", "ask", "run"]),
            (&shell, ["ask", "refuse", "ask", "run", "run"]),
            (&dangerous, ["ask", "refuse", "ask", "ask", "run"]),
            (&contained, ["ask", "refuse", "run", "run", "run"]),
            (&contained_dangerous, ["ask", "refuse", "ask", "ask", "run"]),
            (&unsandboxed, ["ask", "refuse", "ask", "ask", "ask"]),
            (&network, ["ask", "run", "run", "run", "run"]),
        ];
        for (effect, expected) in cases {
            for (mode, want) in ApprovalMode::ALL.iter().zip(expected) {
                let got = match gate(effect, *mode, "tool", cwd) {
                    Gate::Run => "run",
                    Gate::Ask => "ask",
                    Gate::Refuse(_) => "refuse",
                };
                assert_eq!(got, *want, "{effect:?} in {mode}");
            }
        }
    }

    #[test]
    fn symlinks_and_dotdot_escaping_the_cwd_are_outside() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        assert!(is_inside(&dir.path().join("new/dir/file"), dir.path()));
        assert!(!is_inside(&dir.path().join("link/file"), dir.path()));
        assert!(!is_inside(&dir.path().join("../x"), dir.path()));
    }

    #[test]
    fn gating_only_loosens_during_a_turn() {
        assert_eq!(effective_mode(Manual, Auto), Auto);
        assert_eq!(effective_mode(Auto, Manual), Auto);
        assert_eq!(effective_mode(Plan, AutoEdit), AutoEdit);
        assert_eq!(effective_mode(Manual, Plan), Manual);
    }

    #[test]
    fn answers_are_validated() {
        let hunks = vec![Hunk {
            id: "f0h0".into(),
            file: "a".into(),
            header: "@@ -1 +1 @@".into(),
            lines: vec![],
        }];
        let allow = Decision::Allow;
        assert!(validate_answer(allow, false, None, None).is_ok());
        let ids = vec!["f0h0".to_owned()];
        assert!(validate_answer(allow, false, Some(&ids), Some(&hunks)).is_ok());
        assert!(validate_answer(allow, true, Some(&ids), Some(&hunks)).is_err());
        assert!(validate_answer(allow, false, Some(&ids), None).is_err());
        assert!(validate_answer(Decision::Deny, false, Some(&ids), Some(&hunks)).is_err());
        let bad = vec!["f9h9".to_owned()];
        let err = validate_answer(allow, false, Some(&bad), Some(&hunks)).unwrap_err();
        assert!(err.contains("f9h9") && err.contains("f0h0"), "{err}");
    }
}
