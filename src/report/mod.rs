//! `distrun report RUN_DIR...`: what run directories' manifests recorded, as nccl-tests-style
//! tables (one per op family, the runs side by side with each one's ratio to the first) in
//! table, markdown, CSV or JSON form, and as plots (SVG or PNG).

mod format;
mod plot;
mod rows;

pub use format::Format;

use crate::output::{Manifest, read_manifest};
use anyhow::Context;
use std::path::{Path, PathBuf};

/// A run directory read for a report.
#[derive(Debug)]
pub struct Run {
    /// The directory as named on the command line.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

/// Reads each run directory's manifest; an error names the directory.
pub fn load(dirs: &[PathBuf]) -> anyhow::Result<Vec<Run>> {
    dirs.iter()
        .map(|dir| {
            anyhow::ensure!(dir.is_dir(), "{} is not a directory", dir.display());
            let manifest = read_manifest(dir)
                .with_context(|| format!("cannot report on {}", dir.display()))?;
            Ok(Run {
                dir: dir.clone(),
                manifest,
            })
        })
        .collect()
}

/// Writes the report of `runs` in `format` to `output` (standard output without one) and, with
/// `plot`, its charts to that `.svg` or `.png` file.
pub fn report(
    runs: &[Run],
    format: Format,
    output: Option<&Path>,
    plot: Option<&Path>,
) -> anyhow::Result<()> {
    if let Some(path) = plot {
        plot::ready(path)?;
    }
    let rows = rows::rows(runs);
    let text = format::render(runs, &rows, format);
    match output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    if let Some(path) = plot {
        plot::plot(runs, &rows, path)?;
    }
    Ok(())
}

/// Whether `path` names a plot `report` can write: `.svg` or `.png`.
pub fn plot_path(text: &str) -> Result<PathBuf, String> {
    plot::Kind::of(Path::new(text))
        .map(|_| PathBuf::from(text))
        .ok_or_else(|| format!("{text}: a plot is an .svg or .png file"))
}

#[cfg(test)]
pub(crate) mod tests {
    //! Runs and steps built in the test, from the sample manifest.

    use super::Run;
    use crate::output::fixtures::sample_manifest;
    use crate::output::manifest::{CheckRecord, PointRecord, StepRecord, TimeStats};
    use crate::spec::model::Checksum;
    use crate::spec::tensor::DType;
    use indexmap::IndexMap;

    /// A step named `name` of `op` at 12.5 us median (10 min, 20 max) with a passed check and
    /// figures: a collective of 4096 B (1024 f32, sum where it reduces) at algbw 0.33 and busbw
    /// 0.22 GB/s; a matmul m 64 n 32 k 16 of f32 at 1.5 TFLOP/s (algorithm local); an FFT c2c
    /// of [8, 8] c64.
    pub fn step(name: &str, op: &str) -> StepRecord {
        let mut s = sample_manifest(Checksum::Xxh3_64).steps.remove(0);
        s.name = name.into();
        s.op = op.into();
        s.time_s = TimeStats {
            min: 10e-6,
            median: 12.5e-6,
            max: 20e-6,
        };
        s.check = Some(CheckRecord {
            passed: true,
            max_error: 0.0,
        });
        (s.algorithm, s.tflops) = (None, None);
        let f = &mut s.figures;
        match op {
            "matmul" => {
                (f.m, f.n, f.k, f.dtype) = (Some(64), Some(32), Some(16), Some(DType::F32));
                (s.algorithm, s.tflops) = (Some("local".into()), Some(1.5));
            }
            "fft" => {
                (f.shape, f.kind) = (Some(vec![8, 8]), Some("c2c".into()));
                f.dtype = Some(DType::C64);
            }
            op => {
                f.set_bytes(4096, DType::F32);
                f.reduce = op.contains("reduce").then(|| "sum".into());
                (s.algbw_gbs, s.busbw_gbs) = (Some(0.33), Some(0.22));
            }
        }
        s
    }

    /// A run of one rank on the CPU in directory `dir` with these steps.
    pub fn run_of(dir: &str, steps: Vec<StepRecord>) -> Run {
        let mut manifest = sample_manifest(Checksum::Xxh3_64);
        manifest.ranks = 1;
        manifest.rank_info.truncate(1);
        manifest.steps = steps;
        manifest.tensors.clear();
        Run {
            dir: dir.into(),
            manifest,
        }
    }

    /// A sweep run over `tensors.x.shape[0]` and `tensors.x.dtype` with these points, each
    /// running the steps named (`ar`: all_reduce, `ag`: all_gather, others matmul).
    pub fn sweep_run(dir: &str, points: &[(u64, &str)], names: &[&str]) -> Run {
        let mut run = run_of(dir, Vec::new());
        run.manifest.sweep = Some(serde_json::json!({
            "tensors.x.shape[0]": points.iter().map(|p| p.0).collect::<Vec<_>>(),
            "tensors.x.dtype": points.iter().map(|p| p.1).collect::<Vec<_>>(),
        }));
        run.manifest.points = (points.iter().enumerate())
            .map(|(index, &(size, dtype))| PointRecord {
                index: index as u64,
                values: IndexMap::from([
                    ("tensors.x.shape[0]".to_string(), size.into()),
                    ("tensors.x.dtype".to_string(), dtype.into()),
                ]),
                steps: (names.iter())
                    .map(|&name| match name {
                        "ar" => step(name, "all_reduce"),
                        "ag" => step(name, "all_gather"),
                        _ => step(name, "matmul"),
                    })
                    .collect(),
                tensors: IndexMap::new(),
            })
            .collect();
        run
    }
}
