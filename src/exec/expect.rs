//! What a tensor should hold, computed on each rank from the init definitions alone (no
//! communication): the checks of data-movement steps compare against it.

use crate::dist::TensorState;
use crate::init::{self, Scalar};
use crate::ops::Comparison;
use crate::spec::step::ReduceOp;
use crate::spec::tensor::{DType, Init};
use anyhow::Result;
use rayon::prelude::*;
use std::path::Path;

/// Where a tensor's values come from.
#[derive(Debug, Clone)]
pub enum Origin {
    /// Its own init (moving data does not change global values).
    Init(String),
    /// A reduction over the ranks of a partial tensor's init.
    Reduced(String, ReduceOp),
    /// Computed by a step no init predicts (a matmul): later data-movement checks do not apply.
    Computed,
    /// send_recv: row q comes from row `rows[q]` of `from` (None: zeros).
    Rows {
        /// The input's origin.
        from: Box<Origin>,
        /// The input's state.
        state: TensorState,
        /// Source row of every destination row.
        rows: Vec<Option<u64>>,
    },
}

/// What the expected values are computed from.
pub struct Source<'a> {
    /// The spec's tensors (for their inits and declared shapes).
    pub spec: &'a crate::spec::Spec,
    /// The directory npy paths are relative to.
    pub dir: &'a Path,
    /// Rank count.
    pub ranks: u64,
}

impl Source<'_> {
    fn fill(&self, name: &str, state: &TensorState, rank: u64) -> Result<Vec<u8>> {
        let t = &self.spec.tensors[name];
        let init = t
            .init
            .as_ref()
            .expect("an origin names an initialized tensor");
        init::fill_local(
            init,
            self.spec.job.seed,
            name,
            self.dir,
            state,
            self.ranks,
            rank,
        )
    }

    /// `rank`'s expected piece of a tensor from `origin`, in `state`'s distribution and layout
    /// (None for computed values).
    pub fn piece(
        &self,
        origin: &Origin,
        state: &TensorState,
        rank: u64,
    ) -> Result<Option<Vec<u8>>> {
        Ok(Some(match origin {
            Origin::Computed => return Ok(None),
            Origin::Init(name) => self.fill(name, state, rank)?,
            Origin::Reduced(name, op) => self.reduced(name, *op, state, rank)?,
            Origin::Rows {
                from,
                state: from_state,
                rows,
            } => {
                let bytes = crate::ops::step::local_bytes(state, self.ranks, rank);
                match rows[rank as usize] {
                    Some(src) => {
                        let at_source = TensorState {
                            layout: state.layout,
                            ..from_state.clone()
                        };
                        return self.piece(from, &at_source, src);
                    }
                    None => vec![0; bytes],
                }
            }
        }))
    }

    /// The reduction of every rank's row of a partial tensor, on `rank`'s piece of `state`,
    /// element by element: generated rows straight from their generator (no row is held), rows
    /// of an `npy` file read at the piece's elements only.
    fn reduced(&self, name: &str, op: ReduceOp, state: &TensorState, rank: u64) -> Result<Vec<u8>> {
        let (dtype, ranks, seed) = (state.dtype, self.ranks, self.spec.job.seed);
        let size = dtype.size() as usize;
        let init = self.spec.tensors[name]
            .init
            .as_ref()
            .expect("a reduced tensor has an init");
        let Some(map) = init::IndexMap::new(state, ranks, rank) else {
            return Ok(Vec::new());
        };
        let mut out = vec![0u8; map.len() as usize * size];
        if let Some(generator) = init::Generator::new(init, seed, name, dtype) {
            // Row r's element i is the stacked [P, *S] tensor's r * n + i, rounded to the dtype.
            let n: u64 = state.shape.iter().product();
            out.par_chunks_mut(init::CHUNK * size)
                .enumerate()
                .for_each(|(k, chunk)| {
                    let (mut idx, mut one) =
                        (map.unravel((k * init::CHUNK) as u64), vec![0u8; size]);
                    for el in chunk.chunks_exact_mut(size) {
                        let at = map.global_linear(&idx);
                        let values = (0..ranks).map(|r| {
                            init::encode(dtype, generator.value(r * n + at), &mut one);
                            init::decode(dtype, &one)
                        });
                        init::encode(dtype, fold(op, dtype, values, ranks), el);
                        map.advance(&mut idx);
                    }
                });
            return Ok(out);
        }
        let Init::Npy(path) = init else {
            unreachable!("only npy has no generator")
        };
        let path = self.dir.join(path);
        let rows: Vec<Vec<u8>> = (0..ranks)
            .map(|r| init::npy_row_piece(&path, state, &map, r, ranks))
            .collect::<Result<_>>()?;
        out.par_chunks_exact_mut(size)
            .enumerate()
            .for_each(|(e, el)| {
                let values = rows
                    .iter()
                    .map(|row| init::decode(dtype, &row[e * size..(e + 1) * size]));
                init::encode(dtype, fold(op, dtype, values, ranks), el);
            });
        Ok(out)
    }
}

/// Combines the ranks' values as the reduction does (in f64 for floats, wrapping for integers).
fn fold(op: ReduceOp, dtype: DType, values: impl Iterator<Item = Scalar>, ranks: u64) -> Scalar {
    let values: Vec<Scalar> = values.collect();
    let reals = || values.iter().map(|v| v.to_complex());
    match values[0] {
        Scalar::Int(_) | Scalar::UInt(_) => {
            let ints = values.iter().map(|v| as_i128(*v));
            let r: i128 = match op {
                ReduceOp::Sum => ints.fold(0, i128::wrapping_add),
                // The sum wraps in the dtype's width before the division, as in MPI and NCCL.
                ReduceOp::Avg => wrap(dtype, ints.fold(0, i128::wrapping_add)) / ranks as i128,
                ReduceOp::Prod => ints.fold(1, i128::wrapping_mul),
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
        Scalar::Int(i) => i as i128,
        Scalar::UInt(u) => u as i128,
        Scalar::Real(x) | Scalar::Complex(x, _) => x as i128,
    }
}

/// Compares `got` with `want`, element by element. Data movement and integer or min/max
/// reductions must match exactly; float sums, products and averages within `(P + 1)` ulps of
/// their magnitude, as their order of operations is MPI's.
pub fn compare(
    dtype: DType,
    got: &[u8],
    want: &[u8],
    reduction: Option<ReduceOp>,
    ranks: u64,
) -> Comparison {
    let size = dtype.size() as usize;
    if got.len() != want.len() {
        return Comparison {
            passed: false,
            max_error: f64::INFINITY,
        };
    }
    let inexact = dtype.is_float()
        && matches!(
            reduction,
            Some(ReduceOp::Sum | ReduceOp::Avg | ReduceOp::Prod)
        );
    let tol = 2.0 * (ranks as f64 + 1.0) * dtype.epsilon();
    let mut worst = 0.0f64;
    let mut passed = true;
    for (g, w) in got.chunks_exact(size).zip(want.chunks_exact(size)) {
        if g == w {
            continue;
        }
        let (a, b) = (
            init::decode(dtype, g).to_complex(),
            init::decode(dtype, w).to_complex(),
        );
        let diff = (a.0 - b.0).hypot(a.1 - b.1);
        let err = if inexact {
            diff / b.0.hypot(b.1).max(1.0)
        } else {
            diff
        };
        // NaN differences (never equal) count as failures.
        worst = if err.is_nan() {
            f64::INFINITY
        } else {
            worst.max(err)
        };
        passed &= inexact && err <= tol;
    }
    Comparison {
        passed,
        max_error: worst,
    }
}

#[cfg(test)]
mod tests {
    use super::{Scalar, fold};
    use crate::spec::step::ReduceOp;
    use crate::spec::tensor::DType;

    #[test]
    fn integer_averages_divide_the_sum_wrapped_in_the_dtype() {
        let avg = |dtype, ranks| {
            fold(
                ReduceOp::Avg,
                dtype,
                (0..ranks).map(|_| Scalar::Int(100)),
                ranks,
            )
        };
        // i8: 200 wraps to -56, 300 to 44, 400 to -112; the quotient truncates toward zero.
        assert_eq!(avg(DType::I8, 1), Scalar::Int(100));
        assert_eq!(avg(DType::I8, 2), Scalar::Int(-28));
        assert_eq!(avg(DType::I8, 3), Scalar::Int(14));
        assert_eq!(avg(DType::I8, 4), Scalar::Int(-28));
        assert_eq!(avg(DType::I32, 4), Scalar::Int(100));
    }
}
