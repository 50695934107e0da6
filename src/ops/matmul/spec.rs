//! The matmul step's keys: operands, scales, transposes, epilog, algorithm, pipeline and the
//! product's layout.

use crate::spec::step::{BiasPer, Epilog, StepCommon};
use crate::spec::tensor::Layout;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Matmul step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Matmul {
    /// Left operand (m x k, or k x m with `transpose_a`).
    pub a: String,
    /// Right operand (k x n, or n x k with `transpose_b`).
    pub b: String,
    /// Addend, m x n, scaled by `beta` (never transposed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c: Option<String>,
    /// The result, m x n.
    pub out: String,
    /// Scale of `op(a) @ op(b)` (default 1).
    #[serde(default = "one_f64")]
    pub alpha: f64,
    /// Scale of `c` (default 0).
    #[serde(default)]
    pub beta: f64,
    /// Use a transposed (default false).
    #[serde(default)]
    pub transpose_a: bool,
    /// Use b transposed (default false).
    #[serde(default)]
    pub transpose_b: bool,
    /// Conjugate a (needs `transpose_a`; complex dtypes).
    #[serde(default)]
    pub conjugate_a: bool,
    /// Conjugate b (needs `transpose_b`; complex dtypes).
    #[serde(default)]
    pub conjugate_b: bool,
    /// Applied to the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epilog: Option<Epilog>,
    /// Bias vector for the `*bias` epilogs: one value per row of the result (length m, added to
    /// every column; cuBLASLt's convention) or, with `bias_per = "column"`, one per column
    /// (length n, an output feature's bias as in `torch.nn.Linear`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bias: Option<String>,
    /// Whether `bias` holds one value per row (default) or per column of the result.
    #[serde(default)]
    pub bias_per: BiasPer,
    /// Algorithm (default auto: the one that moves the least data per rank).
    #[serde(default)]
    pub algorithm: MatmulAlgorithm,
    /// How an operand gathered whole (`ag_gemm`, `summa`) travels: in rounds that overlap the
    /// GEMM, or in one exchange before it (default auto: trial runs choose).
    #[serde(default)]
    pub pipeline: MatmulPipeline,
    /// The layout the GEMM writes the product in where it writes the result itself (no addend,
    /// bias or activation after it): the result's, or the other, changed to the result's after
    /// (default auto: trial runs choose where that change costs little).
    #[serde(default)]
    pub product_layout: ProductLayout,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

fn one_f64() -> f64 {
    1.0
}


/// How an operand that a matmul gathers whole travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatmulPipeline {
    /// Where rounds can run, three trial runs each way, in turn, before the step's own runs;
    /// the one with the shorter median is kept (the manifest's `pipeline` records both).
    #[default]
    Auto,
    /// Piece by piece, each piece's GEMM as soon as it has arrived, overlapping the next
    /// piece's move (ag_gemm's ring; SUMMA on a square grid of ranks). Where the pieces allow
    /// no rounds, as `whole`.
    Rounds,
    /// Gathered in one exchange, then one GEMM.
    Whole,
}

impl MatmulPipeline {
    /// The name used in specs and manifests.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPipeline::Auto => "auto",
            MatmulPipeline::Rounds => "rounds",
            MatmulPipeline::Whole => "whole",
        }
    }
}

/// The layout a matmul's GEMM writes its product in, where it writes the result itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum ProductLayout {
    /// Where the GEMM writes the result whole and in place (nothing moves it after) and the
    /// change of layout costs at most a tenth of what the GEMM reads (`2mn <= k(m + n) / 10`:
    /// a skinny product over a long k), three trial runs each way, in turn, before the step's
    /// own runs; the faster is kept (the manifest's `product_layout` records both). Elsewhere
    /// the result's layout. cuBLAS picks its kernels by the product's orientation, and on such
    /// products either may be the faster.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Row-major.
    C,
    /// Column-major.
    F,
}

impl ProductLayout {
    /// The layout pinned, if any.
    pub fn pinned(self) -> Option<Layout> {
        match self {
            ProductLayout::Auto => None,
            ProductLayout::C => Some(Layout::C),
            ProductLayout::F => Some(Layout::F),
        }
    }
}

/// Distributed matmul algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatmulAlgorithm {
    /// Choose from the distributions and shapes: least data moved per rank.
    #[default]
    Auto,
    /// Every rank already holds what it needs: one local GEMM, no communication.
    Local,
    /// All-gather one operand, then a local GEMM.
    AgGemm,
    /// Local GEMM on a k-slice, then reduce-scatter the partial products.
    GemmRs,
    /// Local GEMM on a k-slice, then all-reduce the partial products.
    GemmAr,
    /// SUMMA over a 2-D process grid: panels broadcast along grid rows and columns.
    Summa,
    /// Redistribute the operands to slabs another algorithm takes, then run it.
    Redistribute,
    /// Into a `partial` result: each rank multiplies its slice of k (the slab rule over the
    /// ranks) and keeps its product unreduced; rank 0 adds `beta * c` and the bias, so the
    /// ranks' pieces add up to the result (a later all_reduce or reduce_scatter reduces them).
    KSplit,
}

impl MatmulAlgorithm {
    /// The name used in specs, plans and manifests.
    pub fn name(self) -> &'static str {
        match self {
            MatmulAlgorithm::Auto => "auto",
            MatmulAlgorithm::Local => "local",
            MatmulAlgorithm::AgGemm => "ag_gemm",
            MatmulAlgorithm::GemmRs => "gemm_rs",
            MatmulAlgorithm::GemmAr => "gemm_ar",
            MatmulAlgorithm::Summa => "summa",
            MatmulAlgorithm::Redistribute => "redistribute",
            MatmulAlgorithm::KSplit => "k_split",
        }
    }
}

