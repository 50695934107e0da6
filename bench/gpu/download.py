"""Copying a result to the host: distrun's download of one 2 GiB output (timed by `run -v`)
beside cupy's `cupy.asnumpy` of a buffer of the same size, in the same command on one GPU.

    python bench/gpu/download.py [--bin target/release/distrun] [--mib 2048]
"""
import argparse
import os
import pathlib
import re
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/release/distrun"))
    ap.add_argument("--mib", type=int, default=2048)
    args = ap.parse_args()
    n = args.mib * (1 << 20) // 4
    work = pathlib.Path(tempfile.mkdtemp())
    spec = work / "d.toml"
    spec.write_text(
        '[job]\nname = "bench-download"\n[runtime]\ndevice = "cuda"\n'
        f'[tensors.x]\nshape = [{n}]\ndtype = "f32"\ndistribution = "partial"\n'
        'init = { uniform = {} }\n'
        '[[steps]]\nop = "all_reduce"\ninput = "x"\nout = "y"\n'
        '[output]\ntensors = ["y"]\n')
    times = []
    for k in range(3):
        log = subprocess.run([args.bin, "run", "-v", str(spec), "--out", str(work / f"run{k}")],
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, NCCL_NVLS_ENABLE="0", NVSHMEM_DISABLE_NVLS="1")).stderr
        times.append(float(re.search(r"downloaded y, \d+ bytes \(([\d.]+) s\)", log).group(1)))
    import cupy as cp
    x = cp.ones(n, dtype=cp.float32)
    cp.asnumpy(x)
    t0 = time.perf_counter()
    for _ in range(3):
        cp.asnumpy(x)
    peer = (time.perf_counter() - t0) / 3
    gib = n * 4 / 2**30
    best = min(times)
    print(f"download of {gib:.1f} GiB: distrun {best * 1e3:.1f} ms ({gib / best:.1f} GiB/s, runs "
          f"{', '.join(f'{t * 1e3:.1f}' for t in times)}), cupy.asnumpy {peer * 1e3:.1f} ms "
          f"({gib / peer:.1f} GiB/s): {peer / best:.2f}x")


if __name__ == "__main__":
    main()
