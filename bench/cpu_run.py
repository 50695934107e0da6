#!/usr/bin/env python3
"""distrun on CPU ranks beside mpi4py, in the same run on the same machine and MPI.

1. all_reduce (sum) of 64 MiB of f32 on 2 ranks: distrun's step time (median over iterations of
   the slowest rank) against mpi4py's Allreduce on numpy arrays, timed the same way.
2. redistribute of a 4096 x 4096 f64 tensor from row slabs to a 2 x 2 block-cyclic layout with
   64 x 64 blocks, on 4 ranks: GB/s, against the same exchange written with mpi4py (numpy packing,
   Alltoallv, numpy unpacking).
3. `distrun run` of a one-step spec on one rank: wall time from start to exit.

Rounds alternate between distrun and the peer; medians over rounds are reported.
Run from the repository root: python3 bench/cpu_run.py  (needs mpi4py and numpy: it installs them
into .tools/venv when missing).
"""
import json, os, statistics, subprocess, sys, tempfile, textwrap, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRUN = os.path.join(ROOT, "target", "release", "distrun")
VENV_PY = os.path.join(ROOT, ".tools", "venv", "bin", "python")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
ROUNDS = 5

ALLREDUCE_SPEC = """
[job]
name = "bench-allreduce"
[tensors.x]
shape = [16777216]
dtype = "f32"
distribution = "partial"
init = { uniform = {} }
[[steps]]
op = "all_reduce"
input = "x"
out = "y"
warmup = 3
iterations = 20
"""

REDIST_SPEC = """
[job]
name = "bench-redistribute"
[tensors.x]
shape = [4096, 4096]
dtype = "f64"
distribution = { slab = 0 }
init = { arange = {} }
[[steps]]
op = "redistribute"
input = "x"
out = "y"
distribution = { block_cyclic = { grid = [2, 2], blocks = [64, 64] } }
warmup = 2
iterations = 10
"""

TINY_SPEC = """
[job]
name = "bench-tiny"
[tensors.x]
shape = [64, 64]
dtype = "f32"
distribution = "partial"
init = "ones"
[[steps]]
op = "all_reduce"
input = "x"
out = "y"
[output]
tensors = ["y"]
"""

MPI4PY_ALLREDUCE = """
import time, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
x = np.random.default_rng(comm.rank).random(16777216, dtype=np.float32)
y = np.empty_like(x)
ts = []
for k in range(23):
    comm.Barrier(); t0 = time.perf_counter()
    comm.Allreduce(x, y, op=MPI.SUM)
    t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    if k >= 3: ts.append(t)
if comm.rank == 0: print(np.median(ts))
"""

# Rank r holds rows [r*1024, (r+1)*1024); block-cyclic 2x2 (col-major grid: prow = q % 2,
# pcol = q // 2) with 64-blocks: q holds rows i with (i // 64) % 2 == prow, cols likewise.
MPI4PY_REDIST = """
import time, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD; r = comm.rank; P = comm.size; N = 4096; B = 64
x = np.arange(r * 1024 * N, (r + 1) * 1024 * N, dtype=np.float64).reshape(1024, N)
my_rows = np.arange(r * 1024, (r + 1) * 1024)
def owned(q, axis):
    p = q % 2 if axis == 0 else q // 2
    idx = np.arange(N)
    return idx[(idx // B) % 2 == p]
send_rows = [np.intersect1d(my_rows, owned(q, 0)) - r * 1024 for q in range(P)]
send_cols = [owned(q, 1) for q in range(P)]
recv_rows = [np.intersect1d(np.arange(s * 1024, (s + 1) * 1024), owned(r, 0)) for s in range(P)]
mine_rows, mine_cols = owned(r, 0), owned(r, 1)
row_pos = {g: i for i, g in enumerate(mine_rows)}
scount = [len(send_rows[q]) * len(send_cols[q]) for q in range(P)]
rcount = [len(recv_rows[s]) * len(mine_cols) for s in range(P)]
sendbuf = np.empty(sum(scount)); recvbuf = np.empty(sum(rcount))
y = np.empty((len(mine_rows), len(mine_cols)))
sdis = np.concatenate([[0], np.cumsum(scount)[:-1]]); rdis = np.concatenate([[0], np.cumsum(rcount)[:-1]])
ts = []
for k in range(12):
    comm.Barrier(); t0 = time.perf_counter()
    for q in range(P):
        sendbuf[sdis[q]:sdis[q] + scount[q]] = x[np.ix_(send_rows[q], send_cols[q])].ravel()
    comm.Alltoallv([sendbuf, (scount, sdis), MPI.DOUBLE], [recvbuf, (rcount, rdis), MPI.DOUBLE])
    for s in range(P):
        rows = [row_pos[g] for g in recv_rows[s]]
        y[rows, :] = recvbuf[rdis[s]:rdis[s] + rcount[s]].reshape(len(rows), len(mine_cols))
    t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    if k >= 2: ts.append(t)
if comm.rank == 0: print(np.median(ts))
"""


def mpiexec(n, args):
    r = subprocess.run(["mpiexec", "-n", str(n)] + args, env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{r.stderr}")
    return r.stdout


def distrun_median(n, spec, tmp):
    out = os.path.join(tmp, f"run-{time.monotonic_ns()}")
    mpiexec(n, [DISTRUN, "run", spec, "--out", out, "-q"])
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)["steps"][0]["time_s"]["median"]


def peer_median(n, script):
    return float(mpiexec(n, [VENV_PY, "-c", textwrap.dedent(script)]).strip())


def ensure_peers():
    ok = subprocess.run([VENV_PY, "-c", "import mpi4py, numpy"], capture_output=True).returncode == 0
    if not ok:
        subprocess.run([os.path.join(ROOT, "scripts", "setup")], check=True)
        subprocess.run([VENV_PY, "-m", "pip", "install", "-q", "mpi4py", "numpy"], check=True)


def main():
    if not os.path.exists(DISTRUN):
        sys.exit("build first: cargo build --release")
    ensure_peers()
    with tempfile.TemporaryDirectory() as tmp:
        specs = {}
        for name, text in [("ar", ALLREDUCE_SPEC), ("redist", REDIST_SPEC), ("tiny", TINY_SPEC)]:
            specs[name] = os.path.join(tmp, f"{name}.toml")
            with open(specs[name], "w") as f:
                f.write(text)

        d, p = [], []
        for _ in range(ROUNDS):
            d.append(distrun_median(2, specs["ar"], tmp))
            p.append(peer_median(2, MPI4PY_ALLREDUCE))
        d, p = statistics.median(d), statistics.median(p)
        print(f"all_reduce 64 MiB f32, 2 ranks: distrun {d*1e3:.2f} ms, mpi4py Allreduce {p*1e3:.2f} ms, "
              f"ratio {d/p:.3f} (target <= 1.1)")

        d, p = [], []
        for _ in range(ROUNDS):
            d.append(distrun_median(4, specs["redist"], tmp))
            p.append(peer_median(4, MPI4PY_REDIST))
        d, p = statistics.median(d), statistics.median(p)
        gb = 4096 * 4096 * 8 / 1e9
        print(f"redistribute 4096^2 f64 slab 0 -> 2x2 block-cyclic 64: distrun {d*1e3:.2f} ms ({gb/d:.2f} GB/s), "
              f"mpi4py Alltoallv with numpy packing {p*1e3:.2f} ms ({gb/p:.2f} GB/s), ratio {d/p:.3f}")

        walls = []
        for k in range(20):
            out = os.path.join(tmp, f"tiny-{k}")
            t0 = time.perf_counter()
            subprocess.run([DISTRUN, "run", specs["tiny"], "--out", out, "-q"], check=True, env=ENV,
                           stdout=subprocess.DEVNULL)
            walls.append(time.perf_counter() - t0)
        print(f"distrun run of a one-step spec, one rank, start to exit: median {statistics.median(walls)*1e3:.1f} ms "
              f"(min {min(walls)*1e3:.1f}) (target < 100 ms)")


if __name__ == "__main__":
    main()
