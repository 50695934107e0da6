//! Loading: TOML text -> a JSON value for the schema and serde, plus the byte span of every key
//! and value by key path (so errors inside `[[steps]]` still point at the exact spot).

use super::diag::{Diagnostic, KeyPath, Seg};
use serde_json::{Map, Number, Value};
use std::collections::HashMap;
use std::ops::Range;
use toml::de::{DeTable, DeValue};

/// Where a key and its value stand in the text.
#[derive(Debug, Clone)]
pub struct Spans {
    /// The key (absent for array elements and the root).
    pub key: Option<Range<usize>>,
    /// The value.
    pub value: Range<usize>,
}

/// Byte spans by key path.
#[derive(Debug, Clone, Default)]
pub struct SpanIndex(HashMap<KeyPath, Spans>);

impl SpanIndex {
    /// The span a diagnostic points at: its own span, else the key or value at its path, else the
    /// nearest enclosing entry that exists (for a missing key: the table that lacks it).
    pub fn locate(&self, diag: &Diagnostic) -> Range<usize> {
        if let Some(span) = &diag.span {
            return span.clone();
        }
        let mut path = diag.path.clone();
        let mut exact = true;
        loop {
            if let Some(spans) = self.0.get(&path) {
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

/// Parses TOML text. Syntax errors come back as diagnostics, every one the parser could find.
pub fn parse(text: &str) -> Result<(Value, SpanIndex), Vec<Diagnostic>> {
    let (table, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        return Err(errors
            .iter()
            .map(|e| {
                let mut d = Diagnostic::value(
                    KeyPath::root(),
                    format!("TOML syntax: {}", e.message().trim_end()),
                );
                d.span = Some(e.span().unwrap_or(0..0));
                d
            })
            .collect());
    }
    let mut index = SpanIndex::default();
    let span = table.span();
    index.0.insert(
        KeyPath::root(),
        Spans {
            key: None,
            value: span,
        },
    );
    let value = convert_table(table.get_ref(), &KeyPath::root(), &mut index);
    Ok((value, index))
}

fn convert_table(table: &DeTable<'_>, path: &KeyPath, index: &mut SpanIndex) -> Value {
    let mut map = Map::new();
    for (key, value) in table.iter() {
        let child = path.key(key.get_ref());
        index.0.insert(
            child.clone(),
            Spans {
                key: Some(key.span()),
                value: value.span(),
            },
        );
        map.insert(
            key.get_ref().to_string(),
            convert(value.get_ref(), &child, index),
        );
    }
    Value::Object(map)
}

fn convert(value: &DeValue<'_>, path: &KeyPath, index: &mut SpanIndex) -> Value {
    match value {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => {
            let digits = i.as_str().replace('_', "");
            match i64::from_str_radix(&digits, i.radix()) {
                Ok(n) => Value::Number(n.into()),
                Err(_) => Value::String(i.to_string()),
            }
        }
        DeValue::Float(f) => f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(f.to_string())),
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let child = path.index(i);
                    index.0.insert(
                        child.clone(),
                        Spans {
                            key: None,
                            value: item.span(),
                        },
                    );
                    convert(item.get_ref(), &child, index)
                })
                .collect(),
        ),
        DeValue::Table(t) => convert_table(t, path, index),
    }
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
        let (value, index) = parse(text).unwrap();
        assert_eq!(value["steps"][1]["a"], "q");
        let d = Diagnostic::value(KeyPath::parse("steps[1].a"), "x");
        assert_eq!(&text[index.locate(&d)], "\"q\"");
        let k = Diagnostic::key(KeyPath::parse("steps[1].a"), "x");
        assert_eq!(&text[index.locate(&k)], "a");
    }

    #[test]
    fn syntax_errors_carry_a_span() {
        let errs = parse("[job]\nname = \"x\nseed = 1\n").unwrap_err();
        assert!(!errs.is_empty());
        assert!(errs[0].span.is_some());
    }
}
