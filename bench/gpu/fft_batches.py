"""How many batches a multi-GPU FFT's transposes run in: one or two distrun builds on the cases of
`multi_gpu_fft.py`, each build's chosen count (the step without `batches`) beside the counts
given (`batches = N`, steps of the same spec, the newest build only), in the same command.

    python bench/gpu/fft_batches.py --bins OLD NEW [--ranks 2 4] [--cases c2c-c64-2d-16384-y ...]
                                    [--batches 2 4 8 12 16] [--via nvshmem] [--rounds 2]

Timed as `multi_gpu_fft.py` times them (2 warm-up runs, the iterations queued, their mean).
Prints one row per case, rank count, build and round: the chosen count's time, then each given
count's. An older build without the `batches` key runs the chosen count only.
"""
import argparse
import json
import pathlib
import subprocess
import tempfile

from multi_gpu_fft import CASES, distrun_spec
from one_gpu import ENV


def with_batches(text, counts):
    """The one-step spec `text` with a step per count of `counts` after its own, each into its
    own result (`y<count>`), named `b<count>`."""
    head, rest = text.split("[[steps]]\n", 1)
    step, tail = rest.split("[output]\n", 1)
    step = "\n".join(l for l in step.splitlines() if not l.startswith("out = ")) + "\n"
    steps = '[[steps]]\nname = "auto"\nout = "y"\n' + step
    for n in counts:
        steps += f'[[steps]]\nname = "b{n}"\nout = "y{n}"\nbatches = {n}\n' + step
    return head + steps + "[output]\n" + tail


def run(binary, text, ranks):
    """Each step's median time (ms) by name, or the failure's last lines."""
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "spec.toml"
        path.write_text(text)
        done = subprocess.run(["mpiexec", "-n", str(ranks), binary, "run", str(path), "--out",
                               f"{d}/run", "-q"], env=ENV, capture_output=True, text=True)
        if done.returncode != 0:
            return " / ".join((done.stderr + done.stdout).strip().splitlines()[-3:])
        steps = json.loads((pathlib.Path(d) / "run/manifest.json").read_text())["steps"]
        return {s["name"]: s["time_s"]["median"] * 1e3 for s in steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", nargs="+", required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--batches", type=int, nargs="*", default=[2, 4, 8, 12, 16])
    ap.add_argument("--via", default="nvshmem", choices=["nccl", "nvshmem"])
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    newest = a.bins[-1]
    print("| case | GPUs | build | round | chosen | " + " | ".join(f"{n}" for n in a.batches) + " |")
    print("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in a.batches) + " |")
    for p in a.ranks:
        for name in a.cases:
            base = distrun_spec(name, p, a.via, a.iterations)
            for r in range(a.rounds):
                for b in a.bins:
                    counts = a.batches if b == newest else []
                    t = run(b, with_batches(base, counts), p)
                    if isinstance(t, str):
                        print(f"| {name} | {p} | {b} | {r} | failed: {t} |", flush=True)
                        continue
                    cells = [f"{t['auto']:.3f}"] + [f"{t[f'b{n}']:.3f}" for n in counts]
                    print(f"| {name} | {p} | {b} | {r} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
