"""NCCL's all-to-all in one group against the same sends in rounds (each a group in which every
rank sends to at most one peer and takes from at most one): does splitting a movement into
matchings help NCCL as it helps the copy engines (`src/ops/rounds.rs`)?

    mpiexec -n 4 python bench/gpu/nccl_rounds.py [--mib 512] [--iters 10]

Two patterns: every rank sends every other `--mib` MiB (even; rounds: rank r to r + k in round
k), and 2 x 2 pencils to x-slabs (ranks 1 and 2 send two halves, 0 and 3 one; rounds: first
0 -> 1, 1 -> 3, 2 -> 0, 3 -> 2, then 1 <-> 2). Prints the slowest rank's time per way.
"""
import argparse
import time

import cupy as cp
from cupy.cuda import nccl
from mpi4py import MPI


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    me, p = comm.Get_rank(), comm.Get_size()
    cp.cuda.Device(me % cp.cuda.runtime.getDeviceCount()).use()
    uid = comm.bcast(nccl.get_unique_id() if me == 0 else None, root=0)
    nc = nccl.NcclCommunicator(p, uid, me)
    part = a.mib << 20
    src = cp.ones(p * part, dtype=cp.uint8)
    dst = cp.zeros(p * part, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)

    def group(sends, recvs):
        nccl.groupStart()
        for q in sends:
            nc.send(src.data.ptr + q * part, part, nccl.NCCL_INT8, q, stream.ptr)
        for q in recvs:
            nc.recv(dst.data.ptr + q * part, part, nccl.NCCL_INT8, q, stream.ptr)
        nccl.groupEnd()

    def timed(issue):
        for _ in range(2):
            issue()
        stream.synchronize()
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            issue()
        stream.synchronize()
        return comm.allreduce((time.perf_counter() - t0) / a.iters, op=MPI.MAX)

    others = [(me + k) % p for k in range(1, p)]
    ways = [
        ("even, one group", lambda: group(others, others)),
        ("even, rounds (r to r + k)", lambda: [group([(me + k) % p], [(me - k) % p]) for k in range(1, p)]),
    ]
    if p == 4:
        # What rank s sends to d, pencils to x-slabs (halves of `--mib` each).
        sends = {0: [1], 1: [2, 3], 2: [0, 1], 3: [2]}
        takes = {d: [s for s in sends if d in sends[s]] for d in range(4)}
        rounds = [{0: 1, 1: 3, 2: 0, 3: 2}, {1: 2, 2: 1}]

        def in_rounds():
            for r in rounds:
                group([r[me]] if me in r else [], [s for s, d in r.items() if d == me])
        ways += [
            ("pencils to x-slabs, one group", lambda: group(sends[me], takes[me])),
            ("pencils to x-slabs, rounds", in_rounds),
        ]
    if me == 0:
        print(f"{p} ranks, {a.mib} MiB a part; the slowest rank's ms")
        print("| way | ms | GB/s out of the busiest rank |")
        print("| --- | --- | --- |")
    for name, issue in ways:
        t = timed(issue)
        busiest = (p - 1) if name.startswith("even") else 2
        if me == 0:
            print(f"| {name} | {t * 1e3:.3f} | {busiest * part / t / 1e9:.0f} |", flush=True)


if __name__ == "__main__":
    main()
