//! A rank's piece of an `npy` init, read from the file holding the global array: only the
//! rank's own elements, by seeking to each contiguous run along the file's fastest axis.

use super::index::IndexMap;
use crate::dist::TensorState;
use crate::spec::npy::{descrs, open};
use anyhow::{Context, Result, anyhow, bail};
use std::io::{BufReader, Read, Seek};
use std::path::Path;

/// Read buffer size: runs closer than this are served from one read.
const BUFFER: usize = 1 << 16;

/// Reads `map`'s piece of the tensor `state` from the .npy file at `path`.
pub fn read_local(path: &Path, state: &TensorState, map: &IndexMap) -> Result<Vec<u8>> {
    let (header, file) = open(path).map_err(|e| anyhow!(e.message))?;
    let mut reader = BufReader::with_capacity(BUFFER, file);
    let descr = header.descr.as_str();
    let accepted = descrs(state.dtype);
    if !accepted.contains(&descr) {
        bail!(
            "{} holds {descr} data, but the tensor is {} (expected {})",
            path.display(),
            state.dtype,
            accepted.join(" or ")
        );
    }
    if header.shape != map.global {
        bail!(
            "{} holds an array of shape {:?}, but the tensor needs {:?}{}",
            path.display(),
            header.shape,
            map.global,
            if map.global.len() > state.shape.len() {
                " (a partial tensor reads [ranks, *shape])"
            } else {
                ""
            }
        );
    }
    let size = state.dtype.size() as usize;
    read_piece(&mut reader, header.data_start, header.fortran, size, map)
        .with_context(|| format!("cannot read {}", path.display()))
}

/// Reads the piece `map` from the array data starting at byte `data_start` (C or Fortran
/// order, `size` bytes an element), visiting the file's offsets in increasing order.
pub fn read_piece<R: Read + Seek>(
    reader: &mut BufReader<R>,
    data_start: u64,
    fortran: bool,
    size: usize,
    map: &IndexMap,
) -> std::io::Result<Vec<u8>> {
    let nd = map.global.len();
    let mut out = vec![0u8; map.len() as usize * size];
    if out.is_empty() {
        return Ok(out);
    }
    // Axes slowest first in the file, and the element strides of the file and the piece.
    let axes: Vec<usize> = if fortran {
        (0..nd).rev().collect()
    } else {
        (0..nd).collect()
    };
    let strides = |shape: &[u64], c_order: bool| {
        let mut s = vec![1u64; nd];
        for w in 1..nd {
            let (a, prev) = if c_order {
                (nd - 1 - w, nd - w)
            } else {
                (w, w - 1)
            };
            s[a] = s[prev] * shape[prev];
        }
        s
    };
    let fstride = strides(&map.global, !fortran);
    let lstride = strides(&map.local, map.layout == crate::spec::tensor::Layout::C);
    let (outer, fast) = (&axes[..nd - 1], axes[nd - 1]);
    let runs = map.coords[fast].runs();
    let mut idx = vec![0u64; nd];
    let mut pos = data_start;
    let mut buf = Vec::new();
    loop {
        let (mut fbase, mut lbase) = (0, 0);
        for &a in outer {
            fbase += map.coords[a].at(idx[a]) * fstride[a];
            lbase += idx[a] * lstride[a];
        }
        for &(j0, g0, len) in &runs {
            let at = data_start + (fbase + g0) * size as u64;
            reader.seek_relative(at as i64 - pos as i64)?;
            buf.resize(len as usize * size, 0);
            reader.read_exact(&mut buf)?;
            pos = at + buf.len() as u64;
            let step = lstride[fast] as usize * size;
            let dst = (lbase + j0 * lstride[fast]) as usize * size;
            if step == size {
                out[dst..dst + buf.len()].copy_from_slice(&buf);
            } else {
                for (k, el) in buf.chunks_exact(size).enumerate() {
                    out[dst + k * step..dst + k * step + size].copy_from_slice(el);
                }
            }
        }
        // Next combination of the outer axes, the file's faster ones first.
        let mut carried = true;
        for &a in outer.iter().rev() {
            idx[a] += 1;
            if idx[a] < map.local[a] {
                carried = false;
                break;
            }
            idx[a] = 0;
        }
        if carried {
            return Ok(out);
        }
    }
}
