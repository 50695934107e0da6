//! Local FFTs of one rank's piece along whole axes (rustfft and realfft, parallel with rayon).
//! Pieces are in C order; an axis is transformed line by line.

use crate::backend::work::{AxisOp, Phase, bluestein};
use num_complex::Complex;
use rayon::prelude::*;
use realfft::RealFftPlanner;
use rustfft::algorithm::BluesteinsAlgorithm;
use rustfft::{Fft, FftDirection, FftNum, FftPlanner};
use std::sync::Arc;

/// Bytes as elements of `T` (a copy; pieces are small next to the FFT's own work).
fn read<T: Copy + Default>(bytes: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let mut out = vec![T::default(); bytes.len() / size];
    // SAFETY: T is a plain float or complex of floats: any bit pattern is valid, and `out` holds
    // exactly bytes.len() bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr() as *mut u8, bytes.len())
    };
    out
}

fn write<T: Copy>(values: &[T], out: &mut [u8]) {
    let _size = std::mem::size_of::<T>();
    // SAFETY: plain data read as bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
    };
    out.copy_from_slice(bytes);
}

/// Runs a phase on `input` (bytes of the entering piece) into `output`, in precision `T`.
pub fn run_phase<T: FftNum + Default>(phase: &Phase, input: &[u8], output: &mut [u8]) {
    if let Some(rows) = phase.rows {
        return run_on_rows::<T>(phase, rows, input, output);
    }
    let mut shape = phase.shape.clone();
    let last = shape.len() - 1;
    let mut real: Option<Vec<T>> = None;
    let mut data: Vec<Complex<T>> = Vec::new();
    match phase.ops.first() {
        Some(AxisOp::R2c) => real = Some(read(input)),
        _ => data = read(input),
    }
    for op in &phase.ops {
        match *op {
            AxisOp::C2c { axis, inverse } => c2c_axis(&mut data, &shape, axis, inverse),
            AxisOp::R2c => {
                let r = real.take().expect("r2c comes first");
                data = r2c_last(&r, &shape);
                shape[last] = shape[last] / 2 + 1;
            }
            AxisOp::C2r { n } => {
                let r = c2r_last(&data, &shape, n);
                shape[last] = n;
                real = Some(r);
            }
        }
    }
    let scale = phase.scale.map(|s| T::from_f64(s).expect("a float"));
    match real {
        Some(mut r) => {
            if let Some(s) = scale {
                r.par_iter_mut().for_each(|x| *x = *x * s);
            }
            write(&r, output);
        }
        None => {
            if let Some(s) = scale {
                data.par_iter_mut().for_each(|x| *x = *x * s);
            }
            write(&data, output);
        }
    }
}

/// A phase on rows `lo..hi` of axis 1 (see [`Phase::on_rows`]): those rows of every plane are
/// gathered, transformed as a phase of their own and written back in place of the same rows of
/// `output` (an r2c reads reals and writes the complex half-lines).
fn run_on_rows<T: FftNum + Default>(
    phase: &Phase,
    (lo, hi): (usize, usize),
    input: &[u8],
    output: &mut [u8],
) {
    let planes = phase.shape[0];
    if hi == lo || planes == 0 {
        return;
    }
    let complex = std::mem::size_of::<Complex<T>>();
    let in_size = match phase.ops.first() {
        Some(AxisOp::R2c) => complex / 2,
        _ => complex,
    };
    let mut sub = Phase {
        rows: None,
        ..phase.clone()
    };
    sub.shape[1] = hi - lo;
    // Bytes of one row entering and leaving, and of the rows `lo..hi` of a plane.
    let row_in = phase.shape[2..].iter().product::<usize>() * in_size;
    let row_out = sub.out_shape()[2..].iter().product::<usize>() * complex;
    let (rows, n) = (phase.shape[1], hi - lo);
    let block: Vec<u8> = (0..planes)
        .flat_map(|x| &input[(x * rows + lo) * row_in..][..n * row_in])
        .copied()
        .collect();
    let mut done = vec![0u8; planes * n * row_out];
    run_phase::<T>(&sub, &block, &mut done);
    for (x, part) in done.chunks_exact(n * row_out).enumerate() {
        output[(x * rows + lo) * row_out..][..n * row_out].copy_from_slice(part);
    }
}

/// FFTs along `axis` of a C-order array.
fn c2c_axis<T: FftNum + Default>(
    data: &mut [Complex<T>],
    shape: &[usize],
    axis: usize,
    inverse: bool,
) {
    let n = shape[axis];
    if n <= 1 || data.is_empty() {
        return;
    }
    let inner: usize = shape[axis + 1..].iter().product();
    let direction = if inverse {
        FftDirection::Inverse
    } else {
        FftDirection::Forward
    };
    let fft = complex_fft::<T>(n, direction);
    if inner == 1 {
        data.par_chunks_mut(n * 64).for_each(|lines| {
            let mut scratch = vec![Complex::default(); fft.get_inplace_scratch_len()];
            fft.process_with_scratch(lines, &mut scratch);
        });
        return;
    }
    // Lines of stride `inner`: per block of `n * inner`, gather a few columns, transform, scatter.
    const COLS: usize = 16;
    data.par_chunks_mut(n * inner).for_each(|block| {
        let mut lines = vec![Complex::default(); n * COLS];
        let mut scratch = vec![Complex::default(); fft.get_inplace_scratch_len()];
        for c0 in (0..inner).step_by(COLS) {
            let cols = COLS.min(inner - c0);
            for i in 0..n {
                for c in 0..cols {
                    lines[c * n + i] = block[i * inner + c0 + c];
                }
            }
            fft.process_with_scratch(&mut lines[..cols * n], &mut scratch);
            for i in 0..n {
                for c in 0..cols {
                    block[i * inner + c0 + c] = lines[c * n + i];
                }
            }
        }
    });
}

/// A complex FFT of `n` points: rustfft's planner's, or where `n` has a prime factor above 127,
/// Bluestein's algorithm over a length of 2^a 3^b. The planner would take some such lengths by
/// Rader's algorithm (8191, 8209, 65537 and lengths with them as factors), whose f64 round
/// trips lost 2e-13 to 2e-12 (rustfft 6.4.1) where Bluestein's lost 2e-15 to 6e-15: past the
/// check's tolerance.
fn complex_fft<T: FftNum>(n: usize, direction: FftDirection) -> Arc<dyn Fft<T>> {
    let mut planner = FftPlanner::<T>::new();
    if !bluestein(n) {
        return planner.plan_fft(n, direction);
    }
    // The smallest 2^a 3^b of 2n - 1 or more: each power of two times the powers of three.
    let mut inner = usize::MAX;
    let mut two = (2 * n - 1).next_power_of_two();
    while two >= 1 {
        let mut m = two;
        while m < 2 * n - 1 {
            m *= 3;
        }
        inner = inner.min(m);
        two /= 2;
    }
    Arc::new(BluesteinsAlgorithm::new(n, planner.plan_fft(inner, direction)))
}

/// A line of `fft`'s length and its in-place scratch, for one worker to reuse line after line.
fn line_and_scratch<T: FftNum + Default>(fft: &dyn Fft<T>) -> (Vec<Complex<T>>, Vec<Complex<T>>) {
    let zero = Complex::default();
    (vec![zero; fft.len()], vec![zero; fft.get_inplace_scratch_len()])
}

/// Real-to-complex FFTs along the last axis (n reals to n / 2 + 1 bins per line): realfft's, or
/// for a length `complex_fft` takes by Bluestein's algorithm (realfft would plan it or its half
/// through rustfft's planner), that complex FFT of the reals.
fn r2c_last<T: FftNum + Default>(real: &[T], shape: &[usize]) -> Vec<Complex<T>> {
    let n = *shape.last().expect("an axis");
    let m = n / 2 + 1;
    let lines = real.len() / n.max(1);
    let mut out = vec![Complex::default(); lines * m];
    if bluestein(n) {
        let fft = complex_fft::<T>(n, FftDirection::Forward);
        out.par_chunks_mut(m)
            .zip(real.par_chunks(n))
            .for_each_init(
                || line_and_scratch(&*fft),
                |(line, scratch), (o, r)| {
                    for (l, &v) in line.iter_mut().zip(r) {
                        *l = Complex::new(v, T::zero());
                    }
                    fft.process_with_scratch(line, scratch);
                    o.copy_from_slice(&line[..m]);
                },
            );
        return out;
    }
    let fft = RealFftPlanner::<T>::new().plan_fft_forward(n);
    out.par_chunks_mut(m)
        .zip(real.par_chunks(n))
        .for_each(|(o, r)| {
            let mut input = r.to_vec();
            // Only buffer lengths can fail, and they are right by construction.
            let _ = fft.process(&mut input, o);
        });
    out
}

/// Complex-to-real FFTs along the last axis (m bins to n reals per line), as numpy's irfft:
/// realfft's, or for a length `complex_fft` takes by Bluestein's algorithm, that complex FFT of
/// the whole Hermitian spectrum (bins past m the conjugates of those before), its real parts.
fn c2r_last<T: FftNum + Default>(data: &[Complex<T>], shape: &[usize], n: usize) -> Vec<T> {
    let m = *shape.last().expect("an axis");
    let lines = data.len() / m.max(1);
    let mut out = vec![T::default(); lines * n];
    if bluestein(n) {
        let fft = complex_fft::<T>(n, FftDirection::Inverse);
        out.par_chunks_mut(n)
            .zip(data.par_chunks(m))
            .for_each_init(
                || line_and_scratch(&*fft),
                |(line, scratch), (o, c)| {
                    // Bin k for k <= n / 2 (its imaginary part dropped at 0 and n / 2, as
                    // numpy's irfft reads them), its conjugate at n - k.
                    for k in 0..=n / 2 {
                        let mut v = c[k];
                        if k == 0 || 2 * k == n {
                            v.im = T::zero();
                        }
                        line[k] = v;
                        line[(n - k) % n] = v.conj();
                    }
                    fft.process_with_scratch(line, scratch);
                    for (r, v) in o.iter_mut().zip(line.iter()) {
                        *r = v.re;
                    }
                },
            );
        return out;
    }
    let fft = RealFftPlanner::<T>::new().plan_fft_inverse(n);
    out.par_chunks_mut(n)
        .zip(data.par_chunks(m))
        .for_each(|(o, c)| {
            let mut input = c.to_vec();
            // Like numpy's irfft, the imaginary parts of the first (and, for even n, last) bins are
            // ignored: realfft reports them but still transforms.
            input[0].im = T::zero();
            if n.is_multiple_of(2) {
                input[m - 1].im = T::zero();
            }
            let _ = fft.process(&mut input, o);
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_know_the_bytes_they_read_and_write() {
        let r2c = Phase {
            shape: vec![2, 3, 8],
            ops: vec![AxisOp::R2c],
            scale: None,
            rows: None,
            spent: false,
        };
        // c64: reals of 4 bytes in (2*3*8), complex of 8 out (2*3*5).
        assert_eq!(r2c.bytes(8), (192, 240));
        let c2r = Phase {
            shape: vec![4, 5],
            ops: vec![AxisOp::C2r { n: 9 }],
            scale: None,
            rows: None,
            spent: false,
        };
        assert_eq!(c2r.bytes(16), (320, 288));
    }

    fn dft2(x: &[Complex<f64>], rows: usize, cols: usize) -> Vec<Complex<f64>> {
        let mut out = vec![Complex::default(); rows * cols];
        for k0 in 0..rows {
            for k1 in 0..cols {
                let mut s = Complex::default();
                for n0 in 0..rows {
                    for n1 in 0..cols {
                        let ph = -2.0
                            * std::f64::consts::PI
                            * ((k0 * n0) as f64 / rows as f64 + (k1 * n1) as f64 / cols as f64);
                        s += x[n0 * cols + n1] * Complex::from_polar(1.0, ph);
                    }
                }
                out[k0 * cols + k1] = s;
            }
        }
        out
    }

    fn bytes(x: &[Complex<f64>]) -> Vec<u8> {
        let mut out = vec![0u8; x.len() * 16];
        write(x, &mut out);
        out
    }

    #[test]
    fn both_axes_of_a_2d_array_match_a_naive_dft() {
        let (r, c) = (5, 7);
        let x: Vec<Complex<f64>> = (0..r * c)
            .map(|i| Complex::new((i % 5) as f64 - 2.0, (i % 3) as f64))
            .collect();
        let phase = Phase {
            shape: vec![r, c],
            ops: vec![
                AxisOp::C2c {
                    axis: 1,
                    inverse: false,
                },
                AxisOp::C2c {
                    axis: 0,
                    inverse: false,
                },
            ],
            scale: None,
            rows: None,
            spent: false,
        };
        let mut out = vec![0u8; r * c * 16];
        run_phase::<f64>(&phase, &bytes(&x), &mut out);
        let got: Vec<Complex<f64>> = read(&out);
        for (g, w) in got.iter().zip(dft2(&x, r, c)) {
            assert!((g - w).norm() < 1e-9, "{g} vs {w}");
        }
    }

    #[test]
    fn a_phase_split_by_rows_equals_the_whole_phase() {
        let shape = vec![6, 5, 4];
        let n: usize = shape.iter().product();
        let x: Vec<Complex<f64>> = (0..n)
            .map(|i| Complex::new((i % 7) as f64 - 3.0, (i % 4) as f64))
            .collect();
        let c2c = |axis, inverse| AxisOp::C2c { axis, inverse };
        // Along x; along z and x; an r2c (reading the reals of the first half) then along x.
        let cases = [
            vec![c2c(0, true)],
            vec![c2c(2, true), c2c(0, true)],
            vec![AxisOp::R2c, c2c(0, false)],
        ];
        for ops in cases {
            let whole = Phase {
                shape: shape.clone(),
                ops,
                scale: None,
                rows: None,
                spent: false,
            };
            let input = bytes(&x);
            let (n_in, n_out) = whole.bytes(16);
            let mut want = vec![0u8; n_out];
            run_phase::<f64>(&whole, &input[..n_in], &mut want);
            let mut got = vec![0u8; n_out];
            for (lo, hi) in [(0, 2), (2, 3), (3, 5)] {
                let rows = whole.on_rows(lo, hi).unwrap();
                run_phase::<f64>(&rows, &input[..n_in], &mut got);
            }
            assert_eq!(got, want, "{:?}", whole.ops);
        }
    }

    /// A direct DFT of one line in f64 (twiddles from k j mod n, exact to the last bit).
    fn direct(x: &[Complex<f64>], sign: f64) -> Vec<Complex<f64>> {
        let n = x.len();
        let w: Vec<Complex<f64>> = (0..n)
            .map(|m| Complex::from_polar(1.0, sign * 2.0 * std::f64::consts::PI * m as f64 / n as f64))
            .collect();
        (0..n)
            .map(|k| (0..n).map(|j| x[j] * w[(k * j) % n]).sum())
            .collect()
    }

    /// The largest difference over the largest value wanted.
    fn relative(got: &[Complex<f64>], want: &[Complex<f64>]) -> f64 {
        let diff = got.iter().zip(want).map(|(g, w)| (g - w).norm());
        let size = want.iter().map(|w| w.norm()).fold(0.0, f64::max);
        diff.fold(0.0, f64::max) / size
    }

    #[test]
    fn lengths_with_a_large_prime_factor_keep_f64_precision() {
        // 2857 is prime, 5714 twice it (realfft takes even lengths by their half): rustfft's
        // planner takes 2857 by Rader's algorithm, whose round trips lost 2e-13, past the
        // check's tolerance of eps (16 + 8 log2 n), 2.4e-14 here.
        for n in [2857, 5714] {
            let tol = f64::EPSILON * (16.0 + 8.0 * (n as f64).log2());
            let x: Vec<Complex<f64>> = (0..n)
                .map(|i| {
                    let (a, b) = ((i * 37) % 101, (i * 53) % 97);
                    Complex::new(a as f64 / 101.0, b as f64 / 97.0)
                })
                .collect();
            let mut y = x.clone();
            c2c_axis(&mut y, &[1, n], 1, false);
            assert!(relative(&y, &direct(&x, -1.0)) < 1e-14, "c2c {n}");
            c2c_axis(&mut y, &[1, n], 1, true);
            let y: Vec<Complex<f64>> = y.iter().map(|v| v / n as f64).collect();
            let c2c_trip = relative(&y, &x);
            // r2c against the direct DFT of the reals, c2r against the real parts of the
            // direct inverse of the same spectrum, then the real round trip.
            let reals: Vec<f64> = x.iter().map(|v| v.re).collect();
            let half = r2c_last(&reals, &[1, n]);
            let complex: Vec<Complex<f64>> = reals.iter().map(|&r| Complex::new(r, 0.0)).collect();
            let full = direct(&complex, -1.0);
            assert!(relative(&half, &full[..n / 2 + 1]) < 1e-14, "r2c {n}");
            let as_complex = |r: Vec<f64>| -> Vec<Complex<f64>> {
                r.into_iter().map(|r| Complex::new(r, 0.0)).collect()
            };
            let back = as_complex(c2r_last(&full[..n / 2 + 1], &[1, n / 2 + 1], n));
            let want = as_complex(direct(&full, 1.0).iter().map(|v| v.re).collect());
            assert!(relative(&back, &want) < 3e-14, "c2r {n}");
            let trip = as_complex(c2r_last(&half, &[1, n / 2 + 1], n));
            let trip: Vec<Complex<f64>> = trip.iter().map(|v| v / n as f64).collect();
            let real_trip = relative(&trip, &complex);
            assert!(c2c_trip < tol && real_trip < tol, "{n}: {c2c_trip:e} {real_trip:e}");
        }
    }

    #[test]
    fn r2c_then_c2r_round_trips_odd_lengths() {
        let (r, n) = (3, 9);
        let x: Vec<f64> = (0..r * n).map(|i| ((i * 7) % 11) as f64).collect();
        let mut xb = vec![0u8; x.len() * 8];
        write(&x, &mut xb);
        let fwd = Phase {
            shape: vec![r, n],
            ops: vec![AxisOp::R2c],
            scale: None,
            rows: None,
            spent: false,
        };
        let mut spec = vec![0u8; r * (n / 2 + 1) * 16];
        run_phase::<f64>(&fwd, &xb, &mut spec);
        let inv = Phase {
            shape: vec![r, n / 2 + 1],
            ops: vec![AxisOp::C2r { n }],
            scale: Some(1.0 / n as f64),
            rows: None,
            spent: false,
        };
        assert_eq!(inv.out_shape(), [r, n]);
        let mut back = vec![0u8; x.len() * 8];
        run_phase::<f64>(&inv, &spec, &mut back);
        let got: Vec<f64> = read(&back);
        for (g, w) in got.iter().zip(&x) {
            assert!((g - w).abs() < 1e-9);
        }
    }
}
