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
            match seg {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
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
        let list = choices
            .iter()
            .map(|c| c.as_ref())
            .collect::<Vec<_>>()
            .join(", ");
        match did_you_mean(got, choices) {
            Some(best) => self.help(format!("did you mean `{best}`? valid: {list}")),
            None => self.help(format!("valid: {list}")),
        }
    }
}

/// The closest of `choices` to `got`, when close enough to be a typo.
pub fn did_you_mean<'a, S: AsRef<str>>(got: &str, choices: &'a [S]) -> Option<&'a str> {
    let got_lower = got.to_lowercase();
    choices
        .iter()
        .map(|c| c.as_ref())
        .map(|c| {
            (
                c,
                strsim::damerau_levenshtein(&got_lower, &c.to_lowercase()),
            )
        })
        .filter(|(c, d)| {
            (*d <= (c.len().max(got.len()) / 3).max(1) && *d < c.len().max(got.len()))
                || (got.len() >= 2 && c.to_lowercase().starts_with(&got_lower))
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
}

impl Source {
    /// Wraps a text.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Source {
            name: name.into(),
            text,
            line_starts,
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let col = self.text[start..offset].chars().count() + 1;
        (line + 1, col)
    }

    /// The text of a 1-based line, without its newline.
    pub fn line_text(&self, line: usize) -> &str {
        let start = self.line_starts[line - 1];
        let end = self
            .line_starts
            .get(line)
            .map(|e| e - 1)
            .unwrap_or(self.text.len());
        self.text[start..end].trim_end_matches('\r')
    }

    /// Renders one diagnostic at a byte range: `FILE:LINE:COL: message`, the line, a caret, the
    /// path and the hint.
    pub fn render(&self, diag: &Diagnostic, span: Range<usize>) -> String {
        let (line, col) = self.line_col(span.start);
        let text = self.line_text(line);
        let width = line.to_string().len();
        let pad = " ".repeat(width);
        let line_chars = text.chars().count();
        let span_chars = self.text[span.start.min(self.text.len())..span.end.min(self.text.len())]
            .chars()
            .take_while(|&c| c != '\n')
            .count();
        let carets = span_chars.clamp(1, (line_chars + 1).saturating_sub(col).max(1));
        let lead: String = text
            .chars()
            .take(col - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let mut out = format!(
            "{}:{line}:{col}: {}\n{line} | {text}\n{pad} | {lead}{}\n",
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
}
