//! What a prepared matmul holds on a rank beyond its operands and result, as the plan counts it:
//! the operands moved to where the algorithm multiplies them, the accumulator, the reduced
//! product, the result where the algorithm leaves it, the addend and bias moved beside it, and
//! for a check of a nonlinear epilog the kept pre-activation values. A matmul in rounds holds
//! each round's arrived piece instead of the gathered operand, and with `pipeline = "auto"` its
//! trials hold both ways at once, as do those weighing the layout its product is written in.
//! Counted as the CPU runs it (no fused epilog, no rounds of puts: the GPU's fused epilog only
//! drops buffers, and its rounds land in symmetric buffers, which the plan counts apart:
//! [`puts_rooms`]); the GEMM library's own buffers apart ([`LIBRARY_BYTES`]).

use super::{
    Reduction, Target, bias_target, epilog, layouts_worth_weighing, local, moves_result,
    natural_state, targets, writes_directly,
};
use crate::dist::{Placement, TensorState};
use crate::ops::checks::dots_scratch;
use crate::ops::exchange::{Custom, Holdings, Side};
use crate::ops::movement::{EXACT_RANKS, local_bytes, staged_bytes};
use super::chunks::{self, Gathered};
use super::{
    InRounds, Matmul, MatmulAlgorithm, MatmulChoice, MatmulPipeline, ProductLayout, in_rounds,
    rounds_of,
};
use crate::spec::tensor::{Distribution, Layout};

/// The GEMM library's own buffers, which it keeps from its first GEMM to the end of the run:
/// faer's packing buffers on the CPU (measured: 64 MiB whatever the sizes), cuBLASLt's 32 MiB
/// workspace on a GPU.
pub const LIBRARY_BYTES: u64 = 64 << 20;

/// The bytes on each rank (see the module's docs; what every rank shares is worked out once);
/// `inputs` are a, b, c?, bias? as the step reads them.
pub fn workspace<'a>(
    step: &'a Matmul,
    choice: &'a MatmulChoice,
    inputs: &'a [TensorState],
    out: &'a TensorState,
    ranks: u64,
    check: bool,
) -> impl Fn(u64) -> u64 + 'a {
    let (sa, sb) = (&inputs[0], &inputs[1]);
    let (targets, reduction) = moves(step, choice, (sa, sb), out, ranks);
    let direct = writes_directly(step, &reduction, false);
    let natural = natural_state(&choice.natural, out, direct, step.product_layout.pinned());
    // The addend lands beside the product, row-major (a partial result's on rank 0 alone: see
    // `addend_pieces`).
    let addend_dist = match natural.dist {
        Distribution::Partial => Distribution::Root(0),
        ref d => d.clone(),
    };
    let bias_to = bias_target(&choice.natural);
    let moves = moves_result(&natural, out);
    let weighs = step.product_layout == ProductLayout::Auto
        && direct
        && !moves
        && layouts_worth_weighing(step.mnk(sa, out));
    let turned = weighs.then(|| {
        TensorState {
            layout: natural.layout.other(),
            ..natural.clone()
        }
    });
    // The way in rounds where it can go so (see `operands`): with `pipeline = "auto"` its trial
    // runs hold it beside the whole gather, each with its own buffers.
    let state = move |of| operand(of, (sa, sb));
    let rounds = planned_rounds(step, choice, (sa, sb), &targets, ranks);
    let csize = local::compute_dtype(sa.dtype).size();
    move |rank| {
        let ((moved_a, [ra, ca]), (moved_b, [rb, cb])) = match &targets {
            Some((ta, tb)) => (moved(sa, ta, (ranks, rank)), moved(sb, tb, (ranks, rank))),
            None => (panel(sa, 0, (ranks, rank)), panel(sb, 1, (ranks, rank))),
        };
        let m_loc = if step.transpose_a { ca } else { ra };
        let n_loc = if step.transpose_b { rb } else { cb };
        let natural_piece = local_bytes(&natural, ranks, rank) as u64;
        let natural_elems = natural_piece / out.dtype.size();
        let acc = if direct { 0 } else { m_loc * n_loc * csize };
        let whole = moved_a + moved_b + acc;
        // In rounds: the operand not gathered moves as in the whole way, the gathered one (both
        // for SUMMA) stays and its pieces arrive round by round; the product accumulates in
        // the result's piece.
        let in_rounds = rounds.as_ref().map(|rounds| {
            let arrivals: u64 = match rounds {
                Rounds::Listed(list) => (list.iter())
                    .map(|(of, to)| staged_bytes(state(*of), to, ranks, rank))
                    .sum(),
                // As the plan sizes a large exchange (`staged_bytes`): the piece sent, the
                // piece received and landed, each at the operand's largest.
                Rounds::Estimated(list) => (list.iter())
                    .map(|&(of, n, largest)| {
                        n as u64 * (local_bytes(state(of), ranks, rank) as u64 + 2 * largest)
                    })
                    .sum(),
            };
            let stays = match (&targets, rounds.gathered()) {
                (None, _) | (_, None) => 0,
                (Some(_), Some(Gathered::A)) => moved_b,
                (Some(_), Some(Gathered::B)) => moved_a,
            };
            let acc = if direct { 0 } else { natural_elems * csize };
            stays + arrivals + acc
        });
        let operands = match (step.pipeline, in_rounds) {
            (MatmulPipeline::Auto, Some(r)) => whole + r,
            (_, Some(r)) => r,
            (_, None) => whole,
        };
        let reduced = match reduction {
            Reduction::None => 0,
            _ => natural_elems * csize,
        };
        let c = match inputs.get(2).filter(|_| step.c.is_some()) {
            Some(sc) => {
                let to = Side {
                    dist: &addend_dist,
                    shape: &natural.shape,
                    layout: Layout::C,
                };
                staged_bytes(sc, &to, ranks, rank)
            }
            None => 0,
        };
        let bias = match inputs.last().filter(|_| step.bias.is_some()) {
            Some(sbias) => {
                let to = Side {
                    dist: &bias_to,
                    ..Side::of(sbias)
                };
                staged_bytes(sbias, &to, ranks, rank)
            }
            None => 0,
        };
        // The result where the algorithm leaves it is the result itself when nothing moves it.
        let (natural_buf, to_out) = match moves {
            false => (0, 0),
            true => {
                let landed = local_bytes(out, ranks, rank) as u64;
                let staged = staged_bytes(&natural, &Side::of(out), ranks, rank);
                (natural_piece, staged - landed)
            }
        };
        let pre = if check && epilog::nonlinear(step.epilog) {
            natural_elems * csize
        } else {
            0
        };
        let result_side = reduced + c + bias + to_out + pre;
        // While trials run, each prepared way holds its own result-side buffers, and the
        // loser's result piece too where the winner's is the result.
        let trials = match (step.pipeline, &rounds) {
            (MatmulPipeline::Auto, Some(_)) => result_side + natural_piece,
            _ => 0,
        };
        // Where trial runs weigh the product's layouts (after the pipeline's), the way that
        // writes it in the other layout holds that product and the result changed from it.
        let layouts = match &turned {
            Some(turned) => natural_piece + staged_bytes(turned, &Side::of(out), ranks, rank),
            None => 0,
        };
        operands + result_side + natural_buf + trials.max(layouts)
    }
}

/// The symmetric buffers a matmul in rounds takes where puts bring its rounds (see `chunks`),
/// each's bytes: each round's landing, as large as its operand's largest piece, and a signal
/// word for every round. None for a matmul that gathers in one exchange.
pub fn puts_rooms(
    step: &Matmul,
    choice: &MatmulChoice,
    inputs: &[TensorState],
    out: &TensorState,
    ranks: u64,
) -> Vec<u64> {
    let (sa, sb) = (&inputs[0], &inputs[1]);
    let (targets, _) = moves(step, choice, (sa, sb), out, ranks);
    let largest = |of| {
        let state = operand(of, (sa, sb));
        (0..ranks).map(|r| local_bytes(state, ranks, r) as u64).max().unwrap_or(0)
    };
    let mut rooms: Vec<u64> = match planned_rounds(step, choice, (sa, sb), &targets, ranks) {
        None => return Vec::new(),
        Some(Rounds::Listed(list)) => list.iter().map(|&(of, _)| largest(of)).collect(),
        Some(Rounds::Estimated(list)) => (list.iter())
            .flat_map(|&(_, n, bytes)| std::iter::repeat_n(bytes, n))
            .collect(),
    };
    if !rooms.is_empty() {
        rooms.push(4 * rooms.len() as u64);
    }
    rooms
}

/// Where the algorithm moves a and b, and how it reduces the product. SUMMA's panels are sized
/// from each rank's piece: listing them (every block of a block-cyclic operand, on every rank)
/// is the preparation's work, not the plan's.
fn moves(
    step: &Matmul,
    choice: &MatmulChoice,
    (sa, sb): (&TensorState, &TensorState),
    out: &TensorState,
    ranks: u64,
) -> (Option<(Target, Target)>, Reduction) {
    match choice.algorithm {
        MatmulAlgorithm::Summa => (None, Reduction::None),
        _ => {
            let (a, b, reduction) = targets(step, choice, (sa, sb), out, ranks);
            (Some((a, b)), reduction)
        }
    }
}

/// The rounds the matmul moves its operands in, where it runs in rounds (see `operands`): as
/// the preparation lists them up to [`EXACT_RANKS`] ranks, estimated above.
fn planned_rounds(
    step: &Matmul,
    choice: &MatmulChoice,
    (sa, sb): (&TensorState, &TensorState),
    targets: &Option<(Target, Target)>,
    ranks: u64,
) -> Option<Rounds> {
    let listed = |list: Vec<chunks::Senders>| {
        let arrived = |r: chunks::Senders| {
            let state = operand(r.of, (sa, sb));
            (r.of, chunks::arrived(state, &r, ranks as usize))
        };
        Rounds::Listed(list.into_iter().map(arrived).collect())
    };
    match (step.pipeline, targets) {
        (MatmulPipeline::Whole, _) => None,
        _ if ranks > EXACT_RANKS => estimated_rounds(choice.algorithm, (sa, sb), targets, ranks),
        (_, None) => chunks::summa_rounds(sa, sb, ranks as usize).map(listed),
        (_, Some((ta, tb))) => {
            rounds_of(step, choice.algorithm, (sa, sb), (ta, tb), ranks as usize).map(listed)
        }
    }
}

/// The rounds a matmul in rounds moves its operands in, as the plan counts them.
enum Rounds {
    /// Each round's operand and what every rank holds once it has moved (see `chunks`), where
    /// the plan sizes exchanges exactly (up to [`EXACT_RANKS`] ranks).
    Listed(Vec<(Gathered, Custom)>),
    /// Above: each operand's rounds, their count and its largest piece's bytes.
    Estimated(Vec<(Gathered, usize, u64)>),
}

impl Rounds {
    /// The operand the first round moves.
    fn gathered(&self) -> Option<Gathered> {
        match self {
            Rounds::Listed(list) => list.first().map(|r| r.0),
            Rounds::Estimated(list) => list.first().map(|r| r.0),
        }
    }
}

/// Operand a or b.
fn operand<'s>(of: Gathered, (sa, sb): (&'s TensorState, &'s TensorState)) -> &'s TensorState {
    match of {
        Gathered::A => sa,
        Gathered::B => sb,
    }
}

/// The rounds of a matmul over more ranks than the plan lists exchanges for, without listing
/// every rank's pieces: a ring's P - 1 rounds of the operand gathered whole (assuming its
/// pieces allow them), or SUMMA's P' - 1 rounds of each operand on a square grid of P' x P'.
fn estimated_rounds(
    algorithm: MatmulAlgorithm,
    (sa, sb): (&TensorState, &TensorState),
    targets: &Option<(Target, Target)>,
    ranks: u64,
) -> Option<Rounds> {
    let side = ranks.isqrt() as usize;
    let rounds = match (algorithm, targets) {
        (MatmulAlgorithm::Summa, _) if side * side == ranks as usize && side >= 2 => {
            vec![(Gathered::B, side - 1), (Gathered::A, side - 1)]
        }
        (MatmulAlgorithm::Summa, _) | (_, None) => return None,
        (_, Some((ta, tb))) => match in_rounds(algorithm, (sa, sb), (ta, tb))? {
            InRounds::Ring(of) => vec![(of, ranks as usize - 1)],
            InRounds::Summa => return None,
        },
    };
    let largest = |s: &TensorState| (0..ranks).map(|r| local_bytes(s, ranks, r) as u64).max();
    let with_largest = |(of, n)| (of, n, largest(operand(of, (sa, sb))).unwrap_or(0));
    Some(Rounds::Estimated(rounds.into_iter().map(with_largest).collect()))
}

/// A SUMMA operand's panel on `rank` (its piece's rows of a, `keep` 0, or columns of b, `keep`
/// 1, each whole along the other axis): the movement's bytes at their largest (the piece sent,
/// the panel received and landed), and the panel's extent along each storage axis.
fn panel(state: &TensorState, keep: usize, (ranks, rank): (u64, u64)) -> (u64, [u64; 2]) {
    let mut extent = Side::of(state).extents(rank, ranks);
    extent[1 - keep] = state.shape[1 - keep];
    let bytes = extent.iter().product::<u64>() * state.dtype.size();
    let piece = local_bytes(state, ranks, rank) as u64;
    (piece + 2 * bytes, [extent[0], extent[1]])
}

/// An operand moved to `target` on `rank`: the movement's bytes (scratch and landed piece; none
/// where it stays), and the piece's extent along each storage axis.
fn moved(state: &TensorState, target: &Target, (ranks, rank): (u64, u64)) -> (u64, [u64; 2]) {
    // A vector (the bias) is a matrix of one column.
    let extent = |h: &dyn Holdings| {
        let e = h.extents(rank, ranks);
        [e[0], e.get(1).copied().unwrap_or(1)]
    };
    match target {
        Target::Dist(d) if *d == state.dist => (0, extent(&Side::of(state))),
        Target::Dist(d) => {
            let to = Side {
                dist: d,
                ..Side::of(state)
            };
            (staged_bytes(state, &to, ranks, rank), extent(&to))
        }
        Target::Pieces(custom) => (staged_bytes(state, custom, ranks, rank), extent(custom)),
    }
}

/// The bytes Freivalds' check holds on a rank: the result moved to the rows and columns it
/// checks (at most a second copy of the rank's result, and the exchange's scratch), its vectors,
/// the pre-activation values the run kept for it, and the device's scratch for the largest of
/// its dots (over either axis of any operand or the result: `checks::dots_scratch`).
pub fn check_workspace(
    step: &Matmul,
    inputs: &[TensorState],
    out: &TensorState,
    (ranks, rank): (u64, u64),
) -> u64 {
    let piece = local_bytes(out, ranks, rank) as u64;
    // A nonlinear epilog's pre-activation values, kept from the run (in the compute type).
    let pre = match epilog::nonlinear(step.epilog) {
        true => piece / out.dtype.size() * local::compute_dtype(out.dtype).size(),
        false => 0,
    };
    let whole = |s: &TensorState| Placement::new(&s.dist, &s.shape, ranks).local_shape(rank);
    let vectors: u64 = inputs
        .iter()
        .chain(std::iter::once(out))
        .filter_map(whole)
        .map(|s| s.iter().sum::<u64>() * 32)
        .sum();
    // Over the global shapes: the result may move to whole rows or columns first.
    let dots = (inputs.iter().chain(std::iter::once(out)))
        .map(|t| {
            let (rows, cols) = (t.shape[0] as usize, t.shape.get(1).map_or(1, |&c| c as usize));
            dots_scratch(cols, rows).max(dots_scratch(rows, cols))
        })
        .max()
        .unwrap_or(0);
    3 * piece + vectors + pre + dots
}
