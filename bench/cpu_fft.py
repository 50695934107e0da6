#!/usr/bin/env python3
"""distrun's CPU FFT beside numpy.fft.fftn, in the same run on the same machine.

c64 256^3 forward c2c: distrun on one rank (both cores through rayon; reshape = true, so the
result comes back in the input's x-slabs) against numpy.fft.fftn (pocketfft, complex64); then
distrun on 2 ranks (one thread each). Medians over rounds of the median step time.
Run from the repository root after `cargo build --release`: python3 bench/cpu_fft.py
"""
import json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRUN = os.path.join(ROOT, "target", "release", "distrun")
VENV_PY = os.path.join(ROOT, ".tools", "venv", "bin", "python")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
SPEC = """
[job]
name = "bench-fft"
[tensors.x]
shape = [256, 256, 256]
dtype = "c64"
distribution = { slab = 0 }
init = { uniform = { low = -1.0, high = 1.0 } }
[[steps]]
op = "fft"
input = "x"
out = "y"
warmup = 1
iterations = 5
"""
NUMPY = """
import time, numpy as np
x = (np.random.default_rng(1).random((256, 256, 256)) - 0.5).astype(np.complex64)
np.fft.fftn(x)
ts = []
for _ in range(5):
    t0 = time.perf_counter(); y = np.fft.fftn(x); ts.append(time.perf_counter() - t0)
assert y.dtype == np.complex64
print(sorted(ts)[2])
"""


def distrun(ranks, tmp, threads=None):
    spec = os.path.join(tmp, "fft.toml")
    with open(spec, "w") as f:
        f.write(SPEC)
    out = os.path.join(tmp, f"run-{time.monotonic_ns()}")
    env = dict(ENV)
    if threads:
        env["RAYON_NUM_THREADS"] = str(threads)
    cmd = [DISTRUN, "run", spec, "--out", out, "-q"]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks)] + cmd
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)["steps"][0]["time_s"]["median"]


def main():
    if not os.path.exists(DISTRUN):
        sys.exit("build first: cargo build --release")
    with tempfile.TemporaryDirectory() as tmp:
        d = statistics.median(distrun(1, tmp) for _ in range(3))
        p = statistics.median(float(subprocess.run([VENV_PY, "-c", NUMPY], capture_output=True, text=True,
                                                   check=True).stdout) for _ in range(3))
        d1 = statistics.median(distrun(1, tmp, threads=1) for _ in range(3))
        d2 = statistics.median(distrun(2, tmp, threads=1) for _ in range(3))
        print(f"c64 256^3 fft, 1 rank x {os.cpu_count()} threads: distrun {d*1e3:.1f} ms, numpy.fft.fftn "
              f"{p*1e3:.1f} ms: distrun speed {p/d:.2f}x (target >= 1.0x)")
        print(f"c64 256^3 fft, 1 rank x 1 thread (numpy's pocketfft uses one): distrun {d1*1e3:.1f} ms: "
              f"{p/d1:.2f}x numpy")
        print(f"c64 256^3 fft, 2 ranks x 1 thread: distrun {d2*1e3:.1f} ms ({d2/d:.2f}x the time of 1 rank)")


if __name__ == "__main__":
    main()
