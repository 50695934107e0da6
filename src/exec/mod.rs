//! The step loop: initialize the tensors, run every step (warm-up, then timed iterations whose
//! time is the slowest rank's), check results, and hand what ran to the writer.

pub mod expect;
mod progress;
mod write;

use crate::backend::Backend;
use crate::backend::cpu::Cpu;
use crate::ops::step::Prepared;
use crate::plan::{Plan, TensorState};
use crate::runtime::Context;
use crate::spec::Loaded;
use crate::spec::model::Device;
use crate::spec::step::{SendRecvPattern, Step};
use anyhow::{Result, bail};
use expect::{Comparison, Origin};
use progress::Progress;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

/// How a run reports and where it writes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Write the run directory here instead of `<output.dir>/<job.name>-<timestamp>`.
    pub out: Option<PathBuf>,
    /// Only errors on stderr.
    pub quiet: bool,
    /// Every iteration's time too.
    pub verbose: bool,
}

/// What one step did.
#[derive(Debug, Clone)]
pub struct StepRecord {
    /// The step's name.
    pub name: String,
    /// Its op.
    pub op: &'static str,
    /// Untimed runs.
    pub warmup: u32,
    /// Each timed run's time, the slowest rank's, in seconds.
    pub times: Vec<f64>,
    /// Bytes for the algorithm bandwidth, and the bus-bandwidth factor (nccl-tests' formulas).
    pub bandwidth: Option<(f64, f64)>,
    /// The check's outcome, over all ranks.
    pub check: Option<Comparison>,
}

/// Everything a finished run hands to the writer.
pub struct Outcome<B: Backend> {
    /// Per step.
    pub steps: Vec<StepRecord>,
    /// The final buffer of every tensor, with its state.
    pub tensors: HashMap<String, (TensorState, B::Buf)>,
    /// When the run started.
    pub started: chrono::DateTime<chrono::Utc>,
}

/// Runs a validated, planned spec on this rank and writes its run directory. Returns whether
/// every check passed.
pub fn run(loaded: &Loaded, plan: &Plan, ctx: &Context, opts: &Options) -> Result<bool> {
    let backend = Cpu::new(ctx.comm.as_ref());
    let progress = Progress::new(
        ctx.rank() == 0 && !opts.quiet,
        opts.verbose,
        loaded.spec.steps.len(),
    );
    let outcome = execute(&backend, loaded, plan, &progress)?;
    let passed = outcome
        .steps
        .iter()
        .all(|s| s.check.is_none_or(|c| c.passed));
    write::write(&backend, loaded, plan, ctx, opts, outcome, &progress)?;
    Ok(passed)
}

/// What stops a spec before any rank starts: a device or steps whose execution is not built yet.
pub fn preflight(loaded: &Loaded) -> Result<()> {
    if loaded.spec.runtime.device == Device::Cuda {
        bail!(
            "device = \"cuda\": the GPU backend is not built yet; use device = \"cpu\" or \"auto\"; nothing was run"
        );
    }
    let unbuilt: Vec<String> = loaded
        .spec
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Step::Matmul(_) | Step::Fft(_)))
        .map(|(i, s)| format!("steps[{i}] ({})", s.op()))
        .collect();
    if !unbuilt.is_empty() {
        bail!(
            "{} cannot run yet: this version of distrun validates and plans matmul and fft steps \
             but does not execute them; nothing was run",
            unbuilt.join(", ")
        );
    }
    Ok(())
}

fn execute<B: Backend>(
    b: &B,
    loaded: &Loaded,
    plan: &Plan,
    progress: &Progress,
) -> Result<Outcome<B>> {
    let started = chrono::Utc::now();
    let spec = &loaded.spec;
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let mut tensors: HashMap<String, (TensorState, B::Buf)> = HashMap::new();
    let mut origins: HashMap<String, Origin> = HashMap::new();
    for (name, t) in &spec.tensors {
        let Some(init) = &t.init else { continue };
        let state = plan.tensors[name].state.clone();
        let data =
            crate::init::fill_local(init, spec.job.seed, name, &loaded.dir, &state, ranks, rank)?;
        tensors.insert(name.clone(), (state, b.upload(data)?));
        origins.insert(name.clone(), Origin::Init(name.clone()));
    }
    let source = expect::Source {
        spec,
        dir: &loaded.dir,
        ranks,
    };
    let mut records = Vec::new();
    for (i, (step, planned)) in spec.steps.iter().zip(&plan.steps).enumerate() {
        let common = step.common();
        progress.start_step(i, &planned.name, common.warmup + common.iterations);
        if let Step::Barrier(_) = step {
            let mut times = Vec::new();
            for k in 0..common.warmup + common.iterations {
                let t0 = Instant::now();
                b.barrier()?;
                let t = b.max_over_ranks(t0.elapsed().as_secs_f64())?;
                if k >= common.warmup {
                    times.push(t);
                }
                progress.iteration(k, t);
            }
            records.push(StepRecord {
                name: planned.name.clone(),
                op: step.op(),
                warmup: common.warmup,
                times,
                bandwidth: None,
                check: None,
            });
            progress.end_step(records.last().expect("pushed"));
            continue;
        }
        let Some((in_state, out_state)) = planned.states.clone() else {
            bail!("{} steps do not run yet", step.op());
        };
        let (in_name, out_name) = (&planned.inputs[0], &planned.outputs[0]);
        let mut prepared = Prepared::new(b, step, &in_state, &out_state)?;
        let input = &tensors[in_name].1;
        let mut times = Vec::with_capacity(common.iterations as usize);
        for k in 0..common.warmup + common.iterations {
            b.barrier()?;
            let t0 = Instant::now();
            prepared.run(b, input)?;
            b.synchronize()?;
            let t = b.max_over_ranks(t0.elapsed().as_secs_f64())?;
            if k >= common.warmup {
                times.push(t);
            }
            progress.iteration(k, t);
        }
        let sent = b.max_over_ranks(prepared.sent_bytes as f64)?;
        let origin = next_origin(step, &origins[in_name], &in_state, ranks);
        let mut out = prepared.into_output();
        if corrupt_step() == Some(i) && b.len(&out) > 0 {
            // Testing hook: flip one bit of the result so that the check must catch it.
            let mut bytes = b.download(&out)?;
            bytes[0] ^= 1;
            out = b.upload(bytes)?;
        }
        let check = if common.check {
            let want = source.piece(&origin, &out_state, rank)?;
            let got = b.download(&out)?;
            let local = expect::compare(out_state.dtype, &got, &want, reduction(step), ranks);
            Some(Comparison {
                passed: b.max_over_ranks(if local.passed { 0.0 } else { 1.0 })? == 0.0,
                max_error: b.max_over_ranks(local.max_error)?,
            })
        } else {
            None
        };
        records.push(StepRecord {
            name: planned.name.clone(),
            op: step.op(),
            warmup: common.warmup,
            times,
            bandwidth: Some(bandwidth(step, &in_state, &out_state, ranks, sent)),
            check,
        });
        progress.end_step(records.last().expect("pushed"));
        origins.insert(out_name.clone(), origin);
        tensors.insert(out_name.clone(), (out_state, out));
    }
    Ok(Outcome {
        steps: records,
        tensors,
        started,
    })
}

/// `DISTRUN_CORRUPT_STEP=i` corrupts step i's result before its check (to test checks).
fn corrupt_step() -> Option<usize> {
    std::env::var("DISTRUN_CORRUPT_STEP").ok()?.parse().ok()
}

fn reduction(step: &Step) -> Option<crate::spec::step::ReduceOp> {
    match step {
        Step::AllReduce(s) => Some(s.reduce),
        Step::Reduce(s) => Some(s.reduce),
        Step::ReduceScatter(s) => Some(s.reduce),
        _ => None,
    }
}

/// Where a step's result's values come from, given its input's.
fn next_origin(step: &Step, input: &Origin, in_state: &TensorState, ranks: u64) -> Origin {
    let partial = || match input {
        Origin::Init(name) => name.clone(),
        other => unreachable!("a partial tensor comes from its init, not {other:?}"),
    };
    match step {
        Step::AllReduce(s) => Origin::Reduced(partial(), s.reduce),
        Step::Reduce(s) => Origin::Reduced(partial(), s.reduce),
        Step::ReduceScatter(s) => Origin::Reduced(partial(), s.reduce),
        Step::SendRecv(s) => {
            let p = ranks as usize;
            let mut rows = vec![None; p];
            match &s.pairs {
                Some(pairs) => pairs
                    .iter()
                    .for_each(|[src, dst]| rows[*dst as usize] = Some(u64::from(*src))),
                None => match s.pattern {
                    SendRecvPattern::Ring => {
                        (0..p).for_each(|r| rows[(r + 1) % p] = Some(r as u64))
                    }
                },
            }
            Origin::Rows {
                from: Box::new(input.clone()),
                state: in_state.clone(),
                rows,
            }
        }
        _ => input.clone(),
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
