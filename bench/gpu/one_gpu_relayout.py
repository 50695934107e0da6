"""Changes of layout on one GPU: distrun's redistribute from C to F order (and back) with one
rank, checked, against cupy's copy into the other order (cupy.asfortranarray /
cupy.ascontiguousarray) on the same array, in the same command; and the GPU's copy bandwidth
(a contiguous device-to-device copy of the same bytes) as the ceiling.

    python bench/gpu/one_gpu_relayout.py [--bin target/release/distrun] [--iterations 20]
        [--cases f16-8191x12289-C-F u8-2049x1023x255-F-C ...] [--sample N [--seed S]]

distrun is timed as its steps are with `timing = "queued"` (2 warm-up runs, then the
iterations back to back between one pair of CUDA events, their mean); cupy the same way.
Prints each case's times, distrun's speed against cupy, and the fraction of the copy bandwidth
it reaches (read and write counted once each, as a copy's). Where both orders are alike (axes of
one), cupy returns its input and copies nothing: its time is then the copy's. The last lines
name the cases below 0.95x cupy, and those of 64 MiB or more below 80% of the copy bandwidth.
"""
import pathlib
import tempfile

from one_gpu import arguments, chosen, dims, first_step, log_uniform, slowest, timed, within

# name: (dtype, shape, from layout, to layout)
CASES = {
    "f32-16384x16384-C-F": ("f32", [16384, 16384], "C", "F"),
    "f32-16384x16384-F-C": ("f32", [16384, 16384], "F", "C"),
    "f16-8192x12288-C-F": ("f16", [8192, 12288], "C", "F"),
    "f64-4096x5000-C-F": ("f64", [4096, 5000], "C", "F"),
    "c128-4096x4096-C-F": ("c128", [4096, 4096], "C", "F"),
    "c64-512x512x512-C-F": ("c64", [512, 512, 512], "C", "F"),
    "u8-16384x16384-C-F": ("u8", [16384, 16384], "C", "F"),
    "u8-16384x16384-F-C": ("u8", [16384, 16384], "F", "C"),
    "f16-8192x12288-F-C": ("f16", [8192, 12288], "F", "C"),
    "f32-256x512x1024-C-F": ("f32", [256, 512, 1024], "C", "F"),
    "f16-256x512x1024-C-F": ("f16", [256, 512, 1024], "C", "F"),
    "u8-3001x4097-C-F": ("u8", [3001, 4097], "C", "F"),
    "f16-1000x77x131-C-F": ("f16", [1000, 77, 131], "C", "F"),
    "f32-3000x4098-C-F": ("f32", [3000, 4098], "C", "F"),
    "u8-1000x4100-F-C": ("u8", [1000, 4100], "F", "C"),
    "f16-998x1002-C-F": ("f16", [998, 1002], "C", "F"),
    "f32-255x257x33-C-F": ("f32", [255, 257, 33], "C", "F"),
    "u8-1004x2052-C-F": ("u8", [1004, 2052], "C", "F"),
    "f16-130x3002-F-C": ("f16", [130, 3002], "F", "C"),
    "u8-64x96x200-C-F": ("u8", [64, 96, 200], "C", "F"),
    # Large, lines of odd length on both sides (no line but the first starts on a word).
    "u8-16385x16383-C-F": ("u8", [16385, 16383], "C", "F"),
    "f16-8191x12289-C-F": ("f16", [8191, 12289], "C", "F"),
    "f32-8191x8193-C-F": ("f32", [8191, 8193], "C", "F"),
    "f64-4097x5001-C-F": ("f64", [4097, 5001], "C", "F"),
    "u8-16385x16383-F-C": ("u8", [16385, 16383], "F", "C"),
    "f16-8191x12289-F-C": ("f16", [8191, 12289], "F", "C"),
    "f16-1023x511x257-C-F": ("f16", [1023, 511, 257], "C", "F"),
    # Large three-axis reversals with few lines or short ones a grid (their grids swept as one).
    "f16-257x511x1023-C-F": ("f16", [257, 511, 1023], "C", "F"),
    "u8-129x1023x2049-C-F": ("u8", [129, 1023, 2049], "C", "F"),
    "u8-2049x1023x129-C-F": ("u8", [2049, 1023, 129], "C", "F"),
    "u8-333x1001x101-F-C": ("u8", [333, 1001, 101], "F", "C"),
    # Reversals whose grids have very few lines (tiles of 32 words would stand mostly empty).
    "f32-7x2049x4097-C-F": ("f32", [7, 2049, 4097], "C", "F"),
    "u8-8x2048x4096-F-C": ("u8", [8, 2048, 4096], "F", "C"),
    "f16-4x4096x4100-C-F": ("f16", [4, 4096, 4100], "C", "F"),
    # Few long lines to F order (9-17 bands of lines).
    "f16-1023x131327-C-F": ("f16", [1023, 131327], "C", "F"),
    "u8-2049x131967-C-F": ("u8", [2049, 131967], "C", "F"),
    # A short axis packed on one side (lines of 2-63 elements one after another).
    "u8-7x4000000-C-F": ("u8", [7, 4000000], "C", "F"),
    "u8-7x4000000-F-C": ("u8", [7, 4000000], "F", "C"),
    "u8-60x500000-C-F": ("u8", [60, 500000], "C", "F"),
    "f16-3x5000000-F-C": ("f16", [3, 5000000], "F", "C"),
    "f16-1000000x9-C-F": ("f16", [1000000, 9], "C", "F"),
    "f32-7x2000000-C-F": ("f32", [7, 2000000], "C", "F"),
    "f64-5x1000000-C-F": ("f64", [5, 1000000], "C", "F"),
    "c128-12x300000-C-F": ("c128", [12, 300000], "C", "F"),
    # Four and five axes: grids nested in levels (copy_nested), short axes at the ends folded
    # with their neighbours (the runs' table until 2026-11-28: 2-18% of the copy bandwidth).
    "f32-64x64x64x64-F-C": ("f32", [64, 64, 64, 64], "F", "C"),
    "f32-16x128x128x64-F-C": ("f32", [16, 128, 128, 64], "F", "C"),
    "u8-64x64x64x64-C-F": ("u8", [64, 64, 64, 64], "C", "F"),
    "f64-6x50x70x90x11-C-F": ("f64", [6, 50, 70, 90, 11], "C", "F"),
    "f64-6x50x70x90x11-F-C": ("f64", [6, 50, 70, 90, 11], "F", "C"),
    "f16-33x65x129x17-C-F": ("f16", [33, 65, 129, 17], "C", "F"),
    "u8-9x40x50x30x70-F-C": ("u8", [9, 40, 50, 30, 70], "F", "C"),
    "c64-8x64x64x64-F-C": ("c64", [8, 64, 64, 64], "F", "C"),
}
CUPY = {"f32": "float32", "f16": "float16", "f64": "float64", "c128": "complex128",
        "c64": "complex64", "u8": "uint8"}


def case(name):
    """A case by its name: one of CASES, or any `dtype-AxBxC-FROM-TO` (such as
    `f16-1023x511x257-F-C`)."""
    if name in CASES:
        return CASES[name]
    dtype, dims, src, dst = name.split("-")
    return dtype, [int(n) for n in dims.split("x")], src, dst


def draw(rng):
    """A random case's name (--sample): any dtype, 2 to 6 axes, of 1 MiB to 256 MiB
    (log-uniform) split at random over the axes (short ones included); C -> F or F -> C."""
    dtype = rng.choice(list(CUPY))
    width = {"u8": 1, "f16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}[dtype]
    shape = dims(rng, rng.choice([2, 2, 3, 3, 4, 5, 6]), log_uniform(rng, 1 << 20, 1 << 28) / width)
    shape = within(shape, (1 << 28) // width)
    src, dst = rng.choice([("C", "F"), ("F", "C")])
    return "-".join([dtype, "x".join(map(str, shape)), src, dst])


def random_bytes(shape):
    """An .npy of random u8 values of `shape` (a random init takes floats only, and an arange
    past 255 does not fit u8; equal values would let the check miss a misplaced element)."""
    import numpy as np
    path = pathlib.Path(tempfile.gettempdir()) / f"relayout-u8-{'x'.join(map(str, shape))}.npy"
    if not path.exists():
        np.save(path, np.random.default_rng(1).integers(0, 256, size=shape, dtype=np.uint8))
    return path


def spec(dtype, shape, src, dst, iterations):
    init = (f'{{ npy = "{random_bytes(shape)}" }}' if dtype == "u8"
            else "{ uniform = { low = -1.0, high = 1.0 } }")
    return f"""[job]
name = "one-gpu-relayout"
[runtime]
device = "cuda"
[tensors.x]
shape = {shape}
dtype = "{dtype}"
layout = "{src}"
distribution = {{ slab = 0 }}
init = {init}
[[steps]]
op = "redistribute"
input = "x"
out = "y"
distribution = {{ slab = 0 }}
layout = "{dst}"
check = true
warmup = 2
iterations = {iterations}
timing = "queued"
[output]
tensors = []
"""


def main():
    import cupy as cp
    a = arguments(CASES).parse_args()
    print(f"{'case':<22} {'distrun ms':>10} {'check':>6} {'cupy ms':>8} {'speed':>6} {'of copy bw':>10}")
    speeds, fractions = [], []
    for name in chosen(a, draw):
        dtype, shape, src, dst = case(name)
        step, err = first_step(a.bin, spec(dtype, shape, src, dst, a.iterations))
        t = step and step["time_s"]["median"]
        passed = step and step["check"]["passed"]
        x = cp.zeros(shape, dtype=CUPY[dtype], order=src)
        move = cp.asfortranarray if dst == "F" else cp.ascontiguousarray
        c = timed(lambda: move(x), a.iterations)
        y = cp.empty_like(x)
        copy = timed(lambda: cp.copyto(y, x), a.iterations)
        if move(x) is x:  # both orders alike (axes of 1): cupy returns x, distrun copies it
            c = copy
        if t is None:
            print(f"{name:<22} {'failed':>10} {'':>6} {c * 1e3:8.3f}   {err}")
            continue
        print(f"{name:<22} {t * 1e3:10.3f} {str(passed):>6} {c * 1e3:8.3f} {c / t:5.2f}x {copy / t:9.0%}",
              flush=True)
        speeds.append((name, c / t))
        if x.nbytes >= 64 << 20:  # smaller ones are read from L2 in part: no bandwidth figure
            fractions.append((name, 100 * copy / t))
    slowest(speeds)
    slowest(fractions, 80, "%", " of 64 MiB or more against the copy bandwidth")


if __name__ == "__main__":
    main()
