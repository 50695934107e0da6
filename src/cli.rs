//! The command line: `validate`, `plan`, `schema`.

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
    after_help = "Examples:\n  distrun validate specs/*.toml\n  distrun plan specs/gemm.toml --ranks 4\n  distrun schema --output schemas/distrun.schema.json"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check specs: TOML syntax, schema, then meaning. Runs nothing; exit 0, or 2 with every error.
    #[command(
        after_help = "Example:\n  distrun validate specs/gemm.toml specs/fft3d.toml\n  distrun validate --ranks 3 specs/collectives.toml"
    )]
    Validate {
        /// Spec files.
        #[arg(required = true)]
        specs: Vec<PathBuf>,
        /// Also run the checks that depend on the rank count (default: the spec's runtime.ranks).
        #[arg(long)]
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
        #[arg(long)]
        ranks: Option<u64>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON schema of specs (what schemas/distrun.schema.json holds).
    #[command(after_help = "Example:\n  distrun schema --output schemas/distrun.schema.json")]
    Schema {
        /// Write it to this file instead of standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

/// Parses the command line, runs the command and returns its exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("distrun: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
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

/// All three validation passes over one spec file.
pub fn validate(path: &std::path::Path, ranks: Option<u64>) -> Result<(), InvalidSpec> {
    let loaded = spec::load_file(path)?;
    let ranks = ranks.or(loaded.spec.runtime.ranks.map(u64::from));
    plan::resolve(&loaded, ranks).map_err(|d| loaded.invalid(&d))?;
    Ok(())
}

/// Loads, validates and plans one spec file.
pub fn plan_spec(path: &std::path::Path, ranks: Option<u64>) -> Result<plan::Plan, InvalidSpec> {
    let loaded = spec::load_file(path)?;
    let Some(ranks) = ranks.or(loaded.spec.runtime.ranks.map(u64::from)) else {
        return Err(InvalidSpec {
            report: format!(
                "{}: the rank count is unknown: give --ranks N (or set runtime.ranks)\n",
                path.display()
            ),
            count: 1,
        });
    };
    if ranks == 0 {
        return Err(InvalidSpec {
            report: "--ranks must be at least 1\n".into(),
            count: 1,
        });
    }
    plan::plan(&loaded, ranks).map_err(|d| loaded.invalid(&d))
}
