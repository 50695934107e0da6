//! The natural logarithm and cosine that the normal init uses, written out so that every
//! machine computes the same bits: the GPU's fill kernel (`backend/cuda/fill.rs`) evaluates the
//! same operations in the same order. Each is a sequence of IEEE f64 additions, multiplications
//! and one division, each rounded separately to nearest even (Rust never fuses them), so the
//! result does not depend on the C library, the CPU's FMA or the compiler.
//!
//! The algorithms are fdlibm's, as FreeBSD's msun and musl (and the `libm` crate) carry them:
//! `e_log.c`, and `s_cos.c` with `k_cos.c`, `k_sin.c` and the medium case of `e_rem_pio2.c`
//! (Cody–Waite reduction by pi/2 in up to three rounds, exact for `|x| < 2^20 pi/2`). Both are
//! within 1 ulp of the exact result. The constants are given by their bits.
//!
//! ```text
//! ====================================================
//! Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
//!
//! Developed at SunSoft, a Sun Microsystems, Inc. business.
//! Permission to use, copy, modify, and distribute this
//! software is freely granted, provided that this notice
//! is preserved.
//! ====================================================
//! ```

const fn bits(b: u64) -> f64 {
    f64::from_bits(b)
}

const LN2_HI: f64 = bits(0x3FE6_2E42_FEE0_0000);
const LN2_LO: f64 = bits(0x3DEA_39EF_3579_3C76);
const LG1: f64 = bits(0x3FE5_5555_5555_5593);
const LG2: f64 = bits(0x3FD9_9999_9997_FA04);
const LG3: f64 = bits(0x3FD2_4924_9422_9359);
const LG4: f64 = bits(0x3FCC_71C5_1D8E_78AF);
const LG5: f64 = bits(0x3FC7_4664_96CB_03DE);
const LG6: f64 = bits(0x3FC3_9A09_D078_C69F);
const LG7: f64 = bits(0x3FC2_F112_DF3E_5244);

/// The natural logarithm of `x` (fdlibm's `e_log.c`, musl's form), within 1 ulp.
pub fn ln(x: f64) -> f64 {
    let mut ui = x.to_bits();
    let mut hx = (ui >> 32) as u32;
    let mut k: i32 = 0;
    let mut x = x;
    if hx < 0x0010_0000 || hx >> 31 != 0 {
        if ui << 1 == 0 {
            return f64::NEG_INFINITY;
        }
        if hx >> 31 != 0 {
            return f64::NAN;
        }
        // Subnormal: scale up by 2^54.
        k -= 54;
        x *= bits(0x4350_0000_0000_0000);
        ui = x.to_bits();
        hx = (ui >> 32) as u32;
    } else if hx >= 0x7ff0_0000 {
        return x;
    } else if hx == 0x3ff0_0000 && ui << 32 == 0 {
        return 0.0;
    }
    // Reduce x into [sqrt(2)/2, sqrt(2)]: x = 2^k (1 + f).
    hx += 0x3ff0_0000 - 0x3fe6_a09e;
    k += (hx >> 20) as i32 - 0x3ff;
    hx = (hx & 0x000f_ffff) + 0x3fe6_a09e;
    let x = f64::from_bits((u64::from(hx) << 32) | (ui & 0xffff_ffff));
    let f = x - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    let dk = f64::from(k);
    s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI
}

const C1: f64 = bits(0x3FA5_5555_5555_554C);
const C2: f64 = bits(0xBF56_C16C_16C1_5177);
const C3: f64 = bits(0x3EFA_01A0_19CB_1590);
const C4: f64 = bits(0xBE92_7E4F_809C_52AD);
const C5: f64 = bits(0x3E21_EE9E_BDB4_B1C4);
const C6: f64 = bits(0xBDA8_FAE9_BE88_38D4);

/// cos(x + y) for |x| <= pi/4, y a tail of x (fdlibm's `k_cos.c`).
fn k_cos(x: f64, y: f64) -> f64 {
    let z = x * x;
    let w = z * z;
    let r = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    w + (((1.0 - w) - hz) + (z * r - x * y))
}

const S1: f64 = bits(0xBFC5_5555_5555_5549);
const S2: f64 = bits(0x3F81_1111_1110_F8A6);
const S3: f64 = bits(0xBF2A_01A0_19C1_61D5);
const S4: f64 = bits(0x3EC7_1DE3_57B1_FE7D);
const S5: f64 = bits(0xBE5A_E5E6_8A2B_9CEB);
const S6: f64 = bits(0x3DE5_D93A_5ACF_D57C);

/// sin(x + y) for |x| <= pi/4, y a tail of x (fdlibm's `k_sin.c` with `iy = 1`).
fn k_sin(x: f64, y: f64) -> f64 {
    let z = x * x;
    let w = z * z;
    let r = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    let v = z * x;
    x - ((z * (0.5 * y - v * r) - y) - v * S1)
}

const TO_INT: f64 = bits(0x4338_0000_0000_0000); // 1.5 * 2^52
const INV_PIO2: f64 = bits(0x3FE4_5F30_6DC9_C883);
const PIO2_1: f64 = bits(0x3FF9_21FB_5440_0000);
const PIO2_1T: f64 = bits(0x3DD0_B461_1A62_6331);
const PIO2_2: f64 = bits(0x3DD0_B461_1A60_0000);
const PIO2_2T: f64 = bits(0x3BA3_198A_2E03_7073);
const PIO2_3: f64 = bits(0x3BA3_198A_2E00_0000);
const PIO2_3T: f64 = bits(0x397B_839A_2520_49C1);

/// The cosine of `x`, within 1 ulp, for finite `|x| < 2^20 pi/2` (the generator calls it on
/// `[0, 2 pi)`): `x = n pi/2 + y0 + y1` by fdlibm's medium reduction, then the kernel of
/// quadrant `n`.
pub fn cos(x: f64) -> f64 {
    debug_assert!(x.abs() < 1.6e6, "cos({x}): outside the reduced range");
    // n = rint(x / (pi/2)), rounding to nearest by adding and removing 1.5 * 2^52.
    let f_n = (x * INV_PIO2 + TO_INT) - TO_INT;
    let n = f_n as i32;
    let ex = ((x.to_bits() >> 52) & 0x7ff) as i32;
    let mut r = x - f_n * PIO2_1;
    let mut w = f_n * PIO2_1T;
    let mut y0 = r - w;
    let ey = |y: f64| ((y.to_bits() >> 52) & 0x7ff) as i32;
    if ex - ey(y0) > 16 {
        // Second round, good to 118 bits.
        let t = r;
        w = f_n * PIO2_2;
        r = t - w;
        w = f_n * PIO2_2T - ((t - r) - w);
        y0 = r - w;
        if ex - ey(y0) > 49 {
            // Third round, good to 151 bits.
            let t = r;
            w = f_n * PIO2_3;
            r = t - w;
            w = f_n * PIO2_3T - ((t - r) - w);
            y0 = r - w;
        }
    }
    let y1 = (r - y0) - w;
    match n & 3 {
        0 => k_cos(y0, y1),
        1 => -k_sin(y0, y1),
        2 => -k_cos(y0, y1),
        _ => k_sin(y0, y1),
    }
}
