//! What the checks compute over one rank's buffers, reduced to a few scalars: fingerprints of a
//! move, a reduction recomputed from its terms, the gap between two tensors, energies and the
//! row sums of Freivalds' check. [`crate::backend::Backend`] computes each where the data is
//! (the CUDA backend in kernels, so a check never downloads a tensor); the functions here are
//! the host's forms over bytes, which the CPU backend runs and the others match.

use super::matmul::epilog::activate;
use super::sum::Sum;
use crate::init::{self, CHUNK, IndexMap, Scalar};
use crate::spec::step::{Epilog, ReduceOp};
use crate::spec::tensor::{DType, Layout};
use rayon::prelude::*;

/// A complex value as (re, im).
pub type C = (f64, f64);

/// Per-element weights that repeat along one axis of a piece: element `i` has weight
/// `weights[(i / stride) % weights.len()]` (an FFT's half spectrum counts its mirrored bins
/// twice; a c2r's round trip leaves out the bins it compares elsewhere, weight 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Lanes {
    /// Elements from one position along the axis to the next.
    pub stride: u64,
    /// The weight of each position along the axis.
    pub weights: Vec<f64>,
}

impl Lanes {
    /// Weight 1 everywhere.
    pub fn uniform() -> Self {
        Lanes {
            stride: 1,
            weights: vec![1.0],
        }
    }

    /// The weight of element `i`.
    pub fn weight(&self, i: u64) -> f64 {
        self.weights[((i / self.stride) % self.weights.len() as u64) as usize]
    }
}

/// A rank's piece of a 1-D or 2-D tensor as a matrix (a 1-D piece: one column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matrix {
    /// Local rows.
    pub rows: usize,
    /// Local columns.
    pub cols: usize,
    /// Its storage order.
    pub layout: Layout,
}

impl Matrix {
    /// The offset of local element (r, c).
    fn at(&self, r: usize, c: usize) -> usize {
        match self.layout {
            Layout::C => r * self.cols + c,
            Layout::F => c * self.rows + r,
        }
    }
}

/// Which axis [`dots`] sums over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Along {
    /// Over the rows: one dot per column.
    Rows,
    /// Over the columns: one dot per row.
    Cols,
}

/// Threads a GPU's [`dots`] down strided lines aim at (outputs times stretches of the summed
/// axis), each writing one partial dot of six f64s.
pub const STRIDED_DOT_THREADS: usize = 1 << 19;

/// How a GPU's [`dots`] of `outs` outputs down strided lines of `len` entries splits each line:
/// (entries a stretch, stretches), about [`STRIDED_DOT_THREADS`] threads in all, each summing a
/// stretch of at least 32 entries (fewer only where the line is shorter) and at most 65,535
/// stretches a line. A stretch of one entry would hold a partial dot (48 bytes) per element.
pub fn strided_dot_parts(outs: usize, len: usize) -> (usize, usize) {
    const SHORTEST: usize = 32;
    let aim = (STRIDED_DOT_THREADS / outs.max(1)).max(1);
    let step = (len.div_ceil(aim))
        .max(SHORTEST.min(len))
        .max(len.div_ceil(65535))
        .max(1);
    (step, len.div_ceil(step))
}

/// Bytes a backend may hold on the device while it computes [`dots`] of `outs` outputs over
/// `len` summed entries: the vectors (a complex x and a real w per entry), the dots (six f64s
/// each) and, down strided lines, the partial dots (see [`strided_dot_parts`]).
pub fn dots_scratch(outs: usize, len: usize) -> u64 {
    if outs == 0 || len == 0 {
        return 0;
    }
    let dot = 6 * 8;
    let (_, parts) = strided_dot_parts(outs, len);
    (24 * len + dot * outs * (1 + parts)) as u64
}

/// Blocks a GPU's element-wise check reductions ([`energy`], [`gap`]) launch at most, each
/// leaving a compensated partial sum (two f64s).
pub const REDUCTION_BLOCKS: u64 = 1024;

/// Bytes a backend may hold on the device while it computes an [`energy`] or a [`gap`] over
/// lanes of `weights` positions: the weights and every block's partial sum.
pub fn lanes_scratch(weights: usize) -> u64 {
    8 * weights as u64 + 16 * REDUCTION_BLOCKS
}

/// One dot of [`dots`]: `Σ v x` (complex, compensated) and `Σ |v| w`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Dot {
    /// Real part of `Σ v x`.
    pub re: Sum,
    /// Imaginary part of `Σ v x`.
    pub im: Sum,
    /// `Σ |v| w`.
    pub abs: Sum,
}

impl Dot {
    /// Adds one element's terms.
    fn add(&mut self, v: C, x: C, w: f64) {
        self.re.add(v.0 * x.0 - v.1 * x.1);
        self.im.add(v.0 * x.1 + v.1 * x.0);
        self.abs.add(v.0.hypot(v.1) * w);
    }

    /// Both dots' terms.
    pub fn merge(self, other: Dot) -> Dot {
        Dot {
            re: self.re.merge(other.re),
            im: self.im.merge(other.im),
            abs: self.abs.merge(other.abs),
        }
    }

    /// `Σ v x`.
    pub fn value(&self) -> C {
        (self.re.value(), self.im.value())
    }
}

/// How far one tensor is from a multiple of another ([`gap`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gap {
    /// The largest `|y - s x|` (infinite where either is NaN).
    pub diff: f64,
    /// The largest `|s x|`.
    pub size: f64,
}

/// The value of element `i` of `bytes` as a complex number.
fn value(dtype: DType, bytes: &[u8], i: usize) -> C {
    let size = dtype.size() as usize;
    init::decode(dtype, &bytes[i * size..(i + 1) * size]).to_complex()
}

/// One element's share of a fingerprint: its global index and its bytes (up to 16), mixed.
fn element_hash(global: u64, bytes: &[u8]) -> u64 {
    let word = |part: &[u8]| {
        let mut w = [0u8; 8];
        w[..part.len()].copy_from_slice(part);
        u64::from_le_bytes(w)
    };
    let (lo, hi) = bytes.split_at(bytes.len().min(8));
    let mix = init::splitmix64;
    mix(global.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ mix(word(lo).wrapping_add(0x2545_F491_4F6C_DD1D))
        ^ mix(word(hi).wrapping_add(0x6A09_E667_F3BC_C909)))
}

/// The wrapping sum of the element hashes of a rank's piece (`bytes`, laid out as `map` says;
/// None: zeros), each at its global index plus `shift` (wrapping).
pub fn fingerprint(map: &IndexMap, dtype: DType, bytes: Option<&[u8]>, shift: u64) -> u64 {
    let size = dtype.size() as usize;
    let n = map.len() as usize;
    let zero = [0u8; 16];
    (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|k| {
            let mut idx = map.unravel((k * CHUNK) as u64);
            let mut sum = 0u64;
            for i in k * CHUNK..n.min((k + 1) * CHUNK) {
                let el = match bytes {
                    Some(b) => &b[i * size..(i + 1) * size],
                    None => &zero[..size],
                };
                let g = map.global_linear(&idx).wrapping_add(shift);
                sum = sum.wrapping_add(element_hash(g, el));
                map.advance(&mut idx);
            }
            sum
        })
        .reduce(|| 0, u64::wrapping_add)
}

/// Compares `got` (n elements) with the reduction by `op` of `terms` (`ranks` rows of n
/// elements, in rank order): whether all are within tolerance, and the largest error (absolute
/// for exact ops, relative to the terms' magnitude for inexact ones). The reduction is
/// recomputed in rank order, in f64 for floats and wrapping in the dtype for integers. Integers,
/// min and max must match exactly; float sums, averages and products within `2 (P + 1) eps |x|`
/// of the magnitude `|x|` of the terms that enter (the sum of their absolute values; for a
/// product, the product's own), plus the dtype's smallest subnormal where a product underflows.
pub fn reduction(op: ReduceOp, dtype: DType, ranks: u64, terms: &[u8], got: &[u8]) -> (bool, f64) {
    let size = dtype.size() as usize;
    let n = got.len() / size;
    let inexact = dtype.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Avg | ReduceOp::Prod);
    let eps = dtype.epsilon();
    let tiny = 4.0 * subnormal(dtype);
    let p = ranks as usize;
    got.par_chunks_exact(size)
        .enumerate()
        .map(|(e, g)| {
            let values: Vec<Scalar> = (0..p)
                .map(|r| init::decode(dtype, &terms[(r * n + e) * size..(r * n + e + 1) * size]))
                .collect();
            let want = fold(op, dtype, &values, ranks);
            let mut wanted = vec![0u8; size];
            init::encode(dtype, want, &mut wanted);
            if wanted == g {
                return (true, 0.0);
            }
            let (a, w) = (init::decode(dtype, g).to_complex(), want.to_complex());
            let diff = (a.0 - w.0).hypot(a.1 - w.1);
            if diff.is_nan() {
                // NaN where none was expected, or the reverse: both NaN is a match.
                let both = a.0.is_nan() || a.1.is_nan();
                let expected = w.0.is_nan() || w.1.is_nan();
                return (
                    both && expected,
                    if both && expected { 0.0 } else { f64::INFINITY },
                );
            }
            if !inexact {
                // Equal values in other bits (0.0 and -0.0 from min or max) match.
                return (diff == 0.0, diff);
            }
            let abs = |s: &Scalar| {
                let (re, im) = s.to_complex();
                re.hypot(im)
            };
            let magnitude = match op {
                ReduceOp::Prod => values.iter().map(abs).product::<f64>(),
                ReduceOp::Avg => values.iter().map(abs).sum::<f64>() / ranks as f64,
                _ => values.iter().map(abs).sum::<f64>(),
            };
            let tol = 2.0 * (ranks as f64 + 1.0) * eps * magnitude + tiny;
            (diff <= tol, diff / magnitude.max(tiny))
        })
        .reduce(|| (true, 0.0), |x, y| (x.0 && y.0, x.1.max(y.1)))
}

/// The smallest positive value of a float dtype (its subnormal spacing): a value rounded below
/// the smallest normal is off by up to half of it, however small (a product that underflows,
/// GELU's negative tail in f16).
pub fn subnormal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::Bf16 => 2f64.powi(-133),
        DType::F32 | DType::C64 => 2f64.powi(-149),
        _ => f64::from_bits(1),
    }
}

/// Combines the ranks' values as the reduction does, in rank order (in f64 for floats, wrapping
/// for integers; an integer average divides the sum wrapped in the dtype, as MPI and NCCL do).
fn fold(op: ReduceOp, dtype: DType, values: &[Scalar], ranks: u64) -> Scalar {
    let reals = || values.iter().map(|v| v.to_complex());
    match values[0] {
        Scalar::Int(_) | Scalar::UInt(_) => {
            let ints = values.iter().map(|v| as_i128(*v));
            let r: i128 = match op {
                ReduceOp::Sum => ints.fold(0, i128::wrapping_add),
                ReduceOp::Avg => wrap(dtype, ints.fold(0, i128::wrapping_add)) / ranks as i128,
                ReduceOp::Prod => ints.fold(1, |a, b| wrap(dtype, a.wrapping_mul(b))),
                ReduceOp::Min => ints.min().unwrap_or(0),
                ReduceOp::Max => ints.max().unwrap_or(0),
            };
            if matches!(dtype, DType::U8 | DType::U32 | DType::U64) {
                Scalar::UInt(r as u64)
            } else {
                Scalar::Int(r as i64)
            }
        }
        _ => {
            let (re, im) = match op {
                ReduceOp::Sum | ReduceOp::Avg => {
                    let (re, im) = reals().fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
                    if op == ReduceOp::Avg {
                        (re / ranks as f64, im / ranks as f64)
                    } else {
                        (re, im)
                    }
                }
                ReduceOp::Prod => reals().fold((1.0, 0.0), |a, b| {
                    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
                }),
                ReduceOp::Min => (reals().map(|c| c.0).fold(f64::INFINITY, f64::min), 0.0),
                ReduceOp::Max => (reals().map(|c| c.0).fold(f64::NEG_INFINITY, f64::max), 0.0),
            };
            if dtype.is_complex() {
                Scalar::Complex(re, im)
            } else {
                Scalar::Real(re)
            }
        }
    }
}

/// `v` wrapped into the range of the integer `dtype`.
fn wrap(dtype: DType, v: i128) -> i128 {
    match dtype {
        DType::I8 => i128::from(v as i8),
        DType::U8 => i128::from(v as u8),
        DType::I32 => i128::from(v as i32),
        DType::U32 => i128::from(v as u32),
        DType::I64 => i128::from(v as i64),
        _ => i128::from(v as u64),
    }
}

fn as_i128(v: Scalar) -> i128 {
    match v {
        Scalar::Int(i) => i128::from(i),
        Scalar::UInt(u) => i128::from(u),
        Scalar::Real(x) | Scalar::Complex(x, _) => x as i128,
    }
}

/// Elements per task of the parallel loops below.
const TASK: usize = 1 << 16;

/// The largest `|y - s x|` and `|s x|` over the elements of weight above 0 (x and y of the same
/// dtype and length).
pub fn gap(dtype: DType, x: &[u8], y: &[u8], s: f64, lanes: &Lanes) -> Gap {
    let n = x.len() / dtype.size() as usize;
    (0..n.div_ceil(TASK))
        .into_par_iter()
        .map(|t| {
            let mut g = Gap::default();
            for i in t * TASK..n.min((t + 1) * TASK) {
                if lanes.weight(i as u64) <= 0.0 {
                    continue;
                }
                let (a, b) = (value(dtype, x, i), value(dtype, y, i));
                let (a0, a1) = (s * a.0, s * a.1);
                let d = (b.0 - a0).hypot(b.1 - a1);
                g.diff = g.diff.max(if d.is_nan() { f64::INFINITY } else { d });
                g.size = g.size.max(a0.hypot(a1));
            }
            g
        })
        .reduce(Gap::default, |a, b| Gap {
            diff: a.diff.max(b.diff),
            size: a.size.max(b.size),
        })
}

/// `Σ w |x|²` over the elements, compensated.
pub fn energy(dtype: DType, x: &[u8], lanes: &Lanes) -> Sum {
    let n = x.len() / dtype.size() as usize;
    let parts: Vec<Sum> = (0..n.div_ceil(TASK))
        .into_par_iter()
        .map(|t| {
            (t * TASK..n.min((t + 1) * TASK))
                .map(|i| {
                    let (re, im) = value(dtype, x, i);
                    lanes.weight(i as u64) * (re * re + im * im)
                })
                .sum::<Sum>()
        })
        .collect();
    parts.into_iter().fold(Sum::default(), Sum::merge)
}

/// The dots of a piece `v` (a [`Matrix`]) with a vector, along one axis: for each column
/// (`Along::Rows`) or row (`Along::Cols`), `Σ v x` and `Σ |v| w`, with x and w indexed by the
/// position along the summed axis.
pub fn dots(dtype: DType, v: &[u8], m: &Matrix, along: Along, x: &[C], w: &[f64]) -> Vec<Dot> {
    let (outs, len) = match along {
        Along::Rows => (m.cols, m.rows),
        Along::Cols => (m.rows, m.cols),
    };
    let at = |o: usize, j: usize| match along {
        Along::Rows => m.at(j, o),
        Along::Cols => m.at(o, j),
    };
    let contiguous = matches!(
        (along, m.layout),
        (Along::Cols, Layout::C) | (Along::Rows, Layout::F)
    );
    if contiguous || outs == 0 {
        return (0..outs)
            .into_par_iter()
            .map(|o| {
                let mut d = Dot::default();
                (0..len).for_each(|j| d.add(value(dtype, v, at(o, j)), x[j], w[j]));
                d
            })
            .collect();
    }
    // The outputs lie next to each other: each task takes a stretch of the summed axis for
    // every output, and the stretches merge in order.
    let step = (TASK / outs).max(1);
    let parts: Vec<Vec<Dot>> = (0..len.div_ceil(step))
        .into_par_iter()
        .map(|t| {
            let mut d = vec![Dot::default(); outs];
            for j in t * step..len.min((t + 1) * step) {
                for (o, d) in d.iter_mut().enumerate() {
                    d.add(value(dtype, v, at(o, j)), x[j], w[j]);
                }
            }
            d
        })
        .collect();
    parts.into_iter().fold(vec![Dot::default(); outs], |a, b| {
        a.into_iter().zip(b).map(|(a, b)| a.merge(b)).collect()
    })
}

/// Whether every element of `out` is `epilog`'s activation of the same element of `pre` within
/// the rounding of both.
pub fn activation(
    epilog: Option<Epilog>,
    (od, out): (DType, &[u8]),
    (pd, pre): (DType, &[u8]),
) -> bool {
    let (os, ps) = (od.size() as usize, pd.size() as usize);
    let (eps_o, eps_p) = (od.epsilon().max(pd.epsilon()), pd.epsilon());
    out.par_chunks_exact(os)
        .zip(pre.par_chunks_exact(ps))
        .all(|(g, p)| {
            let g = init::decode(od, g).to_complex().0;
            let p = init::decode(pd, p).to_complex().0;
            let a = activate(epilog, p);
            // The kept pre-activation is itself rounded: where the activation is steep next to
            // its value (GELU's tails), that rounding moves the activation by more than an ulp.
            let moved = [1.0 + eps_p, 1.0 - eps_p]
                .map(|f| (activate(epilog, p * f) - a).abs())
                .into_iter()
                .fold(0.0, f64::max);
            (g - a).abs()
                <= 2.0 * eps_o * a.abs().max(1e-30) + 2.0 * moved + subnormal(od).max(1e-30)
        })
}

#[cfg(test)]
mod tests;
