"""The compute half of scripts/gpu-check: a spec with a matmul for every algorithm and dtype
(plus epilogs, alpha/beta/c, transposes and conjugates) and FFTs of every kind, precision,
slab and pencil distribution, and the comparison of two runs of it (GPU and CPU backends)
within a tolerance from each dtype.

    python3 gpu_check_compute.py spec P [nvshmem] > spec.toml   (nvshmem: data moved by puts)
    python3 gpu_check_compute.py compare CUDA_RUN CPU_RUN [apart]   (exit 1 on any difference;
        apart: a run without peer mappings, whose operands gathered whole move in window slices)

The CPU run is of the plain spec (the CPU backend refuses `nvshmem`); it is the reference for
both GPU runs, the same tensors either way.
"""
import json
import re
import sys

import numpy as np

M, N, K = 301, 259, 203
# The free axis of the matmuls gathered whole within windows: split evenly at 2, 3 and 4 ranks
# (into 2, 2 and 3 slices of their pieces).
W = 264
DTYPES = ["f16", "bf16", "f32", "f64", "c64", "c128"]
ALGORITHMS = [
    ("local", "{ slab = 0 }", '"replicated"'),
    ("ag_gemm", "{ slab = 0 }", "{ slab = 1 }"),
    ("gemm_rs", "{ slab = 1 }", "{ slab = 0 }"),
    ("gemm_ar", "{ slab = 1 }", "{ slab = 0 }"),
    ("summa", "{ block_cyclic = { blocks = [32, 48] } }", "{ block_cyclic = { blocks = [48, 16] } }"),
    ("summa", "{ block = {} }", "{ block = {} }"),
    ("redistribute", "{ block = {} }", "{ slab = 1 }"),
]
# Largest difference from the CPU backend, relative to the largest magnitude, by dtype.
TOLERANCE = {"f16": 2e-2, "bf16": 3e-2, "f32": 1e-4, "c64": 1e-4, "f64": 1e-10, "c128": 1e-10}


def tensor(name, shape, dtype, dist, layout="C", init="{ uniform = { low = -1.0, high = 1.0 } }"):
    return (f'[tensors.{name}]\nshape = {list(shape)}\ndtype = "{dtype}"\nlayout = "{layout}"\n'
            f"distribution = {dist}\ninit = {init}\n")


def step(**keys):
    keys.setdefault("check", True)
    body = "".join(f"{k} = {json.dumps(v) if isinstance(v, (str, bool)) else v}\n" for k, v in keys.items())
    return "[[steps]]\n" + body


def boxes(shape, axes, p):
    """Boxes splitting `axes` of `shape` over a grid of p ranks (2 x p/2, or p x 1)."""
    grid = (2, p // 2) if p % 2 == 0 and p > 2 else (p, 1)
    out = []
    for r in range(p):
        lo, hi = [0] * len(shape), list(shape)
        for a, g, i in zip(axes, grid, (r % grid[0], r // grid[0])):
            lo[a], hi[a] = shape[a] * i // g, shape[a] * (i + 1) // g
        out.append(f"[{lo}, {hi}]")
    return "{ boxes = [" + ", ".join(out) + "] }"


def spec(p, nvshmem=False):
    t, s, outs = [], [], []
    for j, dtype in enumerate(DTYPES):
        # Gathered operands in rounds for every other dtype, in one exchange for the rest.
        pipeline = "whole" if j % 2 else "rounds"
        for i, (alg, da, db) in enumerate(ALGORITHMS):
            a, b, d = f"a_{dtype}_{i}", f"b_{dtype}_{i}", f"d_{dtype}_{i}"
            t.append(tensor(a, (M, K), dtype, da, "F" if i % 2 else "C"))
            t.append(tensor(b, (K, N), dtype, db, "C" if i % 3 else "F"))
            s.append(step(op="matmul", a=a, b=b, out=d, algorithm=alg, pipeline=pipeline))
            outs.append(d)
    # The nvmath docs example's layout: a^T stored F in y-slabs, b F in y-slabs, d in x-slabs
    # (the pipeline left to trials).
    for dtype in ["f16", "f32"]:
        t.append(tensor(f"at_{dtype}", (K, M), dtype, '{ slab = "y" }', "F"))
        t.append(tensor(f"bt_{dtype}", (K, N), dtype, '{ slab = "y" }', "F"))
        t.append(f'[tensors.dt_{dtype}]\nshape = [{M}, {N}]\ndtype = "{dtype}"\nlayout = "F"\n'
                 'distribution = { slab = "x" }\n')
        s.append(step(op="matmul", a=f"at_{dtype}", b=f"bt_{dtype}", out=f"dt_{dtype}", transpose_a=True))
        outs.append(f"dt_{dtype}")
    # Gathered whole (pipeline pinned), which by NCCL alone goes by the copy engines within NCCL
    # windows in slices: b in F order by columns, a in C order by rows; and a conjugated,
    # transposed b.
    for dtype in ["f16", "f32", "c128"]:
        t.append(tensor(f"wa_{dtype}", (M, K), dtype, "{ slab = 0 }"))
        t.append(tensor(f"wb_{dtype}", (K, W), dtype, "{ slab = 1 }", "F"))
        s.append(step(name=f"wd_{dtype}", op="matmul", a=f"wa_{dtype}", b=f"wb_{dtype}",
                      out=f"wd_{dtype}", algorithm="ag_gemm", pipeline="whole"))
        t.append(tensor(f"va_{dtype}", (W, K), dtype, "{ slab = 0 }"))
        t.append(tensor(f"vb_{dtype}", (N, K), dtype, "{ slab = 0 }"))
        t.append(f'[tensors.vd_{dtype}]\nshape = [{W}, {N}]\ndtype = "{dtype}"\nlayout = "C"\n'
                 'distribution = { slab = 1 }\n')
        s.append(step(name=f"vd_{dtype}", op="matmul", a=f"va_{dtype}", b=f"vb_{dtype}", out=f"vd_{dtype}",
                      transpose_b=True, conjugate_b=dtype == "c128", algorithm="ag_gemm",
                      pipeline="whole"))
        outs += [f"wd_{dtype}", f"vd_{dtype}"]
    # Epilogs with a bias, alpha/beta/c, conjugates (one needs a conjugated copy on the GPU).
    t.append(tensor("ea", (M, K), "f32", "{ slab = 1 }"))
    t.append(tensor("eb", (K, N), "f32", "{ slab = 0 }"))
    t.append(tensor("bias", (M,), "f32", '"replicated"'))
    t.append(tensor("cc", (M, N), "f32", "{ slab = 1 }"))
    for e in ["relu", "gelu", "bias", "relu_bias", "gelu_bias"]:
        extra = {"bias": "bias"} if "bias" in e else {}
        s.append(step(op="matmul", a="ea", b="eb", out=f"e_{e}", epilog=e, **extra))
        outs.append(f"e_{e}")
    # Epilogs the GPU fuses into the GEMM (cuBLASLt): results in Fortran order in x-slabs (a bias
    # too), or any order for an activation alone; unchecked, as a checked nonlinear epilog keeps
    # its kernel for the pre-activation values.
    for dtype in ["f16", "bf16", "f32"]:
        t.append(tensor(f"fa_{dtype}", (K, M), dtype, '{ slab = "y" }', "F"))
        t.append(tensor(f"fb_{dtype}", (K, N), dtype, '{ slab = "y" }', "F"))
        t.append(tensor(f"fbias_{dtype}", (M,), dtype, '"replicated"'))
        for e in ["relu", "gelu", "bias", "relu_bias", "gelu_bias"]:
            out = f"f_{dtype}_{e}"
            t.append(f'[tensors.{out}]\nshape = [{M}, {N}]\ndtype = "{dtype}"\nlayout = "F"\n'
                     'distribution = { slab = "x" }\n')
            extra = {"bias": f"fbias_{dtype}"} if "bias" in e else {}
            s.append(step(op="matmul", a=f"fa_{dtype}", b=f"fb_{dtype}", out=out, transpose_a=True,
                          epilog=e, check=e == "bias", **extra))
            outs.append(out)
        s.append(step(op="matmul", a=f"fa_{dtype}", b=f"fb_{dtype}", out=f"fc_{dtype}", transpose_a=True,
                      epilog="gelu", check=False))
        outs.append(f"fc_{dtype}")
    s.append(step(op="matmul", a="ea", b="eb", out="e_abc", alpha=0.5, beta=-2.0, c="cc"))
    outs.append("e_abc")
    for dtype in ["c64", "c128"]:
        # a in Fortran order used transposed is read untransposed by cuBLAS: a conjugated copy.
        t.append(tensor(f"za_{dtype}", (K, M), dtype, "{ slab = 0 }", "F"))
        t.append(tensor(f"zb_{dtype}", (N, K), dtype, "{ slab = 0 }"))
        s.append(step(op="matmul", a=f"za_{dtype}", b=f"zb_{dtype}", out=f"z_{dtype}",
                      transpose_a=True, transpose_b=True, conjugate_a=True, conjugate_b=True))
        outs.append(f"z_{dtype}")
    # FFTs: c2c both precisions and slabs, norms, reshape on and off, in place; r2c and c2r;
    # pencils.
    shape3, shape2 = (30, 28, 33), (36, 45)
    t.append(tensor("fx", shape3, "c64", '{ slab = "x" }'))
    t.append(tensor("fy", shape3, "c128", '{ slab = "y" }'))
    t.append(tensor("fr", shape3, "f32", '{ slab = "x" }'))
    t.append(tensor("fr2", shape2, "f64", '{ slab = "x" }'))
    t.append(tensor("fp", (32, 24, 20), "c128", boxes((32, 24, 20), (0, 1), p)))
    t.append(tensor("fi", shape2, "c64", '{ slab = "y" }'))
    t.append(f'[tensors.fpo]\nshape = [32, 24, 20]\ndtype = "c128"\ndistribution = {boxes((32, 24, 20), (1, 2), p)}\n')
    s.append(step(op="fft", input="fx", out="gx", kind="c2c", reshape=False))
    s.append(step(op="fft", input="fx", out="gx2", kind="c2c", direction="inverse", norm="ortho"))
    s.append(step(op="fft", input="fy", out="gy", kind="c2c", norm="forward"))
    s.append(step(op="fft", input="fy", out="gy2", kind="c2c", reshape=False, direction="inverse"))
    s.append(step(op="fft", input="fr", out="gr", kind="r2c"))
    s.append(step(op="fft", input="gr", out="hr", kind="c2r", direction="inverse"))
    s.append(step(op="fft", input="fr2", out="gr2", kind="r2c", reshape=False))
    s.append(step(op="fft", input="gr2", out="hr2", kind="c2r", direction="inverse", reshape=False))
    s.append(step(op="fft", input="fp", out="fpo", norm="ortho"))
    s.append(step(op="fft", input="fi", kind="c2c"))
    outs += ["gx", "gx2", "gy", "gy2", "gr", "hr", "gr2", "hr2", "fpo", "fi"]
    # Transforms of 8192 points down columns (the GPU runs them on the columns transposed): a
    # 2-D second phase, a 3-D inner axis (c2c, and before a c2r).
    t.append(tensor("fl", (8192, 12), "c64", '{ slab = "x" }'))
    t.append(tensor("fl3", (4, 8192, 6), "c128", '{ slab = "y" }'))
    t.append(tensor("flr", (4, 8192, 5), "c64", '{ slab = "y" }'))
    s.append(step(op="fft", input="fl", out="gl", kind="c2c", reshape=False))
    s.append(step(op="fft", input="fl3", out="gl3", kind="c2c", direction="inverse"))
    s.append(step(op="fft", input="flr", out="glr", kind="c2r", direction="inverse", reshape=False))
    outs += ["gl", "gl3", "glr"]
    # 2-D from x-slabs down 8192 points and more, left in y-slabs: the y-slabs land transposed
    # (an r2c's half spectrum of 6 columns, c128 columns uneven over the ranks, an inverse).
    t.append(tensor("flx", (8192, 10), "f64", '{ slab = "x" }'))
    t.append(tensor("fly", (16384, 7), "c128", '{ slab = "x" }'))
    s.append(step(op="fft", input="flx", out="glx", kind="r2c", reshape=False))
    s.append(step(op="fft", input="fly", out="gly", kind="c2c", reshape=False, direction="inverse",
                  norm="ortho"))
    outs += ["glx", "gly"]
    # 2-D from y-slabs down 8192 points and more: each batch of columns turned into rows and
    # back on its way to x-slabs (c64 columns uneven over the ranks and back to y-slabs; a c2r).
    t.append(tensor("fty", (8192, 11), "c64", '{ slab = "y" }'))
    t.append(tensor("ftr", (16384, 5), "c128", '{ slab = "y" }'))
    s.append(step(op="fft", input="fty", out="gty", kind="c2c"))
    s.append(step(op="fft", input="ftr", out="gtr", kind="c2r", direction="inverse", reshape=False))
    outs += ["gty", "gtr"]
    runtime = '[runtime]\nbackends = ["nccl", "nvshmem"]\n' if nvshmem else ""
    out = ['[job]\nname = "gpu-check-compute"\nseed = 5\n' + runtime] + t + s
    out.append("[output]\ngather = true\ntensors = [" + ", ".join(f'"{o}"' for o in outs) + "]\n")
    return "\n".join(out)


def load(path):
    x = np.load(path)
    if x.dtype == np.uint16:  # bf16 is stored as its bit patterns
        x = (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.complex128)


def compare(cuda, cpu, apart=False):
    m = {d: json.load(open(f"{r}/manifest.json")) for d, r in (("cuda", cuda), ("cpu", cpu))}
    bad = 0
    for st in m["cuda"]["steps"]:
        c = st.get("check")
        if c is not None and not c["passed"]:
            bad += 1
            print(f"  FAIL check {st['name']}: {c}")
    for name, t in sorted(m["cuda"]["tensors"].items()):
        g, c = load(f"{cuda}/{name}.npy"), load(f"{cpu}/{name}.npy")
        scale = max(np.abs(c).max(), 1e-30)
        err = float(np.abs(g - c).max() / scale) if g.shape == c.shape else float("inf")
        tol = TOLERANCE[t["dtype"]]
        if not err <= tol:
            bad += 1
            print(f"  FAIL {name} ({t['dtype']}): relative difference {err:.2e} > {tol:.0e}")
    # By NCCL alone without puts (no peer mapped), NCCL 2.28 or later: the operands gathered
    # whole (wd_, vd_) move within windows, in as many slices as ranks (2 to 4), the most that
    # split the W / P lines of a piece evenly. (Where puts can move, a ring of puts or NCCL's
    # all-gather moves them.)
    device = m["cuda"]["rank_info"][0]["device"]
    nccl = re.search(r"NCCL (\d+)\.(\d+)", device)
    windows = apart and "NVSHMEM" not in device and nccl and (int(nccl[1]), int(nccl[2])) >= (2, 28)
    p = m["cuda"]["ranks"]
    want = max(s for s in range(1, min(max(p, 2), 4) + 1) if W // p % s == 0)
    for st in m["cuda"]["steps"]:
        slices = (st.get("pipeline") or {}).get("window_slices")
        if windows and st["name"].startswith(("wd_", "vd_")) and slices != want:
            bad += 1
            print(f"  FAIL {st['name']}: gathered whole in {slices} window slices, not {want} ({device})")
    for st in m["cuda"]["steps"]:
        extra = f" {st['algorithm']:<12}" if st.get("algorithm") else ""
        if st.get("pipeline"):
            extra += f" in {st['pipeline']['chosen']:<6}"
            if st["pipeline"].get("window_slices"):
                extra += f" ({st['pipeline']['window_slices']} window slices)"
        print(f"  {st['name']:<22}{extra} median {st['time_s']['median'] * 1e6:9.1f} us")
    n = len(m["cuda"]["tensors"])
    print(f"  {'OK' if bad == 0 else 'FAILED'}: {n} results within tolerance of the CPU backend's, checks passed")
    return bad


if __name__ == "__main__":
    if sys.argv[1] == "spec":
        print(spec(int(sys.argv[2]), sys.argv[3:] == ["nvshmem"]))
    else:
        sys.exit(1 if compare(sys.argv[2], sys.argv[3], sys.argv[4:] == ["apart"]) else 0)
