#!/usr/bin/env bash
# The benchmark matrix on whatever GPUs the machine has: every op family against the library's
# own call in the same run. On one GPU: matmul over dtypes, layouts and transposes against cupy
# (`matmul1`: one_gpu_matmul.py), FFTs of every kind against cupy (`fft1`: one_gpu_fft.py), local
# changes of layout against cupy (`layout1`: one_gpu_relayout.py), SAMPLE (default 30) cases of
# each of those three drawn at random beyond their tables (`sample1`: --sample, SEED the seed,
# by default the date, so that each day's run tries other cases), the cost of checks (`checks1`:
# check_cost.sh), start-up (`startup1`: startup.sh). On 2 and 4 GPUs where present: FFTs of
# every kind against cuFFTMp where nvmath's wheels are in .tools/wheels and against one GPU,
# distrun by NCCL and by NVSHMEM puts (`fft`: multi_gpu_fft.py), the collectives against cupyx
# (`allreduce`: allreduce.sh, `collectives`: collectives.sh), matmul against cuBLASMp (`matmul`:
# matmul.py, where the wheels are), redistributions between slabs and pencils against nvmath's
# reshape (cuFFTMp's, where the wheels are; `redistribute`: multi_gpu_redistribute.py).
# Each part's table goes to stdout under its heading; a part that fails says so and the rest go
# on. PARTs name the parts to run (default all, in the order above), so that the matrix can be
# split over commands of limited time; RANKS (default "2 4" as far as the GPUs go) the rank
# counts of the multi-GPU parts. Copy the tables into bench/RESULTS.md with the date and the
# machine. Where $OUT names a folder (as on the device machines), everything printed also goes to
# $OUT/matrix.txt (appended), so that no table is lost to a cut-off output.
#
#   bench/gpu/matrix.sh [DISTRUN_BINARY] [PART...]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=$(realpath "${1:-target/release/distrun}")
shift || true
PARTS=${*:-matmul1 fft1 layout1 sample1 checks1 startup1 fft allreduce collectives matmul redistribute}
SAMPLE=${SAMPLE:-30}
SEED=${SEED:-$(date -u +%Y%m%d)}
PY=${PYTHON:-/opt/torch/.venv/bin/python}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
if [ -d "${OUT:-}" ]; then
  exec > >(tee -a "$OUT/matrix.txt") 2>&1
fi
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
export RANKS=${RANKS:-$(for p in 2 4; do [ "$GPUS" -ge "$p" ] && echo $p; done | tr '\n' ' ')}
PEER=""
ls .tools/wheels/*.whl > /dev/null 2>&1 || PEER="--no-peer"

part() {
  local name=$1 title=$2
  shift 2
  [[ " $PARTS " == *" $name "* ]] || return 0
  echo
  echo "## $title"
  local start=$SECONDS
  "$@" || echo "(this part failed: exit $?)"
  echo "($name: $((SECONDS - start)) s)"
}

echo "# distrun benchmark matrix: $(date -u +%F), $GPUS x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
part matmul1 "matmul, one GPU, against cupy" bash -c "cd bench/gpu && $PY one_gpu_matmul.py --bin $BIN"
part fft1 "FFT, one GPU, against cupy" bash -c "cd bench/gpu && $PY one_gpu_fft.py --bin $BIN"
part layout1 "changes of layout, one GPU, against cupy" bash -c "cd bench/gpu && $PY one_gpu_relayout.py --bin $BIN"
for kind in matmul fft relayout; do
  part sample1 "$kind, one GPU, $SAMPLE cases drawn at random (seed $SEED), against cupy" \
    bash -c "cd bench/gpu && $PY one_gpu_$kind.py --bin $BIN --sample $SAMPLE --seed $SEED"
done
part checks1 "checks, one GPU (wall time of whole runs)" env RANKS=1 bench/gpu/check_cost.sh "$BIN"
part startup1 "start-up of a one-rank GPU run" bench/gpu/startup.sh "$BIN"
if [ -n "${RANKS// /}" ]; then
  part fft "FFT of every kind on $RANKS GPUs" bash -c "cd bench/gpu && $PY multi_gpu_fft.py --bin $BIN --ranks $RANKS $PEER"
  part allreduce "all_reduce against cupyx" bench/gpu/allreduce.sh "$BIN"
  part collectives "collectives against cupyx" bench/gpu/collectives.sh "$BIN"
  part redistribute "redistributions on $RANKS GPUs" bash -c "cd bench/gpu && $PY multi_gpu_redistribute.py --bin $BIN --ranks $RANKS $PEER"
  if [ -z "$PEER" ]; then
    part matmul "matmul against cuBLASMp" bash -c "cd bench/gpu && $PY matmul.py --bin $BIN --ranks $RANKS"
  fi
fi
