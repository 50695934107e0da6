#!/usr/bin/env bash
# One GPU, two builds in the same command: each spec here (FFT c2c c64 512^3, matmul f16 8192^3,
# a local C -> F redistribution and a checked, written all_reduce; nv.toml: a matmul, an
# all_gather and an FFT on NVSHMEM's symmetric heap, checked) with the OLD and the NEW
# binary in turn, 3 rounds; prints each step's median time, the plan's peak and each rank's
# measured memory, and each run's wall time.
#
#   bench/gpu/before_after/run.sh OLD_BINARY NEW_BINARY
set -uo pipefail
old=$(realpath "$1") new=$(realpath "$2")
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
for round in 1 2 3; do
  for s in fft mm mv nv; do
    for bin in "$old" "$new"; do
      rm -rf "$out/run"
      /usr/bin/time -f "wall %e s" "$bin" run "$s.toml" --out "$out/run" -q > /dev/null 2> "$out/err" \
        || { echo "FAIL $bin $s"; tail -5 "$out/err"; continue; }
      python3 - "$bin" "$s" "$out/run/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[3]))
steps = ' '.join(f"{st['name']}={st['time_s']['median'] * 1e3:.3f}ms" for st in m['steps'])
memory = [r.get('memory') for r in m['rank_info']]
print(sys.argv[1], sys.argv[2], steps, 'planned', m.get('planned_peak_bytes_per_rank'), memory)
PY
      tail -1 "$out/err"
    done
  done
done
