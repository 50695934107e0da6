#!/usr/bin/env python3
"""distrun's CPU matmul beside numpy.matmul (OpenBLAS), in the same run on the same machine.

- One rank, f64 and f32, 2048^3: distrun's step time (median of 5 after a warm-up) against
  numpy.matmul on the same shapes with the same thread count (all cores).
- 2 ranks on 2 cores (one thread each, row slabs times a replicated b: no communication in the
  step) against 1 rank on 2 threads.
- The FLOP rate against the machine's peak (AVX-512: 2 FMA pipes x 8 f64 lanes x 2 flops per
  cycle per core at the nominal clock; twice that for f32).

Run from the repository root after `cargo build --release`: python3 bench/cpu_matmul.py
"""
import json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRUN = os.path.join(ROOT, "target", "release", "distrun")
VENV_PY = os.path.join(ROOT, ".tools", "venv", "bin", "python")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
N = 2048

SPEC = """
[job]
name = "bench-matmul-{dtype}"
[tensors.a]
shape = [{n}, {n}]
dtype = "{dtype}"
distribution = {{ slab = 0 }}
init = {{ uniform = {{}} }}
[tensors.b]
shape = [{n}, {n}]
dtype = "{dtype}"
init = {{ uniform = {{}} }}
[[steps]]
op = "matmul"
a = "a"
b = "b"
out = "c"
warmup = 1
iterations = 5
"""

NUMPY = """
import time, numpy as np
a = np.random.default_rng(1).random(({n}, {n})).astype(np.{dtype})
b = np.random.default_rng(2).random(({n}, {n})).astype(np.{dtype})
a @ b
ts = []
for _ in range(5):
    t0 = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t0)
print(sorted(ts)[2])
"""


def distrun(ranks, dtype, tmp, threads=None):
    spec = os.path.join(tmp, f"mm-{dtype}.toml")
    with open(spec, "w") as f:
        f.write(SPEC.format(n=N, dtype=dtype))
    out = os.path.join(tmp, f"run-{time.monotonic_ns()}")
    env = dict(ENV)
    if threads:
        env["RAYON_NUM_THREADS"] = str(threads)
    cmd = [DISTRUN, "run", spec, "--out", out, "-q"]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), "--bind-to", "core"] + cmd
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)["steps"][0]["time_s"]["median"]


def numpy(dtype):
    r = subprocess.run([VENV_PY, "-c", NUMPY.format(n=N, dtype=dtype)], capture_output=True, text=True, check=True)
    return float(r.stdout)


def peak_gflops(dtype):
    mhz = 0.0
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                mhz = float(line.split(":")[1])
                break
    lanes = 8 if dtype == "float64" else 16
    return os.cpu_count() * mhz / 1e3 * 2 * lanes * 2


def main():
    if not os.path.exists(DISTRUN):
        sys.exit("build first: cargo build --release")
    if subprocess.run([VENV_PY, "-c", "import numpy"], capture_output=True).returncode != 0:
        subprocess.run([VENV_PY, "-m", "pip", "install", "-q", "numpy"], check=True)
    flops = 2 * N ** 3
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, npname in [("f64", "float64"), ("f32", "float32")]:
            d = statistics.median(distrun(1, dtype, tmp) for _ in range(3))
            p = statistics.median(numpy(npname) for _ in range(3))
            d2 = statistics.median(distrun(2, dtype, tmp, threads=1) for _ in range(3))
            peak = peak_gflops(npname)
            print(f"{dtype} {N}^3, 1 rank x {os.cpu_count()} threads: distrun {d*1e3:.1f} ms "
                  f"({flops/d/1e9:.1f} GFLOP/s, {flops/d/1e9/peak*100:.0f}% of {peak:.0f} peak), "
                  f"numpy {p*1e3:.1f} ms ({flops/p/1e9:.1f} GFLOP/s): distrun/numpy speed {p/d:.2f}x "
                  f"(target >= 0.8x)")
            print(f"{dtype} {N}^3, 2 ranks x 1 thread: distrun {d2*1e3:.1f} ms ({flops/d2/1e9:.1f} GFLOP/s), "
                  f"{d2/d:.2f}x the time of 1 rank x 2 threads")


if __name__ == "__main__":
    main()
