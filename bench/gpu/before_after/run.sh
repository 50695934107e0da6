#!/usr/bin/env bash
# Two builds in the same command: each spec with the OLD and the NEW binary in turn, ROUNDS
# rounds (default 3), under mpiexec with RANKS ranks (default 1: no launcher); prints each
# step's median time, the plan's peak and each rank's measured memory, and each run's wall
# time. The specs default to the ones here: FFT c2c c64 512^3, matmul f16 8192^3, a local
# C -> F redistribution and a checked, written all_reduce; nv.toml: a matmul, an all_gather
# and an FFT on NVSHMEM's symmetric heap, checked.
#
#   [RANKS=4] [ROUNDS=3] bench/gpu/before_after/run.sh OLD_BINARY NEW_BINARY [SPEC...]
set -uo pipefail
old=$(realpath "$1") new=$(realpath "$2")
shift 2
if [ $# -eq 0 ]; then
  here=$(dirname "$0")
  set -- "$here/fft.toml" "$here/mm.toml" "$here/mv.toml" "$here/nv.toml"
fi
specs=()
for f in "$@"; do specs+=("$(realpath "$f")"); done
ranks=${RANKS:-1}
launcher=()
[ "$ranks" -gt 1 ] && launcher=(mpiexec -n "$ranks")
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
for round in $(seq "${ROUNDS:-3}"); do
  for s in "${specs[@]}"; do
    for bin in "$old" "$new"; do
      rm -rf "$out/run"
      /usr/bin/time -f "wall %e s" "${launcher[@]}" "$bin" run "$s" --out "$out/run" -q \
        > /dev/null 2> "$out/err" || { echo "FAIL $bin $s"; tail -5 "$out/err"; continue; }
      python3 - "$bin" "$(basename "$s" .toml)" "$out/run/manifest.json" <<'PY'
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
