//! Every spec under examples/ (found by walking the directory, so a new example is covered by
//! adding it): it points at the schema, validates, and runs with the real binary under mpiexec
//! at 1 to 4 ranks (those its `runtime.ranks` allows), exiting 0 with every step's check passed
//! (a sweep's at every point) and a run directory that verifies. Each example's figures are then
//! held against a reference computed here from the init formulas (README "Init values"), not by
//! distrun: the all-reduced arange, the MLP block, the FFT's mean and round trip, the products.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

/// The spec's path from examples/, as the references name it.
fn relative(spec: &Path) -> String {
    let rel = spec.strip_prefix(root().join("examples")).unwrap();
    rel.to_string_lossy().into_owned()
}

/// The rank counts a spec runs at here: its runtime.ranks, or 1 to 4.
fn rank_counts(spec: &Path) -> Vec<usize> {
    let doc: toml::Value = toml::from_str(&std::fs::read_to_string(spec).unwrap()).unwrap();
    match doc
        .get("runtime")
        .and_then(|r| r.get("ranks"))
        .and_then(toml::Value::as_integer)
    {
        Some(p) => vec![p as usize],
        None => vec![1, 2, 3, 4],
    }
}

/// The manifest's steps: a sweep's at every point, each with the point's index.
fn all_steps(m: &Value) -> Vec<(Option<u64>, Value)> {
    match m["points"].as_array() {
        Some(points) => points
            .iter()
            .flat_map(|p| {
                let i = p["index"].as_u64();
                (p["steps"].as_array().unwrap().iter()).map(move |s| (i, s.clone()))
            })
            .collect(),
        None => (m["steps"].as_array().unwrap().iter())
            .map(|s| (None, s.clone()))
            .collect(),
    }
}

/// A written tensor, gathered whole (`p` a sweep point's index).
fn gathered(run: &Path, point: Option<usize>, name: &str) -> (Vec<u64>, Vec<(f64, f64)>) {
    let dir = match point {
        Some(i) => run.join(format!("p{i}")),
        None => run.to_path_buf(),
    };
    read_npy_complex(&dir.join(format!("{name}.npy")))
}

/// distrun's counter-based uniform init (README "Init values"), rounded by `round`.
fn uniform(name: &str, seed: u64, low: f64, high: f64, n: usize) -> Vec<f64> {
    const G: u64 = 0x9E37_79B9_7F4A_7C15;
    let key = xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), seed);
    (0..n as u64)
        .map(|c| {
            let mut z = (key ^ c.wrapping_mul(G)).wrapping_add(G);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            low + (high - low) * ((z >> 11) as f64 * (1.0 / (1u64 << 53) as f64))
        })
        .collect()
}

fn bf16(v: Vec<f64>) -> Vec<f64> {
    v.into_iter()
        .map(|x| half::bf16::from_f64(x).to_f64())
        .collect()
}

/// `a (m x k) @ b (k x n)`, both C order, in f64.
fn matmul(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for l in 0..k {
            let x = a[i * k + l];
            for j in 0..n {
                c[i * n + j] += x * b[l * n + j];
            }
        }
    }
    c
}

/// The largest |x - y| over the largest |y|.
fn relative_error(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len());
    let scale = y.iter().fold(0.0f64, |s, v| s.max(v.abs()));
    let worst = (x.iter().zip(y)).fold(0.0f64, |s, (a, b)| s.max((a - b).abs()));
    worst / scale
}

/// Asserts `got == want` element by element, naming the first difference.
fn assert_exact(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: element count");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: element {i} is {}, expected {}", got[i], want[i]);
    }
}

fn real(v: Vec<(f64, f64)>) -> Vec<f64> {
    v.into_iter().map(|(re, _)| re).collect()
}

#[test]
fn every_example_points_at_the_schema_and_validates() {
    let specs = workload_specs();
    for name in [
        "nccl_sweep/all_collectives.toml",
        "nccl_sweep/all_reduce.toml",
        "megatron_mlp/tensor_parallel.toml",
        "megatron_mlp/sequence_parallel.toml",
        "fft_poisson/slab.toml",
        "fft_poisson/pencil.toml",
        "summa_vs_allgather/algorithms.toml",
        "summa_vs_allgather/grids.toml",
        "dtensor_resharding/chain.toml",
    ] {
        assert!(
            specs.iter().any(|p| relative(p) == name),
            "examples/{name} is missing"
        );
    }
    for spec in &specs {
        let text = std::fs::read_to_string(spec).unwrap();
        let depth = relative(spec).matches('/').count() + 1;
        let header = format!(
            "#:schema {}schemas/distrun.schema.json\n",
            "../".repeat(depth)
        );
        assert!(text.starts_with(&header), "{}", spec.display());
        assert!(
            spec.parent().unwrap().join("README.md").exists(),
            "{} has no README.md beside it",
            spec.display()
        );
        for p in rank_counts(spec) {
            let ran = Distrun::new()
                .args([
                    "validate",
                    spec.to_str().unwrap(),
                    "--ranks",
                    &p.to_string(),
                ])
                .run();
            assert_eq!(
                ran.code,
                0,
                "{} at {p} ranks:\n{}",
                spec.display(),
                ran.stderr
            );
        }
    }
}

#[test]
fn every_example_runs_checked_at_its_rank_counts() {
    let dir = temp_dir("examples");
    for spec in workload_specs() {
        let rel = relative(&spec);
        for p in rank_counts(&spec) {
            let start = std::time::Instant::now();
            let out = dir.join(format!("{}-{p}", rel.replace(['/', '.'], "_")));
            let m = run_ok(p, &spec, &out, &[]);
            let steps = all_steps(&m);
            assert!(!steps.is_empty(), "{rel}: no steps ran");
            for (point, step) in &steps {
                if step["op"] == "barrier" {
                    continue;
                }
                assert_eq!(
                    step["check"]["passed"], true,
                    "{rel} at {p} ranks, point {point:?}, step {}: {}",
                    step["name"], step["check"]
                );
            }
            let verified = Distrun::new().args(["verify", out.to_str().unwrap()]).run();
            assert_eq!(verified.code, 0, "{rel}: {}", verified.stdout);
            reference(&rel, &spec, p, &out, &m, &dir);
            eprintln!("{rel} at {p} ranks: {:.2?}", start.elapsed());
        }
    }
}

/// The figures of one example's run held against what the test computes itself.
fn reference(rel: &str, spec: &Path, p: usize, run: &Path, m: &Value, scratch: &Path) {
    match rel {
        "nccl_sweep/all_reduce.toml" => all_reduce_sums(spec, p, m, scratch),
        "nccl_sweep/all_collectives.toml" => collective_sizes(p, m),
        "megatron_mlp/tensor_parallel.toml" => mlp_block(run, None, "y"),
        "megatron_mlp/sequence_parallel.toml" => mlp_block(run, None, "y_s"),
        "fft_poisson/slab.toml" => {
            for (i, point) in m["points"].as_array().unwrap().iter().enumerate() {
                let n = point["values"]["tensors.rho.shape"][0].as_u64().unwrap() as usize;
                poisson_pair(run, Some(i), n);
            }
        }
        "fft_poisson/pencil.toml" => poisson_pair(run, None, 64),
        "summa_vs_allgather/algorithms.toml" => products(run, m, "a", "b", [512, 384, 640]),
        "summa_vs_allgather/grids.toml" => products(run, m, "a", "a", [512, 512, 512]),
        "dtensor_resharding/chain.toml" => resharded(run),
        _ => {}
    }
}

/// The all-reduce sweep's nccl-tests figures (size, count, busbw = algbw 2(P-1)/P) at every
/// point, and at 3 ranks its sums: the spec run again writing y (its [output] added), each
/// element the sum over the ranks of the arange `r n + i`: `P i + n P (P - 1) / 2`.
fn all_reduce_sums(spec: &Path, p: usize, m: &Value, scratch: &Path) {
    for point in m["points"].as_array().unwrap() {
        let n = point["values"]["tensors.x.shape[0]"].as_u64().unwrap();
        let s = &point["steps"][0];
        assert_eq!(
            (s["count"].as_u64(), s["bytes"].as_u64()),
            (Some(n), Some(4 * n))
        );
        if p > 1 {
            let factor = s["busbw_gbs"].as_f64().unwrap() / s["algbw_gbs"].as_f64().unwrap();
            let want = 2.0 * (p - 1) as f64 / p as f64;
            assert!((factor - want).abs() < 1e-9, "busbw/algbw {factor}");
        }
    }
    if p != 3 {
        return;
    }
    let text =
        std::fs::read_to_string(spec).unwrap() + "\n[output]\ntensors = [\"y\"]\ngather = true\n";
    let copy = scratch.join("all_reduce_written.toml");
    std::fs::write(&copy, text).unwrap();
    let out = scratch.join("all_reduce_written");
    let m = run_ok(p, &copy, &out, &[]);
    for (i, point) in m["points"].as_array().unwrap().iter().enumerate() {
        let n = point["values"]["tensors.x.shape[0]"].as_u64().unwrap() as f64;
        let (_, y) = gathered(&out, Some(i), "y");
        let pf = p as f64;
        let want: Vec<f64> = (0..y.len())
            .map(|i| pf * i as f64 + n * pf * (pf - 1.0) / 2.0)
            .collect();
        assert_exact(&real(y), &want, &format!("y of point {i}"));
    }
}

/// Each collective's size in the all-collectives sweep, as nccl-tests reports it, from x's
/// [P, P, n] f32: the whole tensor for the reductions, gathers and broadcast, a rank's own
/// [1, P, n] send buffer for all_to_all and send_recv.
fn collective_sizes(p: usize, m: &Value) {
    for point in m["points"].as_array().unwrap() {
        let n = point["values"]["tensors.x.shape[2]"].as_u64().unwrap();
        let whole = 4 * (p * p) as u64 * n;
        for s in point["steps"].as_array().unwrap() {
            let want = match s["op"].as_str().unwrap() {
                "barrier" => continue,
                "all_to_all" | "send_recv" => whole / p as u64,
                _ => whole,
            };
            assert_eq!(s["bytes"].as_u64(), Some(want), "{}", s["name"]);
        }
    }
}

/// The MLP block recomputed in f64 from the inits: y = gelu(x @ w1 + b1) @ w2 + b2 (h rounded to
/// bf16, as the spec's h is), within bf16's rounding of h, the partial products and y.
fn mlp_block(run: &Path, point: Option<usize>, out: &str) {
    let (t, hidden, ffn) = (256, 128, 512);
    let x = bf16(uniform("x", 11, -1.0, 1.0, t * hidden));
    let w1 = bf16(uniform("w1", 11, -0.088, 0.088, hidden * ffn));
    let b1 = bf16(uniform("b1", 11, -0.088, 0.088, ffn));
    let w2 = bf16(uniform("w2", 11, -0.044, 0.044, ffn * hidden));
    let b2 = bf16(uniform("b2", 11, -0.044, 0.044, hidden));
    let gelu = |v: f64| {
        0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
    };
    let mut h = matmul(&x, &w1, t, hidden, ffn);
    for (i, v) in h.iter_mut().enumerate() {
        *v = half::bf16::from_f64(gelu(*v + b1[i % ffn])).to_f64();
    }
    let mut y = matmul(&h, &w2, t, ffn, hidden);
    for (i, v) in y.iter_mut().enumerate() {
        *v += b2[i % hidden];
    }
    let (shape, got) = gathered(run, point, out);
    assert_eq!(shape, [t as u64, hidden as u64]);
    let err = relative_error(&real(got), &y);
    assert!(err < 2e-2, "{out}: relative error {err}");
}

/// The FFT pair on an n^3 cube: phi is rho again (the uniform init), and the spectrum's mean
/// term rho_hat[0, 0, 0] is the sum of rho.
fn poisson_pair(run: &Path, point: Option<usize>, n: usize) {
    let rho = uniform("rho", 5, -1.0, 1.0, n * n * n);
    let (shape, phi) = gathered(run, point, "phi");
    assert_eq!(shape, [n as u64; 3]);
    let err = relative_error(&real(phi), &rho);
    assert!(err < 1e-12, "phi against rho: {err}");
    let (shape, spectrum) = gathered(run, point, "rho_hat");
    assert_eq!(shape, [n as u64, n as u64, (n / 2 + 1) as u64]);
    let sum: f64 = rho.iter().sum();
    let (re, im) = spectrum[0];
    assert!(
        (re - sum).abs() < 1e-9 && im.abs() < 1e-9,
        "{re} {im} against {sum}"
    );
}

/// Every point's c against `a @ b` from the uniform inits (f64), whatever the algorithm.
fn products(run: &Path, m: &Value, a: &str, b: &str, [mm, k, n]: [usize; 3]) {
    let av = uniform(a, 7, -1.0, 1.0, mm * k);
    let bv = uniform(b, 7, -1.0, 1.0, k * n);
    let c = matmul(&av, &bv, mm, k, n);
    for (i, point) in m["points"].as_array().unwrap().iter().enumerate() {
        let (shape, got) = gathered(run, Some(i), "c");
        assert_eq!(shape, [mm as u64, n as u64]);
        let err = relative_error(&real(got), &c);
        assert!(err < 1e-12, "{}: {err}", point["values"]);
    }
}

/// The resharding chain: x_2d is x's arange wherever it went; y (x @ ones) is each row's sum.
fn resharded(run: &Path) {
    let (rows, cols, n) = (96usize, 64usize, 32usize);
    let (_, x2d) = gathered(run, None, "x_2d");
    let want: Vec<f64> = (0..rows * cols).map(|i| i as f64).collect();
    assert_exact(&real(x2d), &want, "x_2d");
    let row_sum = |i: usize| (cols * cols * i) as f64 + (cols * (cols - 1) / 2) as f64;
    let want: Vec<f64> = (0..rows * n).map(|e| row_sum(e / n)).collect();
    for name in ["y_s0", "y_rep", "y_sum"] {
        let (shape, y) = gathered(run, None, name);
        assert_eq!(shape, [rows as u64, n as u64]);
        assert_exact(&real(y), &want, name);
    }
}
