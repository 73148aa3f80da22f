//! The shell classifier against a model that knows the answer: command lines built from
//! the fuzzer's bytes out of pieces whose effect is known (programs that only read,
//! programs that write, redirections to files or not, operators, subshells, command
//! substitutions, wrappers). A line the builder put a writing piece into must never be
//! called read-only. The converse is not asked: the classifier may be more careful than
//! the model (an unknown wrapper is "mutating").

use std::path::Path;

/// Commands that only read (with arguments that keep them so).
const READERS: &[&str] = &[
    "cat notes.txt",
    "ls -la",
    "grep -rn needle src",
    "head -n 5 a.rs",
    "wc -l a.rs",
    "echo hello",
    "git status",
    "git log --oneline -5",
    "git diff HEAD~1",
    "find . -name '*.rs'",
    "sed -n 1,5p a.rs",
    "rg pattern",
    "pwd",
    "tail -f log.txt",
    "sort a.txt",
    "diff a b",
    "stat a.rs",
    "printf '%s\\n' x",
];

/// Commands that write, each in a form a careless classifier might take for a reader.
const WRITERS: &[&str] = &[
    "rm a.rs",
    "rm -rf build",
    "mv a b",
    "cp a b",
    "touch new.txt",
    "mkdir out",
    "tee out.txt",
    "dd if=a of=b",
    "sed -i s/a/b/ a.rs",
    "sed -n 'w out' a.rs",
    "git commit -m msg",
    "git push",
    "git checkout -- a.rs",
    "git stash",
    "chmod +x run.sh",
    "ln -s a b",
    "truncate -s 0 a.rs",
    "find . -delete",
    "find . -name x -exec rm {} ;",
    "rmdir out",
    "install a b",
    "patch -p1",
    "curl -o page.html http://example.com",
    "npm install",
    "cargo build",
    "make",
    "python3 -c 'open(\"x\", \"w\")'",
    "xargs rm",
    "sort -o a.txt a.txt",
    "git branch -D old",
];

/// Redirections, and whether each writes a file.
const REDIRECTIONS: &[(&str, bool)] = &[
    ("", false),
    (" > out.txt", true),
    (" >> log.txt", true),
    (" 2> err.txt", true),
    (" &> all.txt", true),
    (" >| out.txt", true),
    (" > /dev/null", false),
    (" 2>/dev/null", false),
    (" 2>&1", false),
    (" < in.txt", false),
];

const OPERATORS: &[&str] = &[" ; ", " && ", " || ", " | ", "\n"];

/// Reads choices from the fuzzer's bytes; past their end every choice is 0.
struct Choices<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Choices<'_> {
    fn pick(&mut self, options: usize) -> usize {
        let byte = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        usize::from(byte) % options
    }

    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }
}

/// A command line and whether anything in it writes.
fn build(choices: &mut Choices<'_>, depth: usize) -> (String, bool) {
    let mut line = String::new();
    let mut writes = false;
    let commands = 1 + choices.pick(3);
    for n in 0..commands {
        if n > 0 {
            line.push_str(OPERATORS[choices.pick(OPERATORS.len())]);
        }
        let (command, command_writes) = simple(choices, depth);
        line.push_str(&command);
        writes |= command_writes;
        if choices.done() {
            break;
        }
    }
    (line, writes)
}

/// One command: a reader or a writer, perhaps wrapped or nested, with a redirection.
fn simple(choices: &mut Choices<'_>, depth: usize) -> (String, bool) {
    let (mut command, mut writes) = match choices.pick(8) {
        0..=3 => (READERS[choices.pick(READERS.len())].to_owned(), false),
        4 | 5 => (WRITERS[choices.pick(WRITERS.len())].to_owned(), true),
        6 if depth < 2 => {
            let (inner, inner_writes) = build(choices, depth + 1);
            match choices.pick(4) {
                0 => (format!("( {inner} )"), inner_writes),
                1 => (format!("{{ {inner}; }}"), inner_writes),
                // A space keeps `$( (` from reading as arithmetic `$((`.
                2 => (format!("echo \"$( {inner} )\""), inner_writes),
                // `$((` that is not arithmetic: a substitution of a subshell.
                _ => (format!("echo \"$(( {inner} ) 2>&1)\""), inner_writes),
            }
        }
        7 => {
            let wrapper =
                ["env ", "nice ", "time ", "timeout 5 ", "nohup ", "command "][choices.pick(6)];
            let (inner, inner_writes) = simple(choices, depth + 1);
            (format!("{wrapper}{inner}"), inner_writes)
        }
        _ => (READERS[choices.pick(READERS.len())].to_owned(), false),
    };
    let (redirection, redirection_writes) = REDIRECTIONS[choices.pick(REDIRECTIONS.len())];
    command.push_str(redirection);
    writes |= redirection_writes;
    (command, writes)
}

/// The differential property: a command line built from `data` that writes is never
/// classified read-only. Returns the line and the classifier's verdict.
pub fn shell_differential(data: &[u8]) -> (String, bool) {
    let mut choices = Choices { bytes: data, at: 0 };
    let (line, writes) = build(&mut choices, 0);
    let class = crate::tools::classify_with_home(
        &line,
        Path::new(super::SHELL_CWD),
        Some(Path::new(super::SHELL_HOME)),
    );
    let read_only = class == crate::tools::ShellClass::ReadOnly;
    assert!(
        !(writes && read_only),
        "classified read-only, but it writes: {line:?}"
    );
    (line, read_only)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn a_command_that_writes_is_never_read_only(data in proptest::collection::vec(any::<u8>(), 0..48)) {
            shell_differential(&data);
        }
    }

    /// The model must be able to say "read-only" too, or the property would hold of a
    /// classifier that calls everything mutating.
    #[test]
    fn the_model_builds_read_only_lines_the_classifier_accepts() {
        let (line, read_only) = shell_differential(&[0, 0, 0, 0]);
        assert_eq!(line, "cat notes.txt");
        assert!(read_only);
        let (line, read_only) = shell_differential(&[1, 0, 2, 0, 0, 3, 5, 0]);
        assert!(read_only, "{line}");
    }
}
