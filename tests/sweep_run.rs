//! Sweeps from the CLI: one launch runs every point of a `[sweep]` at 1 to 4 ranks; the manifest
//! names each point's values, its steps' figures and its tensors (files under `p<index>/`), each
//! result equal to the reduction the test computes itself; `plan --json` and `validate` cover
//! every point; `verify` checks the points' files.

mod common;
use common::*;

use serde_json::Value;
use std::time::Duration;

/// An all-reduce and a reduce of an `arange` partial tensor, swept over sizes (nccl-tests'
/// geometric -b/-e/-f), dtypes and the reduction.
const SPEC: &str = r#"
[job]
name = "sweep-run"

[runtime]
device = "cpu"

[tensors.x]
shape = [4]
dtype = "f64"
distribution = "partial"
init = { arange = {} }

[[steps]]
op = "all_reduce"
input = "x"
out = "y"
check = true

[[steps]]
op = "reduce"
input = "x"
out = "r"
root = 0
check = true

[output]
tensors = ["y", "r"]
gather = true

[sweep]
"tensors.x.shape[0]" = { from = 4, to = 64, factor = 4 }
"tensors.x.dtype" = ["f64", "i32"]
"steps[0].reduce" = ["sum", "max"]
"#;

/// The all-reduce of `arange` over the stacked `[p, n]` partial tensor: element i of rank r is
/// `r * n + i`.
fn reduced(p: u64, n: u64, reduce: &str) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let each = (0..p).map(|r| (r * n + i) as f64);
            match reduce {
                "sum" => each.sum(),
                _ => each.fold(f64::MIN, f64::max),
            }
        })
        .collect()
}

#[test]
fn a_sweep_runs_every_point_in_one_launch_at_1_to_4_ranks() {
    let spec = temp_spec("sweep-run", SPEC);
    for p in 1..=4u64 {
        let out = spec.parent().unwrap().join(format!("run-{p}"));
        let m = run_ok(p as usize, &spec, &out, &[]);
        assert!(m["steps"].as_array().unwrap().is_empty());
        assert_eq!(m["sweep"]["steps[0].reduce"][1], "max");
        let points = m["points"].as_array().unwrap();
        assert_eq!(points.len(), 3 * 2 * 2, "{p} ranks");
        for (i, point) in points.iter().enumerate() {
            let values = &point["values"];
            // The last key varies fastest.
            let n = [4, 16, 64][i / 4];
            let dtype = ["f64", "i32"][i / 2 % 2];
            let reduce = ["sum", "max"][i % 2];
            assert_eq!(point["index"], i as u64);
            assert_eq!(values["tensors.x.shape[0]"], n);
            assert_eq!(values["tensors.x.dtype"], dtype);
            assert_eq!(values["steps[0].reduce"], reduce);
            // The steps stand alone: nccl-tests' size, count, type and redop.
            let size = if dtype == "f64" { 8 } else { 4 };
            let all_reduce = &point["steps"][0];
            assert_eq!(all_reduce["bytes"], n * size, "{point}");
            assert_eq!(all_reduce["count"], n);
            assert_eq!(all_reduce["dtype"], dtype);
            assert_eq!(all_reduce["reduce"], reduce);
            assert_eq!(point["steps"][1]["root"], 0);
            assert_eq!(point["steps"][1]["reduce"], "sum");
            for step in point["steps"].as_array().unwrap() {
                assert_eq!(step["check"]["passed"], true, "{step}");
            }
            // Each point's results, in its own directory, against the reduction done here.
            let file = |t: &str| point["tensors"][t]["file"].as_str().unwrap().to_string();
            assert_eq!(file("y"), format!("p{i}/y.npy"));
            let (shape, y) = read_npy(&out.join(file("y")));
            assert_eq!(shape, [n]);
            assert_eq!(y, reduced(p, n, reduce), "{p} ranks, point {i}");
            let (_, r) = read_npy(&out.join(file("r")));
            assert_eq!(r, reduced(p, n, "sum"), "{p} ranks, point {i}");
        }
        let verified = Distrun::new().args(["verify", out.to_str().unwrap()]).run();
        assert_eq!(verified.code, 0, "{}", verified.stderr);
        assert!(verified.stdout.contains("files verified"));
    }
    // A point's file removed is named.
    let out = spec.parent().unwrap().join("run-3");
    std::fs::remove_file(out.join("p5/y.rank1.npy")).unwrap();
    let verified = Distrun::new().args(["verify", out.to_str().unwrap()]).run();
    assert_eq!(verified.code, 3);
    assert!(
        verified.stderr.contains("p5/y.rank1.npy: missing"),
        "{}",
        verified.stderr
    );
}

#[test]
fn plan_and_validate_cover_every_point() {
    let spec = temp_spec("sweep-plan", SPEC);
    let path = spec.to_str().unwrap();
    let ran = Distrun::new()
        .args(["plan", path, "--ranks", "3", "--json"])
        .run();
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let plan: Value = serde_json::from_str(&ran.stdout).unwrap();
    let points = plan["points"].as_array().unwrap();
    assert_eq!(points.len(), 12);
    assert_eq!(plan["sweep"]["tensors.x.dtype"][1], "i32");
    let last = &points[11];
    assert_eq!(last["values"]["tensors.x.shape[0]"], 64);
    assert_eq!(last["ranks"], 3);
    assert_eq!(last["tensors"]["x"]["local_shapes"][2][0], 64);
    assert_eq!(last["tensors"]["x"]["dtype"], "i32");
    assert_eq!(last["steps"][0]["bytes"], 256);
    let table = Distrun::new().args(["plan", path, "--ranks", "2"]).run();
    assert_eq!(table.code, 0);
    assert!(
        table
            .stdout
            .contains("sweep point 11 (tensors.x.shape[0] = 64, tensors.x.dtype = \"i32\", steps[0].reduce = \"max\")"),
        "{}",
        table.stdout
    );
    // A point that only a rank count refuses: 5 rows cannot go one to each of 4 ranks.
    let ring = SPEC.replace(
        "[output]",
        "[tensors.ring]\nshape = [4, 2]\ndtype = \"u8\"\ndistribution = { slab = 0 }\ninit = \"ones\"\n\n[[steps]]\nop = \"send_recv\"\ninput = \"ring\"\nout = \"next\"\n\n[output]",
    ) + "\"tensors.ring.shape[0]\" = [4, 5]\n";
    let ring = temp_spec("sweep-ring", &ring);
    let ran = Distrun::new()
        .args(["validate", "--ranks", "4", ring.to_str().unwrap()])
        .run();
    assert_eq!(ran.code, 2);
    let named: Vec<&str> = ran
        .stderr
        .lines()
        .filter(|l| l.contains("send_recv needs"))
        .collect();
    assert_eq!(named.len(), 12, "{}", ran.stderr);
    assert!(
        named
            .iter()
            .all(|l| l.contains("tensors.ring.shape[0] = 5"))
    );
    let ran = mpirun(
        4,
        &[
            "run",
            ring.to_str().unwrap(),
            "--out",
            ring.parent().unwrap().join("never").to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        !ring.parent().unwrap().join("never").exists(),
        "nothing runs"
    );
}
