//! A whole tensor as written (its C order; a partial tensor is the stack of every rank's
//! array), cut into chunks of at most [`CHUNK_BYTES`] that stream to rank 0 one by one: what
//! the writer moves, and what the plan counts for it.

use super::{Placement, TensorState};
use crate::ops::exchange::Intervals;
use crate::spec::tensor::Distribution;

/// The most bytes a chunk holds, unless one row of the axis it is cut along holds more.
pub const CHUNK_BYTES: u64 = 64 << 20;

/// The shape of the whole tensor as written (a partial tensor is the stack `[P, *S]` of every
/// rank's array), and the state its pieces have as parts of it.
pub fn whole_state(state: &TensorState, ranks: u64) -> TensorState {
    if state.dist != Distribution::Partial {
        return state.clone();
    }
    // Rank p's array is row p of the stack: its piece of a slab along axis 0 (in its layout).
    TensorState {
        shape: std::iter::once(ranks)
            .chain(state.shape.iter().copied())
            .collect(),
        dist: Distribution::slab(0),
        ..state.clone()
    }
}

/// The boxes that cut `shape` into consecutive stretches of its C order, each of at most
/// `chunk` bytes (elements of `elem` bytes) unless one row of the axis cut holds more.
pub fn chunks(shape: &[u64], elem: u64, chunk: u64) -> Vec<Intervals> {
    if shape.contains(&0) {
        return Vec::new();
    }
    chunk_boxes(shape, elem, chunk)
}

/// Where [`chunks`] cuts a shape with no empty axis: along the first axis whose rows (everything
/// after it) fit in a chunk, `step` rows at a time.
fn cut(shape: &[u64], elem: u64, chunk: u64) -> (usize, u64) {
    let row_bytes = |k: usize| shape[k + 1..].iter().product::<u64>() * elem;
    let k = (0..shape.len())
        .find(|&k| row_bytes(k) <= chunk)
        .unwrap_or(shape.len() - 1);
    (k, (chunk / row_bytes(k)).max(1))
}

/// The bytes of the largest chunk [`chunks`] cuts (its first).
fn largest_chunk(shape: &[u64], elem: u64, chunk: u64) -> u64 {
    if shape.contains(&0) {
        return 0;
    }
    let (k, step) = cut(shape, elem, chunk);
    step.min(shape[k]) * shape[k + 1..].iter().product::<u64>() * elem
}

fn chunk_boxes(shape: &[u64], elem: u64, chunk: u64) -> Vec<Intervals> {
    let (k, step) = cut(shape, elem, chunk);
    let prefixes: u64 = shape[..k].iter().product();
    let mut boxes = Vec::new();
    for p in 0..prefixes {
        // The prefix's index along each axis before k (C order: the last fastest).
        let mut rest = p;
        let mut prefix = vec![(0, 0); k];
        for a in (0..k).rev() {
            let i = rest % shape[a];
            rest /= shape[a];
            prefix[a] = (i, i + 1);
        }
        for lo in (0..shape[k]).step_by(step as usize) {
            let mut b: Intervals = prefix.iter().map(|&iv| vec![iv]).collect();
            b.push(vec![(lo, (lo + step).min(shape[k]))]);
            b.extend(shape[k + 1..].iter().map(|&n| vec![(0, n)]));
            boxes.push(b);
        }
    }
    boxes
}

/// The bytes each rank holds at most while the writer (`exec::write`) streams a tensor in
/// `state` to rank 0: a chunk landed, and the exchange's buffers around it (at most a chunk's
/// worth sent and received).
pub fn streaming_bytes(state: &TensorState, ranks: u64) -> impl Fn(u64) -> u64 + use<> {
    let whole = whole_state(state, ranks);
    let elem = whole.dtype.size();
    let largest = largest_chunk(&whole.shape, elem, CHUNK_BYTES);
    move |rank| {
        let piece = Placement::new(&whole.dist, &whole.shape, ranks)
            .local_shape(rank)
            .map_or(0, |s| s.iter().product::<u64>() * elem);
        match rank {
            0 => 3 * largest,
            _ => largest.min(piece),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_c_order_once_in_order() {
        for (shape, chunk) in [
            (vec![7u64, 5, 3], 4 * 15),
            (vec![7, 5, 3], 4 * 7),
            (vec![7, 5, 3], 4),
            (vec![7, 5, 3], 1 << 20),
            (vec![1, 1, 9], 8),
            (vec![4], 4 * 3),
        ] {
            let boxes = chunks(&shape, 4, chunk);
            let mut next = 0u64;
            for b in &boxes {
                // A box of consecutive C-order elements starting where the last ended.
                let strides: Vec<u64> = (0..shape.len())
                    .map(|a| shape[a + 1..].iter().product())
                    .collect();
                let first: u64 = b.iter().zip(&strides).map(|(iv, s)| iv[0].0 * s).sum();
                let count: u64 = b.iter().map(|iv| iv[0].1 - iv[0].0).product();
                assert_eq!(first, next, "{shape:?} / {chunk}: {b:?}");
                let row = strides[b.iter().position(|iv| iv[0].1 - iv[0].0 > 1).unwrap_or(0)];
                assert!(count * 4 <= chunk.max(row * 4), "{shape:?}: {b:?}");
                next += count;
            }
            assert_eq!(next, shape.iter().product::<u64>(), "{shape:?} / {chunk}");
        }
        assert!(chunks(&[3, 0, 2], 4, 64).is_empty());
    }
}
