//! `distrun verify RUN_DIR`: re-hash every file a manifest names.

use super::checksum::hash_file;
use super::manifest::read_manifest;
use anyhow::Context;
use std::io;
use std::path::Path;

/// What verification found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Files found and hashed.
    pub checked: usize,
    /// `(file, expected checksum, found checksum)` for each file whose bytes changed.
    pub mismatches: Vec<(String, String, String)>,
    /// Files the manifest names that are not there.
    pub missing: Vec<String>,
}

impl VerifyReport {
    /// True when every file is there with its recorded checksum.
    pub fn ok(&self) -> bool {
        self.mismatches.is_empty() && self.missing.is_empty()
    }
}

/// Re-hashes every file the run directory's manifest names (each tensor's shards and gathered
/// file) with the manifest's algorithm, and compares. Errors only when the manifest cannot be
/// read or a file that exists cannot be read.
pub fn verify(run_dir: &Path) -> anyhow::Result<VerifyReport> {
    let manifest = read_manifest(run_dir)?;
    let mut files: Vec<(&str, &str)> = Vec::new();
    for tensor in manifest.tensors.values() {
        for shard in &tensor.shards {
            files.push((&shard.file, &shard.checksum));
        }
        if let Some(file) = &tensor.file {
            files.push((file, tensor.file_checksum.as_deref().unwrap_or("")));
        }
    }
    let mut report = VerifyReport::default();
    for (file, expected) in files {
        let path = run_dir.join(file);
        match hash_file(&path, manifest.checksum_algorithm) {
            Ok(found) => {
                report.checked += 1;
                if found != expected {
                    report
                        .mismatches
                        .push((file.to_string(), expected.to_string(), found));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => report.missing.push(file.to_string()),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
