//! The top of a spec: job, runtime, tensors, steps, output.

use super::tensor::{Distribution, TensorSpec};
use crate::ops::Step;
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A distrun spec: one experiment, run the same way on any number of ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "distrun spec")]
pub struct Spec {
    /// The job's name and random seed.
    pub job: Job,
    /// Where and how the ranks run.
    #[serde(default)]
    pub runtime: Runtime,
    /// The tensors, by name.
    #[serde(default)]
    pub tensors: IndexMap<String, TensorSpec>,
    /// The operations to run, in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// What the run writes.
    #[serde(default)]
    pub output: Output,
    /// Runs the spec once per point: key paths (`"tensors.x.shape[0]"`, `"steps[1].algorithm"`,
    /// `"job.seed"`) to the values each takes, a list or a range (`{ from, to, factor }`,
    /// `{ from, to, step }`); the points are the product of the keys, the last varying fastest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<IndexMap<String, super::sweep::SweepValues>>,
}

impl Spec {
    /// The spec as it ran on `device`: that device, the backends it defaults to there, and for
    /// each tensor whose distribution it leaves out, the one `resolved` gives (the plan's).
    pub fn as_run(&self, device: Device, resolved: impl Fn(&str) -> Option<Distribution>) -> Spec {
        let mut spec = self.clone();
        spec.runtime.device = device;
        spec.runtime.backends.get_or_insert_with(|| match device {
            Device::Cuda => vec![CommBackend::Nccl],
            _ => vec![CommBackend::Mpi],
        });
        for (name, t) in spec.tensors.iter_mut() {
            if t.distribution.is_none() {
                t.distribution = resolved(name);
            }
        }
        spec
    }
}

/// `[job]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// Names the run directory: letters, digits, `.`, `_` and `-`.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"), length(min = 1, max = 128))]
    pub name: String,
    /// Drives every random init (default 0).
    #[serde(default)]
    pub seed: u64,
}

/// `[runtime]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    /// auto (default: mpi when started by mpiexec/mpirun or srun with an MPI plugin, tcp when
    /// started by torchrun or srun without one, else single), single, mpi or tcp.
    #[serde(default)]
    pub process_group: ProcessGroup,
    /// auto (default: cuda when a GPU and the CUDA libraries load, else cpu), cpu or cuda.
    #[serde(default)]
    pub device: Device,
    /// GPU ordinal per rank: "local-rank" (default) or a list indexed by rank.
    #[serde(default)]
    pub device_map: DeviceMap,
    /// Communication backends: a subset of nccl, nvshmem (cuda) or mpi (cpu).
    /// Default: cuda -> `["nccl"]`, cpu -> `["mpi"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), extend("uniqueItems" = true))]
    pub backends: Option<Vec<CommBackend>>,
    /// When set, the job refuses to start with another rank count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub ranks: Option<u32>,
}

/// How the ranks are started and joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ProcessGroup {
    /// mpi when an MPI launcher started the process; tcp when torchrun's or Slurm's variables
    /// give several ranks without one; single otherwise.
    #[default]
    Auto,
    /// One rank, no launcher.
    Single,
    /// MPI_COMM_WORLD.
    Mpi,
    /// Ranks started without MPI (torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or
    /// srun's SLURM_PROCID and SLURM_NTASKS) meet at rank 0 over TCP. GPU runs only: NCCL moves
    /// the data.
    Tcp,
}

/// The device each rank computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// cuda when a GPU and the CUDA libraries load, else cpu.
    #[default]
    Auto,
    /// Host memory, rayon threads.
    Cpu,
    /// NVIDIA GPUs.
    Cuda,
}

/// GPU ordinal per rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DeviceMap {
    /// A mode: "local-rank" (the rank's index on its host, modulo visible GPUs).
    Mode(DeviceMapMode),
    /// An explicit GPU ordinal for each rank, indexed by rank.
    List(Vec<u32>),
}

impl Default for DeviceMap {
    fn default() -> Self {
        DeviceMap::Mode(DeviceMapMode::LocalRank)
    }
}

/// Named device mappings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceMapMode {
    /// The rank's index among the ranks on its host, modulo the visible GPUs.
    LocalRank,
}

/// Communication libraries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CommBackend {
    /// NCCL collectives and send/recv (cuda).
    Nccl,
    /// NVSHMEM one-sided puts on the symmetric heap (cuda).
    Nvshmem,
    /// MPI (cpu).
    Mpi,
}

impl CommBackend {
    /// The name used in specs.
    pub fn name(self) -> &'static str {
        match self {
            CommBackend::Nccl => "nccl",
            CommBackend::Nvshmem => "nvshmem",
            CommBackend::Mpi => "mpi",
        }
    }
}

/// `[output]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// Root of run directories (default "runs"), relative to the working directory.
    #[serde(default = "default_dir")]
    pub dir: String,
    /// Which tensors to write (default: none).
    #[serde(default)]
    pub tensors: Vec<String>,
    /// Also write each tensor whole, as one .npy (default false).
    #[serde(default)]
    pub gather: bool,
    /// Checksum of every written file and tensor: xxh3-64 (default) or sha256.
    #[serde(default)]
    pub checksum: Checksum,
}

impl Default for Output {
    fn default() -> Self {
        Output {
            dir: default_dir(),
            tensors: Vec::new(),
            gather: false,
            checksum: Checksum::default(),
        }
    }
}

fn default_dir() -> String {
    "runs".to_string()
}

/// Checksum algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum Checksum {
    /// XXH3, 64-bit.
    #[default]
    #[serde(rename = "xxh3-64")]
    Xxh3_64,
    /// SHA-256.
    #[serde(rename = "sha256")]
    Sha256,
}
