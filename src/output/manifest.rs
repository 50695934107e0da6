//! `manifest.json`: what a run was, how it went, and every file it wrote with its checksum.

use super::plain::open_plain;
use super::rundir::RunDir;
use crate::plan::figures::Figures;
use crate::spec::model::Checksum;
use crate::spec::tensor::{DType, Layout};
use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::io::{self, Write};
use std::path::Path;

/// The manifest's file name inside a run directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The top of `manifest.json`. Readers ignore keys they do not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The distrun version that ran (`CARGO_PKG_VERSION`).
    pub distrun_version: String,
    /// When the run started, RFC 3339 in UTC (see [`utc_string`]).
    pub started_utc: String,
    /// When the run finished, RFC 3339 in UTC.
    pub finished_utc: String,
    /// The spec as run, with defaults filled in: the device the steps ran on, its default
    /// backends, and each distribution the spec left to the plan.
    pub spec: serde_json::Value,
    /// SHA-256 of the spec file's bytes, 64 hex digits (no algorithm prefix).
    pub spec_sha256: String,
    /// The spec file's text: what `spec_sha256` hashes and `spec` was made from (absent from
    /// manifests written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_text: Option<String>,
    /// How many ranks ran.
    pub ranks: u64,
    /// Where each rank ran, indexed by rank.
    pub rank_info: Vec<RankInfo>,
    /// The algorithm of every checksum in the manifest.
    pub checksum_algorithm: Checksum,
    /// The steps, in the order they ran.
    pub steps: Vec<StepRecord>,
    /// The written tensors, by name.
    pub tensors: IndexMap<String, TensorRecord>,
    /// The plan's peak bytes per rank (heap included), beside what each rank measured
    /// (`rank_info[r].memory`); absent from manifests written before it was recorded. A
    /// sweep's: its largest point's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_peak_bytes_per_rank: Option<u64>,
    /// A sweep's `[sweep]` table as written (absent for a spec without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<serde_json::Value>,
    /// A sweep's points, each with its own steps and tensors (`steps` and `tensors` above are
    /// then empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<PointRecord>,
}

/// One point of a sweep as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointRecord {
    /// Its position among the points, from 0.
    pub index: u64,
    /// Each swept key's value (by its path as written in `[sweep]`).
    pub values: IndexMap<String, serde_json::Value>,
    /// Its steps, in the order they ran.
    pub steps: Vec<StepRecord>,
    /// Its written tensors, by name (their files under `p<index>/`).
    pub tensors: IndexMap<String, TensorRecord>,
}

/// Where one rank ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    /// The rank.
    pub rank: u64,
    /// Its host name.
    pub host: String,
    /// Its device, e.g. `cpu` or `cuda:0 (NVIDIA H100 80GB HBM3)`.
    pub device: String,
    /// What the rank's host memory held at most during the run, beyond what it held before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryRecord>,
}

/// A rank's host memory during a run, measured (see `exec::memory::counted`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// The most heap bytes allocated at once: on the CPU the tensors, workspaces, checks and
    /// writing; on a GPU the host side (downloads, staging) only.
    pub heap_peak_bytes: u64,
    /// The growth of the resident set's high-water mark, where the OS reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
}

/// How one step went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step's name (its own, or its op and index).
    pub name: String,
    /// The op, as in the spec (`matmul`, `all_reduce`, ...).
    pub op: String,
    /// The algorithm chosen, where the op has a choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// Timed runs.
    pub iterations: u64,
    /// Untimed runs before them.
    pub warmup: u64,
    /// Seconds per iteration, of the slowest rank.
    pub time_s: TimeStats,
    /// What the step was, for a report that reads no spec: bytes (nccl-tests' size), count,
    /// dtype, reduce, root; matmul m, n, k; FFT shape and kind.
    #[serde(flatten)]
    pub figures: Figures,
    /// Tera floating-point operations per second at the median time (matmul: 2mnk/t).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    /// Algorithm bandwidth, GB/s, at the median time (collectives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algbw_gbs: Option<f64>,
    /// Bus bandwidth, GB/s, with nccl-tests' factors (collectives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busbw_gbs: Option<f64>,
    /// The step's own verification, when `check = true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckRecord>,
    /// How the step's data traveled where it could go by NCCL or by puts (a movement into a
    /// symmetric tensor, an FFT's transpose; puts on NVSHMEM's heap with `nvshmem` in the
    /// backends, else within NCCL windows): the faster in trial runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<ViaRecord>,
    /// How a matmul's gathered operand traveled where it could go in rounds that overlap the
    /// GEMM (`ag_gemm`'s ring, SUMMA on a square grid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineRecord>,
    /// The layout a matmul's GEMM wrote its product in where it wrote the result itself and
    /// the spec pinned that layout, or trial runs weighed both (a skinny product over a long k,
    /// written whole in place: cuBLAS picks its kernels by the product's orientation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_layout: Option<ProductLayoutRecord>,
    /// How many batches each of an FFT's batched transposes ran in, each batch's move
    /// overlapping the next batch's transform (the first phase's way to the other slab, then
    /// the way back); absent where every move went whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batches: Vec<usize>,
}

/// The choice between a matmul in rounds and in one exchange.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineRecord {
    /// `rounds` or `whole`.
    pub chosen: String,
    /// The median of three trial runs in rounds, seconds (slowest rank); absent when the spec
    /// chose (`pipeline = "rounds"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds_s: Option<f64>,
    /// The median of three trial runs in one exchange, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole_s: Option<f64>,
    /// Where the operand gathered whole moved slice by slice within NCCL windows (by the copy
    /// engines, under the GEMMs): the slices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_slices: Option<usize>,
}

/// The layout a matmul's GEMM wrote its product in (where it wrote the result itself): the
/// result's, or the other, changed to the result's after (counted in that way's trial times).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProductLayoutRecord {
    /// `C` or `F`.
    pub chosen: String,
    /// The median of three trial runs writing the product in C order, seconds (slowest rank);
    /// absent where the spec chose (`product_layout = "C"` or `"F"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c_s: Option<f64>,
    /// The median of three trial runs writing it in F order, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f_s: Option<f64>,
}

/// The choice between NCCL and NVSHMEM puts for one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ViaRecord {
    /// `nccl`, or the puts: `nvshmem` (NVSHMEM's heap) or `nccl_windows` (NCCL's windows).
    pub chosen: String,
    /// The median of three trial runs by NCCL, seconds (slowest rank).
    pub nccl_s: f64,
    /// The median of three trial runs by puts (NVSHMEM's, or within NCCL windows), seconds
    /// (slowest rank).
    pub nvshmem_s: f64,
}

/// Minimum, median and maximum over iterations, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimeStats {
    /// Fastest iteration.
    pub min: f64,
    /// Median iteration.
    pub median: f64,
    /// Slowest iteration.
    pub max: f64,
}

/// The outcome of a step's check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// Whether the check passed.
    pub passed: bool,
    /// The largest error seen. JSON has no NaN or infinity: they are written as the strings
    /// `"inf"`, `"-inf"` and `"nan"` (and null, which older manifests hold, reads as NaN).
    #[serde(
        serialize_with = "number_or_name",
        deserialize_with = "number_or_named"
    )]
    pub max_error: f64,
}

/// Writes a finite number as a number, and a non-finite one by its name.
fn number_or_name<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    match x {
        x if x.is_finite() => s.serialize_f64(*x),
        x if x.is_nan() => s.serialize_str("nan"),
        x if *x > 0.0 => s.serialize_str("inf"),
        _ => s.serialize_str("-inf"),
    }
}

/// Reads a number, a non-finite one's name, or null as NaN.
fn number_or_named<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Number(f64),
        Name(String),
        Null,
    }
    match Written::deserialize(d)? {
        Written::Number(x) => Ok(x),
        Written::Null => Ok(f64::NAN),
        Written::Name(name) => match name.as_str() {
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            "nan" => Ok(f64::NAN),
            other => Err(serde::de::Error::custom(format!(
                "max_error {other:?} is not a number, \"inf\", \"-inf\" or \"nan\""
            ))),
        },
    }
}

/// One written tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorRecord {
    /// Global shape.
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: DType,
    /// Layout of the pieces (the gathered file is C order).
    pub layout: Layout,
    /// The distribution as resolved (a grid filled in where the spec left it to the rank count).
    pub distribution: serde_json::Value,
    /// Checksum of the global tensor's C-order bytes: the same for any rank count and
    /// distribution (a partial tensor's global form is the stack of its P rows).
    pub checksum: String,
    /// One `.npy` per rank, in rank order.
    pub shards: Vec<ShardRecord>,
    /// The gathered `.npy` holding the whole tensor (with `gather = true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The checksum of `file`'s bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_checksum: Option<String>,
}

/// One rank's `.npy` of a tensor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRecord {
    /// The rank.
    pub rank: u64,
    /// The file's name, relative to the run directory.
    pub file: String,
    /// The checksum of the file's bytes.
    pub checksum: String,
}

/// A time as the manifest writes it: RFC 3339 in UTC, milliseconds, e.g.
/// `2026-11-21T17:30:45.123Z`.
pub fn utc_string(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Writes `manifest.json` into the run directory (pretty JSON, atomically). Write it last, just
/// before the commit.
pub fn write_manifest(rundir: &RunDir, m: &Manifest) -> io::Result<()> {
    rundir.write_file(MANIFEST_FILE, |file| {
        let mut w = io::BufWriter::new(file);
        serde_json::to_writer_pretty(&mut w, m)?;
        w.write_all(b"\n")?;
        w.flush()
    })
}

/// Reads `manifest.json` from a run directory (a plain file: never through a link, a FIFO or a
/// device).
pub fn read_manifest(dir: &Path) -> anyhow::Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let text = open_plain(dir, MANIFEST_FILE)
        .map_err(io::Error::from)
        .and_then(io::read_to_string)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a distrun manifest", path.display()))
}

#[cfg(test)]
mod tests;
