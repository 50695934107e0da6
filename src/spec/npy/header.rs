//! The header's dict, parsed in one pass with no recursion: a flat Python dict literal of exactly
//! the keys numpy writes (`descr`, `fortran_order`, `shape`), nothing nested but the shape's
//! tuple. Errors are phrased to follow the file's name.

use std::fmt::Write;

/// The header's three entries.
pub(super) struct Entries {
    /// The type string.
    pub descr: String,
    /// Whether the data is in Fortran order.
    pub fortran: bool,
    /// The array's shape.
    pub shape: Vec<u64>,
}

/// A token of the dict literal.
enum Token<'a> {
    /// One of `{}()[],:`.
    Punct(u8),
    /// A quoted string's bytes, escapes kept as they are.
    Str(&'a [u8]),
    /// A run of letters, digits and `_+-.`: a number or a name such as `True`.
    Word(&'a [u8]),
}

/// The error for a header distrun does not read, for `why`.
pub(super) fn unreadable(why: impl std::fmt::Display) -> String {
    format!("is not a .npy distrun reads: {why}")
}

/// Parses the header's text (the bytes after the length field, padding included).
pub(super) fn parse(text: &[u8]) -> Result<Entries, String> {
    let mut lx = Lexer { text, at: 0 };
    lx.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        let key = match lx.next()? {
            Some(Token::Punct(b'}')) => break,
            Some(Token::Str(key)) => key,
            other => return Err(unexpected(other, "a key")),
        };
        lx.expect(b':')?;
        match key {
            b"descr" => once(&mut descr, lx.descr()?, "descr")?,
            b"fortran_order" => once(&mut fortran, lx.boolean()?, "fortran_order")?,
            b"shape" => once(&mut shape, lx.shape()?, "shape")?,
            other => {
                return Err(unreadable(format_args!(
                    "its header has the key '{}' (numpy writes descr, fortran_order and shape)",
                    shown(other)
                )));
            }
        }
        match lx.next()? {
            Some(Token::Punct(b',')) => {}
            Some(Token::Punct(b'}')) => break,
            other => return Err(unexpected(other, "`,` or `}`")),
        }
    }
    if let Some(extra) = lx.next()? {
        return Err(unexpected(Some(extra), "the end of the header"));
    }
    let missing = |key| unreadable(format_args!("its header lacks '{key}'"));
    Ok(Entries {
        descr: descr.ok_or_else(|| missing("descr"))?,
        fortran: fortran.ok_or_else(|| missing("fortran_order"))?,
        shape: shape.ok_or_else(|| missing("shape"))?,
    })
}

/// Sets an entry that must appear once.
fn once<T>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), String> {
    if slot.replace(value).is_some() {
        return Err(unreadable(format_args!("its header has '{key}' twice")));
    }
    Ok(())
}

/// The error for `got` where `wanted` belongs.
fn unexpected(got: Option<Token>, wanted: &str) -> String {
    let got = match got {
        None => "the end".to_string(),
        Some(Token::Punct(c)) => format!("`{}`", char::from(c)),
        Some(Token::Str(s)) => format!("'{}'", shown(s)),
        Some(Token::Word(w)) => format!("`{}`", shown(w)),
    };
    unreadable(format_args!("its header has {got} where {wanted} belongs"))
}

/// At most 40 bytes of `bytes`, escaped.
fn shown(bytes: &[u8]) -> String {
    let mut out = String::new();
    let _ = write!(out, "{}", bytes[..bytes.len().min(40)].escape_ascii());
    if bytes.len() > 40 {
        out.push_str("...");
    }
    out
}

/// True for the bytes of a [`Token::Word`].
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'+' | b'-' | b'.')
}

/// The tokens of the header text, one at a time.
struct Lexer<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Lexer<'a> {
    /// The next token, or `None` at the end of the text.
    fn next(&mut self) -> Result<Option<Token<'a>>, String> {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
        let Some(&c) = self.text.get(self.at) else {
            return Ok(None);
        };
        let start = self.at;
        self.at += 1;
        match c {
            b'{' | b'}' | b'(' | b')' | b'[' | b']' | b',' | b':' => Ok(Some(Token::Punct(c))),
            b'\'' | b'"' => self.string(c, start + 1),
            c if is_word(c) => {
                while self.text.get(self.at).copied().is_some_and(is_word) {
                    self.at += 1;
                }
                Ok(Some(Token::Word(&self.text[start..self.at])))
            }
            _ => Err(unreadable(format_args!(
                "its header has the byte {c:#04x} at {start}"
            ))),
        }
    }

    /// The rest of a string opened by `quote`, whose contents start at `start`.
    fn string(&mut self, quote: u8, start: usize) -> Result<Option<Token<'a>>, String> {
        while let Some(&c) = self.text.get(self.at) {
            self.at += 1;
            if c == quote {
                return Ok(Some(Token::Str(&self.text[start..self.at - 1])));
            }
            if c == b'\\' {
                self.at += 1;
            }
        }
        Err(unreadable("its header has an unterminated string"))
    }

    /// Consumes the punctuation `want`.
    fn expect(&mut self, want: u8) -> Result<(), String> {
        match self.next()? {
            Some(Token::Punct(c)) if c == want => Ok(()),
            other => Err(unexpected(other, &format!("`{}`", char::from(want)))),
        }
    }

    /// The `descr` value: a plain type string (printable ASCII, as numpy writes them).
    fn descr(&mut self) -> Result<String, String> {
        match self.next()? {
            Some(Token::Str(s)) if s.len() <= 64 && s.iter().all(|c| c.is_ascii_graphic()) => {
                Ok(String::from_utf8_lossy(s).into_owned())
            }
            Some(Token::Str(s)) => Err(unreadable(format_args!(
                "its descr '{}' is not a numpy type string",
                shown(s)
            ))),
            Some(Token::Punct(b'[')) => {
                Err("holds a structured dtype (a list of fields); distrun reads arrays of one plain dtype".into())
            }
            other => Err(unexpected(other, "a type string")),
        }
    }

    /// The `fortran_order` value.
    fn boolean(&mut self) -> Result<bool, String> {
        match self.next()? {
            Some(Token::Word(b"True")) => Ok(true),
            Some(Token::Word(b"False")) => Ok(false),
            other => Err(unexpected(other, "True or False")),
        }
    }

    /// The `shape` value: a tuple of whole numbers (`3L` as Python 2 wrote them too).
    fn shape(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut shape = Vec::new();
        loop {
            match self.next()? {
                Some(Token::Punct(b')')) => return Ok(shape),
                Some(Token::Word(w)) => shape.push(dimension(w)?),
                other => return Err(unexpected(other, "a dimension")),
            }
            match self.next()? {
                Some(Token::Punct(b',')) => {}
                Some(Token::Punct(b')')) => return Ok(shape),
                other => return Err(unexpected(other, "`,` or `)`")),
            }
        }
    }
}

/// One dimension of the shape.
fn dimension(word: &[u8]) -> Result<u64, String> {
    let digits = word.strip_suffix(b"L").unwrap_or(word);
    std::str::from_utf8(digits)
        .ok()
        .filter(|d| d.bytes().all(|c| c.is_ascii_digit()))
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| {
            unreadable(format_args!(
                "its shape has the dimension `{}`, not a whole number below 2^64",
                shown(word)
            ))
        })
}
