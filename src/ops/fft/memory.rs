//! What a prepared FFT, and its check, hold on a rank beyond the input and result, as the plan
//! counts it: the input moved to the working slab, each phase's result, the transposes' scratch
//! (an exchange's, or the batched transposes' landing and send buffers, which are no larger;
//! column batch by column batch, its send, receive, landing and second-phase buffers; down long
//! columns from y-slabs, one batch's rows and the send, receive and landing buffers),
//! the way back to the result's distribution, and the CPU's copies in its local phases (as much
//! as the GPU's scratch for long transforms down columns takes: at most a phase's piece). The
//! library's own plans and scratch (cuFFT's work area, rustfft's per-thread scratch of one
//! line) are not counted.

use super::{
    Fft, FftKind, Slabs, as_slabs, check::inverse, columns, holds_whole, long_columns, middle,
    symmetric_rooms,
};
use crate::dist::TensorState;
use crate::ops::exchange::Side;
use crate::ops::movement::{local_bytes, staged_bytes};
use crate::ops::checks::lanes_scratch;

/// The bytes an FFT from `input` to `out` holds on each rank beyond both, by rank. The states it
/// works through are worked out once for all ranks: each takes time that grows with the ranks.
pub fn workspace(
    step: &Fft,
    input: &TensorState,
    out: &TensorState,
    ranks: u64,
) -> Box<dyn Fn(u64) -> u64> {
    if holds_whole(input, ranks) {
        let (step, input, out) = (step.clone(), input.clone(), out.clone());
        return Box::new(move |rank| whole_workspace(&step, &input, &out, (ranks, rank)));
    }
    let [input, out] = as_slabs(input, out, ranks);
    let slabs = Slabs::of(step, &input, &out, ranks);
    let middle = slabs.on(&middle(step, &input, &out, slabs.s0), true);
    let work_in = slabs.on(&input, true);
    let transposed = slabs.on(&middle, false);
    let natural = slabs.on(&out, false);
    // Landing transposed, column batch by column batch (see `columns.rs`): the result in C
    // order before it moves on.
    let by_columns = slabs.transposed.then(|| slabs.natural(&out));
    let long = long_columns::applies(&middle, slabs.s0, ranks as usize);
    let (kind, batches) = (step.kind, step.batches);
    Box::new(move |rank| {
        let piece = |s: &TensorState| local_bytes(s, ranks, rank) as u64;
        let staged =
            |from: &TensorState, to: &TensorState| staged_bytes(from, &Side::of(to), ranks, rank);
        let to_work = match work_in == input {
            true => 0,
            false => staged(&input, &work_in),
        };
        // The second phase's result is the result itself when it is where the result goes.
        let back_from = |natural: &TensorState| match *natural == out {
            true => 0,
            false => piece(natural) + staged(natural, &out) - piece(&out),
        };
        // The CPU's local phases work on a copy of their input, beside their result (an r2c's
        // complex lines, a c2r's real ones).
        let phases = (piece(&work_in) + piece(&middle)).max(match kind {
            FftKind::C2r => piece(&transposed) + piece(&natural),
            _ => piece(&transposed),
        });
        let p = (ranks as usize, rank as usize);
        if let Some(natural) = &by_columns {
            let columns = columns::workspace(&middle, natural, p, batches);
            if columns > 0 {
                return to_work + piece(&middle) + columns + back_from(natural) + phases;
            }
        }
        // Down long columns from y-slabs its own buffers; otherwise the exchange's (no larger).
        let moved = (long.then(|| long_columns::workspace(&middle, &transposed, p, batches)))
            .filter(|&bytes| bytes > 0)
            .unwrap_or_else(|| staged(&middle, &transposed));
        to_work + piece(&middle) + moved + back_from(&natural) + phases
    })
}

/// The bytes an FFT's check holds on each rank, by rank: the round trip's result, beside the
/// inverse transform's workspace while it runs; for a c2r then the planes of its first and last
/// bins, whole, of the input and of the round trip (staged through one buffer, then both as
/// complex f64 values); and the scratch of its sums of energies and gaps, weighted along the
/// last axis.
pub fn check_workspace(
    step: &Fft,
    input: &TensorState,
    out: &TensorState,
    ranks: u64,
) -> Box<dyn Fn(u64) -> u64> {
    let inverse = workspace(&inverse(step), out, input, ranks);
    let planes = match step.kind {
        FftKind::C2r => {
            // At most two bins per plane.
            let planes: u64 = 2 * input.shape[..input.shape.len() - 1].iter().product::<u64>();
            planes * input.dtype.size() + 2 * planes * 16
        }
        _ => 0,
    };
    let last = |s: &TensorState| *s.shape.last().unwrap_or(&1) as usize;
    let sums = lanes_scratch(last(input).max(last(out)));
    let input = input.clone();
    Box::new(move |rank| {
        let round_trip = local_bytes(&input, ranks, rank) as u64;
        // The inverse's workspace is gone by the time the planes are gathered or the sums taken.
        round_trip + inverse(rank).max(planes).max(sums)
    })
}

/// The symmetric buffers an FFT's moves by puts take (and its inverse's, which its check runs),
/// each's bytes.
pub fn puts_rooms(f: &Fft, input: &TensorState, out: &TensorState, ranks: u64) -> Vec<u64> {
    let p = ranks as usize;
    let mut rooms = symmetric_rooms(f, input, out, p);
    if f.common.check {
        rooms.extend(symmetric_rooms(&inverse(f), out, input, p));
    }
    rooms.into_iter().map(|b| b as u64).collect()
}

/// The bytes an FFT on a rank that holds the whole tensor holds beyond its input and result:
/// the input moved to C order (where it is not, and the transform does not take it as it is),
/// the result in C order before it moves to its layout, and the CPU's copy of the input and its
/// working lines in the one local phase (as much as the GPU's copy of a c2r's input and its
/// scratch for a long axis 0 planned apart take: two complex pieces).
fn whole_workspace(
    step: &Fft,
    input: &TensorState,
    out: &TensorState,
    (ranks, rank): (u64, u64),
) -> u64 {
    let piece = |s: &TensorState| local_bytes(s, ranks, rank) as u64;
    let staged =
        |from: &TensorState, to: &TensorState| staged_bytes(from, &Side::of(to), ranks, rank);
    let [work_in, natural] = super::whole_ends(step, input, out, ranks);
    let to_work = match work_in == *input {
        true => 0,
        false => staged(input, &work_in),
    };
    let back = match natural == *out {
        true => 0,
        false => piece(&natural) + staged(&natural, out) - piece(out),
    };
    to_work + back + piece(&work_in) + piece(&natural).max(piece(&work_in))
}
