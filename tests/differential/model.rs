//! The reference: every tensor's global value as plain numbers (complex f64 for floats, i128
//! for integers), each op computed here by direct loops from the definitions in the contract
//! (spec-format.md and the README), never by distrun's code. Float values carry an absolute
//! error bound per element: what the dtype's rounding and the op's order of operations may
//! move distrun's result from the exact one (first-order, propagated through the chain).

use crate::common::dft_axis;

pub type C = (f64, f64);

/// Element types, as specs name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dt {
    F16,
    Bf16,
    F32,
    F64,
    C64,
    C128,
    I8,
    U8,
    I32,
    U32,
    I64,
    U64,
}

pub const FLOATS: [Dt; 6] = [Dt::F16, Dt::Bf16, Dt::F32, Dt::F64, Dt::C64, Dt::C128];
pub const ALL: [Dt; 12] = [
    Dt::F16,
    Dt::Bf16,
    Dt::F32,
    Dt::F64,
    Dt::C64,
    Dt::C128,
    Dt::I8,
    Dt::U8,
    Dt::I32,
    Dt::U32,
    Dt::I64,
    Dt::U64,
];

impl Dt {
    pub fn name(self) -> &'static str {
        match self {
            Dt::F16 => "f16",
            Dt::Bf16 => "bf16",
            Dt::F32 => "f32",
            Dt::F64 => "f64",
            Dt::C64 => "c64",
            Dt::C128 => "c128",
            Dt::I8 => "i8",
            Dt::U8 => "u8",
            Dt::I32 => "i32",
            Dt::U32 => "u32",
            Dt::I64 => "i64",
            Dt::U64 => "u64",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Dt::I8 | Dt::U8 => 1,
            Dt::F16 | Dt::Bf16 => 2,
            Dt::F32 | Dt::I32 | Dt::U32 => 4,
            Dt::F64 | Dt::C64 | Dt::I64 | Dt::U64 => 8,
            Dt::C128 => 16,
        }
    }

    pub fn is_float(self) -> bool {
        FLOATS.contains(&self)
    }

    pub fn is_complex(self) -> bool {
        matches!(self, Dt::C64 | Dt::C128)
    }

    /// Unit roundoff (half an ulp of 1).
    pub fn eps(self) -> f64 {
        match self {
            Dt::F16 => 2f64.powi(-11),
            Dt::Bf16 => 2f64.powi(-8),
            Dt::F32 | Dt::C64 => 2f64.powi(-24),
            _ => 2f64.powi(-53),
        }
    }

    /// The magnitude from which rounding to the dtype gives infinity: its largest finite value
    /// and half an ulp there.
    pub fn overflow(self) -> f64 {
        let edge = |mantissa_bits: i32| (2.0 - 2f64.powi(-mantissa_bits - 1)) * 2f64.powi(127);
        match self {
            Dt::F16 => 65520.0,
            Dt::Bf16 => edge(7),
            Dt::F32 | Dt::C64 => edge(23),
            _ => f64::INFINITY,
        }
    }

    /// The smallest positive value (subnormal spacing): rounding near zero is off by up to it.
    pub fn tiny(self) -> f64 {
        match self {
            Dt::F16 => 2f64.powi(-24),
            Dt::Bf16 => 2f64.powi(-133),
            Dt::F32 | Dt::C64 => 2f64.powi(-149),
            _ => 1e-300,
        }
    }

    /// The type matmul accumulates in: f32 for the half types.
    pub fn compute(self) -> Dt {
        match self {
            Dt::F16 | Dt::Bf16 => Dt::F32,
            d => d,
        }
    }

    pub fn to_complex(self) -> Dt {
        match self {
            Dt::F32 => Dt::C64,
            _ => Dt::C128,
        }
    }

    pub fn to_real(self) -> Dt {
        match self {
            Dt::C64 => Dt::F32,
            _ => Dt::F64,
        }
    }

    /// The .npy descr.
    pub fn descr(self) -> &'static str {
        match self {
            Dt::F16 => "<f2",
            Dt::Bf16 => "<u2",
            Dt::F32 => "<f4",
            Dt::F64 => "<f8",
            Dt::C64 => "<c8",
            Dt::C128 => "<c16",
            Dt::I8 => "|i1",
            Dt::U8 => "|u1",
            Dt::I32 => "<i4",
            Dt::U32 => "<u4",
            Dt::I64 => "<i8",
            Dt::U64 => "<u8",
        }
    }

    /// The integer range.
    pub fn int_range(self) -> (i128, i128) {
        match self {
            Dt::I8 => (-128, 127),
            Dt::U8 => (0, 255),
            Dt::I32 => (i32::MIN.into(), i32::MAX.into()),
            Dt::U32 => (0, u32::MAX.into()),
            Dt::I64 => (i64::MIN.into(), i64::MAX.into()),
            _ => (0, u64::MAX.into()),
        }
    }

    /// An integer wrapped into the dtype (two's complement).
    pub fn wrap(self, v: i128) -> i128 {
        let bits = 8 * self.size() as u32;
        let m = v.rem_euclid(1i128 << bits);
        let (lo, _) = self.int_range();
        if lo < 0 && m >= 1i128 << (bits - 1) {
            m - (1i128 << bits)
        } else {
            m
        }
    }
}

/// One element, as stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum E {
    F(C),
    I(i128),
}

/// `x` rounded once to nearest even in a 16-bit float type (`half`'s `from_f64` goes through
/// f32, for f16 as for bf16, and rounding twice moves a value just off a tie onto the wrong side
/// of it): of the values next to `half`'s `guess` (its bits), the nearest, the even one on a
/// tie; `value` reads a value's bits.
fn once(x: f64, guess: u16, value: impl Fn(u16) -> f64) -> u16 {
    if !value(guess).is_finite() {
        return guess;
    }
    [guess.wrapping_sub(1), guess, guess.wrapping_add(1)]
        .into_iter()
        .filter(|&c| value(c).is_finite())
        .min_by(|&a, &b| {
            let far = |c: u16| (value(c) - x).abs();
            far(a).total_cmp(&far(b)).then((a & 1).cmp(&(b & 1)))
        })
        .unwrap_or(guess)
}

/// `x` in f16, rounded once (see [`once`]).
fn f16_once(x: f64) -> half::f16 {
    let bits = once(x, half::f16::from_f64(x).to_bits(), |b| {
        half::f16::from_bits(b).to_f64()
    });
    half::f16::from_bits(bits)
}

/// The oracle's own rounding, checked before any case runs (it once rounded f16 twice, and
/// called a correctly rounded init wrong): a value just above the tie between two f16s, which
/// f32 rounds onto the tie, goes up; a product past f16's range is infinite.
pub fn check_rounding() {
    let (a, b) = (0.202392578125, 0.202392578125 + 2f64.powi(-13));
    let above_tie = a + 2f64.powi(-14) + 2f64.powi(-30);
    assert_eq!(f16_once(above_tie).to_f64(), b, "f16 rounded once");
    assert_eq!(
        bf16_once(1.0 + 2f64.powi(-8) + 2f64.powi(-40)).to_f64(),
        1.0 + 2f64.powi(-7)
    );
    let ((v, _), t) = overflowed(Dt::F16, 74048.5, 361.0);
    assert_eq!((v, t), (f64::INFINITY, 0.0), "an f16 product past 65504");
}

/// `x` in bf16, rounded once (see [`once`]).
fn bf16_once(x: f64) -> half::bf16 {
    let bits = once(x, half::bf16::from_f64(x).to_bits(), |b| {
        half::bf16::from_bits(b).to_f64()
    });
    half::bf16::from_bits(bits)
}

/// A float rounded to the dtype (round to nearest even), complex parts each.
pub fn round(dt: Dt, v: C) -> C {
    let r = |x: f64| match dt {
        Dt::F16 => f16_once(x).to_f64(),
        Dt::Bf16 => bf16_once(x).to_f64(),
        Dt::F32 | Dt::C64 => x as f32 as f64,
        _ => x,
    };
    if dt.is_complex() {
        (r(v.0), r(v.1))
    } else {
        (r(v.0), 0.0)
    }
}

/// The bytes of one element.
pub fn encode(dt: Dt, e: E, out: &mut Vec<u8>) {
    match (dt, e) {
        (Dt::F16, E::F(v)) => out.extend(f16_once(v.0).to_le_bytes()),
        (Dt::Bf16, E::F(v)) => out.extend(bf16_once(v.0).to_le_bytes()),
        (Dt::F32, E::F(v)) => out.extend((v.0 as f32).to_le_bytes()),
        (Dt::F64, E::F(v)) => out.extend(v.0.to_le_bytes()),
        (Dt::C64, E::F(v)) => {
            out.extend((v.0 as f32).to_le_bytes());
            out.extend((v.1 as f32).to_le_bytes());
        }
        (Dt::C128, E::F(v)) => {
            out.extend(v.0.to_le_bytes());
            out.extend(v.1.to_le_bytes());
        }
        (_, E::I(i)) => out.extend(&(dt.wrap(i) as u128).to_le_bytes()[..dt.size()]),
        (_, E::F(_)) => panic!("a float value for {dt:?}"),
    }
}

/// One element from its bytes.
pub fn decode(dt: Dt, b: &[u8]) -> E {
    let f32_at = |i: usize| f64::from(f32::from_le_bytes(b[i..i + 4].try_into().unwrap()));
    let f64_at = |i: usize| f64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    match dt {
        Dt::F16 => E::F((half::f16::from_le_bytes([b[0], b[1]]).to_f64(), 0.0)),
        Dt::Bf16 => E::F((half::bf16::from_le_bytes([b[0], b[1]]).to_f64(), 0.0)),
        Dt::F32 => E::F((f32_at(0), 0.0)),
        Dt::F64 => E::F((f64_at(0), 0.0)),
        Dt::C64 => E::F((f32_at(0), f32_at(4))),
        Dt::C128 => E::F((f64_at(0), f64_at(8))),
        _ => {
            let mut w = [0u8; 16];
            w[..dt.size()].copy_from_slice(b);
            let (lo, _) = dt.int_range();
            let bits = 8 * dt.size() as u32;
            let u = u128::from_le_bytes(w) as i128;
            E::I(if lo < 0 && u >= 1i128 << (bits - 1) {
                u - (1i128 << bits)
            } else {
                u
            })
        }
    }
}

/// A tensor's global value: one row, or P rows for a partial tensor (rank r's array), each in
/// C order over `shape`; floats with an error bound per element.
#[derive(Debug, Clone)]
pub struct Value {
    pub shape: Vec<usize>,
    pub dt: Dt,
    pub rows: Vec<Vec<E>>,
    pub tol: Vec<Vec<f64>>,
}

impl Value {
    /// An exact value (no error bound).
    pub fn exact(shape: Vec<usize>, dt: Dt, rows: Vec<Vec<E>>) -> Self {
        let tol = rows.iter().map(|r| vec![0.0; r.len()]).collect();
        Value {
            shape,
            dt,
            rows,
            tol,
        }
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn float(&self, row: usize, i: usize) -> C {
        match self.rows[row][i] {
            E::F(v) => v,
            E::I(_) => panic!("an integer where a float was expected"),
        }
    }
}

fn mul(a: C, b: C) -> C {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

fn abs(a: C) -> f64 {
    a.0.hypot(a.1)
}

/// The GELU of the contract (tanh form).
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
}

/// The slab rule: rank r's `[lo, hi)` of `n` over `p` ranks.
pub fn slab(n: usize, p: usize, r: usize) -> (usize, usize) {
    let (q, rem) = (n / p, n % p);
    let lo = r * q + r.min(rem);
    (lo, lo + q + usize::from(r < rem))
}

/// A matmul's parameters.
#[derive(Debug, Clone)]
pub struct MatmulOp {
    pub transpose: (bool, bool),
    pub conjugate: (bool, bool),
    pub alpha: f64,
    pub beta: f64,
    pub epilog: Option<&'static str>,
    pub bias_per_column: bool,
    /// Into a partial result over `ranks`: rank r's product over its slab of k; rank 0 adds c
    /// and the bias.
    pub partial: Option<usize>,
}

/// `out = epilog(alpha op(a) @ op(b) + beta c + bias)`.
pub fn matmul(
    a: &Value,
    b: &Value,
    c: Option<&Value>,
    bias: Option<&Value>,
    m: &MatmulOp,
) -> Value {
    let dt = a.dt;
    let (rows_a, cols_a) = (a.shape[0], a.shape[1]);
    let (mm, k) = if m.transpose.0 {
        (cols_a, rows_a)
    } else {
        (rows_a, cols_a)
    };
    let nn = if m.transpose.1 {
        b.shape[0]
    } else {
        b.shape[1]
    };
    let op = |v: &Value, t: bool, conj: bool, i: usize, j: usize| -> (C, f64) {
        let at = if t {
            j * v.shape[1] + i
        } else {
            i * v.shape[1] + j
        };
        let x = v.float(0, at);
        (if conj { (x.0, -x.1) } else { x }, v.tol[0][at])
    };
    let (eps_c, eps_o) = (dt.compute().eps(), dt.eps());
    let nonlinear = matches!(m.epilog, Some("relu" | "gelu" | "relu_bias" | "gelu_bias"));
    let pieces: Vec<(usize, usize)> = match m.partial {
        Some(p) => (0..p).map(|r| slab(k, p, r)).collect(),
        None => vec![(0, k)],
    };
    let mut rows = Vec::new();
    let mut tols = Vec::new();
    for (r, &(k0, k1)) in pieces.iter().enumerate() {
        let adds = r == 0;
        let mut out = Vec::with_capacity(mm * nn);
        let mut tol = Vec::with_capacity(mm * nn);
        for i in 0..mm {
            for j in 0..nn {
                let (mut s, mut mag, mut prop) = ((0.0, 0.0), 0.0, 0.0);
                for kk in k0..k1 {
                    let (x, tx) = op(a, m.transpose.0, m.conjugate.0, i, kk);
                    let (y, ty) = op(b, m.transpose.1, m.conjugate.1, kk, j);
                    let t = mul(x, y);
                    s = (s.0 + t.0, s.1 + t.1);
                    mag += abs(x) * abs(y);
                    prop += tx * abs(y) + abs(x) * ty;
                }
                let mut v = (m.alpha * s.0, m.alpha * s.1);
                mag *= m.alpha.abs();
                prop *= m.alpha.abs();
                if let (Some(c), true) = (c, adds) {
                    let x = c.float(0, i * nn + j);
                    v = (v.0 + m.beta * x.0, v.1 + m.beta * x.1);
                    mag += m.beta.abs() * abs(x);
                    prop += m.beta.abs() * c.tol[0][i * nn + j];
                }
                if let (Some(bias), true) = (bias, adds) {
                    let at = if m.bias_per_column { j } else { i };
                    let x = bias.float(0, at);
                    v = (v.0 + x.0, v.1 + x.1);
                    mag += abs(x);
                    prop += bias.tol[0][at];
                }
                // Accumulation over this rank's k in the compute type, the addends, rounding to
                // the dtype (SUMMA rounds a half-type result once per slice of k: up to P + 1).
                let slices = 5.0;
                let mut t = prop + ((k1 - k0) as f64 + 2.0) * eps_c * mag + slices * eps_o * mag;
                if nonlinear {
                    // relu is 1-Lipschitz, GELU 1.13; the GPU evaluates GELU in f32.
                    let pre = v.0;
                    v.0 = if matches!(m.epilog, Some("relu" | "relu_bias")) {
                        pre.max(0.0)
                    } else {
                        gelu(pre)
                    };
                    t = 1.13 * t + (eps_o + 8.0 * Dt::F32.eps()) * pre.abs();
                }
                out.push(E::F(v));
                tol.push(t + 2.0 * dt.tiny());
            }
        }
        rows.push(out);
        tols.push(tol);
    }
    Value {
        shape: vec![mm, nn],
        dt,
        rows,
        tol: tols,
    }
}

/// An FFT's parameters.
#[derive(Debug, Clone)]
pub struct FftOp {
    pub kind: &'static str,
    pub inverse: bool,
    pub norm: &'static str,
}

/// The scale a norm applies in a direction over `n` points.
fn norm_scale(norm: &str, inverse: bool, n: f64) -> f64 {
    match (norm, inverse) {
        ("none", _) | ("backward", false) | ("forward", true) => 1.0,
        ("ortho", _) => 1.0 / n.sqrt(),
        _ => 1.0 / n,
    }
}

/// numpy's fftn / rfftn / irfftn (with `out_last` the real length of c2r's last axis).
pub fn fft(x: &Value, f: &FftOp, out_last: usize) -> Value {
    let nd = x.shape.len();
    let last = nd - 1;
    let sign = if f.inverse { 1.0 } else { -1.0 };
    let vals: Vec<C> = (0..x.len()).map(|i| x.float(0, i)).collect();
    let (real_shape, out_shape, out_dt) = match f.kind {
        "c2c" => (x.shape.clone(), x.shape.clone(), x.dt),
        "r2c" => {
            let mut o = x.shape.clone();
            o[last] = x.shape[last] / 2 + 1;
            (x.shape.clone(), o, x.dt.to_complex())
        }
        _ => {
            let mut r = x.shape.clone();
            r[last] = out_last;
            (r.clone(), r, x.dt.to_real())
        }
    };
    let n: usize = real_shape.iter().product();
    let s = norm_scale(f.norm, f.inverse, n as f64);
    let out: Vec<C> = match f.kind {
        "c2c" => {
            let y = (0..nd).fold(vals, |acc, a| dft_axis(&acc, &x.shape, a, sign));
            y.into_iter().map(|v| (v.0 * s, v.1 * s)).collect()
        }
        "r2c" => {
            let full = (0..nd).fold(vals, |acc, a| dft_axis(&acc, &x.shape, a, sign));
            let m = out_shape[last];
            let inner = x.shape[last];
            (0..full.len() / inner)
                .flat_map(|line| (0..m).map(move |k| line * inner + k))
                .map(|i| (full[i].0 * s, full[i].1 * s))
                .collect()
        }
        _ => {
            // The other axes inverse-transformed as complex, then each line along the last
            // axis made Hermitian (bin n-k the conjugate of bin k) and its real part taken.
            let y = (0..last).fold(vals, |acc, a| dft_axis(&acc, &x.shape, a, sign));
            let m = x.shape[last];
            let lines = y.len() / m;
            let mut full = vec![(0.0, 0.0); lines * out_last];
            for l in 0..lines {
                for k in 0..m.min(out_last) {
                    full[l * out_last + k] = y[l * m + k];
                }
                for k in 1..m {
                    if out_last >= k + m {
                        let v = y[l * m + k];
                        full[l * out_last + out_last - k] = (v.0, -v.1);
                    }
                }
            }
            let z = dft_axis(&full, &real_shape, last, sign);
            z.into_iter().map(|v| (v.0 * s, 0.0)).collect()
        }
    };
    // Error: the inputs' bounds pass through with the scale (each output mixes every input
    // with weight 1); the transform's own, norm-wise c eps log2(n) |y|_2, bounds each element.
    let l1_tol: f64 = x.tol[0].iter().sum();
    let l2: f64 = vals_norm(x) * if f.kind == "c2r" { 2f64.sqrt() } else { 1.0 };
    let eps = out_dt.eps().max(x.dt.eps());
    let own = 8.0 * eps * ((n as f64).log2() + 2.0) * s * (n as f64).sqrt() * l2;
    let t = s * l1_tol + own + 4.0 * out_dt.tiny();
    Value {
        shape: out_shape,
        dt: out_dt,
        tol: vec![vec![t; out.len()]],
        rows: vec![out.into_iter().map(E::F).collect()],
    }
}

fn vals_norm(x: &Value) -> f64 {
    (0..x.len())
        .map(|i| {
            let v = x.float(0, i);
            v.0 * v.0 + v.1 * v.1
        })
        .sum::<f64>()
        .sqrt()
}

/// A real result `v` (within `t`) as stored in `dt`: past the dtype's range by more than twice
/// its bound, that infinity (IEEE arithmetic overflows); within twice its bound of the edge,
/// either is accepted.
fn overflowed(dt: Dt, v: f64, t: f64) -> (C, f64) {
    let edge = dt.overflow();
    if v.abs() - 2.0 * t >= edge {
        ((f64::INFINITY.copysign(v), 0.0), 0.0)
    } else if v.abs() + 2.0 * t >= edge {
        ((v, 0.0), f64::INFINITY)
    } else {
        ((v, 0.0), t)
    }
}

/// The reduction of a partial value's rows with `op`.
pub fn reduce(x: &Value, op: &str) -> Value {
    let p = x.rows.len();
    let dt = x.dt;
    let n = x.len();
    let mut out = Vec::with_capacity(n);
    let mut tol = Vec::with_capacity(n);
    for i in 0..n {
        if !dt.is_float() {
            let vals = (0..p).map(|r| match x.rows[r][i] {
                E::I(v) => v,
                E::F(_) => unreachable!(),
            });
            let v = match op {
                "sum" => vals.fold(0, |a, b| dt.wrap(a + b)),
                "avg" => vals.fold(0, |a, b| dt.wrap(a + b)) / p as i128,
                "prod" => vals.fold(1i128, |a, b| dt.wrap(a.wrapping_mul(b))),
                "min" => vals.min().unwrap(),
                _ => vals.max().unwrap(),
            };
            out.push(E::I(v));
            tol.push(0.0);
            continue;
        }
        let vals: Vec<C> = (0..p).map(|r| x.float(r, i)).collect();
        let tols: Vec<f64> = (0..p).map(|r| x.tol[r][i]).collect();
        let eps = dt.eps();
        let (v, t) = match op {
            "sum" | "avg" => {
                let s = vals.iter().fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
                let mag: f64 = vals.iter().map(|v| abs(*v)).sum();
                let t = tols.iter().sum::<f64>() + (p as f64 + 1.0) * eps * mag;
                if op == "avg" {
                    let q = p as f64;
                    ((s.0 / q, s.1 / q), t / q + eps * abs(s) / q)
                } else {
                    (s, t)
                }
            }
            "prod" => {
                let v = vals.iter().fold((1.0, 0.0), |a, b| mul(a, *b));
                let prop: f64 = (0..p)
                    .map(|q| {
                        tols[q]
                            * (0..p)
                                .filter(|&o| o != q)
                                .map(|o| abs(vals[o]) + tols[o])
                                .product::<f64>()
                    })
                    .sum();
                (v, prop + 2.0 * (p as f64 + 1.0) * eps * abs(v))
            }
            "min" => {
                let v = vals.iter().map(|v| v.0).fold(f64::INFINITY, f64::min);
                ((v, 0.0), tols.iter().copied().fold(0.0, f64::max))
            }
            _ => {
                let v = vals.iter().map(|v| v.0).fold(f64::NEG_INFINITY, f64::max);
                ((v, 0.0), tols.iter().copied().fold(0.0, f64::max))
            }
        };
        let t = if t > 0.0 || op == "sum" || op == "avg" || op == "prod" {
            t + 2.0 * dt.tiny()
        } else {
            t
        };
        let (v, t) = match dt.is_complex() {
            true => (v, t),
            false => overflowed(dt, v.0, t),
        };
        out.push(E::F(v));
        tol.push(t);
    }
    Value {
        shape: x.shape.clone(),
        dt,
        rows: vec![out],
        tol: vec![tol],
    }
}

/// send_recv: row `dst` of the result is row `src` of the input for each pair; rows nobody
/// sends are zeros.
pub fn send_recv(x: &Value, pairs: &[(usize, usize)]) -> Value {
    let row = x.len() / x.shape[0];
    let zero = if x.dt.is_float() {
        E::F((0.0, 0.0))
    } else {
        E::I(0)
    };
    let mut out = vec![zero; x.len()];
    let mut tol = vec![0.0; x.len()];
    for &(src, dst) in pairs {
        out[dst * row..(dst + 1) * row].copy_from_slice(&x.rows[0][src * row..(src + 1) * row]);
        tol[dst * row..(dst + 1) * row].copy_from_slice(&x.tol[0][src * row..(src + 1) * row]);
    }
    Value {
        shape: x.shape.clone(),
        dt: x.dt,
        rows: vec![out],
        tol: vec![tol],
    }
}
