"""The peer of bench/gpu/matmul.py: nvmath-python's distributed matmul (cuBLASMp) on the same
problems, timed the same way (10 runs after a warm-up, mean of the wall time between
synchronisations). One line per case on rank 0: `CASE <name> <seconds>`.

    mpiexec -n P python nvmath_matmul.py NAME:DTYPE:N:KIND ...
    KIND: slab (the nvmath docs example: a^T and b in y-slabs, d in x-slabs),
          bc<NB> (2 x P/2 grid, block-cyclic NB x NB blocks), block (2 x P/2 grid, non-cyclic)
"""
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

import nvmath.distributed
from nvmath.distributed.distribution import BlockCyclic, BlockNonCyclic, ProcessGrid, Slab
from nvmath.distributed.linalg.advanced import Matmul, matrix_qualifiers_dtype
from nvmath_peer import queued

comm = MPI.COMM_WORLD
rank, nranks = comm.Get_rank(), comm.Get_size()
cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
nvmath.distributed.initialize(rank % cp.cuda.runtime.getDeviceCount(), comm, backends=["nvshmem", "nccl"])
DTYPES = {"f16": cp.float16, "f32": cp.float32, "f64": cp.float64}

for case in sys.argv[1:]:
    name, dts, n, kind = case.split(":")
    n, dt = int(n), DTYPES[dts]
    try:
        if kind == "slab":
            a = cp.random.rand(*Slab.X.shape(rank, (n, n))).astype(dt).T
            b = cp.random.rand(*Slab.X.shape(rank, (n, n))).astype(dt).T
            q = np.zeros((3,), dtype=matrix_qualifiers_dtype)
            q[0]["is_transpose"] = True
            mm = Matmul(a, b, distributions=[Slab.Y, Slab.Y, Slab.X], qualifiers=q)
        else:
            grid = ProcessGrid(shape=(2, nranks // 2), layout=ProcessGrid.Layout.COL_MAJOR)
            d = BlockNonCyclic(grid) if kind == "block" else BlockCyclic(grid, (int(kind[2:]),) * 2)
            shape = d.shape(rank, (n, n))
            a = cp.asfortranarray(cp.random.rand(*shape).astype(dt))
            b = cp.asfortranarray(cp.random.rand(*shape).astype(dt))
            mm = Matmul(a, b, distributions=[d, d, d])
        mm.plan()
        t = queued(mm.execute, 1, comm, cp.cuda.Device().synchronize)
        if rank == 0:
            print(f"CASE {name} {t:.6e}", flush=True)
        mm.free()
    except Exception as e:  # a peer that cannot run a case is reported, not fatal
        if rank == 0:
            print(f"FAIL {name} {repr(e)[:300]}", flush=True)
nvmath.distributed.finalize()
