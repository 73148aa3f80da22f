//! Which programs only read, with which arguments, and how wrappers are seen through.
//!
//! Two tiers:
//! - [`ANY_ARGS`]: programs that cannot write files or run other programs whatever
//!   their arguments (`cat`, `grep`, `ls`, `wc`…). Variables in their arguments are fine.
//! - Programs with a writing or executing option (`find -exec`, `sort -o`, `sed -i`,
//!   `rg --pre`, `date -s`…): read-only only when every argument is literal (a `$VAR`
//!   could expand to such an option) and none of those options is present.
//!
//! Deliberately not read-only: `awk` (`system()`), interpreters, `xargs` with anything
//! but an [`ANY_ARGS`] program (the appended arguments are unknown), `cargo metadata` and
//! `cargo tree` (they may update `Cargo.lock` and fetch the index), `less`/`man` (pagers
//! can run commands), `export`/`declare` (they change the environment of later
//! commands). Asking for those costs a question; a wrong "read-only" costs an
//! unreviewed change.

use super::lex::Word;
use super::{git, sed};

/// Programs that only read (or print) whatever their arguments.
const ANY_ARGS: &[&str] = &[
    ":",
    "[",
    "[[",
    "arch",
    "b2sum",
    "basename",
    "cat",
    "cd",
    "cksum",
    "cmp",
    "column",
    "comm",
    "cut",
    "df",
    "diff",
    "dirname",
    "du",
    "echo",
    "egrep",
    "expand",
    "false",
    "fgrep",
    "fold",
    "free",
    "grep",
    "groups",
    "head",
    "hexdump",
    "id",
    "jq",
    "join",
    "locale",
    "ls",
    "md5sum",
    "nl",
    "nproc",
    "od",
    "paste",
    "pgrep",
    "popd",
    "printenv",
    "printf",
    "ps",
    "pushd",
    "pwd",
    "readlink",
    "realpath",
    "rev",
    "seq",
    "set",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "sleep",
    "stat",
    "strings",
    "tac",
    "tail",
    "test",
    "tr",
    "true",
    "tty",
    "type",
    "uname",
    "unexpand",
    "uptime",
    "wait",
    "wc",
    "whereis",
    "which",
    "whoami",
];

/// Variables that may prefix a read-only command: locale, time zone, terminal and colour.
const HARMLESS_VARIABLES: &[&str] = &[
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "COLUMNS",
    "GREP_COLOR",
    "GREP_COLORS",
    "LANG",
    "LANGUAGE",
    "LINES",
    "LS_COLORS",
    "NO_COLOR",
    "TERM",
    "TZ",
];

/// Words that only structure a command (`if`, `do`, `{`…) and are skipped.
const RESERVED: &[&str] = &[
    "!", "{", "}", "do", "done", "elif", "else", "fi", "if", "then", "until", "while",
];

pub(super) const SHELLS: &[&str] = &["ash", "bash", "dash", "fish", "ksh", "mksh", "sh", "zsh"];

pub(super) fn harmless_assignment(word: &Word) -> bool {
    word.assign_at.is_some_and(|at| {
        let name = word.text[..at].trim_end_matches('+');
        name.starts_with("LC_") || HARMLESS_VARIABLES.contains(&name)
    })
}

/// A command with reserved words and wrappers peeled off.
pub(super) struct Peeled<'a> {
    /// The command that actually runs, with its arguments (empty for a loop header or
    /// a wrapper alone, such as `env` printing the environment).
    pub words: &'a [Word],
    /// The wrappers keep a read-only command read-only.
    pub read_only: bool,
    /// The command runs under `xargs`, with arguments nobody can see here.
    pub xargs: bool,
}

/// Peels `time`, `nice`, `timeout`, `env`, `xargs`… and reserved words; refuses
/// privilege escalation outright.
pub(super) fn peel(mut words: &[Word]) -> Result<Peeled<'_>, String> {
    let mut read_only = true;
    let mut xargs = false;
    while let Some((first, rest)) = words.split_first() {
        if first.quoted || first.expands {
            break;
        }
        let name = first.text.rsplit('/').next().unwrap_or(&first.text);
        if matches!(name, "sudo" | "doas" | "su" | "pkexec" | "run0") {
            return Err(format!("runs a command as another user ({name})"));
        }
        // `/usr/bin/env` is seen through for danger, but a path could be any program.
        if name != first.text {
            read_only = false;
        }
        words = match name {
            _ if RESERVED.contains(&first.text.as_str()) => rest,
            "for" | "select" if first.text == name => &[],
            "time" => skip_options(rest, &[]),
            "nohup" | "builtin" => rest,
            "exec" => skip_options(rest, &["-a"]),
            "nice" => skip_options(rest, &["-n", "--adjustment"]),
            "stdbuf" => skip_options(rest, &["-i", "-o", "-e", "--input", "--output", "--error"]),
            "timeout" => {
                let after = skip_options(rest, &["-s", "--signal", "-k", "--kill-after"]);
                after.get(1..).unwrap_or(&[])
            }
            "command" => {
                if rest
                    .iter()
                    .take_while(|w| w.text.starts_with('-'))
                    .any(|w| w.text.contains('v') || w.text.contains('V'))
                {
                    // `command -v name` looks a name up.
                    return Ok(Peeled {
                        words: &[],
                        read_only,
                        xargs,
                    });
                }
                skip_options(rest, &[])
            }
            "env" => {
                let options = &rest[..rest.len() - skip_options(rest, ENV_VALUES).len()];
                if options.iter().any(|w| {
                    let text = w.text.as_str();
                    text.starts_with("-S")
                        || text.starts_with("--split-string")
                        || text.starts_with("-C")
                        || text.starts_with("--chdir")
                }) {
                    read_only = false;
                }
                let mut after = skip_options(rest, ENV_VALUES);
                while let Some((assignment, more)) = after
                    .split_first()
                    .filter(|(word, _)| word.assign_at.is_some())
                {
                    read_only &= harmless_assignment(assignment);
                    after = more;
                }
                after
            }
            "xargs" => {
                xargs = true;
                skip_options(rest, XARGS_VALUES)
            }
            _ => break,
        };
    }
    Ok(Peeled {
        words,
        read_only,
        xargs,
    })
}

const ENV_VALUES: &[&str] = &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"];
const XARGS_VALUES: &[&str] = &[
    "-I",
    "-L",
    "-n",
    "-P",
    "-s",
    "-d",
    "-E",
    "-a",
    "--arg-file",
    "--delimiter",
    "--eof",
    "--max-args",
    "--max-chars",
    "--max-lines",
    "--max-procs",
    "--replace",
    "--process-slot-var",
];

/// The words after leading options (and a `--`); options in `with_value` take the next
/// word as their value.
pub(super) fn skip_options<'a>(mut words: &'a [Word], with_value: &[&str]) -> &'a [Word] {
    while let Some((first, rest)) = words.split_first() {
        let text = first.text.as_str();
        if text == "--" {
            return rest;
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        words = if with_value.contains(&text) {
            rest.get(1..).unwrap_or(&[])
        } else {
            rest
        };
    }
    words
}

/// For programs that run a command line given as an argument (`sh -c '…'`, `eval …`):
/// `Some(Some(line))`, or `Some(None)` when the line is not literal.
pub(super) fn inner_script(name: &str, args: &[Word]) -> Option<Option<String>> {
    if name == "eval" {
        let literal = args.iter().all(|arg| !arg.expands);
        let line = args.iter().map(|arg| arg.text.as_str()).collect::<Vec<_>>();
        return Some(literal.then(|| line.join(" ")));
    }
    if !SHELLS.contains(&name) {
        return None;
    }
    let mut takes_script = false;
    for arg in args {
        let text = arg.text.as_str();
        if text == "--" || !text.starts_with('-') && !text.starts_with('+') {
            if takes_script {
                return Some((!arg.expands).then(|| arg.text.clone()));
            }
            return None;
        }
        if !text.starts_with("--") && text[1..].contains('c') {
            takes_script = true;
        }
    }
    takes_script.then_some(None)
}

/// Files a program writes by design (`tee FILE…`), checked like redirections.
pub(super) fn written_files<'a>(name: &str, args: &'a [Word]) -> Option<Vec<&'a Word>> {
    (name == "tee").then(|| {
        args.iter()
            .filter(|arg| !arg.text.starts_with('-'))
            .collect()
    })
}

/// Whether `name` with `args` only reads.
pub(super) fn read_only(name: &str, args: &[Word], xargs: bool) -> bool {
    if ANY_ARGS.contains(&name) {
        return true;
    }
    // Under xargs, or with a variable that could expand to an option, the arguments
    // cannot be checked.
    if xargs || args.iter().any(|arg| arg.expands) {
        return false;
    }
    let texts: Vec<&str> = args.iter().map(|arg| arg.text.as_str()).collect();
    match name {
        "find" => !texts.iter().any(|arg| {
            matches!(
                *arg,
                "-exec"
                    | "-execdir"
                    | "-ok"
                    | "-okdir"
                    | "-delete"
                    | "-fprint"
                    | "-fprint0"
                    | "-fprintf"
                    | "-fls"
            )
        }),
        "fd" | "fdfind" => !texts
            .iter()
            .any(|arg| arg.starts_with("--exec") || short_cluster_has(arg, &['x', 'X'])),
        "rg" => !texts.iter().any(|arg| arg.starts_with("--pre")),
        "tree" => !texts.iter().any(|arg| short_cluster_has(arg, &['o', 'R'])),
        "file" => !texts
            .iter()
            .any(|arg| arg.starts_with("--compile") || short_cluster_has(arg, &['C'])),
        "sort" => !texts.iter().any(|arg| {
            arg.starts_with("--output")
                || arg.starts_with("--compress-program")
                || short_cluster_has(arg, &['o'])
        }),
        "uniq" => operands(&texts, &[]) <= 1,
        "xxd" => {
            operands(
                &texts,
                &["-c", "-g", "-l", "-s", "-o", "-n", "-cols", "-len"],
            ) <= 1
        }
        "date" => date(&texts),
        "hostname" => texts.iter().all(|arg| {
            arg.starts_with('-') && !arg.starts_with("--file") && !short_cluster_has(arg, &['F'])
        }),
        "command" => texts.first().is_some_and(|arg| matches!(*arg, "-v" | "-V")),
        "sed" => sed::read_only(&texts),
        "git" => git::read_only(&texts),
        _ => false,
    }
}

/// True for a single-dash option cluster (`-abc`) containing one of `letters`.
pub(super) fn short_cluster_has(arg: &str, letters: &[char]) -> bool {
    arg.starts_with('-') && !arg.starts_with("--") && arg[1..].contains(letters)
}

/// The number of non-option arguments; options in `with_value` consume the next word.
fn operands(args: &[&str], with_value: &[&str]) -> usize {
    let mut count = 0;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if *arg == "--" {
            return count + iter.count();
        }
        if with_value.contains(arg) {
            iter.next();
        } else if !arg.starts_with('-') || *arg == "-" {
            count += 1;
        }
    }
    count
}

/// `date` prints unless told to set the clock (`-s`, `--set`, or an operand without `+`).
fn date(args: &[&str]) -> bool {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match *arg {
            "-d" | "--date" | "-r" | "--reference" | "-f" | "--file" => {
                iter.next();
            }
            arg if arg.starts_with("--set") || short_cluster_has(arg, &['s']) => return false,
            arg if arg.starts_with('-') => {}
            arg if !arg.starts_with('+') => return false,
            _ => {}
        }
    }
    true
}
