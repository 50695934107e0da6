//! Freivalds' check of a distributed matmul: for a random vector x, `out x` must equal
//! `alpha op(a) (op(b) x) + beta c x + bias sum(x)`, computed in O(n^2) from the pieces each rank
//! holds and summed over the ranks. The tolerance follows from the dtype and k. For a nonlinear
//! epilog the check runs on the pre-activation values and then compares the result with their
//! activation element by element. Every sum over a piece runs where the piece is
//! ([`Backend::dots`], [`Backend::activation_matches`]): only vectors of a row or column per
//! element come back.

use super::local::compute_dtype;
use crate::backend::{Backend, sum_over_ranks};
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::init::{self, Scalar};
use crate::ops::Comparison;
use crate::ops::checks::{Along, C, Dot, Matrix};
use crate::ops::movement::regather;
use crate::ops::sum::Sum;
use crate::ops::matmul::Matmul;
use crate::spec::step::BiasPer;
use crate::spec::tensor::{DType, Uniform};
use anyhow::Result;

fn abs(a: C) -> f64 {
    a.0.hypot(a.1)
}

/// This rank's dots of its piece of a 1-D or 2-D tensor (a 1-D one is a column) with a
/// vector, summed over axis `over` (0 the rows, 1 the columns), computed where the piece is: for
/// each global index along the other axis, `Σ v x(g)` and `Σ |v| w(g)`, with `g` the global
/// index along the summed axis and `v` conjugated where `conj` says. A replicated tensor counts
/// on rank 0 only.
fn piece_dots<B: Backend>(
    b: &B,
    (state, buf): (&TensorState, &B::Buf),
    over: usize,
    conj: bool,
    x: impl Fn(u64) -> C,
    w: impl Fn(u64) -> f64,
) -> Result<Vec<(u64, Dot)>> {
    let rank = b.rank() as u64;
    let Some(iv) = Placement::new(&state.dist, &state.shape, b.ranks() as u64).intervals(rank)
    else {
        return Ok(Vec::new());
    };
    if !crate::dist::counted_on(&state.dist, rank) {
        return Ok(Vec::new());
    }
    let mut globals: Vec<Vec<u64>> = iv
        .iter()
        .map(|axis| axis.iter().flat_map(|&(lo, hi)| lo..hi).collect())
        .collect();
    if globals.len() == 1 {
        globals.push(vec![0]);
    }
    let m = Matrix {
        rows: globals[0].len(),
        cols: globals[1].len(),
        layout: state.layout,
    };
    let along = if over == 0 { Along::Rows } else { Along::Cols };
    let (summed, kept) = (&globals[over], &globals[1 - over]);
    // Σ conj(v) x = conj(Σ v conj(x)).
    let xs: Vec<C> = summed
        .iter()
        .map(|&g| {
            let v = x(g);
            if conj { (v.0, -v.1) } else { v }
        })
        .collect();
    let ws: Vec<f64> = summed.iter().map(|&g| w(g)).collect();
    let dots = b.dots(state.dtype, buf, &m, along, &xs, &ws)?;
    Ok(kept
        .iter()
        .copied()
        .zip(dots.into_iter().map(|d| match conj {
            true => Dot {
                im: d.im.scaled(-1.0),
                ..d
            },
            false => d,
        }))
        .collect())
}

/// A complex accumulator whose parts are compensated sums.
#[derive(Debug, Clone, Copy, Default)]
struct Acc(Sum, Sum);

impl Acc {
    /// Adds `k` times a dot's `Σ v x`.
    fn add_dot(&mut self, d: &Dot, k: f64) {
        self.0 = self.0.merge(d.re.scaled(k));
        self.1 = self.1.merge(d.im.scaled(k));
    }

    /// Adds `k` times a dot's `Σ |v| w` (a real sum).
    fn add_size(&mut self, d: &Dot, k: f64) {
        self.0 = self.0.merge(d.abs.scaled(k));
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
        result.passed &= activation_matches(b, step, out, pre)?;
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

/// y = op(b) x over every rank (k entries), then |op(b)| |x| beside it (k more; sums
/// compensated: the check's own rounding stays far below the product's).
fn op_b_x<B: Backend>(
    b: &B,
    step: &Matmul,
    operand: (&TensorState, &B::Buf),
    x: &[f64],
    k: usize,
) -> Result<Vec<C>> {
    let mut y = vec![Acc::default(); 2 * k];
    // op(b)[kk, j]: b's columns summed, or its rows where transposed.
    let over = if step.transpose_b { 0 } else { 1 };
    let dots = piece_dots(
        b,
        operand,
        over,
        step.conjugate_b,
        |j| (x[j as usize], 0.0),
        |j| x[j as usize].abs(),
    )?;
    for (kk, d) in dots {
        y[kk as usize].add_dot(&d, 1.0);
        y[k + kk as usize].add_size(&d, 1.0);
    }
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
    fn add_alpha_op_a_y(&mut self, operand: Operand<'_, B>, y: &[C], k: usize) -> Result<()> {
        let (m, step) = (self.z.len() / 4, self.step);
        // op(a)[ii, kk]: a's columns summed, or its rows where transposed.
        let over = if step.transpose_a { 0 } else { 1 };
        let dots = piece_dots(
            self.b,
            operand,
            over,
            step.conjugate_a,
            |kk| y[kk as usize],
            |kk| y[k + kk as usize].0,
        )?;
        for (ii, d) in dots {
            self.z[ii as usize].add_dot(&d, step.alpha);
            self.z[m + ii as usize].add_size(&d, step.alpha.abs());
        }
        Ok(())
    }

    /// Adds this rank's part of `k` times `v x` for the matrix `v` (its sizes `|k| |v| |x|`
    /// to `size_at + i`, its values to `value_at + i`).
    fn add_times_x(
        &mut self,
        operand: Operand<'_, B>,
        k: f64,
        (value_at, size_at): (usize, usize),
    ) -> Result<()> {
        let x = self.x;
        let dots = piece_dots(self.b, operand, 1, false, |j| (x[j as usize], 0.0), |j| {
            x[j as usize].abs()
        })?;
        for (i, d) in dots {
            self.z[value_at + i as usize].add_dot(&d, k);
            self.z[size_at + i as usize].add_size(&d, k.abs());
        }
        Ok(())
    }

    /// Adds this rank's part of beta c x.
    fn add_beta_c_x(&mut self, operand: Operand<'_, B>) -> Result<()> {
        let m = self.z.len() / 4;
        self.add_times_x(operand, self.step.beta, (0, m))
    }

    /// Adds this rank's part of the bias's share of out x.
    fn add_bias(&mut self, operand: Operand<'_, B>) -> Result<()> {
        let (m, x) = (self.z.len() / 4, self.x);
        match self.step.bias_per {
            // Row i adds bias[i] to each of its n entries: bias[i] sum(x).
            BiasPer::Row => {
                let (sx, sabs) = (
                    x.iter().copied().sum::<Sum>().value(),
                    x.iter().map(|v| v.abs()).sum::<Sum>().value(),
                );
                for (i, d) in piece_dots(self.b, operand, 1, false, |_| (sx, 0.0), |_| sabs)? {
                    self.z[i as usize].add_dot(&d, 1.0);
                    self.z[m + i as usize].add_size(&d, 1.0);
                }
            }
            // Every row adds bias[j] to entry j: bias . x, the same for every row (each rank
            // adds the part it holds; the sum over the ranks completes it).
            BiasPer::Column => {
                let dots = piece_dots(self.b, operand, 0, false, |j| (x[j as usize], 0.0), |j| {
                    x[j as usize].abs()
                })?;
                for (_, d) in dots {
                    for i in 0..m {
                        self.z[i].add_dot(&d, 1.0);
                        self.z[m + i].add_size(&d, 1.0);
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds this rank's part of `target` x (the result, or its pre-activation).
    fn add_out_x(&mut self, operand: Operand<'_, B>) -> Result<()> {
        let m = self.z.len() / 4;
        self.add_times_x(operand, 1.0, (2 * m, 3 * m))
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
/// every rank (compared where the data is).
fn activation_matches<B: Backend>(
    b: &B,
    step: &Matmul,
    out: (&TensorState, &B::Buf),
    (pre_state, pre_buf): (TensorState, B::Buf),
) -> Result<bool> {
    let here = TensorState {
        dtype: out.0.dtype,
        ..pre_state.clone()
    };
    let moved = regather(b, out.0, out.1, &here)?;
    let ok = b.activation_matches(
        step.epilog,
        (out.0.dtype, &moved),
        (pre_state.dtype, &pre_buf),
    )?;
    Ok(b.max_over_ranks(if ok { 0.0 } else { 1.0 })? == 0.0)
}
