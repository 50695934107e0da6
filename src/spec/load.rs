//! Loading: TOML text -> a JSON value for the schema and serde, plus the byte span of every key
//! and value by key path (so errors inside `[[steps]]` still point at the exact spot).

use super::diag::{Diagnostic, KeyPath, Seg};
use super::schema::what as describe;
use serde_json::{Map, Number, Value};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock};
use toml::de::{DeTable, DeValue};

/// Where a key and its value stand in the text.
#[derive(Debug, Clone)]
pub struct Spans {
    /// The key (absent for array elements and the root).
    pub key: Option<Range<usize>>,
    /// The value.
    pub value: Range<usize>,
}

/// Byte spans by key path, found in the text when first asked for (only a spec with errors
/// needs them: a valid spec of 170,000 tensors does not pay for the index).
#[derive(Debug, Clone, Default)]
pub struct SpanIndex {
    text: Arc<str>,
    spans: Arc<OnceLock<HashMap<KeyPath, Spans>>>,
}

impl SpanIndex {
    /// The index of a text that parses as TOML.
    pub fn new(text: &str) -> Self {
        SpanIndex {
            text: text.into(),
            spans: Arc::default(),
        }
    }

    /// The span a diagnostic points at: its own span, else the key or value at its path, else the
    /// nearest enclosing entry that exists (for a missing key: the table that lacks it).
    pub fn locate(&self, diag: &Diagnostic) -> Range<usize> {
        if let Some(span) = &diag.span {
            return span.clone();
        }
        let index = self.spans.get_or_init(|| index(&self.text));
        let mut path = diag.path.clone();
        let mut exact = true;
        loop {
            if let Some(spans) = index.get(&path) {
                return match (&spans.key, exact, diag.target) {
                    (Some(k), true, super::diag::Target::Key) => k.clone(),
                    (Some(k), false, _) => k.clone(),
                    _ => spans.value.clone(),
                };
            }
            if path.0.is_empty() {
                return 0..0;
            }
            path = path.parent();
            exact = false;
        }
    }
}

/// Every key's and value's spans in a text (empty where it does not parse).
fn index(text: &str) -> HashMap<KeyPath, Spans> {
    fn walk(value: &DeValue<'_>, path: &KeyPath, out: &mut HashMap<KeyPath, Spans>) {
        match value {
            DeValue::Table(table) => {
                for (key, value) in table.iter() {
                    let child = path.key(key.get_ref());
                    let spans = Spans {
                        key: Some(key.span()),
                        value: value.span(),
                    };
                    out.insert(child.clone(), spans);
                    walk(value.get_ref(), &child, out);
                }
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let child = path.index(i);
                    let spans = Spans {
                        key: None,
                        value: item.span(),
                    };
                    out.insert(child.clone(), spans);
                    walk(item.get_ref(), &child, out);
                }
            }
            _ => {}
        }
    }
    let mut out = HashMap::new();
    if let Ok(table) = DeTable::parse(text) {
        let spans = Spans {
            key: None,
            value: table.span(),
        };
        out.insert(KeyPath::root(), spans);
        walk(
            &DeValue::Table(table.into_inner()),
            &KeyPath::root(),
            &mut out,
        );
    }
    out
}

/// A spec's text as a JSON value, with the spans of its keys and values and the literals no
/// JSON number holds (NaN and infinities: a spec's numbers are finite), each as a diagnostic
/// (the value keeps the literal's text, for the schema pass to skip).
#[derive(Debug)]
pub struct Parsed {
    /// The document.
    pub value: Value,
    /// Byte spans by key path.
    pub spans: SpanIndex,
    /// One diagnostic per non-finite float.
    pub non_finite: Vec<Diagnostic>,
}

/// How many TOML syntax errors are reported one by one.
const SYNTAX_ERRORS: usize = 100;

/// Parses TOML text. Syntax errors come back as diagnostics, every one the parser could find
/// (the first [`SYNTAX_ERRORS`], then how many more).
pub fn parse(text: &str) -> Result<Parsed, Vec<Diagnostic>> {
    let (table, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        let at = |e: &toml::de::Error, message: String| {
            let mut d = Diagnostic::value(KeyPath::root(), message);
            d.span = Some(e.span().unwrap_or(0..0));
            d
        };
        let mut diags: Vec<Diagnostic> = (errors.iter().take(SYNTAX_ERRORS))
            .map(|e| at(e, format!("TOML syntax: {}", e.message().trim_end())))
            .collect();
        // Past the first errors, the parser's recovery mostly finds the same damage again.
        if let Some(next) = errors.get(SYNTAX_ERRORS) {
            let more = errors.len() - SYNTAX_ERRORS;
            diags.push(at(
                next,
                format!("TOML syntax: {more} more errors from here on"),
            ));
        }
        return Err(diags);
    }
    let mut out = Converter::default();
    let value = out.table(table.get_ref());
    Ok(Parsed {
        value,
        spans: SpanIndex::new(text),
        non_finite: out.non_finite,
    })
}

/// TOML values to JSON, noting non-finite floats on the way (at the path it keeps as it goes).
#[derive(Default)]
struct Converter {
    path: Vec<Seg>,
    non_finite: Vec<Diagnostic>,
}

impl Converter {
    fn table(&mut self, table: &DeTable<'_>) -> Value {
        let mut map = Map::with_capacity(table.len());
        for (key, value) in table.iter() {
            self.path.push(Seg::Key(key.get_ref().to_string()));
            let converted = self.value(value.get_ref());
            self.path.pop();
            map.insert(key.get_ref().to_string(), converted);
        }
        Value::Object(map)
    }

    fn value(&mut self, value: &DeValue<'_>) -> Value {
        match value {
            DeValue::String(s) => Value::String(s.to_string()),
            DeValue::Integer(i) => integer(&i.as_str().replace('_', ""), i.radix()),
            DeValue::Float(f) => {
                let text = f.as_str().replace('_', "");
                let x: f64 = text.parse().unwrap_or(f64::NAN);
                match Number::from_f64(x).filter(|_| x.is_finite()) {
                    Some(n) => Value::Number(n),
                    None => {
                        self.non_finite.push(self.not_finite(&text, x));
                        Value::String(text)
                    }
                }
            }
            DeValue::Boolean(b) => Value::Bool(*b),
            DeValue::Datetime(d) => Value::String(d.to_string()),
            DeValue::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        self.path.push(Seg::Index(i));
                        let converted = self.value(item.get_ref());
                        self.path.pop();
                        converted
                    })
                    .collect(),
            ),
            DeValue::Table(t) => self.table(t),
        }
    }

    /// The error for the non-finite literal `text` (`x`) here.
    fn not_finite(&self, text: &str, x: f64) -> Diagnostic {
        let path = KeyPath(self.path.clone());
        let what = if x.is_nan() {
            "NaN is"
        } else {
            "infinities are"
        };
        let message = format!("{} is {text}: {what} not allowed", describe(&path));
        Diagnostic::value(path, message).help("write a finite number")
    }
}

/// An integer literal's digits as a JSON number: an i64 or u64 where it fits, else the nearest
/// float (so that the schema names it out of range, as it does any other too large value).
fn integer(digits: &str, radix: u32) -> Value {
    if let Ok(n) = i64::from_str_radix(digits, radix) {
        return Value::Number(n.into());
    }
    if let Ok(n) = u64::from_str_radix(digits, radix) {
        return Value::Number(n.into());
    }
    let x = match radix {
        10 => digits.parse().unwrap_or(f64::NAN),
        // Hexadecimal, octal and binary literals have no sign.
        _ => digits.chars().fold(0.0f64, |acc, c| {
            acc * f64::from(radix) + f64::from(c.to_digit(radix).unwrap_or(0))
        }),
    };
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// Finds the path of a JSON pointer (`/steps/2/input`) in a document: numeric segments are array
/// indices only where the document holds an array.
pub fn pointer_to_path(doc: &Value, pointer: &str) -> KeyPath {
    let mut segs = Vec::new();
    let mut here = Some(doc);
    for raw in pointer.split('/').skip(1) {
        let token = raw.replace("~1", "/").replace("~0", "~");
        match here {
            Some(Value::Array(items)) => {
                let i = token.parse().unwrap_or(0);
                here = items.get(i);
                segs.push(Seg::Index(i));
            }
            Some(Value::Object(map)) => {
                here = map.get(&token);
                segs.push(Seg::Key(token));
            }
            _ => {
                here = None;
                segs.push(Seg::Key(token));
            }
        }
    }
    KeyPath(segs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_inside_array_of_tables() {
        let text = "[job]\nname = \"x\"\n\n[[steps]]\nop = \"barrier\"\n\n[[steps]]\nop = \"matmul\"\na = \"q\"\n";
        let Parsed {
            value,
            spans: index,
            ..
        } = parse(text).unwrap();
        assert_eq!(value["steps"][1]["a"], "q");
        let d = Diagnostic::value(KeyPath::parse("steps[1].a"), "x");
        assert_eq!(&text[index.locate(&d)], "\"q\"");
        let k = Diagnostic::key(KeyPath::parse("steps[1].a"), "x");
        assert_eq!(&text[index.locate(&k)], "a");
    }

    #[test]
    fn a_flood_of_syntax_errors_is_cut_short() {
        let text = format!("[job]\nname = \"x{}\n", "}".repeat(5000));
        let errs = parse(&format!("{text}a = [{}\n", "}".repeat(5000))).unwrap_err();
        assert_eq!(errs.len(), SYNTAX_ERRORS + 1);
        assert!(
            errs[SYNTAX_ERRORS]
                .message
                .ends_with("more errors from here on")
        );
    }

    #[test]
    fn syntax_errors_carry_a_span() {
        let errs = parse("[job]\nname = \"x\nseed = 1\n").unwrap_err();
        assert!(!errs.is_empty());
        assert!(errs[0].span.is_some());
    }
}
