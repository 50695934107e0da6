//! What each step holds beside its tensors, for every rank (each op's own accounting, in its
//! module: `ops::movement`, `ops::matmul::memory`, `ops::fft::memory`, `ops::movement_check`), what
//! writing the outputs holds, and the symmetric heap NVSHMEM is given: the plan's peak is the
//! most any rank holds at one point, all of these counted.

use super::StepPlan;
use crate::dist::TensorState;
use crate::ops;
use crate::ops::movement::local_bytes;
use crate::spec::step::Step;

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
    let per_rank = |f: &dyn Fn(u64) -> u64| (0..ranks).map(f).collect::<Vec<u64>>();
    let (run, checked): (Vec<u64>, Vec<u64>) = match step {
        Step::Matmul(m) => {
            let choice = (planned.matmul.as_ref()).expect("a planned matmul has an algorithm");
            let run = ops::matmul::memory::workspace(m, choice, inputs, out, ranks, check);
            let checked = |r| ops::matmul::memory::check_workspace(m, inputs, out, (ranks, r));
            (per_rank(&run), per_rank(&checked))
        }
        Step::Fft(f) => {
            let run = |r| ops::fft::memory::workspace(f, &inputs[0], out, (ranks, r));
            let checked = |r| ops::fft::memory::check_workspace(f, &inputs[0], out, (ranks, r));
            (per_rank(&run), per_rank(&checked))
        }
        _ => {
            let run = ops::movement::workspace(step, &inputs[0], out, ranks);
            let checked = ops::movement_check::workspace(step, &inputs[0], out, ranks);
            (per_rank(&run), per_rank(&checked))
        }
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
        check: if check {
            checked
        } else {
            vec![0; ranks as usize]
        },
        heap: if puts {
            heap_room(step, inputs, out, ranks)
        } else {
            0
        },
    }
}

/// Symmetric-heap room for what arrives by puts in a step: the pieces a matmul gathers (at most
/// P times each operand's largest piece: a ring round's buffer is one piece), an FFT's
/// transposed slab (and its inverse's, which its check runs).
fn heap_room(step: &Step, inputs: &[TensorState], out: &TensorState, ranks: u64) -> u64 {
    let gathered = |s: &TensorState| {
        (0..ranks)
            .map(|r| local_bytes(s, ranks, r) as u64)
            .max()
            .unwrap_or(0)
            * ranks
    };
    match step {
        Step::Matmul(_) => gathered(&inputs[0]) + gathered(&inputs[1]),
        Step::Fft(f) => {
            use ops::fft::{check::inverse, symmetric_room};
            let p = ranks as usize;
            let back = match f.common.check {
                true => symmetric_room(&inverse(f), out, &inputs[0], p),
                false => 0,
            };
            (symmetric_room(f, &inputs[0], out, p) + back) as u64
        }
        _ => 0,
    }
}
