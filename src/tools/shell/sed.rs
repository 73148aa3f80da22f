//! When a `sed` invocation only prints.
//!
//! `sed` writes files with `-i`, the `w`/`W` commands and the `w` flag of `s`, and runs
//! commands with `e` and the `e` flag of `s` (GNU). Spotting those letters in a script
//! is not enough (`s/new/few/` contains both), so the script is parsed with a small
//! grammar and accepted only when every command is one of the printing or
//! buffer-juggling ones (`p d q = l n N g G h H x z P D {}`), `s` with flags from
//! `g p i I m M` and digits, or `y`. Anything else (`a i c r R w W e b t :`…), `-f`
//! script files, `-i` and unknown options make the call not read-only.
//!
//! Regexes end at the first unescaped delimiter. GNU sed may read further (inside a
//! bracket expression), so this parser never treats as regex text something sed would
//! run as a command: at worst it rejects a harmless script.

pub(super) fn read_only(args: &[&str]) -> bool {
    let mut scripts: Vec<&str> = Vec::new();
    let mut operands: Vec<&str> = Vec::new();
    let mut iter = args.iter().copied();
    let mut options_done = false;
    while let Some(arg) = iter.next() {
        if options_done || !arg.starts_with('-') || arg == "-" {
            operands.push(arg);
            continue;
        }
        if arg == "--" {
            options_done = true;
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            match long {
                "quiet" | "silent" | "regexp-extended" | "separate" | "null-data"
                | "zero-terminated" | "unbuffered" | "posix" | "debug" | "sandbox" => {}
                "expression" | "line-length" => {
                    let Some(value) = iter.next() else {
                        return false;
                    };
                    if long == "expression" {
                        scripts.push(value);
                    }
                }
                _ if long.starts_with("line-length=") => {}
                _ => match long.strip_prefix("expression=") {
                    Some(script) => scripts.push(script),
                    None => return false,
                },
            }
            continue;
        }
        let cluster = &arg[1..];
        for (at, letter) in cluster.char_indices() {
            let rest = &cluster[at + letter.len_utf8()..];
            match letter {
                'n' | 'E' | 'r' | 's' | 'z' | 'u' => {}
                'e' | 'l' => {
                    let value = if rest.is_empty() {
                        iter.next()
                    } else {
                        Some(rest)
                    };
                    let Some(value) = value else {
                        return false;
                    };
                    if letter == 'e' {
                        scripts.push(value);
                    }
                    break;
                }
                _ => return false,
            }
        }
    }
    if scripts.is_empty() {
        if operands.is_empty() {
            return false;
        }
        scripts.push(operands.remove(0));
    }
    scripts.iter().all(|script| Parser::new(script).read_only())
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn new(script: &str) -> Self {
        Self {
            chars: script.chars().collect(),
            pos: 0,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_spaces(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn read_only(mut self) -> bool {
        loop {
            while matches!(self.peek(), Some(' ' | '\t' | '\n' | ';')) {
                self.pos += 1;
            }
            let Some(_) = self.peek() else {
                return true;
            };
            if self.peek() == Some('#') {
                while self.peek().is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
                continue;
            }
            if !self.addresses() {
                return false;
            }
            let Some(command) = self.peek() else {
                return false;
            };
            self.pos += 1;
            let ok = match command {
                'p' | 'P' | 'd' | 'D' | '=' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H' | 'x' | 'z'
                | '}' => true,
                'q' | 'Q' | 'l' => {
                    self.skip_spaces();
                    while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        self.pos += 1;
                    }
                    true
                }
                // A block: its commands follow directly.
                '{' => continue,
                's' => self.substitute(),
                'y' => self.transliterate(),
                _ => false,
            };
            if !ok {
                return false;
            }
            self.skip_spaces();
            match self.peek() {
                None | Some(';' | '\n' | '}') => {}
                _ => return false,
            }
        }
    }

    /// Optional `addr[,addr2]` and `!`. False on a malformed address.
    fn addresses(&mut self) -> bool {
        if !self.address() {
            return false;
        }
        self.skip_spaces();
        if self.peek() == Some(',') {
            self.pos += 1;
            self.skip_spaces();
            if matches!(self.peek(), Some('+' | '~')) {
                self.pos += 1;
                if !self.digits() {
                    return false;
                }
            } else {
                let before = self.pos;
                if !self.address() || self.pos == before {
                    return false;
                }
            }
        }
        self.skip_spaces();
        while self.peek() == Some('!') {
            self.pos += 1;
            self.skip_spaces();
        }
        true
    }

    /// One optional address; false only when one starts but is malformed.
    fn address(&mut self) -> bool {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => {
                self.digits();
                if self.peek() == Some('~') {
                    self.pos += 1;
                    return self.digits();
                }
                true
            }
            Some('$') => {
                self.pos += 1;
                true
            }
            Some('/') => {
                self.pos += 1;
                self.regex_flags('/')
            }
            Some('\\') => {
                self.pos += 1;
                match self.peek() {
                    Some(delimiter) if delimiter != '\n' && delimiter != '\\' => {
                        self.pos += 1;
                        self.regex_flags(delimiter)
                    }
                    _ => false,
                }
            }
            _ => true,
        }
    }

    fn digits(&mut self) -> bool {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos > start
    }

    fn regex_flags(&mut self, delimiter: char) -> bool {
        if !self.until(delimiter) {
            return false;
        }
        while matches!(self.peek(), Some('I' | 'M')) {
            self.pos += 1;
        }
        true
    }

    /// Skips to just after the next unescaped `delimiter`; false if there is none.
    fn until(&mut self, delimiter: char) -> bool {
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == '\\' {
                self.pos += 1;
            } else if c == delimiter {
                return true;
            }
        }
        false
    }

    /// After `s`: `/regex/replacement/flags` with only printing flags.
    fn substitute(&mut self) -> bool {
        let Some(delimiter) = self.peek().filter(|&c| c != '\n' && c != '\\') else {
            return false;
        };
        self.pos += 1;
        if !self.until(delimiter) || !self.until(delimiter) {
            return false;
        }
        while let Some(flag) = self.peek() {
            match flag {
                'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => self.pos += 1,
                _ => break,
            }
        }
        true
    }

    /// After `y`: `/source/dest/`.
    fn transliterate(&mut self) -> bool {
        let Some(delimiter) = self.peek().filter(|&c| c != '\n' && c != '\\') else {
            return false;
        };
        self.pos += 1;
        self.until(delimiter) && self.until(delimiter)
    }
}
