"""Whether cuFFT can transpose as it transforms: one GPU's batched 1-D c2c plans of n points
(cufftPlanMany) reading and writing rows (contiguous lines, distance n) or columns (lines strided
by the batch, distance 1) of a [batch, n] / [n, batch] C-order matrix, in every combination,
against a copy of the same bytes. A 2-D slab FFT transposes its data around the transform down
columns; a plan that writes columns as fast as rows would do one of those transposes for free.

    python bench/gpu/cufft_layouts.py [--cases 16384:c64:4096 8192:c128:2048 ...] [--iters 20]

Prints ms per plan execution (2 warm-up, then the iterations back to back, their mean) and each
against rows -> rows.
"""
import argparse
import ctypes

import cupy as cp

from one_gpu import timed

C2C, Z2Z = 0x29, 0x69


def cufft():
    for name in ("libcufft.so.12", "libcufft.so.11", "libcufft.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    raise OSError("no libcufft")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["16384:c64:4096", "16384:c64:8192", "8192:c128:2048",
                                                   "8192:c64:4096", "1024:c64:262144"])
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    lib = cufft()
    stream = cp.cuda.Stream(non_blocking=True)
    print("| n | dtype | batch | copy ms | rows->rows | rows->cols | cols->rows | cols->cols |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for case in a.cases:
        n, dtype, batch = case.split(":")
        n, batch = int(n), int(batch)
        dt = cp.complex64 if dtype == "c64" else cp.complex128
        kind = C2C if dtype == "c64" else Z2Z
        x = (cp.random.uniform(-1, 1, n * batch) + 1j * cp.random.uniform(-1, 1, n * batch)).astype(dt)
        y = cp.empty_like(x)
        with stream:
            copy = timed(lambda: y.__setitem__(slice(None), x), a.iters)
        row = (1, n)        # stride, distance
        col = (batch, 1)
        cells = []
        base = None
        for (ist, idist), (ost, odist) in ((row, row), (row, col), (col, row), (col, col)):
            plan = ctypes.c_int(0)
            dims = (ctypes.c_int * 1)(n)
            embed = (ctypes.c_int * 1)(n)
            rc = lib.cufftPlanMany(ctypes.byref(plan), 1, dims, embed, ist, idist, embed, ost, odist,
                                   kind, batch)
            if rc != 0:
                cells.append(f"plan error {rc}")
                continue
            lib.cufftSetStream(plan, ctypes.c_void_p(stream.ptr))
            ex = lib.cufftExecC2C if dtype == "c64" else lib.cufftExecZ2Z
            run = lambda: ex(plan, ctypes.c_void_p(x.data.ptr), ctypes.c_void_p(y.data.ptr), -1)
            with stream:
                t = timed(run, a.iters)
            lib.cufftDestroy(plan)
            base = base or t
            cells.append(f"{t:.3f} ({t / base:.2f}x)")
        print(f"| {n} | {dtype} | {batch} | {copy:.3f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
