//! Recognising an MPI launcher from the environment it gives its processes.

/// Environment variables that launchers set, with the rank count each gives (when it gives one).
const SIZE_VARS: [(&str, &str); 5] = [
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpiexec"),
    (
        "PMI_SIZE",
        "an MPICH/Hydra-style mpiexec (MPICH, Intel MPI)",
    ),
    ("PMIX_SIZE", "a PMIx launcher"),
    ("MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun"),
    ("SLURM_NTASKS", "srun"),
];

/// Variables that show a launcher even without a size: each holds this process's rank.
const MARKER_VARS: [&str; 4] = [
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
];

/// A launcher seen in the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// Which launcher, in words.
    pub name: &'static str,
    /// The rank count it announced, when it did.
    pub size: Option<u64>,
}

/// The launcher that started this process, if any (`get` reads a variable).
pub fn detect(get: impl Fn(&str) -> Option<String>) -> Option<Launcher> {
    for (var, name) in SIZE_VARS {
        if var == "SLURM_NTASKS" && get("SLURM_PROCID").is_none() {
            continue; // an allocation, not a step started by srun
        }
        if let Some(v) = get(var) {
            return Some(Launcher {
                name,
                size: v.trim().parse().ok(),
            });
        }
    }
    MARKER_VARS
        .iter()
        .find(|v| get(v).is_some())
        .map(|_| Launcher {
            name: "an MPI launcher",
            size: None,
        })
}

/// This process's rank as the launcher announced it (before MPI starts), when it did.
pub fn rank_hint() -> Option<u64> {
    MARKER_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// The launcher of this process's environment.
pub fn from_env() -> Option<Launcher> {
    detect(|k| std::env::var(k).ok())
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

    #[test]
    fn recognises_launchers() {
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
        // An allocation alone is no launch.
        assert_eq!(detect(env(&[("SLURM_NTASKS", "8")])), None);
        assert_eq!(
            detect(env(&[("SLURM_NTASKS", "8"), ("SLURM_PROCID", "2")]))
                .unwrap()
                .size,
            Some(8)
        );
    }
}
