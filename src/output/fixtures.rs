//! Test fixtures: scratch directories and a sample manifest.

use super::manifest::{
    CheckRecord, Manifest, RankInfo, ShardRecord, StepRecord, TensorRecord, TimeStats,
};
use crate::spec::model::{Checksum, Device};
use crate::spec::tensor::{DType, Layout};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty directory under the system's temporary directory.
pub struct TestDir(PathBuf);

impl TestDir {
    /// Creates `distrun-output-<label>-<pid>-<n>`.
    pub fn new(label: &str) -> TestDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("distrun-output-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TestDir(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The text of the spec [`sample_manifest`] records, for `algorithm`.
pub fn sample_spec_text(algorithm: Checksum) -> String {
    let checksum = serde_json::to_value(algorithm).unwrap();
    format!(
        "[job]\nname = \"sample\"\n\n[tensors.a]\nshape = [4, 2]\ndtype = \"f32\"\n\
         distribution = {{ slab = 0 }}\ninit = {{ arange = {{ start = 0, step = 1 }} }}\n\n\
         [output]\ntensors = [\"a\"]\ngather = true\nchecksum = {checksum}\n"
    )
}

/// A manifest for two ranks with one step and one written tensor `a` (f32, shape [4, 2], slab 0)
/// whose shards are `a.rank0.npy`, `a.rank1.npy` and gathered file `a.npy`, checksums left empty;
/// its spec, text and hash are those of [`sample_spec_text`] run on the CPU.
pub fn sample_manifest(algorithm: Checksum) -> Manifest {
    let text = sample_spec_text(algorithm);
    let loaded = crate::spec::load_str("sample.toml", &text, PathBuf::new()).unwrap();
    let spec = loaded.spec.as_run(Device::Cpu, |_| None);
    let mut tensors = IndexMap::new();
    tensors.insert(
        "a".to_string(),
        TensorRecord {
            shape: vec![4, 2],
            dtype: DType::F32,
            layout: Layout::C,
            distribution: serde_json::json!({"slab": 0}),
            checksum: String::new(),
            shards: (0..2)
                .map(|rank| ShardRecord {
                    rank,
                    file: format!("a.rank{rank}.npy"),
                    checksum: String::new(),
                })
                .collect(),
            file: Some("a.npy".to_string()),
            file_checksum: Some(String::new()),
        },
    );
    Manifest {
        distrun_version: env!("CARGO_PKG_VERSION").to_string(),
        started_utc: "2026-11-21T17:30:45.000Z".to_string(),
        finished_utc: "2026-11-21T17:30:47.500Z".to_string(),
        spec: serde_json::to_value(spec).unwrap(),
        spec_sha256: crate::output::checksum::sha256_hex(text.as_bytes()),
        spec_text: Some(text),
        ranks: 2,
        rank_info: (0..2)
            .map(|rank| RankInfo {
                rank,
                host: "node1".to_string(),
                device: "cpu".to_string(),
                memory: None,
            })
            .collect(),
        checksum_algorithm: algorithm,
        steps: vec![StepRecord {
            figures: Default::default(),
            name: "matmul-0".to_string(),
            op: "matmul".to_string(),
            algorithm: Some("ag_gemm".to_string()),
            iterations: 5,
            warmup: 1,
            time_s: TimeStats {
                min: 0.001,
                median: 0.0012,
                max: 0.002,
            },
            tflops: Some(12.5),
            algbw_gbs: None,
            busbw_gbs: None,
            check: Some(CheckRecord {
                passed: true,
                max_error: 1.5e-6,
            }),
            via: None,
            pipeline: None,
            product_layout: None,
            batches: Vec::new(),
        }],
        tensors,
        planned_peak_bytes_per_rank: None,
        sweep: None,
        points: Vec::new(),
    }
}
