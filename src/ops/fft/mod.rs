//! Distributed 2-D and 3-D FFTs over all axes, written once over the backend, as slab
//! decompositions: the input moves (if needed) to a working slab in C order; the axes that slab
//! holds whole are transformed locally; one all-to-all (the exchange machinery, uneven splits
//! included) transposes to the complementary slab; the remaining axis is transformed; the result
//! moves to the output's distribution and layout (the input's slab with `reshape = true`, boxes
//! for pencils). Boxes that are a slab's pieces are that slab; from and to other boxes, each
//! slab's pieces go to the ranks in the order of the boxes along its axis ([`Slabs`]), so that
//! part of every box stays on its rank. r2c transforms the last axis first, c2r last, so that
//! it is whole when they run. A 2-D transform from x-slabs down long columns that stays in
//! y-slabs exchanges column batch by column batch, each batch's second phase running as it
//! lands (`columns.rs`); one from y-slabs down such columns turns each batch of them into rows
//! for its first phase and back on its way to x-slabs (`long_columns.rs`).
//! A rank that holds the whole tensor (one rank, or a replicated input) transforms every axis in
//! one local phase.

mod batched;
mod by_rows;
pub mod check;
mod columns;
pub mod local;
mod long_columns;
mod meaning;
pub mod memory;
mod op;
mod spec;

pub use spec::{Fft, FftDirection, FftKind, FftNorm};

use super::movement::{Movement, Staged, local_bytes};
use crate::backend::Backend;
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::spec::model::CommBackend;
use super::movement::Route;
use crate::spec::tensor::{DType, Distribution, Layout};
use anyhow::Result;
use batched::Batched;
use by_rows::ByRows;
use columns::Columns;
use long_columns::LongColumns;
use crate::backend::work::{AxisOp, LONG_COLUMNS, Phase};

/// The slab an FFT works from: 2-D r2c must hold its last axis whole first (x-slabs) and 2-D c2r
/// last (so it starts in y-slabs); otherwise the input's own slab, or x-slabs for boxes.
pub fn working_slab(kind: FftKind, ndim: usize, input: &Distribution) -> usize {
    match (kind, ndim, input) {
        (FftKind::R2c, 2, _) => 0,
        (FftKind::C2r, 2, _) => 1,
        (_, _, Distribution::Slab(a)) if a.index() < 2 => a.index(),
        _ => 0,
    }
}

/// The scale an FFT's norm applies in its direction, over `n` points.
pub fn scale(norm: FftNorm, direction: FftDirection, n: f64) -> f64 {
    match (norm, direction) {
        (FftNorm::None, _)
        | (FftNorm::Backward, FftDirection::Forward)
        | (FftNorm::Forward, FftDirection::Inverse) => 1.0,
        (FftNorm::Ortho, _) => 1.0 / n.sqrt(),
        _ => 1.0 / n,
    }
}

/// `state` with boxes that are exactly a slab's pieces (every rank's box is its slab along x or
/// y) as that slab: the same bytes on every rank, which the FFT then neither moves to its working
/// slab nor back from it in one whole exchange (it goes back batch by batch, as for slabs).
fn as_slab(state: &TensorState, ranks: u64) -> TensorState {
    if !matches!(state.dist, Distribution::Boxes(_)) {
        return state.clone();
    }
    let given = Placement::new(&state.dist, &state.shape, ranks);
    let same = |dist: &Distribution| {
        let slab = Placement::new(dist, &state.shape, ranks);
        (0..ranks).all(|r| given.intervals(r) == slab.intervals(r))
    };
    match (0..state.shape.len().min(2)).map(Distribution::slab).find(same) {
        Some(dist) => TensorState {
            dist,
            ..state.clone()
        },
        None => state.clone(),
    }
}

/// An FFT's input and result as it works with them (see [`as_slab`]).
pub(super) fn as_slabs(input: &TensorState, out: &TensorState, ranks: u64) -> [TensorState; 2] {
    [as_slab(input, ranks), as_slab(out, ranks)]
}

/// The two slabs an FFT works in, as [`Slabs::of`] orders them: rank r holds piece `work[r]` of
/// the working slab (along `s0`) and piece `other[r]` of the complementary one.
pub(super) struct Slabs {
    pub s0: usize,
    work: Vec<usize>,
    other: Vec<usize>,
    /// The complementary slab is landed and transformed in F order ([`lands_transposed`]).
    pub transposed: bool,
}

impl Slabs {
    /// The working slab `s0` ([`working_slab`]) and the order of both slabs' pieces over the
    /// ranks: where the input (for the working slab) or the result (for the other) is in
    /// boxes, the pieces go to the ranks in the order of their boxes' starts along the slab's
    /// axis, so that much of each box stays on its rank (pencils on a 2 x 2 grid: half of each
    /// rank's box instead of none for two of them); the ranks' own order otherwise.
    pub fn of(step: &Fft, input: &TensorState, out: &TensorState, ranks: u64) -> Self {
        let s0 = working_slab(step.kind, input.shape.len(), &input.dist);
        let order = |state: &TensorState, axis: usize| -> Vec<usize> {
            let mut ranks: Vec<usize> = (0..ranks as usize).collect();
            if let Distribution::Boxes(boxes) = &state.dist {
                ranks.sort_by_key(|&r| boxes[r][0][axis]);
            }
            let mut piece = vec![0; ranks.len()];
            for (k, &r) in ranks.iter().enumerate() {
                piece[r] = k;
            }
            piece
        };
        Slabs {
            s0,
            work: order(input, s0),
            other: order(out, 1 - s0),
            transposed: lands_transposed(step, input, out, s0, ranks),
        }
    }

    /// `state` on the working slab (`working`, C order) or on the complementary one (in C
    /// order, or F where it lands transposed).
    pub fn on(&self, state: &TensorState, working: bool) -> TensorState {
        let (axis, order) = match working {
            true => (self.s0, &self.work),
            false => (1 - self.s0, &self.other),
        };
        TensorState {
            dist: ordered_slab(&state.shape, axis, order),
            layout: match !working && self.transposed {
                true => Layout::F,
                false => Layout::C,
            },
            ..state.clone()
        }
    }

    /// `state` on the complementary slab in C order: where the second phase leaves it, landed
    /// transposed or not.
    pub fn natural(&self, state: &TensorState) -> TensorState {
        TensorState {
            layout: Layout::C,
            ..self.on(state, false)
        }
    }
}

/// Whether a 2-D FFT from x-slabs lands its y-slabs transposed (in F order: each column's
/// values contiguous) for a second phase down columns of [`LONG_COLUMNS`] points or more: its
/// first phase then runs whole, and the exchange and the second phase column batch by column
/// batch, each batch transformed along contiguous rows and transposed to C order as soon as it
/// has landed (see `columns.rs`), where the second phase would otherwise wait for the whole
/// exchange and transpose the columns to rows and back. Not on the way back to x-slabs batch by
/// batch (`reshape = true`), which takes C-order rows. On 4 H100s by puts c64 16384^2 took 2.21
/// ms against 2.61, c128 8192^2 1.21 against 1.38; on 2, 3.67 against 4.16 (bench/RESULTS.md,
/// 2026-11-27).
fn lands_transposed(step: &Fft, input: &TensorState, out: &TensorState, s0: usize, ranks: u64) -> bool {
    input.shape.len() == 2
        && s0 == 0
        && step.kind != FftKind::C2r
        && input.shape[0] >= LONG_COLUMNS as u64
        && !back_batched(step.kind, s0, out, ranks as usize)
}

/// The slab of `shape` along `axis` with rank r holding piece `order[r]`: the slab itself where
/// that is the ranks' own order, else as boxes.
fn ordered_slab(shape: &[u64], axis: usize, order: &[usize]) -> Distribution {
    if order.iter().enumerate().all(|(r, &k)| r == k) {
        return Distribution::slab(axis);
    }
    let pieces = batched::split(shape[axis] as usize, order.len());
    Distribution::Boxes(
        (order.iter().map(|&k| {
            let (first, count) = pieces[k];
            let (mut lower, mut upper) = (vec![0; shape.len()], shape.to_vec());
            (lower[axis], upper[axis]) = (first as u64, (first + count) as u64);
            [lower, upper]
        }))
        .collect(),
    )
}

/// (first, count) along `axis` of every rank's piece of `state` where it is a slab along that
/// axis (C order), in any order of its pieces over the ranks (see [`Slabs`]); None otherwise.
pub(super) fn slab_pieces(state: &TensorState, axis: usize, ranks: usize) -> Option<Vec<(usize, usize)>> {
    if state.layout != Layout::C || state.shape.len() < 2 {
        return None;
    }
    match &state.dist {
        d if *d == Distribution::slab(axis) => Some(batched::split(state.shape[axis] as usize, ranks)),
        Distribution::Boxes(boxes) => {
            let whole = |b: &crate::spec::tensor::GlobalBox| {
                (0..state.shape.len())
                    .all(|a| a == axis || (b[0][a] == 0 && b[1][a] == state.shape[a]))
            };
            let pieces: Vec<(usize, usize)> = (boxes.iter())
                .map(|b| (b[0][axis] as usize, (b[1][axis] - b[0][axis]) as usize))
                .collect();
            let mut sorted = pieces.clone();
            sorted.sort_unstable();
            let tiles = sorted.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0)
                && sorted.first().is_some_and(|p| p.0 == 0)
                && sorted.last().is_some_and(|p| p.0 + p.1 == state.shape[axis] as usize);
            (boxes.iter().all(whole) && tiles).then_some(pieces)
        }
        _ => None,
    }
}

/// The complex state between an FFT's phases: the transform's complex shape (the result's for
/// r2c, the input's otherwise) in C order on the working slab `s0`, in the input's precision.
fn middle(step: &Fft, input: &TensorState, out: &TensorState, s0: usize) -> TensorState {
    TensorState {
        shape: match step.kind {
            FftKind::R2c => out.shape.clone(),
            _ => input.shape.clone(),
        },
        dtype: match input.dtype {
            DType::F32 | DType::C64 => DType::C64,
            _ => DType::C128,
        },
        layout: Layout::C,
        dist: Distribution::slab(s0),
    }
}

/// The symmetric buffers an FFT from `input` to `out` takes where puts move its transposes (see
/// `batched.rs` and `by_rows.rs`), each's bytes: the largest piece over `ranks` of the
/// complementary slab, the largest of the working slab too when the result goes back to it
/// batch by batch, and the moves around the slabs ([`routed_rooms`]).
pub fn symmetric_rooms(
    step: &Fft,
    input: &TensorState,
    out: &TensorState,
    ranks: usize,
) -> Vec<usize> {
    if holds_whole(input, ranks as u64) {
        return Vec::new();
    }
    let [input, out] = &as_slabs(input, out, ranks as u64);
    let s0 = working_slab(step.kind, input.shape.len(), &input.dist);
    let m = middle(step, input, out, s0);
    let elem = m.dtype.size() as usize;
    let back = (back_batched(step.kind, s0, out, ranks))
        .then(|| batched::slab_room(&m.shape, elem, ranks, s0));
    let moves = routed_rooms(step, input, out, ranks as u64);
    let transposed = batched::slab_room(&m.shape, elem, ranks, 1 - s0);
    [Some(transposed), back].into_iter().chain(moves).flatten().collect()
}

/// Symmetric-heap room for the moves around an FFT's slabs by puts ([`Staged::routed`]), of
/// its input and result as it works with them ([`as_slabs`]): into the working slab, where the
/// input lies otherwise, and from the second phase's slab to the result, where no batched or
/// column-batched way takes it (as [`PreparedFft::new`] builds them); None for a move that
/// stays by NCCL, or is none. Each the largest piece over the ranks.
fn routed_rooms(step: &Fft, input: &TensorState, out: &TensorState, ranks: u64) -> [Option<usize>; 2] {
    if ranks < 2 {
        return [None, None];
    }
    let slabs = Slabs::of(step, input, out, ranks);
    let largest = |s: &TensorState| (0..ranks).map(|r| local_bytes(s, ranks, r)).max();
    let work_in = slabs.on(input, true);
    let to_work = (work_in != *input).then(|| largest(&work_in)).flatten();
    let middle = slabs.on(&middle(step, input, out, slabs.s0), true);
    let by_columns =
        slabs.transposed && columns::applies(&middle, &slabs.natural(out), ranks as usize);
    let back = slabs.on(out, false) != *out
        && !by_columns
        && !back_batched(step.kind, slabs.s0, out, ranks as usize);
    [to_work, back.then(|| largest(out)).flatten()]
}

/// Whether an FFT working from slab `s0` may return to it batch by batch, each batch moving
/// while the next one's second phase runs (`reshape = true`, C order; not a c2r, whose second
/// phase writes reals): by rows to x-slabs ([`ByRows`]), by planes to y-slabs ([`Batched`]).
fn back_batched(kind: FftKind, s0: usize, out: &TensorState, ranks: usize) -> bool {
    ranks > 1
        && kind != FftKind::C2r
        && out.dist == Distribution::slab(s0)
        && out.layout == Layout::C
}

/// The two local phases of an FFT on `rank`: first every axis the working slab holds whole
/// (r2c's last first, c2r's last held back, a c2c's after y from y-slabs held back), then the
/// axis the first slab split, those held back and c2r's last.
/// The norm's scale comes with the second, unless that one runs row batch by row batch on the way
/// back to x-slabs (then with the first: the FFT is linear; a phase by rows scales nothing).
/// Each phase's shape is the rank's piece of the `slabs` it works in.
fn phases(
    step: &Fft,
    (input, out): (&TensorState, &TensorState),
    slabs: &Slabs,
    (ranks, rank): (u64, u64),
) -> [Phase; 2] {
    let nd = input.shape.len();
    let last = nd - 1;
    let s0 = slabs.s0;
    let inverse = step.direction == FftDirection::Inverse;
    let local_shape = |working: bool, state: &TensorState| -> Vec<usize> {
        let state = slabs.on(state, working);
        Placement::new(&state.dist, &state.shape, ranks)
            .local_shape(rank)
            .unwrap_or_default()
            .iter()
            .map(|&n| n as usize)
            .collect()
    };
    // From y-slabs a c2c's axes after y wait for the second phase: there they and y are the
    // trailing axes of each x-plane, one contiguous cuFFT plan (in the first phase they would
    // be strided by the rows, and y in the second one plan per x-plane).
    let later = |axis: usize| s0 == 1 && step.kind == FftKind::C2c && axis > s0;
    let mut ops1 = Vec::new();
    if step.kind == FftKind::R2c {
        ops1.push(AxisOp::R2c);
    }
    for axis in (0..nd).rev().filter(|&a| a != s0 && !later(a)) {
        if axis == last && step.kind != FftKind::C2c {
            continue;
        }
        ops1.push(AxisOp::C2c { axis, inverse });
    }
    let mut ops2: Vec<AxisOp> = (s0 + 1..nd)
        .rev()
        .filter(|&a| later(a))
        .map(|axis| AxisOp::C2c { axis, inverse })
        .collect();
    if !(step.kind == FftKind::C2r && s0 == last) {
        ops2.push(AxisOp::C2c { axis: s0, inverse });
    }
    if step.kind == FftKind::C2r {
        ops2.push(AxisOp::C2r {
            n: out.shape[last] as usize,
        });
    }
    let s = norm_scale(step, input, out);
    let by_rows = s0 == 0 && back_batched(step.kind, s0, out, ranks as usize);
    let middle = middle(step, input, out, s0);
    [
        Phase {
            shape: local_shape(true, input),
            ops: ops1,
            scale: s.filter(|_| by_rows),
            rows: None,
            spent: slabs.on(input, true) != *input,
        },
        // Its input, the transposed first phase, is the step's own; landed transposed, its
        // piece in F order is the C-order piece of the reversed shape.
        Phase {
            shape: match slabs.transposed {
                true => local_shape(false, &middle).into_iter().rev().collect(),
                false => local_shape(false, &middle),
            },
            ops: match slabs.transposed {
                true => (ops2.iter()).map(|op| reversed(op, nd)).collect(),
                false => ops2,
            },
            scale: s.filter(|_| !by_rows),
            rows: None,
            spent: true,
        },
    ]
}

/// `op` on the reversed axes of a piece of `nd` axes (a complex transform's; real ones run
/// along the last axis, which a transposed phase never takes).
fn reversed(op: &AxisOp, nd: usize) -> AxisOp {
    match *op {
        AxisOp::C2c { axis, inverse } => AxisOp::C2c {
            axis: nd - 1 - axis,
            inverse,
        },
        other => other,
    }
}

/// The factor the norm applies in the step's direction (None where it is 1).
fn norm_scale(step: &Fft, input: &TensorState, out: &TensorState) -> Option<f64> {
    let real_shape = match step.kind {
        FftKind::C2r => &out.shape,
        FftKind::C2c | FftKind::R2c => &input.shape,
    };
    let n: f64 = real_shape.iter().map(|&x| x as f64).product();
    Some(scale(step.norm, step.direction, n)).filter(|&s| s != 1.0)
}

/// Whether every rank holds the whole input (one rank, or a replicated input): each then
/// transforms all of it in one local phase, and the result is whole on every rank too.
pub fn holds_whole(input: &TensorState, ranks: u64) -> bool {
    ranks == 1 || input.dist == Distribution::Replicated
}

/// Whether a rank holding the whole tensor transforms it in the order it is stored: a c2c from
/// and to F order (an FFT over every axis of an F-order array is the same FFT of the C-order
/// array of the reversed shape); otherwise it works in C order.
fn whole_in_place_order(step: &Fft, input: &TensorState, out: &TensorState) -> bool {
    step.kind == FftKind::C2c && input.layout == Layout::F && out.layout == Layout::F
}

/// Where a rank holding the whole tensor transforms it: the input and the result in the order
/// the one phase works in (see [`whole_in_place_order`]), whole on every rank.
pub(super) fn whole_ends(
    step: &Fft,
    input: &TensorState,
    out: &TensorState,
    ranks: u64,
) -> [TensorState; 2] {
    let layout = match whole_in_place_order(step, input, out) {
        true => input.layout,
        false => Layout::C,
    };
    [input, out].map(|s| TensorState {
        layout,
        // One rank holds any distribution whole; several hold a replicated one.
        dist: match ranks {
            1 => s.dist.clone(),
            _ => Distribution::Replicated,
        },
        ..s.clone()
    })
}

/// The one local phase of an FFT over every axis (see [`PreparedFft`]'s `whole`): r2c's real
/// axis first, c2r's last, the complex axes from the last to the first, the norm's scale with
/// it; over the reversed shape where an F-order c2c stays in its order (`as_is`); its input the
/// step's own where the input was `moved` there first.
fn whole_phase(
    step: &Fft,
    input: &TensorState,
    out: &TensorState,
    (moved, as_is): (bool, bool),
) -> Phase {
    let nd = input.shape.len();
    let last = nd - 1;
    let inverse = step.direction == FftDirection::Inverse;
    let complex_axes = match step.kind {
        FftKind::C2c => 0..nd,
        FftKind::R2c | FftKind::C2r => 0..last,
    };
    let mut ops = Vec::new();
    if step.kind == FftKind::R2c {
        ops.push(AxisOp::R2c);
    }
    ops.extend(complex_axes.rev().map(|axis| AxisOp::C2c { axis, inverse }));
    if step.kind == FftKind::C2r {
        ops.push(AxisOp::C2r {
            n: out.shape[last] as usize,
        });
    }
    let mut shape: Vec<usize> = input.shape.iter().map(|&x| x as usize).collect();
    if as_is {
        shape.reverse();
    }
    Phase {
        shape,
        ops,
        scale: norm_scale(step, input, out),
        rows: None,
        spent: moved,
    }
}

/// A local phase, where its result lands, and how that result moves on.
struct Stage<B: Backend> {
    phase: Phase,
    after: B::Buf,
    then: Move<B>,
}

/// How a phase's result moves on: to the next phase's slab, or to the result's distribution.
enum Move<B: Backend> {
    /// It stays: the next phase's input, or the result itself.
    None,
    /// After the whole phase, in one movement.
    Whole(Box<Staged<B>>),
    /// Batch by batch of x-planes to y-slabs, overlapping the phase.
    Planes(Batched<B>),
    /// Batch by batch of y-rows to x-slabs, overlapping the phase.
    Rows(ByRows<B>),
    /// Batch by batch of long columns turned into rows and back on their way to x-slabs (the
    /// phase runs with the move, from the stage's input into `after` in F order).
    Turned(LongColumns<B>),
    /// Column batch by column batch to y-slabs, the second phase run on each as it lands
    /// (the whole FFT), then to the result's distribution where that differs.
    Columns(Box<Columns<B>>, Option<Box<Staged<B>>>),
}

impl<B: Backend> Stage<B> {
    /// A stage whose result moves from `from` to `to` after the phase: batch by batch (in
    /// `batches`, or as many as [`batched::batch_count`] chooses) where `batch` and a batched
    /// way applies, in one movement otherwise (with `room`, one that puts may make:
    /// [`Staged::routed`]).
    fn new(
        b: &B,
        phase: Phase,
        (from, to): (&TensorState, &TensorState),
        (batch, batches): (bool, Option<u32>),
        room: Option<usize>,
    ) -> Result<Self> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let after = b.zeros(local_bytes(from, ranks, rank))?;
        let then = if from == to {
            Move::None
        } else if let Some(p) = batch.then(|| Batched::new(b, from, to, &phase, batches)).transpose()?.flatten() {
            Move::Planes(p)
        } else if let Some(p) = batch.then(|| ByRows::new(b, from, to, &phase, batches)).transpose()?.flatten() {
            Move::Rows(p)
        } else {
            let (m, bytes) = (Movement::new(from, to, ranks, rank), local_bytes(to, ranks, rank));
            Move::Whole(Box::new(match room {
                Some(room) => Staged::routed(b, m, bytes, room)?,
                None => Staged::new(b, m, bytes)?,
            }))
        };
        Ok(Stage { phase, after, then })
    }

    /// A first phase down long columns from y-slabs to `to`, the x-slabs ([`LongColumns`]);
    /// None where that does not apply.
    fn turned(
        b: &B,
        phase: &Phase,
        (from, to): (&TensorState, &TensorState),
        batches: Option<u32>,
    ) -> Result<Option<Self>> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let Some(t) = LongColumns::new(b, from, to, phase, batches)? else {
            return Ok(None);
        };
        Ok(Some(Stage {
            phase: phase.clone(),
            after: b.zeros(local_bytes(from, ranks, rank))?,
            then: Move::Turned(t),
        }))
    }

    /// Runs the phase from `input` and the move after it; returns where the result lies.
    fn run(&mut self, b: &B, precision: DType, input: &B::Buf) -> Result<&B::Buf> {
        let after = &mut self.after;
        match &mut self.then {
            Move::Planes(p) => p.run(b, precision, input, after),
            Move::Rows(p) => p.run(b, precision, input, after),
            Move::Turned(p) => p.run(b, precision, input, after),
            then => {
                b.fft(precision, &self.phase, (input, 0), (&mut *after, 0))?;
                match then {
                    Move::Whole(staged) => staged.run(b, after),
                    Move::Columns(c, then) => {
                        let natural = c.run(b, precision, after)?;
                        match then {
                            Some(staged) => staged.run(b, natural),
                            None => Ok(natural),
                        }
                    }
                    _ => Ok(after),
                }
            }
        }
    }

    /// How many batches a batched move runs in (None for the others).
    fn batches(&self) -> Option<usize> {
        match &self.then {
            Move::Planes(p) => Some(p.batches()),
            Move::Rows(p) => Some(p.batches()),
            Move::Turned(p) => Some(p.batches()),
            Move::Columns(c, _) => Some(c.batches()),
            _ => None,
        }
    }

    /// The route of a batched move, or of one movement (None for the others).
    fn route(&mut self) -> Option<&mut Route> {
        match &mut self.then {
            Move::Whole(staged) => Some(&mut staged.route),
            Move::Planes(p) => Some(&mut p.route),
            Move::Rows(p) => Some(&mut p.route),
            Move::Turned(p) => Some(&mut p.route),
            Move::Columns(c, _) => Some(&mut c.route),
            _ => None,
        }
    }

    /// Where the result of the last run lies.
    fn into_output(self) -> B::Buf {
        match self.then {
            Move::None => self.after,
            Move::Whole(staged) => staged.out,
            Move::Planes(p) => p.out,
            Move::Rows(p) => p.out,
            Move::Turned(p) => p.out,
            Move::Columns(c, None) => c.out,
            Move::Columns(_, Some(staged)) => staged.out,
        }
    }
}

/// An FFT step ready to run: the input moved to the working slab (where it is not there), the
/// first phase and the transpose, the second phase and the way to the result (none where the
/// first phase is the whole FFT).
pub struct PreparedFft<B: Backend> {
    precision: DType,
    to_work: Option<Staged<B>>,
    first: Stage<B>,
    second: Option<Stage<B>>,
}

impl<B: Backend> PreparedFft<B> {
    /// Prepares an FFT from its input's state to its result's.
    pub fn new(b: &B, step: &Fft, input: &TensorState, out: &TensorState) -> Result<Self> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        if holds_whole(input, ranks) {
            return Self::whole(b, step, input, out);
        }
        let [input, out] = &as_slabs(input, out, ranks);
        let slabs = Slabs::of(step, input, out, ranks);
        let s0 = slabs.s0;
        let middle = slabs.on(&middle(step, input, out, s0), true);
        let work_in = slabs.on(input, true);
        let [to_work_room, back_room] = routed_rooms(step, input, out, ranks);
        let to_work = (work_in != *input)
            .then(|| {
                let m = Movement::new(input, &work_in, ranks, rank);
                let bytes = local_bytes(&work_in, ranks, rank);
                match to_work_room {
                    Some(room) => Staged::routed(b, m, bytes, room),
                    None => Staged::new(b, m, bytes),
                }
            })
            .transpose()?;
        let [phase1, phase2] = phases(step, (input, out), &slabs, (ranks, rank));
        if slabs.transposed
            && let Some(first) =
                Self::by_columns(b, step, (phase1.clone(), &phase2), &middle, (&slabs.natural(out), out))?
        {
            return Ok(PreparedFft {
                precision: middle.dtype,
                to_work,
                first,
                second: None,
            });
        }
        let transposed = slabs.on(&middle, false);
        let first = match Stage::turned(b, &phase1, (&middle, &transposed), step.batches)? {
            Some(first) => first,
            None => Stage::new(b, phase1, (&middle, &transposed), (true, step.batches), None)?,
        };
        let natural = slabs.on(out, false);
        let by_batches = back_batched(step.kind, s0, out, ranks as usize);
        let second = Stage::new(b, phase2, (&natural, out), (by_batches, step.batches), back_room)?;
        Ok(PreparedFft {
            precision: middle.dtype,
            to_work,
            first,
            second: Some(second),
        })
    }

    /// The first phase whole, then the exchange and the second phase column batch by column
    /// batch ([`Columns`]) into `natural` (the complementary slab in C order, landed in F
    /// order), then to `out` where that differs; None where that does not apply.
    fn by_columns(
        b: &B,
        step: &Fft,
        (phase1, phase2): (Phase, &Phase),
        middle: &TensorState,
        (natural, out): (&TensorState, &TensorState),
    ) -> Result<Option<Stage<B>>> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let Some(columns) = Columns::new(b, middle, natural, phase2, step.batches)? else {
            return Ok(None);
        };
        let then = match *natural == *out {
            true => None,
            false => {
                let m = Movement::new(natural, out, ranks, rank);
                Some(Box::new(Staged::new(b, m, local_bytes(out, ranks, rank))?))
            }
        };
        Ok(Some(Stage {
            phase: phase1,
            after: b.zeros(local_bytes(middle, ranks, rank))?,
            then: Move::Columns(Box::new(columns), then),
        }))
    }

    /// The FFT of a rank that holds the whole tensor: one local phase over every axis (one
    /// library call: a cuFFT plan over all axes), from the input in C order (or in F order as
    /// it is, for a c2c whose result is in F order too) straight into the result's layout (and
    /// from there to its distribution, where it is not replicated).
    fn whole(b: &B, step: &Fft, input: &TensorState, out: &TensorState) -> Result<Self> {
        let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
        let [work_in, natural] = whole_ends(step, input, out, ranks);
        let to_work = match work_in == *input {
            true => None,
            false => {
                let m = Movement::new(input, &work_in, ranks, rank);
                Some(Staged::new(b, m, local_bytes(&work_in, ranks, rank))?)
            }
        };
        let as_is = work_in.layout == Layout::F;
        let phase = whole_phase(step, input, out, (to_work.is_some(), as_is));
        Ok(PreparedFft {
            precision: middle(step, input, out, 0).dtype,
            to_work,
            first: Stage::new(b, phase, (&natural, out), (false, None), None)?,
            second: None,
        })
    }

    /// How many batches each batched move runs in, in order.
    pub fn batches(&self) -> Vec<usize> {
        let second = self.second.as_ref().and_then(Stage::batches);
        self.first.batches().into_iter().chain(second).collect()
    }

    /// The moves' routes: into the working slab, the transposes, back to the result.
    fn routes(&mut self) -> impl Iterator<Item = &mut Route> {
        let to_work = self.to_work.as_mut().map(|s| &mut s.route);
        let second = self.second.as_mut().and_then(Stage::route);
        to_work.into_iter().chain(self.first.route()).chain(second)
    }

    /// Whether some move (a transpose, or into or out of the slabs) can go by NVSHMEM puts (see
    /// [`PreparedFft::set_via`]).
    pub fn can_put(&mut self) -> bool {
        self.routes().any(|r| r.can_put())
    }

    /// Moves the data by NCCL or by puts, every move that can ([`PreparedFft::can_put`]).
    pub fn set_via(&mut self, via: CommBackend) {
        self.routes().for_each(|r| r.set(via));
    }

    /// Runs the FFT once on `input`.
    pub fn run(&mut self, b: &B, input: &B::Buf) -> Result<()> {
        let work = match &mut self.to_work {
            Some(staged) => staged.run(b, input)?,
            None => input,
        };
        let moved = self.first.run(b, self.precision, work)?;
        if let Some(second) = &mut self.second {
            second.run(b, self.precision, moved)?;
        }
        Ok(())
    }

    /// The result of the last run.
    pub fn into_output(self) -> B::Buf {
        self.second.unwrap_or(self.first).into_output()
    }
}

#[cfg(test)]
mod tests {
    use super::check::inverse;
    use super::symmetric_rooms;
    use crate::dist::TensorState;
    use crate::init::tests::state;
    use crate::ops::fft::Fft;
    use crate::spec::tensor::{Axis, DType, Distribution, Layout};

    fn fft(kind: &str) -> Fft {
        toml::from_str(&format!("input = \"x\"\nkind = \"{kind}\"")).unwrap()
    }

    #[test]
    fn slabs_named_x_and_y_take_the_batched_way_back() {
        // `slab = "x"` (as specs write it) is slab 0: the way back by rows, and its room.
        use crate::spec::tensor::AxisName;
        let named = state(
            &[30, 27, 33],
            DType::C64,
            Layout::C,
            Distribution::Slab(Axis::Name(AxisName::X)),
        );
        let indexed = state(
            &[30, 27, 33],
            DType::C64,
            Layout::C,
            Distribution::Slab(Axis::Index(0)),
        );
        assert!(super::back_batched(super::FftKind::C2c, 0, &named, 4));
        assert_eq!(
            symmetric_rooms(&fft("c2c"), &named, &named, 4),
            symmetric_rooms(&fft("c2c"), &indexed, &indexed, 4)
        );
    }

    /// c64 [30, 27, 33] in pencils on a 2 x 2 grid, rank r at (r % 2, r / 2).
    fn pencils() -> TensorState {
        let b = |lo: [u64; 3], hi: [u64; 3]| [lo.to_vec(), hi.to_vec()];
        let boxes = Distribution::Boxes(vec![
            b([0, 0, 0], [15, 13, 33]),
            b([15, 0, 0], [30, 13, 33]),
            b([0, 13, 0], [15, 27, 33]),
            b([15, 13, 0], [30, 27, 33]),
        ]);
        state(&[30, 27, 33], DType::C64, Layout::C, boxes)
    }

    #[test]
    fn slab_pieces_follow_the_boxes_they_come_from_and_go_to() {
        use super::{Slabs, slab_pieces};
        // Ranks 0 and 2 hold x 0..15, so they take the first two x-slabs (each keeps half its
        // box); y 0..13 is ranks 0 and 1's, so the y-slabs keep the ranks' order.
        let x = pencils();
        let slabs = Slabs::of(&fft("c2c"), &x, &x, 4);
        let work = slabs.on(&x, true);
        let xs = slab_pieces(&work, 0, 4).expect("x-slab pieces");
        assert_eq!(xs, [(0, 8), (16, 7), (8, 8), (23, 7)]);
        let other = slabs.on(&x, false);
        assert_eq!(other.dist, Distribution::Slab(Axis::Index(1)));
        assert_eq!(slab_pieces(&other, 1, 4).unwrap(), [(0, 7), (7, 7), (14, 7), (21, 6)]);
        // Boxes that are not whole along the other axes are no slab.
        assert_eq!(slab_pieces(&x, 0, 4), None);
    }

    #[test]
    fn only_the_steps_own_buffers_are_spent() {
        // A c2r may overwrite a phase's input only where that is the step's own scratch: the
        // transposed middle always, the first phase's input only where it was moved there.
        let y = Distribution::Slab(Axis::Index(1));
        let x = Distribution::Slab(Axis::Index(0));
        let spectrum = state(&[8, 6, 5], DType::C64, Layout::C, y.clone());
        let signal = state(&[8, 6, 8], DType::F32, Layout::C, x);
        let phases = |input| {
            let slabs = super::Slabs::of(&fft("c2r"), input, &signal, 2);
            super::phases(&fft("c2r"), (input, &signal), &slabs, (2, 0))
        };
        let [first, second] = phases(&spectrum);
        assert!(!first.spent && second.spent);
        let f_order = state(&[8, 6, 5], DType::C64, Layout::F, y);
        assert!(phases(&f_order)[0].spent);
        // One rank: the whole phase reads the tensor itself unless it was moved first.
        let whole = |input| super::whole_phase(&fft("c2r"), input, &signal, (false, false));
        assert!(!whole(&spectrum).spent);
    }

    #[test]
    fn puts_get_room_for_the_largest_y_slab() {
        let x = Distribution::Slab(Axis::Index(0));
        let y = Distribution::Slab(Axis::Index(1));
        let c = state(&[30, 27, 33], DType::C64, Layout::C, x.clone());
        let c_y = state(&[30, 27, 33], DType::C64, Layout::C, y.clone());
        // 27 rows over 4 ranks: 7, 7, 7, 6; every rank reserves the largest. Left in y-slabs
        // (reshape = false) that is all; back in x-slabs also the largest of 8, 8, 7, 7 planes,
        // in a buffer of its own.
        assert_eq!(symmetric_rooms(&fft("c2c"), &c, &c_y, 4), [30 * 7 * 33 * 8]);
        assert_eq!(
            symmetric_rooms(&fft("c2c"), &c, &c, 4),
            [30 * 7 * 33 * 8, 8 * 27 * 33 * 8]
        );
        // r2c: the complex half-spectrum (33 -> 17) in single precision.
        let real = state(&[30, 27, 33], DType::F32, Layout::C, x.clone());
        let half = state(&[30, 27, 17], DType::C64, Layout::C, x);
        assert_eq!(
            symmetric_rooms(&fft("r2c"), &real, &half, 4),
            [30 * 7 * 17 * 8, 8 * 27 * 17 * 8]
        );
        // From y-slabs, the largest x-slab piece (30 planes: 8, 8, 7, 7), and back in y-slabs
        // the largest y-slab piece too; one rank moves nothing.
        let from_y = state(&[30, 27, 33], DType::C128, Layout::C, y);
        assert_eq!(
            symmetric_rooms(&fft("c2c"), &from_y, &from_y, 4),
            [8 * 27 * 33 * 16, 30 * 7 * 33 * 16]
        );
        let x_out = state(&[30, 27, 33], DType::C128, Layout::C, c.dist.clone());
        assert_eq!(
            symmetric_rooms(&fft("c2c"), &from_y, &x_out, 4),
            [8 * 27 * 33 * 16]
        );
        assert!(symmetric_rooms(&fft("c2c"), &c, &c, 1).is_empty());
        // A 2-D c2r starts from y-slabs (to x-slabs by rows, 8 of 30 planes; its result, real,
        // goes back in one movement, into the largest y-slab piece: 30 x 7), its check's
        // inverse (an r2c) from x-slabs, where its input moves first (8 of 30 planes).
        let spectrum = state(&[30, 14], DType::C128, Layout::C, from_y.dist.clone());
        let signal = state(&[30, 27], DType::F64, Layout::C, from_y.dist);
        assert_eq!(
            symmetric_rooms(&fft("c2r"), &spectrum, &signal, 4),
            [8 * 14 * 16, 30 * 7 * 8]
        );
        let back = inverse(&fft("c2r"));
        assert_eq!(
            symmetric_rooms(&back, &signal, &spectrum, 4),
            [30 * 4 * 16, 8 * 27 * 8]
        );
    }

    #[test]
    fn puts_get_room_for_the_moves_from_and_back_to_pencils() {
        // The transposed y-slabs (7 rows), and the moves into x-slabs (the largest piece 8
        // planes) and back into the largest box (15 x 14), which puts may make: a buffer each.
        let x = pencils();
        assert_eq!(
            symmetric_rooms(&fft("c2c"), &x, &x, 4),
            [30 * 7 * 33 * 8, 8 * 27 * 33 * 8, 15 * 14 * 33 * 8]
        );
    }
}
