//! A POSIX-shell lexer, for classification only.
//!
//! Why not a shell-words splitter such as `shlex`: those return words and lose the
//! difference between an operator and a quoted character (`echo "a | b"` and `a | b`
//! split alike), and they know nothing of redirections, substitutions or heredocs.
//! The classifier needs exactly those, so this lexer keeps them as tokens:
//! - quoting as the shell does it (`'…'`, `"…"` with its four escapes, `\x`, `$'…'`),
//!   producing each word's literal text after quote removal;
//! - operators (`|`, `|&`, `&&`, `||`, `;`, `&`, newline, `(`, `)`) and redirections
//!   with their optional fd (`2>`, `>>`, `&>`, `>&2`, `<<<`, `<<-`…);
//! - command substitutions (`$(…)`, backticks, `<(…)`, `>(…)`), whose bodies are kept so
//!   the classifier can look inside them, and other expansions (`$VAR`, `${…}`,
//!   `$((…))`), which are flagged on the word;
//! - heredoc bodies, which are data, not commands.
//!
//! Input that does not end cleanly (an open quote, substitution or heredoc) still lexes,
//! as if closed at the end, but is marked incomplete: such a command is never read-only,
//! and its dangerous parts are still found.

/// One word after quote removal. Expansions are kept verbatim in `text` (`$HOME/x`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Word {
    pub text: String,
    /// Some part was quoted or escaped.
    pub quoted: bool,
    /// Contains a parameter, arithmetic or command expansion.
    pub expands: bool,
    /// Contains an unquoted glob character.
    pub glob: bool,
    /// Starts with an unquoted `~`.
    pub tilde: bool,
    /// Bodies of the command and process substitutions in this word.
    pub subs: Vec<String>,
    /// `NAME=value` with name and `=` unquoted: the byte index of `=`.
    pub assign_at: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Pipe,
    And,
    Or,
    Semi,
    Background,
    Newline,
    Open,
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RedirectKind {
    /// `<`
    Input,
    /// `>`, `>>`, `>|`, `&>`, `&>>`, `<>`, `>& file`
    Output,
    /// `>&2`, `<&0`, `>&-`: duplicating or closing descriptors.
    Dup,
    /// `<<`, `<<-`
    HereDoc,
    /// `<<<`
    HereString,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Redirect {
    pub kind: RedirectKind,
    pub target: Word,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Token {
    Word(Word),
    Op(Op),
    Redirect(RedirectKind, Option<Word>),
}

/// The tokens of a command line and what the lexer saw on the way.
pub(super) struct Lexed {
    pub tokens: Vec<Token>,
    /// Bodies of all command and process substitutions, heredoc ones included.
    pub substitutions: Vec<String>,
    /// Some expansion runs a command (`$(…)`, backticks, `<(…)`, `$((…))` with one).
    pub substitutes: bool,
    /// Lexed to the end without an open quote, substitution or heredoc.
    pub complete: bool,
}

pub(super) fn lex(input: &str) -> Lexed {
    let mut lexer = Lexer {
        chars: input.chars().collect(),
        pos: 0,
        complete: true,
        substitutions: Vec::new(),
        substitutes: false,
        heredocs: Vec::new(),
    };
    let tokens = lexer.tokens();
    Lexed {
        tokens,
        substitutions: lexer.substitutions,
        substitutes: lexer.substitutes,
        complete: lexer.complete,
    }
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    complete: bool,
    substitutions: Vec<String>,
    substitutes: bool,
    /// Heredocs whose bodies start after the next newline: (delimiter, strip tabs, expands).
    heredocs: Vec<(String, bool, bool)>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn starts_with(&self, text: &str) -> bool {
        text.chars()
            .enumerate()
            .all(|(i, c)| self.peek(i) == Some(c))
    }

    fn tokens(&mut self) -> Vec<Token> {
        let mut tokens = Vec::new();
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\r' => self.pos += 1,
                '\\' if self.peek(1) == Some('\n') => self.pos += 2,
                '#' => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                '\n' => {
                    self.pos += 1;
                    tokens.push(Token::Op(Op::Newline));
                    self.heredoc_bodies();
                }
                _ => {
                    if let Some(op) = self.operator() {
                        tokens.push(Token::Op(op));
                    } else if let Some((kind, operator)) = self.redirect() {
                        self.skip_blanks();
                        let target = if self.at_word_start() {
                            Some(self.word())
                        } else {
                            None
                        };
                        let kind = match (&kind, &target) {
                            (RedirectKind::Dup, Some(word))
                                if !(word.text == "-"
                                    || !word.text.is_empty()
                                        && word.text.bytes().all(|b| b.is_ascii_digit())) =>
                            {
                                RedirectKind::Output
                            }
                            _ => kind,
                        };
                        if kind == RedirectKind::HereDoc
                            && let Some(word) = &target
                        {
                            let strip_tabs = operator == "<<-";
                            self.heredocs
                                .push((word.text.clone(), strip_tabs, !word.quoted));
                        }
                        tokens.push(Token::Redirect(kind, target));
                    } else {
                        tokens.push(Token::Word(self.word()));
                    }
                }
            }
        }
        if !self.heredocs.is_empty() {
            self.complete = false;
        }
        tokens
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(0), Some(' ' | '\t')) {
            self.pos += 1;
        }
    }

    fn at_word_start(&self) -> bool {
        match self.peek(0) {
            None | Some('\n' | ';' | '&' | '|' | ')') => false,
            Some('(') => false,
            Some('<' | '>') => self.peek(1) == Some('('),
            Some(_) => true,
        }
    }

    fn operator(&mut self) -> Option<Op> {
        // `&>` and `&>>` are redirections, not a background `&`.
        if self.starts_with("&>") {
            return None;
        }
        let ops: [(&str, Op); 9] = [
            ("&&", Op::And),
            ("||", Op::Or),
            ("|&", Op::Pipe),
            (";;", Op::Semi),
            ("|", Op::Pipe),
            (";", Op::Semi),
            ("(", Op::Open),
            (")", Op::Close),
            ("&", Op::Background),
        ];
        for (text, op) in ops {
            if self.starts_with(text) {
                self.pos += text.chars().count();
                return Some(op);
            }
        }
        None
    }

    /// A redirection operator with its optional fd number, or `None` (nothing consumed).
    /// Also returns the operator's text.
    fn redirect(&mut self) -> Option<(RedirectKind, &'static str)> {
        let mut ahead = 0;
        while self.peek(ahead).is_some_and(|c| c.is_ascii_digit()) {
            ahead += 1;
        }
        let ops: [(&'static str, RedirectKind); 12] = [
            ("&>>", RedirectKind::Output),
            ("&>", RedirectKind::Output),
            ("<<<", RedirectKind::HereString),
            ("<<-", RedirectKind::HereDoc),
            ("<<", RedirectKind::HereDoc),
            ("<&", RedirectKind::Dup),
            ("<>", RedirectKind::Output),
            (">>", RedirectKind::Output),
            (">|", RedirectKind::Output),
            (">&", RedirectKind::Dup),
            ("<", RedirectKind::Input),
            (">", RedirectKind::Output),
        ];
        let start = self.pos;
        self.pos += ahead;
        for (text, kind) in ops {
            if ahead > 0 && text.starts_with('&') {
                continue;
            }
            // `<(` and `>(` are process substitutions, lexed as words.
            if (text == "<" || text == ">") && self.peek(1) == Some('(') {
                continue;
            }
            if self.starts_with(text) {
                self.pos += text.chars().count();
                return Some((kind, text));
            }
        }
        self.pos = start;
        None
    }

    fn heredoc_bodies(&mut self) {
        for (delimiter, strip_tabs, expands) in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            let mut closed = false;
            while self.pos < self.chars.len() {
                let end = self.chars[self.pos..]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(self.chars.len(), |at| self.pos + at);
                let line: String = self.chars[self.pos..end].iter().collect();
                self.pos = (end + 1).min(self.chars.len());
                let compared = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if compared == delimiter {
                    closed = true;
                    break;
                }
                body.push_str(&line);
                body.push('\n');
            }
            if !closed {
                self.complete = false;
            }
            if expands && (body.contains("$(") || body.contains('`')) {
                self.substitutes = true;
                self.substitutions.push(body);
            }
        }
    }

    fn word(&mut self) -> Word {
        let mut word = Word::default();
        let mut first_quote: Option<usize> = None;
        if self.peek(0) == Some('~') {
            word.tilde = true;
        }
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\r' | '\n' | ';' | '&' | '|' | '(' | ')' => break,
                '<' | '>' if self.peek(1) == Some('(') => {
                    self.pos += 2;
                    let body = self.balanced_body();
                    word.text.push_str(&format!("{c}(…)"));
                    self.substitution(&mut word, body);
                }
                '<' | '>' => break,
                '\\' => {
                    first_quote.get_or_insert(word.text.len());
                    word.quoted = true;
                    self.pos += 1;
                    match self.peek(0) {
                        Some('\n') => self.pos += 1,
                        Some(c) => {
                            word.text.push(c);
                            self.pos += 1;
                        }
                        None => {}
                    }
                }
                '\'' => {
                    first_quote.get_or_insert(word.text.len());
                    word.quoted = true;
                    self.pos += 1;
                    self.single_quoted(&mut word.text);
                }
                '"' => {
                    first_quote.get_or_insert(word.text.len());
                    word.quoted = true;
                    self.pos += 1;
                    self.double_quoted(&mut word);
                }
                '$' if self.peek(1) == Some('\'') => {
                    first_quote.get_or_insert(word.text.len());
                    word.quoted = true;
                    self.pos += 2;
                    self.ansi_c_quoted(&mut word.text);
                }
                '$' if self.peek(1) == Some('"') => {
                    first_quote.get_or_insert(word.text.len());
                    word.quoted = true;
                    self.pos += 2;
                    self.double_quoted(&mut word);
                }
                '$' | '`' => self.expansion(&mut word),
                '*' | '?' | '[' => {
                    word.glob = true;
                    word.text.push(c);
                    self.pos += 1;
                }
                _ => {
                    word.text.push(c);
                    self.pos += 1;
                }
            }
        }
        word.assign_at = assignment(&word.text).filter(|&at| first_quote.is_none_or(|q| at < q));
        if word.expands
            && word
                .assign_at
                .is_some_and(|at| word.text[..at].contains('$'))
        {
            word.assign_at = None;
        }
        word
    }

    fn single_quoted(&mut self, text: &mut String) {
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            if c == '\'' {
                return;
            }
            text.push(c);
        }
        self.complete = false;
    }

    fn ansi_c_quoted(&mut self, text: &mut String) {
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            match c {
                '\'' => return,
                '\\' => {
                    if let Some(next) = self.peek(0) {
                        self.pos += 1;
                        text.push(match next {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                    }
                }
                other => text.push(other),
            }
        }
        self.complete = false;
    }

    fn double_quoted(&mut self, word: &mut Word) {
        while let Some(c) = self.peek(0) {
            match c {
                '"' => {
                    self.pos += 1;
                    return;
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek(0) {
                        Some('\n') => self.pos += 1,
                        Some(next @ ('$' | '`' | '"' | '\\')) => {
                            word.text.push(next);
                            self.pos += 1;
                        }
                        _ => word.text.push('\\'),
                    }
                }
                '$' | '`' => self.expansion(word),
                other => {
                    word.text.push(other);
                    self.pos += 1;
                }
            }
        }
        self.complete = false;
    }

    /// At a `$` or a backtick: lexes one expansion into `word`.
    fn expansion(&mut self, word: &mut Word) {
        if self.peek(0) == Some('`') {
            self.pos += 1;
            let mut body = String::new();
            let mut closed = false;
            while let Some(c) = self.peek(0) {
                self.pos += 1;
                match c {
                    '`' => {
                        closed = true;
                        break;
                    }
                    '\\' if matches!(self.peek(0), Some('`' | '\\' | '$')) => {
                        body.extend(self.peek(0));
                        self.pos += 1;
                    }
                    other => body.push(other),
                }
            }
            if !closed {
                self.complete = false;
            }
            word.text.push_str("`…`");
            self.substitution(word, body);
            return;
        }
        // At `$`.
        match self.peek(1) {
            Some('(') if self.peek(2) == Some('(') => {
                self.pos += 2;
                let body = self.balanced_body();
                // `$((…))` is arithmetic only when the inner parenthesis closes at the
                // very end, as the shell reads it; `$(( cmd ) > out)` is a command
                // substitution of a subshell, which runs (and here writes).
                match arithmetic(&body) {
                    Some(expression) => {
                        word.expands = true;
                        word.text.push_str(&format!("$(({expression}))"));
                        if expression.contains("$(") || expression.contains('`') {
                            self.substitution(word, expression.to_owned());
                        }
                    }
                    None => {
                        word.text.push_str("$(…)");
                        self.substitution(word, body);
                    }
                }
            }
            Some('(') => {
                self.pos += 2;
                let body = self.balanced_body();
                word.text.push_str("$(…)");
                self.substitution(word, body);
            }
            Some('{') => {
                self.pos += 2;
                let mut body = String::new();
                let mut depth = 1;
                while let Some(c) = self.peek(0) {
                    self.pos += 1;
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    body.push(c);
                }
                if depth != 0 {
                    self.complete = false;
                }
                word.expands = true;
                word.text.push_str(&format!("${{{body}}}"));
                if body.contains("$(") || body.contains('`') {
                    self.substitution(word, body);
                }
            }
            Some(c) if c.is_ascii_alphanumeric() || "_@*#?$!-".contains(c) => {
                self.pos += 1;
                word.expands = true;
                word.text.push('$');
                if c.is_ascii_alphabetic() || c == '_' {
                    while let Some(c) = self
                        .peek(0)
                        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    {
                        word.text.push(c);
                        self.pos += 1;
                    }
                } else {
                    word.text.push(c);
                    self.pos += 1;
                }
            }
            _ => {
                word.text.push('$');
                self.pos += 1;
            }
        }
    }

    fn substitution(&mut self, word: &mut Word, body: String) {
        word.expands = true;
        self.substitutes = true;
        word.subs.push(body.clone());
        self.substitutions.push(body);
    }

    /// After an opening `(`: the text up to the matching `)`, which is consumed.
    fn balanced_body(&mut self) -> String {
        let start = self.pos;
        let mut depth = 1;
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return self.chars[start..self.pos - 1].iter().collect();
                    }
                }
                '\\' => self.pos = (self.pos + 1).min(self.chars.len()),
                '\'' => self.skip_until('\''),
                '"' => self.skip_double_quoted(),
                '`' => self.skip_until('`'),
                _ => {}
            }
        }
        self.complete = false;
        self.chars[start..].iter().collect()
    }

    fn skip_until(&mut self, end: char) {
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            if c == end {
                return;
            }
        }
    }

    fn skip_double_quoted(&mut self) {
        while let Some(c) = self.peek(0) {
            self.pos += 1;
            match c {
                '"' => return,
                '\\' => self.pos = (self.pos + 1).min(self.chars.len()),
                _ => {}
            }
        }
    }
}

/// The index of `=` when `text` starts with `NAME=` (`NAME+=` too).
fn assignment(text: &str) -> Option<usize> {
    let at = text.find('=')?;
    let name = text[..at].strip_suffix('+').unwrap_or(&text[..at]);
    let mut chars = name.chars();
    let first = chars.next()?;
    ((first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_'))
    .then_some(at)
}

/// The expression of `$((expression))`, given the text between `$(` and its `)`: `Some`
/// when that text is one parenthesis from its first character to its last.
fn arithmetic(body: &str) -> Option<&str> {
    let inner = body.strip_prefix('(')?;
    let mut depth = 1;
    for (at, c) in inner.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return (at + 1 == inner.len()).then(|| &inner[..at]);
                }
            }
            _ => {}
        }
    }
    None
}
