"""FFTs on one GPU: distrun with one rank against cupy's cuFFT call (cupy.fft.fftn / rfftn /
irfftn) on the same array, in the same command, for every kind, both precisions, 2-D and 3-D,
odd sizes and F order.

    python bench/gpu/one_gpu_fft.py [--bin target/release/distrun] [--cases c2c-c64-512 ...]
                                    [--iterations 20] [--sample N [--seed S]]

A case is one of CASES or any `kind-dtype-AxBxC-LAYOUT` (such as `c2c-c128-1000x999-F`).
`--sample N` runs N cases drawn at random instead (`draw`; the same `--seed`, the same cases),
and a last line names those below 0.95x.

Both are timed alike: 2 warm-up runs, then the iterations back to back between one pair of
CUDA events, their mean (distrun's `timing = "queued"`). Prints one row per case: distrun's
time, cupy's, and distrun's speed as cupy's time over distrun's (>= 0.95 is the target).
"""
from one_gpu import arguments, chosen, dims, first_step, log_uniform, slowest, timed, within

# name: (kind, input dtype, shape, layout)
CASES = {
    "c2c-c64-512": ("c2c", "c64", [512, 512, 512], "C"),
    "c2c-c64-1024": ("c2c", "c64", [1024, 1024, 1024], "C"),
    "c2c-c64-768": ("c2c", "c64", [768, 768, 768], "C"),
    "c2c-c128-512": ("c2c", "c128", [512, 512, 512], "C"),
    "c2c-c64-2d-16384": ("c2c", "c64", [16384, 16384], "C"),
    "c2c-c64-1000-F": ("c2c", "c64", [1000, 1000, 100], "F"),
    "r2c-f32-1024": ("r2c", "f32", [1024, 1024, 1024], "C"),
    "r2c-f64-2d-8192": ("r2c", "f64", [8192, 8192], "C"),
    "c2r-c64-512": ("c2r", "c64", [512, 512, 257], "C"),
}


def case(name):
    """A case by its name: one of CASES, or any `kind-dtype-AxBxC-LAYOUT` (such as
    `r2c-f32-999x1001x64-F`): the input's dtype and shape (a c2r's complex half)."""
    if name in CASES:
        return CASES[name]
    kind, dtype, dims, layout = name.split("-")
    return kind, dtype, [int(d) for d in dims.split("x")], layout


def draw(rng):
    """A random case's name (--sample): any kind and precision, 2-D or 3-D, of 1 MiB to 1 GiB
    (log-uniform) split at random over the axes (each at least 2), C order or in one case of
    four F."""
    kind = rng.choice(["c2c", "r2c", "c2r"])
    dtype = rng.choice(["f32", "f64"] if kind == "r2c" else ["c64", "c128"])
    width = {"f32": 4, "f64": 8, "c64": 8, "c128": 16}[dtype]
    shape = dims(rng, rng.choice([2, 3]), log_uniform(rng, 1 << 20, 1 << 30) / width, short=0.1)
    shape = within([max(2, n) for n in shape], (1 << 30) // width)
    if kind == "c2r":  # the input is the complex half of a real signal's spectrum
        shape[-1] = shape[-1] // 2 + 1
    layout = "F" if rng.random() < 0.25 else "C"
    return "-".join([kind, dtype, "x".join(map(str, shape)), layout])


def spec(kind, dtype, shape, layout, iterations, slab=0, reshape=None):
    """The one-step spec of an FFT of `kind` on x (`dtype`, `shape`, `layout`, in slabs along
    axis `slab`); `reshape` given: the step's key."""
    out = 'out = "y"\n' if kind != "c2c" else ""
    if reshape is not None:
        out += f"reshape = {str(reshape).lower()}\n"
    return f"""[job]
name = "gpu-fft"
[runtime]
device = "cuda"
[tensors.x]
shape = {shape}
dtype = "{dtype}"
layout = "{layout}"
distribution = {{ slab = {slab} }}
init = {{ uniform = {{ low = -1.0, high = 1.0 }} }}
[[steps]]
op = "fft"
input = "x"
{out}kind = "{kind}"
direction = "{'inverse' if kind == 'c2r' else 'forward'}"
warmup = 2
iterations = {iterations}
timing = "queued"
[output]
tensors = []
"""


def cupy_time(kind, dtype, shape, layout, iterations, norm="backward"):
    """cupy's fftn / rfftn / irfftn of the whole array, timed as distrun is; `norm` numpy's
    (a c2r's inverse is scaled by 1/n with "backward", not with "forward")."""
    import cupy as cp
    real = {"c64": cp.complex64, "c128": cp.complex128, "f32": cp.float32, "f64": cp.float64}[dtype]
    order = "F" if layout == "F" else "C"
    # The values distrun's spec draws, uniform in [-1, 1) (both parts of a complex one).
    x = cp.random.uniform(-1, 1, shape)
    if dtype.startswith("c"):
        x = x + 1j * cp.random.uniform(-1, 1, shape)
    x = cp.asarray(x, dtype=real, order=order)
    if kind == "c2r":
        n = 2 * (shape[-1] - 1)
        shape_out = shape[:-1] + [n]
        f = lambda: cp.fft.irfftn(x, s=shape_out, norm=norm)
    elif kind == "r2c":
        f = lambda: cp.fft.rfftn(x)
    else:
        f = lambda: cp.fft.fftn(x)
    if layout == "F" and kind != "c2c":
        # cupy's real transforms of an F-order array return C order (c2r) or neither (r2c);
        # distrun's result is in F order, as the spec's tensors are: cupy's is made so too.
        g = f
        f = lambda: cp.asfortranarray(g())
    return timed(f, iterations)


def main():
    a = arguments(CASES).parse_args()
    print(f"{'case':<20} {'distrun ms':>11} {'cupy ms':>9} {'speed':>7}")
    rows = []
    for name in chosen(a, draw):
        kind, dtype, shape, layout = case(name)
        step, err = first_step(a.bin, spec(kind, dtype, shape, layout, a.iterations))
        t = step and step["time_s"]["median"]
        c = cupy_time(kind, dtype, shape, layout, a.iterations)
        if t is None:
            print(f"{name:<20} {'failed':>11} {c * 1e3:9.3f}   {err}")
            continue
        print(f"{name:<20} {t * 1e3:11.3f} {c * 1e3:9.3f} {c / t:7.2f}x", flush=True)
        rows.append((name, c / t))
    slowest(rows)


if __name__ == "__main__":
    main()
