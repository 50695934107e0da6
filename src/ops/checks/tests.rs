use super::*;
use crate::dist::TensorState;
use crate::spec::tensor::Distribution;

#[test]
fn integer_averages_divide_the_sum_wrapped_in_the_dtype() {
    let avg = |dtype, ranks| {
        fold(
            ReduceOp::Avg,
            dtype,
            &vec![Scalar::Int(100); ranks as usize],
            ranks,
        )
    };
    // i8: 200 wraps to -56, 300 to 44, 400 to -112; the quotient truncates toward zero.
    assert_eq!(avg(DType::I8, 1), Scalar::Int(100));
    assert_eq!(avg(DType::I8, 2), Scalar::Int(-28));
    assert_eq!(avg(DType::I8, 3), Scalar::Int(14));
    assert_eq!(avg(DType::I8, 4), Scalar::Int(-28));
    assert_eq!(avg(DType::I32, 4), Scalar::Int(100));
}

#[test]
fn integer_sums_and_products_wrap() {
    let byte = |s: Scalar, dtype| {
        let mut b = [0u8];
        init::encode(dtype, s, &mut b);
        b[0]
    };
    let u8s = [Scalar::UInt(200), Scalar::UInt(200)];
    assert_eq!(
        byte(fold(ReduceOp::Sum, DType::U8, &u8s, 2), DType::U8),
        144
    );
    assert_eq!(
        byte(fold(ReduceOp::Prod, DType::U8, &u8s, 2), DType::U8),
        64
    );
    let i8s = [Scalar::Int(-128), Scalar::Int(-1), Scalar::Int(3)];
    assert_eq!(
        byte(fold(ReduceOp::Prod, DType::I8, &i8s, 3), DType::I8) as i8,
        -128
    );
    assert_eq!(fold(ReduceOp::Min, DType::I8, &i8s, 3), Scalar::Int(-128));
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_sum_is_held_to_the_terms_magnitude_not_the_result_s() {
    // 1e8 + 1 - 1e8 in f32 in another order: 0 or 1, both within a few ulps of 1e8.
    let terms = f32s(&[1e8, 1.0, -1e8]);
    let (ok, _) = reduction(ReduceOp::Sum, DType::F32, 3, &terms, &f32s(&[0.0]));
    assert!(ok);
    // Off by more than the ranks' rounding can make: refused.
    let (ok, err) = reduction(ReduceOp::Sum, DType::F32, 3, &terms, &f32s(&[1000.0]));
    assert!(!ok && err > 0.0);
}

#[test]
fn min_and_max_are_exact() {
    let terms = f32s(&[1.0, 2.0]);
    assert!(reduction(ReduceOp::Min, DType::F32, 2, &terms, &f32s(&[1.0])).0);
    let next = f32::from_bits(1.0f32.to_bits() + 1);
    assert!(!reduction(ReduceOp::Min, DType::F32, 2, &terms, &f32s(&[next])).0);
}

#[test]
fn a_fingerprint_sees_a_moved_or_changed_element() {
    let state = TensorState {
        shape: vec![2, 3],
        dtype: DType::F32,
        layout: Layout::C,
        dist: Distribution::Replicated,
    };
    let map = IndexMap::new(&state, 1, 0).unwrap();
    let v = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let fp = fingerprint(&map, DType::F32, Some(&v), 0);
    // Two elements swapped, one changed in its lowest bit: each differs.
    let swapped = f32s(&[2.0, 1.0, 3.0, 4.0, 5.0, 6.0]);
    let mut bit = v.clone();
    bit[0] ^= 1;
    assert_ne!(fingerprint(&map, DType::F32, Some(&swapped), 0), fp);
    assert_ne!(fingerprint(&map, DType::F32, Some(&bit), 0), fp);
    // The same elements in F order over the same global indices: equal.
    let f = TensorState {
        layout: Layout::F,
        ..state
    };
    let fmap = IndexMap::new(&f, 1, 0).unwrap();
    let fv = f32s(&[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(fingerprint(&fmap, DType::F32, Some(&fv), 0), fp);
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_gap_is_the_largest_distance_from_the_scaled_tensor_where_the_weight_is_above_zero() {
    let x = f64s(&[1.0, 2.0, 3.0, 4.0]);
    let y = f64s(&[2.0, 4.5, 6.0, 100.0]);
    // y - 2x = [0, 0.5, 0, 92]; the last element's lane has weight 0 (lanes of one element).
    let lanes = Lanes {
        stride: 1,
        weights: vec![1.0, 1.0, 1.0, 0.0],
    };
    assert_eq!(
        gap(DType::F64, &x, &y, 2.0, &lanes),
        Gap {
            diff: 0.5,
            size: 6.0
        }
    );
    assert_eq!(gap(DType::F64, &x, &y, 2.0, &Lanes::uniform()).diff, 92.0);
    // A NaN is infinitely far.
    let nan = f64s(&[f64::NAN, 2.0, 3.0, 4.0]);
    assert_eq!(
        gap(DType::F64, &x, &nan, 1.0, &Lanes::uniform()).diff,
        f64::INFINITY
    );
}

#[test]
fn energies_weigh_each_lane() {
    // c128 [1+1i, 2, 3i, 1] as 2 rows of 2 in C order, the second position of each row doubled.
    let x = f64s(&[1.0, 1.0, 2.0, 0.0, 0.0, 3.0, 1.0, 0.0]);
    let lanes = Lanes {
        stride: 1,
        weights: vec![1.0, 2.0],
    };
    assert_eq!(
        energy(DType::C128, &x, &lanes).value(),
        2.0 + 8.0 + 9.0 + 2.0
    );
    // Lanes along the slow axis (stride 2): the second row doubled.
    let rows = Lanes { stride: 2, ..lanes };
    assert_eq!(
        energy(DType::C128, &x, &rows).value(),
        2.0 + 4.0 + 18.0 + 2.0
    );
}

#[test]
fn dots_match_the_sums_written_out_in_every_layout_and_axis() {
    // A 3 x 70000 matrix and its transpose's shapes, so both the per-output and the stretched
    // loops run (more outputs than one task's elements).
    for (rows, cols) in [(3, 70_000), (70_000, 3), (5, 1)] {
        let v: Vec<f64> = (0..rows * cols)
            .map(|i| ((i * 7919) % 101) as f64 - 50.0)
            .collect();
        for layout in [Layout::C, Layout::F] {
            let m = Matrix { rows, cols, layout };
            let mut stored = vec![0.0; rows * cols];
            for r in 0..rows {
                for c in 0..cols {
                    stored[m.at(r, c)] = v[r * cols + c];
                }
            }
            let bytes = f64s(&stored);
            for along in [Along::Rows, Along::Cols] {
                let (outs, len) = match along {
                    Along::Rows => (cols, rows),
                    Along::Cols => (rows, cols),
                };
                let x: Vec<C> = (0..len).map(|j| (j as f64 % 5.0 - 2.0, 0.5)).collect();
                let w: Vec<f64> = (0..len).map(|j| (j % 3) as f64).collect();
                let got = dots(DType::F64, &bytes, &m, along, &x, &w);
                assert_eq!(got.len(), outs);
                for (o, d) in got.iter().enumerate() {
                    let el = |j: usize| match along {
                        Along::Rows => v[j * cols + o],
                        Along::Cols => v[o * cols + j],
                    };
                    let re: f64 = (0..len).map(|j| el(j) * x[j].0).sum();
                    let im: f64 = (0..len).map(|j| el(j) * x[j].1).sum();
                    let abs: f64 = (0..len).map(|j| el(j).abs() * w[j]).sum();
                    assert_eq!(
                        d.value(),
                        (re, im),
                        "{rows}x{cols} {layout:?} {along:?} {o}"
                    );
                    assert_eq!(d.abs.value(), abs);
                }
            }
        }
    }
}

#[test]
fn an_activation_is_held_to_its_rounding() {
    let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let pre = f32s(&[-1.0, 2.0, 0.5]);
    let relu = Some(Epilog::Relu);
    assert!(activation(
        relu,
        (DType::F32, &f32s(&[0.0, 2.0, 0.5])),
        (DType::F32, &pre)
    ));
    assert!(!activation(
        relu,
        (DType::F32, &f32s(&[-1.0, 2.0, 0.5])),
        (DType::F32, &pre)
    ));
    // GELU(2) = 1.9545977 in f32, off by one ulp still passes; by 1e-4 not.
    let g = activate(Some(Epilog::Gelu), 2.0) as f32;
    let gelu = Some(Epilog::Gelu);
    let two = f32s(&[2.0]);
    let next = f32::from_bits(g.to_bits() + 1);
    assert!(activation(
        gelu,
        (DType::F32, &f32s(&[next])),
        (DType::F32, &two)
    ));
    assert!(!activation(
        gelu,
        (DType::F32, &f32s(&[g + 1e-4])),
        (DType::F32, &two)
    ));
}

/// (outputs, summed entries) of dots: tiny, odd, mid-sized, large, and lopsided either way.
const DOT_SHAPES: [(usize, usize); 7] = [
    (1, 1),
    (4, 10),
    (512, 1024),
    (301, 259),
    (32768, 32768),
    (1 << 20, 3),
    (3, 1 << 20),
];

#[test]
fn strided_dots_split_lines_into_stretches_that_cover_them() {
    for (outs, len) in DOT_SHAPES {
        let (step, parts) = strided_dot_parts(outs, len);
        // Every entry in exactly one stretch, none empty, at most 65,535 a line.
        assert!(
            step * parts >= len && step * (parts - 1) < len,
            "{outs} x {len}"
        );
        assert!(parts <= 65535);
        // At least 32 entries a stretch where the line has them; few threads beyond the aim.
        assert!(step >= 32.min(len), "{outs} x {len}: {step}");
        assert!(
            outs * parts <= STRIDED_DOT_THREADS.max(outs),
            "{outs} x {len}"
        );
    }
}

#[test]
fn dots_scratch_covers_what_the_gpu_allocates() {
    // The GPU's dots hold x (16 bytes an entry), w (8), the dots (48 each) and, down strided
    // lines, 48 bytes per output per stretch.
    let gpu = |outs: usize, len: usize| {
        let (_, parts) = strided_dot_parts(outs, len);
        (16 * len + 8 * len + 48 * outs + 48 * outs * parts) as u64
    };
    for (outs, len) in DOT_SHAPES {
        assert!(dots_scratch(outs, len) >= gpu(outs, len), "{outs} x {len}");
    }
    // A 32768 x 32768 result down strided lines: 16 stretches of 2048 (25 MiB of partials); a
    // 512 x 1024 one: 32 stretches of 32, not 1024 of one (which took 25 MiB too).
    assert_eq!(strided_dot_parts(32768, 32768), (2048, 16));
    assert_eq!(strided_dot_parts(512, 1024), (32, 32));
    assert!(dots_scratch(512, 1024) < 1 << 20);
    assert_eq!(dots_scratch(0, 5), 0);
    assert_eq!(dots_scratch(5, 0), 0);
}
