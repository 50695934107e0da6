"""What the one-GPU benchmarks share: running a spec with distrun's one rank and reading its
step back, and timing a cupy call the way distrun's `timing = "queued"` times a step (2 warm-up
runs, then the iterations back to back between one pair of CUDA events, their mean)."""
import argparse
import json
import os
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           NCCL_NVLS_ENABLE="0", NVSHMEM_DISABLE_NVLS="1")


def first_step(binary, text, ranks=1):
    """The manifest record of the first step of the spec `text` run by `binary` (on `ranks`
    ranks under mpiexec, one rank alone), and None; or None and why the run failed: its exit
    status and distrun's error lines (else the last lines it wrote), so that a failure under
    mpiexec says more than mpiexec's banner."""
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "spec.toml"
        path.write_text(text)
        launcher = ["mpiexec", "-n", str(ranks)] if ranks > 1 else []
        run = subprocess.run([*launcher, binary, "run", str(path), "--out", f"{d}/run", "-q"],
                             env=ENV, capture_output=True, text=True)
        if run.returncode != 0:
            lines = (run.stderr + run.stdout).strip().splitlines()
            errors = [l for l in lines if "error" in l.lower()] or lines[-3:]
            return None, f"exit {run.returncode}: " + " / ".join(errors[:4])
        return json.loads((pathlib.Path(d) / "run/manifest.json").read_text())["steps"][0], None


def timed(f, iterations):
    """Seconds per call of `f` (a cupy call), timed as distrun's queued steps are."""
    import cupy as cp
    for _ in range(2):
        f()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iterations):
        f()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3 / iterations


def arguments(cases, iterations=20):
    """The command line the benchmarks share: --bin, --cases (of `cases`), --iterations."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/distrun"))
    ap.add_argument("--cases", nargs="+", default=list(cases))
    ap.add_argument("--iterations", type=int, default=iterations)
    return ap


def multi_gpu_arguments(cases, iterations=10):
    """`arguments` and those of the benchmarks on several GPUs: --ranks, --no-peer (skip the
    peer library), --via (distrun's moves by NCCL; by NVSHMEM puts where they can; with NCCL
    alone and symmetric tensors, by puts into NCCL windows where they can)."""
    ap = arguments(cases, iterations)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--via", nargs="+", default=["nccl", "nvshmem"], choices=["nccl", "nvshmem", "windows"])
    return ap
