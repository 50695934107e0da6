"""Distributed 3-D FFT on GPUs: distrun on P GPUs against nvmath-python's distributed FFT
(cuFFTMp) and beside the single-GPU cuFFT time (cupy.fft.fftn), all in the same command.

    python bench/gpu/fft.py [--bin target/release/distrun] [--ranks 2 4] [--n 1024]
                            [--via nccl nvshmem] [--reshape false true] [--iterations 10]
                            [--timing queued each] [--no-peer]

`--via nccl`: the transposes move by NCCL all-to-all; `nvshmem`: the spec's backends add
nvshmem, and the transpose from x-slabs moves by puts (copy engines) into symmetric buffers.

`--timing queued` (the default) times distrun as the peer is timed: 2 warm-up, then the
iterations back to back between one pair of CUDA events, their mean; `each` times each iteration
alone after a barrier and reports the median and the minimum.

The peer (bench/gpu/nvmath_fft.py) needs the nvmath wheels in .tools/wheels and cuFFTMp
(`nvidia-cufftmp-cu13`, 205 MB) installed beside them; where it cannot run, its column says so.
The targets are against one GPU: P=2 at most the single-GPU time, P=4 at most 0.6x of it.
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


def single_gpu(n):
    import cupy as cp
    x = (cp.random.rand(n, n, n, dtype=cp.float32) + 1j * cp.random.rand(n, n, n, dtype=cp.float32)).astype(cp.complex64)
    for _ in range(2):
        y = cp.fft.fftn(x)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        y = cp.fft.fftn(x)
    cp.cuda.Device().synchronize()
    t = (time.perf_counter() - t0) / 10
    del x, y
    cp.get_default_memory_pool().free_all_blocks()
    cp.fft.config.get_plan_cache().clear()
    return t


def spec(n, reshape, via, iterations=10, timing="queued"):
    backends = '["nccl", "nvshmem"]' if via == "nvshmem" else '["nccl"]'
    return (f'[job]\nname = "bench-fft"\n[runtime]\ndevice = "cuda"\nbackends = {backends}\n'
            f'[tensors.x]\nshape = [{n}, {n}, {n}]\ndtype = "c64"\ndistribution = {{ slab = "x" }}\n'
            'init = { uniform = { low = -1.0, high = 1.0 } }\n'
            f'[[steps]]\nop = "fft"\ninput = "x"\nout = "y"\nreshape = {str(reshape).lower()}\n'
            f'warmup = 2\niterations = {iterations}\ntiming = "{timing}"\n[output]\ntensors = []\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/distrun"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--via", nargs="+", default=["nccl", "nvshmem"], choices=["nccl", "nvshmem"])
    ap.add_argument("--reshape", nargs="+", default=["false", "true"], choices=["false", "true"])
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--timing", nargs="+", default=["queued"], choices=["queued", "each"])
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp())
    one = single_gpu(args.n)
    print(f"single-GPU cupy.fft.fftn c64 {args.n}^3: {one * 1e3:.2f} ms", flush=True)
    print("| GPUs | via | reshape | timing | distrun ms (mean or median) | min | vs one GPU | nvmath ms | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in args.ranks:
        theirs = {} if args.no_peer else nvmath_peer.run(
            "nvmath_fft.py", p, [str(args.n), str(args.iterations), *args.reshape], ENV)
        runs = ((v, r == "true", t) for v in args.via for r in args.reshape for t in args.timing)
        for via, reshape, timing in runs:
            path = work / f"fft-{p}-{via}-{reshape}-{timing}.toml"
            path.write_text(spec(args.n, reshape, via, args.iterations, timing))
            out = work / f"run-{p}-{via}-{reshape}-{timing}"
            r = subprocess.run(["mpiexec", "-n", str(p), args.bin, "run", str(path), "--out", str(out), "-q"],
                               env=ENV, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"| {p} | {via} | {reshape} | {timing} | failed: {r.stderr[-400:]} |")
                continue
            t = json.loads((out / "manifest.json").read_text())["steps"][0]["time_s"]
            peer = theirs.get(str(reshape).lower())
            vs = f" {peer * 1e3:.2f} | {peer / t['median']:.3f}x |" if peer else " - | - |"
            print(f"| {p} | {via} | {str(reshape).lower()} | {timing} | {t['median'] * 1e3:.2f} | {t['min'] * 1e3:.2f} | "
                  f"{t['median'] / one:.2f}x |" + vs, flush=True)


if __name__ == "__main__":
    main()
