//! What each step holds beside its tensors, for every rank (each op's own accounting, its
//! [`Op::needs`](crate::ops::Op::needs), beside its code), what
//! writing the outputs holds, and the symmetric heap NVSHMEM is given: the plan's peak is the
//! most any rank holds at one point, all of these counted.

use super::StepPlan;
use crate::ops::movement::local_bytes;

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

/// An op's own accounting of a step (see [`crate::ops::Op::needs`]).
pub struct Needs<'a> {
    /// Bytes the prepared step holds while it runs, by rank.
    pub run: Box<dyn Fn(u64) -> u64 + 'a>,
    /// Bytes its check holds, by rank (where the step has one).
    pub check: Box<dyn Fn(u64) -> u64 + 'a>,
    /// The symmetric buffers the step reserves for what puts move in it, each's bytes (the
    /// same on every rank): room on the heap, or one NCCL window each.
    pub puts: Vec<u64>,
}

impl Needs<'_> {
    /// Nothing beside the step's tensors.
    pub fn none() -> Self {
        Needs {
            run: Box::new(|_| 0),
            check: Box::new(|_| 0),
            puts: Vec::new(),
        }
    }
}

/// Where a step's room for puts ([`Needs::puts`]) lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutsRoom {
    /// No puts: no room.
    None,
    /// On NVSHMEM's symmetric heap, to the end of the run (`nvshmem` in the backends).
    Heap,
    /// In NCCL windows the step holds while it runs (a GPU run of several ranks without
    /// NVSHMEM): counted in its run memory, each buffer's window as [`window_bytes`] rounds it.
    Step,
}

/// What `ncclMemAlloc` rounds a window up to: CUDA's recommended granularity for memory that
/// peers map (2 MiB on the H100 and H200).
pub const WINDOW_GRANULE: u64 = 2 << 20;

/// The device memory an NCCL window for `bytes` takes: whole granules, at least one.
pub fn window_bytes(bytes: u64) -> u64 {
    bytes.max(1).div_ceil(WINDOW_GRANULE) * WINDOW_GRANULE
}

/// The memory of a step as planned (nothing for a step without a result): its op's [`Needs`],
/// an in-place step's new result, and its room for puts where `puts` says.
pub fn step_memory(planned: &StepPlan, ranks: u64, puts: PutsRoom) -> StepMemory {
    let Some(out) = &planned.output_state else {
        return StepMemory::default();
    };
    let needs = planned.step.as_op().needs(planned, out, ranks);
    let checked = planned.step.common().check;
    let in_place = planned.inputs.first() == planned.outputs.first();
    let new_result = |r| match in_place {
        true => local_bytes(out, ranks, r) as u64,
        false => 0,
    };
    let windows = match puts {
        PutsRoom::Step => needs.puts.iter().copied().map(window_bytes).sum(),
        _ => 0,
    };
    StepMemory {
        run: (0..ranks)
            .map(|r| (needs.run)(r) + new_result(r) + windows)
            .collect(),
        check: (0..ranks)
            .map(|r| if checked { (needs.check)(r) } else { 0 })
            .collect(),
        heap: match puts {
            PutsRoom::Heap => needs.puts.iter().sum(),
            _ => 0,
        },
    }
}
