//! The keys every step shares, and the vocabulary several ops and the backends share (reduction
//! operators, matmul epilogs). Each op's own keys live with the op (`crate::ops`), and
//! [`crate::ops::Step`] joins them.

use super::tensor::Axis;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Keys every step takes besides `op`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StepCommon {
    /// A name for the step in logs and the manifest (default: its op and index).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Untimed runs before the timed ones (default 5, as nccl-tests).
    #[serde(default = "five")]
    pub warmup: u32,
    /// Timed runs (default 20, as nccl-tests).
    #[serde(default = "twenty")]
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

fn five() -> u32 {
    5
}

fn twenty() -> u32 {
    20
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

impl ReduceOp {
    /// The operator as specs write it.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
        }
    }
}

/// The default `axis` of the ops that split a result along one: 0.
pub fn axis0() -> Axis {
    Axis::Index(0)
}
