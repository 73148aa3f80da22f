//! The shell classifier: is a command line read-only, mutating, or dangerous?
//!
//! The approval policy runs read-only commands without asking, asks for mutating ones
//! (depending on the mode) and asks for dangerous ones even in `auto`; only
//! `full-access` runs them unasked, as it runs everything (plan mode refuses both).
//! So the two directions fail differently: calling a mutating command read-only lets it
//! run unasked, calling a read-only command mutating only costs a question. Hence the
//! rules:
//! - **Read-only** needs proof: the line lexes cleanly ([`lex`], [`parse`]), every
//!   simple command is a known program whose arguments are known to be safe ([`rules`],
//!   [`sed`], [`git`]), no output goes to a file (`>/dev/null`, `2>&1` are fine),
//!   nothing is substituted (`$(…)`, backticks, `<(…)`), and no assignment in front of
//!   a command changes how it behaves (only locale, time-zone and colour variables are
//!   allowed). The command name must be bare (`ls`, not `./ls`): a path could be any
//!   program.
//! - **Dangerous** is a deny-list ([`danger`]) of things that destroy data outside the
//!   project, rewrite shared history, take the machine down or escalate privileges. It is
//!   checked everywhere the shell would run something: every simple command, behind
//!   wrappers (`timeout`, `env`, `xargs`, `nice`…), inside substitutions and `sh -c`
//!   strings (to a small depth), and in lines that do not lex cleanly.
//! - Everything else is **mutating**, including anything unparseable that is not
//!   obviously dangerous.
//!
//! Paths are judged lexically against the session's working directory (`..` folded,
//! symlinks not followed); `cd` in the line moves the directory relative paths resolve
//! against, and a `cd` the classifier cannot follow makes later relative paths unknown.

mod danger;
mod git;
mod lex;
mod parse;
mod rules;
mod sed;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use self::lex::{RedirectKind, Word};
use self::parse::{Command, Script};
use super::files::normalize_lexically;

/// What running a command line would do, as far as approvals care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellClass {
    ReadOnly,
    Mutating,
    /// Asks even in `auto` (only `full-access` runs it unasked); says why.
    Dangerous(String),
}

impl ShellClass {
    /// The more serious of two classes: dangerous over mutating over read-only.
    fn and(self, other: ShellClass) -> ShellClass {
        match (self, other) {
            (danger @ ShellClass::Dangerous(_), _) | (_, danger @ ShellClass::Dangerous(_)) => {
                danger
            }
            (ShellClass::ReadOnly, ShellClass::ReadOnly) => ShellClass::ReadOnly,
            _ => ShellClass::Mutating,
        }
    }
}

/// Classifies `command` as it would run in `cwd` by a shell whose `~` and `$HOME` are
/// `home` (`None`: unknown, so paths through them cannot be checked). Taking the home
/// directory as an argument keeps the verdict a function of its inputs: tests pass a
/// fixed one, and the `bash` tool the one of the session's environment, which is what
/// its shell will expand.
pub fn classify_with_home(command: &str, cwd: &Path, home: Option<&Path>) -> ShellClass {
    let cwd = std::path::absolute(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    let cwd = normalize_lexically(&cwd);
    // A relative `HOME` is expanded as is by the shell, so it is relative to the cwd.
    let home = home.map(|home| normalize_lexically(&cwd.join(home)));
    let classifier = Classifier { cwd, home };
    classifier.line(command, 0)
}

/// Scratch space: writing there is an ordinary mutation, not a danger.
const TEMP_DIRS: [&str; 2] = ["/tmp", "/var/tmp"];

/// How deep `sh -c`, `eval` and substitutions are followed; deeper is dangerous.
const MAX_DEPTH: usize = 4;

struct Classifier {
    /// The session's working directory, absolute and normalized.
    cwd: PathBuf,
    /// The home directory the command's shell expands `~` to, absolute and normalized.
    home: Option<PathBuf>,
}

/// Where a path argument points, relative to the session's working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// Strictly inside it.
    Inside,
    /// The working directory itself (or everything in it, for `*`).
    Cwd,
    Outside(PathBuf),
    /// Depends on a variable, a substitution or a `cd` the classifier could not follow.
    Unknown,
}

impl Classifier {
    fn line(&self, text: &str, depth: usize) -> ShellClass {
        if depth > MAX_DEPTH {
            // Nobody nests that deep by accident; what runs in there was not checked.
            return ShellClass::Dangerous("commands nested too deeply to check".to_owned());
        }
        if let Some(reason) = danger::fork_bomb(text) {
            return ShellClass::Dangerous(reason);
        }
        let script = parse::parse(text);
        let mut class = if script.complete && !script.substitutes {
            ShellClass::ReadOnly
        } else {
            ShellClass::Mutating
        };
        for body in &script.substitutions {
            if let danger @ ShellClass::Dangerous(_) = self.line(body, depth + 1) {
                return danger;
            }
        }
        if let Some(reason) = danger::download_to_interpreter(&script) {
            return ShellClass::Dangerous(reason);
        }
        let mut dir = Some(self.cwd.clone());
        for command in &script.commands {
            class = class.and(self.command(command, &script, &mut dir, depth));
            if let ShellClass::Dangerous(_) = class {
                return class;
            }
        }
        class
    }

    /// One simple command; `dir` is where relative paths resolve (`None`: unknown).
    fn command(
        &self,
        command: &Command,
        script: &Script,
        dir: &mut Option<PathBuf>,
        depth: usize,
    ) -> ShellClass {
        let mut class = ShellClass::ReadOnly;
        for redirect in &command.redirects {
            if redirect.kind == RedirectKind::Output {
                class = class.and(self.write_target(&redirect.target, dir.as_deref()));
            }
        }
        // A bare assignment changes the shell's state (`PATH=…`); one in front of a
        // command may change how it behaves (`LD_PRELOAD=…`, `GIT_EXTERNAL_DIFF=…`).
        if !command.assignments.is_empty()
            && (command.words.is_empty()
                || !command.assignments.iter().all(rules::harmless_assignment))
        {
            class = class.and(ShellClass::Mutating);
        }
        let peeled = match rules::peel(&command.words) {
            Ok(peeled) => peeled,
            Err(reason) => return ShellClass::Dangerous(reason),
        };
        if !peeled.read_only {
            class = class.and(ShellClass::Mutating);
        }
        let Some((name, args)) = peeled.words.split_first() else {
            return class;
        };
        if name.expands || name.text.is_empty() {
            return class.and(ShellClass::Mutating);
        }
        let base = name.text.rsplit('/').next().unwrap_or(&name.text);
        let ctx = danger::Ctx {
            classifier: self,
            dir: dir.as_deref(),
            script,
            depth,
        };
        if let Some(reason) = danger::check(base, args, &ctx) {
            return ShellClass::Dangerous(reason);
        }
        // Programs that run other command lines: classify those.
        if let Some(inner) = rules::inner_script(base, args) {
            let inner = match inner {
                Some(text) => self.line(&text, depth + 1),
                None => ShellClass::Mutating,
            };
            return class.and(inner);
        }
        if let Some(targets) = rules::written_files(base, args) {
            for target in targets {
                class = class.and(self.write_target(target, dir.as_deref()));
            }
            return class.and(ShellClass::Mutating);
        }
        if matches!(base, "cd" | "pushd" | "popd") {
            *dir = self.change_dir(base, args, dir.as_deref());
        }
        let known = !name.text.contains('/') && rules::read_only(base, args, peeled.xargs);
        class.and(if known {
            ShellClass::ReadOnly
        } else {
            ShellClass::Mutating
        })
    }

    /// The directory after `cd`, `pushd` or `popd`.
    fn change_dir(&self, name: &str, args: &[Word], dir: Option<&Path>) -> Option<PathBuf> {
        let operands: Vec<&Word> = args
            .iter()
            .filter(|arg| !arg.text.starts_with('-'))
            .collect();
        if name == "popd" || args.iter().any(|arg| arg.text == "-") {
            return None;
        }
        match operands.as_slice() {
            [] => self.home.clone(),
            [target] => self.resolve(target, dir),
            _ => None,
        }
    }

    /// What writing to `target` means: fine for null devices, dangerous for other devices
    /// and for files outside the working directory (temporary directories excepted, see
    /// [`Self::is_scratch`]).
    fn write_target(&self, target: &Word, dir: Option<&Path>) -> ShellClass {
        let text = target.text.as_str();
        if !target.expands
            && (matches!(
                text,
                "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
            ) || text
                .strip_prefix("/dev/fd/")
                .is_some_and(|fd| fd.parse::<u32>().is_ok()))
        {
            return ShellClass::ReadOnly;
        }
        match self.place(target, dir) {
            Place::Outside(path) if path.starts_with("/dev") => {
                ShellClass::Dangerous(format!("writes to the device {}", path.display()))
            }
            Place::Outside(path) if !self.is_scratch(&path) => ShellClass::Dangerous(format!(
                "writes to {}, outside the working directory",
                path.display()
            )),
            _ => ShellClass::Mutating,
        }
    }

    /// Whether `path` is in a temporary directory, and not in a home directory that lies
    /// in one. CI runners and containers often set `HOME=/tmp/…`: without that second
    /// condition `>> ~/.bashrc` would be dangerous or not depending on where the home
    /// directory happens to be, while planting a shell startup file is the same danger
    /// wherever it is.
    fn is_scratch(&self, path: &Path) -> bool {
        TEMP_DIRS.iter().any(|temp| {
            let home_in_temp = self
                .home
                .as_ref()
                .is_some_and(|home| home.starts_with(temp) && path.starts_with(home));
            path.starts_with(temp) && !home_in_temp
        })
    }

    /// The absolute, normalized path a word names, when it can be known.
    fn resolve(&self, word: &Word, dir: Option<&Path>) -> Option<PathBuf> {
        let text = word.text.as_str();
        let home_rest = if word.tilde {
            match text {
                "~" => Some(""),
                _ => text.strip_prefix("~/"),
            }
        } else {
            ["$HOME", "${HOME}"].iter().find_map(|var| {
                let rest = text.strip_prefix(var)?;
                (rest.is_empty() || rest.starts_with('/')).then_some(rest)
            })
        };
        let path = if let Some(rest) = home_rest {
            if rest.contains('$') || !word.subs.is_empty() {
                return None;
            }
            self.home.as_ref()?.join(rest.trim_start_matches('/'))
        } else if word.tilde {
            // `~user`: another user's home, outside in any case.
            PathBuf::from("/home").join(text.trim_start_matches('~'))
        } else if word.expands || text.is_empty() {
            return None;
        } else if text.starts_with('/') {
            PathBuf::from(text)
        } else {
            dir?.join(text)
        };
        Some(normalize_lexically(&path))
    }

    /// Where a path argument points. A last component made of `*` stands for its whole
    /// directory; one like `.*` may match `..`, so it stands for the parent.
    fn place(&self, word: &Word, dir: Option<&Path>) -> Place {
        let Some(mut path) = self.resolve(word, dir) else {
            return Place::Unknown;
        };
        if word.glob
            && let Some(last) = path
                .file_name()
                .and_then(|name| name.to_str())
                .map(str::to_owned)
        {
            if last.chars().all(|c| c == '*') {
                path.pop();
            } else if last.starts_with('.') && last.contains(['*', '?', '[']) {
                path.pop();
                path.pop();
            }
        }
        if path == self.cwd {
            Place::Cwd
        } else if path.starts_with(&self.cwd) {
            Place::Inside
        } else {
            Place::Outside(path)
        }
    }
}
