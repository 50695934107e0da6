//! The differential tester: random valid specs over the whole space of ops, distributions,
//! layouts, dtypes and shapes (specs.rs), each run by the real binary under mpiexec, every written
//! tensor compared with a reference computed here from the contract's definitions (model.rs),
//! every shard with the distribution's rules (layout.rs), every check required to pass.
//!
//! `cargo test --test differential` runs the fixed sample CI runs (seed 1, 240 cases at 1-4
//! ranks). Longer or other runs take options after `--`:
//!
//! ```text
//! cargo test --release --test differential -- --seed 7 --cases 5000 --ranks 1,2,3,4
//! cargo test --test differential -- --seed 7 --case 1234     # one case again, kept on disk
//!   --op fft          run only the sampled cases with a step of this op (same case numbers)
//!   --distrun PATH    the binary to run (default: the one cargo built)
//!   --device cuda     run every case on GPUs (runtime.device = "cuda")
//!   --keep            keep every case's directory, not only failing ones
//! ```
//! A failure prints the case's spec, how to run it again, and where its files are kept.

#[path = "../common/mod.rs"]
mod common;
mod layout;
mod model;
mod npy;
mod specs;

use layout::Dist;
use model::{Dt, E, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Options {
    seed: u64,
    cases: usize,
    only: Option<usize>,
    ranks: Vec<usize>,
    distrun: PathBuf,
    device: Option<String>,
    keep: bool,
    op: Option<String>,
}

fn options() -> Option<Options> {
    let mut o = Options {
        seed: 1,
        cases: 240,
        only: None,
        ranks: vec![1, 2, 3, 4],
        distrun: PathBuf::from(env!("CARGO_BIN_EXE_distrun")),
        device: None,
        keep: false,
        op: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--seed" => o.seed = value().parse().expect("--seed N"),
            "--cases" => o.cases = value().parse().expect("--cases N"),
            "--case" => o.only = Some(value().parse().expect("--case N")),
            "--ranks" => {
                o.ranks = value()
                    .split(',')
                    .map(|r| r.trim().parse().expect("--ranks 1,2,3"))
                    .collect()
            }
            "--distrun" => o.distrun = PathBuf::from(value()),
            "--device" => o.device = Some(value()),
            "--keep" => o.keep = true,
            "--op" => o.op = Some(value()),
            // libtest's own flags, which `cargo test` may pass to every test binary.
            _ if a.starts_with('-') => {}
            // A test-name filter that does not name this test: nothing to run.
            filter if !"differential".contains(filter) => return None,
            _ => {}
        }
    }
    Some(o)
}

/// Mixes the run's seed with a case's index into the case's own seed.
fn case_seed(seed: u64, i: usize) -> u64 {
    let mut r = specs::Rng::new(seed ^ (i as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    r.next()
}

fn main() {
    let Some(o) = options() else {
        return;
    };
    model::check_rounding();
    let started = Instant::now();
    let indices: Vec<usize> = match o.only {
        Some(i) => vec![i],
        None => (0..o.cases).collect(),
    };
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut coverage: BTreeMap<String, usize> = BTreeMap::new();
    for &i in &indices {
        let p = o.ranks[i % o.ranks.len()];
        let case = specs::case(case_seed(o.seed, i), p, o.device.as_deref());
        if (o.op.as_ref()).is_some_and(|op| !case.ops.contains(op)) {
            continue;
        }
        ran += 1;
        for op in &case.ops {
            *coverage.entry(op.clone()).or_default() += 1;
        }
        let dir = std::env::temp_dir().join(format!(
            "distrun-differential-{}-{}-{i}",
            std::process::id(),
            o.seed
        ));
        let outcome = run_case(&o, &case, &dir);
        if let Ok(algorithms) = &outcome {
            for a in algorithms {
                *coverage.entry(format!("matmul/{a}")).or_default() += 1;
            }
        }
        match outcome {
            Ok(_) if !(o.keep || o.only.is_some()) => {
                let _ = std::fs::remove_dir_all(&dir);
            }
            Ok(_) => {}
            Err(why) => {
                eprintln!(
                    "\n=== case {i} (seed {}, {p} ranks) FAILED: {why}\n--- spec ({}):\n{}\n--- again: cargo test --test differential -- --seed {} --case {i}{}\n",
                    o.seed,
                    dir.join("case.toml").display(),
                    case.spec,
                    o.seed,
                    o.device
                        .as_ref()
                        .map(|d| format!(" --device {d}"))
                        .unwrap_or_default()
                );
                failures.push(i);
            }
        }
    }
    let covered: Vec<String> = coverage.iter().map(|(k, v)| format!("{k} {v}")).collect();
    eprintln!(
        "differential: {} cases (seed {}, ranks {:?}) in {:.1} s; steps: {}",
        ran,
        o.seed,
        o.ranks,
        started.elapsed().as_secs_f64(),
        covered.join(", ")
    );
    if !failures.is_empty() {
        eprintln!("differential: {} failed: {failures:?}", failures.len());
        std::process::exit(1);
    }
}

/// Writes, runs and verifies one case; returns the matmul algorithms that ran.
fn run_case(o: &Options, case: &specs::Case, dir: &Path) -> Result<Vec<String>, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let spec_path = dir.join("case.toml");
    std::fs::write(&spec_path, &case.spec).map_err(|e| e.to_string())?;
    for (name, bytes) in &case.files {
        std::fs::write(dir.join(name), bytes).map_err(|e| e.to_string())?;
    }
    let out = dir.join("run");
    let args = [
        "run",
        spec_path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ];
    let limit = Duration::from_secs(120);
    let ran = if case.no_launcher {
        common::Distrun::new().args(args).run_with(&o.distrun)
    } else {
        common::mpirun_with(&o.distrun, case.ranks, &args, &[], limit)
    };
    if ran.code != 0 {
        return Err(format!("exit {}:\n{}", ran.code, ran.stderr));
    }
    verify(case, &out)
}

/// Every check passed; every written tensor equals its reference within its bound; every
/// shard is the distribution's piece of the whole tensor in its layout. Returns the matmul
/// algorithms the run chose.
fn verify(case: &specs::Case, out: &Path) -> Result<Vec<String>, String> {
    let m = common::manifest(out);
    for (i, s) in m["steps"].as_array().unwrap().iter().enumerate() {
        if let Some(c) = s.get("check")
            && c["passed"] != true
        {
            return Err(format!("step {i}'s check failed on a correct run: {s}"));
        }
    }
    for (name, want) in &case.expect {
        let t = &m["tensors"][name];
        let whole = read(&out.join(t["file"].as_str().ok_or(format!("{name}: no file"))?))?;
        let dist = Dist::from_json(&t["distribution"]);
        let mut shape = want.shape.clone();
        if dist == Dist::Partial {
            shape.insert(0, case.ranks);
        }
        if whole.shape != shape {
            return Err(format!(
                "{name}: written with shape {:?}, want {shape:?}",
                whole.shape
            ));
        }
        compare(name, want, &whole)?;
        shards(name, want.dt, case.ranks, &dist, t, &whole, out)?;
    }
    Ok(m["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["algorithm"].as_str().map(String::from))
        .collect())
}

/// A written .npy, its elements decoded (C order).
struct Read {
    shape: Vec<usize>,
    fortran: bool,
    dt: Dt,
    bytes: Vec<u8>,
}

fn read(path: &Path) -> Result<Read, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let n = npy::read(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let dt = model::ALL
        .iter()
        .copied()
        .find(|d| d.descr() == n.descr || (*d == Dt::Bf16 && n.descr.contains("V2")))
        .ok_or(format!("{}: descr {}", path.display(), n.descr))?;
    Ok(Read {
        shape: n.shape,
        fortran: n.fortran,
        dt,
        bytes: n.data,
    })
}

impl Read {
    fn elements(&self) -> Vec<E> {
        self.bytes
            .chunks_exact(self.dt.size())
            .map(|b| model::decode(self.dt, b))
            .collect()
    }
}

/// The written whole tensor against the reference: exact where the bound is 0, else within it.
fn compare(name: &str, want: &Value, got: &Read) -> Result<(), String> {
    if got.dt != want.dt {
        return Err(format!(
            "{name}: written as {}, want {}",
            got.dt.name(),
            want.dt.name()
        ));
    }
    let got = got.elements();
    let want_all: Vec<(E, f64)> = want
        .rows
        .iter()
        .zip(&want.tol)
        .flat_map(|(r, t)| r.iter().copied().zip(t.iter().copied()))
        .collect();
    let mut worst: Option<(usize, E, E, f64)> = None;
    for (i, (g, (w, tol))) in got.iter().zip(&want_all).enumerate() {
        let bad = match (g, w) {
            (E::I(a), E::I(b)) => a != b,
            (E::F(a), E::F(b)) => {
                let d = (a.0 - b.0).hypot(a.1 - b.1);
                // Exact values must be equal (infinities too); computed ones within twice their
                // bound (a NaN difference fails).
                a != b && (d.is_nan() || d > 2.0 * tol)
            }
            _ => true,
        };
        if bad && worst.is_none() {
            worst = Some((i, *g, *w, *tol));
        }
    }
    match worst {
        None => Ok(()),
        Some((i, g, w, tol)) => Err(format!(
            "{name}[{i}] (of shape {:?}{}) = {g:?}, want {w:?} (bound {tol:e})",
            want.shape,
            if want.rows.len() > 1 {
                format!(", stacked over {} ranks", want.rows.len())
            } else {
                String::new()
            }
        )),
    }
}

/// Every rank's shard holds its piece of the whole, in the tensor's layout.
fn shards(
    name: &str,
    dt: Dt,
    p: usize,
    dist: &Dist,
    t: &serde_json::Value,
    whole: &Read,
    out: &Path,
) -> Result<(), String> {
    let list = t["shards"].as_array().ok_or(format!("{name}: no shards"))?;
    if list.len() != p {
        return Err(format!("{name}: {} shards for {p} ranks", list.len()));
    }
    let fortran = t["layout"] == "F";
    let size = dt.size();
    // The global shape (a partial tensor's pieces are the rows of the stack).
    let shape: Vec<usize> = match dist {
        Dist::Partial => whole.shape[1..].to_vec(),
        _ => whole.shape.clone(),
    };
    let row = shape.iter().product::<usize>();
    for (r, s) in list.iter().enumerate() {
        let file = s["file"]
            .as_str()
            .ok_or(format!("{name}: shard {r} has no file"))?;
        let shard = read(&out.join(file))?;
        let expected: Vec<u8> = match dist.piece(&shape, p, r) {
            None => Vec::new(),
            Some(axes) => {
                let base = if *dist == Dist::Partial { r * row } else { 0 };
                layout::piece_order(&shape, &axes, fortran)
                    .into_iter()
                    .flat_map(|g| whole.bytes[(base + g) * size..(base + g + 1) * size].to_vec())
                    .collect()
            }
        };
        if shard.bytes != expected {
            return Err(format!(
                "{name}: rank {r}'s shard ({} bytes, shape {:?}) is not its piece of {dist:?} in {} order ({} bytes)",
                shard.bytes.len(),
                shard.shape,
                if fortran { "F" } else { "C" },
                expected.len()
            ));
        }
        if !shard.bytes.is_empty() && shard.fortran != fortran {
            return Err(format!(
                "{name}: rank {r}'s shard has fortran_order {}",
                shard.fortran
            ));
        }
    }
    Ok(())
}
