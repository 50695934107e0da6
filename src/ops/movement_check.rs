//! The checks of data-movement steps (redistribute and the collectives), against the step's
//! actual input whatever made it (an init, a matmul, another collective): a move is exact, so
//! an order-independent fingerprint of the result's elements at their global indices must equal
//! the input's; a reduction is recomputed element by element from every rank's actual input,
//! on a slab of the result per rank, and compared within a tolerance from the dtype, the rank
//! count and the values' magnitudes. Both cost O(n) per rank and a few small collectives.

use super::Comparison;
use super::exchange::{Custom, Side};
use super::movement::{Movement, Staged, local_bytes, regather, staged_bytes};
use crate::backend::Backend;
use crate::dist::whole::whole_state;
use crate::dist::{Placement, TensorState};
use crate::init::{self, CHUNK, IndexMap, Scalar};
use crate::spec::step::ReduceOp;
use crate::spec::tensor::{DType, Distribution, Layout};
use anyhow::Result;
use rayon::prelude::*;

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

/// The wrapping sum of the element hashes of a rank's piece (`bytes`, laid out as `map` says),
/// each at the global index `relabel` gives its own (None: left out).
fn fingerprint(
    map: &IndexMap,
    dtype: DType,
    bytes: &[u8],
    relabel: &(dyn Fn(u64) -> Option<u64> + Sync),
) -> u64 {
    let size = dtype.size() as usize;
    bytes
        .par_chunks(CHUNK * size)
        .enumerate()
        .map(|(k, chunk)| {
            let mut idx = map.unravel((k * CHUNK) as u64);
            let mut sum = 0u64;
            for el in chunk.chunks_exact(size) {
                if let Some(g) = relabel(map.global_linear(&idx)) {
                    sum = sum.wrapping_add(element_hash(g, el));
                }
                map.advance(&mut idx);
            }
            sum
        })
        .reduce(|| 0, u64::wrapping_add)
}

/// Every rank's u64, by rank.
fn gather_u64<B: Backend>(b: &B, x: u64) -> Result<Vec<u64>> {
    Ok(b.all_gather_bytes(&x.to_le_bytes())?
        .iter()
        .map(|v| u64::from_le_bytes(v[..8].try_into().expect("8 bytes")))
        .collect())
}

/// Whether every rank's flag holds (the check's verdict, the same on every rank).
fn all_ranks<B: Backend>(b: &B, ok: bool) -> Result<bool> {
    Ok(b.max_over_ranks(if ok { 0.0 } else { 1.0 })? == 0.0)
}

/// Checks a move (redistribute, all_gather, gather, scatter, broadcast, all_to_all, send_recv):
/// the result must hold exactly the input's elements at their global indices (send_recv: row
/// `dst` the input's row `rows[dst]`, zeros where that is None). A replicated result is
/// checked on every rank's copy.
pub fn moved<B: Backend>(
    b: &B,
    rows: Option<&[Option<u64>]>,
    input: (&TensorState, &B::Buf),
    out: (&TensorState, &B::Buf),
) -> Result<Comparison> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let (in_state, out_state) = (input.0, out.0);
    let dtype = in_state.dtype;
    // What the result should hold: the input's fingerprint, its rows relabelled for send_recv.
    let mut expected = 0u64;
    if let Some(map) = IndexMap::new(in_state, ranks, rank)
        && crate::dist::counted_on(&in_state.dist, rank)
    {
        let bytes = b.download(input.1)?;
        let whole = |g: u64| Some(g);
        expected = match rows {
            None => fingerprint(&map, dtype, &bytes, &whole),
            Some(rows) => {
                // Row r (this rank's, shape [P, ...] in slabs of one row) lands in every row that
                // takes it.
                let row_len: u64 = in_state.shape[1..].iter().product();
                rows.iter()
                    .enumerate()
                    .filter(|(_, src)| **src == Some(rank))
                    .map(|(dst, _)| {
                        let shift = |g: u64| Some(g - rank * row_len + dst as u64 * row_len);
                        fingerprint(&map, dtype, &bytes, &shift)
                    })
                    .fold(0, u64::wrapping_add)
            }
        };
    }
    if let Some(rows) = rows
        && rows[rank as usize].is_none()
        && let Some(map) = IndexMap::new(out_state, ranks, rank)
    {
        // A row nobody sends is zeros: its receiver adds what they should fingerprint to.
        let zeros = vec![0u8; map.len() as usize * dtype.size() as usize];
        expected = expected.wrapping_add(fingerprint(&map, dtype, &zeros, &Some));
    }
    let expected = gather_u64(b, expected)?
        .into_iter()
        .fold(0, u64::wrapping_add);
    let got = match IndexMap::new(out_state, ranks, rank) {
        Some(map) => fingerprint(&map, dtype, &b.download(out.1)?, &Some),
        None => 0,
    };
    let total = gather_u64(b, got)?.into_iter().fold(0, u64::wrapping_add);
    let ok = match out_state.dist {
        // Every copy must be the whole input.
        Distribution::Replicated => got == expected,
        _ => total == expected,
    };
    if all_ranks(b, ok)? {
        return Ok(Comparison {
            passed: true,
            max_error: 0.0,
        });
    }
    // Failed: how far off, for the report (a send_recv's rows are not where its input's are).
    let max_error = match rows {
        Some(_) => f64::INFINITY,
        None => b.max_over_ranks(largest_difference(b, input, out)?)?,
    };
    Ok(Comparison {
        passed: false,
        max_error,
    })
}

/// The largest absolute difference between the input and the result moved back to the input's
/// state, on this rank's piece (infinite where a NaN stands against a number).
fn largest_difference<B: Backend>(
    b: &B,
    input: (&TensorState, &B::Buf),
    out: (&TensorState, &B::Buf),
) -> Result<f64> {
    let dtype = input.0.dtype;
    let size = dtype.size() as usize;
    let back = regather(b, out.0, out.1, input.0)?;
    let back = b.download(&back)?;
    let given = b.download(input.1)?;
    Ok(back
        .chunks_exact(size)
        .zip(given.chunks_exact(size))
        .filter(|(x, y)| x != y)
        .map(|(x, y)| {
            let (x, y) = (
                init::decode(dtype, x).to_complex(),
                init::decode(dtype, y).to_complex(),
            );
            let d = (x.0 - y.0).hypot(x.1 - y.1);
            if d.is_nan() { f64::INFINITY } else { d }
        })
        .fold(0.0, f64::max))
}

/// A reduction's check, laid out: the partial input as the stacked `[P, *S]` in slabs of one row
/// (rank p's piece is row p, in its layout), the pieces of it each rank recomputes (every row of
/// its slab of S), and the result's slab of S it compares them with.
struct Terms {
    stacked: TensorState,
    target: Custom,
    checked: TensorState,
}

fn terms(in_state: &TensorState, ranks: u64) -> Terms {
    let (dtype, shape) = (in_state.dtype, &in_state.shape);
    let slab = Distribution::slab(0);
    let checked = TensorState {
        shape: shape.clone(),
        dtype,
        layout: Layout::C,
        dist: slab.clone(),
    };
    let stacked = whole_state(in_state, ranks);
    let placement = Placement::new(&slab, shape, ranks);
    let target = Custom {
        shape: stacked.shape.clone(),
        layout: Layout::C,
        pieces: (0..ranks)
            .map(|r| {
                placement.intervals(r).map(|mut iv| {
                    iv.insert(0, vec![(0, ranks)]);
                    iv
                })
            })
            .collect(),
    };
    Terms {
        stacked,
        target,
        checked,
    }
}

/// The bytes a check holds on a rank beyond its input and result (by rank): for a
/// reduction every rank's terms of its slab and the result's slab, each moved there (with the
/// exchanges' scratch); for a move, the result moved back to the input's distribution, which only
/// a failed check takes to report its largest difference.
pub fn workspace<'a>(
    reduces: bool,
    input: &'a TensorState,
    out: &'a TensorState,
    ranks: u64,
) -> impl Fn(u64) -> u64 + 'a {
    let t = reduces.then(|| terms(input, ranks));
    move |rank| match &t {
        None => staged_bytes(out, &Side::of(input), ranks, rank),
        Some(t) => {
            staged_bytes(&t.stacked, &t.target, ranks, rank)
                + staged_bytes(out, &Side::of(&t.checked), ranks, rank)
        }
    }
}

/// Checks a reduction (all_reduce, reduce, reduce_scatter) of a partial input with `op`: every
/// rank's actual input is moved so that rank r holds every rank's values on its slab (along
/// axis 0) of the result, and the result's values there, and recomputes them in rank order (in
/// f64 for floats, wrapping in the dtype for integers). Integers, min and max must match
/// exactly; float sums, averages and products within `2 ((P + 1) eps |x|)` of the magnitude
/// `|x|` of the terms that enter (the sum of their absolute values; for a product, the product's
/// own), plus the dtype's smallest subnormal where a product underflows.
pub fn reduced<B: Backend>(
    b: &B,
    op: ReduceOp,
    input: (&TensorState, &B::Buf),
    out: (&TensorState, &B::Buf),
) -> Result<Comparison> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let (in_state, out_state) = (input.0, out.0);
    let dtype = in_state.dtype;
    let size = dtype.size() as usize;
    let Terms {
        stacked,
        target,
        checked,
    } = terms(in_state, ranks);
    let n = local_bytes(&checked, ranks, rank) / size;
    let movement = Movement::to(&stacked, &target, ranks, rank);
    let mut terms = Staged::new(b, movement, n * ranks as usize * size)?;
    let terms = b.download(terms.run(b, input.1)?)?;
    let mut result = Staged::new(b, Movement::new(out_state, &checked, ranks, rank), n * size)?;
    let got = b.download(result.run(b, out.1)?)?;
    let (ok, worst) = compare_reduction(op, dtype, ranks, &terms, &got);
    Ok(Comparison {
        passed: all_ranks(b, ok)?,
        max_error: b.max_over_ranks(worst)?,
    })
}

/// Compares `got` (n elements) with the reduction of `terms` (P rows of n elements, in rank
/// order): whether all are within tolerance, and the largest error (absolute for exact ops,
/// relative to the terms' magnitude for inexact ones).
fn compare_reduction(
    op: ReduceOp,
    dtype: DType,
    ranks: u64,
    terms: &[u8],
    got: &[u8],
) -> (bool, f64) {
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

/// The smallest positive value of a float dtype (its subnormal spacing): a product that
/// underflows is off by up to half of it, however small the terms.
fn subnormal(dtype: DType) -> f64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_averages_divide_the_sum_wrapped_in_the_dtype() {
        let avg = |dtype, ranks| {
            fold(
                ReduceOp::Avg,
                dtype,
                &vec![Scalar::Int(100); ranks as usize],
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

    #[test]
    fn integer_sums_and_products_wrap() {
        let byte = |s: Scalar, dtype| {
            let mut b = [0u8];
            init::encode(dtype, s, &mut b);
            b[0]
        };
        let u8s = [Scalar::UInt(200), Scalar::UInt(200)];
        assert_eq!(
            byte(fold(ReduceOp::Sum, DType::U8, &u8s, 2), DType::U8),
            144
        );
        assert_eq!(
            byte(fold(ReduceOp::Prod, DType::U8, &u8s, 2), DType::U8),
            64
        );
        let i8s = [Scalar::Int(-128), Scalar::Int(-1), Scalar::Int(3)];
        assert_eq!(
            byte(fold(ReduceOp::Prod, DType::I8, &i8s, 3), DType::I8) as i8,
            -128
        );
        assert_eq!(fold(ReduceOp::Min, DType::I8, &i8s, 3), Scalar::Int(-128));
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_sum_is_held_to_the_terms_magnitude_not_the_result_s() {
        // 1e8 + 1 - 1e8 in f32 in another order: 0 or 1, both within a few ulps of 1e8.
        let terms = f32s(&[1e8, 1.0, -1e8]);
        let (ok, _) = compare_reduction(ReduceOp::Sum, DType::F32, 3, &terms, &f32s(&[0.0]));
        assert!(ok);
        // Off by more than the ranks' rounding can make: refused.
        let (ok, err) = compare_reduction(ReduceOp::Sum, DType::F32, 3, &terms, &f32s(&[1000.0]));
        assert!(!ok && err > 0.0);
    }

    #[test]
    fn min_and_max_are_exact() {
        let terms = f32s(&[1.0, 2.0]);
        assert!(compare_reduction(ReduceOp::Min, DType::F32, 2, &terms, &f32s(&[1.0])).0);
        let next = f32::from_bits(1.0f32.to_bits() + 1);
        assert!(!compare_reduction(ReduceOp::Min, DType::F32, 2, &terms, &f32s(&[next])).0);
    }

    #[test]
    fn a_fingerprint_sees_a_moved_or_changed_element() {
        let state = TensorState {
            shape: vec![2, 3],
            dtype: DType::F32,
            layout: Layout::C,
            dist: Distribution::Replicated,
        };
        let map = IndexMap::new(&state, 1, 0).unwrap();
        let v = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let fp = fingerprint(&map, DType::F32, &v, &Some);
        // Two elements swapped, one changed in its lowest bit: each differs.
        let swapped = f32s(&[2.0, 1.0, 3.0, 4.0, 5.0, 6.0]);
        let mut bit = v.clone();
        bit[0] ^= 1;
        assert_ne!(fingerprint(&map, DType::F32, &swapped, &Some), fp);
        assert_ne!(fingerprint(&map, DType::F32, &bit, &Some), fp);
        // The same elements in F order over the same global indices: equal.
        let f = TensorState {
            layout: Layout::F,
            ..state
        };
        let fmap = IndexMap::new(&f, 1, 0).unwrap();
        let fv = f32s(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(fingerprint(&fmap, DType::F32, &fv, &Some), fp);
    }
}
