//! The command line: `run` (also a bare spec path), `validate`, `plan`, `schema`, `verify`,
//! `report`, `clean`.

use crate::plan;
use crate::spec::{self, InvalidSpec};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status for a spec that failed validation.
pub const EXIT_INVALID: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "distrun",
    version,
    about = "Distributed tensor work (matmul, FFT, redistribution, collectives) from a TOML spec",
    after_help = "Examples:\n  distrun specs/allreduce.toml                  (same as distrun run SPEC)\n  mpiexec -n 4 distrun specs/collectives.toml\n  distrun validate specs/*.toml\n  distrun plan specs/gemm.toml --ranks 4\n  distrun verify runs/allreduce-20261121T173045Z\n  distrun report runs/coll-1 runs/coll-4 --plot coll.svg\n  distrun clean runs\n  distrun schema --output schemas/distrun.schema.json"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a spec on every rank (one rank without a launcher, or under mpiexec) and write its run
    /// directory. Exit 0, 1 runtime failure, 2 invalid spec, 3 failed check.
    #[command(
        after_help = "Example:\n  distrun run specs/allreduce.toml\n  mpiexec -n 4 distrun run specs/redistribute.toml --out runs/redist-4"
    )]
    Run {
        /// Spec file.
        spec: PathBuf,
        /// Write the run directory here (default: <output.dir>/<job.name>-<UTC timestamp>): a new
        /// name in a writable directory, checked before anything runs.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print only errors.
        #[arg(short, long)]
        quiet: bool,
        /// Also print every iteration's time.
        #[arg(short, long)]
        verbose: bool,
        /// Run on this device whatever runtime.device says (auto, cpu, cuda).
        #[arg(long, value_parser = ["auto", "cpu", "cuda"])]
        device: Option<String>,
    },
    /// Check a run directory against its manifest: every file, checksum and cross-check. Exit 0,
    /// or 3 naming each thing that does not verify.
    #[command(after_help = "Example:\n  distrun verify runs/allreduce-20261121T173045Z")]
    Verify {
        /// A run directory (holding manifest.json).
        run_dir: PathBuf,
    },
    /// Tables of what run directories recorded: per step (and sweep point) size, count, type,
    /// redop, root, time (us), algbw and busbw for collectives; m, n, k, algorithm and TFLOP/s
    /// for matmul; shape and kind for FFT. One table per op family; several run directories
    /// stand side by side, each with its ratio to the first. Exit 0, or 1 for a run directory or
    /// manifest that cannot be read.
    #[command(
        after_help = "Example:\n  distrun report runs/coll-1\n  distrun report runs/coll-1 runs/coll-4 --format md --output coll.md\n  distrun report runs/sweep --format csv\n  distrun report runs/coll-1 runs/coll-4 --plot coll.svg"
    )]
    Report {
        /// Run directories (each holding manifest.json); ratios compare with the first.
        #[arg(required = true)]
        run_dirs: Vec<PathBuf>,
        /// table: aligned columns; md: GitHub markdown; csv and json: a row per step per point
        /// per run.
        #[arg(long, value_enum, default_value_t = crate::report::Format::Table)]
        format: crate::report::Format,
        /// Write the report to this file instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Also draw busbw against size (collectives), TFLOP/s (matmul) and time (FFT), one
        /// chart per family stacked in this .svg or .png file (a PNG needs a TrueType font:
        /// DejaVu Sans from fonts-dejavu-core, or DISTRUN_FONT=FILE.ttf).
        #[arg(long, value_parser = crate::report::plot_path)]
        plot: Option<PathBuf>,
    },
    /// Check specs: TOML syntax, schema, then meaning. Runs nothing; exit 0, or 2 with every error.
    #[command(
        after_help = "Example:\n  distrun validate specs/gemm.toml specs/fft3d.toml\n  distrun validate --ranks 3 specs/collectives.toml"
    )]
    Validate {
        /// Spec files.
        #[arg(required = true)]
        specs: Vec<PathBuf>,
        /// Also run the checks that depend on the rank count (default: the spec's runtime.ranks).
        #[arg(long, value_parser = rank_count)]
        ranks: Option<u64>,
    },
    /// Resolve every tensor and step for N ranks: local shapes, bytes, symmetric heap, algorithms.
    #[command(
        after_help = "Example:\n  distrun plan specs/gemm.toml --ranks 4\n  distrun plan specs/gemm_block_cyclic.toml --ranks 4096 --json"
    )]
    Plan {
        /// Spec file.
        spec: PathBuf,
        /// Rank count (default: the spec's runtime.ranks).
        #[arg(long, value_parser = rank_count)]
        ranks: Option<u64>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the unfinished run directories that killed runs of this host left in DIR.
    ///
    /// A run directory is written as DIR/.NAME.partial-HOST-PID-N and renamed when done; a run
    /// ended by SIGKILL (or a crash) leaves it behind (SIGINT and SIGTERM remove it). Those whose
    /// process no longer runs on this host are removed, each named; those of running processes
    /// and of other hosts are kept. Every run does the same in its own parent directory. Exit 0,
    /// or 1 where DIR cannot be read or a directory cannot be removed.
    #[command(after_help = "Example:\n  distrun clean\n  distrun clean /scratch/runs")]
    Clean {
        /// Where run directories go: output.dir (default runs), or the parent of an --out.
        #[arg(default_value = "runs")]
        dir: PathBuf,
    },
    /// Print the JSON schema of specs (what schemas/distrun.schema.json holds).
    #[command(after_help = "Example:\n  distrun schema --output schemas/distrun.schema.json")]
    Schema {
        /// Write it to this file instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

/// Exit status for a run whose check failed, or a run directory that does not verify.
pub const EXIT_CHECK: u8 = 3;

const COMMANDS: [&str; 8] = [
    "run", "validate", "plan", "schema", "verify", "report", "clean", "help",
];

/// Flags that take a value in the next argument.
const VALUED: [&str; 7] = [
    "--out", "--device", "--ranks", "--output", "-o", "--format", "--plot",
];

/// `distrun SPEC ...` is `distrun run SPEC ...`, and flags may come before the command or the
/// spec: `distrun -q SPEC`, `distrun -q run SPEC` and `distrun run -q SPEC` are the same.
fn with_run_implied(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut i = 1;
    while let Some(arg) = args.get(i).and_then(|a| a.to_str()) {
        if !arg.starts_with('-') {
            break;
        }
        i += if VALUED.contains(&arg) { 2 } else { 1 };
    }
    let Some(first) = args.get(i) else {
        return args; // only flags: --help, --version
    };
    let mut out = vec![args[0].clone()];
    if first.to_str().is_some_and(|c| COMMANDS.contains(&c)) {
        out.push(first.clone());
        out.extend(args[1..i].iter().cloned());
        out.extend(args[i + 1..].iter().cloned());
    } else {
        out.push("run".into());
        out.extend(args[1..].iter().cloned());
    }
    out
}

/// Parses the command line, runs the command and returns its exit status.
pub fn main() -> ExitCode {
    crate::exec::mark_start();
    let cli = Cli::parse_from(with_run_implied(std::env::args_os().collect()));
    crate::runtime::abort_job_on_panic();
    match std::panic::catch_unwind(|| run(cli.command)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("distrun: {e:#}");
            ExitCode::FAILURE
        }
        // One rank alone: the hook printed the panic; a runtime failure's exit code.
        Err(_) => ExitCode::FAILURE,
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run {
            spec,
            out,
            quiet,
            verbose,
            device,
        } => Ok(run_spec(
            &spec,
            device.as_deref(),
            &crate::exec::Options {
                out,
                quiet,
                verbose,
            },
        )),
        Command::Verify { run_dir } => {
            anyhow::ensure!(run_dir.is_dir(), "{} is not a directory", run_dir.display());
            // A directory whose manifest is missing or unreadable does not verify either.
            let report = match crate::output::verify::verify(&run_dir) {
                Ok(report) => report,
                Err(e) => {
                    eprintln!("distrun: {}: {e:#}", run_dir.display());
                    return Ok(ExitCode::from(EXIT_CHECK));
                }
            };
            for finding in &report.findings {
                eprintln!("{}: {finding}", run_dir.display());
            }
            if report.ok() {
                println!("{}: {} files verified", run_dir.display(), report.checked);
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::from(EXIT_CHECK))
            }
        }
        Command::Report {
            run_dirs,
            format,
            output,
            plot,
        } => {
            let runs = crate::report::load(&run_dirs)?;
            crate::report::report(&runs, format, output.as_deref(), plot.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate { specs, ranks } => {
            let mut failed = false;
            for path in &specs {
                match validate(path, ranks) {
                    Ok(()) => println!("{}: ok", path.display()),
                    Err(invalid) => {
                        failed = true;
                        eprintln!("{invalid}");
                    }
                }
            }
            Ok(if failed {
                ExitCode::from(EXIT_INVALID)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Plan { spec, ranks, json } => match plan_spec(&spec, ranks) {
            Ok(plan) => {
                if json {
                    println!("{}", serde_json::to_string_pretty(&plan.to_json())?);
                } else {
                    print!("{}", plan.to_table(&spec.display().to_string()));
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(invalid) => {
                eprintln!("{invalid}");
                Ok(ExitCode::from(EXIT_INVALID))
            }
        },
        Command::Clean { dir } => clean(&dir),
        Command::Schema { output } => {
            let text = spec::schema::schema_json();
            match output {
                Some(path) => std::fs::write(&path, text)
                    .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?,
                None => print!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `distrun clean DIR`: removes the stale partial directories in DIR, naming each, and names the
/// running processes' ones it keeps.
fn clean(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    use crate::output::rundir::stale;
    let found =
        stale::partials(dir).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.display()))?;
    for p in &found {
        if p.alive {
            println!("kept {}: process {} is running", p.path.display(), p.pid);
        } else {
            stale::remove(p)?;
            println!("removed {}: process {} has ended", p.path.display(), p.pid);
        }
    }
    if found.is_empty() {
        println!("{}: no unfinished run directories", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Loads a spec file's points (syntax, schema); where the schema fails, the report also has the
/// meaning errors of the rest of the spec, or of a sweep's other points (at `ranks`, else the
/// spec's own rank count), so that every error comes at once.
fn load(path: &std::path::Path, ranks: Option<u64>) -> Result<spec::Swept, InvalidSpec> {
    let meaning = |loaded: &spec::Loaded| plan::resolve(loaded, ranks_for(loaded, ranks)).map(drop);
    spec::load_swept(path, meaning).map_err(|invalid| with_meaning_errors(invalid, ranks))
}

/// A schema-invalid spec's report with the meaning errors of its repaired rest added: those
/// that do not follow from the repair (see `spec::repair`).
fn with_meaning_errors(invalid: InvalidSpec, ranks: Option<u64>) -> InvalidSpec {
    let Some(spec::SchemaFailure {
        diags: schema,
        repaired: Some(repaired),
    }) = &invalid.schema
    else {
        return invalid;
    };
    let (loaded, repair) = repaired.as_ref();
    let ranks = ranks_for(loaded, ranks);
    let Err(meaning) = plan::resolve(loaded, ranks) else {
        return invalid;
    };
    let mut all = schema.clone();
    all.extend(meaning.into_iter().filter(|d| repair.independent(d)));
    loaded.invalid(&all)
}

/// All three validation passes over one spec file (over every point of a sweep).
pub fn validate(path: &std::path::Path, ranks: Option<u64>) -> Result<(), InvalidSpec> {
    let swept = load(path, ranks)?;
    let ranks = ranks_for(swept.first(), ranks);
    (swept.per_point(|loaded| plan::resolve(loaded, ranks)))
        .map_err(|d| swept.first().invalid(&d))?;
    Ok(())
}

/// The rank count to check or plan for: `--ranks`, else the spec's `runtime.ranks`.
fn ranks_for(loaded: &spec::Loaded, ranks: Option<u64>) -> Option<u64> {
    ranks.or(loaded.spec.runtime.ranks.map(u64::from))
}

/// A `--ranks` value: a whole number from 1 to [`plan::resolve::MAX_RANKS`].
fn rank_count(text: &str) -> Result<u64, String> {
    let max = plan::resolve::MAX_RANKS;
    match text.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        Ok(n) if n > max => Err(format!("rank count too large (at most {max})")),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err(format!("rank count too large (at most {max})"))
        }
        _ => Err(format!("a rank count is a whole number from 1 to {max}")),
    }
}

/// Loads, validates and plans one spec file (every point of a sweep).
pub fn plan_spec(path: &std::path::Path, ranks: Option<u64>) -> Result<plan::Plans, InvalidSpec> {
    let swept = load(path, ranks)?;
    let Some(ranks) = ranks_for(swept.first(), ranks) else {
        return Err(InvalidSpec {
            report: format!(
                "{}: the rank count is unknown: give --ranks N (or set runtime.ranks)\n",
                path.display()
            ),
            count: 1,
            schema: None,
        });
    };
    let mut plans = plan::Plans::new(&swept, ranks).map_err(|d| swept.first().invalid(&d))?;
    // `device = "auto"` planned as a run here would take it.
    plans.on_device(crate::exec::device_here(swept.first()));
    Ok(plans)
}

/// The exit of a rank that found the spec invalid: the first rank prints `errors` (every rank
/// finds the same), the others wait a moment first, since mpiexec ends the whole job at the
/// first rank that fails and could kill the first one before its errors are out.
fn invalid(first: bool, errors: &dyn std::fmt::Display) -> ExitCode {
    match first {
        true => eprintln!("{errors}"),
        false => std::thread::sleep(std::time::Duration::from_secs(1)),
    }
    ExitCode::from(EXIT_INVALID)
}

/// Runs a spec on this rank: validation errors are printed by the first rank only (every rank
/// finds the same), a failure on any rank stops them all.
fn run_spec(path: &std::path::Path, device: Option<&str>, opts: &crate::exec::Options) -> ExitCode {
    let first = crate::runtime::launcher::rank_hint().is_none_or(|r| r == 0);
    let mut swept = match load(path, None) {
        Ok(l) => l,
        Err(errors) => return invalid(first, &errors),
    };
    if let Some(d) = device {
        for (_, loaded) in &mut swept.points {
            loaded.spec.runtime.device = match d {
                "cpu" => spec::model::Device::Cpu,
                "cuda" => spec::model::Device::Cuda,
                _ => spec::model::Device::Auto,
            };
        }
    }
    let loaded = swept.first();
    // A spec that fixes its rank count is planned before anything starts (with the device
    // --device chose), so that a launch with another count does not hide its errors; the run
    // uses that plan (the process group refuses any other count).
    let early = match loaded.spec.runtime.ranks {
        Some(n) => match plan::Plans::new(&swept, u64::from(n)) {
            Ok(p) => Some(p),
            Err(d) => return invalid(first, &loaded.invalid(&d)),
        },
        None => None,
    };
    if let Err(e) = crate::exec::preflight(loaded) {
        if first {
            eprintln!("distrun: {e:#}");
        }
        return ExitCode::FAILURE;
    }
    let ctx =
        match crate::runtime::start(loaded.spec.runtime.process_group, loaded.spec.runtime.ranks) {
            Ok(ctx) => ctx,
            Err(e) => {
                if first && !e.is::<crate::runtime::Reported>() {
                    eprintln!("distrun: {e:#}");
                }
                return ExitCode::FAILURE;
            }
        };
    let mut plans = match early.map_or_else(|| plan::Plans::new(&swept, ctx.size() as u64), Ok) {
        Ok(p) => p,
        Err(d) => return invalid(ctx.rank() == 0, &loaded.invalid(&d)),
    };
    let device = match crate::exec::device(loaded, &ctx) {
        Ok(d) => d,
        Err(e) => ctx.fail(&e),
    };
    plans.on_device(device);
    if let Err(e) = crate::runtime::signals::install() {
        ctx.fail(&anyhow::Error::from(e).context("cannot catch SIGINT and SIGTERM"));
    }
    if let Err(e) = crate::exec::check_output(&plans, &ctx, opts) {
        if !e.is::<crate::runtime::Reported>() {
            eprintln!("distrun: {e:#}");
        }
        return ExitCode::FAILURE;
    }
    let status = match crate::exec::run(&plans, &ctx, opts, device) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_CHECK),
        // Every rank agreed to stop, and the first said why.
        Err(e) if e.is::<crate::runtime::Reported>() => ExitCode::FAILURE,
        Err(e) => ctx.fail(&e),
    };
    // With -v, the process group's closing too (MPI_Finalize under a launcher), and the
    // process's whole time to its exit: what a run's wall time holds beyond them is the
    // launcher's and the process's loading and exit.
    let progress = crate::exec::Progress::new(ctx.rank() == 0 && !opts.quiet, opts.verbose, 0);
    let closing = std::time::Instant::now();
    drop(ctx);
    progress.setup("process group closed", closing.elapsed().as_secs_f64());
    progress.since_start("exiting");
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn implied(args: &str) -> String {
        let args = args.split(' ').map(std::ffi::OsString::from).collect();
        let out: Vec<String> = (with_run_implied(args).into_iter())
            .map(|a| a.into_string().unwrap())
            .collect();
        out.join(" ")
    }

    #[test]
    fn flags_may_come_before_the_command_or_the_spec() {
        assert_eq!(implied("distrun s.toml -q"), "distrun run s.toml -q");
        assert_eq!(implied("distrun -q s.toml"), "distrun run -q s.toml");
        assert_eq!(
            implied("distrun --out o -v s.toml"),
            "distrun run --out o -v s.toml"
        );
        assert_eq!(implied("distrun -q run s.toml"), "distrun run -q s.toml");
        assert_eq!(
            implied("distrun --ranks 3 plan s.toml --json"),
            "distrun plan --ranks 3 s.toml --json"
        );
        assert_eq!(implied("distrun validate a b"), "distrun validate a b");
        assert_eq!(implied("distrun --version"), "distrun --version");
        // A run directory named like a command is still a spec path after `run`.
        assert_eq!(implied("distrun run plan"), "distrun run plan");
    }
}
