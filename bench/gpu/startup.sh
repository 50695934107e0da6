#!/usr/bin/env bash
# Where a one-rank GPU run's start-up goes: a tiny spec (one all_gather of 4 KiB) run ROUNDS
# times with -v, printing the time to the spec planned and the process group up, each part of
# bringing the GPU backend up (libraries, choosing the GPU, the CUDA context, compiling the
# kernels, the NCCL communicator, NVSHMEM where named), its shutting down, the process group's
# closing, the time from the process's start to its exit, and the run's wall time (the rest is
# the launcher's, the process's loading and its exit). With RANKS > 1, that many ranks under
# mpiexec (rank 0 prints its parts).
#
#   bench/gpu/startup.sh [DISTRUN_BINARY] [ROUNDS] [RANKS]
set -uo pipefail
bin=$(realpath "${1:-target/release/distrun}") rounds=${2:-3} ranks=${3:-1}
launcher=()
[ "$ranks" -gt 1 ] && launcher=(mpiexec -n "$ranks")
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
cat > "$work/tiny.toml" <<'SPEC'
[job]
name = "startup"
[runtime]
device = "cuda"
[tensors.x]
shape = [1024]
dtype = "f32"
distribution = { slab = 0 }
init = { fill = 1.0 }
[[steps]]
op = "all_gather"
input = "x"
out = "y"
[output]
tensors = []
SPEC
for round in $(seq "$rounds"); do
  rm -rf "$work/run"
  /usr/bin/time -f "wall %e s" "${launcher[@]}" "$bin" run "$work/tiny.toml" --out "$work/run" -v 2>&1 \
    | grep -E "^distrun: .*\([0-9.]+ s\)$|^wall" | sed 's/^distrun: //' | tr '\n' ';'
  echo
done
rm -rf "$work"
