//! What each step holds beside its tensors, for every rank (each op's own accounting, in its
//! module: `ops::movement`, `ops::matmul::memory`, `ops::fft::memory`, `ops::movement_check`), what
//! writing the outputs holds, and the symmetric heap NVSHMEM is given: the plan's peak is the
//! most any rank holds at one point, all of these counted.

use super::StepPlan;
use crate::dist::TensorState;
use crate::ops;
use crate::ops::movement::local_bytes;
use crate::spec::step::{Fft, Step};

/// One step's memory beyond its inputs and result.
#[derive(Debug, Clone, Default)]
pub struct StepMemory {
    /// Bytes the prepared step holds while it runs, by rank (scratch, moved operands, an in-place
    /// step's new result while the old lives).
    pub run: Vec<u64>,
    /// Bytes its check holds after it (when the step's own buffers are gone), by rank (zeros
    /// without `check`).
    pub check: Vec<u64>,
    /// Room on the symmetric heap for what puts move in the step, on every rank (only where the
    /// spec's backends name `nvshmem`; symmetric buffers stay to the end of the run).
    pub heap: u64,
}

/// The memory of a step as planned (nothing for a step without a result).
pub fn step_memory(planned: &StepPlan, ranks: u64, puts: bool) -> StepMemory {
    let step = &planned.step;
    let Some(out) = &planned.output_state else {
        return StepMemory::default();
    };
    let inputs = &planned.input_states;
    let check = step.common().check;
    let in_place = planned.inputs.first() == planned.outputs.first();
    // Each rank's bytes; a check's only where the step has one.
    let per_rank = |f: &dyn Fn(u64) -> u64| (0..ranks).map(f).collect::<Vec<u64>>();
    let checked = |f: &dyn Fn(u64) -> u64| match check {
        true => per_rank(f),
        false => vec![0; ranks as usize],
    };
    let (run, checked, heap): (Vec<u64>, Vec<u64>, u64) = match step {
        Step::Matmul(m) => {
            let choice = (planned.matmul.as_ref()).expect("a planned matmul has an algorithm");
            let run = ops::matmul::memory::workspace(m, choice, inputs, out, ranks, check);
            let check = |r| ops::matmul::memory::check_workspace(m, inputs, out, (ranks, r));
            let heap = gathered_room(&inputs[0], ranks) + gathered_room(&inputs[1], ranks);
            (per_rank(&run), checked(&check), heap)
        }
        Step::Fft(f) => {
            let run = |r| ops::fft::memory::workspace(f, &inputs[0], out, (ranks, r));
            let check = |r| ops::fft::memory::check_workspace(f, &inputs[0], out, (ranks, r));
            (
                per_rank(&run),
                checked(&check),
                fft_room(f, &inputs[0], out, ranks),
            )
        }
        Step::Redistribute(_)
        | Step::AllReduce(_)
        | Step::Reduce(_)
        | Step::Broadcast(_)
        | Step::AllGather(_)
        | Step::ReduceScatter(_)
        | Step::AllToAll(_)
        | Step::Gather(_)
        | Step::Scatter(_)
        | Step::SendRecv(_) => {
            let run = ops::movement::workspace(step, &inputs[0], out, ranks);
            let check = ops::movement_check::workspace(step, &inputs[0], out, ranks);
            // A movement puts straight into its result, a tensor on the heap already.
            (per_rank(&run), checked(&check), 0)
        }
        Step::Barrier(_) => return StepMemory::default(),
    };
    // An in-place step's result is a new buffer while its input still lives.
    let run = match in_place {
        true => (0..ranks)
            .zip(run)
            .map(|(r, b)| b + local_bytes(out, ranks, r) as u64)
            .collect(),
        false => run,
    };
    StepMemory {
        run,
        check: checked,
        heap: if puts { heap } else { 0 },
    }
}

/// Symmetric-heap room for an operand a matmul gathers by puts: at most P times its largest
/// piece (a ring round's buffer is one piece).
fn gathered_room(operand: &TensorState, ranks: u64) -> u64 {
    let largest = (0..ranks)
        .map(|r| local_bytes(operand, ranks, r) as u64)
        .max();
    largest.unwrap_or(0) * ranks
}

/// Symmetric-heap room for an FFT's transposed slab by puts (and its inverse's, which its
/// check runs).
fn fft_room(f: &Fft, input: &TensorState, out: &TensorState, ranks: u64) -> u64 {
    use ops::fft::{check::inverse, symmetric_room};
    let p = ranks as usize;
    let back = match f.common.check {
        true => symmetric_room(&inverse(f), out, input, p),
        false => 0,
    };
    (symmetric_room(f, input, out, p) + back) as u64
}
