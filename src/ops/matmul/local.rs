//! The local GEMM of one rank's pieces, through faer (parallel with rayon). faer was chosen over
//! the `gemm` crate after measuring both here: f64 2048^3 on 2 cores ran in 160 ms with faer and
//! 400 ms with `gemm` (bench/RESULTS.md).
//! f16 and bf16 are widened to f32 and accumulate in f32; the product is left in the compute type.

use crate::backend::work::View;
use crate::spec::tensor::DType;
use faer::traits::ComplexField;
use faer::{Accum, MatMut, MatRef, Par, c32, c64};
use half::{bf16, f16};
use rayon::prelude::*;
use std::borrow::Cow;

/// The type products accumulate in: f32 for the half types, the dtype itself otherwise.
pub fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::Bf16 => DType::F32,
        other => other,
    }
}

/// A piece's bytes in its compute type (a copy only for the half types).
pub fn widen(dtype: DType, bytes: &[u8]) -> Cow<'_, [u8]> {
    let to_f32: fn([u8; 2]) -> f32 = match dtype {
        DType::F16 => |b| f16::from_le_bytes(b).to_f32(),
        DType::Bf16 => |b| bf16::from_le_bytes(b).to_f32(),
        _ => return Cow::Borrowed(bytes),
    };
    Cow::Owned(
        bytes
            .par_chunks_exact(2)
            .flat_map_iter(|c| to_f32([c[0], c[1]]).to_le_bytes())
            .collect(),
    )
}

/// Where the local GEMM writes: the block at row `at.0`, column `at.1` of a row-major matrix
/// of `ld` columns in the compute type.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// First row and column of the block.
    pub at: (usize, usize),
    /// Elements per row of the matrix.
    pub ld: usize,
    /// The product adds to the block instead of replacing it.
    pub accumulate: bool,
}

/// The m x n `block` of `out` (compute type) = `alpha * op(a) @ op(b)`, with `a` and `b` in
/// their compute type.
pub fn gemm(
    compute: DType,
    a: (&[u8], View),
    b: (&[u8], View),
    alpha: (f64, f64),
    out: &mut [u8],
    block: Block,
) {
    let (m, k) = a.1.dims();
    let (kb, n) = b.1.dims();
    assert_eq!(k, kb, "inner dimensions of the local pieces");
    let dims = (m, n, k);
    match compute {
        DType::F32 => run::<f32>(a, b, alpha.0 as f32, out, block, dims),
        DType::F64 => run::<f64>(a, b, alpha.0, out, block, dims),
        DType::C64 => run::<c32>(
            a,
            b,
            c32::new(alpha.0 as f32, alpha.1 as f32),
            out,
            block,
            dims,
        ),
        DType::C128 => run::<c64>(a, b, c64::new(alpha.0, alpha.1), out, block, dims),
        other => unreachable!("no GEMM computes in {other}"),
    }
}

/// Elements of `T` read from bytes (borrowed when aligned, copied otherwise).
fn typed<T: Copy>(bytes: &[u8]) -> Cow<'_, [T]> {
    // SAFETY: T is a plain number type (f32, f64, Complex of them): every bit pattern is valid.
    let (head, body, tail) = unsafe { bytes.align_to::<T>() };
    if head.is_empty() && tail.is_empty() {
        Cow::Borrowed(body)
    } else {
        let size = std::mem::size_of::<T>();
        Cow::Owned(
            bytes
                .chunks_exact(size)
                // SAFETY: as above; read_unaligned copes with any address.
                .map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr() as *const T) })
                .collect(),
        )
    }
}

fn run<T: ComplexField + Copy + Default>(
    a: (&[u8], View),
    b: (&[u8], View),
    alpha: T,
    out: &mut [u8],
    block: Block,
    (m, n, k): (usize, usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let (lhs, rhs) = (typed::<T>(a.0), typed::<T>(b.0));
    let (a_rs, a_cs) = a.1.strides();
    let (b_rs, b_cs) = b.1.strides();
    let size = std::mem::size_of::<T>();
    let base = block.at.0 * block.ld + block.at.1;
    assert!(
        (base + (m - 1) * block.ld + n) * size <= out.len(),
        "the block lies inside the output"
    );
    // An unaligned output (rare for a Vec<u8>) takes the product in a buffer of its own
    // (holding the block's values where the product adds to them).
    // SAFETY: T is plain data: any bit pattern is valid.
    let aligned = unsafe { out.align_to::<T>() }.0.is_empty();
    let at = |i: usize, j: usize| (base + i * block.ld + j) * size;
    let mut own = match (aligned, block.accumulate) {
        (true, _) => Vec::new(),
        (false, false) => vec![T::default(); m * n],
        (false, true) => (0..m * n)
            .map(|x| {
                let p = out[at(x / n, x % n)..].as_ptr() as *const T;
                // SAFETY: `size` bytes inside `out` (asserted above), read unaligned.
                unsafe { std::ptr::read_unaligned(p) }
            })
            .collect(),
    };
    // SAFETY: as above.
    let (_, body, _) = unsafe { out.align_to_mut::<T>() };
    let (dst_ptr, dst_ld) = if aligned {
        // SAFETY: base stays inside `body` (asserted above).
        (unsafe { body.as_mut_ptr().add(base) }, block.ld)
    } else {
        (own.as_mut_ptr(), n)
    };
    // SAFETY: the views describe `lhs` and `rhs` exactly (their strides stay inside the slices),
    // and the destination holds m rows of n elements `dst_ld` apart.
    let (l, r, d) = unsafe {
        (
            MatRef::<T>::from_raw_parts(lhs.as_ptr(), m, k, a_rs, a_cs),
            MatRef::<T>::from_raw_parts(rhs.as_ptr(), k, n, b_rs, b_cs),
            MatMut::<T>::from_raw_parts_mut(dst_ptr, m, n, dst_ld as isize, 1),
        )
    };
    let par = Par::rayon(0);
    let accum = if block.accumulate {
        Accum::Add
    } else {
        Accum::Replace
    };
    use faer::linalg::matmul::matmul;
    match (a.1.conjugate, b.1.conjugate) {
        (false, false) => matmul(d, accum, l, r, alpha, par),
        (true, false) => matmul(d, accum, l.conjugate(), r, alpha, par),
        (false, true) => matmul(d, accum, l, r.conjugate(), alpha, par),
        (true, true) => matmul(d, accum, l.conjugate(), r.conjugate(), alpha, par),
    }
    if !aligned {
        for (i, row) in own.chunks_exact(n).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let p = out[at(i, j)..at(i, j) + size].as_mut_ptr() as *mut T;
                // SAFETY: `size` bytes inside `out`, written unaligned.
                unsafe { std::ptr::write_unaligned(p, v) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tensor::Layout;

    fn bytes(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn transposed_fortran_times_c_matches_by_hand() {
        // a stored F as 3x2 [[1,2],[3,4],[5,6]] (column-major bytes 1,3,5,2,4,6), used transposed:
        // op(a) = [[1,3,5],[2,4,6]]. b stored C 3x2 [[1,0],[0,1],[1,1]].
        let a = bytes(&[1., 3., 5., 2., 4., 6.]);
        let b = bytes(&[1., 0., 0., 1., 1., 1.]);
        let va = View {
            rows: 3,
            cols: 2,
            layout: Layout::F,
            transpose: true,
            conjugate: false,
        };
        let vb = View {
            rows: 3,
            cols: 2,
            layout: Layout::C,
            transpose: false,
            conjugate: false,
        };
        let mut out = vec![0u8; 4 * 8];
        let whole = Block {
            at: (0, 0),
            ld: 2,
            accumulate: false,
        };
        gemm(DType::F64, (&a, va), (&b, vb), (2.0, 0.0), &mut out, whole);
        let got: Vec<f64> = out
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        // op(a) @ b = [[6, 8], [8, 10]], times 2.
        assert_eq!(got, [12., 16., 16., 20.]);
    }

    #[test]
    fn accumulating_blocks_add_to_what_is_there() {
        // [[1, 2]] @ [[3], [4]] = 11, added to 5 at (0, 1) of a 1x2 matrix; (0, 0) untouched.
        let va = View {
            rows: 1,
            cols: 2,
            layout: Layout::C,
            transpose: false,
            conjugate: false,
        };
        let vb = View {
            rows: 2,
            cols: 1,
            ..va
        };
        for offset in [0, 1] {
            // An unaligned output too (its own buffer, read first).
            let mut out = vec![0u8; offset];
            out.extend(bytes(&[7., 5.]));
            let block = Block {
                at: (0, 1),
                ld: 2,
                accumulate: true,
            };
            gemm(
                DType::F64,
                (&bytes(&[1., 2.]), va),
                (&bytes(&[3., 4.]), vb),
                (1.0, 0.0),
                &mut out[offset..],
                block,
            );
            let got: Vec<f64> = out[offset..]
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(got, [7., 16.], "offset {offset}");
        }
    }

    #[test]
    fn blocks_land_in_place() {
        // A 1x1 product written into a 2x3 matrix at (1, 2).
        let (one, two) = (bytes(&[3.0]), bytes(&[5.0]));
        let v = View {
            rows: 1,
            cols: 1,
            layout: Layout::C,
            transpose: false,
            conjugate: false,
        };
        let mut out = bytes(&[1., 1., 1., 1., 1., 1.]);
        let block = Block {
            at: (1, 2),
            ld: 3,
            accumulate: false,
        };
        gemm(
            DType::F64,
            (&one, v),
            (&two, v),
            (1.0, 0.0),
            &mut out,
            block,
        );
        let got: Vec<f64> = out
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [1., 1., 1., 1., 1., 15.]);
    }
}
