//! The value of each element of a generated (not read) init, by global index.

use super::rng;
use super::scalar::Scalar;
use crate::spec::tensor::{DType, Init};

/// An init bound to its tensor (seed, name, dtype): gives any element's value without
/// rehashing the name.
#[derive(Debug, Clone, Copy)]
pub struct Generator {
    kind: GenKind,
    key: u64,
    complex: bool,
}

/// The formula of a generated init, with its parameters (see the [module docs](super)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GenKind {
    /// Every element is the value.
    Constant(f64),
    /// `start + step * i`.
    Arange {
        /// The value of element 0.
        start: f64,
        /// The difference between neighbours.
        step: f64,
    },
    /// `low + (high - low) * u(c)`.
    Uniform {
        /// The lower bound (included).
        low: f64,
        /// The upper bound.
        high: f64,
    },
    /// `mean + std * z(c)`.
    Normal {
        /// The mean.
        mean: f64,
        /// The standard deviation.
        std: f64,
    },
}

/// What a device kernel needs to reproduce a [`Generator`]: its formula, the tensor's stream key
/// and whether the dtype is complex (which picks the counters).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GeneratorParts {
    /// The formula and its parameters.
    pub kind: GenKind,
    /// The stream key: [`key`](super::key) of the job's seed and the tensor's name.
    pub key: u64,
    /// True for c64 and c128: part `lane` of element `i` uses counters from `2i + lane`
    /// (uniform) or `4i + 2 lane` (normal).
    pub complex: bool,
}

impl Generator {
    /// The generator of `init` for tensor `name`; None for `Init::Npy`, which is read, not
    /// generated.
    pub fn new(init: &Init, seed: u64, name: &str, dtype: DType) -> Option<Self> {
        let kind = match init {
            Init::Zeros => GenKind::Constant(0.0),
            Init::Ones => GenKind::Constant(1.0),
            Init::Fill(v) => GenKind::Constant(*v),
            Init::Arange(a) => GenKind::Arange {
                start: a.start,
                step: a.step,
            },
            Init::Uniform(u) => GenKind::Uniform {
                low: u.low,
                high: u.high,
            },
            Init::Normal(n) => GenKind::Normal {
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

    /// Its formula, stream key and complexness, for code that computes the values elsewhere
    /// (the GPU's fill kernel).
    pub fn parts(&self) -> GeneratorParts {
        GeneratorParts {
            kind: self.kind,
            key: self.key,
            complex: self.complex,
        }
    }

    /// True when every element has the same value.
    pub fn is_constant(&self) -> bool {
        matches!(self.kind, GenKind::Constant(_))
    }

    /// The value of the element at C-order global linear index `i`.
    pub fn value(&self, i: u64) -> Scalar {
        let key = self.key;
        match (self.kind, self.complex) {
            (GenKind::Constant(v), _) => Scalar::Real(v),
            (GenKind::Arange { start, step }, _) => Scalar::Real(start + step * i as f64),
            (GenKind::Uniform { low, high }, false) => Scalar::Real(uniform(key, i, low, high)),
            (GenKind::Uniform { low, high }, true) => {
                let c = i.wrapping_mul(2);
                Scalar::Complex(
                    uniform(key, c, low, high),
                    uniform(key, c.wrapping_add(1), low, high),
                )
            }
            (GenKind::Normal { mean, std }, false) => {
                Scalar::Real(mean + std * rng::std_normal(key, i.wrapping_mul(2)))
            }
            (GenKind::Normal { mean, std }, true) => {
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
