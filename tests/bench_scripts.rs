//! The benchmark scripts, where no GPU is: every Python file under `bench/` compiles, every name
//! a script imports from `bench/gpu/one_gpu.py` is there, and the one-GPU scripts' random
//! samples (`--sample N --seed S`) draw the same cases for the same seed, names their own
//! `case` reads back, within the sizes their docs promise. (The scripts run on the GPU machines
//! only, where a broken import would cost a device session.)

use std::path::Path;
use std::process::Command;

/// Runs `code` with python3 in `bench/gpu`, asserting it succeeds; its stdout.
fn python(code: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/gpu");
    let out = Command::new("python3")
        .args(["-c", code])
        .current_dir(&dir)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_script_compiles_and_finds_what_it_imports_from_one_gpu() {
    let out = python(
        r#"
import ast, pathlib, one_gpu
files = sorted(pathlib.Path("..").rglob("*.py"))
for f in files:
    tree = ast.parse(f.read_text(), str(f))
    compile(tree, str(f), "exec")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "one_gpu":
            for alias in node.names:
                assert hasattr(one_gpu, alias.name), f"{f} imports {alias.name}, not in one_gpu.py"
print(len(files))
"#,
    );
    let files: usize = out.trim().parse().expect("a count");
    assert!(files >= 20, "{files} scripts found");
}

#[test]
fn random_samples_repeat_by_seed_and_stay_within_their_sizes() {
    python(
        r#"
import math, random
import one_gpu_matmul as mm, one_gpu_fft as ff, one_gpu_relayout as rl
WIDTH = {"u8": 1, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16}
for script in (mm, ff, rl):
    for seed in range(40):
        names = [script.draw(random.Random(seed)) for _ in range(2)]
        assert names[0] == names[1], names
        again = [script.draw(r) for r in [random.Random(seed)] for _ in range(5)]
        assert again == [script.draw(r) for r in [random.Random(seed)] for _ in range(5)]
for seed in range(300):
    r = random.Random(seed)
    dtype, m, n, k, layout, ta, tb = mm.case(mm.draw(r))
    assert min(m, n, k) >= 1 and layout in "CF" and mm.CUPY[dtype]
    assert WIDTH[dtype] * (m * k + k * n + m * n) <= 2 << 30, (dtype, m, n, k)
    assert (8 if dtype.startswith("c") else 2) * m * n * k <= mm.BUDGET[dtype]
    kind, dtype, shape, layout = ff.case(ff.draw(r))
    assert kind in ("c2c", "r2c", "c2r") and len(shape) in (2, 3) and min(shape) >= 2
    assert (dtype in ("f32", "f64")) == (kind == "r2c"), (kind, dtype)
    assert WIDTH[dtype] * math.prod(shape) <= 1 << 30, shape
    dtype, shape, src, dst = rl.case(rl.draw(r))
    assert 2 <= len(shape) <= 6 and min(shape) >= 1 and {src, dst} == {"C", "F"}
    assert WIDTH[dtype] * math.prod(shape) <= 256 << 20, (dtype, shape)
"#,
    );
}
