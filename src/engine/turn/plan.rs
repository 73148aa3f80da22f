//! Plan mode's `propose_plan` tool, and reading a plan while the model is still
//! writing it.
//!
//! The model streams a tool call's arguments as JSON text in pieces. To show the plan
//! as it is written (`plan_draft`), [`PlanDraft`] re-reads the arguments received so far
//! and pulls out the `title` and `markdown` string values, tolerating a value cut off
//! mid-escape; each draft event carries only the Markdown added since the last one.

use serde_json::json;

use crate::engine::ports::model::ToolSpec;

pub const PROPOSE_PLAN: &str = "propose_plan";

pub fn propose_plan_spec() -> ToolSpec {
    ToolSpec {
        name: PROPOSE_PLAN.to_owned(),
        description: "Deliver your plan for the user's review. The session is in plan mode: \
                      investigate with read-only tools first, then call this once with the \
                      complete plan. The turn ends here; the user approves the plan (and \
                      you implement it) or asks for a revision."
            .to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "A short title for the plan."},
                "markdown": {"type": "string", "description": "The complete plan in Markdown: goal, steps, files to change, how to verify."}
            },
            "required": ["title", "markdown"],
            "additionalProperties": false
        }),
    }
}

pub fn new_plan_id() -> String {
    let bits = uuid::Uuid::new_v4().as_u128() as u64;
    format!("plan-{bits:016x}")
}

/// A plan being written: the arguments so far and what was already shown.
pub struct PlanDraft {
    pub id: String,
    arguments: String,
    title: String,
    shown: usize,
}

impl PlanDraft {
    pub fn new() -> Self {
        Self {
            id: new_plan_id(),
            arguments: String::new(),
            title: String::new(),
            shown: 0,
        }
    }

    /// Adds a fragment of the arguments; returns `(title, append)` when there is
    /// something new to show.
    pub fn push(&mut self, fragment: &str) -> Option<(String, String)> {
        self.arguments.push_str(fragment);
        let title = partial_string_field(&self.arguments, "title").unwrap_or_default();
        let markdown = partial_string_field(&self.arguments, "markdown").unwrap_or_default();
        let append = markdown.get(self.shown..).unwrap_or_default().to_owned();
        if append.is_empty() && title == self.title {
            return None;
        }
        self.shown = markdown.len();
        self.title.clone_from(&title);
        Some((title, append))
    }
}

impl Default for PlanDraft {
    fn default() -> Self {
        Self::new()
    }
}

/// The value of the top-level string member `key` of a possibly incomplete JSON object,
/// as far as it has arrived. `None` when the member has not started yet.
fn partial_string_field(json: &str, key: &str) -> Option<String> {
    let mut scan = Scanner {
        chars: json.char_indices().peekable(),
    };
    scan.skip_ws();
    if scan.next()? != '{' {
        return None;
    }
    loop {
        scan.skip_ws();
        match scan.next()? {
            '"' => {}
            ',' => continue,
            _ => return None,
        }
        let (name, complete) = scan.string();
        if !complete {
            return None;
        }
        scan.skip_ws();
        if scan.next()? != ':' {
            return None;
        }
        scan.skip_ws();
        if name == key {
            return match scan.next()? {
                '"' => Some(scan.string().0),
                _ => None,
            };
        }
        if !scan.skip_value() {
            return None;
        }
    }
}

struct Scanner<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
}

impl Scanner<'_> {
    fn next(&mut self) -> Option<char> {
        self.chars.next().map(|(_, c)| c)
    }

    fn skip_ws(&mut self) {
        while self.chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            self.chars.next();
        }
    }

    /// Reads a string body after its opening quote; returns it and whether it closed.
    fn string(&mut self) -> (String, bool) {
        let mut out = String::new();
        while let Some(c) = self.next() {
            match c {
                '"' => return (out, true),
                '\\' => match self.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('b') => out.push('\u{8}'),
                    Some('f') => out.push('\u{c}'),
                    Some('u') => match self.unicode_escape() {
                        Some(decoded) => out.push(decoded),
                        None => return (out, false),
                    },
                    Some(other) => out.push(other),
                    None => return (out, false),
                },
                other => out.push(other),
            }
        }
        (out, false)
    }

    /// The four hex digits after `\u`, joining a surrogate pair when one follows.
    fn unicode_escape(&mut self) -> Option<char> {
        let high = self.hex4()?;
        if !(0xD800..0xDC00).contains(&high) {
            return char::from_u32(high).or(Some('\u{fffd}'));
        }
        if self.next()? != '\\' || self.next()? != 'u' {
            return Some('\u{fffd}');
        }
        let low = self.hex4()?;
        let code = 0x10000 + ((high - 0xD800) << 10) + (low.wrapping_sub(0xDC00) & 0x3FF);
        char::from_u32(code).or(Some('\u{fffd}'))
    }

    fn hex4(&mut self) -> Option<u32> {
        let mut value = 0;
        for _ in 0..4 {
            value = value * 16 + self.next()?.to_digit(16)?;
        }
        Some(value)
    }

    /// Skips one complete value; false when it is cut off.
    fn skip_value(&mut self) -> bool {
        let mut depth = 0usize;
        loop {
            let Some(c) = self.next() else { return false };
            match c {
                '"' => {
                    if !self.string().1 {
                        return false;
                    }
                    if depth == 0 {
                        return true;
                    }
                }
                '{' | '[' => depth += 1,
                '}' | ']' => {
                    if depth == 0 {
                        return false;
                    }
                    depth -= 1;
                    if depth == 0 {
                        return true;
                    }
                }
                ',' if depth == 0 => return true,
                _ => {
                    if depth == 0
                        && self
                            .chars
                            .peek()
                            .is_some_and(|(_, next)| matches!(next, ',' | '}' | ' ' | '\n'))
                    {
                        return true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_of_incomplete_objects() {
        let full = r##"{"title": "Fix \"it\"", "markdown": "# Plan\n- step \u00e9 \ud83d\ude80"}"##;
        assert_eq!(
            partial_string_field(full, "title").as_deref(),
            Some("Fix \"it\"")
        );
        assert_eq!(
            partial_string_field(full, "markdown").as_deref(),
            Some("# Plan\n- step é 🚀")
        );
        for cut in 0..full.len() {
            if !full.is_char_boundary(cut) {
                continue;
            }
            // Never panics, and a cut value is a prefix of the full one.
            if let Some(markdown) = partial_string_field(&full[..cut], "markdown") {
                assert!(
                    "# Plan\n- step é 🚀".starts_with(&markdown),
                    "{cut}: {markdown:?}"
                );
            }
        }
        assert_eq!(partial_string_field(r#"{"title":"x""#, "markdown"), None);
        assert_eq!(
            partial_string_field(
                r#"{"n": 3, "other": {"a": [1, "}"]}, "markdown": "ok"#,
                "markdown"
            )
            .as_deref(),
            Some("ok")
        );
    }

    #[test]
    fn drafts_carry_only_what_is_new() {
        let mut draft = PlanDraft::new();
        assert!(draft.id.starts_with("plan-") && draft.id.len() == 21);
        assert_eq!(
            draft.push(r#"{"title": "Ref"#),
            Some(("Ref".into(), String::new()))
        );
        assert_eq!(
            draft.push(r##"actor", "markdown": "# A\n"##),
            Some(("Refactor".into(), "# A\n".into()))
        );
        assert_eq!(draft.push("\\"), None, "a cut escape shows nothing yet");
        assert_eq!(
            draft.push("n- b"),
            Some(("Refactor".into(), "\n- b".into()))
        );
        assert_eq!(draft.push(r#""}"#), None);
    }
}
