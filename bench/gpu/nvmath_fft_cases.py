"""The peer of bench/gpu/multi_gpu_fft.py: nvmath-python's distributed FFT (cuFFTMp) on each case
given as NAME:KIND:DTYPE:SHAPE:DIST (KIND c2c or r2c forward, c2r inverse; DTYPE the input's;
SHAPE as 1024x1024x1024; DIST 0 for x-slabs, 1 for y-slabs, the result left in the other slab
(`reshape = False`), or `pencils`: the boxes of `pencils` below in and out), on the NVSHMEM
symmetric heap, timed as `nvmath_peer.queued` times (2 warm-up, then ITERATIONS back to back,
their mean). One line per case on rank 0: `CASE NAME <seconds>`.

    mpiexec -n P python nvmath_fft_cases.py ITERATIONS CASE...
"""
import sys

import cupy as cp
from mpi4py import MPI

import nvmath.distributed
import nvmath.distributed.fft as dfft
from nvmath.distributed.distribution import Box, Slab
from nvmath_peer import queued

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
device = rank % cp.cuda.runtime.getDeviceCount()
cp.cuda.Device(device).use()
nvmath.distributed.initialize(device, comm, backends=["nvshmem"])
iterations = int(sys.argv[1])
DTYPES = {"c64": cp.complex64, "c128": cp.complex128, "f32": cp.float32, "f64": cp.float64}


def pencils(shape, p, r):
    """Rank r's box of `shape` split along its first two axes over a grid of p ranks (2 x p/2,
    or p x 1), as bench/gpu/multi_gpu_fft.py gives distrun, and its shape."""
    grid = (2, p // 2) if p % 2 == 0 and p > 2 else (p, 1)
    lo, hi = [0] * len(shape), list(shape)
    for a, (g, i) in enumerate(zip(grid, (r % grid[0], r // grid[0]))):
        lo[a], hi[a] = shape[a] * i // g, shape[a] * (i + 1) // g
    return Box(lo, hi), tuple(h - l for l, h in zip(lo, hi))


for case in sys.argv[2:]:
    name, kind, dtype, shape, where = case.split(":")
    try:
        shape = tuple(int(n) for n in shape.split("x"))
        if where == "pencils":
            box, local = pencils(shape, comm.Get_size(), rank)
            dist = [box, box]
        else:
            dist = Slab.X if where == "0" else Slab.Y
            local = dist.shape(rank, shape)
        dt = DTYPES[dtype]
        a = dfft.allocate_operand(local, cp, input_dtype=dt, distribution=dist, fft_type=kind.upper())
        a[...] = cp.random.uniform(-1, 1, local) + (1j * cp.random.uniform(-1, 1, local) if kind != "r2c" else 0)
        options = {"reshape": False, "fft_type": kind.upper()}
        with dfft.FFT(a, distribution=dist, options=options) as f:
            f.plan()
            t = queued(f.execute, 2, comm, cp.cuda.Device().synchronize, iterations)
            if rank == 0:
                print(f"CASE {name} {t:.6e}", flush=True)
        nvmath.distributed.free_symmetric_memory(a)
    except Exception as e:  # a case the peer cannot run is reported, not fatal
        if rank == 0:
            print(f"FAIL {name} {repr(e)[:300]}", flush=True)
nvmath.distributed.finalize()
