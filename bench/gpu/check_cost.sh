#!/usr/bin/env bash
# What a check costs on the GPU: each case of issue 18 (FFT c2c c64 1024^3, r2c f32 1024^3,
# c2r into 1024^3, c2c c128 512^3, 2-D c64 16384^2, matmul f16 16384^3 and one with gelu_bias,
# an all_reduce and a redistribution of 8192^2 f32) run with `check = false` and `check = true`,
# one warm-up and one iteration, by each binary given in turn; prints the wall time of each whole
# run, the step's time and the check's verdict. RANKS (default 1) ranks under mpiexec, one GPU
# each; CASES (default all) names the cases; a run past TIMEOUT seconds (default 300) is cut.
#
#   bench/gpu/check_cost.sh BINARY [BINARY...]
set -uo pipefail
ranks=${RANKS:-1}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)

# case NAME TENSORS STEP: a one-step spec (the step's keys after `op`).
case_spec() {
  local name=$1 tensors=$2 step=$3 check=$4
  printf '[job]\nname = "%s"\n[runtime]\ndevice = "cuda"\n%b\n[[steps]]\n%b\ncheck = %s\nwarmup = 1\niterations = 1\n[output]\ntensors = []\n' \
    "$name" "$tensors" "$step" "$check"
}
t() { # name shape dtype dist [layout]
  printf '[tensors.%s]\nshape = %s\ndtype = "%s"\ndistribution = %s\nlayout = "%s"\ninit = { uniform = { low = -1.0, high = 1.0 } }\n' \
    "$1" "$2" "$3" "$4" "${5:-C}"
}
o() { printf '[tensors.%s]\nshape = %s\ndtype = "%s"\ndistribution = %s\n' "$1" "$2" "$3" "$4"; }

declare -A T S
T[fft_c64_1024]="$(t x '[1024, 1024, 1024]' c64 '{ slab = 0 }')"
S[fft_c64_1024]='op = "fft"\ninput = "x"'
T[fft_r2c_1024]="$(t x '[1024, 1024, 1024]' f32 '{ slab = 0 }')\n$(o y '[1024, 1024, 513]' c64 '{ slab = 1 }')"
S[fft_r2c_1024]='op = "fft"\ninput = "x"\nout = "y"\nkind = "r2c"'
T[fft_c2r_1024]="$(t x '[1024, 1024, 513]' c64 '{ slab = 1 }')\n$(o y '[1024, 1024, 1024]' f32 '{ slab = 0 }')"
S[fft_c2r_1024]='op = "fft"\ninput = "x"\nout = "y"\nkind = "c2r"\ndirection = "inverse"'
T[fft_c128_512]="$(t x '[512, 512, 512]' c128 '{ slab = 0 }')"
S[fft_c128_512]='op = "fft"\ninput = "x"'
T[fft_2d_16384]="$(t x '[16384, 16384]' c64 '{ slab = 0 }')"
S[fft_2d_16384]='op = "fft"\ninput = "x"'
T[mm_f16_16384]="$(t a '[16384, 16384]' f16 '{ slab = 0 }')\n$(t b '[16384, 16384]' f16 '"replicated"')"
S[mm_f16_16384]='op = "matmul"\na = "a"\nb = "b"\nout = "c"'
T[mm_gelu_8192]="$(t a '[8192, 8192]' bf16 '{ slab = 0 }' F)\n$(t b '[8192, 8192]' bf16 '"replicated"')\n$(t bias '[8192]' bf16 '"replicated"')"
S[mm_gelu_8192]='op = "matmul"\na = "a"\nb = "b"\nout = "c"\ntranspose_b = true\nepilog = "gelu_bias"\nbias = "bias"'
T[all_reduce_8192]="$(t x '[8192, 8192]' f32 '"partial"')"
S[all_reduce_8192]='op = "all_reduce"\ninput = "x"\nout = "y"'
T[redistribute_8192]="$(t x '[8192, 8192]' f32 '{ slab = 0 }')"
S[redistribute_8192]='op = "redistribute"\ninput = "x"\nout = "y"\ndistribution = { slab = 1 }\nlayout = "F"'

printf '%-20s %-8s %-6s %10s %12s %s\n' case binary check wall_s step_ms passed
all="fft_c64_1024 fft_r2c_1024 fft_c2r_1024 fft_c128_512 fft_2d_16384 mm_f16_16384 mm_gelu_8192 all_reduce_8192 redistribute_8192"
for name in ${CASES:-$all}; do
  for check in false true; do
    case_spec "$name" "${T[$name]}" "${S[$name]}" "$check" > "$work/$name.toml"
    n=0
    for bin in "$@"; do
      n=$((n + 1))
      rm -rf "$work/run"
      start=$(date +%s.%N)
      if timeout "${TIMEOUT:-300}" mpiexec -n "$ranks" "$(realpath "$bin")" run "$work/$name.toml" --out "$work/run" -q > "$work/log" 2>&1; then
        end=$(date +%s.%N)
        python3 - "$name" "$n" "$check" "$start" "$end" "$work/run/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[6]))
s = m['steps'][0]
passed = (s.get('check') or {}).get('passed', '-')
wall = float(sys.argv[5]) - float(sys.argv[4])
print(f"{sys.argv[1]:<20} {sys.argv[2]:<8} {sys.argv[3]:<6} {wall:10.2f} {s['time_s']['median'] * 1e3:12.3f} {passed}")
PY
      else
        printf '%-20s %-8s %-6s FAILED: %s\n' "$name" "$n" "$check" "$(tail -2 "$work/log" | tr '\n' ' ')"
      fi
    done
  done
done
rm -rf "$work"
