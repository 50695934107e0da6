//! Which GPU each rank uses: its index among the ranks on its host (from the launcher, or the
//! host names of all ranks) modulo the visible GPUs, or an explicit list.

use crate::spec::model::{DeviceMap, DeviceMapMode};
use anyhow::{Result, bail};

/// The launcher's local rank of this process, when it announced one (torchrun's `LOCAL_RANK`
/// before Slurm's, for torchrun started by srun).
pub fn local_rank_from_env() -> Option<usize> {
    [
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "MPI_LOCALRANKID",
        "MV2_COMM_WORLD_LOCAL_RANK",
        "LOCAL_RANK",
        "SLURM_LOCALID",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// A rank's index among the ranks of the same host, from every rank's host name.
pub fn local_rank_from_hosts(hosts: &[String], rank: usize) -> usize {
    hosts[..rank].iter().filter(|h| **h == hosts[rank]).count()
}

/// The GPU ordinal of `rank`, checked against the visible GPUs.
pub fn ordinal(map: &DeviceMap, rank: usize, local_rank: usize, visible: usize) -> Result<usize> {
    if visible == 0 {
        bail!("device = \"cuda\", but no GPU is visible to rank {rank}");
    }
    match map {
        DeviceMap::Mode(DeviceMapMode::LocalRank) => Ok(local_rank % visible),
        DeviceMap::List(list) => {
            let Some(&gpu) = list.get(rank) else {
                bail!("device_map lists {} GPUs, none for rank {rank}", list.len());
            };
            if gpu as usize >= visible {
                bail!(
                    "device_map gives rank {rank} GPU {gpu}, but its host shows {visible} GPU(s)"
                );
            }
            Ok(gpu as usize)
        }
    }
}

/// Refuses two ranks of one host on one GPU (NCCL cannot run them). `placed` is every rank's
/// (host, GPU ordinal).
pub fn check_unshared(placed: &[(String, usize)]) -> Result<()> {
    for (r, a) in placed.iter().enumerate() {
        if let Some(q) = placed[..r].iter().position(|b| b == a) {
            bail!(
                "ranks {q} and {r} both use GPU {} of {}: NCCL needs one GPU per rank (start fewer \
                 ranks per host, or give device_map a GPU per rank)",
                a.1,
                a.0
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_rank_counts_earlier_ranks_on_the_same_host() {
        let hosts: Vec<String> = ["a", "b", "a", "a", "b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let local: Vec<usize> = (0..5).map(|r| local_rank_from_hosts(&hosts, r)).collect();
        assert_eq!(local, [0, 0, 1, 2, 1]);
    }

    #[test]
    fn ordinals_wrap_over_visible_gpus_or_follow_the_list() {
        let local = DeviceMap::Mode(DeviceMapMode::LocalRank);
        assert_eq!(ordinal(&local, 5, 5, 4).unwrap(), 1);
        let list = DeviceMap::List(vec![3, 2]);
        assert_eq!(ordinal(&list, 1, 1, 4).unwrap(), 2);
        assert!(
            ordinal(&list, 2, 0, 4)
                .unwrap_err()
                .to_string()
                .contains("none for rank 2")
        );
        assert!(
            ordinal(&DeviceMap::List(vec![7]), 0, 0, 4)
                .unwrap_err()
                .to_string()
                .contains("shows 4 GPU")
        );
        assert!(ordinal(&local, 0, 0, 0).is_err());
    }

    #[test]
    fn two_ranks_on_one_gpu_are_refused() {
        let ok = [
            ("a".to_string(), 0),
            ("a".to_string(), 1),
            ("b".to_string(), 0),
        ];
        assert!(check_unshared(&ok).is_ok());
        let bad = [("a".to_string(), 0), ("a".to_string(), 0)];
        assert!(
            check_unshared(&bad)
                .unwrap_err()
                .to_string()
                .contains("ranks 0 and 1 both use GPU 0")
        );
    }
}
