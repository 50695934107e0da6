"""The peer of bench/gpu/fft.py: nvmath-python's distributed FFT (cuFFTMp) on the same problem,
timed the same way (2 warm-up, then ITERATIONS runs back to back between two synchronisations,
their mean). c64 N^3 in x-slabs on the NVSHMEM symmetric heap, forward, nvmath's defaults otherwise.
One line per reshape flag on rank 0: `CASE <true|false> <seconds>`.

    mpiexec -n P python nvmath_fft.py N ITERATIONS true false
"""
import sys

import cupy as cp
from mpi4py import MPI

import nvmath.distributed
import nvmath.distributed.fft as dfft
from nvmath.distributed.distribution import Slab
from nvmath_peer import queued

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
device = rank % cp.cuda.runtime.getDeviceCount()
cp.cuda.Device(device).use()
nvmath.distributed.initialize(device, comm, backends=["nvshmem"])
n, iterations = int(sys.argv[1]), int(sys.argv[2])

for reshape in sys.argv[3:]:
    try:
        shape = Slab.X.shape(rank, (n, n, n))
        a = dfft.allocate_operand(shape, cp, input_dtype=cp.complex64, distribution=Slab.X)
        a[...] = cp.random.rand(*shape, dtype=cp.float32) + 1j * cp.random.rand(*shape, dtype=cp.float32)
        with dfft.FFT(a, distribution=Slab.X, options={"reshape": reshape == "true"}) as f:
            f.plan()
            t = queued(f.execute, 2, comm, cp.cuda.Device().synchronize, iterations)
            if rank == 0:
                print(f"CASE {reshape} {t:.6e}", flush=True)
        nvmath.distributed.free_symmetric_memory(a)
    except Exception as e:  # a peer that cannot run a case is reported, not fatal
        if rank == 0:
            print(f"FAIL {reshape} {repr(e)[:300]}", flush=True)
nvmath.distributed.finalize()
