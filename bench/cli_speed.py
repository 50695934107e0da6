#!/usr/bin/env python3
"""How fast distrun checks and plans specs, beside a peer in the same run.

- `distrun validate` of a 500-step spec (every pass: TOML, schema, meaning), against
  check-jsonschema validating the same file against the same schema (schema pass only).
- `distrun plan --ranks 4096` of specs/gemm_block_cyclic.toml (local shapes of 4096 ranks,
  algorithm choice, heap), table and JSON; and of the slab FFT specs at 16384 ranks (each rank's
  workspace).
- `distrun validate` of a 10 MB spec of 170,000 tensors, against Python's own `tomllib` only
  parsing the same file (no schema, no meaning); and of a spec with 60,000 misspelled names on
  one line (every error reported).

Times are wall-clock medians of whole process runs (start to exit). Run from the repository root
after `cargo build --release`: python3 bench/cli_speed.py
"""
import os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRUN = os.path.join(ROOT, "target", "release", "distrun")
CHECK = os.path.join(ROOT, ".tools", "venv", "bin", "check-jsonschema")
SCHEMA = os.path.join(ROOT, "schemas", "distrun.schema.json")


def spec_with_steps(n):
    """A spec of n steps cycling through the collectives, each reading and writing tensors."""
    lines = ['#:schema ../schemas/distrun.schema.json', '[job]', 'name = "many-steps"', '',
             '[tensors.p]', 'shape = [64, 32]', 'dtype = "f32"', 'distribution = "partial"',
             'init = { uniform = {} }', '',
             '[tensors.s]', 'shape = [64, 32]', 'dtype = "f32"', 'distribution = { slab = 0 }',
             'init = "ones"', '']
    kinds = [
        ('all_reduce', 'input = "p"\nout = "{o}"\nreduce = "sum"'),
        ('all_gather', 'input = "s"\nout = "{o}"'),
        ('redistribute', 'input = "s"\nout = "{o}"\ndistribution = { block_cyclic = { blocks = [8, 8] } }'),
        ('reduce_scatter', 'input = "p"\nout = "{o}"\nreduce = "max"'),
        ('matmul', 'a = "s"\nb = "s"\ntranspose_b = true\nout = "{o}"'),
    ]
    for i in range(n):
        op, body = kinds[i % len(kinds)]
        lines += ['[[steps]]', f'op = "{op}"', body.replace("{o}", f"t{i}"), 'iterations = 3', 'check = true', '']
    return "\n".join(lines)


def spec_with_tensors(n, misspelled_outputs=False):
    """n small tensors; with misspelled_outputs, an output list naming none of them."""
    lines = ['[job]', 'name = "many-tensors"']
    for i in range(n):
        lines += [f'[tensors.tensor_{i}]', 'shape = [8, 8]', 'dtype = "f32"', 'init = "ones"', '']
    lines += ['[[steps]]', 'op = "barrier"']
    if misspelled_outputs:
        lines += ['[output]', 'tensors = [' + ','.join(f'"tensr_{i}"' for i in range(n)) + ']']
    return "\n".join(lines) + "\n"


def median_time(cmd, runs, code=0):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
        if r.returncode != code:
            sys.exit(f"{' '.join(cmd)} failed: {r.stderr.decode()[:2000]}")
    return statistics.median(times)


def main():
    if not os.path.exists(DISTRUN):
        sys.exit("build first: cargo build --release")
    with tempfile.TemporaryDirectory() as tmp:
        spec = os.path.join(tmp, "many.toml")
        with open(spec, "w") as f:
            f.write(spec_with_steps(500))
        v = median_time([DISTRUN, "validate", "--ranks", "4", spec], 30)
        print(f"distrun validate, 500 steps (all three passes): {v*1e3:7.1f} ms")
        if os.path.exists(CHECK):
            c = median_time([CHECK, "--schemafile", SCHEMA, spec], 5)
            print(f"check-jsonschema, same file (schema only):      {c*1e3:7.1f} ms   ratio {c/v:.1f}x")
        big = os.path.join(tmp, "big.toml")
        with open(big, "w") as f:
            f.write(spec_with_tensors(170_000))
        mb = os.path.getsize(big) / 1e6
        v = median_time([DISTRUN, "validate", big], 5)
        print(f"distrun validate, {mb:.1f} MB, 170,000 tensors:    {v*1e3:7.1f} ms")
        t = median_time([sys.executable, "-c",
                         f"import tomllib; tomllib.load(open({big!r}, 'rb'))"], 3)
        print(f"python tomllib, same file (parse only):         {t*1e3:7.1f} ms   ratio {t/v:.1f}x")
        bad = os.path.join(tmp, "bad.toml")
        with open(bad, "w") as f:
            f.write(spec_with_tensors(60_000, misspelled_outputs=True))
        e = median_time([DISTRUN, "validate", bad], 3, code=2)
        print(f"distrun validate, 60,000 errors on one line:     {e*1e3:7.1f} ms")
    bc = os.path.join(ROOT, "specs", "gemm_block_cyclic.toml")
    p = median_time([DISTRUN, "plan", bc, "--ranks", "4096"], 20)
    print(f"distrun plan --ranks 4096 gemm_block_cyclic (table): {p*1e3:7.1f} ms")
    pj = median_time([DISTRUN, "plan", bc, "--ranks", "4096", "--json"], 20)
    print(f"distrun plan --ranks 4096 gemm_block_cyclic (json):  {pj*1e3:7.1f} ms")
    for name in ("fft3d", "fft2d_r2c"):
        spec = os.path.join(ROOT, "specs", f"{name}.toml")
        f = median_time([DISTRUN, "plan", spec, "--ranks", "16384"], 5)
        print(f"distrun plan --ranks 16384 {name + ':':<12}             {f*1e3:7.1f} ms")


if __name__ == "__main__":
    main()
