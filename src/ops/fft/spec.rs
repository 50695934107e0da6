//! The fft step's keys: kind, direction, normalization, the result's distribution and the
//! transposes' batches.

use crate::spec::step::StepCommon;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// How many batches the transposes between slabs run in, each moving while the next one
    /// is transformed (absent: chosen from the sizes, 4 to 12; 1: one exchange after the whole
    /// phase). At most the fewest planes (or columns) any rank splits; no effect on one rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub batches: Option<u32>,
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

