"""A matmul's epilog fused into the GEMM (cuBLASLt) against the same epilog in distrun's own
kernel after the GEMM, and against no epilog: f16 16384^3 in the nvmath docs example's layout
(a^T and b in y-slabs, d in x-slabs, Fortran order), on 2 and 4 GPUs, in one run per rank count.

    python bench/gpu/epilog.py [--bin target/release/distrun] [--ranks 2 4] [--n 16384]

A checked nonlinear epilog keeps its kernel (the check needs the pre-activation values), so
the step with `check = true` is the unfused one; checks run after the timed runs.
"""
import argparse
import json
import os
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           NCCL_NVLS_ENABLE="0", NVSHMEM_DISABLE_NVLS="1")


def spec(n):
    init = 'init = { uniform = { low = -1.0, high = 1.0 } }\n'
    t = "".join(f'[tensors.{x}]\nshape = [{n}, {n}]\ndtype = "f16"\nlayout = "F"\n'
                f'distribution = {{ slab = "y" }}\n{init}' for x in "ab")
    t += f'[tensors.bias]\nshape = [{n}]\ndtype = "f16"\ndistribution = "replicated"\n{init}'
    t += "".join(f'[tensors.{x}]\nshape = [{n}, {n}]\ndtype = "f16"\nlayout = "F"\n'
                 'distribution = { slab = "x" }\n' for x in ["plain", "fused", "kernel"])
    steps = ""
    for out, extra in [("plain", "check = false\n"),
                       ("fused", 'epilog = "gelu_bias"\nbias = "bias"\ncheck = false\n'),
                       ("kernel", 'epilog = "gelu_bias"\nbias = "bias"\ncheck = true\n')]:
        steps += (f'[[steps]]\nname = "{out}"\nop = "matmul"\na = "a"\nb = "b"\nout = "{out}"\n'
                  f'transpose_a = true\n{extra}warmup = 3\niterations = 10\n')
    return (f'[job]\nname = "bench-epilog"\n[runtime]\ndevice = "cuda"\n'
            f'backends = ["nccl", "nvshmem"]\n{t}{steps}[output]\ntensors = []\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/distrun"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--n", type=int, default=16384)
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp())
    path = work / "epilog.toml"
    path.write_text(spec(args.n))
    print("| GPUs | no epilog | gelu_bias fused | gelu_bias, own kernel | fused saves |")
    print("| --- | --- | --- | --- | --- |")
    for p in args.ranks:
        out = work / f"run-{p}"
        r = subprocess.run(["mpiexec", "-n", str(p), args.bin, "run", str(path), "--out", str(out), "-q"],
                           env=ENV, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"| {p} | failed: {r.stderr[-400:]} |")
            continue
        t = {s["name"]: s["time_s"]["median"] for s in json.loads((out / "manifest.json").read_text())["steps"]}
        print(f"| {p} | {t['plain'] * 1e3:.2f} ms | {t['fused'] * 1e3:.2f} ms | {t['kernel'] * 1e3:.2f} ms "
              f"| {(t['kernel'] - t['fused']) * 1e3:.2f} ms |", flush=True)


if __name__ == "__main__":
    main()
