#!/usr/bin/env bash
# The benchmark matrix in one command, on whatever GPUs the machine has: every op family against
# the library's own call in the same run. On one GPU: matmul over dtypes, layouts and transposes
# against cupy (one_gpu_matmul.py), FFTs of every kind against cupy (one_gpu_fft.py), local
# changes of layout against cupy (one_gpu_relayout.py), the cost of checks (check_cost.sh). On 2
# and 4 GPUs where present: FFTs of every kind against cuFFTMp where nvmath's wheels are in
# .tools/wheels and against one GPU, distrun by NCCL and by NVSHMEM puts (multi_gpu_fft.py), the
# collectives against cupyx (allreduce.sh, collectives.sh), matmul against cuBLASMp (matmul.py,
# where the wheels are).
# Each part's table goes to stdout under its heading; a part that fails says so and the rest
# go on. Copy the tables into bench/RESULTS.md with the date and the machine.
#
#   bench/gpu/matrix.sh [DISTRUN_BINARY]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=$(realpath "${1:-target/release/distrun}")
PY=${PYTHON:-/opt/torch/.venv/bin/python}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
RANKS=$(for p in 2 4; do [ "$GPUS" -ge "$p" ] && echo $p; done | tr '\n' ' ')
PEER=""
ls .tools/wheels/*.whl > /dev/null 2>&1 || PEER="--no-peer"

part() {
  echo
  echo "## $1"
  shift
  "$@" || echo "(this part failed: exit $?)"
}

echo "# distrun benchmark matrix: $(date -u +%F), $GPUS x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
part "matmul, one GPU, against cupy" bash -c "cd bench/gpu && $PY one_gpu_matmul.py --bin $BIN"
part "FFT, one GPU, against cupy" bash -c "cd bench/gpu && $PY one_gpu_fft.py --bin $BIN"
part "changes of layout, one GPU, against cupy" bash -c "cd bench/gpu && $PY one_gpu_relayout.py --bin $BIN"
part "checks, one GPU (wall time of whole runs)" bench/gpu/check_cost.sh "$BIN"
if [ -n "$RANKS" ]; then
  part "FFT of every kind on $RANKS GPUs" bash -c "cd bench/gpu && $PY multi_gpu_fft.py --bin $BIN --ranks $RANKS $PEER"
  part "all_reduce against cupyx" bench/gpu/allreduce.sh "$BIN"
  part "collectives against cupyx" bench/gpu/collectives.sh "$BIN"
  if [ -z "$PEER" ]; then
    part "matmul against cuBLASMp" bash -c "cd bench/gpu && $PY matmul.py --bin $BIN --ranks $RANKS"
  fi
fi
