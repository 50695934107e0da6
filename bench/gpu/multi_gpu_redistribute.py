"""Redistributions on several GPUs: distrun's `redistribute` between slabs and pencils on P GPUs
against nvmath-python's distributed reshape (cuFFTMp's reshape through NVSHMEM, the same boxes
on the symmetric heap), in the same command; and to and from 2-D block-cyclic, and with a change
between C and F order, which the peer does not take (its column says `-`).

    python bench/gpu/multi_gpu_redistribute.py [--bin target/release/distrun] [--ranks 2 4]
                                               [--cases f32-2d-16384-xy ...] [--iterations 10]
                                               [--no-peer] [--via nccl nvshmem]

Both are timed alike: 2 warm-up runs, then the iterations back to back, their mean (distrun's
`timing = "queued"`; its step checked as well, outside the timing). distrun runs once per
`--via`: `nccl` (the default backends: its exchange by NCCL) and `nvshmem` (`backends = ["nccl",
"nvshmem"]`, both tensors `symmetric = true` as the peer's are: by puts where its trials find
them faster, as the peer's go; the manifest's `via` says which) and `windows` (the default
backends, both tensors symmetric: by puts into NCCL windows where the trials find them
faster). Prints one row per
case and rank count: distrun's time, the peer's, distrun's speed against it (>= 1.0 is the
target) and the bandwidth each rank's share of the data moved at (its piece, read and written
once: the data that leaves the rank and the data that stays).
"""
import math

import nvmath_peer
from multi_gpu_fft import pencils
from one_gpu import ENV, first_step, multi_gpu_arguments

# name: (dtype, global shape, from, to): a slab axis, "pencils" (boxes over a 2 x P/2 grid), or
# a distribution as the spec writes it
CASES = {
    "f32-2d-16384-xy": ("f32", [16384, 16384], 0, 1),
    "f64-2d-12289-xy": ("f64", [12289, 12289], 0, 1),
    "c64-3d-1024-xy": ("c64", [1024, 1024, 1024], 0, 1),
    "c128-3d-512-xz": ("c128", [512, 512, 512], 0, 2),
    "c64-3d-1024-pencils-x": ("c64", [1024, 1024, 512], "pencils", 0),
    "f32-3d-1000-yx": ("f32", [1000, 1000, 1000], 1, 0),
    # Pieces of rows of a few hundred elements (on 3 ranks, 333 and 334: off 16-byte words)
    "f32-2d-300000x1000-xy": ("f32", [300000, 1000], 0, 1),
    "f16-2d-200000x1001-xy": ("f16", [200000, 1001], 0, 1),
    # To and from 2-D block-cyclic (the process grid distrun picks; no peer: nvmath's reshape
    # takes boxes)
    "f64-2d-8192-x-bc64": ("f64", [8192, 8192], 0, "{ block_cyclic = { blocks = [64, 64] } }"),
    "f16-2d-16384-bc128-x": ("f16", [16384, 16384], "{ block_cyclic = { blocks = [128, 128] } }", 0),
    # Slab to slab and C to F order at once, along a short first axis (its lines 4 of 7 on each
    # of 2 ranks; no peer: nvmath's reshape keeps the layout)
    "f32-3d-7x2049x4097-xy-cf": ("f32", [7, 2049, 4097], 0, 1),
    "f16-3d-5x3000x4001-xz-cf": ("f16", [5, 3000, 4001], 0, 2),
    "f16-3d-7x2049x4097-xy-cf": ("f16", [7, 2049, 4097], 0, 1),
}
# The layouts (from, to) of the cases that change them; C to C for the rest.
LAYOUTS = {name: ("C", "F") for name in CASES if name.endswith("-cf")}
SIZE = {"f16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}


def distribution(where, shape, p):
    """A slab axis, `pencils`, or a distribution written out."""
    if str(where).startswith("{"):
        return where
    return pencils(shape, p) if where == "pencils" else f"{{ slab = {where} }}"


def peer_takes(name):
    """Whether nvmath's reshape does what case `name` does: boxes to boxes, one layout."""
    _, _, src, dst = CASES[name]
    return name not in LAYOUTS and not any(str(w).startswith("{") for w in (src, dst))


def spec(name, p, via, iterations):
    """The one-step spec of case `name` on p ranks, its exchange `via` NCCL or puts."""
    dtype, shape, src, dst = CASES[name]
    layout_from, layout_to = LAYOUTS.get(name, ("C", "C"))
    backends, symmetric, y = "", "", ""
    if via == "nvshmem":
        backends = '\nbackends = ["nccl", "nvshmem"]'
    if via in ("nvshmem", "windows"):
        symmetric = "symmetric = true\n"
        y = f'[tensors.y]\nshape = {shape}\ndtype = "{dtype}"\nlayout = "{layout_to}"\nsymmetric = true\n'
    return f"""[job]
name = "multi-gpu-redistribute"
[runtime]
device = "cuda"{backends}
[tensors.x]
shape = {shape}
dtype = "{dtype}"
layout = "{layout_from}"
distribution = {distribution(src, shape, p)}
init = {{ uniform = {{ low = -1.0, high = 1.0 }} }}
{symmetric}{y}[[steps]]
op = "redistribute"
input = "x"
out = "y"
distribution = {distribution(dst, shape, p)}
layout = "{layout_to}"
check = true
warmup = 2
iterations = {iterations}
timing = "queued"
[output]
tensors = []
"""


def main():
    a = multi_gpu_arguments(CASES).parse_args()
    print("| case | GPUs | via | distrun ms | check | nvmath reshape ms | distrun speed vs nvmath | GB/s a rank |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in a.ranks:
        peer_cases = [f"{n}:{CASES[n][0]}:{'x'.join(map(str, CASES[n][1]))}:{CASES[n][2]}:{CASES[n][3]}"
                      for n in a.cases if peer_takes(n)]
        theirs = {} if a.no_peer else nvmath_peer.run(
            "nvmath_reshape_cases.py", p, [str(a.iterations), *peer_cases], ENV)
        for name, via in ((n, v) for n in a.cases for v in a.via):
            dtype, shape, _, _ = CASES[name]
            step, err = first_step(a.bin, spec(name, p, via, a.iterations), p)
            if step is None:
                print(f"| {name} | {p} | {via} | failed: {err} | | | | |", flush=True)
                continue
            t = step["time_s"]["median"]
            piece = SIZE[dtype] * math.prod(shape) / p
            peer = theirs.get(name)
            vs = f"{peer * 1e3:.3f} | {peer / t:.2f}x" if peer else "- | -"
            went = f" ({step['via']})" if step.get("via") else ""
            print(f"| {name} | {p} | {via}{went} | {t * 1e3:.3f} | {step['check']['passed']} | {vs} | "
                  f"{piece / t / 1e9:.0f} |", flush=True)


if __name__ == "__main__":
    main()
