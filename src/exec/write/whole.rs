//! A whole tensor in C order streamed to rank 0 in chunks (see [`crate::dist::whole`]): its
//! global checksum and gathered file come from the chunks as they arrive, so no rank ever holds
//! the whole tensor (rank 0's memory for it is about a chunk, whatever its size).

use crate::backend::Backend;
use crate::dist::TensorState;
use crate::dist::whole::{chunks, whole_state};
use crate::ops::exchange::Custom;
use crate::ops::movement::{Movement, Staged};
use crate::spec::tensor::Layout;
use anyhow::Result;

/// Streams the whole of `buf` (this rank's piece of a tensor in `state`) to rank 0, in C order:
/// `sink` gets every chunk there, in order (never elsewhere). Collective. A failing `sink` stops
/// being called, the ranks still finish the exchanges, and its first error is returned.
pub fn stream<B: Backend>(
    b: &B,
    state: &TensorState,
    buf: &B::Buf,
    chunk: u64,
    sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> Result<()> {
    let (ranks, rank) = (b.ranks() as u64, b.rank() as u64);
    let whole = whole_state(state, ranks);
    let elem = whole.dtype.size();
    let mut failed = None;
    for piece in chunks(&whole.shape, elem, chunk) {
        let bytes = piece.iter().map(|iv| iv[0].1 - iv[0].0).product::<u64>() * elem;
        let target = Custom {
            shape: whole.shape.clone(),
            layout: Layout::C,
            pieces: (0..ranks)
                .map(|r| (r == 0).then(|| piece.clone()))
                .collect(),
        };
        let movement = Movement::to(&whole, &target, ranks, rank);
        let here = if rank == 0 { bytes as usize } else { 0 };
        let mut staged = Staged::new(b, movement, here)?;
        let moved = staged.run(b, buf)?;
        if rank == 0 && failed.is_none() {
            failed = sink(&b.download(moved)?).err();
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::Cpu;
    use crate::runtime::comm::Single;
    use crate::spec::tensor::DType;
    use crate::spec::tensor::Distribution;

    fn c_order(shape: &[u64]) -> Vec<u8> {
        (0..shape.iter().product::<u64>() as u32)
            .flat_map(u32::to_le_bytes)
            .collect()
    }

    #[test]
    fn a_streamed_tensor_arrives_whole_in_c_order_from_either_layout() {
        let comm = Single;
        let cpu = Cpu::new(&comm);
        let shape = vec![5u64, 3, 4];
        let c = c_order(&shape);
        for (layout, dist) in [
            (Layout::C, Distribution::Replicated),
            (Layout::F, Distribution::slab(1)),
            (Layout::C, Distribution::Partial),
        ] {
            let state = TensorState {
                shape: shape.clone(),
                dtype: DType::U32,
                layout,
                dist: dist.clone(),
            };
            let c_state = TensorState {
                layout: Layout::C,
                dist: Distribution::Replicated,
                ..state.clone()
            };
            // One rank's partial piece is its whole array.
            let piece = match dist {
                Distribution::Partial => c.clone(),
                _ => crate::ops::movement::regather(&cpu, &c_state, &c, &state).unwrap(),
            };
            for chunk in [4, 20, 48, 1 << 20] {
                let mut got = Vec::new();
                stream(&cpu, &state, &piece, chunk, &mut |bytes| {
                    got.extend_from_slice(bytes);
                    Ok(())
                })
                .unwrap();
                assert_eq!(got, c, "{layout:?} {dist:?} in chunks of {chunk}");
            }
        }
    }
}
