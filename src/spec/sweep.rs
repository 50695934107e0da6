//! Sweeps: a `[sweep]` table maps key paths of the spec (`tensors.x.shape[0]`,
//! `steps[1].algorithm`) to the values they take, a list or a range; the points are the product
//! of the keys (the last varies fastest), each the spec with those keys replaced.

use super::diag::{Diagnostic, KeyPath, Seg};
use super::load::SpanIndex;
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

/// The most points one sweep may have.
pub const MAX_POINTS: usize = 10_000;

/// The values one swept key takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SweepValues {
    /// `{ from, to, factor }`: `from`, `from * factor`, ... while at most `to` (nccl-tests' -b -e -f).
    Geometric(Geometric),
    /// `{ from, to, step }`: `from`, `from + step`, ... while at most `to`.
    Arithmetic(Arithmetic),
    /// Any TOML values, in order.
    List(Vec<Value>),
}

/// A geometric range (integers where `from` and `factor` are).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Geometric {
    /// The first value (above zero).
    pub from: Number,
    /// The last value at most.
    pub to: Number,
    /// The ratio of one value to the one before (above 1).
    pub factor: Number,
}

/// An arithmetic range (integers where `from` and `step` are).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Arithmetic {
    /// The first value.
    pub from: Number,
    /// The last value at most.
    pub to: Number,
    /// What each value adds to the one before (above zero).
    pub step: Number,
}

/// One point of a sweep: its index and the value of each swept key (by its path as written).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Its position among the points, from 0.
    pub index: usize,
    /// Each swept key's value here.
    pub values: IndexMap<String, Value>,
}

impl Point {
    /// `point 3 (tensors.x.shape[0] = 64, tensors.x.dtype = "f32")`.
    pub fn describe(&self) -> String {
        let values: Vec<String> = (self.values.iter())
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        format!("sweep point {} ({})", self.index, values.join(", "))
    }
}

/// The errors of the points that have some (of `points` in all) as one list: an error every
/// point has (the same message at the same
/// place) once, as it is; the others once per point, named by [`Point::describe`], and pointing
/// at the sweep's entry where they lie under a swept key (`spans`: the spec text's).
pub fn merge(
    per_point: Vec<(&Point, Vec<Diagnostic>)>,
    points: usize,
    spans: &SpanIndex,
) -> Vec<Diagnostic> {
    let n = points;
    let mut seen: IndexMap<(KeyPath, String), usize> = IndexMap::new();
    for (_, diags) in &per_point {
        for d in diags {
            *seen.entry((d.path.clone(), d.message.clone())).or_default() += 1;
        }
    }
    let everywhere = |d: &Diagnostic| n > 1 && seen[&(d.path.clone(), d.message.clone())] == n;
    let mut out: Vec<Diagnostic> = Vec::new();
    for (point, diags) in &per_point {
        for d in diags {
            if everywhere(d) {
                if point.index == per_point[0].0.index {
                    out.push(d.clone());
                }
                continue;
            }
            let mut d = d.clone();
            if let Some(key) = (point.values.keys())
                .find(|k| parse_path(k).is_ok_and(|p| d.path.0.starts_with(&p.0)))
            {
                d.span = Some(spans.locate(&Diagnostic::value(entry_path(key), "")));
            }
            d.message = format!("{}: {}", point.describe(), d.message);
            out.push(d);
        }
    }
    out
}

/// The path of the sweep's entry for `key` (where its errors point).
pub fn entry_path(key: &str) -> KeyPath {
    KeyPath::root().key("sweep").key(key)
}

/// The points of a `[sweep]` table (the document's `sweep` value), or every problem with it.
/// `doc` is the spec without its sweep: each key must name a key that the spec has, or a key
/// of a table that it has. `written_at` gives a key's place in the text: the keys vary in
/// that order, the last fastest.
pub fn points(
    table: &Value,
    doc: &Value,
    written_at: impl Fn(&str) -> usize,
) -> Result<Vec<Point>, Vec<Diagnostic>> {
    let Some(table) = table.as_object() else {
        let d = Diagnostic::value(KeyPath::root().key("sweep"), "sweep must be a table");
        return Err(vec![
            d.help("write [sweep] with \"key.path\" = [values] entries"),
        ]);
    };
    let mut diags = Vec::new();
    let mut axes: Vec<(String, Vec<Value>)> = Vec::new();
    if table.is_empty() {
        let d = Diagnostic::value(KeyPath::root().key("sweep"), "the sweep has no keys");
        diags.push(d.help("add \"key.path\" = [values], or remove [sweep]"));
    }
    let mut keys: Vec<(&String, &Value)> = table.iter().collect();
    keys.sort_by_key(|(key, _)| written_at(key));
    for (key, spec) in keys {
        let at = entry_path(key);
        match sweepable(key, doc).and_then(|_| values(spec)) {
            Ok(values) => axes.push((key.clone(), values)),
            Err((message, help)) => diags.push(Diagnostic::value(at, message).help(help)),
        }
    }
    let count = axes
        .iter()
        .try_fold(1usize, |n, (_, v)| n.checked_mul(v.len()));
    if diags.is_empty() && count.is_none_or(|n| n > MAX_POINTS) {
        let sizes: Vec<String> = axes.iter().map(|(_, v)| v.len().to_string()).collect();
        let d = Diagnostic::value(
            KeyPath::root().key("sweep"),
            format!(
                "the sweep has {} points: at most {MAX_POINTS}",
                sizes.join(" x ")
            ),
        );
        diags.push(d.help("sweep fewer values, or split the sweep into several specs"));
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    Ok(product(&axes))
}

/// Every combination of the axes' values, the last axis varying fastest.
fn product(axes: &[(String, Vec<Value>)]) -> Vec<Point> {
    let mut points = vec![IndexMap::new()];
    for (key, values) in axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                values.iter().map(move |v| {
                    let mut p = p.clone();
                    p.insert(key.clone(), v.clone());
                    p
                })
            })
            .collect();
    }
    (points.into_iter().enumerate())
        .map(|(index, values)| Point { index, values })
        .collect()
}

/// The spec `doc` at `point`: each swept key's value put in place.
pub fn apply(doc: &Value, point: &Point) -> Value {
    let mut doc = doc.clone();
    for (key, value) in &point.values {
        if let Ok(path) = parse_path(key)
            && let Some(slot) = slot(&mut doc, &path)
        {
            *slot = value.clone();
        }
    }
    doc
}

/// Where `path` lies in `doc`, creating its last key in a table that exists.
fn slot<'a>(doc: &'a mut Value, path: &KeyPath) -> Option<&'a mut Value> {
    let mut here = doc;
    for seg in &path.0 {
        here = match (seg, here) {
            (Seg::Key(k), Value::Object(map)) => map.entry(k.clone()).or_insert(Value::Null),
            (Seg::Index(i), Value::Array(items)) => items.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(here)
}

/// A problem with one sweep entry: what is wrong, and what would do.
type Problem = (String, String);

/// Whether `key` may be swept in `doc`: a path into `tensors`, `steps` or `job.seed` whose
/// table (or array element) exists.
fn sweepable(key: &str, doc: &Value) -> Result<(), Problem> {
    let path = parse_path(key)?;
    let allowed = match path.0.as_slice() {
        [Seg::Key(top), _, ..] if top == "tensors" || top == "steps" => true,
        [Seg::Key(job), Seg::Key(seed)] => job == "job" && seed == "seed",
        _ => false,
    };
    if !allowed {
        return Err((
            format!(
                "`{key}` cannot be swept: one launch runs every point on the same process group, devices and run directory"
            ),
            "sweep keys of tensors (tensors.NAME.KEY), of steps (steps[I].KEY) or job.seed".into(),
        ));
    }
    let mut here = doc;
    for (i, seg) in path.0.iter().enumerate() {
        let last = i + 1 == path.0.len();
        let next = match (seg, here) {
            (Seg::Key(k), Value::Object(map)) => map.get(k),
            (Seg::Index(j), Value::Array(items)) => items.get(*j),
            _ => None,
        };
        match next {
            Some(v) => here = v,
            // A key the spec leaves to its default may be swept, in a table it has.
            None if last && matches!((seg, here), (Seg::Key(_), Value::Object(_))) => return Ok(()),
            None => {
                let at = KeyPath(path.0[..=i].to_vec());
                return Err((
                    format!("`{key}` names nothing in the spec: it has no `{at}`"),
                    "sweep a key of a tensor or step the spec declares".into(),
                ));
            }
        }
    }
    Ok(())
}

/// A sweep key parsed strictly: `a.b[2].c`, keys of letters, digits, `_` and `-`.
fn parse_path(key: &str) -> Result<KeyPath, Problem> {
    let bad = || {
        (
            format!("`{key}` is not a key path"),
            "write it as in error messages: tensors.x.shape[0], steps[1].algorithm".to_string(),
        )
    };
    let mut segs = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        let name_ok = !name.is_empty()
            && (name.chars()).all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(bad());
        }
        segs.push(Seg::Key(name.to_string()));
        while !rest.is_empty() {
            let inner = rest.strip_prefix('[').ok_or_else(bad)?;
            let end = inner.find(']').ok_or_else(bad)?;
            segs.push(Seg::Index(inner[..end].parse().map_err(|_| bad())?));
            rest = &inner[end + 1..];
        }
    }
    Ok(KeyPath(segs))
}

/// The values of one entry.
fn values(spec: &Value) -> Result<Vec<Value>, Problem> {
    let parsed: SweepValues = serde_json::from_value(spec.clone()).map_err(|_| {
        (
            "a sweep entry is a list of values, { from, to, factor } or { from, to, step }".into(),
            "e.g. [\"f32\", \"bf16\"] or { from = 8, to = 67108864, factor = 2 }".into(),
        )
    })?;
    let values = match parsed {
        SweepValues::List(v) => v,
        SweepValues::Geometric(g) => range(&g.from, &g.to, &g.factor, true)?,
        SweepValues::Arithmetic(a) => range(&a.from, &a.to, &a.step, false)?,
    };
    if values.is_empty() {
        return Err((
            "the entry gives no values".into(),
            "list at least one value, or a range whose `from` is at most its `to`".into(),
        ));
    }
    Ok(values)
}

/// A range's values: integers where `from` and the stride are, else floats.
fn range(from: &Number, to: &Number, by: &Number, geometric: bool) -> Result<Vec<Value>, Problem> {
    let (name, least) = if geometric {
        ("factor", 1.0)
    } else {
        ("step", 0.0)
    };
    let (f, t, b) = (num(from), num(to), num(by));
    if b <= least || (geometric && f <= 0.0) {
        let what = if geometric {
            "factor above 1 and from above 0"
        } else {
            "step above 0"
        };
        return Err((
            format!("a range needs a {what} (from = {from}, {name} = {by})"),
            "e.g. { from = 8, to = 1024, factor = 2 } or { from = 1, to = 9, step = 2 }".into(),
        ));
    }
    let mut out = Vec::new();
    if let (Some(f), Some(t), Some(b)) = (from.as_i64(), to.as_i64(), by.as_i64()) {
        let mut x = Some(f);
        while let Some(v) = x.filter(|&v| v <= t && out.len() <= MAX_POINTS) {
            out.push(Value::from(v));
            x = if geometric {
                v.checked_mul(b)
            } else {
                v.checked_add(b)
            };
        }
        return Ok(out);
    }
    // Floats: a value within a millionth of `to` still counts (0.1 steps add up unevenly).
    let (mut x, mut k) = (f, 0.0);
    while x <= t * (1.0 + 1e-9) + 1e-12 && out.len() <= MAX_POINTS {
        out.push(Number::from_f64(x).map_or(Value::Null, Value::Number));
        k += 1.0;
        x = if geometric { f * b.powf(k) } else { f + b * k };
    }
    Ok(out)
}

fn num(n: &Number) -> f64 {
    n.as_f64().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({
            "job": {"name": "s"},
            "tensors": {"x": {"shape": [8], "dtype": "f32"}},
            "steps": [{"op": "all_reduce", "input": "x"}],
        })
    }

    /// The order of `keys` as written (json! keeps none).
    fn written(keys: &[&'static str]) -> impl Fn(&str) -> usize {
        move |key| keys.iter().position(|k| *k == key).unwrap_or(keys.len())
    }

    #[test]
    fn geometric_ranges_are_nccl_tests_sizes() {
        let table = json!({"tensors.x.shape[0]": {"from": 8, "to": 1024, "factor": 2}});
        let p = points(&table, &doc(), written(&[])).unwrap();
        let sizes: Vec<i64> = p.iter().map(|p| p.values[0].as_i64().unwrap()).collect();
        assert_eq!(sizes, [8, 16, 32, 64, 128, 256, 512, 1024]);
        assert_eq!(apply(&doc(), &p[2])["tensors"]["x"]["shape"][0], 32);
    }

    #[test]
    fn the_last_key_varies_fastest() {
        let table = json!({
            "tensors.x.dtype": ["f32", "bf16"],
            "steps[0].reduce": ["sum", "max", "min"],
        });
        let p = points(
            &table,
            &doc(),
            written(&["tensors.x.dtype", "steps[0].reduce"]),
        )
        .unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!(p[1].values["steps[0].reduce"], "max");
        assert_eq!(p[3].values["tensors.x.dtype"], "bf16");
        assert_eq!(p[3].index, 3);
        // A key the spec leaves to its default is added to its table.
        assert_eq!(apply(&doc(), &p[4])["steps"][0]["reduce"], "max");
        assert!(p[4].describe().contains("steps[0].reduce = \"max\""));
    }

    #[test]
    fn arithmetic_ranges_of_floats_reach_their_end() {
        let table = json!({"steps[0].alpha": {"from": 0.1, "to": 0.5, "step": 0.1}});
        assert_eq!(points(&table, &doc(), written(&[])).unwrap().len(), 5);
    }

    #[test]
    fn bad_entries_are_each_named() {
        let table = json!({
            "runtime.device": ["cpu"],
            "tensors.y.shape[0]": [1],
            "tensors.x.shape[3]": [1],
            "tensors.x..dtype": ["f32"],
            "tensors.x.dtype": [],
            "steps[0].reduce": {"from": 1, "to": 8, "factor": 1},
            "job.seed": "x",
        });
        let order = [
            "runtime.device",
            "tensors.y.shape[0]",
            "tensors.x.shape[3]",
            "tensors.x..dtype",
            "tensors.x.dtype",
            "steps[0].reduce",
            "job.seed",
        ];
        let errs = points(&table, &doc(), written(&order)).unwrap_err();
        assert_eq!(errs.len(), 7, "{errs:?}");
        assert!(errs[0].message.contains("cannot be swept"));
        assert!(errs[1].message.contains("no `tensors.y`"));
        assert!(errs[2].message.contains("no `tensors.x.shape[3]`"));
        assert!(errs[3].message.contains("not a key path"));
        assert!(errs[4].message.contains("no values"));
        assert!(errs[5].message.contains("factor above 1"));
        assert!(errs[6].message.contains("a list of values"));
        assert_eq!(errs[0].path, entry_path("runtime.device"));
    }

    #[test]
    fn too_many_points_are_refused() {
        let table = json!({
            "tensors.x.shape[0]": {"from": 1, "to": 200, "step": 1},
            "job.seed": {"from": 1, "to": 200, "step": 1},
        });
        let errs = points(&table, &doc(), written(&[])).unwrap_err();
        assert!(errs[0].message.contains("200 x 200 points"), "{errs:?}");
    }
}
