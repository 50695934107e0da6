//! An FFT's own check: the inverse transform brings the input back (inverse round trip), and the
//! energy obeys Parseval's identity, each within a tolerance from the precision and size.

use super::{PreparedFft, scale};
use crate::backend::Backend;
use crate::dist::TensorState;
use crate::init::{self, IndexMap};
use crate::ops::Comparison;
use crate::ops::exchange::Custom;
use crate::ops::movement::{Movement, Staged};
use crate::ops::sum::{self, Sum};
use super::{Fft, FftDirection, FftKind, FftNorm};
use crate::spec::tensor::Layout;
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

/// A c2r input's planes of the first and (for an even real length) last bin along the last
/// axis, whole on every rank, and where this rank's elements lie in the global tensor.
struct Planes {
    /// Global shape of the half spectrum.
    shape: Vec<u64>,
    /// The planes' bins along the last axis (0, and m - 1 for an even real length).
    bins: Vec<u64>,
    /// The planes, C order over `[shape[..last], bins]`.
    values: Vec<(f64, f64)>,
    /// The global multi-index of every local element.
    globals: Vec<Vec<u64>>,
}

/// Gathers the planes of a c2r's input (`real_last`: the real length of its result's last axis).
fn hermitian_planes<B: Backend>(
    b: &B,
    (state, buf): (&TensorState, &B::Buf),
    real_last: u64,
) -> Result<Planes> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let nd = state.shape.len();
    let m = state.shape[nd - 1];
    let mut bins = vec![0];
    if real_last.is_multiple_of(2) && m > 1 {
        bins.push(m - 1);
    }
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
    let values = b
        .download(staged.run(b, buf)?)?
        .chunks_exact(size)
        .map(|c| init::decode(state.dtype, c).to_complex())
        .collect();
    let globals = match IndexMap::new(state, ranks, rank) {
        None => Vec::new(),
        Some(map) => {
            let mut idx = vec![0; nd];
            (0..map.len())
                .map(|_| {
                    let g: Vec<u64> = idx
                        .iter()
                        .enumerate()
                        .map(|(a, &j)| map.coords[a].at(j))
                        .collect();
                    map.advance(&mut idx);
                    g
                })
                .collect()
        }
    };
    Ok(Planes {
        shape: state.shape.clone(),
        bins,
        values,
        globals,
    })
}

impl Planes {
    /// This rank's elements `x` with the planes' bins replaced by their Hermitian part.
    fn project(&self, x: &[(f64, f64)]) -> Vec<(f64, f64)> {
        let nd = self.shape.len();
        x.iter()
            .zip(&self.globals)
            .map(|(&v, g)| {
                let Some(p) = self.bins.iter().position(|&k| k == g[nd - 1]) else {
                    return v;
                };
                // The conjugate partner: every other axis's index negated.
                let at = (0..nd - 1).fold(0, |acc, a| {
                    acc * self.shape[a] + (self.shape[a] - g[a]) % self.shape[a]
                }) as usize
                    * self.bins.len()
                    + p;
                let w = self.values[at];
                ((v.0 + w.0) / 2.0, (v.1 - w.1) / 2.0)
            })
            .collect()
    }
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
    // The round trip gives back the input, except where a c2r's input is no real signal's
    // spectrum: then it gives back the spectrum of the signal the c2r made, which on the planes
    // of the first and (for an even length) last bin along the last axis is the Hermitian part
    // of the input, (X[k] + conj(X[-k])) / 2 (numpy's irfftn reads those planes so).
    let want: std::borrow::Cow<'_, [(f64, f64)]> = match step.kind {
        FftKind::C2r => {
            let last = out_state.shape[out_state.shape.len() - 1];
            hermitian_planes(b, input, last)?.project(&x).into()
        }
        _ => (&x[..]).into(),
    };
    let mut diff = 0.0f64;
    let mut size = 0.0f64;
    for (a, c) in want.iter().zip(&y) {
        diff = diff.max((c.0 - round * a.0).hypot(c.1 - round * a.1));
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
