//! What a prepared matmul holds on a rank beyond its operands and result, as the plan counts it:
//! the operands moved to where the algorithm multiplies them, the accumulator, the reduced
//! product, the result where the algorithm leaves it, the addend and bias moved beside it, and
//! for a check of a nonlinear epilog the kept pre-activation values. Counted as the CPU runs it
//! (no fused epilog, no rounds of puts: the GPU's fused epilog only drops buffers, and its rounds
//! land on the symmetric heap, which the plan counts apart); the GEMM library's own buffers
//! apart ([`LIBRARY_BYTES`]).

use super::{Reduction, Target, epilog, local, pieces_of, targets};
use crate::dist::{Placement, TensorState};
use crate::ops::exchange::{Holdings, Side};
use crate::ops::movement::{local_bytes, staged_bytes};
use crate::plan::matmul::MatmulChoice;
use crate::spec::step::Matmul;
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
    let (target_a, target_b, reduction) = targets(step, choice, (sa, sb), out, ranks);
    let natural = TensorState {
        dist: choice.natural.clone(),
        layout: Layout::C,
        ..out.clone()
    };
    let c_pieces = step
        .c
        .as_ref()
        .map(|_| pieces_of(&natural, ranks, Layout::C));
    let bias_to = match choice.natural {
        Distribution::Partial => Distribution::Root(0),
        _ => Distribution::Replicated,
    };
    move |rank| {
        let operand = |state: &TensorState, target: &Target| moved(state, target, (ranks, rank));
        let (moved_a, [ra, ca]) = operand(sa, &target_a);
        let (moved_b, [rb, cb]) = operand(sb, &target_b);
        let m_loc = if step.transpose_a { ca } else { ra };
        let n_loc = if step.transpose_b { rb } else { cb };
        let csize = local::compute_dtype(sa.dtype).size();
        let natural_piece = local_bytes(&natural, ranks, rank) as u64;
        let natural_elems = natural_piece / out.dtype.size();
        let direct = matches!(reduction, Reduction::None)
            && step.c.is_none()
            && step.bias.is_none()
            && step.epilog.is_none();
        let acc = if direct { 0 } else { m_loc * n_loc * csize };
        let reduced = match reduction {
            Reduction::None => 0,
            _ => natural_elems * csize,
        };
        let c = match (inputs.get(2), &c_pieces) {
            (Some(sc), Some(pieces)) => staged_bytes(sc, pieces, ranks, rank),
            _ => 0,
        };
        let bias = match inputs.last().filter(|_| step.bias.is_some()) {
            Some(sbias) => staged_bytes(sbias, &side(&bias_to, sbias), ranks, rank),
            None => 0,
        };
        let to_out = if choice.natural == out.dist && out.layout == Layout::C {
            0
        } else {
            staged_bytes(&natural, &side(&out.dist, out), ranks, rank)
                - local_bytes(out, ranks, rank) as u64
        };
        // The result where the algorithm leaves it is the result itself when nothing moves it.
        let natural_buf = if to_out == 0 && choice.natural == out.dist {
            0
        } else {
            natural_piece
        };
        let pre = if check && epilog::nonlinear(step.epilog) {
            natural_elems * csize
        } else {
            0
        };
        moved_a + moved_b + acc + reduced + c + bias + to_out + natural_buf + pre
    }
}

/// The holdings of a tensor shaped like `state` in `dist`, in `state`'s layout.
fn side<'a>(dist: &'a Distribution, state: &'a TensorState) -> Side<'a> {
    Side {
        dist,
        shape: &state.shape,
        layout: state.layout,
    }
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
        Target::Dist(d) if *d == state.dist => (0, extent(&side(&state.dist, state))),
        Target::Dist(d) => {
            let to = side(d, state);
            (staged_bytes(state, &to, ranks, rank), extent(&to))
        }
        Target::Pieces(custom) => (staged_bytes(state, custom, ranks, rank), extent(custom)),
    }
}

/// The bytes Freivalds' check holds on a rank: the result moved to the rows and columns it
/// checks (at most a second copy of the rank's result, and the exchange's scratch), its vectors,
/// and the pre-activation values the run kept for it.
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
    3 * piece + vectors + pre
}
