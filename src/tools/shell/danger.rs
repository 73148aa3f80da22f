//! The deny-list: commands that ask even in `auto` approval mode. Only `full-access`
//! runs them unasked, as it runs everything (see the table in `engine/turn/approvals.rs`):
//! that mode is meant for a sandbox.
//!
//! Each rule names what it protects against:
//! - data outside the project: `rm -r` whose target is outside the working directory,
//!   is the working directory itself (`.`, `*`), or cannot be known (`$VAR`, a `cd`
//!   the classifier could not follow); `rm --no-preserve-root`; recursive
//!   `chmod`/`chown`/`chgrp` outside it (or any on `/`); `find … -delete` or
//!   `-exec rm` starting outside it; writes through redirections or `tee` outside it
//!   (checked by the caller);
//! - disks: `mkfs*`, `mke2fs`, `mkswap`, `wipefs`, `fdisk`, `sfdisk`, `cfdisk`,
//!   `parted`, `dd of=/dev/…`, redirections to devices;
//! - the machine: `shutdown`, `reboot`, `halt`, `poweroff`, `init 0|6`,
//!   `systemctl poweroff|reboot|halt|kexec`, `kill … -1` (every process), fork bombs;
//! - shared history and uncommitted work: see [`super::git`];
//! - running code from the network: `curl`/`wget` piped into a shell or interpreter
//!   that reads its program from stdin, or a shell/`eval`/`source` fed by a
//!   substitution that downloads;
//! - privilege escalation (`sudo`, `su`, `doas`, `pkexec`, `run0`) is refused while
//!   peeling wrappers, see [`super::rules::peel`].

use std::path::Path;

use super::lex::Word;
use super::parse::{Command, Script};
use super::{Classifier, Place, ShellClass, git, rules};

/// What a rule may consult besides the command's own words.
pub(super) struct Ctx<'a> {
    pub classifier: &'a Classifier,
    /// Where relative paths resolve; `None` after an unfollowable `cd`.
    pub dir: Option<&'a Path>,
    pub script: &'a Script,
    pub depth: usize,
}

const DISK_TOOLS: &[&str] = &[
    "cfdisk", "fdisk", "mke2fs", "mkswap", "parted", "sfdisk", "wipefs",
];

const INTERPRETERS: &[&str] = &[
    "ash", "bash", "dash", "fish", "ksh", "lua", "mksh", "node", "perl", "php", "pwsh", "ruby",
    "sh", "zsh",
];

pub(super) fn check(name: &str, args: &[Word], ctx: &Ctx<'_>) -> Option<String> {
    let texts: Vec<&str> = args.iter().map(|arg| arg.text.as_str()).collect();
    match name {
        "rm" => rm(args, ctx),
        "chmod" | "chown" | "chgrp" => ownership(name, args, ctx),
        "find" => find(args, ctx),
        "git" => git::danger(&texts),
        "dd" => texts
            .iter()
            .filter_map(|arg| arg.strip_prefix("of="))
            .find(|target| target.starts_with("/dev/") && *target != "/dev/null")
            .map(|target| format!("dd writes to the device {target}")),
        "kill" => kill(&texts),
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(format!("{name} stops the machine")),
        "init" | "telinit" if matches!(texts.first(), Some(&("0" | "6"))) => {
            Some(format!("{name} {} stops the machine", texts[0]))
        }
        "systemctl"
            if texts
                .iter()
                .any(|arg| matches!(*arg, "poweroff" | "reboot" | "halt" | "kexec")) =>
        {
            Some("systemctl stops the machine".to_owned())
        }
        _ if name.starts_with("mkfs") || DISK_TOOLS.contains(&name) => {
            Some(format!("{name} rewrites disks or partitions"))
        }
        _ => None,
    }
}

/// Options (until `--`) and operands of a command.
fn split_options(args: &[Word]) -> (Vec<&str>, Vec<&Word>) {
    let mut options = Vec::new();
    let mut operands = Vec::new();
    let mut done = false;
    for arg in args {
        let text = arg.text.as_str();
        if !done && text == "--" {
            done = true;
        } else if !done && text.starts_with('-') && text.len() > 1 {
            options.push(text);
        } else {
            operands.push(arg);
        }
    }
    (options, operands)
}

fn recursive(options: &[&str]) -> bool {
    options
        .iter()
        .any(|option| *option == "--recursive" || rules::short_cluster_has(option, &['r', 'R']))
}

fn rm(args: &[Word], ctx: &Ctx<'_>) -> Option<String> {
    let (options, targets) = split_options(args);
    if options.contains(&"--no-preserve-root") {
        return Some("rm --no-preserve-root".to_owned());
    }
    if !recursive(&options) {
        return None;
    }
    targets
        .into_iter()
        .find_map(|target| match ctx.classifier.place(target, ctx.dir) {
            Place::Inside => None,
            Place::Cwd => Some(format!(
                "rm -r of the whole working directory ({})",
                target.text
            )),
            Place::Outside(path) => Some(format!(
                "rm -r outside the working directory: {}",
                path.display()
            )),
            Place::Unknown => Some(format!(
                "rm -r on a path that cannot be checked: {}",
                target.text
            )),
        })
}

fn ownership(name: &str, args: &[Word], ctx: &Ctx<'_>) -> Option<String> {
    let (options, operands) = split_options(args);
    let recursive = options
        .iter()
        .any(|option| *option == "--recursive" || rules::short_cluster_has(option, &['R']));
    let by_reference = options
        .iter()
        .any(|option| option.starts_with("--reference"));
    let targets = operands.get(usize::from(!by_reference)..).unwrap_or(&[]);
    targets
        .iter()
        .find_map(|target| match ctx.classifier.place(target, ctx.dir) {
            Place::Outside(path) if recursive || path == Path::new("/") => Some(format!(
                "{name} -R outside the working directory: {}",
                path.display()
            )),
            Place::Unknown if recursive => Some(format!(
                "{name} -R on a path that cannot be checked: {}",
                target.text
            )),
            _ => None,
        })
}

/// `find` that deletes (`-delete`, `-exec rm…`) from a start outside the working
/// directory; commands run by `-exec` are classified like any other.
fn find(args: &[Word], ctx: &Ctx<'_>) -> Option<String> {
    let starts: Vec<&Word> = args
        .iter()
        .take_while(|arg| !arg.text.starts_with('-') && arg.text != "(" && arg.text != "!")
        .collect();
    let mut destructive = args.iter().any(|arg| arg.text == "-delete");
    let mut rest = args;
    while let Some(at) = rest
        .iter()
        .position(|arg| matches!(arg.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
    {
        let after = &rest[at + 1..];
        let end = after
            .iter()
            .position(|arg| arg.text == ";" || arg.text == "+")
            .unwrap_or(after.len());
        let words = &after[..end];
        rest = after.get(end + 1..).unwrap_or(&[]);
        let command = Command {
            words: words.to_vec(),
            ..Command::default()
        };
        let mut dir = ctx.dir.map(Path::to_path_buf);
        match ctx
            .classifier
            .command(&command, ctx.script, &mut dir, ctx.depth + 1)
        {
            ShellClass::Dangerous(reason) => return Some(reason),
            ShellClass::Mutating => {
                let name = words
                    .first()
                    .map(|word| word.text.rsplit('/').next().unwrap_or(""));
                destructive |= matches!(name, Some("rm" | "rmdir" | "shred" | "unlink" | "mv"));
            }
            ShellClass::ReadOnly => {}
        }
    }
    if !destructive {
        return None;
    }
    let default_start = Word {
        text: ".".to_owned(),
        ..Word::default()
    };
    let starts = if starts.is_empty() {
        vec![&default_start]
    } else {
        starts
    };
    starts
        .into_iter()
        .find_map(|start| match ctx.classifier.place(start, ctx.dir) {
            Place::Outside(path) => Some(format!(
                "find deletes outside the working directory: {}",
                path.display()
            )),
            Place::Unknown => Some(format!(
                "find deletes under a path that cannot be checked: {}",
                start.text
            )),
            _ => None,
        })
}

/// `kill` aimed at pid -1: every process the user may signal.
fn kill(args: &[&str]) -> Option<String> {
    let mut rest = args;
    match rest.first() {
        Some(&("-s" | "-n")) => rest = rest.get(2..).unwrap_or(&[]),
        Some(first) if first.starts_with('-') && *first != "--" && *first != "-1" => {
            rest = &rest[1..];
        }
        // `kill -1 …`: the first argument is a signal number when pids follow; alone it
        // names no process at all.
        Some(&"-1") if rest.len() > 1 => rest = &rest[1..],
        Some(&"-1") => return None,
        _ => {}
    }
    if rest.first() == Some(&"--") {
        rest = &rest[1..];
    }
    rest.contains(&"-1")
        .then(|| "kill -1 signals every process of the user".to_owned())
}

/// A function that calls itself twice in a pipe in the background: `:(){ :|:& };:`.
pub(super) fn fork_bomb(text: &str) -> Option<String> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut from = 0;
    while let Some(found) = compact[from..].find("(){") {
        let at = from + found;
        let name_start = compact[..at]
            .rfind(|c: char| ";&|(){}".contains(c))
            .map_or(0, |i| i + 1);
        let name = &compact[name_start..at];
        let body = &compact[at + 3..];
        if !name.is_empty() && body.starts_with(&format!("{name}|{name}&")) {
            return Some("fork bomb".to_owned());
        }
        from = at + 3;
    }
    None
}

/// `curl … | sh`, `bash <(curl …)`, `eval "$(wget -O- …)"`.
pub(super) fn download_to_interpreter(script: &Script) -> Option<String> {
    let mut downloading_pipeline = None;
    for command in &script.commands {
        let Ok(peeled) = rules::peel(&command.words) else {
            continue;
        };
        let Some((name, args)) = peeled.words.split_first() else {
            continue;
        };
        let base = name.text.rsplit('/').next().unwrap_or(&name.text);
        if matches!(base, "curl" | "wget") {
            downloading_pipeline = Some(command.pipeline);
            continue;
        }
        let interpreter = INTERPRETERS.contains(&base) || base.starts_with("python");
        if interpreter
            && downloading_pipeline == Some(command.pipeline)
            && reads_program_from_stdin(base, args)
        {
            return Some(format!("runs a downloaded script with {base}"));
        }
        let runs_text = interpreter || matches!(base, "eval" | "source" | ".");
        let downloads = |body: &String| {
            body.split(|c: char| !c.is_ascii_alphanumeric())
                .any(|word| word == "curl" || word == "wget")
        };
        if runs_text && args.iter().any(|arg| arg.subs.iter().any(downloads)) {
            return Some(format!("runs a downloaded script with {base}"));
        }
    }
    None
}

/// An interpreter reads its program from stdin unless given one inline (`-c` for
/// shells; `-c`, `-e`, `-E`, `-m` for the others) or as a file operand.
fn reads_program_from_stdin(name: &str, args: &[Word]) -> bool {
    let inline: &[char] = if rules::SHELLS.contains(&name) {
        &['c']
    } else {
        &['c', 'e', 'E', 'm']
    };
    for arg in args {
        let text = arg.text.as_str();
        if text == "--" || text == "-" {
            return true;
        }
        if let Some(long) = text.strip_prefix("--") {
            if matches!(long, "eval" | "command" | "print") {
                return false;
            }
            continue;
        }
        if let Some(short) = text.strip_prefix('-') {
            if short.contains(inline) {
                return false;
            }
            continue;
        }
        return false;
    }
    true
}
