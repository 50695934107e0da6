//! A rank's piece of a generated init, computed in parallel.

use super::index::IndexMap;
use super::scalar::encode;
use super::value::Generator;
use crate::spec::tensor::DType;
use rayon::prelude::*;

/// Elements per parallel task (of a generated piece, or of anything computed element by element
/// like it).
pub const CHUNK: usize = 1 << 14;

/// The bytes of the piece described by `map`, every element from `generator`.
pub fn generate(generator: &Generator, dtype: DType, map: &IndexMap) -> Vec<u8> {
    let size = dtype.size() as usize;
    let mut out = vec![0u8; map.len() as usize * size];
    if generator.is_constant() {
        let mut one = vec![0u8; size];
        encode(dtype, generator.value(0), &mut one);
        out.par_chunks_mut(CHUNK * size).for_each(|chunk| {
            for el in chunk.chunks_exact_mut(size) {
                el.copy_from_slice(&one);
            }
        });
        return out;
    }
    out.par_chunks_mut(CHUNK * size)
        .enumerate()
        .for_each(|(k, chunk)| {
            let mut idx = map.unravel((k * CHUNK) as u64);
            for el in chunk.chunks_exact_mut(size) {
                encode(dtype, generator.value(map.global_linear(&idx)), el);
                map.advance(&mut idx);
            }
        });
    out
}
