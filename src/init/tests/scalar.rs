//! Encoding and decoding of single elements.

use super::super::scalar::round_f64;
use crate::init::{Scalar, decode, encode};
use crate::spec::tensor::DType;

fn enc(dtype: DType, v: Scalar) -> Vec<u8> {
    let mut out = vec![0u8; dtype.size() as usize];
    encode(dtype, v, &mut out);
    out
}

fn roundtrip(dtype: DType, v: Scalar) -> Scalar {
    decode(dtype, &enc(dtype, v))
}

#[test]
fn representable_values_round_trip_in_every_dtype() {
    for dtype in DType::ALL {
        let values: Vec<Scalar> = if dtype.is_complex() {
            vec![Scalar::Complex(1.5, -0.25), Scalar::Complex(-3.0, 0.0)]
        } else if dtype.is_float() {
            vec![Scalar::Real(1.5), Scalar::Real(-0.375), Scalar::Real(0.0)]
        } else if matches!(dtype, DType::I8 | DType::I32 | DType::I64) {
            vec![Scalar::Int(-7), Scalar::Int(0), Scalar::Int(100)]
        } else {
            vec![Scalar::UInt(0), Scalar::UInt(200)]
        };
        for v in values {
            assert_eq!(roundtrip(dtype, v), v, "{dtype}");
        }
    }
}

#[test]
fn bytes_round_trip_through_decode_and_encode() {
    let mut x = 0x1234_5678_9abc_def0u64;
    for dtype in DType::ALL {
        for _ in 0..2000 {
            x = crate::init::splitmix64(x);
            let bytes = &x.to_le_bytes().repeat(2)[..dtype.size() as usize];
            let v = decode(dtype, bytes);
            let nan = match v {
                Scalar::Real(r) => r.is_nan(),
                Scalar::Complex(r, i) => r.is_nan() || i.is_nan(),
                _ => false,
            };
            if !nan {
                assert_eq!(enc(dtype, v), bytes, "{dtype} {v:?}");
            }
        }
    }
}

#[test]
fn the_documented_conversions_hold() {
    let cases = [
        (DType::I8, Scalar::Real(3.9), Scalar::Int(3)),
        (DType::I8, Scalar::Real(-3.9), Scalar::Int(-3)),
        (DType::I8, Scalar::Real(1000.0), Scalar::Int(127)),
        (
            DType::I32,
            Scalar::Real(-1e300),
            Scalar::Int(i32::MIN as i64),
        ),
        (DType::U8, Scalar::Real(-1.0), Scalar::UInt(0)),
        (DType::U64, Scalar::Real(f64::NAN), Scalar::UInt(0)),
        (DType::U8, Scalar::Int(300), Scalar::UInt(44)),
        (DType::U32, Scalar::Int(-1), Scalar::UInt(u32::MAX as u64)),
        (DType::I8, Scalar::UInt(255), Scalar::Int(-1)),
        (DType::I64, Scalar::Complex(-2.5, 9.0), Scalar::Int(-2)),
        (DType::F32, Scalar::Complex(2.0, 5.0), Scalar::Real(2.0)),
        (DType::C64, Scalar::Real(2.0), Scalar::Complex(2.0, 0.0)),
        (DType::C128, Scalar::Int(-4), Scalar::Complex(-4.0, 0.0)),
        (DType::F64, Scalar::UInt(7), Scalar::Real(7.0)),
        (DType::F16, Scalar::Real(1e6), Scalar::Real(f64::INFINITY)),
        (
            DType::Bf16,
            Scalar::Real(-1e300),
            Scalar::Real(f64::NEG_INFINITY),
        ),
        (
            DType::F32,
            Scalar::Real(0.1),
            Scalar::Real(f64::from(0.1f32)),
        ),
    ];
    for (dtype, v, want) in cases {
        assert_eq!(roundtrip(dtype, v), want, "{v:?} as {dtype}");
    }
    assert_eq!(enc(DType::F16, Scalar::Real(f64::NAN)), [0x00, 0x7e]);
    assert_eq!(enc(DType::Bf16, Scalar::Real(-f64::NAN)), [0xc0, 0xff]);
    assert_eq!(enc(DType::F16, Scalar::Real(-0.0)), [0x00, 0x80]);
}

/// Every finite value of a 16-bit format (`eb` exponent bits, `mb` mantissa bits) is exact,
/// every midpoint between neighbours rounds to the even one, and the f64 just off a midpoint
/// rounds to the nearer neighbour.
fn check_rounding(eb: u32, mb: u32, value: impl Fn(u16) -> f64) {
    let inf = (((1u32 << eb) - 1) << mb) as u16;
    for b in 0..inf {
        let v = value(b);
        // Past the largest finite value, the next step would be 2^(emax + 1).
        let next = if b + 1 == inf {
            2f64.powi(1 << (eb - 1))
        } else {
            value(b + 1)
        };
        let mid = (v + next) / 2.0;
        for sign in [0u16, 0x8000] {
            let s = if sign == 0 { 1.0 } else { -1.0 };
            assert_eq!(round_f64(s * v, eb, mb), sign | b);
            let even = if b & 1 == 0 { b } else { b + 1 };
            assert_eq!(round_f64(s * mid, eb, mb), sign | even, "mid of {b:#x}");
            let above = f64::from_bits(mid.to_bits() + 1);
            assert_eq!(round_f64(s * above, eb, mb), sign | (b + 1), "above {b:#x}");
            if b > 0 {
                let below = f64::from_bits(mid.to_bits() - 1);
                assert_eq!(round_f64(s * below, eb, mb), sign | b, "below {b:#x}");
            }
        }
    }
}

#[test]
fn f16_rounds_to_nearest_even_in_one_step() {
    check_rounding(5, 10, |b| half::f16::from_bits(b).to_f64());
    // Just above the midpoint of 1 and 1 + 2^-10: rounding through f32 first would give 1.
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    assert_eq!(enc(DType::F16, Scalar::Real(x)), 0x3c01u16.to_le_bytes());
    assert_eq!(round_f64(65519.9, 5, 10), 0x7bff);
    assert_eq!(round_f64(65520.0, 5, 10), 0x7c00);
    assert_eq!(round_f64(2f64.powi(-25), 5, 10), 0);
    assert_eq!(round_f64(2f64.powi(-25) * 1.0001, 5, 10), 1);
}

#[test]
fn bf16_rounds_to_nearest_even_in_one_step() {
    check_rounding(8, 7, |b| half::bf16::from_bits(b).to_f64());
    let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-45);
    assert_eq!(enc(DType::Bf16, Scalar::Real(x)), 0x3f81u16.to_le_bytes());
    assert_eq!(round_f64(2f64.powi(-134), 8, 7), 0);
    assert_eq!(round_f64(2f64.powi(-133), 8, 7), 1);
}
