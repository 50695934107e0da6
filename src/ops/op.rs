//! What every op provides, at every stage of a run: its keys, its meaning check, its memory and
//! its run (with its check and the work it counts). [`super::Step`] joins the ops that
//! `ops/mod.rs` registers; `docs/adding-an-op.md` walks through adding one.

use crate::backend::Backend;
use crate::backend::cuda::probe::Lib;
use crate::dist::TensorState;
use crate::exec::StepRun;
use crate::plan::StepPlan;
use crate::plan::figures::Figures;
use crate::plan::memory::Needs;
use crate::plan::resolve::Resolver;
use crate::spec::step::StepCommon;
use anyhow::Result;

/// One op: its spec struct (a `[[steps]]` entry's keys) implements it.
pub trait Op {
    /// The keys every step takes.
    fn common(&self) -> &StepCommon;

    /// The tensors the step reads, with the key that names each.
    fn inputs(&self) -> Vec<(&'static str, &str)>;

    /// The tensor the step writes and the key that names it (`input` for an in-place step).
    fn output(&self) -> Option<(&'static str, &str)>;

    /// The meaning check of step `i`, given its inputs' states (in [`Op::inputs`] order): the
    /// state of its result, or None where it has none or a problem was reported to `r`. What
    /// the op decides here beyond the result (a matmul's algorithm) goes into `plan`.
    fn resolve(
        &self,
        r: &mut Resolver<'_>,
        i: usize,
        ins: &[TensorState],
        plan: &mut StepPlan,
    ) -> Option<TensorState>;

    /// What the step holds beside its inputs and result, as planned (`out`: its result's
    /// state), for every rank.
    fn needs<'a>(&'a self, planned: &'a StepPlan, out: &'a TensorState, ranks: u64) -> Needs<'a>;

    /// What the step is in a report's figures, as planned for `ranks` ranks (default: its first
    /// input's bytes, count and dtype, its reduction and root).
    fn figures(&self, planned: &StepPlan, ranks: u64) -> Figures {
        Figures::of_input(planned, ranks)
    }

    /// How the step runs for `ranks` ranks, as the plan shows it: its algorithm's name and what
    /// it does, in a few words (None: the plan's own record says, as a matmul's choice does).
    fn describe(&self, _planned: &StepPlan, _ranks: u64) -> Option<(String, String)> {
        None
    }

    /// The GPU library the op needs beside the driver, NVRTC and NCCL.
    fn library(&self) -> Option<Lib> {
        None
    }

    /// Prepares the step, runs its warm-up and timed iterations, counts its work and, with
    /// `check`, checks it, all into `run`'s record; returns its result.
    fn run<B: Backend>(&self, run: &mut StepRun<'_, B>) -> Result<Option<B::Buf>>
    where
        Self: Sized;
}
