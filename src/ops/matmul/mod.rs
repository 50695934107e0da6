//! Distributed matmul, written once over the backend: `out = epilog(alpha * op(a) @ op(b) +
//! beta * c)`. Every algorithm is the same pipeline with different placements:
//!
//! 1. move a and b to the pieces the algorithm multiplies (an exchange; nothing moves when they
//!    are there already): rows of op(a) times all of op(b) (`local`, `ag_gemm` gathering b,
//!    `redistribute`), all of op(a) times columns of op(b) (`ag_gemm` gathering a), k-slices of
//!    both (`gemm_rs`, `gemm_ar`), or grid-row panels of a times grid-column panels of b (`summa`);
//! 2. the local GEMM;
//! 3. for k-slices, a reduce-scatter of rows or an all-reduce of the partial products;
//! 4. `+ beta * c`, the bias and the activation, rounding to the dtype;
//! 5. moving the result from where the algorithm leaves it to the output's distribution and layout.

mod choice;
mod chunks;
pub mod epilog;
pub mod freivalds;
pub mod local;
mod meaning;
pub mod memory;
mod op;
mod spec;

pub use choice::{MatmulCase, MatmulChoice, OperandBytes, choose};
pub use spec::{Matmul, MatmulAlgorithm, MatmulPipeline, ProductLayout};

use crate::backend::work::{Addends, Bias, Run};
use super::exchange::{Custom, Holdings, Side};
use super::movement::{Movement, Staged, local_bytes};
use crate::backend::{Backend, Fused, Out};
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::spec::step::{BiasPer, Epilog, ReduceOp};
use crate::spec::tensor::{Distribution, Layout};
use anyhow::Result;
use chunks::{Gathered, Pipeline};
use crate::backend::work::View;

/// An operand moved (when needed) to the piece the algorithm multiplies.
struct Operand<B: Backend> {
    movement: Option<Staged<B>>,
    view: View,
}

impl<B: Backend> Operand<B> {
    /// Plans moving `state` to `target` (a distribution of the same tensor, or explicit pieces).
    fn new(
        b: &B,
        state: &TensorState,
        target: Target,
        transpose: bool,
        conjugate: bool,
    ) -> Result<Self> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let (movement, intervals) = match target {
            Target::Dist(dist) if dist == state.dist => (
                None,
                Placement::new(&state.dist, &state.shape, ranks).intervals(rank),
            ),
            Target::Dist(dist) => {
                let side = Side {
                    dist: &dist,
                    ..Side::of(state)
                };
                let m = Movement::to(state, &side, ranks, rank);
                (Some(m), side.intervals(rank, ranks))
            }
            Target::Pieces(custom) => {
                let m = Movement::to(state, &custom, ranks, rank);
                (Some(m), custom.intervals(rank, ranks))
            }
        };
        // A vector (the bias) is a matrix of one column.
        let extent = |axis: usize| -> usize {
            intervals.as_ref().map_or(0, |iv| {
                iv.get(axis).map_or(1, |list| {
                    list.iter().map(|(lo, hi)| (hi - lo) as usize).sum()
                })
            })
        };
        let view = View {
            rows: extent(0),
            cols: extent(1),
            layout: state.layout,
            transpose,
            conjugate,
        };
        let elem = state.dtype.size() as usize;
        let movement = match movement {
            Some(m) => Some(Staged::new(b, m, view.rows * view.cols * elem)?),
            None => None,
        };
        Ok(Operand { movement, view })
    }

    /// The operand's piece to multiply: `input` itself, or moved.
    fn piece<'a>(&'a mut self, b: &B, input: &'a B::Buf) -> Result<&'a B::Buf> {
        match &mut self.movement {
            None => Ok(input),
            Some(staged) => staged.run(b, input),
        }
    }
}

/// Where an operand must be for the local GEMM.
#[derive(Clone)]
enum Target {
    /// In this distribution (nothing moves when it is there already).
    Dist(Distribution),
    /// In these pieces.
    Pieces(Custom),
}

/// How the partial products combine.
enum Reduction {
    None,
    /// Rows of the product to each rank (element counts).
    Scatter(Vec<usize>),
    All,
}

/// A matmul step ready to run.
pub struct PreparedMatmul<B: Backend> {
    step: Matmul,
    dtype: crate::spec::tensor::DType,
    a: Operand<B>,
    b: Operand<B>,
    c: Option<Operand<B>>,
    bias: Option<Operand<B>>,
    reduction: Reduction,
    /// The GEMM in pieces overlapping the movement of their operands; None: one GEMM.
    chunks: Option<Pipeline<B>>,
    /// The GEMM writes the result itself (no reduction, addend or activation follows).
    direct: bool,
    /// The GEMM also applies the epilog (cuBLASLt's), bias and activation.
    fused: bool,
    /// This rank adds `beta * c` and the bias (all do, but for a partial result rank 0 alone).
    adds_here: bool,
    acc: B::Buf,
    reduced: B::Buf,
    /// Global row of every local row of the product where the algorithm leaves it.
    rows: Vec<u64>,
    /// Global column of every local column of the product where the algorithm leaves it.
    columns: Vec<u64>,
    /// The result where the algorithm leaves it (C layout) and its state.
    natural: B::Buf,
    natural_state: TensorState,
    /// Pre-activation values, kept for the check of a nonlinear epilog.
    pre: Option<B::Buf>,
    to_out: Option<Staged<B>>,
}

/// How a matmul is prepared, beyond its plan.
#[derive(Debug, Clone, Copy)]
pub struct Ways {
    /// Keep the pre-activation values of a nonlinear epilog (for the step's check).
    pub keep_pre: bool,
    /// Move an operand gathered whole in rounds that overlap the GEMM, where its pieces allow.
    pub rounds: bool,
    /// The layout the GEMM writes the product in where it writes the result itself (None: the
    /// result's); another than the result's is changed to it after.
    pub product_layout: Option<Layout>,
}

/// Whether an m x n product over k is worth writing in the other layout than its result's,
/// changed after: the change reads and writes the product (2mn elements), at most a tenth of
/// what the GEMM reads of its operands (k(m + n)). cuBLAS picks its kernels by the product's
/// orientation, and on skinny products with a long k either may be the faster, by 1.3x or more
/// (on an H200 f32 7 x 16384 x 26710 in F order 0.70 ms as written, 0.53 the other way), with
/// no rule found to tell which (bench/RESULTS.md, 2026-11-29).
fn layouts_worth_weighing([m, n, k]: [u64; 3]) -> bool {
    m.saturating_mul(n).saturating_mul(20) <= k.saturating_mul(m.saturating_add(n))
}

impl<B: Backend> PreparedMatmul<B> {
    /// Prepares a matmul from the planned choice and the operands' and result's states
    /// (`inputs` in the step's input order: a, b, c?, bias?); an operand gathered whole moves
    /// in rounds where `ways.rounds` is set and its pieces allow them, else in one exchange.
    pub fn new(
        b: &B,
        step: &Matmul,
        choice: &MatmulChoice,
        inputs: &[TensorState],
        out: &TensorState,
        Ways {
            keep_pre,
            rounds,
            product_layout,
        }: Ways,
    ) -> Result<Self> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let sa = &inputs[0];
        let natural = choice.natural.clone();
        let Factors {
            a,
            b: bop,
            reduction,
            chunks,
        } = operands(b, step, choice, inputs, out, rounds)?;
        let (rows, columns) = product_indices(&natural, out, ranks, rank);
        let (m_loc, n_loc) = match &chunks {
            Some(_) => (rows.len(), columns.len()),
            None => (a.view.dims().0, bop.view.dims().1),
        };
        let csize = local::compute_dtype(sa.dtype).size() as usize;
        // A partial result's addends go to rank 0 alone (its pieces add up to the result), so
        // they never fuse into the GEMM.
        let partial = natural == Distribution::Partial;
        let adds_here = !partial || rank == 0;
        // Slices of k add into the product (written straight into a half-type result, they
        // round it once per slice); the epilog comes once, after the last.
        let accumulates = chunks.as_ref().is_some_and(|p| p.accumulates());
        let fused = matches!(reduction, Reduction::None)
            && !partial
            && step.c.is_none()
            && !accumulates
            && fusable(step.epilog, step.bias_per, out.layout, (&rows, &columns), keep_pre)
                .is_some_and(|e| b.fuses(sa.dtype, e));
        let direct = writes_directly(step, &reduction, fused);
        let acc = b.zeros(if direct { 0 } else { m_loc * n_loc * csize })?;
        let natural_state = natural_state(&natural, out, direct, product_layout);
        let reduced = match &reduction {
            Reduction::None => b.zeros(0)?,
            _ => b.zeros(rows.len() * columns.len() * csize)?,
        };
        let c = addend(b, step, inputs, &natural_state)?;
        let bias = bias(b, step, inputs, &natural)?;
        let natural_buf = b.zeros(local_bytes(&natural_state, ranks, rank))?;
        let to_out = match moves_result(&natural_state, out) {
            false => None,
            true => {
                let m = Movement::new(&natural_state, out, ranks, rank);
                Some(Staged::new(b, m, local_bytes(out, ranks, rank))?)
            }
        };
        Ok(PreparedMatmul {
            step: step.clone(),
            dtype: sa.dtype,
            a,
            b: bop,
            c,
            bias,
            reduction,
            chunks,
            direct,
            fused,
            adds_here,
            acc,
            reduced,
            rows,
            columns,
            natural: natural_buf,
            natural_state,
            pre: (keep_pre && epilog::nonlinear(step.epilog))
                .then(|| b.zeros(0))
                .transpose()?,
            to_out,
        })
    }

    /// Whether trial runs should weigh writing the product in the other layout (changed after)
    /// against writing the result itself: where the GEMM writes the result whole, in place (no
    /// rounds, nothing moves it after), and the change costs little (`layouts_worth_weighing`
    /// of the product's global m, n and k, alike on every rank).
    pub fn weighs_layouts(&self, mnk: [u64; 3]) -> bool {
        self.direct
            && !self.fused
            && self.chunks.is_none()
            && self.to_out.is_none()
            && layouts_worth_weighing(mnk)
    }

    /// Whether the GEMM writes the result itself (no addend, bias or activation after it).
    pub fn writes_result(&self) -> bool {
        self.direct
    }

    /// The layout the GEMM writes the product in.
    pub fn product_layout(&self) -> Layout {
        self.natural_state.layout
    }

    /// Whether an operand moves in rounds that overlap the GEMM (not gathered whole, whether
    /// or not slice by slice).
    pub fn in_rounds(&self) -> bool {
        self.chunks.as_ref().is_some_and(|p| !p.whole)
    }

    /// Where the operand is gathered whole slice by slice within NCCL windows, the slices.
    pub fn window_slices(&self) -> Option<usize> {
        self.chunks
            .as_ref()
            .filter(|p| p.whole)
            .map(|p| p.rounds.len())
    }

    /// Runs the matmul once on the operands' buffers (a, b, c?, bias?): the GEMM (in chunks
    /// where an operand moves in rounds), the reduction of partial products, the addends and
    /// activation, the move to the result's distribution.
    pub fn run(&mut self, b: &B, inputs: &[&B::Buf]) -> Result<()> {
        self.gemm(b, inputs)?;
        if !self.direct {
            let compute = local::compute_dtype(self.dtype);
            match &self.reduction {
                Reduction::None => {}
                Reduction::Scatter(counts) => {
                    let (acc, out) = (&self.acc, &mut self.reduced);
                    b.reduce_scatter(acc, out, counts, compute, ReduceOp::Sum)?
                }
                Reduction::All => {
                    b.all_reduce(&self.acc, &mut self.reduced, compute, ReduceOp::Sum)?
                }
            }
            self.finish(b, inputs)?;
        }
        if let Some(staged) = &mut self.to_out {
            staged.run(b, &self.natural)?;
        }
        Ok(())
    }

    /// The GEMM, into the result itself (in its layout and dtype) where it writes it directly,
    /// else into the accumulator; with a fused epilog, its bias and activation too.
    fn gemm(&mut self, b: &B, inputs: &[&B::Buf]) -> Result<()> {
        let dtype = self.dtype;
        let alpha = (self.step.alpha, 0.0);
        let (va, vb) = (self.a.view, self.b.view);
        let pa = self.a.piece(b, inputs[0])?;
        let pb = self.b.piece(b, inputs[1])?;
        let dims = (self.rows.len(), self.columns.len());
        let (target, tdtype, layout, dims) = if self.direct {
            (&mut self.natural, dtype, self.natural_state.layout, dims)
        } else {
            let dims = match self.chunks {
                Some(_) => dims,
                None => (va.dims().0, vb.dims().1),
            };
            (&mut self.acc, local::compute_dtype(dtype), Layout::C, dims)
        };
        // A fused epilog's bias: the whole vector, its entry for the first local row (or column,
        // for a bias per column).
        let first = match self.step.bias_per {
            BiasPer::Row => self.rows.first(),
            BiasPer::Column => self.columns.first(),
        };
        let bias = match (&mut self.bias, self.fused) {
            (Some(op), true) => Some((op.piece(b, inputs[2])?, first.map_or(0, |&r| r as usize))),
            _ => None,
        };
        let fused = (self.step.epilog)
            .filter(|_| self.fused)
            .map(|epilog| Fused { epilog, bias });
        let target = (target, tdtype, layout, dims);
        let Some(pipeline) = &mut self.chunks else {
            let (a, b_) = ((pa, va), (pb, vb));
            return gemm_block(b, dtype, a, b_, alpha, target, ((0, 0), false), fused);
        };
        let marks = pipeline.queue(b, inputs[0], inputs[1])?;
        let rounds = &pipeline.rounds;
        for c in &pipeline.chunks {
            for r in [c.a, c.b].into_iter().flatten() {
                pipeline.wait(b, r, &marks)?;
            }
            let ca = c.a.map_or(pa, |r| rounds[r].arrival.piece(c.part));
            let cb = c.b.map_or(pb, |r| rounds[r].arrival.piece(c.part));
            let block = (&mut *target.0, target.1, target.2, target.3);
            let (a, b_) = ((ca, c.va), (cb, c.vb));
            gemm_block(b, dtype, a, b_, alpha, block, (c.at, c.accumulate), fused)?;
        }
        pipeline.finish(b, &marks)
    }

    /// The result from the (reduced) product: `+ beta * c`, the bias and the activation,
    /// rounded to the dtype; a plain copy where none applies. The addends move on every rank
    /// (collectively); a partial result's rank 0 alone adds them.
    fn finish(&mut self, b: &B, inputs: &[&B::Buf]) -> Result<()> {
        let dtype = self.dtype;
        let product = match &self.reduction {
            Reduction::None => &self.acc,
            Reduction::Scatter(_) | Reduction::All => &self.reduced,
        };
        let mut extra = 2;
        let c = match (&mut self.c, self.step.c.as_ref()) {
            (Some(op), Some(_)) => {
                let piece = op.piece(b, inputs[extra])?;
                extra += 1;
                Some((self.step.beta, piece)).filter(|_| self.adds_here)
            }
            _ => None,
        };
        let bias = match &mut self.bias {
            Some(op) => {
                let vector = op.piece(b, inputs[extra])?;
                let (per, index) = match self.step.bias_per {
                    BiasPer::Row => (BiasPer::Row, self.rows.as_slice()),
                    BiasPer::Column => (BiasPer::Column, self.columns.as_slice()),
                };
                Some(Bias { vector, index, per }).filter(|_| self.adds_here)
            }
            None => None,
        };
        let compute = local::compute_dtype(dtype);
        if c.is_none() && bias.is_none() && self.step.epilog.is_none() && compute == dtype {
            // The product is the result: copy it as it is.
            let all = Run::contiguous(0, 0, b.len(product) / dtype.size() as usize);
            return b.copy_runs(product, &mut self.natural, &all.into(), dtype.size() as usize);
        }
        let add = Addends { c, bias };
        let (cols, epilog) = (self.columns.len(), self.step.epilog);
        b.finish(dtype, product, cols, &add, epilog, &mut self.natural, self.pre.as_mut())
    }

    /// The result of the last run, and (for a nonlinear epilog's check) the pre-activation values
    /// with their state (compute dtype, where the algorithm left the product).
    pub fn into_output(self) -> (B::Buf, Option<(TensorState, B::Buf)>) {
        let compute = local::compute_dtype(self.dtype);
        let pre = self.pre.map(|p| {
            (
                TensorState {
                    dtype: compute,
                    ..self.natural_state.clone()
                },
                p,
            )
        });
        match self.to_out {
            Some(staged) => (staged.out, pre),
            None => (self.natural, pre),
        }
    }
}

/// What the GEMM multiplies, and how: see [`operands`].
struct Factors<B: Backend> {
    a: Operand<B>,
    b: Operand<B>,
    reduction: Reduction,
    chunks: Option<Pipeline<B>>,
}

/// The operands a and b moved (or planned to move) to where the GEMM multiplies them, how the
/// partial products combine, and where an operand gathered whole arrives in rounds whose GEMMs
/// overlap the movement of the next (chunks.rs), the pipeline (the operand itself then stays
/// where it is; where it cannot, it is gathered in one exchange, as planned).
fn operands<B: Backend>(
    b: &B,
    step: &Matmul,
    choice: &MatmulChoice,
    inputs: &[TensorState],
    out: &TensorState,
    rounds: bool,
) -> Result<Factors<B>> {
    let (sa, sb) = (&inputs[0], &inputs[1]);
    let (ta, tb) = (step.transpose_a, step.transpose_b);
    let (target_a, target_b, reduction) = targets(step, choice, (sa, sb), out, b.ranks() as u64);
    let (mut a, mut bop) = (None, None);
    let way = in_rounds(choice.algorithm, (sa, sb), (&target_a, &target_b));
    let chunks = match way {
        None => None,
        Some(InRounds::Summa) if rounds => {
            chunks::summa(b, sa, sb, (step.conjugate_a, step.conjugate_b))?
        }
        Some(InRounds::Summa) => None,
        Some(InRounds::Ring(g)) => {
            // The other operand moves as planned; this one arrives in a ring's rounds, or
            // whole, slice by slice within a window where the backend has one.
            let (ca, cb) = (step.conjugate_a, step.conjugate_b);
            let ((kept, to, t, c), gathered) = match g {
                Gathered::A => ((sb, &target_b, tb, cb), (sa, (ta, ca))),
                Gathered::B => ((sa, &target_a, ta, ca), (sb, (tb, cb))),
            };
            let other = Operand::new(b, kept, to.clone(), t, c)?;
            let view = other.view;
            match g {
                Gathered::A => bop = Some(other),
                Gathered::B => a = Some(other),
            }
            match rounds {
                true => chunks::ring(b, g, gathered.0, gathered.1, view)?,
                false => chunks::gathered(b, g, gathered.0, gathered.1, view)?,
            }
        }
    };
    // A gathered operand that arrives in pieces stays where it is.
    let target = |t: Target, s: &TensorState| match chunks {
        Some(_) => Target::Dist(s.dist.clone()),
        None => t,
    };
    let a = match a {
        Some(a) => a,
        None => Operand::new(b, sa, target(target_a, sa), ta, step.conjugate_a)?,
    };
    let bop = match bop {
        Some(bop) => bop,
        None => Operand::new(b, sb, target(target_b, sb), tb, step.conjugate_b)?,
    };
    Ok(Factors {
        a,
        b: bop,
        reduction,
        chunks,
    })
}

/// How a matmul may move in rounds that overlap its GEMM.
#[derive(Debug, Clone, Copy)]
enum InRounds {
    /// SUMMA's panels, piece by piece (where the operands make a square grid).
    Summa,
    /// A ring gathering this operand, the one gathered whole (where its pieces are blocks).
    Ring(Gathered),
}

/// How an algorithm moving its operands to `targets` may move them in rounds (see
/// [`InRounds`]); None where it gathers in one exchange. Whether the pieces allow the rounds is
/// `chunks`' to say.
fn in_rounds(
    algorithm: MatmulAlgorithm,
    (sa, sb): (&TensorState, &TensorState),
    (ta, tb): (&Target, &Target),
) -> Option<InRounds> {
    let gathers = |t: &Target, s: &TensorState| {
        matches!(t, Target::Dist(Distribution::Replicated)) && s.dist != Distribution::Replicated
    };
    match (algorithm, gathers(ta, sa), gathers(tb, sb)) {
        (MatmulAlgorithm::Summa, ..) => Some(InRounds::Summa),
        (_, true, false) => Some(InRounds::Ring(Gathered::A)),
        (_, false, true) => Some(InRounds::Ring(Gathered::B)),
        _ => None,
    }
}

/// The rounds a matmul prepared in rounds moves its operands in (see [`operands`]), as `chunks`
/// lists them; None where it gathers in one exchange.
fn rounds_of(
    step: &Matmul,
    algorithm: MatmulAlgorithm,
    (sa, sb): (&TensorState, &TensorState),
    targets: (&Target, &Target),
    ranks: usize,
) -> Option<Vec<chunks::Senders>> {
    match in_rounds(algorithm, (sa, sb), targets)? {
        InRounds::Summa => chunks::summa_rounds(sa, sb, ranks),
        InRounds::Ring(Gathered::A) => chunks::ring_rounds(Gathered::A, sa, step.transpose_a, ranks),
        InRounds::Ring(Gathered::B) => chunks::ring_rounds(Gathered::B, sb, step.transpose_b, ranks),
    }
}

/// The global row of every local row, and the global column of every local column, of the
/// product where the algorithm leaves it (`natural`).
fn product_indices(
    natural: &Distribution,
    out: &TensorState,
    ranks: u64,
    rank: u64,
) -> (Vec<u64>, Vec<u64>) {
    let intervals = Placement::new(natural, &out.shape, ranks).intervals(rank);
    let along = |axis: usize| {
        (intervals.as_ref())
            .map(|iv| iv[axis].iter().flat_map(|&(lo, hi)| lo..hi).collect())
            .unwrap_or_default()
    };
    (along(0), along(1))
}

/// The addend c, planned to move beside the product (`natural`: where the algorithm leaves it).
fn addend<B: Backend>(
    b: &B,
    step: &Matmul,
    inputs: &[TensorState],
    natural: &TensorState,
) -> Result<Option<Operand<B>>> {
    let (Some(_), Some(sc)) = (&step.c, inputs.get(2)) else {
        return Ok(None);
    };
    let pieces = addend_pieces(natural, b.ranks() as u64);
    Operand::new(b, sc, Target::Pieces(pieces), false, false).map(Some)
}

/// The bias, planned to move beside the product (`natural`: where the algorithm leaves it).
fn bias<B: Backend>(
    b: &B,
    step: &Matmul,
    inputs: &[TensorState],
    natural: &Distribution,
) -> Result<Option<Operand<B>>> {
    let (Some(_), Some(sbias)) = (&step.bias, inputs.last()) else {
        return Ok(None);
    };
    Operand::new(b, sbias, Target::Dist(bias_target(natural)), false, false).map(Some)
}

/// The epilog the GEMM may apply itself where the backend fuses it. A fused bias runs along the
/// columns of the row-major GEMM block (cuBLASLt's rows), and needs one stretch of the vector:
/// a bias per row needs a result in Fortran order (whose block is the transposed result) and
/// consecutive local rows; a bias per column a result in C order and consecutive local columns.
/// A nonlinear epilog whose check needs the pre-activation values stays in the epilog kernel.
fn fusable(
    epilog: Option<Epilog>,
    per: BiasPer,
    layout: Layout,
    (rows, columns): (&[u64], &[u64]),
    keep_pre: bool,
) -> Option<Epilog> {
    let e = epilog?;
    let consecutive = |v: &[u64]| v.windows(2).all(|w| w[1] == w[0] + 1);
    let bias_ok = !e.needs_bias()
        || match per {
            BiasPer::Row => layout == Layout::F && consecutive(rows),
            BiasPer::Column => layout == Layout::C && consecutive(columns),
        };
    (bias_ok && !(keep_pre && epilog::nonlinear(Some(e)))).then_some(e)
}

/// The block at `at` of the product (rows x cols `dims`, stored in `layout`) =
/// `alpha * op(a) @ op(b)` (added to the block where `accumulate`): a column-major product is
/// the row-major product of the transposed operands. A fused epilog's bias entry is the one of
/// the block's first column (the product's first row of the block in Fortran order, its first
/// column in C order).
#[allow(clippy::too_many_arguments)]
fn gemm_block<B: Backend>(
    b: &B,
    dtype: crate::spec::tensor::DType,
    (pa, va): (&B::Buf, View),
    (pb, vb): (&B::Buf, View),
    alpha: (f64, f64),
    (buf, tdtype, layout, (rows, cols)): (
        &mut B::Buf,
        crate::spec::tensor::DType,
        Layout,
        (usize, usize),
    ),
    (at, accumulate): ((usize, usize), bool),
    fused: Option<Fused<'_, B::Buf>>,
) -> Result<()> {
    // The block's columns are the product's rows in Fortran order (a fused bias per row), its
    // columns in C order (per column): the block's first column is the product's row at.0, or
    // its column at.1.
    let shift = match layout {
        Layout::C => at.1,
        Layout::F => at.0,
    };
    let fused = fused.map(|f| Fused {
        bias: f.bias.map(|(v, first)| (v, first + shift)),
        ..f
    });
    let (at, ld, first, second) = match layout {
        Layout::C => (at, cols, (pa, va), (pb, vb)),
        Layout::F => (
            (at.1, at.0),
            rows,
            (pb, vb.transposed()),
            (pa, va.transposed()),
        ),
    };
    let out = Out {
        buf,
        dtype: tdtype,
        at,
        ld,
        accumulate,
        fused,
    };
    b.gemm(dtype, first, second, alpha, out)
}

/// Where the algorithm multiplies a and b (the pieces each rank's GEMM takes) and how the
/// partial products then combine.
fn targets(
    step: &Matmul,
    choice: &MatmulChoice,
    (sa, sb): (&TensorState, &TensorState),
    out: &TensorState,
    ranks: u64,
) -> (Target, Target, Reduction) {
    let (ta, tb) = (step.transpose_a, step.transpose_b);
    // Storage axes of op(x)'s rows and columns.
    let rows_of = |t: bool| if t { 1 } else { 0 };
    let cols_of = |t: bool| if t { 0 } else { 1 };
    match (choice.algorithm, &choice.natural) {
        (MatmulAlgorithm::GemmRs | MatmulAlgorithm::GemmAr | MatmulAlgorithm::KSplit, _) => {
            let reduction = match choice.algorithm {
                MatmulAlgorithm::GemmRs => {
                    let n = out.shape[1];
                    let p = Placement::new(&choice.natural, &out.shape, ranks);
                    Reduction::Scatter(
                        (0..ranks)
                            .map(|r| p.local_shape(r).map_or(0, |s| (s[0] * n) as usize))
                            .collect(),
                    )
                }
                MatmulAlgorithm::GemmAr => Reduction::All,
                // A partial result keeps each rank's product as it is.
                _ => Reduction::None,
            };
            (
                Target::Dist(Distribution::slab(cols_of(ta))),
                Target::Dist(Distribution::slab(rows_of(tb))),
                reduction,
            )
        }
        (MatmulAlgorithm::Summa, _) => {
            let panels = |s: &TensorState, keep: usize| {
                let p = Placement::new(&s.dist, &s.shape, ranks);
                Custom {
                    shape: s.shape.clone(),
                    layout: s.layout,
                    pieces: (0..ranks)
                        .map(|r| {
                            p.intervals(r).map(|mut iv| {
                                let other = 1 - keep;
                                iv[other] = vec![(0, s.shape[other])];
                                iv
                            })
                        })
                        .collect(),
                }
            };
            (
                Target::Pieces(panels(sa, 0)),
                Target::Pieces(panels(sb, 1)),
                Reduction::None,
            )
        }
        (_, Distribution::Slab(axis)) if axis.index() == 1 => (
            Target::Dist(Distribution::Replicated),
            Target::Dist(Distribution::slab(cols_of(tb))),
            Reduction::None,
        ),
        (_, Distribution::Replicated) => (
            Target::Dist(Distribution::Replicated),
            Target::Dist(Distribution::Replicated),
            Reduction::None,
        ),
        _ => (
            Target::Dist(Distribution::slab(rows_of(ta))),
            Target::Dist(Distribution::Replicated),
            Reduction::None,
        ),
    }
}

/// Whether the GEMM writes the result itself: no reduction, addend or activation follows (or
/// the activation and bias are `fused` into it).
fn writes_directly(step: &Matmul, reduction: &Reduction, fused: bool) -> bool {
    matches!(reduction, Reduction::None)
        && step.c.is_none()
        && (fused || (step.bias.is_none() && step.epilog.is_none()))
}

/// The result where the algorithm leaves it (in `natural`): a GEMM that writes it itself writes
/// it in `product_layout`, by default the result's (an F result is the row-major product of the
/// transposed operands), otherwise row-major.
fn natural_state(
    natural: &Distribution,
    out: &TensorState,
    direct: bool,
    product_layout: Option<Layout>,
) -> TensorState {
    let layout = match direct {
        true => product_layout.unwrap_or(out.layout),
        false => Layout::C,
    };
    TensorState {
        dist: natural.clone(),
        layout,
        ..out.clone()
    }
}

/// Where the addend `c` goes: beside the result where the algorithm leaves it (row-major); for
/// a partial result, to rank 0 alone (the ranks' pieces add up to the result).
fn addend_pieces(natural: &TensorState, ranks: u64) -> Custom {
    let mut pieces = pieces_of(natural, ranks, Layout::C);
    if natural.dist == Distribution::Partial {
        pieces.pieces.iter_mut().skip(1).for_each(|p| *p = None);
    }
    pieces
}

/// Whether the result moves from where the algorithm leaves it (another distribution or layout).
fn moves_result(natural: &TensorState, out: &TensorState) -> bool {
    natural.dist != out.dist || natural.layout != out.layout
}

/// Where the bias goes: to every rank, or for a partial result to rank 0 alone.
fn bias_target(natural: &Distribution) -> Distribution {
    match natural {
        Distribution::Partial => Distribution::Root(0),
        _ => Distribution::Replicated,
    }
}

/// Every rank's piece of a tensor in a state, as explicit holdings in `layout`.
fn pieces_of(state: &TensorState, ranks: u64, layout: Layout) -> Custom {
    let p = Placement::new(&state.dist, &state.shape, ranks);
    Custom {
        shape: state.shape.clone(),
        layout,
        pieces: (0..ranks).map(|r| p.intervals(r)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fused_bias_needs_its_layout_and_one_stretch_of_the_vector() {
        let slab = [4, 5, 6];
        let cyclic = [0, 1, 8, 9];
        let fuse = |e, per, layout, rows: &[u64], columns: &[u64]| {
            fusable(Some(e), per, layout, (rows, columns), false)
        };
        for e in [Epilog::Bias, Epilog::ReluBias, Epilog::GeluBias] {
            // Per row: Fortran order, consecutive rows.
            assert_eq!(fuse(e, BiasPer::Row, Layout::F, &slab, &cyclic), Some(e));
            assert_eq!(
                fuse(e, BiasPer::Row, Layout::C, &slab, &slab),
                None,
                "{e:?}, C order"
            );
            assert_eq!(
                fuse(e, BiasPer::Row, Layout::F, &cyclic, &slab),
                None,
                "{e:?}, cyclic"
            );
            // Per column: C order, consecutive columns.
            assert_eq!(fuse(e, BiasPer::Column, Layout::C, &cyclic, &slab), Some(e));
            assert_eq!(
                fuse(e, BiasPer::Column, Layout::F, &slab, &slab),
                None,
                "{e:?}, F order"
            );
            assert_eq!(
                fuse(e, BiasPer::Column, Layout::C, &slab, &cyclic),
                None,
                "{e:?}, cyclic"
            );
        }
        // Activations alone fuse in either order and with any rows.
        for e in [Epilog::Relu, Epilog::Gelu] {
            assert_eq!(fuse(e, BiasPer::Row, Layout::C, &cyclic, &cyclic), Some(e));
        }
        assert_eq!(
            fusable(None, BiasPer::Row, Layout::F, (&slab, &slab), false),
            None
        );
    }

    #[test]
    fn a_checked_nonlinear_epilog_keeps_its_kernel() {
        // The check needs the pre-activation values, which only the epilog kernel keeps.
        let fuse = |e| fusable(Some(e), BiasPer::Row, Layout::F, (&[0], &[0]), true);
        assert_eq!(fuse(Epilog::Relu), None);
        assert_eq!(fuse(Epilog::GeluBias), None);
        assert_eq!(fuse(Epilog::Bias), Some(Epilog::Bias));
    }
}
