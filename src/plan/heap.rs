//! Symmetric heap planning: every symmetric tensor gets the same offset and bytes on every rank;
//! tensors whose lifetimes do not overlap may share bytes.

/// NVSHMEM-friendly alignment of every offset, in bytes.
pub const ALIGN: u64 = 512;

/// One tensor to place: its size and the inclusive range of step positions it is live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Bytes reserved (the largest local piece over all ranks).
    pub bytes: u64,
    /// First position live.
    pub first: usize,
    /// Last position live.
    pub last: usize,
}

/// Places requests first-fit, largest first; returns each request's offset and the heap size.
pub fn place(requests: &[Request]) -> (Vec<u64>, u64) {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(requests[i].bytes), i));
    let mut offsets = vec![0u64; requests.len()];
    let mut placed: Vec<usize> = Vec::new();
    for i in order {
        let r = requests[i];
        // Busy byte ranges of placed tensors alive at the same time, by offset.
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .map(|&j| (j, requests[j]))
            .filter(|(_, q)| q.first <= r.last && r.first <= q.last)
            .map(|(j, q)| (offsets[j], offsets[j] + q.bytes))
            .collect();
        busy.sort_unstable();
        let mut at = 0u64;
        for (lo, hi) in busy {
            if at + r.bytes <= lo {
                break;
            }
            at = at.max(hi.div_ceil(ALIGN) * ALIGN);
        }
        offsets[i] = at;
        placed.push(i);
    }
    let size = requests
        .iter()
        .zip(&offsets)
        .map(|(r, o)| o + r.bytes)
        .max()
        .unwrap_or(0);
    (offsets, size.div_ceil(ALIGN) * ALIGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(bytes: u64, first: usize, last: usize) -> Request {
        Request { bytes, first, last }
    }

    #[test]
    fn disjoint_lifetimes_share_bytes() {
        let (offsets, size) = place(&[req(1000, 0, 1), req(1000, 2, 3)]);
        assert_eq!(offsets, [0, 0]);
        assert_eq!(size, 1024);
    }

    #[test]
    fn overlapping_lifetimes_do_not_overlap_in_memory() {
        let reqs = [req(1000, 0, 2), req(600, 1, 3), req(100, 2, 2)];
        let (offsets, size) = place(&reqs);
        for i in 0..3 {
            assert_eq!(offsets[i] % ALIGN, 0);
            for j in i + 1..3 {
                let live = reqs[i].first <= reqs[j].last && reqs[j].first <= reqs[i].last;
                let apart = offsets[i] + reqs[i].bytes <= offsets[j]
                    || offsets[j] + reqs[j].bytes <= offsets[i];
                assert!(!live || apart, "{i} and {j} overlap");
            }
        }
        // 1000 at 0, 600 at 1024, and 100 past both at 2048 (offsets are 512-aligned).
        assert_eq!(offsets, [0, 1024, 2048]);
        assert_eq!(size, 2560);
    }

    #[test]
    fn a_gap_is_reused_when_it_fits() {
        // 0 and 2 live together at step 1..; 1 dies before 2 starts and leaves room.
        let (offsets, _) = place(&[req(4096, 0, 9), req(2048, 0, 1), req(1024, 2, 9)]);
        assert_eq!(offsets[2], 4096);
        assert_eq!(offsets[1], 4096);
    }
}
