"""What the one-GPU benchmarks share: running a spec with distrun's one rank and reading its
step back, and timing a cupy call the way distrun's `timing = "queued"` times a step (2 warm-up
runs, then the iterations back to back between one pair of CUDA events, their mean)."""
import argparse
import json
import math
import os
import pathlib
import random
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
    """The command line the benchmarks share: --bin, --cases (of `cases`), --iterations, and
    --sample N / --seed S (N cases drawn at random instead, see `chosen`)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/distrun"))
    ap.add_argument("--cases", nargs="+", default=list(cases))
    ap.add_argument("--iterations", type=int, default=iterations)
    ap.add_argument("--sample", type=int, metavar="N",
                    help="N cases drawn at random (by the script's `draw`) in place of --cases")
    ap.add_argument("--seed", type=int, default=1, help="the seed of --sample's draws")
    return ap


def chosen(a, draw):
    """The case names to run: --cases, or with --sample N, N names drawn by `draw(rng)` from a
    random.Random seeded with --seed (the same seed draws the same cases)."""
    if not a.sample:
        return a.cases
    rng = random.Random(a.seed)
    return [draw(rng) for _ in range(a.sample)]


def dims(rng, ndim, total, odd=0.5, short=0.15):
    """`ndim` sizes whose product is about `total`, split at random (log-uniform shares), each
    a power of two or, with chance `odd`, any integer (odd and prime sizes included); each axis
    with chance `short` is short instead (1 to 8): a sample then mixes the shapes libraries like
    with those they do not, skinny and tiny axes included."""
    sizes = [rng.randint(1, 8) if rng.random() < short else 0 for _ in range(ndim)]
    long = [i for i, n in enumerate(sizes) if n == 0] or [0]
    left = math.log(total / math.prod(n for n in sizes if n))
    shares = [rng.random() + 0.1 for _ in long]
    for i, w in zip(long, shares):
        n = math.exp(left * w / sum(shares))
        sizes[i] = max(1, int(n) if rng.random() < odd else 1 << round(math.log2(n)))
    return sizes


def within(sizes, most):
    """`sizes` with the largest halved (rounding up) until their product is at most `most`."""
    sizes = list(sizes)
    while math.prod(sizes) > most and max(sizes) > 1:
        i = sizes.index(max(sizes))
        sizes[i] = (sizes[i] + 1) // 2
    return sizes


def log_uniform(rng, low, high):
    """A value drawn log-uniform in [low, high]."""
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def slowest(rows, target=0.95, unit="x", of=""):
    """A closing line over `rows` of (case, figure): how many (`of` what) fell below `target`,
    and which; speeds against the peer in "x", fractions of a ceiling in "%"."""
    shown = (lambda v: f"{v:.2f}x") if unit == "x" else (lambda v: f"{v:.0f}%")
    below = [f"{name} {shown(v)}" for name, v in rows if v < target]
    print(f"{len(rows)} cases{of}, {len(below)} below {shown(target)}" +
          (": " + ", ".join(below) if below else ""), flush=True)


def multi_gpu_arguments(cases, iterations=10):
    """`arguments` and those of the benchmarks on several GPUs: --ranks, --no-peer (skip the
    peer library), --via (distrun's moves by NCCL; by NVSHMEM puts where they can; with NCCL
    alone and symmetric tensors, by puts into NCCL windows where they can)."""
    ap = arguments(cases, iterations)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--via", nargs="+", default=["nccl", "nvshmem"], choices=["nccl", "nvshmem", "windows"])
    return ap
