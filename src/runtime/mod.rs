//! Process groups: one rank without a launcher, or MPI_COMM_WORLD; the rank's context, and how a
//! failure on one rank stops every rank.

pub mod comm;
pub mod launcher;
pub mod mpi;
pub mod signals;

use crate::spec::model::ProcessGroup;
use anyhow::{Result, bail};
use comm::{Comm, Group, Single};

/// A started process group.
pub struct Context {
    /// How this rank talks to the others.
    comm: Box<dyn Comm>,
    /// This host's name.
    pub host: String,
    /// Keeps MPI initialized while the context lives (finalizes on drop).
    _universe: Option<::mpi::environment::Universe>,
}

impl Context {
    /// The ranks, and the messages that coordinate them.
    pub fn group(&self) -> &dyn Group {
        self.comm.as_ref()
    }

    /// Data movement between host buffers, where the process group gives it.
    pub fn comm(&self) -> Option<&dyn Comm> {
        Some(self.comm.as_ref())
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
        let all = self
            .comm
            .all_gather_bytes(why.unwrap_or_default().as_bytes())?;
        let Some(first) = all.iter().find(|m| !m.is_empty()) else {
            return Ok(());
        };
        let message = String::from_utf8_lossy(first).into_owned();
        if self.rank() == 0 {
            eprintln!("distrun: {message}");
        }
        self.comm.barrier()?;
        Err(Reported(message).into())
    }

    /// Reports `err` as this rank's failure and ends every rank: the message once, prefixed with
    /// the rank, then MPI_Abort (which makes the launcher stop the others) or exit 1. The run
    /// directory this rank was writing is removed before (nothing unwinds to drop it).
    pub fn fail(&self, err: &anyhow::Error) -> ! {
        eprintln!("distrun: rank {}: {err:#}", self.rank());
        crate::output::rundir::remove_uncommitted();
        if self.size() > 1 {
            self.comm.abort(1);
        }
        std::process::exit(1)
    }
}

/// Makes a panic (a bug) end every rank as an error does: the panic's message, the run directory
/// being written removed, then MPI_Abort where MPI runs with more than one rank. Unwinding instead
/// would tear down NCCL, NVSHMEM and MPI while the other ranks wait for this one in a collective,
/// and the job would hang.
pub fn abort_job_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        crate::output::rundir::remove_uncommitted();
        mpi::abort_if_running(1);
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

/// Starts the process group a spec asks for, checking the rank count it requires.
pub fn start(group: ProcessGroup, required: Option<u32>) -> Result<Context> {
    let launcher = launcher::from_env();
    let use_mpi = match group {
        ProcessGroup::Single => {
            if let Some(l) = launcher.as_ref().filter(|l| l.size.is_some_and(|n| n > 1)) {
                bail!(
                    "process_group = \"single\", but {} started {} ranks: use \"mpi\" or \"auto\"",
                    l.name,
                    l.size.unwrap_or(0)
                );
            }
            false
        }
        ProcessGroup::Mpi => true,
        ProcessGroup::Auto => launcher.is_some(),
    };
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let (comm, universe): (Box<dyn Comm>, _) = if use_mpi {
        let (universe, _) = ::mpi::initialize_with_threading(::mpi::Threading::Funneled)
            .ok_or_else(|| anyhow::anyhow!("MPI was already initialized"))?;
        (Box::new(mpi::MpiComm::world()), Some(universe))
    } else {
        (Box::new(Single), None)
    };
    let size = comm.size() as u64;
    if let Some(l) = &launcher
        && let Some(n) = l.size.filter(|&n| n != size)
    {
        bail!(
            "{} started {n} ranks, but this process sees a world of {size}: the binary is \
                 linked against another MPI ({}) than the launcher's; start it with the mpiexec \
                 of the MPI it was built with",
            l.name,
            mpi_library()
        );
    }
    if let Some(want) = required.filter(|&w| u64::from(w) != size) {
        let cause = if size == 1 && launcher.is_none() {
            " (started without a launcher: use mpiexec -n N)".to_string()
        } else {
            String::new()
        };
        // Every rank finds the same: the first says it, and no rank leaves before it has (the
        // launcher ends the job at the first rank's exit, which could cut the message off).
        let message = format!(
            "the spec requires runtime.ranks = {want}, but the job has {size} rank(s){cause}"
        );
        if comm.rank() == 0 {
            eprintln!("distrun: {message}");
        }
        comm.barrier()?;
        return Err(Reported(message).into());
    }
    Ok(Context {
        comm,
        host,
        _universe: universe,
    })
}

/// The MPI library's own version line, first line only.
fn mpi_library() -> String {
    ::mpi::environment::library_version()
        .ok()
        .and_then(|v| v.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown MPI".into())
}
