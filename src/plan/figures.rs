//! What a step is, in the figures a report reads without its spec: nccl-tests' size and count,
//! the element type, the reduction and root; a matmul's m, n, k; an FFT's shape and kind.

use super::StepPlan;
use crate::ops::movement::local_bytes;
use crate::spec::tensor::DType;
use serde::{Deserialize, Serialize};

/// A step's figures (see the module's doc). Every key is optional: a barrier has none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Bytes of the step: for a collective nccl-tests' size (what its algbw divides by); for
    /// the others the largest piece of its first input on one rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Elements in `bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// The element type of its first input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DType>,
    /// How a reducing step combines (sum, prod, min, max, avg).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce: Option<String>,
    /// The root rank of a rooted step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<u64>,
    /// A matmul's rows of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub m: Option<u64>,
    /// A matmul's columns of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u64>,
    /// A matmul's inner dimension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<u64>,
    /// An FFT's global shape (of its complex side for r2c and c2r: the real one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<u64>>,
    /// An FFT's kind (c2c, r2c, c2r).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl Figures {
    /// The figures every step with an input has: `bytes` (its first input's largest piece on
    /// one rank), `count` and `dtype`; a reduction and root where the step takes them.
    pub fn of_input(planned: &StepPlan, ranks: u64) -> Self {
        let mut f = Figures::default();
        if let Some(input) = planned.input_states.first() {
            let most = (0..ranks)
                .map(|r| local_bytes(input, ranks, r) as u64)
                .max();
            f.set_bytes(most.unwrap_or(0), input.dtype);
        }
        let keys = serde_json::to_value(&planned.step).unwrap_or_default();
        f.reduce = keys
            .get("reduce")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        f.root = keys.get("root").and_then(|v| v.as_u64());
        f
    }

    /// Sets `bytes` of elements of `dtype`, with their count.
    pub fn set_bytes(&mut self, bytes: u64, dtype: DType) {
        self.bytes = Some(bytes);
        self.count = Some(bytes / dtype.size());
        self.dtype = Some(dtype);
    }
}
