//! A mutation fuzzer on stable Rust: each target's seed corpus (`tests/fuzz/corpus/<target>/`)
//! is mutated at random (mutate.rs) and every input runs in-process on a worker thread under
//! `catch_unwind`. A panic, or an input running longer than [`LIMIT`], is a failure: the input
//! (the first to panic at each place) is saved under `target/fuzz-failures/<target>/` and
//! printed, and the run exits 1 (at once for a hang: the worker cannot be stopped). An abort
//! ends the process, which the test run reports.
//!
//! `cargo test --test fuzz` runs a short sample of every target, as CI does. Longer or other
//! runs take options after `--`:
//!
//! ```text
//! cargo test --release --test fuzz -- --target npy --inputs 1000000 --seed 7
//!   --target NAME     one target (default: all)
//!   --inputs N        inputs per target, the seeds included (default: the target's own)
//!   --seed N          the random seed (default 1)
//!   --replay FILE     run one saved input of --target again
//! ```

mod mutate;
mod npy;
mod spec;

use mutate::{Pool, Rand, mutate};
use rand::SeedableRng;
use rand::seq::IndexedRandom;
use std::cell::RefCell;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A function under test, fed arbitrary bytes.
pub trait Target: Sync {
    /// The target's name: `--target NAME`, its corpus and failure directories.
    fn name(&self) -> &'static str;
    /// Runs one input; panics on a failure (an error distrun reports is no failure).
    fn run(&self, input: &[u8]);
    /// Tokens of the input's language worth inserting (keys, type names).
    fn dictionary(&self) -> &'static [&'static [u8]] {
        &[]
    }
    /// Inputs a run takes without `--inputs`: a few seconds' worth in a debug build.
    fn default_inputs(&self) -> usize {
        300_000
    }
    /// The directory of the seed inputs.
    fn corpus(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fuzz/corpus")
            .join(self.name())
    }
}

/// Every target, one line each.
const TARGETS: &[&dyn Target] = &[&npy::Npy, &spec::Spec];

/// The longest an input may run: a hang, or work far beyond the input's size. Legitimate
/// inputs come close to a second in a debug build: the spec target plans each input at up to
/// 2^17 + 1 ranks, and a mutant of `gemm.toml` so planned took 1.0-1.3 s on CI's two cores
/// (2026-11-27), which a limit of one second failed twice.
const LIMIT: Duration = Duration::from_secs(3);

/// Bytes of a failing input printed (all of it is saved).
const SHOWN: usize = 1024;

struct Options {
    target: Option<String>,
    inputs: Option<usize>,
    seed: u64,
    replay: Option<PathBuf>,
}

/// The options after `--`, or `None` when a test-name filter leaves this test out.
fn options() -> Option<Options> {
    let mut o = Options {
        target: None,
        inputs: None,
        seed: 1,
        replay: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--target" => o.target = Some(value()).filter(|t| t != "all"),
            "--inputs" => o.inputs = Some(value().parse().expect("--inputs N")),
            "--seed" => o.seed = value().parse().expect("--seed N"),
            "--replay" => o.replay = Some(PathBuf::from(value())),
            // libtest's own flags, which `cargo test` may pass to every test binary.
            _ if a.starts_with('-') => {}
            filter if !"fuzz".contains(filter) => return None,
            _ => {}
        }
    }
    Some(o)
}

fn main() {
    let Some(o) = options() else { return };
    let targets: Vec<&dyn Target> = TARGETS
        .iter()
        .copied()
        .filter(|t| o.target.as_deref().is_none_or(|n| n == t.name()))
        .collect();
    let names: Vec<_> = TARGETS.iter().map(|t| t.name()).collect();
    assert!(!targets.is_empty(), "no target {:?}: {names:?}", o.target);
    quiet_worker_panics();
    let failures: usize = match &o.replay {
        Some(file) => {
            let [target] = targets[..] else {
                panic!("--replay needs --target, one of {names:?}")
            };
            replay(target, file)
        }
        None => targets.into_iter().map(|t| fuzz(t, &o)).sum(),
    };
    if failures > 0 {
        std::process::exit(1);
    }
}

/// Runs `o.inputs` inputs (or the target's default) through `target`: the seeds, then mutants
/// of them; returns the number of failing inputs.
fn fuzz(target: &'static dyn Target, o: &Options) -> usize {
    let count = o.inputs.unwrap_or_else(|| target.default_inputs());
    let corpus = seeds(target);
    let name_hash = xxhash_rust::xxh3::xxh3_64(target.name().as_bytes());
    let mut rng = Rand::seed_from_u64(o.seed ^ name_hash);
    let inputs = (0..count).map(move |i| match corpus.get(i) {
        Some(seed) => seed.clone(),
        None => {
            let mut input = corpus.choose(&mut rng).unwrap().clone();
            let pool = Pool {
                corpus: &corpus,
                dictionary: target.dictionary(),
            };
            mutate(&mut input, &mut rng, &pool);
            input
        }
    });
    let started = Instant::now();
    let (failures, places) = watched(target, inputs);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "fuzz {}: {} inputs in {secs:.1} s ({:.0}/s), seed {}, {failures} failures at {places} places",
        target.name(),
        count,
        count as f64 / secs,
        o.seed,
    );
    failures
}

/// Runs one saved input; returns 1 if it fails, else 0.
fn replay(target: &'static dyn Target, file: &Path) -> usize {
    let input = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let (failures, _) = watched(target, std::iter::once(input));
    if failures == 0 {
        println!("fuzz {}: {} passes", target.name(), file.display());
    }
    failures
}
/// The target's seed inputs, in name order.
fn seeds(target: &dyn Target) -> Vec<Vec<u8>> {
    let dir = target.corpus();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no seeds in {}", dir.display());
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

/// Saves a failing input and prints it, escaped, with what went wrong.
fn report(target: &dyn Target, input: &[u8], message: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("fuzz-failures")
        .join(target.name());
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{:016x}", xxhash_rust::xxh3::xxh3_64(input)));
    std::fs::write(&file, input).unwrap();
    let more = if input.len() > SHOWN { "..." } else { "" };
    eprintln!(
        "fuzz {}: FAILED: {message}\n  input ({} bytes, saved as {}):\n  b\"{}{more}\"\n  again: cargo test --test fuzz -- --target {} --replay {}",
        target.name(),
        input.len(),
        file.display(),
        input[..input.len().min(SHOWN)].escape_ascii(),
        target.name(),
        file.display(),
    );
}

/// What the watchdog sees of the worker thread.
#[derive(Default)]
struct Progress {
    /// How many inputs have started.
    started: AtomicUsize,
    /// The input running.
    current: Mutex<Vec<u8>>,
}

/// Runs `inputs` through `target` on a worker thread (see [`run_all`]) while this thread
/// watches: an input running longer than [`LIMIT`] is reported and ends the process (a thread
/// cannot be stopped). Returns the number of failing inputs and of places that panicked.
fn watched(
    target: &'static dyn Target,
    inputs: impl Iterator<Item = Vec<u8>> + Send + 'static,
) -> (usize, usize) {
    let progress = Arc::new(Progress::default());
    let shared = Arc::clone(&progress);
    let worker = std::thread::Builder::new()
        .name(WORKER.into())
        .spawn(move || run_all(target, inputs, &shared))
        .unwrap();
    let mut last = (usize::MAX, Instant::now());
    while !worker.is_finished() {
        std::thread::sleep(LIMIT / 20);
        let started = progress.started.load(Ordering::Relaxed);
        if started != last.0 {
            last = (started, Instant::now());
        } else if last.1.elapsed() >= LIMIT {
            let input = progress.current.lock().unwrap().clone();
            report(target, &input, &format!("ran longer than {LIMIT:?}"));
            std::process::exit(1);
        }
    }
    worker.join().unwrap()
}

/// Runs each input under `catch_unwind`, showing `progress` which one runs; reports the first
/// input to panic at each place. Returns the number of failing inputs and of places.
fn run_all(
    target: &dyn Target,
    inputs: impl Iterator<Item = Vec<u8>>,
    progress: &Progress,
) -> (usize, usize) {
    let (mut failures, mut places) = (0, HashSet::new());
    for input in inputs {
        let mut current = progress.current.lock().unwrap();
        current.clear();
        current.extend_from_slice(&input);
        drop(current);
        progress.started.fetch_add(1, Ordering::Relaxed);
        if std::panic::catch_unwind(AssertUnwindSafe(|| target.run(&input))).is_err() {
            failures += 1;
            let message = PANIC.take();
            let place = message.lines().next().unwrap_or_default().to_string();
            if places.insert(place) {
                report(target, &input, &message);
            }
        }
    }
    (failures, places.len())
}

/// The worker threads' name, which the panic hook looks for.
const WORKER: &str = "fuzz-worker";

thread_local! {
    /// The last panic of this thread, as the hook saw it.
    static PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Keeps the panics of worker threads (each one reported once, with its input) off stderr;
/// the harness's own panics print as usual.
fn quiet_worker_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some(WORKER) {
            PANIC.set(info.to_string());
        } else {
            default(info);
        }
    }));
}
