"""FFTs of every kind on several GPUs: distrun on P GPUs against nvmath-python's distributed FFT
(cuFFTMp: c2c, r2c and c2r, either precision, 2-D and 3-D, x- or y-slabs or pencils) and beside
one GPU's cuFFT (cupy.fft.fftn / rfftn / irfftn on the whole array), in the same command.

    python bench/gpu/multi_gpu_fft.py [--bin target/release/distrun] [--ranks 2 4]
                                      [--cases c2c-c64-1024 ...] [--iterations 10] [--no-peer]
                                      [--via nccl nvshmem]

All are timed alike: 2 warm-up runs, then the iterations back to back, their mean (distrun's
`timing = "queued"`). distrun's input is in slabs along axis 0 (x) or 1 (y), its result where
the FFT leaves it (`reshape = false`, as cuFFTMp's default), or in pencils (boxes splitting the
first two axes over a 2 x P/2 grid; the result in the same boxes); the peer is given the same.
All three compute the same unscaled transforms: nvmath-python's distributed FFT applies no
norm, so the c2r runs with `norm = "none"` in distrun and numpy's "forward" in cupy (since the
fifth session of 2026-11-26; before, distrun's and cupy's c2r scaled the result by 1/n, a pass
over it that the peer skipped).
distrun runs once per `--via`: `nccl` (the default backends: its moves by NCCL) and `nvshmem`
(`backends = ["nccl", "nvshmem"]`: its moves by puts where its trials find them faster, as
cuFFTMp's go through NVSHMEM).
Prints one row per case and rank count: distrun's time, its speed against the peer (the
peer's time over distrun's, >= 1.0 is the target) and against one GPU.
"""
import nvmath_peer
from one_gpu import ENV, first_step, multi_gpu_arguments
from one_gpu_fft import cupy_time, spec

# name: (kind, input dtype, input shape, slab axis of the input or "pencils")
CASES = {
    "c2c-c64-1024": ("c2c", "c64", [1024, 1024, 1024], 0),
    "c2c-c64-1024-y": ("c2c", "c64", [1024, 1024, 1024], 1),
    "c2c-c64-768": ("c2c", "c64", [768, 768, 768], 0),
    "c2c-c64-1000": ("c2c", "c64", [1000, 1000, 1000], 0),
    "c2c-c128-512": ("c2c", "c128", [512, 512, 512], 0),
    "c2c-c64-2d-16384": ("c2c", "c64", [16384, 16384], 0),
    "c2c-c64-2d-16384-y": ("c2c", "c64", [16384, 16384], 1),
    "c2c-c128-2d-8192": ("c2c", "c128", [8192, 8192], 0),
    "c2c-c128-2d-8192-y": ("c2c", "c128", [8192, 8192], 1),
    "c2r-c64-2d-16384": ("c2r", "c64", [16384, 8193], 1),
    "r2c-f32-1024": ("r2c", "f32", [1024, 1024, 1024], 0),
    "c2r-c64-1024": ("c2r", "c64", [1024, 1024, 513], 1),
    "c2c-c64-1024-pencils": ("c2c", "c64", [1024, 1024, 1024], "pencils"),
    "c2c-c128-768-pencils": ("c2c", "c128", [768, 768, 768], "pencils"),
    # Sizes nobody tuned for: odd (uneven slabs), and an odd 2-D transform.
    "c2c-c64-1001": ("c2c", "c64", [1001, 1001, 1001], 0),
    "c2c-c64-2d-12289": ("c2c", "c64", [12289, 12289], 0),
    "r2c-f32-1000": ("r2c", "f32", [1000, 1000, 1000], 0),
}


def pencils(shape, p):
    """The boxes splitting the first two axes of `shape` over a grid of p ranks (2 x p/2, or p x
    1), rank r at (r % 2, r // 2): the distribution nvmath_fft_cases.py gives the peer."""
    grid = (2, p // 2) if p % 2 == 0 and p > 2 else (p, 1)
    boxes = []
    for r in range(p):
        lo, hi = [0] * len(shape), list(shape)
        for a, (g, i) in enumerate(zip(grid, (r % grid[0], r // grid[0]))):
            lo[a], hi[a] = shape[a] * i // g, shape[a] * (i + 1) // g
        boxes.append(f"[{lo}, {hi}]")
    return "{ boxes = [" + ", ".join(boxes) + "] }"


def distrun_spec(name, p, via, iterations):
    """The one-step spec of case `name` on p ranks, its moves `via` NCCL or puts."""
    kind, dtype, shape, where = CASES[name]
    if where == "pencils":
        text = spec(kind, dtype, shape, "C", iterations, 0, None)
        text = text.replace("distribution = { slab = 0 }", f"distribution = {pencils(shape, p)}")
    else:
        text = spec(kind, dtype, shape, "C", iterations, where, False)
    if via == "nvshmem":
        text = text.replace('device = "cuda"\n', 'device = "cuda"\nbackends = ["nccl", "nvshmem"]\n')
    if kind == "c2r":
        text = text.replace('kind = "c2r"\n', 'kind = "c2r"\nnorm = "none"\n')
    return text


def main():
    a = multi_gpu_arguments(CASES).parse_args()
    one = {}
    for name in a.cases:
        kind, dtype, shape, _ = CASES[name]
        one[name] = cupy_time(kind, dtype, shape, "C", a.iterations, norm="forward")
    print("| case | GPUs | via | distrun ms | nvmath (cuFFTMp) ms | distrun speed vs nvmath | one GPU (cupy) ms | distrun vs one GPU |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in a.ranks:
        peer_cases = [f"{n}:{CASES[n][0]}:{CASES[n][1]}:{'x'.join(map(str, CASES[n][2]))}:{CASES[n][3]}"
                      for n in a.cases]
        theirs = {} if a.no_peer or not peer_cases else nvmath_peer.run(
            "nvmath_fft_cases.py", p, [str(a.iterations), *peer_cases], ENV)
        for name, via in ((n, v) for n in a.cases for v in a.via):
            step, err = first_step(a.bin, distrun_spec(name, p, via, a.iterations), p)
            if step is None:
                print(f"| {name} | {p} | {via} | failed: {err} | | | | |", flush=True)
                continue
            t = step["time_s"]["median"]
            peer = theirs.get(name)
            vs = f"{peer * 1e3:.2f} | {peer / t:.2f}x" if peer else "- | -"
            print(f"| {name} | {p} | {via} | {t * 1e3:.2f} | {vs} | {one[name] * 1e3:.2f} | {one[name] / t:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
