//! How many threads each rank's host work (rayon: the CPU backend's kernels, fills, checks)
//! runs on: the cores this process may run on, shared with the other ranks of its host that may
//! run on them. rayon's default, every core this process may use, let ranks sharing cores (Open
//! MPI binds more than two ranks to a socket each) start several threads a core, spinning while
//! others waited on MPI: 4 ranks of 32 threads on 2 cores ran a spec of small steps in 158 s,
//! of one thread in 6 s.

use super::comm::Group;
use anyhow::Result;

/// Sizes rayon's thread pool for this rank (collective: every rank calls it once, before any
/// host work): its cores divided among the ranks of its host that share any of them, at least
/// one thread. `RAYON_NUM_THREADS`, where set, decides instead.
pub fn share_cores(group: &dyn Group, host: &str) -> Result<()> {
    if group.size() == 1 {
        return Ok(());
    }
    let mine = allowed_cpus();
    let mut note = mine.clone();
    note.extend_from_slice(host.as_bytes());
    let all = group.all_gather_bytes(&note)?;
    if std::env::var_os("RAYON_NUM_THREADS").is_some() || mine.is_empty() {
        return Ok(());
    }
    let others: Vec<&[u8]> = all
        .iter()
        .filter(|n| n.len() >= mine.len() && &n[mine.len()..] == host.as_bytes())
        .map(|n| &n[..mine.len()])
        .collect();
    // The global pool is built once: where host work already built it, it stays as it is.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(threads(&mine, &others))
        .build_global();
    Ok(())
}

/// The threads for a rank whose cores are the set bits of `mine`, beside the ranks of its host
/// (itself among them) whose cores are `host`: its cores divided by the ranks sharing any.
pub fn threads(mine: &[u8], host: &[&[u8]]) -> usize {
    let cores = |set: &[u8]| set.iter().map(|b| b.count_ones() as usize).sum::<usize>();
    let sharing = host
        .iter()
        .filter(|set| set.iter().zip(mine).any(|(a, b)| a & b != 0))
        .count();
    (cores(mine) / sharing.max(1)).max(1)
}

/// The cores this process may run on, one bit each (a byte per 8 cores, `CPU_SETSIZE` bits);
/// empty where the system does not say.
fn allowed_cpus() -> Vec<u8> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let got = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if got != 0 {
        return Vec::new();
    }
    let bits = 8 * std::mem::size_of_val(&set);
    let mut out = vec![0u8; bits / 8];
    for cpu in 0..bits {
        // SAFETY: cpu < CPU_SETSIZE.
        if unsafe { libc::CPU_ISSET(cpu, &set) } {
            out[cpu / 8] |= 1 << (cpu % 8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cores: &[usize]) -> Vec<u8> {
        let mut s = vec![0u8; 16];
        for &c in cores {
            s[c / 8] |= 1 << (c % 8);
        }
        s
    }

    #[test]
    fn ranks_sharing_a_socket_divide_its_cores() {
        // Four ranks bound to two sockets of 32 cores, two on each.
        let (a, b) = (
            set(&(0..32).collect::<Vec<_>>()),
            set(&(32..64).collect::<Vec<_>>()),
        );
        assert_eq!(threads(&a, &[&a, &a, &b, &b]), 16);
        // Unbound, all on every core.
        let all = set(&(0..64).collect::<Vec<_>>());
        assert_eq!(threads(&all, &[&all, &all, &all, &all]), 16);
    }

    #[test]
    fn a_rank_bound_to_its_own_cores_keeps_them() {
        let (a, b) = (set(&[0, 1, 2, 3]), set(&[4, 5, 6, 7]));
        assert_eq!(threads(&a, &[&a, &b]), 4);
    }

    #[test]
    fn more_ranks_than_cores_still_get_a_thread() {
        let two = set(&[0, 1]);
        assert_eq!(threads(&two, &[&two, &two, &two, &two]), 1);
    }
}
