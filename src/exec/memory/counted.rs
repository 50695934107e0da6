//! What a run really holds, measured: every heap allocation of the process goes through
//! [`Counted`], which keeps the bytes live in buffers (allocations of 64 KiB or more) and their
//! high-water mark; with the kernel's own
//! high-water mark of resident memory (`VmHWM`) they are recorded beside the plan's peak in the
//! manifest, so that a plan that undercounts shows (and the tests hold the two together).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The system allocator, counting.
pub struct Counted;

static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

/// Allocations below this are not counted: buffers are what a plan counts, and counting every
/// small allocation would have all threads contend for the counters (a check decoding 67 M
/// elements on 16 threads ran 10x slower).
const COUNTED_FROM: usize = 64 << 10;

fn grew(bytes: usize) {
    if bytes >= COUNTED_FROM {
        let live = LIVE.fetch_add(bytes as u64, Relaxed) + bytes as u64;
        PEAK.fetch_max(live, Relaxed);
    }
}

fn shrank(bytes: usize) {
    if bytes >= COUNTED_FROM {
        LIVE.fetch_sub(bytes as u64, Relaxed);
    }
}

// SAFETY: every call goes to the system allocator with the caller's arguments unchanged; the
// counters are only arithmetic beside it.
unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static COUNTED: Counted = Counted;

/// A point to measure from: the bytes live now, and the process's resident high-water mark.
#[derive(Debug, Clone, Copy)]
pub struct Since {
    live: u64,
    rss: Option<u64>,
}

/// What a stretch of the run took on this rank beyond what was live at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// The most heap bytes allocated at once in buffers of 64 KiB or more (host memory: the CPU
    /// backend's buffers, and a GPU run's downloads and host copies).
    pub heap_bytes: u64,
    /// The growth of the resident set's high-water mark (None where `/proc` is not there).
    pub rss_bytes: Option<u64>,
}

impl Since {
    /// Starts measuring: the peak restarts from what is live now (and the kernel's resident
    /// high-water mark from the resident set now, where it lets a process reset it).
    pub fn now() -> Self {
        let live = LIVE.load(Relaxed);
        PEAK.store(live, Relaxed);
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        Since {
            live,
            rss: resident("VmRSS:"),
        }
    }

    /// What was taken since [`Since::now`].
    pub fn measured(&self) -> Measured {
        Measured {
            heap_bytes: PEAK.load(Relaxed).saturating_sub(self.live),
            rss_bytes: resident("VmHWM:")
                .zip(self.rss)
                .map(|(hwm, start)| hwm.saturating_sub(start)),
        }
    }
}

/// A `/proc/self/status` figure in bytes.
fn resident(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_keeps_what_was_held_after_it_is_freed() {
        // Other tests allocate and free beside this one: only what was seen live is certain.
        let since = Since::now();
        let a = vec![1u8; 8 << 20];
        let held = LIVE.load(Relaxed);
        drop(a);
        assert!(PEAK.load(Relaxed) >= held);
        assert!(since.measured().heap_bytes >= held.saturating_sub(since.live));
    }
}
