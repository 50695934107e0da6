//! The JSON schema generated from the spec's types (draft-07, which editors read), and the
//! schema pass of validation: every violation as a diagnostic with the valid choices.

use super::Spec;
use super::diag::{Diagnostic, KeyPath};
use super::load::pointer_to_path;
use jsonschema::error::{ValidationError, ValidationErrorKind};
use schemars::generate::SchemaSettings;
use serde_json::Value;
use std::sync::OnceLock;

/// The schema as pretty JSON with a trailing newline: what `schemas/distrun.schema.json` holds.
pub fn schema_json() -> String {
    let mut text = serde_json::to_string_pretty(schema_value()).expect("a schema serializes");
    text.push('\n');
    text
}

/// The schema as a JSON value, generated once.
pub fn schema_value() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let generator = SchemaSettings::draft07().into_generator();
        let mut schema = generator.into_root_schema_for::<Spec>().to_value();
        bound_integers(&mut schema);
        schema
    })
}

/// Gives every unsigned integer of a known width its maximum (schemars states only the
/// minimum), so that a value too large for its field is named out of range at its key.
fn bound_integers(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let max = match map.get("format").and_then(Value::as_str) {
                Some("uint8") => Some(u64::from(u8::MAX)),
                Some("uint16") => Some(u64::from(u16::MAX)),
                Some("uint32") => Some(u64::from(u32::MAX)),
                Some("uint64") => Some(u64::MAX),
                _ => None,
            };
            if let Some(max) = max {
                map.entry("maximum").or_insert(max.into());
            }
            map.values_mut().for_each(bound_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

fn validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::draft7::new(schema_value()).expect("the generated schema compiles")
    })
}

/// Checks a document against the schema; every violation, in document order.
pub fn check(doc: &Value) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for err in validator().iter_errors(doc) {
        explain(&err, doc, &mut out);
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup();
    out
}

/// What the entry at a path is called in messages: `tensor `a``, `steps[1]`, or its key.
pub(super) fn what(path: &KeyPath) -> String {
    use super::diag::Seg;
    match path.0.as_slice() {
        [Seg::Key(t), Seg::Key(name)] if t == "tensors" => format!("tensor `{name}`"),
        [.., Seg::Index(_)] => {
            // From the last key on: `shape[1]`, `steps[2]`.
            let from = path
                .0
                .iter()
                .rposition(|s| matches!(s, Seg::Key(_)))
                .unwrap_or(0);
            format!("`{}`", KeyPath(path.0[from..].to_vec()))
        }
        [.., Seg::Key(k)] => format!("`{k}`"),
        [] => "the spec".to_string(),
    }
}

/// A TOML-flavoured name of a JSON value's type, with the value for scalars.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) if n.is_f64() => format!("a float ({n})"),
        Value::Number(n) => format!("an integer ({n})"),
        Value::String(s) => format!("a string (\"{s}\")"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "a table".into(),
    }
}

fn type_name(t: &str) -> &str {
    match t {
        "object" => "a table",
        "array" => "an array",
        "string" => "a string",
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "a boolean",
        other => other,
    }
}

fn schema_at(pointer: &str) -> Option<&'static Value> {
    schema_value().pointer(pointer)
}

fn parent_pointer(pointer: &str) -> &str {
    pointer.rsplit_once('/').map(|(p, _)| p).unwrap_or("")
}

/// Adds the diagnostics of one schema violation to `out`.
fn explain(err: &ValidationError<'_>, doc: &Value, out: &mut Vec<Diagnostic>) {
    let at = err.instance_path().as_str();
    let path = pointer_to_path(doc, at);
    let instance = err.instance().as_ref();
    let schema_path = err.schema_path().as_str();
    match err.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            out.extend(unknown_keys(schema_path, &path, unexpected))
        }
        ValidationErrorKind::Type { .. } => out.push(wrong_type(schema_path, &path, instance)),
        ValidationErrorKind::Enum { options } => {
            let choices = strings(options.as_array().map(Vec::as_slice).unwrap_or(&[]));
            out.push(bad_choice(&path, instance, &choices));
        }
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            explain_alternatives(context, at, &path, instance, doc, out)
        }
        kind => {
            let message = message(kind, &path, instance).unwrap_or_else(|| err.to_string());
            out.push(Diagnostic::value(path.clone(), message));
        }
    }
}

/// One diagnostic per key the schema at `schema_path` does not allow, with the allowed keys.
fn unknown_keys(schema_path: &str, path: &KeyPath, unexpected: &[String]) -> Vec<Diagnostic> {
    let allowed: Vec<String> = schema_at(parent_pointer(schema_path))
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    unexpected
        .iter()
        .map(|key| {
            Diagnostic::key(
                path.key(key),
                format!("unknown key `{key}` in {}", what(path)),
            )
            .choices(key, &allowed)
        })
        .collect()
}

/// A value of another type than the schema at `schema_path` names.
fn wrong_type(schema_path: &str, path: &KeyPath, instance: &Value) -> Diagnostic {
    let expected = match schema_at(schema_path) {
        Some(Value::String(t)) => type_name(t).to_string(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .map(type_name)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "another type".into(),
    };
    Diagnostic::value(
        path.clone(),
        format!(
            "{} must be {expected}, not {}",
            what(path),
            describe(instance)
        ),
    )
}

/// The message of a violation told in one sentence at the value (a missing key, a constant, a
/// bound on a number, a length or a count, a pattern, a repeated item); None for the others.
fn message(kind: &ValidationErrorKind, path: &KeyPath, instance: &Value) -> Option<String> {
    let what = what(path);
    let items = || instance.as_array().map_or(0, Vec::len);
    Some(match kind {
        ValidationErrorKind::Required { property } => {
            let key = property.as_str().unwrap_or_default();
            format!("missing key `{key}` in {what}")
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("{what} must be {expected_value}")
        }
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("{what} is {instance}, below the minimum {limit}")
        }
        ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("{what} is {instance}, out of range (max {limit})")
        }
        ValidationErrorKind::MinItems { limit } => format!(
            "{what} needs at least {limit} item{}, found {}",
            if *limit == 1 { "" } else { "s" },
            items()
        ),
        ValidationErrorKind::MaxItems { limit } => {
            format!("{what} takes at most {limit} items, found {}", items())
        }
        ValidationErrorKind::Pattern { pattern } => {
            format!("{what} is {instance}, which does not match {pattern}")
        }
        ValidationErrorKind::MinLength { limit } => {
            format!("{what} needs at least {limit} characters")
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("{what} takes at most {limit} characters")
        }
        ValidationErrorKind::UniqueItems => format!("{what} lists an item twice"),
        _ => return None,
    })
}

fn strings(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn bad_choice(path: &KeyPath, instance: &Value, choices: &[String]) -> Diagnostic {
    let got = match instance {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let d = Diagnostic::value(
        path.clone(),
        format!("`{got}` is not a valid {}", what(path)),
    );
    d.choices(&got, choices)
}

/// Where a oneOf/anyOf failed: the value's pointer, and whether its alternatives are tagged
/// tables told apart by their `op`.
struct Alternatives<'p> {
    at: &'p str,
    op_at: String,
    tagged: bool,
}

/// What the alternatives that fit nothing offer: the names they take (an op, a string, a key)
/// and the kinds of value they take otherwise (`{ key = ... }`, a type).
struct Offered {
    names: Vec<String>,
    kinds: Vec<String>,
}

impl<'p> Alternatives<'p> {
    /// The alternatives failed at `at`, tagged when a branch failed on the constant of its `op`.
    fn new(context: &[Vec<ValidationError<'static>>], at: &'p str) -> Self {
        let op_at = format!("{at}/op");
        let tagged = context.iter().flatten().any(|e| {
            e.instance_path().as_str() == op_at
                && matches!(e.kind(), ValidationErrorKind::Constant { .. })
        });
        Alternatives { at, op_at, tagged }
    }

    /// Whether `e` says its branch is not the one the value means: the wrong `op` (tagged), or
    /// the wrong type, constant, choice or key at the value itself (untagged).
    fn rejects(&self, e: &ValidationError<'_>) -> bool {
        let (at, op_at) = (self.at, self.op_at.as_str());
        let here = e.instance_path().as_str();
        if self.tagged {
            (here == op_at && matches!(e.kind(), ValidationErrorKind::Constant { .. }))
                || (here == at && matches!(e.kind(), ValidationErrorKind::Type { .. }))
                || (here == at
                    && matches!(e.kind(), ValidationErrorKind::Required { property } if property == "op"))
        } else {
            here == at
                && matches!(
                    e.kind(),
                    ValidationErrorKind::Type { .. }
                        | ValidationErrorKind::Constant { .. }
                        | ValidationErrorKind::Enum { .. }
                        | ValidationErrorKind::Required { .. }
                )
        }
    }

    /// The names and kinds every branch offers, each name once, in order.
    fn offered(&self, context: &[Vec<ValidationError<'static>>]) -> Offered {
        let (at, op_at, tagged) = (self.at, self.op_at.as_str(), self.tagged);
        let mut names: Vec<String> = Vec::new();
        let mut kinds: Vec<String> = Vec::new();
        for e in context.iter().flatten() {
            let here = e.instance_path().as_str();
            match e.kind() {
                ValidationErrorKind::Constant { expected_value } if tagged && here == op_at => {
                    names.extend(strings(std::slice::from_ref(expected_value)))
                }
                ValidationErrorKind::Constant { expected_value } if here == at => {
                    names.extend(strings(std::slice::from_ref(expected_value)))
                }
                ValidationErrorKind::Enum { options } if here == at => names.extend(strings(
                    options.as_array().map(Vec::as_slice).unwrap_or(&[]),
                )),
                ValidationErrorKind::Required { property } if !tagged && here == at => {
                    names.extend(strings(std::slice::from_ref(property)))
                }
                ValidationErrorKind::Type { .. } if here == at => {
                    kinds.extend(kind_of_branch(e.schema_path().as_str()))
                }
                _ => {}
            }
        }
        names.dedup();
        let mut seen = std::collections::HashSet::new();
        names.retain(|n| seen.insert(n.clone()));
        Offered { names, kinds }
    }
}

/// The kind of value a branch that failed on its type (the schema at `schema_path`) takes:
/// `{ key = ... }` for a table of one required key, the type's name for other non-strings.
fn kind_of_branch(schema_path: &str) -> Option<String> {
    match schema_at(schema_path).and_then(Value::as_str) {
        Some("object") => {
            let branch = schema_at(parent_pointer(schema_path));
            match branch
                .and_then(|b| b.get("required"))
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                Some([Value::String(key)]) => Some(format!("{{ {key} = ... }}")),
                _ => None,
            }
        }
        Some(t) if t != "string" && t != "null" => Some(type_name(t).to_string()),
        _ => None,
    }
}

/// A oneOf/anyOf failed. Pick the alternative the value means (by its `op`, its single key, or its
/// type) and report that alternative's errors; when none fits, list the alternatives.
fn explain_alternatives(
    context: &[Vec<ValidationError<'static>>],
    at: &str,
    path: &KeyPath,
    instance: &Value,
    doc: &Value,
    out: &mut Vec<Diagnostic>,
) {
    let alternatives = Alternatives::new(context, at);
    let chosen = context
        .iter()
        .filter(|branch| !branch.iter().any(|e| alternatives.rejects(e)))
        .min_by_key(|branch| branch.len());
    if let Some(branch) = chosen {
        for e in branch {
            explain(e, doc, out);
        }
        return;
    }
    // No alternative fits: list them.
    let offered = alternatives.offered(context);
    if alternatives.tagged {
        out.push(unknown_op(path, instance, &offered.names));
        return;
    }
    let mut all = offered.names;
    all.extend(offered.kinds);
    out.push(no_alternative(path, instance, &all));
}

/// A tagged table whose `op` names no alternative (or is missing, or no string), with the ops.
fn unknown_op(path: &KeyPath, instance: &Value, names: &[String]) -> Diagnostic {
    match instance.get("op") {
        Some(Value::String(op)) => {
            Diagnostic::value(path.key("op"), format!("unknown op `{op}`")).choices(op, names)
        }
        Some(other) => Diagnostic::value(
            path.key("op"),
            format!("`op` must be a string, not {}", describe(other)),
        )
        .choices("", names),
        None => Diagnostic::value(path.clone(), format!("missing key `op` in {}", what(path)))
            .choices("", names),
    }
}

/// A value that fits none of the untagged `alternatives`: a table by its keys, a string by its
/// value, anything else by its type.
fn no_alternative(path: &KeyPath, instance: &Value, alternatives: &[String]) -> Diagnostic {
    match instance {
        Value::Object(map) => {
            let keys: Vec<&String> = map.keys().collect();
            let message = match keys.as_slice() {
                [] => format!(
                    "{} needs one of its forms, found an empty table",
                    what(path)
                ),
                [k] => format!("`{k}` is not a valid {}", what(path)),
                _ => format!(
                    "{} takes one key, found {}",
                    what(path),
                    keys.iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let got = keys.first().map(|k| k.as_str()).unwrap_or("");
            let target = match keys.as_slice() {
                [k] => Diagnostic::key(path.key(k), message),
                _ => Diagnostic::value(path.clone(), message),
            };
            target.choices(got, alternatives)
        }
        Value::String(s) => bad_choice(path, instance, alternatives).choices(s, alternatives),
        other => Diagnostic::value(
            path.clone(),
            format!("{} cannot be {}", what(path), describe(other)),
        )
        .choices("", alternatives),
    }
}
