//! Sums the checks can trust: Neumaier's compensated summation, whose error stays within a few
//! ulps of the result however many terms enter (a plain sum of n terms can be off by n ulps of
//! their magnitude, more than a c128 check's whole tolerance once n reaches millions).

use crate::backend::Backend;
use anyhow::Result;

/// A compensated running sum.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sum {
    hi: f64,
    lo: f64,
}

impl Sum {
    /// Adds one term.
    pub fn add(&mut self, x: f64) {
        let t = self.hi + x;
        self.lo += if self.hi.abs() >= x.abs() {
            (self.hi - t) + x
        } else {
            (x - t) + self.hi
        };
        self.hi = t;
    }

    /// Adds another sum's terms.
    pub fn merge(mut self, other: Sum) -> Sum {
        self.add(other.hi);
        self.add(other.lo);
        self
    }

    /// A sum kept elsewhere as its two parts (a GPU's compensated sum).
    pub fn from_parts(hi: f64, lo: f64) -> Sum {
        Sum { hi, lo }
    }

    /// The sum times `k` (each part scaled: exact for a power of two or a sign).
    pub fn scaled(self, k: f64) -> Sum {
        Sum {
            hi: self.hi * k,
            lo: self.lo * k,
        }
    }

    /// The sum.
    pub fn value(self) -> f64 {
        self.hi + self.lo
    }
}

impl std::iter::Sum<f64> for Sum {
    fn sum<I: Iterator<Item = f64>>(iter: I) -> Sum {
        let mut s = Sum::default();
        iter.for_each(|x| s.add(x));
        s
    }
}

/// Element-wise sums of a few values over the ranks, every rank's compensated sums gathered and
/// added in rank order (deterministic, and as accurate with 4096 ranks as with 2).
pub fn over_ranks<B: Backend>(b: &B, v: &[Sum]) -> Result<Vec<f64>> {
    let mine: Vec<u8> = v
        .iter()
        .flat_map(|s| [s.hi, s.lo])
        .flat_map(f64::to_le_bytes)
        .collect();
    let all = b.all_gather_bytes(&mine)?;
    Ok((0..v.len())
        .map(|i| {
            all.iter()
                .flat_map(|r| {
                    let at = |j: usize| {
                        f64::from_le_bytes(r[j * 8..j * 8 + 8].try_into().expect("8 bytes"))
                    };
                    [at(2 * i), at(2 * i + 1)]
                })
                .sum::<Sum>()
                .value()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compensated_sum_keeps_what_a_plain_one_loses() {
        // 1 + 2^24 terms of 2^-53: the plain sum never moves from 1.
        let terms = std::iter::once(1.0).chain(std::iter::repeat_n(2f64.powi(-53), 1 << 24));
        let plain: f64 = terms.clone().sum();
        let compensated = terms.sum::<Sum>().value();
        assert_eq!(plain, 1.0);
        assert_eq!(compensated, 1.0 + 2f64.powi(-29));
    }

    #[test]
    fn merged_sums_equal_one_sum() {
        let a: Sum = [1e16, 1.0, -1e16].into_iter().sum();
        let b: Sum = [3.0, 0.5].into_iter().sum();
        assert_eq!(a.merge(b).value(), 4.5);
    }
}
