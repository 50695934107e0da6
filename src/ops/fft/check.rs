//! An FFT's own check: the inverse transform brings the input back (inverse round trip), and the
//! energy obeys Parseval's identity, each within a tolerance from the precision and size.

use super::{PreparedFft, scale};
use crate::backend::Backend;
use crate::dist::TensorState;
use crate::init;
use crate::ops::Comparison;
use crate::ops::sum::{self, Sum};
use crate::spec::step::{Fft, FftDirection, FftKind, FftNorm};
use anyhow::Result;

fn values<B: Backend>(b: &B, state: &TensorState, buf: &B::Buf) -> Result<Vec<(f64, f64)>> {
    let size = state.dtype.size() as usize;
    Ok(b.download(buf)?
        .chunks_exact(size)
        .map(|c| init::decode(state.dtype, c).to_complex())
        .collect())
}

/// The global index along the last axis of every element of this rank's piece.
fn last_axis_index(state: &TensorState, ranks: u64, rank: u64) -> Vec<u64> {
    let placement = crate::dist::Placement::new(&state.dist, &state.shape, ranks);
    let Some(iv) = placement.intervals(rank) else {
        return Vec::new();
    };
    let last = state.shape.len() - 1;
    let columns: Vec<u64> = iv[last].iter().flat_map(|&(lo, hi)| lo..hi).collect();
    let local: Vec<usize> = iv
        .iter()
        .map(|axis| axis.iter().map(|(lo, hi)| (hi - lo) as usize).sum())
        .collect();
    let stride = match state.layout {
        crate::spec::tensor::Layout::C => 1,
        crate::spec::tensor::Layout::F => local[..last].iter().product(),
    };
    let total: usize = local.iter().product();
    (0..total)
        .map(|i| columns[(i / stride) % local[last]])
        .collect()
}

/// Whether bin `k` of a half spectrum of a real length-`n` axis stands for two bins (k and n-k).
fn mirrored(k: u64, n: u64) -> bool {
    k != 0 && !(n.is_multiple_of(2) && k == n / 2)
}

/// Σ|x|² of a piece, counting a half spectrum's mirrored bins twice (`half`: the real length of
/// the last axis whose half spectrum this is), compensated.
fn energy(state: &TensorState, v: &[(f64, f64)], ranks: u64, rank: u64, half: Option<u64>) -> Sum {
    let power = |(re, im): &(f64, f64)| re * re + im * im;
    match half {
        None => v.iter().map(power).sum(),
        Some(n) => v
            .iter()
            .zip(last_axis_index(state, ranks, rank))
            .map(|(x, k)| power(x) * if mirrored(k, n) { 2.0 } else { 1.0 })
            .sum(),
    }
}

/// The inverse of an FFT step, from its result's state back to its input's (what the check
/// runs).
pub fn inverse(step: &Fft) -> Fft {
    Fft {
        input: String::new(),
        out: None,
        kind: match step.kind {
            FftKind::C2c => FftKind::C2c,
            FftKind::R2c => FftKind::C2r,
            FftKind::C2r => FftKind::R2c,
        },
        direction: match step.direction {
            FftDirection::Forward => FftDirection::Inverse,
            FftDirection::Inverse => FftDirection::Forward,
        },
        norm: step.norm,
        reshape: true,
        common: step.common.clone(),
    }
}

/// Checks an FFT step's result `out` against its `input`.
pub fn check<B: Backend>(
    b: &B,
    step: &Fft,
    input: (&TensorState, &B::Buf),
    out: (&TensorState, &B::Buf),
) -> Result<Comparison> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let (in_state, out_state) = (input.0, out.0);
    let mut back = PreparedFft::new(b, &inverse(step), out_state, in_state)?;
    back.run(b, out.1)?;
    let back = back.into_output();
    let real_shape = if step.kind == FftKind::C2r {
        &out_state.shape
    } else {
        &in_state.shape
    };
    let n: f64 = real_shape.iter().map(|&x| x as f64).product();
    // With norm = none the round trip multiplies by n.
    let round = if step.norm == FftNorm::None { n } else { 1.0 };
    let (x, y) = (values(b, in_state, input.1)?, values(b, in_state, &back)?);
    // c2r ignores what a real signal's spectrum cannot hold (the imaginary parts of the first and,
    // for even lengths, last bins along the last axis, as numpy's irfftn does): compare the bins
    // it keeps.
    let real_last = if step.kind == FftKind::C2r {
        out_state.shape[out_state.shape.len() - 1]
    } else {
        0
    };
    let kept: Vec<bool> = match step.kind {
        FftKind::C2r => last_axis_index(in_state, ranks, rank)
            .into_iter()
            .map(|k| mirrored(k, real_last))
            .collect(),
        _ => vec![true; x.len()],
    };
    let mut diff = 0.0f64;
    let mut size = 0.0f64;
    for ((a, c), keep) in x.iter().zip(&y).zip(kept) {
        if keep {
            diff = diff.max((c.0 - round * a.0).hypot(c.1 - round * a.1));
        }
        size = size.max((round * a.0).hypot(round * a.1));
    }
    let diff = b.max_over_ranks(diff)?;
    let size = b.max_over_ranks(size)?.max(f64::MIN_POSITIVE);
    let round_trip = diff / size;
    // Parseval: Σ|out|² = s² n Σ|in|², a half spectrum weighted (not for c2r, whose input need not
    // be a real signal's spectrum).
    let half_out = (step.kind == FftKind::R2c).then(|| real_shape[real_shape.len() - 1]);
    // A replicated piece counts once: 0 where another rank's copy counts (and nothing read).
    let counted = |s: &TensorState| crate::dist::counted_on(&s.dist, rank);
    let e_in = match counted(in_state) {
        true => energy(in_state, &x, ranks, rank, None),
        false => Sum::default(),
    };
    let e_out = match counted(out_state) {
        true => energy(
            out_state,
            &values(b, out_state, out.1)?,
            ranks,
            rank,
            half_out,
        ),
        false => Sum::default(),
    };
    let sums = sum::over_ranks(b, &[e_in, e_out])?;
    let s = scale(step.norm, step.direction, n);
    let expected = s * s * n * sums[0];
    let parseval = if step.kind == FftKind::C2r {
        0.0
    } else {
        (sums[1] - expected).abs() / sums[1].max(expected).max(f64::MIN_POSITIVE)
    };
    let tol = in_state.dtype.epsilon() * (16.0 + 8.0 * n.log2());
    Ok(Comparison {
        passed: round_trip <= tol && parseval <= tol,
        max_error: round_trip.max(parseval),
    })
}
