//! Steps: the operations a spec runs, in order.

use super::tensor::{Axis, Distribution, Layout};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Keys every step takes besides `op`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StepCommon {
    /// A name for the step in logs and the manifest (default: its op and index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Untimed runs before the timed ones (default 0).
    #[serde(default)]
    pub warmup: u32,
    /// Timed runs (default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub iterations: u32,
    /// Run the op's own verification and record it in the manifest (default false).
    #[serde(default)]
    pub check: bool,
    /// How iterations are timed: `each` (default) alone, between barriers, the slowest rank's
    /// time; `queued` all back to back between one pair of events, each the mean (as nccl-tests
    /// and cupy time): the host's cost of queuing them then shows only where it exceeds the
    /// device's time.
    #[serde(default)]
    pub timing: Timing,
}

/// How a step's iterations are timed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// Each iteration alone, after a barrier: min, median and max over iterations.
    #[default]
    Each,
    /// All iterations queued back to back: their mean.
    Queued,
}

fn one() -> u32 {
    1
}

/// One `[[steps]]` entry; `op` selects the operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Step {
    /// `out = epilog(alpha * op(a) @ op(b) + beta * c)` over any distributions and layouts.
    Matmul(Matmul),
    /// 2-D or 3-D distributed FFT over all axes.
    Fft(Fft),
    /// Moves a tensor to another distribution (and layout).
    Redistribute(Redistribute),
    /// partial -> replicated, combining with `reduce`.
    AllReduce(AllReduce),
    /// partial -> root, combining with `reduce`.
    Reduce(Reduce),
    /// root -> replicated.
    Broadcast(Broadcast),
    /// slab -> replicated.
    AllGather(AllGather),
    /// partial -> slab along `axis`, combining with `reduce`.
    ReduceScatter(ReduceScatter),
    /// Shape `[P, P, ...]`: slab 0 -> slab 1.
    AllToAll(AllToAll),
    /// slab -> root.
    Gather(Gather),
    /// root -> slab along `axis`.
    Scatter(Scatter),
    /// Shape `[P, ...]`, slab 0 -> slab 0, rows moved between ranks by `pattern` or `pairs`.
    SendRecv(SendRecv),
    /// All ranks wait for each other.
    Barrier(Barrier),
}

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
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

fn one_f64() -> f64 {
    1.0
}

/// Matmul epilogs, as cuBLASLt offers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Epilog {
    /// max(x, 0).
    Relu,
    /// GELU, tanh approximation.
    Gelu,
    /// x + bias.
    Bias,
    /// max(x + bias, 0).
    ReluBias,
    /// GELU(x + bias).
    GeluBias,
}

impl Epilog {
    /// True when the epilog reads a `bias` tensor.
    pub fn needs_bias(self) -> bool {
        matches!(self, Epilog::Bias | Epilog::ReluBias | Epilog::GeluBias)
    }
}

/// Which axis of a matmul's result a bias vector runs along.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BiasPer {
    /// One value per row (length m), added to every column: cuBLASLt's and nvmath's bias.
    #[default]
    Row,
    /// One value per column (length n), added to every row: a layer's per-feature bias, as in
    /// `torch.nn.Linear` (`y = x @ w + b`).
    Column,
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

/// FFT step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Fft {
    /// The tensor to transform (2 or 3 axes).
    pub input: String,
    /// The result (absent: in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// c2c (default), r2c (real f32/f64 in, complex out) or c2r (complex in, real out).
    #[serde(default)]
    pub kind: FftKind,
    /// forward (default, e^-i) or inverse (e^+i).
    #[serde(default)]
    pub direction: FftDirection,
    /// Scaling: backward (default: 1/n on the inverse), forward (1/n on the forward), ortho
    /// (1/sqrt(n) both ways) or none.
    #[serde(default)]
    pub norm: FftNorm,
    /// true (default): the result has the input's distribution; false: it stays in the
    /// complementary slab (x <-> y), saving a transpose.
    #[serde(default = "yes")]
    pub reshape: bool,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

fn yes() -> bool {
    true
}

/// FFT kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FftKind {
    /// Complex to complex.
    #[default]
    C2c,
    /// Real to complex: the last axis n becomes n//2 + 1.
    R2c,
    /// Complex to real: the last axis m becomes 2*(m - 1), or the declared output's size.
    C2r,
}

/// FFT direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FftDirection {
    /// Exponent sign -1.
    #[default]
    Forward,
    /// Exponent sign +1.
    Inverse,
}

/// FFT normalization, numpy's names plus `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FftNorm {
    /// No scaling either way.
    None,
    /// 1/sqrt(n) both ways.
    Ortho,
    /// 1/n on the forward transform.
    Forward,
    /// 1/n on the inverse transform.
    #[default]
    Backward,
}

/// Redistribute step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Redistribute {
    /// The tensor to move.
    pub input: String,
    /// The result.
    pub out: String,
    /// The result's distribution.
    pub distribution: Distribution,
    /// The result's layout (default: the input's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// Reduction operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReduceOp {
    /// Sum (default).
    #[default]
    Sum,
    /// Product.
    Prod,
    /// Minimum (real dtypes).
    Min,
    /// Maximum (real dtypes).
    Max,
    /// Mean over ranks (integers: the sum, wrapped in the dtype, divided and truncated).
    Avg,
}

/// all_reduce step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AllReduce {
    /// A partial tensor.
    pub input: String,
    /// The replicated result (absent: in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// How to combine (default sum).
    #[serde(default)]
    pub reduce: ReduceOp,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// reduce step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Reduce {
    /// A partial tensor.
    pub input: String,
    /// The result on `root` (absent: in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// How to combine (default sum).
    #[serde(default)]
    pub reduce: ReduceOp,
    /// The rank that receives the result (default 0).
    #[serde(default)]
    pub root: u32,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// broadcast step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Broadcast {
    /// A tensor held by `root` (distribution `{ root = R }`).
    pub input: String,
    /// The replicated result (absent: in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out: Option<String>,
    /// The sending rank (default: the input's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// all_gather step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AllGather {
    /// A slab-distributed tensor.
    pub input: String,
    /// The replicated result.
    pub out: String,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// reduce_scatter step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ReduceScatter {
    /// A partial tensor.
    pub input: String,
    /// The result, a slab along `axis`.
    pub out: String,
    /// How to combine (default sum).
    #[serde(default)]
    pub reduce: ReduceOp,
    /// The axis the result is split along (default 0), as a slab: rank r gets `S//P + (r < S%P)`.
    #[serde(default = "axis0")]
    pub axis: Axis,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

fn axis0() -> Axis {
    Axis::Index(0)
}

/// all_to_all step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct AllToAll {
    /// Shape `[P, P, ...]`, slab 0: rank r's row j goes to rank j.
    pub input: String,
    /// Shape `[P, P, ...]`, slab 1.
    pub out: String,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// gather step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Gather {
    /// A slab-distributed tensor.
    pub input: String,
    /// The result, held whole by `root`.
    pub out: String,
    /// The receiving rank (default 0).
    #[serde(default)]
    pub root: u32,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// scatter step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Scatter {
    /// A tensor held by `root`.
    pub input: String,
    /// The result, a slab along `axis`.
    pub out: String,
    /// The sending rank (default: the input's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u32>,
    /// The axis the result is split along (default 0), as a slab: rank r gets `S//P + (r < S%P)`.
    #[serde(default = "axis0")]
    pub axis: Axis,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// send_recv step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SendRecv {
    /// Shape `[P, ...]`, slab 0: rank r holds row r.
    pub input: String,
    /// Shape `[P, ...]`, slab 0.
    pub out: String,
    /// ring (default): `out[r] = in[(r-1) mod P]`. Ignored when `pairs` is given.
    #[serde(default)]
    pub pattern: SendRecvPattern,
    /// Explicit `[src, dst]` pairs: `out[dst] = in[src]`; rows nobody sends are zeros.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs: Option<Vec<[u32; 2]>>,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// Built-in send/recv patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SendRecvPattern {
    /// Each rank sends its row to the next rank.
    #[default]
    Ring,
}

/// barrier step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Barrier {
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

impl Step {
    /// The op's name as written in specs.
    pub fn op(&self) -> &'static str {
        match self {
            Step::Matmul(_) => "matmul",
            Step::Fft(_) => "fft",
            Step::Redistribute(_) => "redistribute",
            Step::AllReduce(_) => "all_reduce",
            Step::Reduce(_) => "reduce",
            Step::Broadcast(_) => "broadcast",
            Step::AllGather(_) => "all_gather",
            Step::ReduceScatter(_) => "reduce_scatter",
            Step::AllToAll(_) => "all_to_all",
            Step::Gather(_) => "gather",
            Step::Scatter(_) => "scatter",
            Step::SendRecv(_) => "send_recv",
            Step::Barrier(_) => "barrier",
        }
    }

    /// The keys every step takes.
    pub fn common(&self) -> &StepCommon {
        match self {
            Step::Matmul(s) => &s.common,
            Step::Fft(s) => &s.common,
            Step::Redistribute(s) => &s.common,
            Step::AllReduce(s) => &s.common,
            Step::Reduce(s) => &s.common,
            Step::Broadcast(s) => &s.common,
            Step::AllGather(s) => &s.common,
            Step::ReduceScatter(s) => &s.common,
            Step::AllToAll(s) => &s.common,
            Step::Gather(s) => &s.common,
            Step::Scatter(s) => &s.common,
            Step::SendRecv(s) => &s.common,
            Step::Barrier(s) => &s.common,
        }
    }

    /// The tensors the step reads, with the key that names each.
    pub fn inputs(&self) -> Vec<(&'static str, &str)> {
        match self {
            Step::Matmul(m) => {
                let mut v = vec![("a", m.a.as_str()), ("b", m.b.as_str())];
                if let Some(c) = &m.c {
                    v.push(("c", c));
                }
                if let Some(b) = &m.bias {
                    v.push(("bias", b));
                }
                v
            }
            Step::Fft(s) => vec![("input", &s.input)],
            Step::Redistribute(s) => vec![("input", &s.input)],
            Step::AllReduce(s) => vec![("input", &s.input)],
            Step::Reduce(s) => vec![("input", &s.input)],
            Step::Broadcast(s) => vec![("input", &s.input)],
            Step::AllGather(s) => vec![("input", &s.input)],
            Step::ReduceScatter(s) => vec![("input", &s.input)],
            Step::AllToAll(s) => vec![("input", &s.input)],
            Step::Gather(s) => vec![("input", &s.input)],
            Step::Scatter(s) => vec![("input", &s.input)],
            Step::SendRecv(s) => vec![("input", &s.input)],
            Step::Barrier(_) => vec![],
        }
    }

    /// The tensor the step writes and the key that names it (`input` for an in-place step).
    pub fn output(&self) -> Option<(&'static str, &str)> {
        match self {
            Step::Matmul(s) => Some(("out", &s.out)),
            Step::Fft(s) => Some(out_or_input(&s.out, &s.input)),
            Step::Redistribute(s) => Some(("out", &s.out)),
            Step::AllReduce(s) => Some(out_or_input(&s.out, &s.input)),
            Step::Reduce(s) => Some(out_or_input(&s.out, &s.input)),
            Step::Broadcast(s) => Some(out_or_input(&s.out, &s.input)),
            Step::AllGather(s) => Some(("out", &s.out)),
            Step::ReduceScatter(s) => Some(("out", &s.out)),
            Step::AllToAll(s) => Some(("out", &s.out)),
            Step::Gather(s) => Some(("out", &s.out)),
            Step::Scatter(s) => Some(("out", &s.out)),
            Step::SendRecv(s) => Some(("out", &s.out)),
            Step::Barrier(_) => None,
        }
    }
}

fn out_or_input<'a>(out: &'a Option<String>, input: &'a str) -> (&'static str, &'a str) {
    match out {
        Some(o) => ("out", o),
        None => ("input", input),
    }
}
