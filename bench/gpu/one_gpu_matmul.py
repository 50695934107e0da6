"""Matmuls on one GPU: distrun with one rank against cupy's matmul (cuBLAS) on the same arrays,
in the same command, over dtypes, layouts, transposes and odd sizes.

    python bench/gpu/one_gpu_matmul.py [--bin target/release/distrun] [--cases f16-8192 ...]
                                       [--iterations 20] [--sample N [--seed S]]

A case is one of CASES or any `dtype-MxNxK-LAYOUT[-aT][-bT]` (such as `f32-1001x999x1003-F-bT`).
`--sample N` runs N cases drawn at random instead (`draw`; the same `--seed`, the same cases),
and a last line names those below 0.95x.

Both are timed alike: 2 warm-up runs, then the iterations back to back between one pair of
CUDA events, their mean (distrun's `timing = "queued"`). Prints one row per case: distrun's
time and TFLOP/s, cupy's time, distrun's speed as cupy's time over distrun's (>= 0.95 is
the target), and where distrun's trials weighed the layout its GEMM writes (skinny products
over a long k), the one it kept with both trial times in ms (C/F). Where cupy will not write an F-order `out` (it raises), its time is that of the
C-order result it returns (marked *), which cuBLAS writes the other way round.
"""

from one_gpu import arguments, chosen, dims, first_step, log_uniform, slowest, timed, within

# name: (dtype, m, n, k, layout of a, b and the result, a transposed, b transposed)
CASES = {
    "f16-8192": ("f16", 8192, 8192, 8192, "C", False, False),
    "f16-4096x16384x8192-F-bT": ("f16", 4096, 16384, 8192, "F", False, True),
    "f16-16384x1024x16384": ("f16", 16384, 1024, 16384, "C", False, False),
    "f16-8192-aT": ("f16", 8192, 8192, 8192, "C", True, False),
    "bf16-8192-F": ("bf16", 8192, 8192, 8192, "F", False, False),
    "f32-8192": ("f32", 8192, 8192, 8192, "C", False, False),
    "f64-4096": ("f64", 4096, 4096, 4096, "C", False, False),
    "c64-4096-F-aT": ("c64", 4096, 4096, 4096, "F", True, False),
    "f32-3001x2999x1013": ("f32", 3001, 2999, 1013, "C", False, False),
}
CUPY = {"f16": "float16", "bf16": None, "f32": "float32", "f64": "float64", "c64": "complex64",
        "c128": "complex128"}
# The most real flops a drawn case may take, by dtype (a few ms on an H200 at most).
BUDGET = {"f16": 4e12, "bf16": 4e12, "f32": 1e12, "f64": 2e11, "c64": 1e12, "c128": 2e11}


def case(name):
    """A case by its name: one of CASES, or `dtype-MxNxK-LAYOUT` with `-aT`, `-bT` for a
    transposed operand."""
    if name in CASES:
        return CASES[name]
    dtype, dims, layout, *flags = name.split("-")
    m, n, k = (int(d) for d in dims.split("x"))
    return dtype, m, n, k, layout, "aT" in flags, "bT" in flags


def draw(rng):
    """A random case's name (--sample): any dtype cupy multiplies, from 10^9 flops to its
    BUDGET (log-uniform) split at random over m, n and k (skinny and tiny ones included; the
    largest halved until the operands fit 2 GiB), either layout, each operand transposed or
    not."""
    dtype = rng.choice([d for d in CUPY if CUPY[d]])
    per = 8 if dtype.startswith("c") else 2
    flops = log_uniform(rng, 1e9, BUDGET[dtype]) / per
    m, n, k = within(dims(rng, 3, flops), BUDGET[dtype] / per)
    width = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}[dtype]
    while width * (m * k + k * n + m * n) > 2 << 30:  # the operands and result within 2 GiB
        big = max(m, n, k)
        m, n, k = ((d + 1) // 2 if d == big else d for d in (m, n, k))
    flags = [f for f in ("aT", "bT") if rng.random() < 0.5]
    return "-".join([dtype, f"{m}x{n}x{k}", rng.choice("CF"), *flags])


def spec(dtype, m, n, k, layout, ta, tb, iterations):
    a = [k, m] if ta else [m, k]
    b = [n, k] if tb else [k, n]
    tensors = "".join(
        f'[tensors.{name}]\nshape = {shape}\ndtype = "{dtype}"\nlayout = "{layout}"\n'
        'distribution = "replicated"\ninit = { uniform = { low = -1.0, high = 1.0 } }\n'
        for name, shape in (("a", a), ("b", b)))
    return f"""[job]
name = "one-gpu-matmul"
[runtime]
device = "cuda"
{tensors}[tensors.c]
shape = [{m}, {n}]
dtype = "{dtype}"
layout = "{layout}"
distribution = "replicated"
[[steps]]
op = "matmul"
a = "a"
b = "b"
out = "c"
transpose_a = {str(ta).lower()}
transpose_b = {str(tb).lower()}
warmup = 2
iterations = {iterations}
timing = "queued"
[output]
tensors = []
"""


def cupy_time(dtype, m, n, k, layout, ta, tb, iterations):
    """cupy's time, and whether its result is in `layout` (where cupy will not write an F-order
    `out`, the time is the C-order result's it returns)."""
    import cupy as cp
    if CUPY[dtype] is None:
        return None, True
    # The operands distrun's spec draws, uniform in [-1, 1) (both parts of a complex one): a
    # GEMM at its power limit runs at a clock that depends on the values it multiplies (zero
    # imaginary parts made cupy's c128 products up to 14% faster).
    def operand(shape):
        x = cp.random.uniform(-1, 1, shape)
        if dtype.startswith("c"):
            x = x + 1j * cp.random.uniform(-1, 1, shape)
        return cp.asarray(x, dtype=CUPY[dtype], order=layout)
    a = operand([k, m] if ta else [m, k])
    b = operand([n, k] if tb else [k, n])
    c = cp.empty((m, n), dtype=CUPY[dtype], order=layout)
    opa, opb = (a.T if ta else a), (b.T if tb else b)
    try:
        return timed(lambda: cp.matmul(opa, opb, out=c), iterations), True
    except Exception:  # an `out` cupy will not write in F order: the result it returns
        return timed(lambda: cp.matmul(opa, opb), iterations), cp.matmul(opa, opb).flags.f_contiguous


def main():
    a = arguments(CASES).parse_args()
    print(f"{'case':<26} {'distrun ms':>10} {'TFLOP/s':>8} {'cupy ms':>8} {'speed':>6} product")
    rows, other_way = [], False
    for name in chosen(a, draw):
        dtype, m, n, k, layout, ta, tb = case(name)
        step, err = first_step(a.bin, spec(dtype, m, n, k, layout, ta, tb, a.iterations))
        c, in_layout = cupy_time(dtype, m, n, k, layout, ta, tb, a.iterations)
        cupy = (f"{c * 1e3:8.3f}" if c else f"{'-':>8}") + ("*" if c and not in_layout else " ")
        other_way |= not in_layout
        if step is None:
            print(f"{name:<26} {'failed':>10} {'':>8} {cupy}   {err}")
            continue
        t = step["time_s"]["median"]
        flops = (8 if dtype.startswith("c") else 2) * m * n * k / t / 1e12
        speed = f"{c / t:5.2f}x" if c else "    -"
        # The layout distrun's GEMM wrote, where its trials weighed both (C/F: their times).
        weighed = step.get("product_layout") or {}
        product = (f"{weighed['chosen']} ({weighed['c_s'] * 1e3:.3f}/{weighed['f_s'] * 1e3:.3f})"
                   if "c_s" in weighed else "")
        print(f"{name:<26} {t * 1e3:10.3f} {flops:8.1f} {cupy} {speed} {product}", flush=True)
        if c:
            rows.append((name, c / t))
    if other_way:
        print("* cupy's result in C order (it would not write an F-order `out`), distrun's in F")
    slowest(rows)


if __name__ == "__main__":
    main()
