//! A spec that failed the schema, repaired so that the meaning pass can still run over the rest
//! (every error at once): each damaged tensor is taken out; a step's damaged key is removed (its
//! default applies), or where the step cannot do without it the step becomes a barrier (so step
//! numbers hold); any other damaged key is removed. What the repair touched, and everything that
//! reads it (a step reading a damaged tensor, the tensor such a step writes, and so on), is
//! tainted: the meaning pass's errors there would follow from the repair, not from the spec,
//! and are left out.

use super::diag::{Diagnostic, KeyPath, Seg};
use crate::ops::Step;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// The keys by which a step names the tensors it reads or writes.
const NAMING_KEYS: [&str; 6] = ["input", "a", "b", "c", "bias", "out"];

/// What a repair touched: what the repaired spec's meaning errors must not involve.
#[derive(Debug, Clone)]
pub struct Repair {
    tensors: HashSet<String>,
    steps: HashSet<usize>,
    /// Entries of `output.tensors` that name a tainted tensor.
    outputs: HashSet<usize>,
    removed: Vec<KeyPath>,
}

/// Taint flows in step order: a step that is damaged (in `steps`) or reads a tainted tensor
/// (in `tensors`) is tainted, and so is what it writes; so is what a step the repair `altered`
/// writes (the step keeps its own errors, but its result may differ).
fn taint(
    raw_steps: &[Value],
    altered: &HashSet<usize>,
    tensors: &mut HashSet<String>,
    steps: &mut HashSet<usize>,
) {
    let names = |step: &Value, keys: &[&str]| -> Vec<String> {
        keys.iter()
            .filter_map(|k| step.get(*k).and_then(Value::as_str).map(str::to_string))
            .collect()
    };
    for (i, step) in raw_steps.iter().enumerate() {
        if names(step, &NAMING_KEYS)
            .iter()
            .any(|n| tensors.contains(n))
        {
            steps.insert(i);
        }
        if steps.contains(&i) || altered.contains(&i) {
            // `out`, or `input` for a step in place.
            let target = names(step, &["out"])
                .pop()
                .or_else(|| names(step, &["input"]).pop());
            tensors.extend(target);
        }
    }
}

impl Repair {
    /// Repairs `value` for the schema errors `diags`: the value with the damage taken out, and
    /// what was touched; None where a damaged key cannot be taken out (the document itself, or
    /// a whole section of the wrong type).
    pub fn new(value: &Value, diags: &[Diagnostic]) -> Option<(Value, Self)> {
        let mut value = value.clone();
        let (mut tensors, mut steps, mut removed) = (HashSet::new(), HashSet::new(), Vec::new());
        let mut altered = HashSet::new();
        for d in diags {
            match d.path.0.as_slice() {
                [Seg::Key(t), Seg::Key(name), ..] if t == "tensors" => {
                    tensors.insert(name.clone());
                }
                [Seg::Key(s), Seg::Index(i), Seg::Key(key), ..] if s == "steps" => {
                    let step = value.get_mut("steps")?.get_mut(*i)?.as_object_mut()?;
                    step.remove(key);
                    removed.push(KeyPath::root().key("steps").index(*i).key(key));
                    altered.insert(*i);
                }
                [Seg::Key(s), Seg::Index(i)] if s == "steps" => {
                    steps.insert(*i);
                }
                [Seg::Key(section), Seg::Key(key), ..] => {
                    value.get_mut(section)?.as_object_mut()?.remove(key);
                    removed.push(KeyPath::root().key(section).key(key));
                }
                _ => return None,
            }
        }
        if let Some(t) = value.get_mut("tensors").and_then(Value::as_object_mut) {
            t.retain(|name, _| !tensors.contains(name));
        }
        let raw_steps: Vec<Value> = match value.get_mut("steps").and_then(Value::as_array_mut) {
            Some(list) => {
                let raw = list.clone();
                // A step that cannot do without a removed key is taken out whole.
                for &i in &altered {
                    if serde_json::from_value::<Step>(list[i].clone()).is_err() {
                        steps.insert(i);
                    }
                }
                for &i in &steps {
                    if let Some(step) = list.get_mut(i) {
                        *step = Value::Object(Map::from_iter([("op".into(), "barrier".into())]));
                    }
                }
                raw
            }
            None => Vec::new(),
        };
        taint(&raw_steps, &altered, &mut tensors, &mut steps);
        let outputs = (value.pointer("/output/tensors").and_then(Value::as_array))
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, n)| n.as_str().is_some_and(|n| tensors.contains(n)))
            .map(|(j, _)| j)
            .collect();
        let repair = Repair {
            tensors,
            steps,
            outputs,
            removed,
        };
        Some((value, repair))
    }

    /// Whether a meaning error of the repaired spec stands on its own: it involves no tainted
    /// tensor, step or removed key.
    pub fn independent(&self, d: &Diagnostic) -> bool {
        if self.removed.iter().any(|r| d.path.0.starts_with(&r.0)) {
            return false;
        }
        match d.path.0.as_slice() {
            [Seg::Key(t), Seg::Key(name), ..] if t == "tensors" => !self.tensors.contains(name),
            [Seg::Key(s), Seg::Index(i), ..] if s == "steps" => !self.steps.contains(i),
            [Seg::Key(o), Seg::Key(t), Seg::Index(j), ..] if o == "output" && t == "tensors" => {
                !self.outputs.contains(j)
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Repair;
    use crate::spec::diag::{Diagnostic, KeyPath};
    use serde_json::json;

    #[test]
    fn damage_spreads_to_what_reads_it() {
        let value = json!({
            "tensors": {"x": {"shape": [4]}, "ok": {"shape": [4]}},
            "steps": [
                {"op": "all_reduce", "input": "x", "out": "y"},
                {"op": "all_gather", "input": "y", "out": "z"},
                {"op": "broadcast", "input": "ok", "out": "w", "iterations": 0},
                {"op": "all_gather", "input": "w", "out": "v"},
                {"op": "allreduce", "input": "ok", "out": "u"},
                {"op": "barrier"}
            ],
            "runtime": {"device": "gpu"},
            "output": {"tensors": ["z", "ok"]}
        });
        let at = |p: &str| Diagnostic::value(KeyPath::parse(p), "bad");
        let diags = [
            at("tensors.x.shape"),
            at("steps[2].iterations"),
            at("steps[4].op"),
            at("runtime.device"),
        ];
        let (fixed, r) = Repair::new(&value, &diags).unwrap();
        // x is gone; step 2 loses its iterations (the default applies); step 4 without an op
        // is a barrier; runtime.device is removed.
        assert!(fixed["tensors"].get("x").is_none());
        assert_eq!(fixed["steps"][2].get("iterations"), None);
        assert_eq!(fixed["steps"][2]["op"], "broadcast");
        assert_eq!(fixed["steps"][4], json!({"op": "barrier"}));
        assert!(fixed["runtime"].get("device").is_none());
        // Steps 0 and 1 read x and what step 0 wrote from it; step 2 keeps its other errors,
        // but what it writes taints step 3; step 5 stands on its own.
        for (path, independent) in [
            ("steps[0].input", false),
            ("steps[1].input", false),
            ("steps[2].input", true),
            ("steps[2].iterations", false),
            ("steps[3].input", false),
            ("steps[4]", false),
            ("steps[5]", true),
            ("tensors.ok.init", true),
            ("runtime.device", false),
            ("runtime.ranks", true),
            ("output.tensors[0]", false),
            ("output.tensors[1]", true),
        ] {
            assert_eq!(r.independent(&at(path)), independent, "{path}");
        }
    }

    #[test]
    fn a_document_of_the_wrong_shape_is_not_repaired() {
        let value = json!({"steps": 3});
        let d = Diagnostic::value(KeyPath::parse("steps"), "not an array");
        assert!(Repair::new(&value, &[d]).is_none());
    }
}
