#!/usr/bin/env bash
# On a GPU machine: all_gather, reduce_scatter, all_to_all and broadcast at 1 GiB per rank on 2
# and 4 GPUs: distrun's busbw beside cupyx.distributed's NCCL calls timed as the peer's scripts
# do (mean of 20 back to back after 3 warm-up). distrun times its steps the same way
# (`timing = "queued"`: 20 iterations back to back between two CUDA events, 3 warm-up); with
# TIMING=each, each iteration alone (median of 20, slowest rank), as before 2026-11-22.
# all_gather and all_to_all run twice: into ordinary results (NCCL), and into results on the
# symmetric heap, where distrun tries NCCL and NVSHMEM puts and keeps the faster (both shown).
#   bench/gpu/collectives.sh [DISTRUN_BINARY]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/distrun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-/opt/torch/.venv/bin/python}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
N=$((1 << 28))   # f32 elements per rank: 1 GiB
TIMING=${TIMING:-queued}
cat > "$W/peer.py" <<'PYEOF'
import time, cupy as cp
from mpi4py import MPI
import cupyx.distributed
comm = MPI.COMM_WORLD; rank = comm.Get_rank(); n = comm.Get_size()
cp.cuda.Device(rank).use()
c = cupyx.distributed.NCCLBackend(n, rank, use_mpi=True)
def bench(f, it=20, warm=3):
    for _ in range(warm): f()
    cp.cuda.Device().synchronize(); comm.Barrier(); t0 = time.perf_counter()
    for _ in range(it): f()
    cp.cuda.Device().synchronize()
    return comm.allreduce((time.perf_counter() - t0) / it, op=MPI.MAX)
nbytes = 1 << 30; cnt = nbytes // 4
x = cp.ones(cnt, dtype=cp.float32); y = cp.empty(cnt * n, dtype=cp.float32)
t = bench(lambda: c.all_gather(x, y, cnt))
if rank == 0: print(f"cupyx all_gather ranks={n}: busbw {nbytes*n/t/1e9*(n-1)/n:.1f} GB/s", flush=True)
del y
xx = cp.ones(cnt * n, dtype=cp.float32); yy = cp.empty(cnt, dtype=cp.float32)
t = bench(lambda: c.reduce_scatter(xx, yy, cnt))
if rank == 0: print(f"cupyx reduce_scatter ranks={n}: busbw {nbytes*n/t/1e9*(n-1)/n:.1f} GB/s", flush=True)
del xx
a2 = cp.ones((n, cnt // n), dtype=cp.float32); b2 = cp.empty_like(a2)
t = bench(lambda: c.all_to_all(a2, b2))
if rank == 0: print(f"cupyx all_to_all ranks={n}: busbw {nbytes/t/1e9*(n-1)/n:.1f} GB/s", flush=True)
t = bench(lambda: c.broadcast(x, 0))
if rank == 0: print(f"cupyx broadcast ranks={n}: busbw {nbytes/t/1e9:.1f} GB/s", flush=True)
PYEOF
for p in ${RANKS:-2 4}; do
  cat > "$W/c.toml" <<SPEC
[job]
name = "gpu-collectives"
[runtime]
device = "cuda"
backends = ["nccl", "nvshmem"]
[tensors.all_sym]
shape = [$((N * p))]
dtype = "f32"
distribution = "replicated"
symmetric = true
[tensors.tt_sym]
shape = [$p, $p, $((N / p))]
dtype = "f32"
distribution = { slab = 1 }
symmetric = true
[tensors.rows]
shape = [$((N * p))]
dtype = "f32"
distribution = { slab = 0 }
init = "ones"
[tensors.part]
shape = [$((N * p))]
dtype = "f32"
distribution = "partial"
init = "ones"
[tensors.t]
shape = [$p, $p, $((N / p))]
dtype = "f32"
distribution = { slab = 0 }
init = "ones"
[tensors.held]
shape = [$N]
dtype = "f32"
distribution = { root = 0 }
init = "ones"
[[steps]]
op = "all_gather"
input = "rows"
out = "all"
warmup = 3
iterations = 20
timing = "$TIMING"
[[steps]]
op = "reduce_scatter"
input = "part"
out = "rs"
warmup = 3
iterations = 20
timing = "$TIMING"
[[steps]]
op = "all_to_all"
input = "t"
out = "tt"
warmup = 3
iterations = 20
timing = "$TIMING"
[[steps]]
op = "broadcast"
input = "held"
out = "everywhere"
warmup = 3
iterations = 20
timing = "$TIMING"
[[steps]]
name = "all_gather (symmetric)"
op = "all_gather"
input = "rows"
out = "all_sym"
warmup = 3
iterations = 20
timing = "$TIMING"
[[steps]]
name = "all_to_all (symmetric)"
op = "all_to_all"
input = "t"
out = "tt_sym"
warmup = 3
iterations = 20
timing = "$TIMING"
SPEC
  rm -rf "$W/run"
  mpiexec -n $p "$BIN" run "$W/c.toml" --out "$W/run" > "${OUT:-$W}/distrun-$p.log" 2>&1 || { tail -5 "${OUT:-$W}/distrun-$p.log"; exit 1; }
  python3 -c "
import json
for s in json.load(open('$W/run/manifest.json'))['steps']:
    v = s.get('via')
    via = f\", by {v['chosen']} (trials: nccl {v['nccl_s']*1e3:.2f} ms, nvshmem {v['nvshmem_s']*1e3:.2f} ms)\" if v else ''
    print(f\"distrun {s['name']} ranks=$p: busbw {s['busbw_gbs']:.1f} GB/s ({s['time_s']['median']*1e3:.2f} ms){via}\")"
  mpiexec -n $p "$PY" "$W/peer.py"
done
