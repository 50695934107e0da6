//! An FFT's own check: the inverse transform brings the input back (inverse round trip), and the
//! energy obeys Parseval's identity, each within a tolerance from the precision and size.

use super::{PreparedFft, scale};
use crate::backend::Backend;
use crate::dist::TensorState;
use crate::init;
use crate::ops::Comparison;
use crate::ops::checks::{Gap, Lanes};
use crate::ops::exchange::Custom;
use crate::ops::movement::{Movement, Staged};
use crate::ops::sum::{self, Sum};
use super::{Fft, FftDirection, FftKind, FftNorm};
use crate::spec::tensor::Layout;
use anyhow::Result;

/// Weights along the last axis of this rank's piece, each from its global index there (a
/// rank that holds nothing: weight 1, over no elements).
fn last_axis_lanes(
    state: &TensorState,
    ranks: u64,
    rank: u64,
    weight: impl Fn(u64) -> f64,
) -> Lanes {
    let placement = crate::dist::Placement::new(&state.dist, &state.shape, ranks);
    let Some(iv) = placement.intervals(rank) else {
        return Lanes::uniform();
    };
    let last = state.shape.len() - 1;
    let columns: Vec<u64> = iv[last].iter().flat_map(|&(lo, hi)| lo..hi).collect();
    if columns.is_empty() {
        return Lanes::uniform();
    }
    let local: Vec<u64> = iv
        .iter()
        .map(|axis| axis.iter().map(|(lo, hi)| hi - lo).sum())
        .collect();
    let stride = match state.layout {
        Layout::C => 1,
        Layout::F => local[..last].iter().product(),
    };
    Lanes {
        stride: stride.max(1),
        weights: columns.into_iter().map(weight).collect(),
    }
}

/// Whether bin `k` of a half spectrum of a real length-`n` axis stands for two bins (k and n-k).
fn mirrored(k: u64, n: u64) -> bool {
    k != 0 && !(n.is_multiple_of(2) && k == n / 2)
}

/// The bins along the last axis of a c2r's input (`m` of them, for a real length `real_last`)
/// whose planes its round trip gives back as their Hermitian part: 0, and m - 1 for an even
/// real length.
fn plane_bins(m: u64, real_last: u64) -> Vec<u64> {
    let mut bins = vec![0];
    if real_last.is_multiple_of(2) && m > 1 {
        bins.push(m - 1);
    }
    bins
}

/// The planes of `bins` along the last axis of two tensors in `state` (`bufs`, this rank's
/// pieces: the input and its round trip), whole on every rank, C order over
/// `[shape[..last], bins]`; one movement gathers both.
fn planes<B: Backend>(
    b: &B,
    state: &TensorState,
    bufs: [&B::Buf; 2],
    bins: &[u64],
) -> Result<[Vec<(f64, f64)>; 2]> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let nd = state.shape.len();
    let whole: Vec<Vec<(u64, u64)>> = state.shape[..nd - 1]
        .iter()
        .map(|&n| vec![(0, n)])
        .chain(std::iter::once(bins.iter().map(|&k| (k, k + 1)).collect()))
        .collect();
    let target = Custom {
        shape: state.shape.clone(),
        layout: Layout::C,
        pieces: vec![Some(whole); ranks as usize],
    };
    let count: u64 = state.shape[..nd - 1].iter().product::<u64>() * bins.len() as u64;
    let movement = Movement::to(state, &target, ranks, rank);
    let size = state.dtype.size() as usize;
    let mut staged = Staged::new(b, movement, count as usize * size)?;
    let mut values = |buf: &B::Buf| -> Result<Vec<(f64, f64)>> {
        Ok(b.download(staged.run(b, buf)?)?
            .chunks_exact(size)
            .map(|c| init::decode(state.dtype, c).to_complex())
            .collect())
    };
    Ok([values(bufs[0])?, values(bufs[1])?])
}

/// The round trip's gap on a c2r input's planes of `bins`: the round trip `y` gives back
/// `round` times the Hermitian part `(X[k] + conj(X[-k])) / 2` of the input `x` there, every
/// axis but the last negated (numpy's irfftn reads those planes so). Both whole, C order over
/// `[shape, bins]` (`shape`: the axes before the last).
fn planes_gap(shape: &[u64], bins: usize, x: &[(f64, f64)], y: &[(f64, f64)], round: f64) -> Gap {
    let mut gap = Gap::default();
    for (at, (&v, &got)) in x.iter().zip(y).enumerate() {
        let (plane, p) = (at / bins, at % bins);
        // The conjugate partner: every other axis's index negated.
        let (mut rest, mut partner, mut stride) = (plane as u64, 0u64, 1u64);
        for a in (0..shape.len()).rev() {
            let g = rest % shape[a];
            rest /= shape[a];
            partner += (shape[a] - g) % shape[a] * stride;
            stride *= shape[a];
        }
        let w = x[partner as usize * bins + p];
        let want = (round * (v.0 + w.0) / 2.0, round * (v.1 - w.1) / 2.0);
        let d = (got.0 - want.0).hypot(got.1 - want.1);
        gap.diff = gap.diff.max(if d.is_nan() { f64::INFINITY } else { d });
        gap.size = gap.size.max(want.0.hypot(want.1));
    }
    gap
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
        batches: step.batches,
        common: step.common.clone(),
    }
}

/// Checks an FFT step's result `out` against its `input`, where the data is: the round trip and
/// the energies reduce on the device (only a c2r's planes of the first and last bins come back,
/// whole, to compare with their Hermitian part).
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
    // The round trip gives back the input, except where a c2r's input is no real signal's
    // spectrum: then it gives back the spectrum of the signal the c2r made, which differs on the
    // planes of the first and (for an even length) last bin along the last axis; those are
    // compared apart, whole.
    let gap = match step.kind {
        FftKind::C2r => {
            let last = in_state.shape.len() - 1;
            let bins = plane_bins(in_state.shape[last], real_shape[last]);
            let lanes = last_axis_lanes(in_state, ranks, rank, |k| {
                if bins.contains(&k) { 0.0 } else { 1.0 }
            });
            let rest = b.gap(in_state.dtype, input.1, &back, round, &lanes)?;
            let [x, y] = planes(b, in_state, [input.1, &back], &bins)?;
            let p = planes_gap(&in_state.shape[..last], bins.len(), &x, &y, round);
            Gap {
                diff: rest.diff.max(p.diff),
                size: rest.size.max(p.size),
            }
        }
        _ => b.gap(in_state.dtype, input.1, &back, round, &Lanes::uniform())?,
    };
    let diff = b.max_over_ranks(gap.diff)?;
    let size = b.max_over_ranks(gap.size)?.max(f64::MIN_POSITIVE);
    let round_trip = diff / size;
    // Parseval: Σ|out|² = s² n Σ|in|², a half spectrum's mirrored bins counted twice (not for
    // c2r, whose input need not be a real signal's spectrum).
    let out_lanes = match step.kind {
        FftKind::R2c => {
            let m = real_shape[real_shape.len() - 1];
            last_axis_lanes(out_state, ranks, rank, |k| {
                if mirrored(k, m) { 2.0 } else { 1.0 }
            })
        }
        _ => Lanes::uniform(),
    };
    // A replicated piece counts once: 0 where another rank's copy counts (and nothing read).
    let counted = |s: &TensorState| crate::dist::counted_on(&s.dist, rank);
    let e_in = match counted(in_state) {
        true => b.energy(in_state.dtype, input.1, &Lanes::uniform())?,
        false => Sum::default(),
    };
    let e_out = match counted(out_state) {
        true => b.energy(out_state.dtype, out.1, &out_lanes)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_planes_are_compared_with_their_hermitian_part() {
        // Planes of shape [2, 3] and one bin: X[i, j]'s partner is X[-i, -j].
        let x: Vec<(f64, f64)> = (0..6).map(|i| (i as f64, 10.0 + i as f64)).collect();
        let partner = |i: usize| {
            let (r, c) = (i / 3, i % 3);
            ((2 - r) % 2) * 3 + (3 - c) % 3
        };
        let want: Vec<(f64, f64)> = (0..6)
            .map(|i| {
                let (v, w) = (x[i], x[partner(i)]);
                (3.0 * (v.0 + w.0) / 2.0, 3.0 * (v.1 - w.1) / 2.0)
            })
            .collect();
        let exact = planes_gap(&[2, 3], 1, &x, &want, 3.0);
        assert_eq!(exact.diff, 0.0);
        assert!(exact.size > 0.0);
        let mut off = want.clone();
        off[4].1 += 0.5;
        assert_eq!(planes_gap(&[2, 3], 1, &x, &off, 3.0).diff, 0.5);
    }
}
