//! The manifest's spec against its recorded text and hash, and the manifest's tensors and
//! settings against the spec.

use super::Finding;
use crate::output::checksum::sha256_hex;
use crate::output::manifest::{Manifest, TensorRecord};
use crate::spec::Spec;
use crate::spec::model::Checksum;
use indexmap::IndexMap;
use serde_json::Value;
use std::path::PathBuf;

/// Checks `spec_sha256` against `spec_text`'s hash and `spec` against `spec_text` as run (the
/// device, backends and distributions a run fills in taken from `spec` itself). Returns `spec`
/// when it reads as a spec.
pub fn check_spec(m: &Manifest, findings: &mut Vec<Finding>) -> Option<Spec> {
    let mut find = |what: String| findings.push(Finding::Spec { what });
    let ran = serde_json::from_value::<Spec>(m.spec.clone());
    match &m.spec_text {
        None => find("the manifest does not hold the spec's text (spec_text)".to_string()),
        Some(text) => {
            let sha = sha256_hex(text.as_bytes());
            if sha != m.spec_sha256 {
                find(format!(
                    "spec_sha256 is {}, but the spec's text hashes to {sha}",
                    m.spec_sha256
                ));
            }
            match (
                crate::spec::load_str("spec_text", text, PathBuf::new()),
                &ran,
            ) {
                (Err(_), _) => find("spec_text is not a valid spec".to_string()),
                (Ok(source), Ok(ran)) => {
                    let resolved = |name: &str| ran.tensors.get(name)?.distribution.clone();
                    let expected = source.spec.as_run(ran.runtime.device, resolved);
                    let expected = serde_json::to_value(expected).expect("a spec serializes");
                    if let Some(path) = differs_at(&m.spec, &expected) {
                        find(format!("spec{path} is not what spec_text gives, as run"));
                    }
                }
                (Ok(_), Err(_)) => {}
            }
        }
    }
    match ran {
        Ok(spec) => Some(spec),
        Err(e) => {
            find(format!("spec does not read as a spec: {e}"));
            None
        }
    }
}

/// Checks that the manifest lists exactly the tensors the spec writes, each with a gathered file
/// where the spec gathers, and has the spec's checksum algorithm and rank count.
pub fn check_tensors(spec: &Spec, m: &Manifest, findings: &mut Vec<Finding>) {
    let out = &spec.output;
    if out.checksum != m.checksum_algorithm {
        findings.push(Finding::Spec {
            what: format!(
                "the spec's checksum is {}, but checksum_algorithm is {}",
                name(out.checksum),
                name(m.checksum_algorithm)
            ),
        });
    }
    if let Some(n) = spec.runtime.ranks.filter(|&n| u64::from(n) != m.ranks) {
        findings.push(Finding::Spec {
            what: format!("the spec runs on {n} ranks, but ranks is {}", m.ranks),
        });
    }
    if spec.sweep.is_some() != m.sweep.is_some() {
        let what = match spec.sweep {
            Some(_) => "the spec sweeps, but the manifest has no sweep",
            None => "the manifest has a sweep, but the spec has none",
        };
        findings.push(Finding::Spec { what: what.into() });
    }
    if m.points
        .iter()
        .enumerate()
        .any(|(i, p)| p.index != i as u64)
    {
        let what = "the sweep's points are not numbered 0, 1, 2... in order".to_string();
        findings.push(Finding::Spec { what });
    }
    for (prefix, tensors) in written_sets(m) {
        check_written(out, &prefix, tensors, findings);
    }
}

/// The manifest's sets of written tensors, each with the prefix of its names: the run's own, or
/// each sweep point's (`p3/`).
pub fn written_sets(m: &Manifest) -> Vec<(String, &IndexMap<String, TensorRecord>)> {
    match m.points.is_empty() {
        true => vec![(String::new(), &m.tensors)],
        false => (m.points.iter())
            .map(|p| (format!("p{}/", p.index), &p.tensors))
            .collect(),
    }
}

/// One set of written tensors against what the spec's output names (`prefix`: the set's, for
/// the findings' names).
fn check_written(
    out: &crate::spec::model::Output,
    prefix: &str,
    tensors: &IndexMap<String, TensorRecord>,
    findings: &mut Vec<Finding>,
) {
    let missing = out.tensors.iter().filter(|t| !tensors.contains_key(*t));
    findings.extend(missing.map(|t| Finding::TensorMissing {
        tensor: format!("{prefix}{t}"),
    }));
    for (tensor, t) in tensors {
        let tensor = &format!("{prefix}{tensor}");
        let name = tensor.strip_prefix(prefix).unwrap_or(tensor);
        if !out.tensors.iter().any(|t| t == name) {
            findings.push(Finding::TensorExtra {
                tensor: tensor.clone(),
            });
        } else if out.gather != t.file.is_some() {
            let what = match out.gather {
                true => "the spec gathers it, but the manifest names no gathered file",
                false => "the manifest names a gathered file, but the spec does not gather",
            };
            findings.push(Finding::Record {
                tensor: tensor.clone(),
                what: what.to_string(),
            });
        }
    }
}

/// The SHA-256 of a text, as `spec_sha256` writes it (64 hex digits, no prefix).
/// An algorithm's name, as specs write it.
fn name(algorithm: Checksum) -> String {
    serde_json::to_value(algorithm)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Where two JSON values first differ, as a key path below them (`.output.tensors`, `[2]`; empty
/// for the values themselves); None when they are equal.
fn differs_at(a: &Value, b: &Value) -> Option<String> {
    if a == b {
        return None;
    }
    let below = match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let changed = x.iter().find_map(|(k, v)| match y.get(k) {
                Some(w) => differs_at(v, w).map(|p| format!(".{k}{p}")),
                None => Some(format!(".{k}")),
            });
            changed.or_else(|| {
                y.keys()
                    .find(|k| !x.contains_key(*k))
                    .map(|k| format!(".{k}"))
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => (x.iter().zip(y))
            .enumerate()
            .find_map(|(i, (v, w))| differs_at(v, w).map(|p| format!("[{i}]{p}"))),
        _ => None,
    };
    Some(below.unwrap_or_default())
}
