//! The order in which ranks send their parts of a movement, so that no rank receives from two
//! at once while another sits idle.
//!
//! Each rank's puts go one after the other on its stream, each at about the fabric's speed
//! (one copy engine moves what NVLink carries). Where every rank sends every other the same,
//! ring order (rank r to r + 1, then r + 2...) keeps each round a permutation. Where the parts
//! differ (pencils to slabs, boxes, uneven pieces), ring order leaves some rounds empty for
//! some ranks, which then start their next put early, into a rank another already sends to:
//! both halve. So the sends are grouped in rounds, each a matching (every rank sends at most
//! one part and receives at most one), as few as the busiest rank allows; a rank sends its
//! parts in the order of the rounds.

/// Rank counts above which the order stays the ring's (scheduling visits every pair of ranks
/// once a round).
pub const MAX_RANKS: usize = 64;

/// The order in which rank `me` sends its parts, given `load[s][d]`, what rank s sends rank
/// d (any unit; zero for nothing, the diagonal ignored): the receivers of its nonzero parts,
/// round by round (see the module's doc). Every rank computes the same rounds from the same
/// loads. Ring order where every pair exchanges alike, or above [`MAX_RANKS`].
pub fn order(load: &[Vec<usize>], me: usize) -> Vec<usize> {
    let p = load.len();
    let ring = || {
        (1..p)
            .map(|k| (me + k) % p)
            .filter(|&d| load[me][d] > 0)
            .collect()
    };
    let first = load.first().and_then(|r| r.get(1)).copied().unwrap_or(0);
    let uniform = (0..p).all(|s| (0..p).all(|d| s == d || load[s][d] == first));
    if p > MAX_RANKS || uniform {
        return ring();
    }
    rounds(load)
        .into_iter()
        .filter_map(|round| round[me])
        .collect()
}

/// The sends grouped in rounds: `round[s]` is the rank s sends to in that round. Each round is
/// a largest matching of the sends left, found with the busiest ranks first (the most left to
/// send or receive), so that they stay busy every round.
fn rounds(load: &[Vec<usize>]) -> Vec<Vec<Option<usize>>> {
    let p = load.len();
    let mut left: Vec<Vec<bool>> = (0..p)
        .map(|s| (0..p).map(|d| s != d && load[s][d] > 0).collect())
        .collect();
    let mut out = Vec::new();
    while left.iter().flatten().any(|&e| e) {
        // What each rank has left to send and to receive.
        let sends: Vec<usize> = (0..p)
            .map(|s| (0..p).filter(|&d| left[s][d]).map(|d| load[s][d]).sum())
            .collect();
        let takes: Vec<usize> = (0..p)
            .map(|d| (0..p).filter(|&s| left[s][d]).map(|s| load[s][d]).sum())
            .collect();
        let mut senders: Vec<usize> = (0..p).collect();
        senders.sort_by_key(|&s| std::cmp::Reverse(sends[s]));
        // Each sender's receivers, the busiest first.
        let choices: Vec<Vec<usize>> = (0..p)
            .map(|s| {
                let mut ds: Vec<usize> = (0..p).filter(|&d| left[s][d]).collect();
                ds.sort_by_key(|&d| std::cmp::Reverse(takes[d]));
                ds
            })
            .collect();
        // Kuhn's augmenting paths: `taken[d]` is the sender matched to receiver d.
        let mut taken: Vec<Option<usize>> = vec![None; p];
        for &s in &senders {
            augment(s, &choices, &mut taken, &mut vec![false; p]);
        }
        let mut round = vec![None; p];
        for (d, s) in taken.iter().enumerate() {
            if let Some(s) = *s {
                round[s] = Some(d);
                left[s][d] = false;
            }
        }
        out.push(round);
    }
    out
}

/// Matches sender `s` to a receiver among its `choices`, moving already matched senders to
/// other receivers where that frees one (a depth-first search for an augmenting path).
fn augment(
    s: usize,
    choices: &[Vec<usize>],
    taken: &mut [Option<usize>],
    seen: &mut [bool],
) -> bool {
    for &d in &choices[s] {
        if seen[d] {
            continue;
        }
        seen[d] = true;
        if taken[d].is_none_or(|t| augment(t, choices, taken, seen)) {
            taken[d] = Some(s);
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{order, rounds};

    /// Every rank's order, from the loads.
    fn orders(load: &[Vec<usize>]) -> Vec<Vec<usize>> {
        (0..load.len()).map(|me| order(load, me)).collect()
    }

    #[test]
    fn pencils_to_slabs_go_in_two_rounds_with_no_rank_receiving_twice() {
        // 2 x 2 pencils of [1024, 1024, 512] to x-slabs over 4 ranks (rank r at grid (r % 2,
        // r / 2)): ranks 1 and 2 send their whole box in two halves, ranks 0 and 3 one half.
        let load = vec![
            vec![0, 1, 0, 0],
            vec![0, 0, 1, 1],
            vec![1, 1, 0, 0],
            vec![0, 0, 1, 0],
        ];
        // Ring order puts 1 -> 2 and 3 -> 2 in its first round; the rounds first send each rank
        // one part from one rank, then the second halves between 1 and 2.
        let r = rounds(&load);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], [Some(1), Some(3), Some(0), Some(2)]);
        assert_eq!(r[1], [None, Some(2), Some(1), None]);
        assert_eq!(orders(&load), [vec![1], vec![3, 2], vec![0, 1], vec![2]]);
    }

    #[test]
    fn an_even_all_to_all_keeps_ring_order() {
        let load = vec![vec![5; 4]; 4];
        assert_eq!(order(&load, 1), [2, 3, 0]);
        assert_eq!(order(&load, 3), [0, 1, 2]);
    }

    #[test]
    fn rounds_are_matchings_that_carry_every_part_once() {
        // Pseudo-random sparse loads over 2..12 ranks, uneven too.
        let mut x = 0x9e37_79b9_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for p in 2..12 {
            for _ in 0..20 {
                let load: Vec<Vec<usize>> = (0..p)
                    .map(|_| {
                        (0..p)
                            .map(|_| (next() % 3 == 0) as usize * (1 + next() % 5) as usize)
                            .collect()
                    })
                    .collect();
                let sends = |s: usize| (0..p).filter(|&d| d != s && load[s][d] > 0).count();
                let takes = |d: usize| (0..p).filter(|&s| s != d && load[s][d] > 0).count();
                let busiest = (0..p).map(|r| sends(r).max(takes(r))).max().unwrap();
                let r = rounds(&load);
                // No more rounds than twice the busiest rank's parts (a greedy bound: the
                // fewest possible is that many).
                assert!(
                    r.len() <= 2 * busiest.max(1),
                    "{} rounds for {busiest}",
                    r.len()
                );
                for round in &r {
                    let mut to: Vec<usize> = round.iter().flatten().copied().collect();
                    to.sort();
                    to.dedup();
                    assert_eq!(to.len(), round.iter().flatten().count(), "a rank takes two");
                }
                for (s, o) in orders(&load).iter().enumerate() {
                    let mut o = o.clone();
                    o.sort();
                    let want: Vec<usize> = (0..p).filter(|&d| d != s && load[s][d] > 0).collect();
                    assert_eq!(o, want, "rank {s} of {p}");
                }
            }
        }
    }
}
