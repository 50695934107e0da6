//! Generated inits: values independent of ranks, distribution and layout; the generator's
//! fixed points; the statistics of uniform and normal.

use super::{check_pieces, distributions, state};
use crate::init::{Scalar, encode, fdlibm, fill_local, init_value, key, splitmix64, unit};
use crate::spec::tensor::*;
use std::path::Path;

const SEED: u64 = 20240917;

fn inits() -> Vec<Init> {
    vec![
        Init::Zeros,
        Init::Ones,
        Init::Fill(-2.5),
        Init::Arange(Arange {
            start: 3.0,
            step: 0.5,
        }),
        Init::Uniform(Uniform {
            low: -1.0,
            high: 4.0,
        }),
        Init::Normal(Normal {
            mean: 1.0,
            std: 3.0,
        }),
    ]
}

#[test]
fn pieces_agree_with_init_value_for_any_ranks_distribution_and_layout() {
    let dtypes = [DType::F32, DType::C64, DType::F16, DType::I32, DType::C128];
    for shape in [vec![7], vec![6, 5], vec![5, 4, 3]] {
        for ranks in 1..=5 {
            for dist in distributions(&shape, ranks) {
                for (k, init) in inits().iter().enumerate() {
                    // Each init with each layout, dtypes taken in turn to keep the test short.
                    let dtype = dtypes[(k + ranks as usize) % dtypes.len()];
                    for layout in [Layout::C, Layout::F] {
                        let st = state(&shape, dtype, layout, dist.clone());
                        let piece = |rank| {
                            fill_local(init, SEED, "t", Path::new("."), &st, ranks, rank)
                                .expect("generated")
                        };
                        let expect = |i| {
                            let mut b = vec![0u8; dtype.size() as usize];
                            let v = init_value(init, SEED, "t", dtype, i).expect("not npy");
                            encode(dtype, v, &mut b);
                            b
                        };
                        check_pieces(&st, ranks, piece, expect);
                    }
                }
            }
        }
    }
}

#[test]
fn large_pieces_are_filled_in_parallel_chunks_correctly() {
    let shape = [301, 257];
    let init = Init::Normal(Normal {
        mean: 0.0,
        std: 1.0,
    });
    let dist = Distribution::BlockCyclic(BlockCyclicSpec {
        grid: Some(vec![2, 1]),
        blocks: vec![7, 3],
        grid_layout: GridLayout::ColMajor,
        first: None,
    });
    for layout in [Layout::C, Layout::F] {
        let st = state(&shape, DType::F64, layout, dist.clone());
        let piece = |rank| fill_local(&init, 1, "big", Path::new("."), &st, 2, rank).unwrap();
        let expect = |i| {
            let mut b = vec![0u8; 8];
            encode(
                DType::F64,
                init_value(&init, 1, "big", DType::F64, i).unwrap(),
                &mut b,
            );
            b
        };
        check_pieces(&st, 2, piece, expect);
    }
}

#[test]
fn the_generator_matches_its_definition() {
    // SplitMix64 from state 0 (the reference implementation's first output).
    assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    // XXH3-64 of the empty input with seed 0.
    assert_eq!(key(0, ""), 0x2D06_8005_38D3_94C2);
    let k = key(42, "x");
    let golden = 0x9E37_79B9_7F4A_7C15u64;
    for c in [0u64, 1, 2, 1 << 40] {
        let bits = splitmix64(k ^ c.wrapping_mul(golden));
        assert_eq!(unit(k, c), (bits >> 11) as f64 / 2f64.powi(53));
    }
    let arange = Init::Arange(Arange {
        start: 1.0,
        step: 2.0,
    });
    assert_eq!(
        init_value(&arange, 0, "a", DType::C64, 3),
        Some(Scalar::Real(7.0))
    );
    let u = Init::Uniform(Uniform {
        low: 2.0,
        high: 6.0,
    });
    assert_eq!(
        init_value(&u, 42, "x", DType::C128, 5),
        Some(Scalar::Complex(
            2.0 + 4.0 * unit(k, 10),
            2.0 + 4.0 * unit(k, 11)
        ))
    );
    assert_eq!(
        init_value(&u, 42, "x", DType::F32, 5),
        Some(Scalar::Real(2.0 + 4.0 * unit(k, 5)))
    );
    let z = |c: u64| {
        (-2.0 * fdlibm::ln(1.0 - unit(k, c))).sqrt()
            * fdlibm::cos(std::f64::consts::TAU * unit(k, c + 1))
    };
    let n = Init::Normal(Normal {
        mean: 1.0,
        std: 0.5,
    });
    assert_eq!(
        init_value(&n, 42, "x", DType::C64, 5),
        Some(Scalar::Complex(1.0 + 0.5 * z(20), 1.0 + 0.5 * z(22)))
    );
    assert_eq!(
        init_value(&n, 42, "x", DType::F64, 5),
        Some(Scalar::Real(1.0 + 0.5 * z(10)))
    );
    assert_eq!(
        init_value(&Init::Npy("a.npy".into()), 0, "a", DType::F32, 0),
        None
    );
    // The stream depends on the seed and the name.
    assert_ne!(key(1, "x"), key(2, "x"));
    assert_ne!(key(1, "x"), key(1, "y"));
}

fn reals(init: &Init, dtype: DType, n: u64) -> Vec<f64> {
    (0..n)
        .flat_map(|i| match init_value(init, 7, "stats", dtype, i).unwrap() {
            Scalar::Complex(re, im) => vec![re, im],
            Scalar::Real(r) => vec![r],
            other => panic!("{other:?}"),
        })
        .collect()
}

fn mean_std(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn uniform_values_lie_in_range_with_the_right_moments() {
    let init = Init::Uniform(Uniform {
        low: -2.0,
        high: 3.0,
    });
    for dtype in [DType::F64, DType::C128] {
        let x = reals(&init, dtype, 100_000);
        assert!(x.iter().all(|&v| (-2.0..3.0).contains(&v)));
        let (mean, std) = mean_std(&x);
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        assert!((std - 5.0 / 12f64.sqrt()).abs() < 0.02, "{std}");
    }
}

#[test]
fn normal_values_have_the_right_moments() {
    let init = Init::Normal(Normal {
        mean: -1.0,
        std: 2.0,
    });
    for dtype in [DType::F64, DType::C128] {
        let x = reals(&init, dtype, 100_000);
        let (mean, std) = mean_std(&x);
        assert!((mean + 1.0).abs() < 0.03, "{mean}");
        assert!((std - 2.0).abs() < 0.03, "{std}");
        let within = x.iter().filter(|v| (*v + 1.0).abs() < 2.0).count() as f64;
        assert!((within / x.len() as f64 - 0.6827).abs() < 0.01);
    }
}
