//! Diagnostics: what is wrong, where (file, line, column, key path), and what would be valid.

use std::fmt;
use std::ops::Range;

/// One segment of a key path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Seg {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// A path to a key or value in the spec, printed as `steps[2].input`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    /// The document root.
    pub fn root() -> Self {
        KeyPath(Vec::new())
    }

    /// This path extended by a key.
    pub fn key(&self, k: &str) -> Self {
        let mut v = self.0.clone();
        v.push(Seg::Key(k.to_string()));
        KeyPath(v)
    }

    /// This path extended by an array index.
    pub fn index(&self, i: usize) -> Self {
        let mut v = self.0.clone();
        v.push(Seg::Index(i));
        KeyPath(v)
    }

    /// The path one level up (the root stays the root).
    pub fn parent(&self) -> Self {
        let mut v = self.0.clone();
        v.pop();
        KeyPath(v)
    }

    /// Parses a path written as `steps[2].input` (keys without dots or brackets).
    pub fn parse(text: &str) -> Self {
        let mut segs = Vec::new();
        for part in text.split('.').filter(|p| !p.is_empty()) {
            let mut rest = part;
            if let Some(b) = rest.find('[') {
                segs.push(Seg::Key(rest[..b].to_string()));
                rest = &rest[b..];
                while let Some(stripped) = rest.strip_prefix('[') {
                    let end = stripped.find(']').unwrap_or(stripped.len());
                    segs.push(Seg::Index(stripped[..end].parse().unwrap_or(0)));
                    rest = stripped.get(end + 1..).unwrap_or("");
                }
            } else {
                segs.push(Seg::Key(rest.to_string()));
            }
        }
        KeyPath(segs)
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(top level)");
        }
        for (i, seg) in self.0.iter().enumerate() {
            // As TOML writes keys: bare where it can, else quoted with escapes.
            let bare = |k: &str| {
                !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            };
            match seg {
                Seg::Key(k) if i == 0 && bare(k) => write!(f, "{k}")?,
                Seg::Key(k) if bare(k) => write!(f, ".{k}")?,
                Seg::Key(k) if i == 0 => write!(f, "{k:?}")?,
                Seg::Key(k) => write!(f, ".{k:?}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// What part of the entry at a path an error points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The key itself (unknown keys).
    Key,
    /// The value (wrong types, values out of range, meaning errors).
    Value,
}

/// One problem found in a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where in the spec.
    pub path: KeyPath,
    /// Key or value.
    pub target: Target,
    /// What is wrong.
    pub message: String,
    /// What would be valid, or how to fix it.
    pub help: Option<String>,
    /// A byte range that overrides the path's own span (TOML syntax errors).
    pub span: Option<Range<usize>>,
}

impl Diagnostic {
    /// An error about the value at `path`.
    pub fn value(path: KeyPath, message: impl Into<String>) -> Self {
        Diagnostic {
            path,
            target: Target::Value,
            message: message.into(),
            help: None,
            span: None,
        }
    }

    /// An error about the key at `path`.
    pub fn key(path: KeyPath, message: impl Into<String>) -> Self {
        Diagnostic {
            target: Target::Key,
            ..Diagnostic::value(path, message)
        }
    }

    /// Adds a hint.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds the valid choices, with a "did you mean" when `got` is close to one of them.
    pub fn choices<S: AsRef<str>>(self, got: &str, choices: &[S]) -> Self {
        let guess = did_you_mean(got, choices);
        let names = choices.iter().map(|c| c.as_ref());
        self.listing(guess, names, choices.len(), "valid")
    }

    /// Adds a hint: "did you mean `guess`?", then `label` and the first [`LISTED`] of `names`
    /// (`count` in all); none where there are no names.
    pub fn listing<'a>(
        self,
        guess: Option<&str>,
        names: impl Iterator<Item = &'a str>,
        count: usize,
        label: &str,
    ) -> Self {
        if count == 0 {
            return self;
        }
        let mut list = names.take(LISTED).collect::<Vec<_>>().join(", ");
        if count > LISTED {
            list.push_str(&format!(" and {} more", count - LISTED));
        }
        match guess {
            Some(best) => self.help(format!("did you mean `{best}`? {label}: {list}")),
            None => self.help(format!("{label}: {list}")),
        }
    }
}

/// How many choices a hint lists at most.
pub const LISTED: usize = 24;

/// The closest of `choices` to `got`, when close enough to be a typo.
pub fn did_you_mean<'a, S: AsRef<str>>(got: &str, choices: &'a [S]) -> Option<&'a str> {
    let got_lower = got.to_lowercase();
    choices
        .iter()
        .map(|c| c.as_ref())
        .filter_map(|c| {
            let longest = c.len().max(got.len());
            let allowed = (longest / 3).max(1);
            let lower = c.to_lowercase();
            if got.len() >= 2 && lower.starts_with(&got_lower) {
                return Some((c, strsim::osa_distance(&got_lower, &lower)));
            }
            // The distance is at least the difference in length: most choices need none.
            if c.len().abs_diff(got.len()) > allowed {
                return None;
            }
            let d = strsim::osa_distance(&got_lower, &lower);
            (d <= allowed && d < longest).then_some((c, d))
        })
        .min_by_key(|(_, d)| *d)
        .map(|(c, _)| c)
}

/// A source text with its name, for turning byte offsets into lines and columns.
#[derive(Debug, Clone)]
pub struct Source {
    /// The name printed in diagnostics (the path as given).
    pub name: String,
    /// The whole text.
    pub text: String,
    line_starts: Vec<usize>,
    /// Whether every character is one byte (columns are then byte offsets).
    ascii: bool,
}

/// At most this many characters of a line are quoted on either side of the spot, so that an
/// error in a line of 60,000 names prints a short line (and 60,000 such errors stay linear).
const QUOTE_REACH: usize = 60;

impl Source {
    /// Wraps a text.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Source {
            name: name.into(),
            ascii: text.is_ascii(),
            text,
            line_starts,
        }
    }

    /// The characters between two byte offsets on one line.
    fn chars_between(&self, from: usize, to: usize) -> usize {
        match self.ascii {
            true => to - from,
            false => self.text[from..to].chars().count(),
        }
    }

    /// The byte offset `n` characters after `from`, or `end` if that comes first.
    fn advance(&self, from: usize, n: usize, end: usize) -> usize {
        match self.ascii {
            true => (from + n).min(end),
            false => (self.text[from..end].char_indices().nth(n)).map_or(end, |(i, _)| from + i),
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        (line + 1, self.chars_between(start, offset) + 1)
    }

    /// The byte range of a 1-based line, without its newline (or carriage return).
    fn line_range(&self, line: usize) -> Range<usize> {
        let start = self.line_starts[line - 1];
        let end = self
            .line_starts
            .get(line)
            .map(|e| e - 1)
            .unwrap_or(self.text.len());
        let text = self.text[start..end].trim_end_matches('\r');
        start..start + text.len()
    }

    /// The text of a 1-based line, without its newline.
    pub fn line_text(&self, line: usize) -> &str {
        &self.text[self.line_range(line)]
    }

    /// Renders one diagnostic at a byte range: `FILE:LINE:COL: message`, the line (around the
    /// spot, where it is long), a caret, the path and the hint.
    pub fn render(&self, diag: &Diagnostic, span: Range<usize>) -> String {
        let (line, col) = self.line_col(span.start);
        let at = span.start.min(self.text.len());
        let Range { start, end } = self.line_range(line);
        let at = at.min(end);
        // The quoted window: up to QUOTE_REACH characters either side of the spot.
        let from = match col - 1 > QUOTE_REACH {
            true => self.advance(start, col - 1 - QUOTE_REACH, end),
            false => start,
        };
        let to = self.advance(at, QUOTE_REACH, end);
        let (open, close) = (
            if from > start { "…" } else { "" },
            if to < end { "…" } else { "" },
        );
        let width = line.to_string().len();
        let pad = " ".repeat(width);
        let span_chars = self.text[at..span.end.clamp(at, self.text.len())]
            .chars()
            .take_while(|&c| c != '\n')
            .take(QUOTE_REACH + 1)
            .count();
        let carets = span_chars.clamp(1, self.chars_between(at, to).max(1));
        let lead: String = (open.chars().map(|_| ' '))
            .chain(
                self.text[from..at]
                    .chars()
                    .map(|c| if c == '\t' { '\t' } else { ' ' }),
            )
            .collect();
        let quoted = &self.text[from..to];
        let mut out = format!(
            "{}:{line}:{col}: {}\n{line} | {open}{quoted}{close}\n{pad} | {lead}{}\n",
            self.name,
            diag.message,
            "^".repeat(carets)
        );
        if !diag.path.0.is_empty() {
            out.push_str(&format!("{pad} = at: {}\n", diag.path));
        }
        if let Some(help) = &diag.help {
            out.push_str(&format!("{pad} = help: {help}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_and_parse() {
        let p = KeyPath::root().key("steps").index(2).key("input");
        assert_eq!(p.to_string(), "steps[2].input");
        assert_eq!(KeyPath::parse("steps[2].input"), p);
    }

    #[test]
    fn suggests_near_misses_only() {
        let keys = ["shape", "dtype", "distribution"];
        assert_eq!(did_you_mean("distribuion", &keys), Some("distribution"));
        assert_eq!(did_you_mean("dtyp", &keys), Some("dtype"));
        assert_eq!(did_you_mean("colour", &keys), None);
        assert_eq!(did_you_mean("hi", &["low", "high"]), Some("high"));
    }

    #[test]
    fn renders_line_column_and_caret() {
        let src = Source::new("s.toml", "[job]\nname = \"x\"\nbad = 1\n");
        let d = Diagnostic::key(KeyPath::parse("job.bad"), "unknown key `bad`");
        let out = src.render(&d, 17..20);
        assert!(out.starts_with("s.toml:3:1: unknown key `bad`\n3 | bad = 1\n  | ^^^\n"));
        assert!(out.contains("= at: job.bad"));
    }

    #[test]
    fn a_long_line_is_quoted_around_the_spot() {
        for name in ["x", "é"] {
            let list: Vec<String> = (0..1000).map(|i| format!("\"{name}{i}\"")).collect();
            let text = format!("tensors = [{}]\n", list.join(", "));
            let at = text.find(&format!("\"{name}500\"")).unwrap();
            let src = Source::new("s.toml", text.as_str());
            let d = Diagnostic::value(KeyPath::parse("output.tensors[500]"), "no such tensor");
            let out = src.render(&d, at..at + name.len() + 5);
            let col = text[..at].chars().count() + 1;
            assert!(
                out.starts_with(&format!("s.toml:1:{col}: no such tensor\n")),
                "{out}"
            );
            let quoted = out.lines().nth(1).unwrap();
            let caret = out.lines().nth(2).unwrap();
            assert!(quoted.chars().count() < 140, "{quoted}");
            assert!(
                quoted.starts_with("1 | …") && quoted.ends_with('…'),
                "{quoted}"
            );
            // The caret stands under the name.
            let under = caret.chars().position(|c| c == '^').unwrap();
            let name_at = quoted.chars().collect::<Vec<_>>();
            assert_eq!(name_at[under], '"', "{quoted}\n{caret}");
            assert_eq!(caret.matches('^').count(), name.chars().count() + 5);
        }
    }
}
