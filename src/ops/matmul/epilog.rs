//! What follows the GEMM on each element: `+ beta * c`, the bias, the activation, and rounding to
//! the result's dtype.

use crate::backend::work::Addends;
use crate::init::{self, Scalar};
use crate::spec::step::Epilog;
use crate::spec::tensor::DType;
use rayon::prelude::*;

/// GELU, tanh approximation (as cuBLASLt).
pub fn gelu(x: f64) -> f64 {
    const C: f64 = 0.797_884_560_802_865_4; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

/// The activation of an epilog, if any.
pub fn activate(epilog: Option<Epilog>, x: f64) -> f64 {
    match epilog {
        Some(Epilog::Relu | Epilog::ReluBias) => x.max(0.0),
        Some(Epilog::Gelu | Epilog::GeluBias) => gelu(x),
        _ => x,
    }
}

/// Whether an epilog is nonlinear (its input cannot be recovered from its output).
pub fn nonlinear(epilog: Option<Epilog>) -> bool {
    matches!(
        epilog,
        Some(Epilog::Relu | Epilog::ReluBias | Epilog::Gelu | Epilog::GeluBias)
    )
}

#[allow(clippy::too_many_arguments)]
/// Turns the product (`acc`, compute dtype, row-major with `cols` columns) into the result in
/// `dtype`. Returns the pre-activation values (compute dtype) when `keep_pre`.
pub fn finish(
    compute: DType,
    acc: &[u8],
    cols: usize,
    dtype: DType,
    add: &Addends<'_>,
    epilog: Option<Epilog>,
    out: &mut [u8],
    keep_pre: bool,
) -> Option<Vec<u8>> {
    let (cs, os) = (compute.size() as usize, dtype.size() as usize);
    let mut pre = keep_pre.then(|| vec![0u8; acc.len()]);
    let value = |i: usize| -> Scalar {
        let mut v = init::decode(compute, &acc[i * cs..(i + 1) * cs]);
        if let Some((beta, c)) = add.c {
            v = add_scaled(v, beta, init::decode(dtype, &c[i * os..(i + 1) * os]));
        }
        if let Some(bias) = &add.bias {
            let e = bias.entry(i, cols);
            v = add_scaled(
                v,
                1.0,
                init::decode(dtype, &bias.vector[e * os..(e + 1) * os]),
            );
        }
        v
    };
    let finish_one = |v: Scalar| -> Scalar {
        match v {
            Scalar::Real(x) => Scalar::Real(activate(epilog, x)),
            other => other,
        }
    };
    match pre.as_mut() {
        Some(pre) => out
            .par_chunks_exact_mut(os)
            .zip(pre.par_chunks_exact_mut(cs))
            .enumerate()
            .for_each(|(i, (o, p))| {
                let v = value(i);
                init::encode(compute, v, p);
                init::encode(dtype, finish_one(v), o);
            }),
        None => out
            .par_chunks_exact_mut(os)
            .enumerate()
            .for_each(|(i, o)| init::encode(dtype, finish_one(value(i)), o)),
    }
    pre
}

fn add_scaled(v: Scalar, s: f64, x: Scalar) -> Scalar {
    match (v, x) {
        (Scalar::Complex(a, b), Scalar::Complex(c, d)) => Scalar::Complex(a + s * c, b + s * d),
        (Scalar::Complex(a, b), Scalar::Real(c)) => Scalar::Complex(a + s * c, b),
        (Scalar::Real(a), Scalar::Real(c)) => Scalar::Real(a + s * c),
        (Scalar::Real(a), Scalar::Complex(c, _)) => Scalar::Real(a + s * c),
        (other, _) => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::work::Bias;
    use crate::spec::step::BiasPer;

    #[test]
    fn gelu_matches_the_tanh_form() {
        assert_eq!(gelu(0.0), 0.0);
        assert!((gelu(1.0) - 0.841_191_990_607_477_2).abs() < 1e-12);
        assert!((gelu(-3.0) + 0.003_637_392_082_029_7).abs() < 1e-12);
    }

    #[test]
    fn c_bias_and_relu_in_order() {
        // acc = [1, -5] (f32, one row of 2 columns); c = [10, 1] with beta 0.5; bias row 0 = -7.
        let acc: Vec<u8> = [1f32, -5.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let c: Vec<u8> = [10f32, 1.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let bias: Vec<u8> = (-7f32).to_le_bytes().to_vec();
        let add = Addends {
            c: Some((0.5, c.as_slice())),
            bias: Some(Bias {
                vector: bias.as_slice(),
                index: &[0][..],
                per: BiasPer::Row,
            }),
        };
        let mut out = vec![0u8; 8];
        let pre = finish(
            DType::F32,
            &acc,
            2,
            DType::F32,
            &add,
            Some(Epilog::ReluBias),
            &mut out,
            true,
        )
        .unwrap();
        let read = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        assert_eq!(read(&pre), [-1.0, -11.5]);
        assert_eq!(read(&out), [0.0, 0.0]);
    }

    #[test]
    fn a_bias_runs_along_rows_or_columns() {
        // A 2x3 product of zeros; the bias vector [1, 2, 3] (global entries).
        let acc = vec![0u8; 6 * 8];
        let vector: Vec<u8> = [1f64, 2.0, 3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let run = |per, index: &[u64]| {
            let add = Addends {
                c: None,
                bias: Some(Bias {
                    vector: vector.as_slice(),
                    index,
                    per,
                }),
            };
            let mut out = vec![0u8; 6 * 8];
            finish(
                DType::F64,
                &acc,
                3,
                DType::F64,
                &add,
                Some(Epilog::Bias),
                &mut out,
                false,
            );
            out.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>()
        };
        // Local rows are global rows 2 and 0; local columns global 2, 1, 0.
        assert_eq!(run(BiasPer::Row, &[2, 0]), [3.0, 3.0, 3.0, 1.0, 1.0, 1.0]);
        assert_eq!(
            run(BiasPer::Column, &[2, 1, 0]),
            [3.0, 2.0, 1.0, 3.0, 2.0, 1.0]
        );
    }
}
