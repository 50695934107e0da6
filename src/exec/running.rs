//! One step of each kind, run: prepared (its way picked by trial runs where it has two), timed,
//! its work counted (flops or bytes) and, with `check`, checked against what it should give.

use super::progress::Progress;
use super::{Chosen, StepRecord, pick_pipeline, pick_via, timed};
use crate::backend::Backend;
use crate::dist::TensorState;
use crate::ops::fft::{self, PreparedFft};
use crate::ops::matmul::{PreparedMatmul, Ways, freivalds};
use crate::ops::movement::Prepared;
use crate::ops::movement_check;
use crate::plan::StepPlan;
use crate::spec::step::{Fft, FftKind, Matmul, MatmulPipeline, Step};
use anyhow::Result;

/// What every kind of step runs with.
pub(super) struct Run<'a, B: Backend> {
    /// The backend.
    pub b: &'a B,
    /// The step's position in the spec.
    pub index: usize,
    /// The step as the spec gives it.
    pub step: &'a Step,
    /// The step as planned (input states, the matmul algorithm).
    pub planned: &'a StepPlan,
    /// The input buffers, in the plan's `inputs` order.
    pub inputs: Vec<&'a B::Buf>,
    /// The result's state (as stored).
    pub out_state: &'a TensorState,
    /// Where iterations and notes are reported.
    pub progress: &'a Progress,
}

/// A matmul: in rounds or whole (trials for `pipeline = "auto"`), Freivalds' check.
pub(super) fn matmul<B: Backend>(
    run: &Run<'_, B>,
    m: &Matmul,
    seed: u64,
    record: &mut StepRecord,
) -> Result<B::Buf> {
    let (b, planned, out_state, inputs) = (run.b, run.planned, run.out_state, &run.inputs);
    let common = run.step.common();
    let choice = planned
        .matmul
        .as_ref()
        .expect("a planned matmul has an algorithm");
    let prepare = |rounds| {
        let states = &planned.input_states;
        let ways = Ways {
            keep_pre: common.check,
            rounds,
        };
        PreparedMatmul::new(b, m, choice, states, out_state, ways)
    };
    let mut prepared = prepare(m.pipeline != MatmulPipeline::Whole)?;
    if prepared.in_rounds() {
        let mut trials = None;
        if m.pipeline == MatmulPipeline::Auto {
            let ways = [prepared, prepare(false)?];
            let (faster, times) = pick_pipeline(b, ways, inputs)?;
            (prepared, trials) = (faster, Some(times));
        }
        let chosen = match prepared.in_rounds() {
            true => MatmulPipeline::Rounds,
            false => MatmulPipeline::Whole,
        };
        record.pipeline = Some(Chosen {
            way: chosen,
            trials,
        });
    }
    record.times = timed(b, run.step, run.progress, || prepared.run(b, inputs))?;
    let (mm, k) = (
        out_state.shape[0] as f64,
        matmul_k(m, &planned.input_states[0]) as f64,
    );
    let per_fma = if out_state.dtype.is_complex() {
        8.0
    } else {
        2.0
    };
    record.flops = Some(per_fma * mm * out_state.shape[1] as f64 * k);
    let (mut out, pre) = prepared.into_output();
    corrupt(b, run.index, out_state.dtype, &mut out)?;
    if common.check {
        let operands: Vec<(&TensorState, &B::Buf)> = planned
            .input_states
            .iter()
            .zip(inputs.iter().copied())
            .collect();
        let result = (out_state, &out);
        record.check = Some(freivalds::check(b, m, &operands, result, pre, seed)?);
    }
    Ok(out)
}

/// An FFT: its transposes by NCCL or puts (trials), the round trip and Parseval's check.
pub(super) fn fft<B: Backend>(
    run: &Run<'_, B>,
    f: &Fft,
    record: &mut StepRecord,
) -> Result<B::Buf> {
    let (b, out_state, input) = (run.b, run.out_state, run.inputs[0]);
    let in_state = &run.planned.input_states[0];
    let mut prepared = PreparedFft::new(b, f, in_state, out_state)?;
    if prepared.can_put() {
        let trial = |p: &mut PreparedFft<B>| p.run(b, input);
        record.via = Some(pick_via(b, &mut prepared, PreparedFft::set_via, trial)?);
    }
    record.times = timed(b, run.step, run.progress, || prepared.run(b, input))?;
    // 5 n log2 n per complex transform (real ones count half).
    let points: f64 = match f.kind {
        FftKind::C2r => out_state.shape.iter().map(|&x| x as f64).product(),
        _ => in_state.shape.iter().map(|&x| x as f64).product(),
    };
    let real = if f.kind == FftKind::C2c { 1.0 } else { 0.5 };
    record.flops = Some(real * 5.0 * points * points.log2());
    let mut out = prepared.into_output();
    corrupt(b, run.index, out_state.dtype, &mut out)?;
    if run.step.common().check {
        let result = (out_state, &out);
        record.check = Some(fft::check::check(b, f, (in_state, input), result)?);
    }
    Ok(out)
}

/// A collective or redistribution into `dest` (its symmetric place) where given: by NCCL or
/// puts (trials), its bytes for the bandwidth, and its check against its actual input (an exact
/// fingerprint for a move, the reduction recomputed for a reducing step).
pub(super) fn movement<B: Backend>(
    run: &Run<'_, B>,
    dest: Option<B::Buf>,
    record: &mut StepRecord,
) -> Result<B::Buf> {
    let (b, step, out_state, input) = (run.b, run.step, run.out_state, run.inputs[0]);
    let ranks = b.ranks() as u64;
    let in_state = &run.planned.input_states[0];
    let mut prepared = Prepared::new(b, step, in_state, out_state, dest)?;
    if prepared.can_put() {
        let trial = |p: &mut Prepared<B>| p.run(b, input);
        record.via = Some(pick_via(b, &mut prepared, Prepared::set_via, trial)?);
    }
    record.times = timed(b, step, run.progress, || prepared.run(b, input))?;
    let sent = b.max_over_ranks(prepared.sent_bytes as f64)?;
    record.bandwidth = Some(bandwidth(step, in_state, out_state, ranks, sent));
    let mut out = prepared.into_output();
    corrupt(b, run.index, out_state.dtype, &mut out)?;
    if step.common().check {
        let (input, result) = ((in_state, input), (out_state, &out));
        record.check = Some(match reduction(step) {
            Some(op) => movement_check::reduced(b, op, input, result)?,
            None => movement_check::moved(b, step, input, result)?,
        });
    }
    Ok(out)
}

/// Testing hook: `DISTRUN_CORRUPT_STEP=i` flips a high bit of the first element of step i's
/// result (an exponent bit for floats) before its check, so that the check must catch it.
fn corrupt<B: Backend>(
    b: &B,
    step: usize,
    dtype: crate::spec::tensor::DType,
    out: &mut B::Buf,
) -> Result<()> {
    let wanted = std::env::var("DISTRUN_CORRUPT_STEP")
        .ok()
        .and_then(|v| v.parse().ok());
    if wanted == Some(step) && b.len(out) > 0 {
        let mut bytes = b.download(out)?.into_owned();
        bytes[dtype.size() as usize - 1] ^= 0x40;
        *out = b.upload(bytes)?;
    }
    Ok(())
}

/// The inner dimension of a matmul, from a's shape.
fn matmul_k(m: &crate::spec::step::Matmul, a: &TensorState) -> u64 {
    if m.transpose_a {
        a.shape[0]
    } else {
        a.shape[1]
    }
}

fn reduction(step: &Step) -> Option<crate::spec::step::ReduceOp> {
    match step {
        Step::AllReduce(s) => Some(s.reduce),
        Step::Reduce(s) => Some(s.reduce),
        Step::ReduceScatter(s) => Some(s.reduce),
        _ => None,
    }
}

/// nccl-tests' bytes and bus factor for a step (`sent`: the most bytes a rank sent).
fn bandwidth(
    step: &Step,
    input: &TensorState,
    output: &TensorState,
    ranks: u64,
    sent: f64,
) -> (f64, f64) {
    let p = ranks as f64;
    let whole = |s: &TensorState| s.shape.iter().product::<u64>() as f64 * s.dtype.size() as f64;
    let spread = (p - 1.0) / p;
    match step {
        Step::AllReduce(_) => (whole(input), 2.0 * spread),
        Step::Reduce(_) | Step::Broadcast(_) => (whole(input), 1.0),
        Step::ReduceScatter(_) | Step::Gather(_) | Step::Scatter(_) => (whole(input), spread),
        Step::AllGather(_) => (whole(output), spread),
        Step::AllToAll(_) => (whole(input) / p, spread),
        Step::SendRecv(_) => (whole(input) / p, 1.0),
        // Redistribute: the global tensor; the bus carries what the busiest rank sends.
        _ => (
            whole(input),
            if whole(input) > 0.0 {
                sent / whole(input)
            } else {
                0.0
            },
        ),
    }
}
