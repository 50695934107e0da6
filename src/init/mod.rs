//! Initial values of tensors: each rank's local piece, as bytes.
//!
//! # Data representation
//!
//! A rank's piece is a `Vec<u8>` of the elements of its local shape in the piece's layout order
//! (C: last axis fastest; F: first axis fastest), little-endian: f16 and bf16 as their 16-bit
//! patterns, f32, f64, c64 = `[f32 re, f32 im]`, c128 = `[f64 re, f64 im]`, integers as their
//! native bytes. A rank that holds nothing has an empty piece. See [`encode`] for conversions.
//!
//! # Values
//!
//! A value depends only on the job's seed, the tensor's name, its dtype and the element's
//! global index `i`: the C-order linear index over the global shape. For a `partial` tensor of
//! shape S on P ranks the global tensor is the stacked `[P, *S]` (rank r's piece is row r), so
//! `i = r * prod(S) + (C-order linear index inside S)`. Every value is computed in f64 and then
//! stored with [`encode`].
//!
//! - `zeros`, `ones`, `fill = v`: 0, 1, v (complex: imaginary part 0).
//! - `arange`: `start + step * (i as f64)` (complex: real part only).
//! - `uniform`: `low + (high - low) * u`, per part of a complex.
//! - `normal`: `mean + std * z`, per part of a complex.
//! - `npy`: read from the file, which holds the global array (for partial: `[P, *S]`).
//!
//! # The random generator (to be reproduced bit for bit on the GPU)
//!
//! All arithmetic is on 64-bit unsigned integers modulo 2^64 and IEEE f64, each operation
//! rounded separately to nearest even: no fused multiply-add (compile CUDA with
//! `-fmad=false`, or write `__dmul_rn`, `__dadd_rn`).
//!
//! ```text
//! key         = XXH3_64bits_withSeed(name as UTF-8 bytes, seed)      (computed once, on the host)
//! G           = 0x9E3779B97F4A7C15
//! splitmix(x) = z = x + G
//!               z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//!               z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//!               return z ^ (z >> 31)
//! bits(c)     = splitmix(key ^ (c * G))
//! u(c)        = (double)(bits(c) >> 11) * 2^-53                       (in [0, 1), exact)
//! uniform(c)  = low + (high - low) * u(c)
//! z(c)        = sqrt(-2 * log(1 - u(c))) * cos(2*pi * u(c + 1))        (2*pi = 0x1.921fb54442d18p+2)
//! normal(c)   = mean + std * z(c)
//! ```
//!
//! Counters for the element at global index `i`:
//!
//! | dtype   | uniform                  | normal                                  |
//! |---------|--------------------------|-----------------------------------------|
//! | real    | `c = i`                  | `z(2i)` (counters 2i, 2i+1)             |
//! | complex | re `2i`, im `2i + 1`     | re `z(4i)`, im `z(4i + 2)`              |
//!
//! i.e. part `lane` (0 = re, 1 = im) of a complex element uses counter `2i + lane` (uniform) or
//! the pair `4i + 2 lane, 4i + 2 lane + 1` (normal). `sqrt` is IEEE's (correctly rounded);
//! `log` and `cos` are not the C library's (which differ between libraries, CPUs with and
//! without FMA, and the GPU) but [`fdlibm::ln`] and [`fdlibm::cos`]: fdlibm's algorithms (as in
//! FreeBSD's msun and musl; within 1 ulp), written out as separately rounded f64 operations, so
//! that every machine computes the same bits.
//!
//! # Where pieces are made
//!
//! [`local_piece`] says where a rank's piece comes from ([`Piece`]): nothing, a [`Generator`]
//! over an [`IndexMap`] (the piece's global coordinates per axis), or bytes read from an `npy`
//! file on the host. The run loop hands generated pieces to the backend
//! (`Backend::generate`): the CPU backend runs [`generate`] (rayon), the GPU backend an NVRTC
//! kernel (`backend/cuda/fill.rs`, compiled with `--fmad=false`, one thread per element) that
//! evaluates the formulas above with separately rounded `__dadd_rn`/`__dmul_rn`/`__ddiv_rn`/
//! `__dsqrt_rn` (and the same [`fdlibm`] `log` and `cos`, operation for operation), and stores
//! with [`encode`]'s conversions, so every generated init is bit for bit the host's.
//! `npy` pieces are read on the host and copied to the device. [`fill_local`] gives the host
//! bytes of any piece (the checks' expected values, computed on the host for either backend).

pub mod fdlibm;
mod fill;
mod index;
mod npy;
mod rng;
mod scalar;
mod value;

#[cfg(test)]
pub(crate) mod tests;

pub use fill::{CHUNK, generate};
pub use index::{Coords, IndexMap};
pub use rng::{bits, key, splitmix64, std_normal, unit};
pub use scalar::{Scalar, decode, encode};
pub use value::{GenKind, Generator, GeneratorParts, init_value};

use crate::dist::TensorState;
use crate::spec::tensor::{DType, Init};
use std::path::Path;

/// Where a rank's piece of an init comes from: computed by the backend (on the GPU for
/// `device = "cuda"`), read from a file on the host, or nothing.
#[derive(Debug)]
pub enum Piece {
    /// The rank holds nothing (an empty piece).
    Empty,
    /// Every element computed by the generator at its global index, as the map gives it.
    Generated(Generator, IndexMap),
    /// The piece's bytes, read on the host (`npy`).
    Read(Vec<u8>),
}

impl Piece {
    /// The piece's bytes, generated on the host.
    pub fn into_bytes(self, dtype: DType) -> Vec<u8> {
        match self {
            Piece::Empty => Vec::new(),
            Piece::Generated(generator, map) => fill::generate(&generator, dtype, &map),
            Piece::Read(bytes) => bytes,
        }
    }
}

/// Where the piece of rank `rank` (of `ranks`) of tensor `name`, as created by `init`, comes
/// from: its distribution, shape, dtype and layout are `state`'s; an `npy` path is relative to
/// `spec_dir` and is read now.
pub fn local_piece(
    init: &Init,
    seed: u64,
    name: &str,
    spec_dir: &Path,
    state: &TensorState,
    ranks: u64,
    rank: u64,
) -> anyhow::Result<Piece> {
    let Some(map) = IndexMap::new(state, ranks, rank) else {
        return Ok(Piece::Empty);
    };
    match (init, Generator::new(init, seed, name, state.dtype)) {
        (_, Some(generator)) => Ok(Piece::Generated(generator, map)),
        (Init::Npy(path), None) => Ok(Piece::Read(npy::read_local(
            &spec_dir.join(path),
            state,
            &map,
        )?)),
        (_, None) => unreachable!("only npy has no generator"),
    }
}

/// The bytes of the piece of rank `rank` (of `ranks`) of tensor `name`, as created by `init`,
/// computed on the host (see [`local_piece`]). Empty when the rank holds nothing.
#[cfg(test)]
pub fn fill_local(
    init: &Init,
    seed: u64,
    name: &str,
    spec_dir: &Path,
    state: &TensorState,
    ranks: u64,
    rank: u64,
) -> anyhow::Result<Vec<u8>> {
    Ok(local_piece(init, seed, name, spec_dir, state, ranks, rank)?.into_bytes(state.dtype))
}
