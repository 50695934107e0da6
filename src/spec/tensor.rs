//! Tensor declarations: shape, dtype, layout, distribution, init.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A `[tensors.NAME]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    /// Global shape, 1 to 8 axes (most ops take 1 to 3; `all_to_all` and `send_recv` allow more).
    #[schemars(length(min = 1, max = 8), inner(range(min = 1)))]
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: DType,
    /// Storage order of each local piece: C (row-major) or F (column-major).
    #[serde(default)]
    pub layout: Layout,
    /// How the global tensor is laid out over the ranks (default: `replicated` for a tensor with an
    /// `init`; a step's output takes the natural distribution of its op).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Distribution>,
    /// Initial values; absent when the tensor is an output of a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<Init>,
    /// true: the tensor lives on the symmetric heap (NVSHMEM), at the same offset on every rank.
    #[serde(default)]
    pub symmetric: bool,
}

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// Complex of two f32.
    C64,
    /// Complex of two f64.
    C128,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 12] = [
        DType::F16,
        DType::Bf16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ];

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::Bf16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::C64 | DType::I64 | DType::U64 => 8,
            DType::C128 => 16,
        }
    }

    /// True for c64 and c128.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// True for the floating-point types, real or complex.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F16 | DType::Bf16 | DType::F32 | DType::F64 | DType::C64 | DType::C128
        )
    }

    /// Machine epsilon of a floating-point dtype (0 for integers).
    pub fn epsilon(self) -> f64 {
        match self {
            DType::F16 => 9.77e-4,
            DType::Bf16 => 7.82e-3,
            DType::F32 | DType::C64 => f32::EPSILON as f64,
            DType::F64 | DType::C128 => f64::EPSILON,
            _ => 0.0,
        }
    }

    /// The complex type of the same precision (f32 -> c64, f64 -> c128).
    pub fn to_complex(self) -> Option<DType> {
        match self {
            DType::F32 => Some(DType::C64),
            DType::F64 => Some(DType::C128),
            _ => None,
        }
    }

    /// The real type of the same precision (c64 -> f32, c128 -> f64).
    pub fn to_real(self) -> Option<DType> {
        match self {
            DType::C64 => Some(DType::F32),
            DType::C128 => Some(DType::F64),
            _ => None,
        }
    }

    /// The name used in specs.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Storage order of a local piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum Layout {
    /// Row-major (the last axis varies fastest).
    #[default]
    C,
    /// Column-major (the first axis varies fastest).
    F,
}

impl Layout {
    /// The other layout.
    pub fn other(self) -> Layout {
        match self {
            Layout::C => Layout::F,
            Layout::F => Layout::C,
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::C => "C",
            Layout::F => "F",
        })
    }
}

/// How a global tensor is laid out over the ranks (nvmath-python's rules).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Distribution {
    /// Every rank holds the whole tensor, all equal.
    Replicated,
    /// Every rank holds its own whole-shape array; a reducing step combines them.
    Partial,
    /// Only the named rank holds the whole tensor; the others hold nothing.
    Root(u32),
    /// Split along one axis (0/x, 1/y, 2/z): rank r gets `S//P + (r < S%P)` rows, in rank order.
    Slab(Axis),
    /// Block (non-cyclic) over a process grid; the block size is `ceil(S/p)` per axis.
    Block(BlockSpec),
    /// Block-cyclic over a process grid, ScaLAPACK `numroc` rules.
    BlockCyclic(BlockCyclicSpec),
    /// One `[lower, upper)` box per rank, in rank order: `[[lower...], [upper...]]`.
    Boxes(Vec<GlobalBox>),
}

/// A `[lower, upper)` box in global coordinates: `[[l0, l1, ...], [u0, u1, ...]]`.
pub type GlobalBox = [Vec<u64>; 2];

/// An axis, by index (0, 1, 2, ...) or by name (x, y, z).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Axis {
    /// Axis index, 0-based.
    Index(#[schemars(range(max = 7))] u8),
    /// Axis name: x = 0, y = 1, z = 2.
    Name(AxisName),
}

/// Named axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AxisName {
    /// Axis 0.
    X,
    /// Axis 1.
    Y,
    /// Axis 2.
    Z,
}

impl Distribution {
    /// Slabs along `axis` (given by index).
    pub fn slab(axis: usize) -> Self {
        Distribution::Slab(Axis::Index(axis as u8))
    }
}

/// Two spellings of one axis are equal (`x` is 0), so distributions compare by what they mean.
impl PartialEq for Axis {
    fn eq(&self, other: &Self) -> bool {
        self.index() == other.index()
    }
}

impl Eq for Axis {}

impl Axis {
    /// The axis as a 0-based index.
    pub fn index(self) -> usize {
        match self {
            Axis::Index(i) => i as usize,
            Axis::Name(AxisName::X) => 0,
            Axis::Name(AxisName::Y) => 1,
            Axis::Name(AxisName::Z) => 2,
        }
    }
}

/// Block (non-cyclic) distribution parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockSpec {
    /// Process grid, one entry per tensor axis; the product must equal the rank count. Absent:
    /// the most nearly square grid for the rank count, larger entries first (as MPI_Dims_create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 3), inner(range(min = 1)))]
    pub grid: Option<Vec<u32>>,
    /// How ranks are numbered over the grid (default col-major).
    #[serde(default)]
    pub grid_layout: GridLayout,
}

/// Block-cyclic distribution parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BlockCyclicSpec {
    /// Process grid, one entry per tensor axis; the product must equal the rank count. Absent:
    /// the most nearly square grid for the rank count, larger entries first (as MPI_Dims_create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 3), inner(range(min = 1)))]
    pub grid: Option<Vec<u32>>,
    /// Block size per axis.
    #[schemars(length(min = 1, max = 3), inner(range(min = 1)))]
    pub blocks: Vec<u64>,
    /// How ranks are numbered over the grid (default col-major).
    #[serde(default)]
    pub grid_layout: GridLayout,
    /// Grid coordinate of the process that holds the first block, per axis (ScaLAPACK RSRC/CSRC;
    /// default all zeros).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<Vec<u32>>,
}

/// Rank numbering over a process grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GridLayout {
    /// `prow = r % nprow`, `pcol = r // nprow` (the first grid axis varies fastest).
    #[default]
    ColMajor,
    /// `prow = r // npcol`, `pcol = r % npcol` (the last grid axis varies fastest).
    RowMajor,
}

/// Initial values of a tensor. A value depends only on `job.seed`, the tensor's name and the
/// element's global index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Every element equal to this value.
    Fill(f64),
    /// `start + step * i`, `i` the C-order linear global index.
    Arange(Arange),
    /// Counter-based uniform random values in `[low, high)`.
    Uniform(Uniform),
    /// Counter-based normal random values.
    Normal(Normal),
    /// Read from a .npy file holding the global array (path relative to the spec file).
    Npy(String),
}

/// Parameters of `arange`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Arange {
    /// First value (default 0).
    #[serde(default)]
    pub start: f64,
    /// Increment per element (default 1).
    #[serde(default = "one")]
    pub step: f64,
}

/// Parameters of `uniform`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Uniform {
    /// Lower bound, inclusive (default 0).
    #[serde(default)]
    pub low: f64,
    /// Upper bound, exclusive (default 1).
    #[serde(default = "one")]
    pub high: f64,
}

/// Parameters of `normal`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Normal {
    /// Mean (default 0).
    #[serde(default)]
    pub mean: f64,
    /// Standard deviation (default 1).
    #[serde(default = "one")]
    pub std: f64,
}

fn one() -> f64 {
    1.0
}
