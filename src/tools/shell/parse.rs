//! A flat parser of lexed command lines into simple commands.
//!
//! Compound commands (`if`, `for`, `{ }`, subshells) are treated as their simple
//! commands in order, and reserved words are left for the classifier to skip: all it
//! needs is every command that would run, its redirections, and which commands share a
//! pipeline (for `curl … | sh`).

use super::lex::{Op, Redirect, Token, Word, lex};

/// A simple command: assignments, words and redirections, with its place in a pipeline.
#[derive(Debug, Clone, Default)]
pub(super) struct Command {
    pub assignments: Vec<Word>,
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
    /// Commands joined by `|` share this number; `;`, `&&`, `||`, `&` and newlines start
    /// a new one.
    pub pipeline: usize,
}

/// A lexed and parsed command line.
#[derive(Debug, Default)]
pub(super) struct Script {
    pub commands: Vec<Command>,
    /// Bodies of all command and process substitutions, heredoc ones included.
    pub substitutions: Vec<String>,
    /// Some expansion runs a command (`$(…)`, backticks, `<(…)`, `$((…))` with one).
    pub substitutes: bool,
    /// Lexed to the end without an open quote, substitution or heredoc.
    pub complete: bool,
}

pub(super) fn parse(input: &str) -> Script {
    let lexed = lex(input);
    Script {
        commands: commands(lexed.tokens),
        substitutions: lexed.substitutions,
        substitutes: lexed.substitutes,
        complete: lexed.complete,
    }
}

fn commands(tokens: Vec<Token>) -> Vec<Command> {
    let mut out = Vec::new();
    let mut current = Command::default();
    let mut pipeline = 0;
    let finish = |current: &mut Command, out: &mut Vec<Command>, pipeline: usize| {
        let mut done = std::mem::take(current);
        if !(done.words.is_empty() && done.assignments.is_empty() && done.redirects.is_empty()) {
            done.pipeline = pipeline;
            out.push(done);
        }
    };
    for token in tokens {
        match token {
            Token::Word(word) => {
                if current.words.is_empty() && word.assign_at.is_some() {
                    current.assignments.push(word);
                } else {
                    current.words.push(word);
                }
            }
            Token::Redirect(kind, target) => current.redirects.push(Redirect {
                kind,
                target: target.unwrap_or_default(),
            }),
            Token::Op(op) => {
                finish(&mut current, &mut out, pipeline);
                if !matches!(op, Op::Pipe | Op::Open | Op::Close) {
                    pipeline += 1;
                }
            }
        }
    }
    finish(&mut current, &mut out, pipeline);
    out
}
