//! What a step is, in the figures a report reads without its spec: nccl-tests' size and count,
//! the element type, the reduction and root; a matmul's m, n, k; an FFT's shape and kind.

use super::StepPlan;
use super::report::human_bytes;
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

    /// The figures in a few words for a console line: `4.0 KiB = 1024 x f32, sum, root 0`;
    /// `m 128 n 512 k 1024 f32`; `c2c [64, 64] c64`. None for a step without figures.
    pub fn summary(&self) -> Option<String> {
        let dtype = self.dtype.map_or(String::new(), |d| format!(" {d}"));
        let mut parts = vec![
            if let (Some(m), Some(n), Some(k)) = (self.m, self.n, self.k) {
                format!("m {m} n {n} k {k}{dtype}")
            } else if let Some(shape) = &self.shape {
                format!("{} {shape:?}{dtype}", self.kind.as_deref().unwrap_or("fft"))
            } else {
                let (bytes, count) = self.bytes.zip(self.count)?;
                format!("{} = {count} x{dtype}", human_bytes(bytes))
            },
        ];
        parts.extend(self.reduce.clone());
        parts.extend(self.root.map(|r| format!("root {r}")));
        Some(parts.join(", "))
    }

    /// Sets `bytes` of elements of `dtype`, with their count.
    pub fn set_bytes(&mut self, bytes: u64, dtype: DType) {
        self.bytes = Some(bytes);
        self.count = Some(bytes / dtype.size());
        self.dtype = Some(dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::Figures;
    use crate::spec::tensor::DType;

    #[test]
    fn summaries_name_what_applies() {
        let mut f = Figures::default();
        assert_eq!(f.summary(), None);
        f.set_bytes(4096, DType::F32);
        f.reduce = Some("sum".into());
        f.root = Some(0);
        assert_eq!(f.summary().unwrap(), "4.0 KiB = 1024 x f32, sum, root 0");
        (f.m, f.n, f.k, f.reduce, f.root) = (Some(2), Some(3), Some(4), None, None);
        assert_eq!(f.summary().unwrap(), "m 2 n 3 k 4 f32");
        let fft = Figures {
            shape: Some(vec![8, 8]),
            kind: Some("c2c".into()),
            dtype: Some(DType::C64),
            ..Figures::default()
        };
        assert_eq!(fft.summary().unwrap(), "c2c [8, 8] c64");
    }
}
