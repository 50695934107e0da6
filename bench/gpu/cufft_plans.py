"""Whether cuFFT's multi-dimensional plan or one plan per axis is faster for an FFT over every
axis of a C-order array, on one GPU through cupy: the whole array's fftn / rfftn / irfftn (one
nd plan) against the same transform axis by axis (cupy moves each axis but the last to the end
and back, as distrun's transforms down long columns do), and both on the F-order array (where
cupy runs one-axis plans). distrun plans an axis of a Bluestein length (a prime factor above
127) apart where this found it faster (`Seen::apart` in src/backend/cuda/fft.rs).

    python bench/gpu/cufft_plans.py [--cases c2r:c64:471405x95 c2c:c128:100003x64 ...]

Prints ms per call (timed as distrun's queued steps, 10 iterations) of each way, C and F order.
"""
import argparse

import cupy as cp

from one_gpu import timed

CASES = ["c2r:c64:471405x95", "c2r:c64:262144x95", "c2r:c64:471405x16", "c2r:c64:100003x512",
         "r2c:f32:471405x95", "c2c:c64:471405x48", "c2c:c64:100003x64", "c2r:c128:471405x95",
         "c2r:c64:3000000x8", "c2r:c64:65536x65x33", "c2c:c64:262144x64", "c2r:c64:24573x4099"]


def array(shape, dtype, order):
    x = cp.random.uniform(-1, 1, shape).astype(dtype)
    if cp.dtype(dtype).kind == "c":
        x = x + 1j * cp.random.uniform(-1, 1, shape).astype(dtype)
    return cp.asfortranarray(x) if order == "F" else cp.ascontiguousarray(x)


def ways(kind, shape, precision, order):
    """The whole-array call and the axis-by-axis one for `kind` on `shape` (the real shape of
    r2c's input and c2r's result)."""
    complex_, real = {"c64": (cp.complex64, cp.float32), "f32": (cp.complex64, cp.float32),
                      "c128": (cp.complex128, cp.float64), "f64": (cp.complex128, cp.float64)}[precision]
    before = tuple(range(len(shape) - 1))
    if kind == "c2r":
        x = array(shape[:-1] + (shape[-1] // 2 + 1,), complex_, order)
        return (lambda: cp.fft.irfftn(x, s=shape),
                lambda: cp.fft.irfft(cp.fft.ifftn(x, axes=before), n=shape[-1], axis=-1))
    if kind == "r2c":
        x = array(shape, real, order)
        return lambda: cp.fft.rfftn(x), lambda: cp.fft.fftn(cp.fft.rfft(x, axis=-1), axes=before)
    x = array(shape, complex_, order)
    return lambda: cp.fft.fftn(x), lambda: cp.fft.fftn(cp.fft.fft(x, axis=-1), axes=before)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=CASES)
    a = ap.parse_args()
    print("| case | C, one plan | C, by axis | F, one call | F, by axis |")
    print("| --- | --- | --- | --- | --- |")
    for case in a.cases:
        kind, precision, dims = case.split(":")
        shape = tuple(int(d) for d in dims.split("x"))
        cells = []
        for order in "CF":
            whole, by_axis = ways(kind, shape, precision, order)
            cells += [f"{timed(whole, 10) * 1e3:.3f}", f"{timed(by_axis, 10) * 1e3:.3f}"]
            cp.get_default_memory_pool().free_all_blocks()
        print(f"| {case} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
