//! Process groups: one rank without a launcher, MPI_COMM_WORLD, or ranks started without MPI
//! (torchrun, Slurm without PMI) joined over TCP; the rank's context, and how a failure on one
//! rank stops every rank.

pub mod comm;
pub mod launcher;
pub mod mpi;
pub mod rendezvous;
pub mod signals;
pub mod tcp;
pub mod threads;
pub mod wire;

use crate::spec::model::ProcessGroup;
use anyhow::{Result, bail};
use comm::{Comm, Group, Single};
use launcher::{Launcher, Rendezvous};

/// A started process group.
pub struct Context {
    /// How this rank talks to the others.
    joined: Joined,
    /// This host's name.
    pub host: String,
    /// Keeps MPI initialized while the context lives (finalizes on drop).
    _universe: Option<::mpi::environment::Universe>,
}

/// What a process group gives: data movement with coordination (one rank, MPI), or
/// coordination alone (ranks joined over TCP, whose data NCCL moves).
enum Joined {
    Moving(Box<dyn Comm>),
    Coordinating(Box<dyn Group>),
}

impl Context {
    /// The ranks, and the messages that coordinate them.
    pub fn group(&self) -> &dyn Group {
        match &self.joined {
            Joined::Moving(comm) => comm.as_ref(),
            Joined::Coordinating(group) => group.as_ref(),
        }
    }

    /// Data movement between host buffers, where the process group gives it (one rank, MPI).
    pub fn comm(&self) -> Option<&dyn Comm> {
        match &self.joined {
            Joined::Moving(comm) => Some(comm.as_ref()),
            Joined::Coordinating(_) => None,
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.group().rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.group().size()
    }

    /// Stops a stage on every rank together: each rank gives why it cannot go on (None when it
    /// can). Where any cannot, rank 0 prints the first such rank's reason, and once it has (a
    /// barrier: a launcher stops the job at the first rank that exits) every rank returns
    /// [`Reported`]. Every rank calls it at the same point.
    pub fn stop_together(&self, why: Option<String>) -> Result<()> {
        let all = (self.group()).all_gather_bytes(why.unwrap_or_default().as_bytes())?;
        let Some(first) = all.iter().find(|m| !m.is_empty()) else {
            return Ok(());
        };
        let message = String::from_utf8_lossy(first).into_owned();
        if self.rank() == 0 {
            eprintln!("distrun: {message}");
        }
        self.group().barrier()?;
        Err(Reported(message).into())
    }

    /// Reports `err` as this rank's failure and ends every rank: the message once, prefixed with
    /// the rank, then MPI_Abort (which makes the launcher stop the others), an abort through
    /// rank 0 (over TCP), or exit 1. The run directory this rank was writing is removed before
    /// (nothing unwinds to drop it).
    pub fn fail(&self, err: &anyhow::Error) -> ! {
        eprintln!("distrun: rank {}: {err:#}", self.rank());
        crate::output::rundir::remove_uncommitted();
        if self.size() > 1 {
            self.group().abort(1);
        }
        std::process::exit(1)
    }
}

/// Makes a panic (a bug) end every rank as an error does: the panic's message, the run directory
/// being written removed, then MPI_Abort where MPI runs with more than one rank, or an abort
/// through rank 0 where the ranks joined over TCP. Unwinding instead would tear down NCCL,
/// NVSHMEM and MPI while the other ranks wait for this one in a collective, and the job would
/// hang.
pub fn abort_job_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        crate::output::rundir::remove_uncommitted();
        mpi::abort_if_running(1);
        tcp::abort_if_running(1);
    }));
}

/// An error already printed by the first rank (the others print nothing more).
#[derive(Debug)]
pub struct Reported(pub String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reported {}

/// The process group that starts: the spec's choice, in this process's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// One rank.
    Single,
    /// MPI_COMM_WORLD, with the launcher that started it where one did.
    Mpi(Option<Launcher>),
    /// Ranks started without MPI, joined over TCP.
    Tcp(Rendezvous),
}

/// The process group `group` starts as in this environment; refuses the spec's choice where the
/// launch gives it no way to join the ranks.
pub fn choose(group: ProcessGroup) -> Result<Start> {
    choose_in(group, |k| std::env::var(k).ok())
}

/// [`choose`] in the environment `get` reads. An MPI launcher wins over torchrun's and Slurm's
/// variables (srun with an MPI plugin sets both).
fn choose_in(group: ProcessGroup, get: impl Fn(&str) -> Option<String>) -> Result<Start> {
    let launcher = launcher::detect(&get);
    let several = launcher.as_ref().filter(|l| l.size.is_some_and(|n| n > 1));
    let meet = match (&launcher, group) {
        (Some(_), ProcessGroup::Auto | ProcessGroup::Mpi) => None,
        _ => launcher::rendezvous(&get)?,
    };
    Ok(match group {
        ProcessGroup::Single => {
            if let Some(l) = several {
                bail!(
                    "process_group = \"single\", but {} started {} ranks: use \"mpi\" or \"auto\"",
                    l.name,
                    l.size.unwrap_or(0)
                );
            }
            if let Some(r) = meet {
                bail!(
                    "process_group = \"single\", but {} started {} ranks: use \"tcp\" or \"auto\"",
                    r.started_by(),
                    r.size
                );
            }
            Start::Single
        }
        ProcessGroup::Mpi => match (launcher, meet) {
            (None, Some(r)) => bail!(
                "process_group = \"mpi\", but {} started this rank without MPI (no MPI \
                 launcher's variables, such as srun's PMI_RANK or PMIX_RANK with an MPI plugin): \
                 start it with {}, or use process_group = \"tcp\" or \"auto\" on GPUs",
                r.started_by(),
                r.under_mpi()
            ),
            (launcher, _) => Start::Mpi(launcher),
        },
        ProcessGroup::Tcp => match (meet, several) {
            (Some(r), _) => Start::Tcp(r),
            (None, Some(l)) => bail!(
                "process_group = \"tcp\", but {} started {} ranks without torchrun's or Slurm's \
                 variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): use \"mpi\" or \"auto\"",
                l.name,
                l.size.unwrap_or(0)
            ),
            (None, None) => Start::Single,
        },
        ProcessGroup::Auto => match (launcher, meet) {
            (Some(l), _) => Start::Mpi(Some(l)),
            (None, Some(r)) => Start::Tcp(r),
            (None, None) => Start::Single,
        },
    })
}

/// Starts the process group a spec asks for, checking the rank count it requires.
pub fn start(group: ProcessGroup, required: Option<u32>) -> Result<Context> {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let (joined, universe) = match choose(group)? {
        Start::Single => (Joined::Moving(Box::new(Single)), None),
        Start::Mpi(launcher) => {
            let (universe, _) = ::mpi::initialize_with_threading(::mpi::Threading::Funneled)
                .ok_or_else(|| anyhow::anyhow!("MPI was already initialized"))?;
            let comm = mpi::MpiComm::world();
            let size = comm.size() as u64;
            if let Some(l) = &launcher
                && let Some(n) = l.size.filter(|&n| n != size)
            {
                bail!(
                    "{} started {n} ranks, but this process sees a world of {size}: the binary is \
                     linked against another MPI ({}) than the launcher's; start it with the \
                     mpiexec of the MPI it was built with",
                    l.name,
                    mpi_library()
                );
            }
            (Joined::Moving(Box::new(comm)), Some(universe))
        }
        Start::Tcp(r) => (Joined::Coordinating(Box::new(join(&r)?)), None),
    };
    let ctx = Context {
        joined,
        host,
        _universe: universe,
    };
    let size = ctx.size() as u64;
    if let Some(want) = required.filter(|&w| u64::from(w) != size) {
        let cause = if size == 1 && launcher::from_env().is_none() {
            " (started without a launcher: use mpiexec -n N)".to_string()
        } else {
            String::new()
        };
        // Every rank finds the same: the first says it, and no rank leaves before it has (the
        // launcher ends the job at the first rank's exit, which could cut the message off).
        let message = format!(
            "the spec requires runtime.ranks = {want}, but the job has {size} rank(s){cause}"
        );
        if ctx.rank() == 0 {
            eprintln!("distrun: {message}");
        }
        ctx.group().barrier()?;
        return Err(Reported(message).into());
    }
    threads::share_cores(ctx.group(), &ctx.host)?;
    Ok(ctx)
}

/// Joins the ranks of a rendezvous over TCP, with the watchdogs that end this process when the
/// job ends early. A rank other than 0 says its own failure to meet (rank 0 says the job's).
fn join(r: &Rendezvous) -> Result<tcp::TcpGroup> {
    let joined = rendezvous::meet(r).and_then(|streams| {
        tcp::TcpGroup::new(r.rank, r.size, streams, Box::new(tcp::exit_process))
    });
    match joined {
        Ok(group) => {
            group.end_job_on_panic();
            Ok(group)
        }
        Err(e) if r.rank != 0 && !e.is::<Reported>() => {
            eprintln!("distrun: rank {}: {e:#}", r.rank);
            Err(Reported(format!("{e:#}")).into())
        }
        Err(e) => Err(e),
    }
}

/// The MPI library's own version line, first line only.
fn mpi_library() -> String {
    ::mpi::environment::library_version()
        .ok()
        .and_then(|v| v.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown MPI".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn choose_with(group: ProcessGroup, pairs: &[(&str, &str)]) -> Result<Start> {
        let map: HashMap<&str, &str> = pairs.iter().copied().collect();
        choose_in(group, |k| map.get(k).map(|v| v.to_string()))
    }

    const TORCHRUN: [(&str, &str); 4] = [
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
    ];

    const SRUN: [(&str, &str); 3] = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_NODELIST", "localhost"),
    ];

    #[test]
    fn auto_joins_torchrun_and_plain_srun_ranks_over_tcp() {
        for vars in [TORCHRUN.as_slice(), &SRUN] {
            let start = choose_with(ProcessGroup::Auto, vars).unwrap();
            assert!(
                matches!(start, Start::Tcp(Rendezvous { size: 2, .. })),
                "{start:?}"
            );
        }
        assert_eq!(choose_with(ProcessGroup::Auto, &[]).unwrap(), Start::Single);
        let one = [("RANK", "0"), ("WORLD_SIZE", "1")];
        assert_eq!(
            choose_with(ProcessGroup::Auto, &one).unwrap(),
            Start::Single
        );
    }

    #[test]
    fn an_mpi_launcher_wins_over_rendezvous_variables() {
        // srun with PMIx sets Slurm's variables too; torchrun-style ones may linger.
        let pmix = [SRUN.as_slice(), &TORCHRUN, &[("PMIX_RANK", "0")]].concat();
        let launcher = Launcher {
            name: "srun",
            size: Some(2),
        };
        assert_eq!(
            choose_with(ProcessGroup::Auto, &pmix).unwrap(),
            Start::Mpi(Some(launcher.clone()))
        );
        assert_eq!(
            choose_with(ProcessGroup::Mpi, &pmix).unwrap(),
            Start::Mpi(Some(launcher))
        );
        // Asked for, tcp takes the rendezvous variables even under an MPI launcher.
        let tcp = choose_with(ProcessGroup::Tcp, &pmix).unwrap();
        assert!(
            matches!(tcp, Start::Tcp(Rendezvous { size: 2, .. })),
            "{tcp:?}"
        );
    }

    #[test]
    fn a_process_group_the_launch_cannot_give_is_refused() {
        let error =
            |group, vars: &[(&str, &str)]| format!("{:#}", choose_with(group, vars).unwrap_err());
        let single = error(ProcessGroup::Single, &TORCHRUN);
        assert!(
            single.contains("torchrun-style variables (WORLD_SIZE=2) started 2 ranks"),
            "{single}"
        );
        let mpi = error(ProcessGroup::Mpi, &SRUN);
        assert!(
            mpi.contains("Slurm's variables (SLURM_NTASKS=2) started this rank without MPI"),
            "{mpi}"
        );
        assert!(
            mpi.contains("srun --mpi=pmix -n 2 or mpiexec -n 2"),
            "{mpi}"
        );
        let mpiexec = [("OMPI_COMM_WORLD_SIZE", "4"), ("OMPI_COMM_WORLD_RANK", "0")];
        let tcp = error(ProcessGroup::Tcp, &mpiexec);
        assert!(
            tcp.contains("Open MPI's mpiexec started 4 ranks without torchrun's"),
            "{tcp}"
        );
        // tcp without a launch runs one rank, as mpi does.
        assert_eq!(choose_with(ProcessGroup::Tcp, &[]).unwrap(), Start::Single);
    }
}
