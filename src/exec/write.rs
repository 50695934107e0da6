//! Writing a finished run: every rank writes its shards into the run directory rank 0 created,
//! rank 0 gathers each written tensor for its global checksum (and the whole file with
//! `gather = true`), writes `manifest.json` last and renames the directory into place.

mod whole;

use super::memory::counted::Since;
use super::{Chosen, Options, Outcome, progress::Progress};
use crate::backend::Backend;
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::dist::whole::{CHUNK_BYTES, whole_state};
use crate::output::checksum::{Hasher, sha256_hex};
use crate::output::manifest::{
    self, CheckRecord, Manifest, MemoryRecord, PipelineRecord, PointRecord, ProductLayoutRecord,
    RankInfo, ShardRecord, TensorRecord, TimeStats, ViaRecord,
};
use crate::output::npy::{self, write_npy_in};
use crate::output::rundir::{self, RunDir, default_path};
use crate::output::{gathered_file, shard_file};
use crate::plan::{Plan, Plans, resolved_dist};
use crate::runtime::Context;
use crate::spec::model::{Checksum, Device, Spec};
use crate::spec::sweep::Point;
use crate::spec::tensor::Layout;
use anyhow::{Context as _, Result};
use indexmap::IndexMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The names of the files a run on `ranks` ranks writes into its directory: per written tensor,
/// the last rank's shard (the longest of its shards' names) and the gathered file; the manifest.
fn file_names(spec: &Spec, ranks: u64) -> Vec<String> {
    let mut files = vec!["manifest.json".to_string()];
    for name in &spec.output.tensors {
        files.push(shard_file(name, ranks - 1));
        files.push(gathered_file(name));
    }
    files
}

/// Checks, before anything runs, that the run directory can be written where it goes (see
/// [`rundir::check_target`]), and removes the stale temporary directories beside it (left by
/// processes of this host that were killed), naming each on stderr.
pub fn check_place(spec: &Spec, ranks: u64, out: Option<&Path>) -> Result<()> {
    let (path, unique) = match out {
        Some(out) => (out.to_path_buf(), false),
        None => {
            let dir = Path::new(&spec.output.dir);
            (default_path(dir, &spec.job.name, chrono::Utc::now()), true)
        }
    };
    let parent = rundir::check_target(&path, unique, &file_names(spec, ranks)).map_err(|e| {
        let advice = match (e.kind(), out) {
            (std::io::ErrorKind::AlreadyExists, Some(_)) => ": choose another --out",
            _ => "",
        };
        anyhow::anyhow!("cannot write the run directory: {e}{advice}")
    })?;
    if !parent.is_dir() {
        return Ok(());
    }
    match rundir::stale::remove_stale(&parent) {
        Ok(removed) => {
            for p in removed {
                eprintln!(
                    "distrun: removed {}, left by process {} of this host, which has ended",
                    p.path.display(),
                    p.pid
                );
            }
        }
        Err(e) => eprintln!(
            "distrun: warning: stale run directories in {}: {e}",
            parent.display()
        ),
    }
    Ok(())
}

/// A run directory being written, one point after another (every rank takes part in each call):
/// each point's shards and whole tensors as it finishes, then the manifest and the commit.
pub struct Writer {
    /// Created (under its temporary name, see [`open_rundir`]) when the first point has run: a
    /// run that fails before leaves nothing on disk.
    rundir: Option<RunDir>,
    started: chrono::DateTime<chrono::Utc>,
    /// On rank 0, every written point's steps and tensors.
    points: Vec<(Vec<manifest::StepRecord>, IndexMap<String, TensorRecord>)>,
}

impl Writer {
    /// A writer for a run starting now.
    pub fn new() -> Self {
        Writer {
            rundir: None,
            started: chrono::Utc::now(),
            points: Vec::new(),
        }
    }

    /// Writes a finished plan's outputs (a sweep point's under `p<index>/`).
    pub fn point<B: Backend>(
        &mut self,
        (b, opts): (&B, &Options),
        plan: &Plan,
        point: Option<&Point>,
        outcome: Outcome<B>,
        progress: &Progress,
    ) -> Result<()> {
        let writing = std::time::Instant::now();
        let rundir = match self.rundir.take() {
            Some(dir) => dir,
            None => open_rundir(b, &plan.loaded.spec, opts, self.started)?,
        };
        let dir = point.map(|p| format!("p{}/", p.index)).unwrap_or_default();
        let written = write_tensors(b, plan, (&rundir, &dir), &outcome, progress);
        self.rundir = Some(rundir);
        let Written { shards, globals } = written?;
        // Every rank's shards reach rank 0 (this also waits for every shard).
        let shards = b.all_gather_bytes(&serde_json::to_vec(&shards)?)?;
        progress.setup("outputs written", writing.elapsed().as_secs_f64());
        if b.rank() == 0 {
            let mut all: Vec<(String, ShardRecord)> = Vec::new();
            for bytes in &shards {
                all.extend(serde_json::from_slice::<Vec<(String, ShardRecord)>>(bytes)?);
            }
            let steps = (outcome.steps.iter().zip(&plan.steps))
                .map(|(s, planned)| step_record(s, planned))
                .collect();
            let tensors = tensor_records(plan, &outcome, all, globals);
            self.points.push((steps, tensors));
        }
        Ok(())
    }

    /// Writes `manifest.json` and renames the directory into place (rank 0; the others wait).
    pub fn finish<B: Backend>(
        self,
        b: &B,
        plans: &Plans,
        ctx: &Context,
        since: Since,
        progress: &Progress,
    ) -> Result<()> {
        let me = RankInfo {
            rank: b.rank() as u64,
            host: ctx.host.clone(),
            device: b.device(),
            memory: Some(since.measured()).map(|m| MemoryRecord {
                heap_peak_bytes: m.heap_bytes,
                max_rss_bytes: m.rss_bytes,
            }),
        };
        let infos = b.all_gather_bytes(&serde_json::to_vec(&me)?)?;
        // The other ranks are done with the directory: from here it is rank 0's alone (to
        // commit, keep after a failed commit, or remove when the process ends on a signal).
        if b.rank() == 0 {
            let rank_info = infos
                .iter()
                .map(|bytes| serde_json::from_slice(bytes))
                .collect::<Result<Vec<RankInfo>, _>>()?;
            let m = manifest(plans, self.started, self.points, rank_info, b.device_kind());
            let rundir = self.rundir.context("a run writes at least one point")?;
            manifest::write_manifest(&rundir, &m).context("cannot write manifest.json")?;
            let path = rundir
                .commit()
                .context("cannot rename the run directory into place")?;
            progress.line(&format!("distrun: wrote {}", path.display()));
            println!("{}", path.display());
        }
        b.barrier()
    }
}

/// The run directory, under its temporary name: rank 0 creates it, the others open it by that
/// name. `--out` must be free; a default name takes a suffix where a run of the same job that
/// started in the same second has it.
fn open_rundir<B: Backend>(
    b: &B,
    spec: &Spec,
    opts: &Options,
    started: chrono::DateTime<chrono::Utc>,
) -> Result<RunDir> {
    let created = if b.rank() == 0 {
        let (dir, final_path) = match &opts.out {
            Some(out) => (RunDir::create(out.clone()), out.clone()),
            None => {
                let path = default_path(Path::new(&spec.output.dir), &spec.job.name, started);
                (RunDir::create_unique(path.clone()), path)
            }
        };
        Some(dir.with_context(|| format!("cannot create {}", final_path.display()))?)
    } else {
        None
    };
    let mine = created
        .as_ref()
        .map(|d| d.path().as_os_str().as_encoded_bytes().to_vec())
        .unwrap_or_default();
    let temp = b.all_gather_bytes(&mine)?.swap_remove(0);
    match created {
        Some(dir) => Ok(dir),
        None => RunDir::open(PathBuf::from(String::from_utf8_lossy(&temp).into_owned()))
            .context("cannot open the run directory rank 0 created"),
    }
}

/// Each output's shard from every rank (one that holds nothing writes an empty array), and the
/// whole tensor (see [`global`]), into `rundir`'s subdirectory `dir` (empty, or `p3/`).
fn write_tensors<B: Backend>(
    b: &B,
    plan: &Plan,
    (rundir, dir): (&RunDir, &str),
    outcome: &Outcome<B>,
    progress: &Progress,
) -> Result<Written> {
    let spec = &plan.loaded.spec;
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let algorithm = spec.output.checksum;
    let mut shards: Vec<(String, ShardRecord)> = Vec::new();
    let mut globals = IndexMap::new();
    for name in &spec.output.tensors {
        let (state, buf) = &outcome.tensors[name];
        let local = Placement::new(&state.dist, &state.shape, ranks)
            .local_shape(rank)
            .unwrap_or_else(|| vec![0; state.shape.len()]);
        let file = format!("{dir}{}", shard_file(name, rank));
        let started = std::time::Instant::now();
        let data = b.download(buf)?;
        let what = format!("downloaded {name}, {} bytes", data.len());
        progress.setup(&what, started.elapsed().as_secs_f64());
        let (dtype, layout) = (state.dtype, state.layout);
        let checksum = write_npy_in(rundir, &file, algorithm, dtype, &local, layout, &data)
            .with_context(|| format!("cannot write {file}"))?;
        pause_if_asked(shards.is_empty());
        let record = ShardRecord {
            rank,
            file,
            checksum,
        };
        shards.push((name.clone(), record));
        let gathered = (spec.output.gather).then(|| format!("{dir}{}", gathered_file(name)));
        let whole = global(b, rundir, algorithm, state, buf, gathered)
            .with_context(|| format!("cannot write the whole of {name}"))?;
        globals.insert(name.clone(), whole);
    }
    Ok(Written { shards, globals })
}

/// What a rank wrote: its shards (by tensor), and every written tensor as a whole.
struct Written {
    shards: Vec<(String, ShardRecord)>,
    globals: IndexMap<String, Whole>,
}

/// A written tensor as a whole: its global checksum and, where gathered, its file.
struct Whole {
    /// The checksum of the whole in C order.
    checksum: String,
    /// The gathered `.npy`, where written.
    gathered: Option<Gathered>,
}

/// A whole tensor's `.npy` file and the checksum of its bytes.
struct Gathered {
    file: String,
    checksum: String,
}

/// The global checksum of a tensor (the whole in C order: a partial tensor is the stack of
/// every rank's array), and with `file` its gathered `.npy` and that file's checksum, streamed to
/// rank 0 ([`whole::stream`]); elsewhere empty. Collective.
fn global<B: Backend>(
    b: &B,
    rundir: &RunDir,
    algorithm: Checksum,
    state: &TensorState,
    buf: &B::Buf,
    file: Option<String>,
) -> Result<Whole> {
    let whole = whole_state(state, b.ranks() as u64);
    let mut h = Hasher::new(algorithm);
    let Some(file) = file.filter(|_| b.rank() == 0) else {
        whole::stream(b, state, buf, CHUNK_BYTES, &mut |bytes| {
            h.update(bytes);
            Ok(())
        })?;
        let checksum = h.finish();
        return Ok(Whole {
            checksum,
            gathered: None,
        });
    };
    let header = npy::header(whole.dtype, &whole.shape, Layout::C)?;
    let mut in_file = Hasher::new(algorithm);
    in_file.update(&header);
    let (mut streamed, mut ran) = (Ok(()), false);
    let written = rundir.write_file(&file, |f| {
        ran = true;
        f.write_all(&header)?;
        let mut sink = |bytes: &[u8]| {
            h.update(bytes);
            in_file.update(bytes);
            f.write_all(bytes)
        };
        streamed = whole::stream(b, state, buf, CHUNK_BYTES, &mut sink);
        // The exchanges' failure is returned below; the file is not kept either way.
        streamed
            .as_ref()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        Ok(())
    });
    if !ran {
        // The file could not be opened: the other ranks' exchanges still need this rank's.
        whole::stream(b, state, buf, CHUNK_BYTES, &mut |_| Ok(()))?;
    }
    streamed?;
    written?;
    let checksum = in_file.finish();
    Ok(Whole {
        checksum: h.finish(),
        gathered: Some(Gathered { file, checksum }),
    })
}

/// The manifest records of a plan's written tensors, from every rank's shards and the wholes.
fn tensor_records<B: Backend>(
    plan: &Plan,
    outcome: &Outcome<B>,
    shards: Vec<(String, ShardRecord)>,
    globals: IndexMap<String, Whole>,
) -> IndexMap<String, TensorRecord> {
    globals
        .into_iter()
        .map(|(name, whole)| {
            let (state, _) = &outcome.tensors[&name];
            let dist = resolved_dist(&state.dist, state.shape.len(), plan.ranks);
            let record = TensorRecord {
                shape: state.shape.clone(),
                dtype: state.dtype,
                layout: state.layout,
                distribution: serde_json::to_value(dist).expect("a distribution serializes"),
                checksum: whole.checksum,
                shards: (shards.iter())
                    .filter(|(n, _)| *n == name)
                    .map(|(_, s)| s.clone())
                    .collect(),
                file: whole.gathered.as_ref().map(|g| g.file.clone()),
                file_checksum: whole.gathered.map(|g| g.checksum),
            };
            (name, record)
        })
        .collect()
}

/// The manifest of a finished launch: its one plan's steps and tensors, or for a sweep each
/// point's. Its `spec` is the spec file's as run (with its `[sweep]`).
fn manifest(
    plans: &Plans,
    started: chrono::DateTime<chrono::Utc>,
    mut points: Vec<(Vec<manifest::StepRecord>, IndexMap<String, TensorRecord>)>,
    rank_info: Vec<RankInfo>,
    device: Device,
) -> Manifest {
    let plan = plans.first();
    let loaded = &plan.loaded;
    let text = &loaded.source.text;
    // A sweep's points each have their own spec: the file's is the one with the sweep.
    let written = plans.sweep.as_ref().map_or(&loaded.spec, |s| &s.spec);
    let as_run = written.as_run(device, |name| {
        let s = &plan.tensors.get(name)?.state;
        Some(resolved_dist(&s.dist, s.shape.len(), plan.ranks))
    });
    let (steps, tensors, points) = match plans.sweep {
        None => {
            let (steps, tensors) = points.pop().unwrap_or_default();
            (steps, tensors, Vec::new())
        }
        Some(_) => {
            let records = (plans.points.iter().zip(points))
                .map(|((point, _), (steps, tensors))| PointRecord {
                    index: point.index as u64,
                    values: point.values.clone(),
                    steps,
                    tensors,
                })
                .collect();
            (Vec::new(), IndexMap::new(), records)
        }
    };
    Manifest {
        distrun_version: env!("CARGO_PKG_VERSION").to_string(),
        started_utc: manifest::utc_string(started),
        finished_utc: manifest::utc_string(chrono::Utc::now()),
        spec: serde_json::to_value(as_run).expect("a spec serializes"),
        spec_text: Some(text.clone()),
        spec_sha256: sha256_hex(text.as_bytes()),
        ranks: plan.ranks,
        rank_info,
        checksum_algorithm: loaded.spec.output.checksum,
        steps,
        tensors,
        planned_peak_bytes_per_rank: plans.each().map(|p| p.peak_bytes_per_rank).max(),
        sweep: plans.sweep.as_ref().map(|s| s.table.clone()),
        points,
    }
}

/// A step's record in the manifest: its times, work rates, check and choices.
fn step_record(s: &super::StepRecord, planned: &crate::plan::StepPlan) -> manifest::StepRecord {
    let (min, median, max) = s.min_median_max();
    let bw = s.bandwidth.filter(|_| median > 0.0).map(|(bytes, factor)| {
        let alg = bytes / median / 1e9;
        (alg, alg * factor)
    });
    manifest::StepRecord {
        name: s.name.clone(),
        op: s.op.to_string(),
        algorithm: planned.algorithm().map(str::to_string),
        iterations: s.times.len() as u64,
        warmup: u64::from(s.warmup),
        time_s: TimeStats { min, median, max },
        figures: planned.figures.clone(),
        tflops: s.flops.filter(|_| median > 0.0).map(|f| f / median / 1e12),
        algbw_gbs: bw.map(|b| b.0),
        busbw_gbs: bw.map(|b| b.1),
        check: s.check.map(|c| CheckRecord {
            passed: c.passed,
            max_error: c.max_error,
        }),
        via: s.via.zip(s.via_name()).map(|(c, name)| {
            let [nccl_s, nvshmem_s] = c.trials.unwrap_or([0.0; 2]);
            ViaRecord {
                chosen: name.to_string(),
                nccl_s,
                nvshmem_s,
            }
        }),
        pipeline: s.pipeline.map(|Chosen { way, trials }| PipelineRecord {
            chosen: way.name().to_string(),
            rounds_s: trials.map(|t| t[0]),
            whole_s: trials.map(|t| t[1]),
            window_slices: s.window_slices,
        }),
        product_layout: s
            .product_layout
            .map(|Chosen { way, trials }| ProductLayoutRecord {
                chosen: way.to_string(),
                c_s: trials.map(|t| t[0]),
                f_s: trials.map(|t| t[1]),
            }),
        batches: s.batches.clone(),
    }
}

/// Testing hook: `DISTRUN_WRITE_PAUSE_S=s` makes every rank sleep `s` seconds once it has written
/// its first shard, so that the tests can signal a run while its directory is being written.
fn pause_if_asked(first: bool) {
    let wanted = std::env::var("DISTRUN_WRITE_PAUSE_S").ok();
    if let Some(s) = wanted.and_then(|v| v.parse().ok()).filter(|_| first) {
        std::thread::sleep(std::time::Duration::from_secs_f64(s));
    }
}
