//! The step loop: initialize the tensors, run every step (each op's own run, over the
//! [`StepRun`] in `running.rs` that times its iterations, the slowest rank's time), and hand what
//! ran to the writer.

pub mod memory;
mod progress;
mod running;
mod terminal;
mod write;

pub use progress::{Progress, mark_start};
pub use running::StepRun;

use crate::backend::cpu::Cpu;
use crate::backend::cuda::{self, Cuda};
use crate::backend::{Backend, Puts};
use crate::dist::TensorState;
use crate::ops::Comparison;
use crate::ops::matmul::MatmulPipeline;
use crate::plan::{Plan, Plans};
use crate::runtime::{self, Context, Start};
use crate::spec::Loaded;
use crate::spec::model::{CommBackend, Device};
use crate::spec::step::Timing;
use crate::spec::tensor::Layout;
use anyhow::{Result, bail};
use std::collections::HashMap;
use std::path::PathBuf;

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
    /// Floating-point operations of one run (matmul: 2mnk, 8mnk for complex).
    pub flops: Option<f64>,
    /// The check's outcome, over all ranks.
    pub check: Option<Comparison>,
    /// Where the trial runs chose how a step's data travels (a movement into a symmetric result, an
    /// FFT's transpose): by NCCL or puts (`Nvshmem`), with the trial times in that order.
    pub via: Option<Chosen<CommBackend>>,
    /// What carried the puts where `via` is set ([`crate::backend::Puts::name`]).
    pub puts_by: Option<&'static str>,
    /// How a matmul's gathered operand traveled where it could go in rounds (`Rounds` or
    /// `Whole`), with the trial times (rounds, whole) where trial runs chose.
    pub pipeline: Option<Chosen<MatmulPipeline>>,
    /// The layout a matmul's GEMM wrote its product in (the result's, or the other, changed
    /// after), where the spec pinned it or trial runs weighed both (their times in the order
    /// C, F).
    pub product_layout: Option<Chosen<Layout>>,
    /// Where that operand, gathered whole, moved slice by slice within NCCL windows (by the
    /// copy engines, under the GEMMs), the slices.
    pub window_slices: Option<usize>,
    /// How many batches each batched transpose of an FFT ran in, in order (none where every
    /// move went whole).
    pub batches: Vec<usize>,
}

/// One of two ways to run a step, and where trial runs chose it, the median trial time of each
/// way (seconds, slowest rank), in the ways' order.
#[derive(Debug, Clone, Copy)]
pub struct Chosen<T> {
    /// The way the step ran.
    pub way: T,
    /// The trials' times, where trials chose.
    pub trials: Option<[f64; 2]>,
}

impl StepRecord {
    /// The fastest, median and slowest timed run, in seconds (zeros when none ran).
    pub fn min_median_max(&self) -> (f64, f64, f64) {
        let mut sorted = self.times.clone();
        sorted.sort_by(f64::total_cmp);
        let at = |i: usize| sorted.get(i).copied().unwrap_or(0.0);
        (
            at(0),
            at(sorted.len() / 2),
            at(sorted.len().saturating_sub(1)),
        )
    }
}

/// Everything a finished run of one plan (a sweep point) hands to the writer.
pub struct Outcome<B: Backend> {
    /// Per step.
    pub steps: Vec<StepRecord>,
    /// The final buffer of every tensor, with its state.
    pub tensors: HashMap<String, (TensorState, B::Buf)>,
}

/// Runs every point's plan on this rank, in turn on the same process group and `device` (as
/// [`device`] chose), and writes their run directory. Returns whether every check passed.
pub fn run(plans: &Plans, ctx: &Context, opts: &Options, device: Device) -> Result<bool> {
    let plan = plans.first();
    let loaded = &plan.loaded;
    let since = memory::counted::Since::now();
    let progress = Progress::new(
        ctx.rank() == 0 && !opts.quiet,
        opts.verbose,
        loaded.spec.steps.len(),
    );
    progress.since_start("spec planned, process group up");
    if device == Device::Cuda {
        let started = std::time::Instant::now();
        // NVSHMEM's heap is the plan's, to the byte (`Plan::nvshmem_symmetric_size`); a
        // sweep's points' together (the backend keeps symmetric buffers to the end).
        let heap = plan
            .nvshmem_symmetric_size
            .map(|_| plans.each().map(|p| p.symmetric_heap_bytes).sum::<u64>() as usize);
        let mut backend = Cuda::new(
            ctx.group(),
            &ctx.host,
            &loaded.spec.runtime.device_map,
            heap,
        )?;
        for (what, seconds) in backend.startup() {
            progress.setup(what, *seconds);
        }
        progress.setup("GPU backend up", started.elapsed().as_secs_f64());
        if opts.verbose && ctx.size() > 1 {
            last_rank_up(&backend, &progress)?;
        }
        let room = memory::Room::Device {
            free: backend.free_memory()?,
            heap_taken: heap.map_or(0, |b| b as u64) + backend.windows_held(),
        };
        for plan in plans.each() {
            memory::preflight(ctx, plan, room)?;
        }
        match run_on(&backend, plans, ctx, opts, &progress, since) {
            Ok(passed) => {
                let closing = std::time::Instant::now();
                drop(backend);
                progress.setup("GPU backend shut down", closing.elapsed().as_secs_f64());
                Ok(passed)
            }
            Err(e) => {
                backend.abandon_nvshmem();
                // Peers may wait on this GPU in NCCL or an NVSHMEM barrier, and tearing the
                // backend down could wait on them: the rank fails (ending the job) before it
                // drops.
                ctx.fail(&e)
            }
        }
    } else {
        let room = memory::Room::Host {
            available: memory::host_available().unwrap_or(u64::MAX),
            ranks_here: memory::ranks_on_this_host(ctx)?,
        };
        for plan in plans.each() {
            memory::preflight(ctx, plan, room)?;
        }
        // Refused before the group starts (see `preflight`): a group joined over TCP only
        // coordinates.
        let Some(comm) = ctx.comm() else {
            bail!("the CPU backend moves data through MPI, which this process group lacks");
        };
        run_on(&Cpu::new(comm), plans, ctx, opts, &progress, since)
    }
}

/// Runs the points in turn, each written (and its tensors freed) before the next starts.
fn run_on<B: Backend>(
    b: &B,
    plans: &Plans,
    ctx: &Context,
    opts: &Options,
    progress: &Progress,
    since: memory::counted::Since,
) -> Result<bool> {
    let mut writer = write::Writer::new();
    let mut failed: Vec<String> = Vec::new();
    for (point, plan) in &plans.points {
        let sweep = plans.sweep.as_ref().map(|_| point);
        if let Some(point) = sweep {
            progress.line(&format!("distrun: {}", point.describe()));
        }
        let outcome = execute(b, plan, progress)?;
        failed.extend((outcome.steps.iter()).filter_map(|s| {
            let c = s.check.filter(|c| !c.passed)?;
            let at = sweep
                .map(|p| format!(" at {}", p.describe()))
                .unwrap_or_default();
            Some(format!("{}{at} (max error {:.3e})", s.name, c.max_error))
        }));
        writer.point((b, opts), plan, sweep, outcome, progress)?;
    }
    writer.finish(b, plans, ctx, since, progress)?;
    // Quiet runs print nothing else: a failure still gets its line.
    if opts.quiet && ctx.rank() == 0 && !failed.is_empty() {
        eprintln!("distrun: check failed: {}", failed.join(", "));
    }
    Ok(failed.is_empty())
}

/// Checks, before anything runs, where the run directory goes: rank 0 tries (see
/// [`write::check_place`]); when that fails, it says why, followed by "nothing was run", and
/// every rank returns [`crate::runtime::Reported`].
pub fn check_output(plans: &Plans, ctx: &Context, opts: &Options) -> Result<()> {
    let plan = plans.first();
    let why = (ctx.rank() == 0)
        .then(|| write::check_place(&plan.loaded.spec, plan.ranks, opts.out.as_deref()).err())
        .flatten();
    ctx.stop_together(why.map(|e| format!("{e:#}; nothing was run")))
}

/// The libraries a spec's steps need on the GPU: cuBLAS for matmul, cuFFT for FFTs, beside the
/// driver, NVRTC and NCCL that every GPU run loads.
fn gpu_libs(loaded: &Loaded) -> Vec<cuda::probe::Lib> {
    use cuda::probe::Lib;
    let mut libs = vec![Lib::Driver, Lib::Nvrtc, Lib::Nccl];
    for lib in loaded.spec.steps.iter().filter_map(|s| s.as_op().library()) {
        if !libs.contains(&lib) {
            libs.push(lib);
        }
    }
    libs
}

/// The device this process would run on: `auto` takes the GPU when the libraries the spec
/// needs load and a GPU is visible.
pub fn device_here(loaded: &Loaded) -> Device {
    match loaded.spec.runtime.device {
        Device::Auto if cuda::probe::available(&gpu_libs(loaded)) => Device::Cuda,
        Device::Cuda => Device::Cuda,
        _ => Device::Cpu,
    }
}

/// The device every rank runs on (collective): [`device_here`], rank 0 deciding for all.
pub fn device(loaded: &Loaded, ctx: &Context) -> Result<Device> {
    let mine = device_here(loaded);
    let all = (ctx.group()).all_gather_bytes(&[u8::from(mine == Device::Cuda)])?;
    let chosen = if all[0][0] == 1 {
        Device::Cuda
    } else {
        Device::Cpu
    };
    if let Some(r) = all
        .iter()
        .position(|b| (b[0] == 1) != (chosen == Device::Cuda))
    {
        bail!("rank 0 runs on {chosen:?} but rank {r} cannot: every rank needs the same device");
    }
    Ok(chosen)
}

/// What stops a spec before any rank starts: an explicit `cuda` device whose libraries are
/// missing (each named, with where it was looked for); a run on the CPU by ranks started without
/// MPI (torchrun, srun without an MPI plugin), whose group only coordinates while the CPU
/// backend moves data through MPI. Nothing runs.
pub fn preflight(loaded: &Loaded) -> Result<()> {
    let runtime = &loaded.spec.runtime;
    if runtime.device == Device::Cuda {
        cuda::probe::require(&gpu_libs(loaded))?;
    }
    let Start::Tcp(r) = runtime::choose(runtime.process_group)? else {
        return Ok(());
    };
    let why = match runtime.device {
        Device::Cuda => return Ok(()),
        Device::Auto if cuda::probe::available(&gpu_libs(loaded)) => return Ok(()),
        Device::Auto => " (device = \"auto\" found no GPU whose libraries load here)",
        Device::Cpu => "",
    };
    bail!(
        "started by {} without MPI: the CPU backend moves data through MPI{why}; start it with \
         {}, or run on GPUs (device = \"cuda\")",
        r.started_by(),
        r.under_mpi()
    )
}

fn execute<B: Backend>(b: &B, plan: &Plan, progress: &Progress) -> Result<Outcome<B>> {
    let (loaded, spec) = (&plan.loaded, &plan.loaded.spec);
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let mut tensors: HashMap<String, (TensorState, B::Buf)> = HashMap::new();
    for (name, t) in &spec.tensors {
        let Some(init) = &t.init else { continue };
        let state = plan.tensors[name].state.clone();
        let piece =
            crate::init::local_piece(init, spec.job.seed, name, &loaded.dir, &state, ranks, rank)?;
        // Generated values are computed where the buffer lives (on the GPU for cuda); npy bytes
        // are read on the host and copied.
        let buf = setup(b, progress, &format!("init {name}"), || match piece {
            crate::init::Piece::Empty => b.upload(Vec::new()),
            crate::init::Piece::Generated(generator, map) => {
                b.generate(&generator, state.dtype, &map)
            }
            crate::init::Piece::Read(bytes) => b.upload(bytes),
        })?;
        tensors.insert(name.clone(), (state, buf));
    }
    // Symmetric tensors live on one symmetric buffer of the plan's heap, each at its planned
    // offset (where puts can reach them; elsewhere they are ordinary buffers); initialized ones
    // move there once generated. The heap's memory stays to the end of the run (the GPU backend
    // never frees symmetric buffers alone), so the views outlive this handle safely.
    let arena = match b.puts() {
        Some(puts) if plan.tensors.values().any(|t| t.symmetric.is_some()) => {
            let bytes = plan.symmetric_tensor_bytes as usize;
            let what = format!("heap buffer, {bytes} bytes");
            let buf = setup(b, progress, &what, || puts.symmetric(bytes, bytes))?;
            Some((puts, buf))
        }
        _ => None,
    };
    for (name, t) in plan.tensors.iter().filter(|_| arena.is_some()) {
        if let Some((state, buf)) = tensors.remove(name) {
            let place = heap_place::<B>(arena.as_ref(), t, b.len(&buf))?;
            tensors.insert(name.clone(), (state, settle(b, place, buf)?));
        }
    }
    let mut records = Vec::new();
    panic_if_asked(rank);
    for (i, planned) in plan.steps.iter().enumerate() {
        let common = planned.step.common();
        progress.start_step(i, &planned.name, common.warmup + common.iterations);
        // The result's place on the heap, where it is a symmetric tensor.
        let result = planned.outputs.first().zip(planned.output_state.as_ref());
        let dest = match result {
            Some((name, state)) => {
                let bytes = crate::ops::movement::local_bytes(state, ranks, rank);
                heap_place::<B>(arena.as_ref(), &plan.tensors[name], bytes)?
            }
            None => None,
        };
        let inputs: Vec<&B::Buf> = planned.inputs.iter().map(|n| &tensors[n].1).collect();
        let mut run = StepRun::new(b, (i, planned), inputs, dest, spec.job.seed, progress);
        let out = planned.step.run(&mut run)?;
        let (mut record, place) = run.finish();
        if record.via.is_some() {
            record.puts_by = b.puts().map(|p| p.name());
        }
        progress.end_step(&record, &planned.figures);
        records.push(record);
        if let (Some(out), Some((name, state))) = (out, result) {
            tensors.insert(name.clone(), (state.clone(), settle(b, place, out)?));
        }
    }
    Ok(Outcome {
        steps: records,
        tensors,
    })
}

/// `n` runs back to back after the ranks are brought into step: the slowest rank's time per
/// run.
fn back_to_back<B: Backend>(b: &B, n: u32, run: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
    b.barrier()?;
    b.align()?;
    let t = b.time(&mut || (0..n).try_for_each(|_| run()))?;
    b.synchronize()?;
    Ok(b.max_over_ranks(t)? / f64::from(n))
}

/// The choice between NCCL and NVSHMEM for a step whose data puts can move (a movement into a
/// symmetric result, an FFT's transpose), by `trials`.
pub(crate) fn pick_via<B: Backend, P>(
    b: &B,
    timing: Timing,
    prepared: &mut P,
    set: impl Fn(&mut P, CommBackend),
    mut run: impl FnMut(&mut P) -> Result<()>,
) -> Result<Chosen<CommBackend>> {
    let vias = [CommBackend::Nccl, CommBackend::Nvshmem];
    let times = trials(b, timing, &mut |i| {
        set(prepared, vias[i]);
        run(prepared)
    })?;
    let chosen = forced_via().unwrap_or(vias[usize::from(times[1] < times[0])]);
    set(prepared, chosen);
    Ok(Chosen {
        way: chosen,
        trials: Some(times),
    })
}

impl StepRecord {
    /// How the step's data traveled, as its `via` says: `nccl`, or what carried the puts
    /// (`nvshmem`, `nccl_windows`).
    pub fn via_name(&self) -> Option<&'static str> {
        let way = self.via?.way;
        Some(match way {
            CommBackend::Nvshmem => self.puts_name(),
            other => other.name(),
        })
    }

    /// What carried (or would carry) the step's puts: `nvshmem` unless the backend said.
    pub fn puts_name(&self) -> &'static str {
        self.puts_by.unwrap_or("nvshmem")
    }
}

/// Runs of each way in a trial.
const TRIAL_RUNS: usize = 3;

/// Trials of two ways to run a step (`run(0)`, `run(1)`) before the step's own runs: each way
/// runs `TRIAL_RUNS` times, the two in turn, so both meet the GPUs alike warm (a long GEMM
/// lowers the clocks of the runs after it); a way's time is the median of its runs' slowest
/// rank's times, which ignores its first run's warm-up and the luck of one fast run. Where the
/// step is timed `queued`, each of those is two runs back to back, as its iterations run: a way
/// whose run waits for the one before it (an NCCL round queued behind the last run's GEMMs)
/// is slower so than alone (4 H200s: a matmul in rounds 5.66 ms alone, 6.53 queued, where
/// gathered whole it took 5.68 either way).
pub(crate) fn trials<B: Backend>(
    b: &B,
    timing: Timing,
    run: &mut dyn FnMut(usize) -> Result<()>,
) -> Result<[f64; 2]> {
    let runs = match timing {
        Timing::Queued => 2,
        _ => 1,
    };
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..TRIAL_RUNS {
        for (i, t) in times.iter_mut().enumerate() {
            t.push(back_to_back(b, runs, &mut || run(i))?);
        }
    }
    Ok(times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[TRIAL_RUNS / 2]
    }))
}

/// With `-v` on several ranks (every rank calls it): which rank's GPU backend came up last,
/// and when since its process started. Rank 0's first collective waits for that rank.
fn last_rank_up<B: Backend>(b: &B, progress: &Progress) -> Result<()> {
    let mine = progress::since_start_seconds().unwrap_or(0.0);
    let all = b.all_gather_bytes(&mine.to_le_bytes())?;
    let seconds = |bytes: &[u8]| f64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]));
    let last = (all.iter().map(|b| seconds(b)).enumerate())
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .unwrap_or((0, 0.0));
    progress.line(&format!(
        "distrun: every rank's GPU backend up, the last rank {} at {:.3} s since its start",
        last.0, last.1
    ));
    Ok(())
}

/// Runs a setup phase; with `-v` it waits for the device and reports the phase's time.
fn setup<B: Backend, T>(
    b: &B,
    progress: &Progress,
    what: &str,
    phase: impl FnOnce() -> Result<T>,
) -> Result<T> {
    if !progress.verbose() {
        return phase();
    }
    let started = std::time::Instant::now();
    let out = phase()?;
    b.synchronize()?;
    progress.setup(what, started.elapsed().as_secs_f64());
    Ok(out)
}

/// A symmetric tensor's place on the heap: `bytes` at its planned offset in `arena` (None for
/// other tensors, or where no heap runs).
fn heap_place<B: Backend>(
    arena: Option<&(&B::Puts, B::Buf)>,
    tensor: &crate::plan::TensorPlan,
    bytes: usize,
) -> Result<Option<B::Buf>> {
    match (arena, tensor.symmetric) {
        (Some((puts, arena)), Some((offset, reserved))) => {
            let (offset, reserved) = (offset as usize, reserved as usize);
            Ok(Some(puts.symmetric_part(arena, offset, reserved, bytes)?))
        }
        _ => Ok(None),
    }
}

/// `buf`, copied into `place` where the tensor has one (then the place is the tensor).
fn settle<B: Backend>(b: &B, place: Option<B::Buf>, buf: B::Buf) -> Result<B::Buf> {
    let Some(mut place) = place else {
        return Ok(buf);
    };
    let all = crate::backend::work::Run::contiguous(0, 0, b.len(&buf));
    b.copy_runs(&buf, &mut place, &all.into(), 1)?;
    Ok(place)
}

/// Testing hook: `DISTRUN_VIA=nccl` or `nvshmem` takes that way after the trials, whichever was
/// faster (where puts cannot move the data, NCCL still does), so that `scripts/gpu-check`
/// checks the results of puts on moves too small for them to win.
fn forced_via() -> Option<CommBackend> {
    match std::env::var("DISTRUN_VIA").ok()?.as_str() {
        "nccl" => Some(CommBackend::Nccl),
        "nvshmem" => Some(CommBackend::Nvshmem),
        _ => None,
    }
}

/// Testing hook: `DISTRUN_PANIC_RANK=r` makes rank r panic before its first step, so that the
/// tests can see a bug on one rank end the whole job.
fn panic_if_asked(rank: u64) {
    let wanted = std::env::var("DISTRUN_PANIC_RANK").ok();
    if wanted.and_then(|v| v.parse().ok()) == Some(rank) {
        panic!("DISTRUN_PANIC_RANK={rank}");
    }
}
