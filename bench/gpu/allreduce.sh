#!/usr/bin/env bash
# On a GPU machine: all_reduce (sum, f32) of 1 MiB and 1 GiB on 2 and 4 GPUs, distrun's step
# time (CUDA events, median of 20 after 5 warm-up, slowest rank) beside cupyx.distributed's
# NCCL all_reduce timed as the peer's scripts do (mean of 20 back-to-back after 3 warm-up); and
# distrun's `timing = "queued"` step (1000 iterations at 1 MiB, 20 at 1 GiB, back to back: the
# host's cost per iteration shows only where it exceeds NCCL's own time).
#   RANKS="2 4" bench/gpu/allreduce.sh [DISTRUN_BINARY]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/distrun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-/opt/torch/.venv/bin/python}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cat > "$W/peer.py" <<'PYEOF'
import time, cupy as cp
from mpi4py import MPI
import cupyx.distributed
comm = MPI.COMM_WORLD; rank = comm.Get_rank(); n = comm.Get_size()
cp.cuda.Device(rank).use()
c = cupyx.distributed.NCCLBackend(n, rank, use_mpi=True)
for nbytes in [1 << 20, 1 << 30]:
    x = cp.ones(nbytes // 4, dtype=cp.float32); y = cp.empty_like(x)
    for _ in range(3): c.all_reduce(x, y)
    cp.cuda.Device().synchronize(); comm.Barrier(); t0 = time.perf_counter()
    for _ in range(20): c.all_reduce(x, y)
    cp.cuda.Device().synchronize(); t = comm.allreduce((time.perf_counter() - t0) / 20, op=MPI.MAX)
    if rank == 0:
        print(f"cupyx all_reduce {nbytes} B ranks={n}: {t*1e6:.1f} us busbw {nbytes/t/1e9*2*(n-1)/n:.1f} GB/s", flush=True)
PYEOF
for p in ${RANKS:-2 4}; do
  for nbytes in 1048576 1073741824; do
    cat > "$W/ar.toml" <<SPEC
[job]
name = "gpu-allreduce"
[runtime]
device = "cuda"
[tensors.x]
shape = [$((nbytes / 4))]
dtype = "f32"
distribution = "partial"
init = "ones"
[[steps]]
op = "all_reduce"
input = "x"
out = "y"
warmup = 5
iterations = 20
[[steps]]
op = "all_reduce"
name = "queued"
input = "x"
out = "z"
warmup = 5
iterations = $(( nbytes < 16777216 ? 1000 : 20 ))
timing = "queued"
SPEC
    rm -rf "$W/run"
    mpiexec -n $p "$BIN" run "$W/ar.toml" --out "$W/run" -q > /dev/null
    python3 -c "
import json; m = json.load(open('$W/run/manifest.json'))['steps']
s, q = m[0], m[1]
print(f\"distrun all_reduce $nbytes B ranks=$p: {s['time_s']['median']*1e6:.1f} us busbw {s['busbw_gbs']:.1f} GB/s (min {s['time_s']['min']*1e6:.1f} us); queued x{q['iterations']}: {q['time_s']['median']*1e6:.1f} us busbw {q['busbw_gbs']:.1f} GB/s\")"
  done
  mpiexec -n $p "$PY" "$W/peer.py"
done
