"""Runs an nvmath-python peer script (nvmath_matmul.py, nvmath_fft.py) under mpiexec and reads
its `CASE <name> <seconds>` lines; the scripts time their runs with `queued`. The nvmath wheels
in .tools/wheels (nvmath-python, cuda-core, cuBLASMp; cuFFTMp for the FFT) are installed into a
temporary directory for the peer only.
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SITE = pathlib.Path(tempfile.gettempdir()) / "nvmath-site"


def env(base):
    """`base` with the peer's site and libraries (cuBLASMp, cuFFTMp, and the venv's NCCL, NVSHMEM
    and CUDA) on the paths, installing the wheels on first use."""
    if not SITE.exists():
        wheels = sorted(str(w) for w in (ROOT / ".tools/wheels").glob("*.whl"))
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--target", str(SITE), *wheels], check=True)
    venv = pathlib.Path(sys.executable).resolve().parents[1] / "lib/python3.12/site-packages/nvidia"
    libs = [SITE / "nvidia/cublasmp/cu13/lib", SITE / "nvidia/cufftmp/cu13/lib",
            venv / "nccl/lib", venv / "nvshmem/lib", venv / "cu13/lib"]
    return dict(base, PYTHONPATH=str(SITE),
                LD_LIBRARY_PATH=":".join(map(str, libs)) + ":" + os.environ.get("LD_LIBRARY_PATH", ""))


def run(script, ranks, args, base_env):
    """Seconds per case name from `script` on `ranks` GPUs; failures are printed, not raised."""
    r = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, str(ROOT / "bench/gpu" / script), *args],
                       env=env(base_env), capture_output=True, text=True)
    times = {m[1]: float(m[2]) for m in re.finditer(r"^CASE (\S+) (\S+)$", r.stdout, re.M)}
    for m in re.finditer(r"^FAIL (\S+) (.*)$", r.stdout, re.M):
        print(f"peer failed on {m[1]}: {m[2]}")
    if r.returncode != 0 and not times:
        print("peer failed:", r.stderr[-800:])
    return times


def queued(execute, warmup, comm, sync, iterations=10):
    """Seconds per run of `execute`, as distrun's `timing = "queued"`: `warmup` runs, then
    `iterations` back to back between two synchronisations (`sync`, then `comm`'s barrier), the
    mean."""
    for _ in range(warmup):
        execute()
    sync()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iterations):
        execute()
    sync()
    comm.Barrier()
    return (time.perf_counter() - t0) / iterations
