"""Distributed matmul on GPUs: distrun against nvmath-python 0.8 (cuBLASMp 0.7) in the same
command, and both against the limit (P x the single-GPU cuBLAS rate, measured here with cupy).

    python bench/gpu/matmul.py [--bin target/release/distrun] [--ranks 2 4] [--cases ...]
                               [--pipeline auto rounds whole] [--timing queued each]

Needs the nvmath wheels in .tools/wheels (see bench/RESULTS.md); they are installed into a
temporary directory for the peer only. Prints one table row per case and rank count.
"""
import argparse
import json
import os
import pathlib
import subprocess
import tempfile
import time

import nvmath_peer

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           NCCL_NVLS_ENABLE="0", NVSHMEM_DISABLE_NVLS="1")
# How distrun's step is timed: `queued` as the peer is (one warm-up, then 10 runs back to back,
# their mean); `each` the step's own way (3 warm-up, each of 10 runs alone, the median).
TIMING = {"queued": 'warmup = 1\niterations = 10\ntiming = "queued"\n',
          "each": "warmup = 3\niterations = 10\n"}
# name: (dtype, n, kind, rank counts)
CASES = {
    "f16-16384-slab": ("f16", 16384, "slab", (2, 4)),
    "f16-32768-slab": ("f16", 32768, "slab", (2, 4)),
    "f32-8192-slab": ("f32", 8192, "slab", (2, 4)),
    "f16-16384-bc2048": ("f16", 16384, "bc2048", (4,)),
    "f16-16384-block": ("f16", 16384, "block", (4,)),
    # Sizes nobody tuned for: not powers of two, blocks not powers of two.
    "f16-12000-slab": ("f16", 12000, "slab", (2, 4)),
    "f32-10000-slab": ("f32", 10000, "slab", (2, 4)),
    "f16-12000-bc1000": ("f16", 12000, "bc1000", (4,)),
}


def spec(dtype, n, kind, via, pipeline="auto", timing="queued"):
    init = 'init = { uniform = { low = 0.0, high = 1.0 } }'
    if kind == "slab":
        dists, tr = ['{ slab = "y" }', '{ slab = "y" }', '{ slab = "x" }'], "transpose_a = true\n"
    else:
        d = "{ block = {} }" if kind == "block" else f"{{ block_cyclic = {{ blocks = [{kind[2:]}, {kind[2:]}] }} }}"
        dists, tr = [d, d, d], 'algorithm = "summa"\n'
    t = "".join(
        f'[tensors.{x}]\nshape = [{n}, {n}]\ndtype = "{dtype}"\nlayout = "F"\ndistribution = {dist}\n'
        + (init + "\n" if x != "d" else "")
        for x, dist in zip("abd", dists))
    backends = '["nccl", "nvshmem"]' if via == "nvshmem" else '["nccl"]'
    return (f'[job]\nname = "bench-matmul"\n[runtime]\ndevice = "cuda"\nbackends = {backends}\n{t}'
            f'[[steps]]\nop = "matmul"\na = "a"\nb = "b"\nout = "d"\n{tr}pipeline = "{pipeline}"\n'
            f'{TIMING[timing]}'
            "[output]\ntensors = []\n")


def distrun(binary, p, dtype, n, kind, via, pipeline, timing, work):
    path = work / f"{dtype}-{n}-{kind}-{p}-{via}-{pipeline}-{timing}.toml"
    path.write_text(spec(dtype, n, kind, via, pipeline, timing))
    out = pathlib.Path(tempfile.mkdtemp(prefix=f"run-{path.stem}-", dir=work)) / "run"
    r = subprocess.run(["mpiexec", "-n", str(p), binary, "run", str(path), "--out", str(out), "-q"],
                       env=ENV, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr[-500:]
    step = json.loads((out / "manifest.json").read_text())["steps"][0]
    how = step.get("algorithm")
    pipe = step.get("pipeline")
    if pipe:
        how += f" in {pipe['chosen']}"
        if "rounds_s" in pipe:
            how += f" (trials: rounds {pipe['rounds_s'] * 1e3:.2f}, whole {pipe['whole_s'] * 1e3:.2f} ms)"
    return step["time_s"]["median"], how + ("" if timing == "queued" else f", timed {timing}")


def single_gpu_rate(dtype, n):
    import cupy as cp
    dt = {"f16": cp.float16, "f32": cp.float32, "f64": cp.float64}[dtype]
    a = cp.random.rand(n, n).astype(dt)
    b = cp.random.rand(n, n).astype(dt)
    for _ in range(3):
        a @ b
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        a @ b
    cp.cuda.Device().synchronize()
    t = (time.perf_counter() - t0) / 10
    del a, b
    cp.get_default_memory_pool().free_all_blocks()
    return 2 * n**3 / t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/distrun"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--via", nargs="+", default=["nccl", "nvshmem"],
                    help="data movement: NCCL exchanges, or NVSHMEM puts")
    ap.add_argument("--pipeline", nargs="+", default=["auto"],
                    help="how a gathered operand travels: trials choose, or pinned to rounds or whole")
    ap.add_argument("--timing", nargs="+", default=["queued"], choices=list(TIMING),
                    help="queued: as the peer is timed; each: distrun's default")
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp())
    limits = {}
    for name in args.cases:
        d, n, _, _ = CASES[name]
        key = (d, min(n, 16384))
        if key not in limits:
            limits[key] = single_gpu_rate(*key)
            print(f"single-GPU cuBLAS {d} {key[1]}^3: {limits[key] / 1e12:.1f} TFLOP/s", flush=True)
    print("| case | GPUs | moves by | algorithm | distrun ms | TFLOP/s | nvmath ms | TFLOP/s | ratio | of limit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in args.ranks:
        cases = [(c, CASES[c]) for c in args.cases if p in CASES[c][3]]
        if not cases:
            continue
        theirs = {} if args.no_peer else nvmath_peer.run(
            "nvmath_matmul.py", p, [f"{c}:{d}:{n}:{k}" for c, (d, n, k, _) in cases], ENV)
        runs = ((c, v, w, t) for c in cases for v in args.via for w in args.pipeline for t in args.timing)
        for (name, (d, n, kind, _)), via, pipeline, timing in runs:
            t, alg = distrun(args.bin, p, d, n, kind, via, pipeline, timing, work)
            flops = 2 * n**3
            if t is None:
                print(f"| {name} | {p} | {via} | failed: {alg} |")
                continue
            limit = p * limits[(d, min(n, 16384))]
            row = f"| {name} | {p} | {via} | {alg} | {t * 1e3:.2f} | {flops / t / 1e12:.0f} |"
            if name in theirs:
                row += f" {theirs[name] * 1e3:.2f} | {flops / theirs[name] / 1e12:.0f} | {theirs[name] / t:.3f}x |"
            else:
                row += " - | - | - |"
            print(row + f" {flops / t / limit:.0%} |", flush=True)


if __name__ == "__main__":
    main()
