"""The peer of bench/gpu/multi_gpu_redistribute.py: nvmath-python's distributed reshape (cuFFTMp's
reshape, through NVSHMEM) on each case given as NAME:DTYPE:SHAPE:FROM:TO (SHAPE as 1024x1024x1024;
FROM and TO a slab axis 0-2 or `pencils`), on the NVSHMEM symmetric heap, timed as
`nvmath_peer.queued` times (2 warm-up, then ITERATIONS back to back, their mean). Each run is
cuFFTMp's reshape into one result allocated once, after the symmetric-memory barrier that
nvmath's `execute` issues (its `execute` allocates a new symmetric result every call, which is
not timed here). One line per case on rank 0: `CASE NAME <seconds>`.

    mpiexec -n P python nvmath_reshape_cases.py ITERATIONS CASE...
"""
import sys

import cupy as cp
from mpi4py import MPI

import nvmath.distributed
from nvmath.bindings import cufftMp, nvshmem
from nvmath.distributed.distribution import Box
from nvmath.distributed.reshape import Reshape
from nvmath.internal import utils
from nvmath_peer import queued

comm = MPI.COMM_WORLD
rank, ranks = comm.Get_rank(), comm.Get_size()
device = rank % cp.cuda.runtime.getDeviceCount()
cp.cuda.Device(device).use()
nvmath.distributed.initialize(device, comm, backends=["nvshmem"])
iterations = int(sys.argv[1])
DTYPES = {"f16": cp.float16, "f32": cp.float32, "f64": cp.float64, "c64": cp.complex64, "c128": cp.complex128}


def box(shape, where):
    """This rank's box of `shape`: a slab along axis `where` (the first n % P ranks one larger,
    as distrun splits a slab), or pencils over a 2 x P/2 grid (as multi_gpu_fft.py's)."""
    lo, hi = [0] * len(shape), list(shape)
    if where == "pencils":
        grid = (2, ranks // 2) if ranks % 2 == 0 and ranks > 2 else (ranks, 1)
        for a, (g, i) in enumerate(zip(grid, (rank % grid[0], rank // grid[0]))):
            lo[a], hi[a] = shape[a] * i // g, shape[a] * (i + 1) // g
    else:
        a = int(where)
        n, q = shape[a], ranks
        lo[a] = rank * (n // q) + min(rank, n % q)
        hi[a] = lo[a] + n // q + (rank < n % q)
    return Box(lo, hi), tuple(h - l for l, h in zip(lo, hi))


for case in sys.argv[2:]:
    name, dtype, shape, src, dst = case.split(":")
    try:
        shape = tuple(int(n) for n in shape.split("x"))
        (box_in, local), (box_out, _) = box(shape, src), box(shape, dst)
        a = nvmath.distributed.allocate_symmetric_memory(local, cp, dtype=DTYPES[dtype])
        a[...] = cp.random.uniform(-1, 1, local).astype(a.dtype)
        with Reshape(a, box_in, box_out) as r:
            r.plan()
            out = r.execute()  # allocates the workspace and one result, reused below
            stream = cp.cuda.get_current_stream().ptr
            workspace = utils.get_ptr_from_memory_pointer(r.workspace_ptr)

            def run():
                nvshmem.sync_all_on_stream(stream)
                cufftMp.exec_reshape_async(r.handle, out.data.ptr, a.data.ptr, workspace, stream)

            t = queued(run, 2, comm, cp.cuda.Device().synchronize, iterations)
            if rank == 0:
                print(f"CASE {name} {t:.6e}", flush=True)
            cp.cuda.Device().synchronize()
        nvmath.distributed.free_symmetric_memory(a, out)
    except Exception as e:  # a case the peer cannot run is reported, not fatal
        if rank == 0:
            print(f"FAIL {name} {repr(e)[:300]}", flush=True)
nvmath.distributed.finalize()
