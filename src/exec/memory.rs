//! The memory preflight: before a rank allocates its tensors, the plan's peak per rank is held
//! against what the rank can have (the host's available memory shared by the ranks on it, within
//! its cgroup's limit, for the CPU backend; the GPU's free memory for the GPU backend), and the
//! ranks agree: when one does not fit, every rank stops with exit 1 and the first such rank's
//! numbers, before anything runs (a 7 TiB tensor is refused, not an abort in the allocator).

pub mod counted;

use crate::plan::{Plan, human_bytes as human};
use crate::runtime::Context;
use anyhow::Result;

/// Where a rank's tensors live, and what that place can give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// Host memory.
    Host {
        /// What the host has available.
        available: u64,
        /// How many ranks share it.
        ranks_here: u64,
    },
    /// GPU memory.
    Device {
        /// What is free on the rank's GPU now.
        free: u64,
        /// What the plan's peak counts that is already allocated: the symmetric heap, or the
        /// window of the barriers' words for puts within NCCL windows.
        heap_taken: u64,
    },
}

/// The bytes and name of the largest tensor piece `rank` holds.
fn largest_piece(plan: &Plan, rank: usize) -> Option<(&str, u64)> {
    (plan.tensors.iter())
        .map(|(name, t)| {
            (
                name.as_str(),
                t.bytes_per_rank.get(rank).copied().unwrap_or(0),
            )
        })
        .max_by_key(|&(_, bytes)| bytes)
        .filter(|&(_, bytes)| bytes > 0)
}

/// Why `rank` does not fit in `room`, or None when it does.
pub fn shortfall(plan: &Plan, rank: usize, host: &str, room: Room) -> Option<String> {
    let peak = plan.peak_bytes_per_rank;
    let (need, have, what) = match room {
        Room::Host {
            available,
            ranks_here,
        } => (
            peak.saturating_mul(ranks_here),
            available,
            format!(
                "{ranks_here} rank(s) on {host}, which has {} available",
                human(available)
            ),
        ),
        Room::Device { free, heap_taken } => (
            peak.saturating_sub(heap_taken),
            free,
            format!("its GPU on {host}, which has {} free", human(free)),
        ),
    };
    if need <= have {
        return None;
    }
    let largest = largest_piece(plan, rank)
        .map(|(name, bytes)| format!(" (tensor `{name}`: {} on this rank)", human(bytes)))
        .unwrap_or_default();
    Some(format!(
        "rank {rank}: the plan needs {} per rank{largest}, {} for {what}: nothing was run",
        human(peak),
        human(need),
    ))
}

/// Holds every rank's plan against its room; all ranks call it at the same point. Err (already
/// reported by rank 0: [`crate::runtime::Reported`]) when any rank does not fit.
pub fn preflight(ctx: &Context, plan: &Plan, room: Room) -> Result<()> {
    let why = shortfall(plan, ctx.rank(), &ctx.host, room);
    ctx.stop_together(why.map(|w| format!("not enough memory: {w}")))
}

/// How many ranks run on this host (every rank's host name gathered).
pub fn ranks_on_this_host(ctx: &Context) -> Result<u64> {
    let hosts = ctx.group().all_gather_bytes(ctx.host.as_bytes())?;
    Ok(hosts.iter().filter(|h| **h == ctx.host.as_bytes()).count() as u64)
}

/// The host memory this process can have: `MemAvailable`, within the cgroup's limit less its
/// usage (v2 `memory.max`, or v1 `memory.limit_in_bytes`). None where neither can be read.
pub fn host_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
    let available = meminfo.as_deref().and_then(mem_available);
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let number = |text: Option<String>| text.and_then(|t| t.trim().parse::<u64>().ok());
    let cgroup = match number(read("/sys/fs/cgroup/memory.max")) {
        Some(limit) => Some((limit, number(read("/sys/fs/cgroup/memory.current")))),
        None => number(read("/sys/fs/cgroup/memory/memory.limit_in_bytes")).map(|limit| {
            (
                limit,
                number(read("/sys/fs/cgroup/memory/memory.usage_in_bytes")),
            )
        }),
    }
    .map(|(limit, used)| limit.saturating_sub(used.unwrap_or(0)));
    match (available, cgroup) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests;
