//! What a step runs with: [`StepRun`] hands an op its backend, its plan, its input buffers and
//! its result's place, times its iterations, and keeps the record of what it did; each op's
//! [`Op::run`](crate::ops::Op::run) does the rest.

use super::progress::Progress;
use super::{StepRecord, back_to_back};
use crate::backend::Backend;
use crate::dist::TensorState;
use crate::plan::StepPlan;
use crate::spec::step::Timing;
use anyhow::Result;

/// One step as it runs on this rank.
pub struct StepRun<'a, B: Backend> {
    /// The backend.
    pub b: &'a B,
    /// The step's position in the spec.
    pub index: usize,
    /// The step as planned: its parameters, its inputs' and result's states, its algorithm.
    pub planned: &'a StepPlan,
    /// The input buffers, in the plan's `inputs` order.
    pub inputs: Vec<&'a B::Buf>,
    /// The result's place on the symmetric heap, where it has one: a step may take it and write
    /// its result there; the result is copied into what is left.
    pub dest: Option<B::Buf>,
    /// The spec's seed (for checks that draw random vectors).
    pub seed: u64,
    /// What the step did: its times, work, check and choices.
    pub record: StepRecord,
    progress: &'a Progress,
}

impl<'a, B: Backend> StepRun<'a, B> {
    /// A step about to run, with an empty record.
    pub(super) fn new(
        b: &'a B,
        (index, planned): (usize, &'a StepPlan),
        inputs: Vec<&'a B::Buf>,
        dest: Option<B::Buf>,
        seed: u64,
        progress: &'a Progress,
    ) -> Self {
        let common = planned.step.common();
        let record = StepRecord {
            name: planned.name.clone(),
            op: planned.op,
            warmup: common.warmup,
            times: Vec::new(),
            bandwidth: None,
            flops: None,
            check: None,
            via: None,
            puts_by: None,
            pipeline: None,
            product_layout: None,
            window_slices: None,
            batches: Vec::new(),
        };
        StepRun {
            b,
            index,
            planned,
            inputs,
            dest,
            seed,
            record,
            progress,
        }
    }

    /// The state of input `k`.
    pub fn input_state(&self, k: usize) -> &'a TensorState {
        &self.planned.input_states[k]
    }

    /// The result's state, as stored.
    pub fn out_state(&self) -> &'a TensorState {
        (self.planned.output_state.as_ref()).expect("a planned step that runs has a result")
    }

    /// Whether the step writes its result over its input.
    pub fn in_place(&self) -> bool {
        self.planned.inputs.first() == self.planned.outputs.first()
    }

    /// Whether the spec asks for the step's check.
    pub fn check(&self) -> bool {
        self.planned.step.common().check
    }

    /// How the step's iterations are timed (its trials run alike).
    pub fn timing(&self) -> Timing {
        self.planned.step.common().timing
    }

    /// Runs the step's warm-up and timed iterations; each time is the slowest rank's.
    pub fn timed(&self, mut run: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
        let (b, common) = (self.b, self.planned.step.common());
        if common.timing == Timing::Queued {
            for _ in 0..common.warmup {
                run()?;
            }
            let n = common.iterations;
            let t = back_to_back(b, n, &mut run)?;
            self.progress.iteration(common.warmup, t);
            return Ok(vec![t; n as usize]);
        }
        let mut times = Vec::with_capacity(common.iterations as usize);
        for k in 0..common.warmup + common.iterations {
            let t = back_to_back(b, 1, &mut run)?;
            if k >= common.warmup {
                times.push(t);
            }
            self.progress.iteration(k, t);
        }
        Ok(times)
    }

    /// Testing hook: `DISTRUN_CORRUPT_STEP=i` changes the first element of step i's result
    /// before its check, so that the check must catch it: a float moves by 1000 (|x| + 1), far
    /// past any tolerance (a flipped exponent bit can shrink it below one), an integer has a high
    /// bit flipped.
    pub fn corrupt(&self, out: &mut B::Buf) -> Result<()> {
        let wanted = std::env::var("DISTRUN_CORRUPT_STEP")
            .ok()
            .and_then(|v| v.parse().ok());
        let b = self.b;
        if wanted == Some(self.index) && b.len(out) > 0 {
            let mut bytes = b.download(out)?.into_owned();
            let dtype = self.out_state().dtype;
            let first = &mut bytes[..dtype.size() as usize];
            if dtype.is_float() {
                let (re, im) = crate::init::decode(dtype, first).to_complex();
                let re = re + 1000.0 * (re.abs() + 1.0);
                let moved = match dtype.is_complex() {
                    true => crate::init::Scalar::Complex(re, im),
                    false => crate::init::Scalar::Real(re),
                };
                crate::init::encode(dtype, moved, first);
            } else {
                first[first.len() - 1] ^= 0x40;
            }
            *out = b.upload(bytes)?;
        }
        Ok(())
    }

    /// The record, and the result's place where the step left it.
    pub(super) fn finish(self) -> (StepRecord, Option<B::Buf>) {
        (self.record, self.dest)
    }
}
