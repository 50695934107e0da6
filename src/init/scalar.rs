//! One element's value, and its little-endian bytes in each dtype.
//!
//! Conversions done by [`encode`]:
//! - to f64: exact for `Real`; `Int`/`UInt` round to nearest even.
//! - to f32: `f64 -> f32` rounds to nearest even (Rust `as`, CUDA `__double2float_rn`);
//!   `Int`/`UInt` convert directly, rounding once.
//! - to f16 / bf16: the f64 value (ints first converted to f64) rounds once to nearest even,
//!   overflowing to infinity past the largest finite value plus half an ulp (CUDA
//!   `__double2half` / `__double2bfloat16`). NaN becomes the quiet NaN `0x7e00` / `0x7fc0`
//!   with the sign kept.
//! - to an integer dtype: a `Real` truncates toward zero and saturates at the dtype's bounds,
//!   NaN giving 0 (Rust `as`; in CUDA clamp before converting); `Int`/`UInt` wrap to the
//!   dtype's width (two's complement).
//! - a `Complex` into a real or integer dtype takes its real part; a `Real`, `Int` or `UInt`
//!   into a complex dtype has a zero imaginary part.

use crate::spec::tensor::DType;
use half::{bf16, f16};

/// One element's value, before it is stored in a dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// A real number.
    Real(f64),
    /// A complex number: (real, imaginary).
    Complex(f64, f64),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
}

impl Scalar {
    /// The value as (real, imaginary).
    pub fn to_complex(self) -> (f64, f64) {
        match self {
            Scalar::Real(x) => (x, 0.0),
            Scalar::Complex(re, im) => (re, im),
            Scalar::Int(i) => (i as f64, 0.0),
            Scalar::UInt(u) => (u as f64, 0.0),
        }
    }
}

impl Scalar {
    /// The real part as f64 (integers rounded to nearest even).
    fn re(self) -> f64 {
        match self {
            Scalar::Real(x) | Scalar::Complex(x, _) => x,
            Scalar::Int(i) => i as f64,
            Scalar::UInt(u) => u as f64,
        }
    }

    /// The imaginary part (0 for the real kinds).
    fn im(self) -> f64 {
        match self {
            Scalar::Complex(_, y) => y,
            _ => 0.0,
        }
    }

    /// The real part as f32, rounded once.
    fn re32(self) -> f32 {
        match self {
            Scalar::Real(x) | Scalar::Complex(x, _) => x as f32,
            Scalar::Int(i) => i as f32,
            Scalar::UInt(u) => u as f32,
        }
    }

    /// The value as an i64: reals truncate and saturate, integers keep their bits.
    fn bits64(self) -> i64 {
        match self {
            Scalar::Real(x) | Scalar::Complex(x, _) => x as i64,
            Scalar::Int(i) => i,
            Scalar::UInt(u) => u as i64,
        }
    }
}

/// Converts to an integer type: a real truncates and saturates (`as`), an integer wraps.
macro_rules! to_int {
    ($s:expr, $t:ty) => {
        match $s {
            Scalar::Real(x) | Scalar::Complex(x, _) => x as $t,
            other => other.bits64() as $t,
        }
    };
}

/// Writes `value` as one element of `dtype` into `out` (exactly `dtype.size()` bytes), with the
/// conversions of the module docs.
pub fn encode(dtype: DType, value: Scalar, out: &mut [u8]) {
    match dtype {
        DType::F16 => out.copy_from_slice(&round_f64(value.re(), 5, 10).to_le_bytes()),
        DType::Bf16 => out.copy_from_slice(&round_f64(value.re(), 8, 7).to_le_bytes()),
        DType::F32 => out.copy_from_slice(&value.re32().to_le_bytes()),
        DType::F64 => out.copy_from_slice(&value.re().to_le_bytes()),
        DType::C64 => {
            out[..4].copy_from_slice(&value.re32().to_le_bytes());
            out[4..].copy_from_slice(&(value.im() as f32).to_le_bytes());
        }
        DType::C128 => {
            out[..8].copy_from_slice(&value.re().to_le_bytes());
            out[8..].copy_from_slice(&value.im().to_le_bytes());
        }
        DType::I8 => out.copy_from_slice(&to_int!(value, i8).to_le_bytes()),
        DType::U8 => out.copy_from_slice(&to_int!(value, u8).to_le_bytes()),
        DType::I32 => out.copy_from_slice(&to_int!(value, i32).to_le_bytes()),
        DType::U32 => out.copy_from_slice(&to_int!(value, u32).to_le_bytes()),
        DType::I64 => out.copy_from_slice(&to_int!(value, i64).to_le_bytes()),
        DType::U64 => out.copy_from_slice(&to_int!(value, u64).to_le_bytes()),
    }
}

/// Reads one element of `dtype` from `bytes` (exactly `dtype.size()` bytes): floats give
/// `Real`, complex `Complex`, signed ints `Int`, unsigned ints `UInt`.
pub fn decode(dtype: DType, bytes: &[u8]) -> Scalar {
    let b4 = |i: usize| -> [u8; 4] { bytes[i..i + 4].try_into().expect("4 bytes") };
    let b8 = |i: usize| -> [u8; 8] { bytes[i..i + 8].try_into().expect("8 bytes") };
    let f32_at = |i: usize| f32::from_le_bytes(b4(i));
    let f64_at = |i: usize| f64::from_le_bytes(b8(i));
    let u16_le = || u16::from_le_bytes([bytes[0], bytes[1]]);
    match dtype {
        DType::F16 => Scalar::Real(f16::from_bits(u16_le()).to_f64()),
        DType::Bf16 => Scalar::Real(bf16::from_bits(u16_le()).to_f64()),
        DType::F32 => Scalar::Real(f64::from(f32_at(0))),
        DType::F64 => Scalar::Real(f64_at(0)),
        DType::C64 => Scalar::Complex(f64::from(f32_at(0)), f64::from(f32_at(4))),
        DType::C128 => Scalar::Complex(f64_at(0), f64_at(8)),
        DType::I8 => Scalar::Int(i64::from(bytes[0] as i8)),
        DType::U8 => Scalar::UInt(u64::from(bytes[0])),
        DType::I32 => Scalar::Int(i64::from(i32::from_le_bytes(b4(0)))),
        DType::U32 => Scalar::UInt(u64::from(u32::from_le_bytes(b4(0)))),
        DType::I64 => Scalar::Int(i64::from_le_bytes(b8(0))),
        DType::U64 => Scalar::UInt(u64::from_le_bytes(b8(0))),
    }
}

/// Rounds `x` to nearest even in a binary format of `eb` exponent bits and `mb` stored mantissa
/// bits (f16: 5, 10; bf16: 8, 7), returning its bits. Correctly rounded in one step (the `half`
/// crate's f64 conversions truncate or go through f32 first, which can round twice).
pub(crate) fn round_f64(x: f64, eb: u32, mb: u32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 63) as u16) << 15;
    let inf = ((1u64 << eb) - 1) << mb;
    if x.is_nan() {
        return sign | (inf | (1 << (mb - 1))) as u16;
    }
    let e64 = ((bits >> 52) & 0x7ff) as i64;
    if e64 == 0x7ff {
        return sign | inf as u16;
    }
    if e64 == 0 {
        // Zero or an f64 subnormal: far below the smallest f16/bf16 subnormal.
        return sign;
    }
    let bias = (1i64 << (eb - 1)) - 1;
    let emin = 1 - bias;
    let e = e64 - 1023;
    if e > bias {
        return sign | inf as u16;
    }
    let m = (bits & ((1u64 << 52) - 1)) | (1u64 << 52);
    let eq = e.max(emin);
    // Shift from f64's 52 fraction bits down to `mb` at exponent `eq`.
    let shift = (52 - i64::from(mb) + (eq - e)) as u32;
    if shift > 54 {
        return sign;
    }
    let mut q = m >> shift;
    let rem = m & ((1u64 << shift) - 1);
    let half = 1u64 << (shift - 1);
    if rem > half || (rem == half && q & 1 == 1) {
        q += 1;
    }
    let out = (((eq - emin) as u64) << mb) + q;
    sign | out.min(inf) as u16
}
