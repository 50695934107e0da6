//! The checks of data-movement steps (redistribute and the collectives), against the step's
//! actual input whatever made it (an init, a matmul, another collective): a move is exact, so
//! an order-independent fingerprint of the result's elements at their global indices must equal
//! the input's; a reduction is recomputed element by element from every rank's actual input,
//! on a slab of the result per rank, and compared within a tolerance from the dtype, the rank
//! count and the values' magnitudes. Both cost O(n) per rank and a few small collectives, and
//! run where the data is ([`Backend::fingerprint`], [`Backend::reduction_error`]).

use super::Comparison;
use super::exchange::{Custom, Side};
use super::movement::{Movement, Staged, local_bytes, regather, staged_bytes};
use crate::backend::Backend;
use crate::dist::whole::whole_state;
use crate::dist::{Placement, TensorState};
use crate::init::{self, IndexMap};
use crate::spec::step::ReduceOp;
use crate::spec::tensor::{Distribution, Layout};
use anyhow::Result;

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
        expected = match rows {
            None => b.fingerprint(dtype, Some(input.1), &map, 0)?,
            Some(rows) => {
                // Row r (this rank's, shape [P, ...] in slabs of one row) lands in every row that
                // takes it.
                let row_len: u64 = in_state.shape[1..].iter().product();
                let mut sum = 0u64;
                for (dst, _) in rows
                    .iter()
                    .enumerate()
                    .filter(|(_, src)| **src == Some(rank))
                {
                    let shift = (dst as u64 * row_len).wrapping_sub(rank * row_len);
                    sum = sum.wrapping_add(b.fingerprint(dtype, Some(input.1), &map, shift)?);
                }
                sum
            }
        };
    }
    if let Some(rows) = rows
        && rows[rank as usize].is_none()
        && let Some(map) = IndexMap::new(out_state, ranks, rank)
    {
        // A row nobody sends is zeros: its receiver adds what they should fingerprint to.
        expected = expected.wrapping_add(b.fingerprint(dtype, None, &map, 0)?);
    }
    let expected = gather_u64(b, expected)?
        .into_iter()
        .fold(0, u64::wrapping_add);
    let got = match IndexMap::new(out_state, ranks, rank) {
        Some(map) => b.fingerprint(dtype, Some(out.1), &map, 0)?,
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
    let mut result = Staged::new(b, Movement::new(out_state, &checked, ranks, rank), n * size)?;
    let (ok, worst) = b.reduction_error(
        op,
        dtype,
        ranks,
        terms.run(b, input.1)?,
        result.run(b, out.1)?,
    )?;
    Ok(Comparison {
        passed: all_ranks(b, ok)?,
        max_error: b.max_over_ranks(worst)?,
    })
}
