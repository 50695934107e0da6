//! How one axis of a tensor is split among the parts of one grid dimension.

/// The split of one axis of global size `n` among `parts` processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AxisSplit {
    /// Not split: every part holds the whole axis.
    Whole,
    /// Slab rule: part i gets `n/p + (i < n%p)` contiguous rows, in order.
    Even {
        /// Number of parts.
        parts: u64,
    },
    /// Contiguous blocks of `ceil(n/p)`: the last parts may get fewer, or none.
    Block {
        /// Number of parts.
        parts: u64,
    },
    /// Blocks of `block` dealt round-robin starting at part `first` (ScaLAPACK `numroc`).
    Cyclic {
        /// Number of parts.
        parts: u64,
        /// Block size.
        block: u64,
        /// The part that holds the first block.
        first: u64,
    },
}

impl AxisSplit {
    /// Number of parts the axis is split into.
    pub fn parts(self) -> u64 {
        match self {
            AxisSplit::Whole => 1,
            AxisSplit::Even { parts } | AxisSplit::Block { parts } => parts,
            AxisSplit::Cyclic { parts, .. } => parts,
        }
    }

    /// Local size of part `i` for an axis of global size `n`.
    pub fn count(self, n: u64, i: u64) -> u64 {
        match self {
            AxisSplit::Whole => n,
            AxisSplit::Even { parts } => n / parts + u64::from(i < n % parts),
            AxisSplit::Block { parts } => {
                let b = n.div_ceil(parts);
                n.saturating_sub(i * b).min(b)
            }
            AxisSplit::Cyclic {
                parts,
                block,
                first,
            } => numroc(n, block, i, first, parts),
        }
    }

    /// First global index held by part `i` (for contiguous splits).
    fn start(self, n: u64, i: u64) -> u64 {
        match self {
            AxisSplit::Whole | AxisSplit::Cyclic { .. } => 0,
            AxisSplit::Even { parts } => i * (n / parts) + i.min(n % parts),
            AxisSplit::Block { parts } => (i * n.div_ceil(parts)).min(n),
        }
    }

    /// The part holding global index `g` and its local index there (`Whole`: part 0).
    pub fn owner(self, n: u64, g: u64) -> (u64, u64) {
        match self {
            AxisSplit::Whole => (0, g),
            AxisSplit::Even { parts } => {
                let (q, r) = (n / parts, n % parts);
                let big = r * (q + 1);
                let i = if g < big {
                    g / (q + 1)
                } else {
                    r + (g - big) / q
                };
                (i, g - self.start(n, i))
            }
            AxisSplit::Block { parts } => {
                let b = n.div_ceil(parts);
                (g / b, g % b)
            }
            AxisSplit::Cyclic {
                parts,
                block,
                first,
            } => {
                let blk = g / block;
                ((blk + first) % parts, (blk / parts) * block + g % block)
            }
        }
    }

    /// The global index of local index `l` on part `i`.
    pub fn to_global(self, n: u64, i: u64, l: u64) -> u64 {
        match self {
            AxisSplit::Cyclic {
                parts,
                block,
                first,
            } => {
                let shift = (i + parts - first % parts) % parts;
                ((l / block) * parts + shift) * block + l % block
            }
            _ => self.start(n, i) + l,
        }
    }

    /// The `[lo, hi)` global intervals part `i` holds, in local order.
    pub fn intervals(self, n: u64, i: u64) -> Vec<(u64, u64)> {
        match self {
            AxisSplit::Cyclic {
                parts,
                block,
                first,
            } => {
                let shift = (i + parts - first % parts) % parts;
                (0..)
                    .map(|k| (k * parts + shift) * block)
                    .take_while(|&lo| lo < n)
                    .map(|lo| (lo, (lo + block).min(n)))
                    .collect()
            }
            _ => {
                let lo = self.start(n, i);
                let c = self.count(n, i);
                if c == 0 { vec![] } else { vec![(lo, lo + c)] }
            }
        }
    }
}

/// ScaLAPACK's NUMROC: how many of `n` items, in blocks of `nb` dealt round-robin over `nprocs`
/// starting at `isrc`, land on process `iproc`.
pub fn numroc(n: u64, nb: u64, iproc: u64, isrc: u64, nprocs: u64) -> u64 {
    let mydist = (nprocs + iproc - isrc % nprocs) % nprocs;
    let nblocks = n / nb;
    let mut count = (nblocks / nprocs) * nb;
    let extra = nblocks % nprocs;
    if mydist < extra {
        count += nb;
    } else if mydist == extra {
        count += n % nb;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_rule_matches_the_documented_example() {
        let s = AxisSplit::Even { parts: 4 };
        let counts: Vec<u64> = (0..4).map(|i| s.count(39, i)).collect();
        assert_eq!(counts, [10, 10, 10, 9]);
        assert_eq!(s.owner(39, 30), (3, 0));
        assert_eq!(s.to_global(39, 3, 8), 38);
    }

    #[test]
    fn numroc_matches_scalapack() {
        // n=10, nb=3 over 2 procs: blocks [0-2]->0, [3-5]->1, [6-8]->0, [9]->1.
        assert_eq!(numroc(10, 3, 0, 0, 2), 6);
        assert_eq!(numroc(10, 3, 1, 0, 2), 4);
        // Same with the first block on process 1.
        assert_eq!(numroc(10, 3, 1, 1, 2), 6);
        assert_eq!(numroc(10, 3, 0, 1, 2), 4);
    }

    #[test]
    fn block_rule_uses_ceiling_blocks() {
        let s = AxisSplit::Block { parts: 4 };
        let counts: Vec<u64> = (0..4).map(|i| s.count(10, i)).collect();
        assert_eq!(counts, [3, 3, 3, 1]);
        let s = AxisSplit::Block { parts: 4 };
        let counts: Vec<u64> = (0..4).map(|i| s.count(5, i)).collect();
        assert_eq!(counts, [2, 2, 1, 0]);
    }
}
