//! Planning: every tensor and step resolved for N ranks (local shapes, bytes, symmetric heap,
//! algorithm choices), with no device, no MPI and nothing written.

pub mod figures;
pub mod heap;
pub mod memory;
mod report;
pub mod resolve;

pub use report::{human_bytes, resolved_dist};
pub use resolve::{Resolved, resolve};

use crate::dist::{Placement, TensorState};
use crate::ops::Step;
use crate::spec::diag::Diagnostic;
use crate::spec::model::{CommBackend, Device};
use crate::spec::sweep::Point;
use crate::spec::{Loaded, Sweep, Swept};
use indexmap::IndexMap;

/// One tensor, resolved for N ranks.
#[derive(Debug, Clone)]
pub struct TensorPlan {
    /// As created (in-place steps may change its distribution later: see `states`).
    pub state: TensorState,
    /// Every state it takes, in order.
    pub states: Vec<TensorState>,
    /// Local shape per rank as created; None for a rank that holds nothing (no piece, or a
    /// piece without elements).
    pub local_shapes: Vec<Option<Vec<u64>>>,
    /// Bytes reserved on each rank: the largest local piece over its states.
    pub bytes_per_rank: Vec<u64>,
    /// Offset and bytes on the symmetric heap, for symmetric tensors.
    pub symmetric: Option<(u64, u64)>,
    /// Exists from the start (has an init).
    pub from_start: bool,
    /// Live from this position (step i's position is i)...
    pub first: usize,
    /// ...to this one (the step count means the end of the run).
    pub last: usize,
}

/// One step, resolved (by the meaning pass, which the plan keeps as it is).
#[derive(Debug, Clone)]
pub struct StepPlan {
    /// The step as the spec gives it, defaults filled in: its parameters.
    pub step: Step,
    /// The op name.
    pub op: &'static str,
    /// The step's name (given, or `op#index`).
    pub name: String,
    /// Tensors read.
    pub inputs: Vec<String>,
    /// Tensors written.
    pub outputs: Vec<String>,
    /// The states of the tensors the step reads, in `inputs` order.
    pub input_states: Vec<TensorState>,
    /// The state of the result, as stored.
    pub output_state: Option<TensorState>,
    /// The matmul algorithm chosen and what it moves.
    pub matmul: Option<crate::ops::matmul::MatmulChoice>,
    /// What it holds beside its tensors (filled in by [`plan`]).
    pub memory: memory::StepMemory,
    /// What a report reads of it (filled in by [`plan`]).
    pub figures: figures::Figures,
}

impl StepPlan {
    /// The matmul algorithm, where one was chosen.
    pub fn algorithm(&self) -> Option<&'static str> {
        self.matmul.as_ref().map(|m| m.algorithm.name())
    }
}

/// A spec resolved for a rank count: everything a run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The spec it was made from (its tensors' inits, and the manifest's record of it).
    pub loaded: Loaded,
    /// The rank count.
    pub ranks: u64,
    /// Every tensor.
    pub tensors: IndexMap<String, TensorPlan>,
    /// Every step.
    pub steps: Vec<StepPlan>,
    /// Bytes of the symmetric heap on every rank: its tensors, then the steps' room for puts.
    pub symmetric_heap_bytes: u64,
    /// The part of the heap its tensors take (from its start).
    pub symmetric_tensor_bytes: u64,
    /// Where the spec's backends name `nvshmem`: `NVSHMEM_SYMMETRIC_SIZE`, what each rank gives
    /// NVSHMEM (the heap and NVSHMEM's own margin, rounded up to CUDA's granule).
    pub nvshmem_symmetric_size: Option<u64>,
    /// Bytes writing the outputs holds at most, by rank (a chunk of a tensor streaming to rank 0).
    pub write_bytes: Vec<u64>,
    /// The most bytes a rank holds at once: live tensors, the running step's workspace (or its
    /// check's), the writing's, the GEMM library's buffers, and the heap (or NCCL's windows).
    pub peak_bytes_per_rank: u64,
}

/// What one launch runs: a plan per sweep point (one for a spec without a sweep).
#[derive(Debug, Clone)]
pub struct Plans {
    /// The sweep as its file writes it, for a sweep.
    pub sweep: Option<Sweep>,
    /// Each point and its plan, in order.
    pub points: Vec<(Point, Plan)>,
}

impl Plans {
    /// Plans every point of a spec for `ranks` ranks: the errors of every point at once.
    pub fn new(swept: &Swept, ranks: u64) -> Result<Plans, Vec<Diagnostic>> {
        let plans = swept.per_point(|loaded| plan(loaded, ranks))?;
        Ok(Plans {
            sweep: swept.sweep.clone(),
            points: (swept.points.iter().map(|(p, _)| p.clone()))
                .zip(plans)
                .collect(),
        })
    }

    /// The first point's plan: its spec's job, runtime and output are every point's.
    pub fn first(&self) -> &Plan {
        &self.points[0].1
    }

    /// Every point's plan, in order.
    pub fn each(&self) -> impl Iterator<Item = &Plan> {
        self.points.iter().map(|(_, p)| p)
    }

    /// Every point's plan as it runs on `device` ([`Plan::on_device`]).
    pub fn on_device(&mut self, device: Device) {
        self.points
            .iter_mut()
            .for_each(|(_, p)| p.on_device(device));
    }
}

/// A resolved tensor's plan for `ranks` ranks (None for one never made), live to `end` where
/// given, else to its last use.
fn tensor_plan(info: &resolve::TensorInfo, ranks: u64, end: Option<usize>) -> Option<TensorPlan> {
    let first_state = info.states.first()?;
    let mut bytes_per_rank = vec![0u64; ranks as usize];
    for s in &info.states {
        let placement = Placement::new(&s.dist, &s.shape, ranks);
        for (r, b) in bytes_per_rank.iter_mut().enumerate() {
            let local = placement.local_shape(r as u64);
            let bytes = local.map_or(0, |l| resolve::byte_size(&l, s.dtype).unwrap_or(u64::MAX));
            *b = (*b).max(bytes);
        }
    }
    let placement = Placement::new(&first_state.dist, &first_state.shape, ranks);
    let first = match info.init {
        true => 0,
        false => info.producer.unwrap_or(0),
    };
    let last_use = info
        .used_by
        .iter()
        .copied()
        .max()
        .unwrap_or(first)
        .max(first);
    Some(TensorPlan {
        state: first_state.clone(),
        states: info.states.clone(),
        local_shapes: (0..ranks)
            .map(|r| placement.local_shape(r).filter(|s| !s.contains(&0)))
            .collect(),
        bytes_per_rank,
        symmetric: info.symmetric.then_some((0, 0)),
        from_start: info.init,
        first,
        last: end.unwrap_or(last_use),
    })
}

/// Resolves a loaded spec for `ranks` ranks.
pub fn plan(loaded: &Loaded, ranks: u64) -> Result<Plan, Vec<Diagnostic>> {
    let resolved = resolve(loaded, Some(ranks))?;
    let n_steps = loaded.spec.steps.len();
    let written: Vec<&String> = loaded.spec.output.tensors.iter().collect();
    let mut tensors = IndexMap::new();
    for (name, info) in &resolved.tensors {
        // At the end of the run where it is written, else after its last use.
        let end = written.contains(&name).then_some(n_steps);
        if let Some(t) = tensor_plan(info, ranks, end) {
            tensors.insert(name.clone(), t);
        }
    }
    let symmetric_tensor_bytes = place_symmetric(&mut tensors);
    let nvshmem = nvshmem_named(loaded);
    let puts = puts_room(loaded, ranks, loaded.spec.runtime.device);
    let mut steps = resolved.steps;
    for planned in &mut steps {
        planned.memory = memory::step_memory(planned, ranks, puts);
        planned.figures = planned.step.as_op().figures(planned, ranks);
    }
    let symmetric_heap_bytes =
        symmetric_tensor_bytes + steps.iter().map(|s| s.memory.heap).sum::<u64>();
    // Outputs are written one after another: the most any one takes.
    let streams: Vec<_> = (written.iter())
        .filter_map(|name| tensors.get(name.as_str()))
        .map(|t| crate::dist::whole::streaming_bytes(t.states.last().unwrap_or(&t.state), ranks))
        .collect();
    let write_bytes = (0..ranks)
        .map(|r| streams.iter().map(|bytes| bytes(r)).max().unwrap_or(0))
        .collect();
    let mut plan = Plan {
        loaded: loaded.clone(),
        ranks,
        tensors,
        steps,
        symmetric_heap_bytes,
        symmetric_tensor_bytes,
        nvshmem_symmetric_size: nvshmem.then(|| nvshmem_size(symmetric_heap_bytes)),
        write_bytes,
        peak_bytes_per_rank: 0,
    };
    plan.peak_bytes_per_rank = peak(&plan) + resident(&plan, puts);
    Ok(plan)
}

impl Plan {
    /// The plan as it runs on `device`, the one a spec's `device = "auto"` took: on GPUs, each
    /// step's room for puts within NCCL windows counted in its run memory (see [`puts_room`]).
    pub fn on_device(&mut self, device: Device) {
        let puts = puts_room(&self.loaded, self.ranks, device);
        if puts == puts_room(&self.loaded, self.ranks, self.loaded.spec.runtime.device) {
            return;
        }
        for planned in &mut self.steps {
            planned.memory = memory::step_memory(planned, self.ranks, puts);
        }
        self.peak_bytes_per_rank = peak(self) + resident(self, puts);
    }
}

fn nvshmem_named(loaded: &Loaded) -> bool {
    (loaded.spec.runtime.backends.as_ref()).is_some_and(|b| b.contains(&CommBackend::Nvshmem))
}

/// Where a step's room for puts lies in a run of `ranks` on `device`: NVSHMEM's heap where the
/// backends name it; without it a GPU run of several ranks puts within NCCL windows, each
/// step's own.
fn puts_room(loaded: &Loaded, ranks: u64, device: Device) -> memory::PutsRoom {
    match (nvshmem_named(loaded), device == Device::Cuda && ranks > 1) {
        (true, _) => memory::PutsRoom::Heap,
        (false, true) => memory::PutsRoom::Step,
        (false, false) => memory::PutsRoom::None,
    }
}

/// What a rank holds for puts to the end of the run: the symmetric heap as planned (on a CPU,
/// its tensors as plain buffers); in NCCL windows, the symmetric tensors' window and the
/// barriers' words', each in whole granules.
fn resident(plan: &Plan, puts: memory::PutsRoom) -> u64 {
    match puts {
        memory::PutsRoom::Step => {
            let tensors = match plan.symmetric_tensor_bytes {
                0 => 0,
                bytes => memory::window_bytes(bytes),
            };
            let barriers = crate::backend::cuda::window_puts::barrier_bytes(plan.ranks as usize);
            tensors + memory::window_bytes(barriers as u64)
        }
        _ => plan.symmetric_heap_bytes,
    }
}

/// `NVSHMEM_SYMMETRIC_SIZE` for a heap of `bytes`.
fn nvshmem_size(bytes: u64) -> u64 {
    crate::backend::cuda::nvshmem::symmetric_size(bytes as usize).map_or(u64::MAX, |n| n as u64)
}

fn place_symmetric(tensors: &mut IndexMap<String, TensorPlan>) -> u64 {
    let names: Vec<String> = tensors
        .iter()
        .filter(|(_, t)| t.symmetric.is_some())
        .map(|(n, _)| n.clone())
        .collect();
    let requests: Vec<heap::Request> = names
        .iter()
        .map(|n| {
            let t = &tensors[n];
            heap::Request {
                bytes: t.bytes_per_rank.iter().copied().max().unwrap_or(0),
                first: t.first,
                last: t.last,
            }
        })
        .collect();
    let (offsets, size) = heap::place(&requests);
    for ((name, offset), req) in names.iter().zip(offsets).zip(&requests) {
        tensors[name].symmetric = Some((offset, req.bytes));
    }
    size
}

/// The most bytes any rank holds off the heap at one position: its live non-symmetric tensors,
/// with the step running there (its workspace, or its check's after it) or, at the end, the
/// writing; from the first matmul on, the GEMM library's buffers.
fn peak(plan: &Plan) -> u64 {
    let n_steps = plan.steps.len();
    let first_gemm = (plan.steps.iter()).position(|s| matches!(s.step, Step::Matmul(_)));
    let mut most = 0;
    for pos in 0..=n_steps {
        let library = match first_gemm {
            Some(first) if pos >= first => crate::ops::matmul::memory::LIBRARY_BYTES,
            _ => 0,
        };
        for r in 0..plan.ranks as usize {
            let tensors: u64 = (plan.tensors.values())
                .filter(|t| t.symmetric.is_none() && t.first <= pos && pos <= t.last)
                .map(|t| t.bytes_per_rank[r])
                .sum();
            // A step's buffers are gone when its check runs.
            let beside = match plan.steps.get(pos) {
                Some(s) => {
                    let at = |v: &[u64]| v.get(r).copied().unwrap_or(0);
                    at(&s.memory.run).max(at(&s.memory.check))
                }
                None => plan.write_bytes[r],
            };
            most = most.max(tensors.saturating_add(beside) + library);
        }
    }
    most
}
