//! Which GPU each rank uses: its index among the ranks on its host (from the launcher, or the
//! host names of all ranks) modulo the visible GPUs, or an explicit list; and which GPUs are
//! visible, told without starting CUDA where that can be told for sure.

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

/// The GPUs CUDA would number 0, 1, ... in this process, as `CUDA_VISIBLE_DEVICES` selectors,
/// told without starting CUDA (whose start-up initialises every visible GPU: 0.9 s on a host of
/// four H200s, 0.2 s for one): from the variable's value `listed` where set and the host's
/// `gpus`. None where only CUDA can tell: MIG instances present, no GPU, or a list holding
/// anything but distinct indices of the host's GPUs (UUIDs, an entry CUDA would stop at).
pub fn visible_without_cuda(listed: Option<&str>, gpus: usize, mig: bool) -> Option<Vec<String>> {
    if mig || gpus == 0 {
        return None;
    }
    let Some(listed) = listed else {
        return Some((0..gpus).map(|i| i.to_string()).collect());
    };
    let mut seen = Vec::new();
    for entry in listed.split(',').map(str::trim) {
        let index: usize = entry.parse().ok()?;
        if index >= gpus || seen.contains(&index) {
            return None;
        }
        seen.push(index);
    }
    Some(seen.iter().map(|i| i.to_string()).collect())
}

/// [`visible_without_cuda`] for this process: from its `CUDA_VISIBLE_DEVICES` and the host's
/// GPUs.
pub fn visible_here() -> Option<Vec<String>> {
    let (gpus, mig) = host_gpus();
    let listed = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    visible_without_cuda(listed.as_deref(), gpus, mig)
}

/// The NVIDIA GPUs of this host as the driver lists them (`/proc/driver/nvidia/gpus`, 0 where
/// it is absent), and whether any has MIG instances.
fn host_gpus() -> (usize, bool) {
    let count = |dir: &str| std::fs::read_dir(dir).map_or(0, |d| d.flatten().count());
    let gpus = count("/proc/driver/nvidia/gpus");
    let mig = std::fs::read_dir("/proc/driver/nvidia/capabilities").is_ok_and(|d| {
        d.flatten()
            .any(|gpu| count(&format!("{}/mig", gpu.path().display())) > 0)
    });
    (gpus, mig)
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
    fn visible_gpus_are_told_without_cuda_only_where_sure() {
        let list = |l: Option<&str>, gpus, mig| visible_without_cuda(l, gpus, mig);
        assert_eq!(list(None, 4, false).unwrap(), ["0", "1", "2", "3"]);
        assert_eq!(list(Some("3, 1"), 4, false).unwrap(), ["3", "1"]);
        // UUIDs, repeated or absent indices, an empty list, MIG, no GPU: CUDA has to tell.
        for (l, gpus, mig) in [
            (Some("GPU-a030d590"), 4, false),
            (Some("1,1"), 4, false),
            (Some("0,4"), 4, false),
            (Some(""), 4, false),
            (None, 4, true),
            (None, 0, false),
        ] {
            assert!(list(l, gpus, mig).is_none(), "{l:?} {gpus} {mig}");
        }
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
