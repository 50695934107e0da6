//! How this process was started, from the environment its launcher gave it: an MPI launcher
//! (mpiexec, mpirun, srun with an MPI plugin), or torchrun's or Slurm's variables without MPI,
//! whose ranks meet over TCP ([`Rendezvous`]).

use anyhow::{Context as _, Result, bail};
use std::time::Duration;

/// Environment variables that MPI launchers set, with the rank count each gives.
const SIZE_VARS: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpiexec"),
    (
        "PMI_SIZE",
        "an MPICH/Hydra-style mpiexec (MPICH, Intel MPI)",
    ),
    ("PMIX_SIZE", "a PMIx launcher"),
    ("MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun"),
];

/// Variables that show an MPI launcher even without a size: each holds this process's rank.
/// srun sets PMI_RANK or PMIX_RANK only with an MPI plugin (`--mpi=pmi2`, `--mpi=pmix`).
const MARKER_VARS: [&str; 3] = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"];

/// The port of a Slurm job's rendezvous without `MASTER_PORT`: this plus the job id modulo 1000.
const SLURM_BASE_PORT: u16 = 29500;

/// How long ranks wait for each other by default, in seconds.
const DEFAULT_TIMEOUT_S: u64 = 300;

/// The variable that changes that wait.
pub const TIMEOUT_VAR: &str = "DISTRUN_RENDEZVOUS_TIMEOUT_S";

/// An MPI launcher seen in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// Which launcher, in words.
    pub name: &'static str,
    /// The rank count it announced, when it did.
    pub size: Option<u64>,
}

/// Where the ranks of a job started without MPI meet, and who this process is among them:
/// rank 0 listens at `host:port`, the others connect there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    /// Which variables started it, in words ("torchrun-style variables").
    pub source: &'static str,
    /// The variable that gave the rank count (`WORLD_SIZE`, `SLURM_NTASKS`).
    pub size_var: &'static str,
    /// This rank.
    pub rank: usize,
    /// Number of ranks (more than one).
    pub size: usize,
    /// Rank 0's host.
    pub host: String,
    /// The port rank 0 listens on.
    pub port: u16,
    /// How long a rank waits for the others to arrive.
    pub timeout: Duration,
}

impl Rendezvous {
    /// The variables that started the job, as messages name them: "torchrun-style variables
    /// (WORLD_SIZE=4)".
    pub fn started_by(&self) -> String {
        format!("{} ({}={})", self.source, self.size_var, self.size)
    }

    /// How the same ranks start under MPI.
    pub fn under_mpi(&self) -> String {
        match self.size_var {
            "SLURM_NTASKS" => format!("srun --mpi=pmix -n {n} or mpiexec -n {n}", n = self.size),
            _ => format!("mpiexec -n {}", self.size),
        }
    }
}

/// The MPI launcher that started this process, if any (`get` reads a variable).
pub fn detect(get: impl Fn(&str) -> Option<String>) -> Option<Launcher> {
    for (var, name) in SIZE_VARS {
        if let Some(v) = get(var) {
            return Some(Launcher {
                name,
                size: v.trim().parse().ok(),
            });
        }
    }
    MARKER_VARS.iter().find(|v| get(v).is_some())?;
    // srun with an MPI plugin gives the step's size in Slurm's own variable.
    Some(match (get("SLURM_PROCID"), get("SLURM_NTASKS")) {
        (Some(_), Some(n)) => Launcher {
            name: "srun",
            size: n.trim().parse().ok(),
        },
        _ => Launcher {
            name: "an MPI launcher",
            size: None,
        },
    })
}

/// The rendezvous that torchrun's variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
/// `MASTER_PORT`) or Slurm's (`SLURM_PROCID`, `SLURM_NTASKS`, the node list) describe, where
/// they give more than one rank; torchrun's win where both are set (torchrun run by srun).
/// None without them, or for one rank. MPI launchers are not looked at ([`detect`]).
pub fn rendezvous(get: impl Fn(&str) -> Option<String>) -> Result<Option<Rendezvous>> {
    let timeout = match get(TIMEOUT_VAR) {
        None => Duration::from_secs(DEFAULT_TIMEOUT_S),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s),
            _ => bail!("{TIMEOUT_VAR}={v} is not a positive number of seconds"),
        },
    };
    if let Some(size) = get("WORLD_SIZE") {
        let r = ranks(
            &get,
            "torchrun-style variables",
            ("RANK", "WORLD_SIZE"),
            &size,
        )?;
        let Some((rank, size)) = r else {
            return Ok(None);
        };
        let started = format!("torchrun-style variables (WORLD_SIZE={size})");
        let host = get("MASTER_ADDR").filter(|h| !h.trim().is_empty());
        let Some(host) = host else {
            bail!("{started} without MASTER_ADDR: set it to rank 0's host, and MASTER_PORT")
        };
        let Some(port) = get("MASTER_PORT") else {
            bail!("{started} without MASTER_PORT: set it to a free port on rank 0's host")
        };
        let mut port = parse_port(&port)?;
        // torchrun's agent keeps its own store on MASTER_PORT (its workers are its clients):
        // the ranks meet on the next port.
        if get("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True") {
            port = port.checked_add(1).context(
                "MASTER_PORT=65535 is torchrun's agent's, and no port follows it to meet on",
            )?;
        }
        return Ok(Some(Rendezvous {
            source: "torchrun-style variables",
            size_var: "WORLD_SIZE",
            rank,
            size,
            host: host.trim().to_string(),
            port,
            timeout,
        }));
    }
    let (Some(_), Some(size)) = (get("SLURM_PROCID"), get("SLURM_NTASKS")) else {
        return Ok(None);
    };
    let r = ranks(
        &get,
        "Slurm's variables",
        ("SLURM_PROCID", "SLURM_NTASKS"),
        &size,
    )?;
    let Some((rank, size)) = r else {
        return Ok(None);
    };
    let nodes = ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"];
    let host = get("MASTER_ADDR")
        .filter(|h| !h.trim().is_empty())
        .map(|h| h.trim().to_string())
        .or_else(|| nodes.iter().find_map(|v| first_host(&get(v)?)));
    let Some(host) = host else {
        bail!(
            "Slurm's variables (SLURM_NTASKS={size}) without a node list (SLURM_STEP_NODELIST, \
             SLURM_JOB_NODELIST) or MASTER_ADDR: rank 0's host is unknown"
        )
    };
    let port = match get("MASTER_PORT") {
        Some(p) => parse_port(&p)?,
        None => {
            let job = get("SLURM_JOB_ID").and_then(|j| j.trim().parse::<u64>().ok());
            SLURM_BASE_PORT + job.map_or(0, |j| (j % 1000) as u16)
        }
    };
    Ok(Some(Rendezvous {
        source: "Slurm's variables",
        size_var: "SLURM_NTASKS",
        rank,
        size,
        host,
        port,
        timeout,
    }))
}

/// This rank and the rank count from the variables named `(rank, size)`; None for one rank.
fn ranks(
    get: &impl Fn(&str) -> Option<String>,
    source: &str,
    (rank_var, size_var): (&str, &str),
    size: &str,
) -> Result<Option<(usize, usize)>> {
    let size: usize = match size.trim().parse() {
        Ok(n) if n > 0 => n,
        _ => bail!("{source}: {size_var}={size} is not a rank count"),
    };
    let Some(rank) = get(rank_var) else {
        bail!("{source}: {size_var}={size} is set but {rank_var} is not")
    };
    match rank.trim().parse::<usize>() {
        Ok(r) if r < size => Ok((size > 1).then_some((r, size))),
        _ => bail!("{source}: {rank_var}={rank} is no rank of {size_var}={size}"),
    }
}

fn parse_port(port: &str) -> Result<u16> {
    match port.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => bail!("MASTER_PORT={port} is not a port (1 to 65535)"),
    }
}

/// The first host of a Slurm node list: `node[03-05,07]` -> `node03`, `a,b` -> `a`,
/// `rack[1-2]-n[4,6]` -> `rack1-n4`. None for an empty list.
pub fn first_host(list: &str) -> Option<String> {
    let mut host = String::new();
    let mut chars = list.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let set: String = chars.by_ref().take_while(|&c| c != ']').collect();
                host.push_str(set.split([',', '-']).next().unwrap_or_default().trim());
            }
            c => host.push(c),
        }
    }
    (!host.is_empty()).then_some(host)
}

/// This process's rank as its launcher announced it (before any process group starts), when it
/// did: an MPI launcher's, else torchrun's `RANK` (with `WORLD_SIZE`), else Slurm's
/// `SLURM_PROCID`.
pub fn rank_hint() -> Option<u64> {
    let var = |v: &str| std::env::var(v).ok()?.trim().parse().ok();
    let torchrun = || std::env::var_os("WORLD_SIZE").and_then(|_| var("RANK"));
    (MARKER_VARS.iter().find_map(|v| var(v)))
        .or_else(torchrun)
        .or_else(|| var("SLURM_PROCID"))
}

/// The MPI launcher of this process's environment.
pub fn from_env() -> Option<Launcher> {
    detect(|k| std::env::var(k).ok())
}

/// The rendezvous of this process's environment (see [`rendezvous`]).
pub fn rendezvous_from_env() -> Result<Option<Rendezvous>> {
    rendezvous(|k| std::env::var(k).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const TORCHRUN: [(&str, &str); 5] = [
        ("RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "node07"),
        ("MASTER_PORT", "29600"),
    ];

    #[test]
    fn recognises_mpi_launchers() {
        assert_eq!(detect(env(&[])), None);
        assert_eq!(
            detect(env(&[("OMPI_COMM_WORLD_SIZE", "4")])).unwrap().size,
            Some(4)
        );
        assert_eq!(
            detect(env(&[("PMI_SIZE", "3"), ("PMI_RANK", "0")]))
                .unwrap()
                .size,
            Some(3)
        );
        assert_eq!(detect(env(&[("PMIX_RANK", "1")])).unwrap().size, None);
        // An allocation alone is no launch, and neither is srun without an MPI plugin.
        assert_eq!(detect(env(&[("SLURM_NTASKS", "8")])), None);
        assert_eq!(
            detect(env(&[("SLURM_NTASKS", "8"), ("SLURM_PROCID", "2")])),
            None
        );
        let pmix = [
            ("SLURM_NTASKS", "8"),
            ("SLURM_PROCID", "2"),
            ("PMIX_RANK", "2"),
        ];
        assert_eq!(
            detect(env(&pmix)),
            Some(Launcher {
                name: "srun",
                size: Some(8)
            })
        );
        // torchrun's variables are no MPI launch.
        assert_eq!(detect(env(&TORCHRUN)), None);
    }

    #[test]
    fn torchrun_variables_give_the_rank_and_where_rank_0_listens() {
        let r = rendezvous(env(&TORCHRUN)).unwrap().unwrap();
        assert_eq!(
            r,
            Rendezvous {
                source: "torchrun-style variables",
                size_var: "WORLD_SIZE",
                rank: 1,
                size: 4,
                host: "node07".into(),
                port: 29600,
                timeout: Duration::from_secs(300),
            }
        );
        assert_eq!(r.started_by(), "torchrun-style variables (WORLD_SIZE=4)");
        // torchrun's agent holds MASTER_PORT for its own store.
        let agent = [
            TORCHRUN.as_slice(),
            &[("TORCHELASTIC_USE_AGENT_STORE", "True")],
        ]
        .concat();
        assert_eq!(rendezvous(env(&agent)).unwrap().unwrap().port, 29601);
        let quick = [TORCHRUN.as_slice(), &[(TIMEOUT_VAR, "2.5")]].concat();
        assert_eq!(
            rendezvous(env(&quick)).unwrap().unwrap().timeout,
            Duration::from_millis(2500)
        );
        // One rank is no rendezvous: it runs alone.
        let one = [("RANK", "0"), ("WORLD_SIZE", "1")];
        assert_eq!(rendezvous(env(&one)).unwrap(), None);
        assert_eq!(rendezvous(env(&[])).unwrap(), None);
    }

    #[test]
    fn bad_torchrun_variables_are_named() {
        let error = |pairs: &[(&str, &str)]| format!("{:#}", rendezvous(env(pairs)).unwrap_err());
        let without = |key: &str| -> Vec<(&str, &str)> {
            TORCHRUN
                .iter()
                .copied()
                .filter(|(k, _)| *k != key)
                .collect()
        };
        let with = |key: &'static str, value: &'static str| -> Vec<(&str, &str)> {
            let mut pairs = without(key);
            pairs.push((key, value));
            pairs
        };
        assert!(error(&without("MASTER_ADDR")).contains("without MASTER_ADDR"));
        assert!(error(&without("MASTER_PORT")).contains("without MASTER_PORT"));
        assert!(error(&without("RANK")).contains("WORLD_SIZE=4 is set but RANK is not"));
        assert!(error(&with("RANK", "4")).contains("RANK=4 is no rank of WORLD_SIZE=4"));
        assert!(error(&with("WORLD_SIZE", "two")).contains("WORLD_SIZE=two is not a rank count"));
        assert!(error(&with("MASTER_PORT", "70000")).contains("MASTER_PORT=70000 is not a port"));
        assert!(error(&with(TIMEOUT_VAR, "-1")).contains(TIMEOUT_VAR));
    }

    #[test]
    fn slurm_variables_meet_on_the_first_node_of_the_step() {
        let srun = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_NODELIST", "gpu[03-05,07]"),
            ("SLURM_JOB_NODELIST", "gpu[01-09]"),
            ("SLURM_JOB_ID", "123456"),
        ];
        let r = rendezvous(env(&srun)).unwrap().unwrap();
        assert_eq!((r.rank, r.size), (5, 8));
        assert_eq!((r.host.as_str(), r.port), ("gpu03", 29956));
        assert_eq!(r.started_by(), "Slurm's variables (SLURM_NTASKS=8)");
        // The job's list without a step's; MASTER_ADDR and MASTER_PORT win where set.
        let job = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "a,b"),
        ];
        let r = rendezvous(env(&job)).unwrap().unwrap();
        assert_eq!((r.host.as_str(), r.port), ("a", 29500));
        let set = [
            job.as_slice(),
            &[("MASTER_ADDR", "a-ib"), ("MASTER_PORT", "4000")],
        ]
        .concat();
        let r = rendezvous(env(&set)).unwrap().unwrap();
        assert_eq!((r.host.as_str(), r.port), ("a-ib", 4000));
        let nowhere = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")];
        assert!(
            format!("{:#}", rendezvous(env(&nowhere)).unwrap_err())
                .contains("rank 0's host is unknown")
        );
        // torchrun started by srun: torchrun's variables tell the ranks.
        let both = [srun.as_slice(), &TORCHRUN].concat();
        assert_eq!(
            rendezvous(env(&both)).unwrap().unwrap().size_var,
            "WORLD_SIZE"
        );
    }

    #[test]
    fn node_lists_give_their_first_host() {
        assert_eq!(first_host("node[03-05,07]").as_deref(), Some("node03"));
        assert_eq!(first_host("node[7,3-5]").as_deref(), Some("node7"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("solo").as_deref(), Some("solo"));
        assert_eq!(first_host("n[01-02]-ib,m1").as_deref(), Some("n01-ib"));
        assert_eq!(first_host("rack[1-2]-n[4,6]").as_deref(), Some("rack1-n4"));
        assert_eq!(first_host(" "), None);
    }
}
