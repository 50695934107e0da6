//! The value of each element of a generated (not read) init, by global index.

use super::rng;
use super::scalar::Scalar;
use crate::spec::tensor::{DType, Init};

/// An init bound to its tensor (seed, name, dtype): gives any element's value without
/// rehashing the name.
#[derive(Debug, Clone, Copy)]
pub struct Generator {
    kind: Kind,
    key: u64,
    complex: bool,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Constant(f64),
    Arange { start: f64, step: f64 },
    Uniform { low: f64, high: f64 },
    Normal { mean: f64, std: f64 },
}

impl Generator {
    /// The generator of `init` for tensor `name`; None for `Init::Npy`, which is read, not
    /// generated.
    pub fn new(init: &Init, seed: u64, name: &str, dtype: DType) -> Option<Self> {
        let kind = match init {
            Init::Zeros => Kind::Constant(0.0),
            Init::Ones => Kind::Constant(1.0),
            Init::Fill(v) => Kind::Constant(*v),
            Init::Arange(a) => Kind::Arange {
                start: a.start,
                step: a.step,
            },
            Init::Uniform(u) => Kind::Uniform {
                low: u.low,
                high: u.high,
            },
            Init::Normal(n) => Kind::Normal {
                mean: n.mean,
                std: n.std,
            },
            Init::Npy(_) => return None,
        };
        Some(Generator {
            kind,
            key: rng::key(seed, name),
            complex: dtype.is_complex(),
        })
    }

    /// True when every element has the same value.
    pub fn is_constant(&self) -> bool {
        matches!(self.kind, Kind::Constant(_))
    }

    /// The value of the element at C-order global linear index `i`.
    pub fn value(&self, i: u64) -> Scalar {
        let key = self.key;
        match (self.kind, self.complex) {
            (Kind::Constant(v), _) => Scalar::Real(v),
            (Kind::Arange { start, step }, _) => Scalar::Real(start + step * i as f64),
            (Kind::Uniform { low, high }, false) => Scalar::Real(uniform(key, i, low, high)),
            (Kind::Uniform { low, high }, true) => {
                let c = i.wrapping_mul(2);
                Scalar::Complex(
                    uniform(key, c, low, high),
                    uniform(key, c.wrapping_add(1), low, high),
                )
            }
            (Kind::Normal { mean, std }, false) => {
                Scalar::Real(mean + std * rng::std_normal(key, i.wrapping_mul(2)))
            }
            (Kind::Normal { mean, std }, true) => {
                let c = i.wrapping_mul(4);
                Scalar::Complex(
                    mean + std * rng::std_normal(key, c),
                    mean + std * rng::std_normal(key, c.wrapping_add(2)),
                )
            }
        }
    }
}

fn uniform(key: u64, c: u64, low: f64, high: f64) -> f64 {
    low + (high - low) * rng::unit(key, c)
}

/// The value of element `index` (C-order linear index over the global shape; for a `partial`
/// tensor of shape S on P ranks, over the stacked `[P, *S]`) of tensor `name` created by
/// `init`; None for `Init::Npy`, whose values come from its file.
pub fn init_value(init: &Init, seed: u64, name: &str, dtype: DType, index: u64) -> Option<Scalar> {
    Generator::new(init, seed, name, dtype).map(|g| g.value(index))
}
