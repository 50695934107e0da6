"""The peer of bench/gpu/multi_gpu_fft.py: nvmath-python's distributed FFT (cuFFTMp), c2c forward,
on each case given as NAME:DTYPE:SHAPE:SLAB (SHAPE as 1024x1024x1024, SLAB 0 for x-slabs, 1 for
y-slabs), on the NVSHMEM symmetric heap, timed as `nvmath_peer.queued` times (2 warm-up, then
ITERATIONS back to back, their mean). One line per case on rank 0: `CASE NAME <seconds>`.

    mpiexec -n P python nvmath_fft_cases.py ITERATIONS CASE...
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
iterations = int(sys.argv[1])
DTYPES = {"c64": (cp.complex64, cp.float32), "c128": (cp.complex128, cp.float64)}

for case in sys.argv[2:]:
    name, dtype, shape, slab = case.split(":")
    try:
        complex_type, real_type = DTYPES[dtype]
        dist = Slab.X if slab == "0" else Slab.Y
        shape = tuple(int(n) for n in shape.split("x"))
        local = dist.shape(rank, shape)
        a = dfft.allocate_operand(local, cp, input_dtype=complex_type, distribution=dist)
        a[...] = cp.random.rand(*local, dtype=real_type) + 1j * cp.random.rand(*local, dtype=real_type)
        with dfft.FFT(a, distribution=dist, options={"reshape": False}) as f:
            f.plan()
            t = queued(f.execute, 2, comm, cp.cuda.Device().synchronize, iterations)
            if rank == 0:
                print(f"CASE {name} {t:.6e}", flush=True)
        nvmath.distributed.free_symmetric_memory(a)
    except Exception as e:  # a case the peer cannot run is reported, not fatal
        if rank == 0:
            print(f"FAIL {name} {repr(e)[:300]}", flush=True)
nvmath.distributed.finalize()
