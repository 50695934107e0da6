//! Freivalds' check of a distributed matmul: for a random vector x, `out x` must equal
//! `alpha op(a) (op(b) x) + beta c x + bias sum(x)`, computed in O(n^2) from the pieces each rank
//! holds and summed over the ranks. The tolerance follows from the dtype and k. For a nonlinear
//! epilog the check runs on the pre-activation values and then compares the result with their
//! activation element by element.

use super::epilog::activate;
use super::local::compute_dtype;
use crate::backend::{Backend, sum_over_ranks};
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::init::{self, Scalar};
use crate::ops::Comparison;
use crate::ops::movement::regather;
use crate::ops::sum::Sum;
use crate::ops::matmul::Matmul;
use crate::spec::step::BiasPer;
use crate::spec::tensor::{DType, Layout, Uniform};
use anyhow::Result;

type C = (f64, f64);

fn mul(a: C, b: C) -> C {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

fn abs(a: C) -> f64 {
    a.0.hypot(a.1)
}

/// Calls `f(row, col, value)` for every element of this rank's piece that it counts (a
/// replicated tensor counts on rank 0 only).
fn each<B: Backend>(
    b: &B,
    state: &TensorState,
    buf: &B::Buf,
    mut f: impl FnMut(u64, u64, C),
) -> Result<()> {
    let rank = b.rank() as u64;
    let counts = crate::dist::counted_on(&state.dist, rank);
    let Some(iv) = Placement::new(&state.dist, &state.shape, b.ranks() as u64).intervals(rank)
    else {
        return Ok(());
    };
    if !counts {
        return Ok(());
    }
    let globals: Vec<Vec<u64>> = iv
        .iter()
        .map(|axis| axis.iter().flat_map(|&(lo, hi)| lo..hi).collect())
        .collect();
    let (rows, cols) = (globals[0].len(), globals.get(1).map_or(1, Vec::len));
    let data = b.download(buf)?;
    let size = state.dtype.size() as usize;
    for r in 0..rows {
        for c in 0..cols {
            let at = match state.layout {
                Layout::C => r * cols + c,
                Layout::F => c * rows + r,
            };
            let v = init::decode(state.dtype, &data[at * size..(at + 1) * size]).to_complex();
            let col = globals.get(1).map_or(0, |g| g[c]);
            f(globals[0][r], col, v);
        }
    }
    Ok(())
}

/// The spacing of `dtype`'s subnormals (its smallest positive value): below its smallest
/// normal a rounded value is off by up to half of it, however small the value (GELU's negative
/// tail lands there in f16).
fn subnormal_spacing(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        DType::Bf16 => 2f64.powi(-133),
        DType::F32 | DType::C64 => 2f64.powi(-149),
        _ => 1e-300,
    }
}

/// A complex accumulator whose parts are compensated sums.
#[derive(Debug, Clone, Copy, Default)]
struct Acc(Sum, Sum);

impl Acc {
    fn add(&mut self, v: C) {
        self.0.add(v.0);
        self.1.add(v.1);
    }
}

/// Sums complex accumulators over the ranks.
fn all_sum<B: Backend>(b: &B, v: &[Acc]) -> Result<Vec<C>> {
    let flat: Vec<f64> = v.iter().flat_map(|a| [a.0.value(), a.1.value()]).collect();
    Ok(sum_over_ranks(b, &flat)?
        .chunks_exact(2)
        .map(|c| (c[0], c[1]))
        .collect())
}

/// Checks a matmul's result. `inputs` are a, b, c?, bias? with their buffers; `pre` is the
/// kept pre-activation for a nonlinear epilog.
pub fn check<B: Backend>(
    b: &B,
    step: &Matmul,
    inputs: &[(&TensorState, &B::Buf)],
    out: (&TensorState, &B::Buf),
    pre: Option<(TensorState, B::Buf)>,
    seed: u64,
) -> Result<Comparison> {
    let (m, n) = (out.0.shape[0] as usize, out.0.shape[1] as usize);
    let sa = inputs[0].0;
    let k = if step.transpose_a {
        sa.shape[0]
    } else {
        sa.shape[1]
    } as usize;
    let x = probe(n, seed);
    let y = op_b_x(b, step, inputs[1], &x, k)?;
    // z = alpha op(a) y + beta c x + bias sum(x); w = out x (or the pre-activation's).
    let mut z = Sums::new(b, step, &x, m);
    z.add_alpha_op_a_y(inputs[0], &y, k)?;
    let mut extra = 2;
    if step.c.is_some() {
        z.add_beta_c_x(inputs[extra])?;
        extra += 1;
    }
    if step.bias.is_some() {
        z.add_bias(inputs[extra])?;
    }
    let target = match &pre {
        Some((s, buf)) => (s, buf),
        None => (out.0, out.1),
    };
    z.add_out_x(target)?;
    let z = all_sum(b, &z.z)?;
    let eps = Epsilons {
        compute: compute_dtype(out.0.dtype).epsilon(),
        out: target.0.dtype.epsilon(),
    };
    let mut result = compare_rows(&z, m, k, eps, b.ranks());
    if let Some(pre) = pre {
        result.passed &= activation_matches(b, step, out, pre, eps.out)?;
    }
    Ok(result)
}

/// The random vector x of `n` entries in [-1, 1), from `seed`.
fn probe(n: usize, seed: u64) -> Vec<f64> {
    let uniform = crate::spec::tensor::Init::Uniform(Uniform {
        low: -1.0,
        high: 1.0,
    });
    (0..n as u64)
        .map(
            |j| match init::init_value(&uniform, seed, "freivalds", DType::F64, j) {
                Some(Scalar::Real(v)) => v,
                _ => 0.0,
            },
        )
        .collect()
}

/// `v`, conjugated when `yes`.
fn conj(v: C, yes: bool) -> C {
    if yes { (v.0, -v.1) } else { v }
}

/// y = op(b) x over every rank (k entries), then |op(b)| |x| beside it (k more; sums
/// compensated: the check's own rounding stays far below the product's).
fn op_b_x<B: Backend>(
    b: &B,
    step: &Matmul,
    (sb, buf): (&TensorState, &B::Buf),
    x: &[f64],
    k: usize,
) -> Result<Vec<C>> {
    let mut y = vec![Acc::default(); 2 * k];
    each(b, sb, buf, |i0, i1, v| {
        let (kk, j) = if step.transpose_b { (i1, i0) } else { (i0, i1) };
        let v = conj(v, step.conjugate_b);
        y[kk as usize].add(mul(v, (x[j as usize], 0.0)));
        y[k + kk as usize].add((abs(v) * x[j as usize].abs(), 0.0));
    })?;
    all_sum(b, &y)
}

/// This rank's row sums, 4 m of them: the expected `alpha op(a) y + beta c x + bias sum(x)`
/// (rows 0..m), its size (the same sum of magnitudes, m..2m), the result's `out x` (2m..3m) and
/// its size (3m..4m); with what they are taken with (the backend, the step, the probe x).
struct Sums<'p, B: Backend> {
    b: &'p B,
    step: &'p Matmul,
    x: &'p [f64],
    z: Vec<Acc>,
}

impl<'p, B: Backend> Sums<'p, B> {
    /// Zero sums for `m` rows.
    fn new(b: &'p B, step: &'p Matmul, x: &'p [f64], m: usize) -> Self {
        Sums {
            b,
            step,
            x,
            z: vec![Acc::default(); 4 * m],
        }
    }

    /// Adds this rank's part of alpha op(a) y (`y` as [`op_b_x`] gives it, over `k`).
    fn add_alpha_op_a_y(&mut self, (sa, buf): Operand<'_, B>, y: &[C], k: usize) -> Result<()> {
        let (m, step, z) = (self.z.len() / 4, self.step, &mut self.z);
        let alpha = (step.alpha, 0.0);
        each(self.b, sa, buf, |i0, i1, v| {
            let (ii, kk) = if step.transpose_a { (i1, i0) } else { (i0, i1) };
            let v = conj(v, step.conjugate_a);
            z[ii as usize].add(mul(alpha, mul(v, y[kk as usize])));
            z[m + ii as usize].add((step.alpha.abs() * abs(v) * y[k + kk as usize].0, 0.0));
        })
    }

    /// Adds this rank's part of beta c x.
    fn add_beta_c_x(&mut self, (sc, bc): Operand<'_, B>) -> Result<()> {
        let (m, x, beta, z) = (self.z.len() / 4, self.x, self.step.beta, &mut self.z);
        each(self.b, sc, bc, |i, j, v| {
            z[i as usize].add(mul((beta, 0.0), mul(v, (x[j as usize], 0.0))));
            z[m + i as usize].add((beta.abs() * abs(v) * x[j as usize].abs(), 0.0));
        })
    }

    /// Adds this rank's part of the bias's share of out x.
    fn add_bias(&mut self, (sbias, bb): Operand<'_, B>) -> Result<()> {
        let (m, x, z) = (self.z.len() / 4, self.x, &mut self.z);
        match self.step.bias_per {
            // Row i adds bias[i] to each of its n entries: bias[i] sum(x).
            BiasPer::Row => {
                let (sx, sabs) = (
                    x.iter().copied().sum::<Sum>().value(),
                    x.iter().map(|v| v.abs()).sum::<Sum>().value(),
                );
                each(self.b, sbias, bb, |i, _, v| {
                    z[i as usize].add((v.0 * sx, v.1 * sx));
                    z[m + i as usize].add((abs(v) * sabs, 0.0));
                })?;
            }
            // Every row adds bias[j] to entry j: bias . x, the same for every row (each rank
            // adds the part it holds; the sum over the ranks completes it).
            BiasPer::Column => {
                let (mut dot, mut size) = (Acc::default(), Sum::default());
                each(self.b, sbias, bb, |j, _, v| {
                    dot.add(mul(v, (x[j as usize], 0.0)));
                    size.add(abs(v) * x[j as usize].abs());
                })?;
                let (dot, size) = ((dot.0.value(), dot.1.value()), size.value());
                for i in 0..m {
                    z[i].add(dot);
                    z[m + i].add((size, 0.0));
                }
            }
        }
        Ok(())
    }

    /// Adds this rank's part of `target` x (the result, or its pre-activation).
    fn add_out_x(&mut self, (state, buf): Operand<'_, B>) -> Result<()> {
        let (m, x, z) = (self.z.len() / 4, self.x, &mut self.z);
        each(self.b, state, buf, |i, j, v| {
            z[2 * m + i as usize].add(mul(v, (x[j as usize], 0.0)));
            z[3 * m + i as usize].add((abs(v) * x[j as usize].abs(), 0.0));
        })
    }
}

/// A tensor's state and this rank's buffer of it.
type Operand<'t, B> = (&'t TensorState, &'t <B as Backend>::Buf);

/// The machine epsilons of the product's arithmetic and of the checked values.
#[derive(Debug, Clone, Copy)]
struct Epsilons {
    compute: f64,
    out: f64,
}

/// Compares the summed rows (`z`, laid out as [`Sums`]) within the tolerance of a product over
/// `k` on `ranks` ranks: whether every row passes, and the worst error relative to its size.
fn compare_rows(z: &[C], m: usize, k: usize, eps: Epsilons, ranks: usize) -> Comparison {
    // The check's own arithmetic (f64, compensated within a rank, summed over the ranks) adds a
    // few ulps of f64 per rank to the product's rounding.
    let own = (ranks as f64 + 4.0) * f64::EPSILON;
    let mut passed = true;
    let mut worst = 0.0f64;
    for i in 0..m {
        let diff = abs((z[2 * m + i].0 - z[i].0, z[2 * m + i].1 - z[i].1));
        let scale = z[m + i].0;
        let tol = 4.0 * ((k as f64 + 2.0) * eps.compute * scale + eps.out * z[3 * m + i].0)
            + own * (scale + z[3 * m + i].0)
            + f64::MIN_POSITIVE;
        passed &= diff <= tol;
        worst = worst.max(if diff.is_nan() {
            f64::INFINITY
        } else {
            diff / scale.max(f64::MIN_POSITIVE)
        });
    }
    Comparison {
        passed,
        max_error: worst,
    }
}

/// Whether the result is the activation of the checked pre-activation, element by element, on
/// every rank (`eps_o`: the checked values' epsilon).
fn activation_matches<B: Backend>(
    b: &B,
    step: &Matmul,
    out: (&TensorState, &B::Buf),
    (pre_state, pre_buf): (TensorState, B::Buf),
    eps_o: f64,
) -> Result<bool> {
    let here = TensorState {
        dtype: out.0.dtype,
        ..pre_state.clone()
    };
    let moved = regather(b, out.0, out.1, &here)?;
    let (got, want) = (b.download(&moved)?, b.download(&pre_buf)?);
    let (os, ps) = (out.0.dtype.size() as usize, pre_state.dtype.size() as usize);
    let mut ok = true;
    let eps_p = pre_state.dtype.epsilon();
    for (g, p) in got.chunks_exact(os).zip(want.chunks_exact(ps)) {
        let g = init::decode(out.0.dtype, g).to_complex().0;
        let p = init::decode(pre_state.dtype, p).to_complex().0;
        let a = activate(step.epilog, p);
        // The kept pre-activation is itself rounded: where the activation is steep next to
        // its value (GELU's tails), that rounding moves the activation by more than an ulp.
        let moved = [1.0 + eps_p, 1.0 - eps_p]
            .map(|f| (activate(step.epilog, p * f) - a).abs())
            .into_iter()
            .fold(0.0, f64::max);
        ok &= (g - a).abs()
            <= 2.0 * eps_o.max(out.0.dtype.epsilon()) * a.abs().max(1e-30)
                + 2.0 * moved
                + subnormal_spacing(out.0.dtype).max(1e-30);
    }
    Ok(b.max_over_ranks(if ok { 0.0 } else { 1.0 })? == 0.0)
}
