//! Ranks started without MPI — torchrun's variables, or srun's without an MPI plugin — with the
//! real binary. Their group only coordinates (on GPUs NCCL moves the data), so a run on the CPU,
//! whose backend moves data through MPI, is refused on every rank before anything runs.

mod common;
use common::*;
use std::path::Path;

/// Variables of launchers that must not leak in from the test's own environment.
const LAUNCH_VARS: [&str; 14] = [
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "PMI_SIZE",
    "PMI_RANK",
    "PMIX_SIZE",
    "PMIX_RANK",
    "MV2_COMM_WORLD_SIZE",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "TORCHELASTIC_USE_AGENT_STORE",
];

/// A spec that writes a tensor under `dir/runs`.
fn spec(dir: &Path, device: &str) -> std::path::PathBuf {
    let spec = dir.join("launch.toml");
    let text = format!(
        "[job]\nname = \"launch\"\n[runtime]\ndevice = \"{device}\"\n[tensors.x]\nshape = [8]\n\
         dtype = \"f32\"\ninit = \"ones\"\n[[steps]]\nop = \"barrier\"\n[output]\ndir = \"{}\"\n\
         tensors = [\"x\"]\n",
        dir.join("runs").display()
    );
    std::fs::write(&spec, text).unwrap();
    spec
}

/// `distrun run SPEC` with only these launch variables set.
fn rank(spec: &Path, vars: &[(&str, String)]) -> Distrun {
    let mut d = Distrun::new().args(["run", spec.to_str().unwrap(), "-q"]);
    for var in LAUNCH_VARS {
        d = d.env_remove(var);
    }
    // Were the refusal to fail, a rank would wait for the others only this long.
    d = d.env("DISTRUN_RENDEZVOUS_TIMEOUT_S", 20);
    for (k, v) in vars {
        d = d.env(k, v);
    }
    d
}

/// Runs every rank at once; each one's outcome, by rank.
fn ranks(spec: &Path, vars: impl Fn(usize) -> Vec<(&'static str, String)>, p: usize) -> Vec<Ran> {
    let started: Vec<_> = (0..p)
        .map(|r| {
            let d = rank(spec, &vars(r));
            std::thread::spawn(move || d.run())
        })
        .collect();
    started.into_iter().map(|t| t.join().unwrap()).collect()
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn assert_refused(ran: &[Ran], dir: &Path, started: &str, launch: &str) {
    let said: String = ran.iter().map(|r| r.stderr.as_str()).collect();
    let message =
        format!("started by {started} without MPI: the CPU backend moves data through MPI");
    for (r, run) in ran.iter().enumerate() {
        assert_eq!(run.code, 1, "rank {r}: {said}");
    }
    // The first rank says it, once.
    assert_eq!(said.matches(&message).count(), 1, "{said}");
    assert!(ran[0].stderr.contains(launch), "{said}");
    assert!(!said.contains("another MPI"), "{said}");
    assert!(!dir.join("runs").exists(), "nothing is written");
}

#[test]
fn torchrun_style_ranks_on_the_cpu_are_refused_before_anything_runs() {
    let dir = temp_dir("torchrun-cpu");
    let port = free_port();
    for device in ["auto", "cpu"] {
        let spec = spec(&dir, device);
        let ran = ranks(
            &spec,
            |r| {
                vec![
                    ("RANK", r.to_string()),
                    ("LOCAL_RANK", r.to_string()),
                    ("WORLD_SIZE", "2".into()),
                    ("MASTER_ADDR", "127.0.0.1".into()),
                    ("MASTER_PORT", port.to_string()),
                ]
            },
            2,
        );
        let started = "torchrun-style variables (WORLD_SIZE=2)";
        assert_refused(&ran, &dir, started, "start it with mpiexec -n 2");
    }
}

#[test]
fn slurm_ranks_without_an_mpi_plugin_on_the_cpu_are_refused_the_same_way() {
    let dir = temp_dir("srun-cpu");
    let spec = spec(&dir, "auto");
    let ran = ranks(
        &spec,
        |r| {
            vec![
                ("SLURM_PROCID", r.to_string()),
                ("SLURM_NTASKS", "2".into()),
                ("SLURM_JOB_NODELIST", "localhost".into()),
                ("SLURM_JOB_ID", "4242".into()),
            ]
        },
        2,
    );
    let started = "Slurm's variables (SLURM_NTASKS=2)";
    assert_refused(&ran, &dir, started, "srun --mpi=pmix -n 2 or mpiexec -n 2");
}

#[test]
fn one_torchrun_rank_runs_alone() {
    let dir = temp_dir("torchrun-one");
    let spec = spec(&dir, "cpu");
    let vars = [("RANK", "0".to_string()), ("WORLD_SIZE", "1".to_string())];
    let ran = rank(&spec, &vars).run().code(0);
    let run = std::path::PathBuf::from(ran.stdout.trim());
    assert_eq!(manifest(&run)["ranks"], 1);
}
