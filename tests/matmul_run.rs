//! Distributed matmul under mpiexec at 1-4 ranks: every algorithm, operand distributions and
//! layouts, transposes, conjugates, alpha/beta/c, epilogs and dtypes, the product's layout pinned
//! and weighed, at odd sizes, each result compared with a naive product computed here from
//! values this test writes as .npy files.

mod common;
use common::*;
use distrun::spec::tensor::DType;
use std::path::Path;
use std::time::Duration;

const M: usize = 37;
const N: usize = 53;
const K: usize = 29;

/// Deterministic test values in [-1, 1), quantized so that f16 and bf16 hold them exactly.
fn values(seed: u64, n: usize, complex: bool) -> Vec<(f64, f64)> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) % 128) as f64 / 64.0 - 1.0
    };
    (0..n)
        .map(|_| (next(), if complex { next() } else { 0.0 }))
        .collect()
}

/// One matmul case.
struct Case {
    dtype: DType,
    a_dist: &'static str,
    b_dist: &'static str,
    layouts: (&'static str, &'static str),
    transpose: (bool, bool),
    conjugate: (bool, bool),
    alpha: f64,
    beta_c: Option<(f64, &'static str)>,
    epilog: Option<&'static str>,
    algorithm: &'static str,
    pipeline: &'static str,
    product_layout: &'static str,
    out_dist: Option<&'static str>,
    /// The bias runs along the result's columns (one per column, n of them).
    bias_per_column: bool,
}

fn case(dtype: DType, a_dist: &'static str, b_dist: &'static str) -> Case {
    Case {
        dtype,
        a_dist,
        b_dist,
        layouts: ("C", "C"),
        transpose: (false, false),
        conjugate: (false, false),
        alpha: 1.0,
        beta_c: None,
        epilog: None,
        algorithm: "auto",
        pipeline: "auto",
        product_layout: "auto",
        out_dist: None,
        bias_per_column: false,
    }
}

const DISTS: [&str; 5] = [
    "{ slab = 0 }",
    "{ slab = 1 }",
    "{ block = {} }",
    "{ block_cyclic = { blocks = [5, 7] } }",
    "\"replicated\"",
];

fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    // Every pair of operand distributions (auto picks the algorithm), layouts alternating.
    for (i, a) in DISTS.iter().enumerate() {
        for (j, b) in DISTS.iter().enumerate() {
            let mut c = case(DType::F64, a, b);
            c.layouts = (
                if i % 2 == 0 { "C" } else { "F" },
                if (i + j) % 2 == 0 { "F" } else { "C" },
            );
            all.push(c);
        }
    }
    // Transposes in every combination, in Fortran order, f32.
    for t in [(true, false), (false, true), (true, true)] {
        let mut c = case(DType::F32, "{ slab = 1 }", "{ slab = 0 }");
        c.transpose = t;
        c.layouts = ("F", "F");
        all.push(c);
    }
    // Conjugates (need the transposes), complex.
    for dtype in [DType::C128, DType::C64] {
        let mut c = case(
            dtype,
            "{ slab = 0 }",
            "{ block_cyclic = { blocks = [4, 4] } }",
        );
        c.transpose = (true, true);
        c.conjugate = (true, true);
        all.push(c);
    }
    // alpha, beta and c (in another distribution than the result), and a declared F result.
    let mut c = case(DType::F64, "{ slab = 0 }", "\"replicated\"");
    c.alpha = 0.5;
    c.beta_c = Some((-2.0, "{ slab = 1 }"));
    c.out_dist = Some("{ block_cyclic = { blocks = [3, 8] } }");
    all.push(c);
    // Into a partial result (Megatron's row-parallel layer before its all_reduce): operands
    // already split along k, operands that must move there, c and a bias (added on rank 0).
    for (dtype, a, b, t, e, c_dist) in [
        (
            DType::F64,
            "{ slab = 1 }",
            "{ slab = 0 }",
            (false, false),
            None,
            None,
        ),
        (
            DType::F32,
            "\"replicated\"",
            "\"replicated\"",
            (false, false),
            Some("bias"),
            Some("{ slab = 0 }"),
        ),
        (
            DType::C64,
            "{ block_cyclic = { blocks = [5, 7] } }",
            "{ block = {} }",
            (true, true),
            None,
            Some("\"replicated\""),
        ),
        (
            DType::Bf16,
            "{ slab = 0 }",
            "{ slab = 1 }",
            (false, true),
            Some("bias"),
            None,
        ),
    ] {
        let mut c = case(dtype, a, b);
        (c.transpose, c.epilog, c.out_dist) = (t, e, Some("\"partial\""));
        c.conjugate = (t.0 && dtype.is_complex(), false);
        c.beta_c = c_dist.map(|d| (0.75, d));
        all.push(c);
    }
    // Every epilog.
    for e in ["relu", "gelu", "bias", "relu_bias", "gelu_bias"] {
        let mut c = case(DType::F32, "{ slab = 1 }", "{ slab = 0 }");
        c.epilog = Some(e);
        all.push(c);
    }
    // A bias per column (an output feature's, as torch.nn.Linear): every epilog that reads one,
    // results in both layouts (the GPU fuses it into a C-order result), block-cyclic, partial.
    for (e, dtype, out_dist) in [
        ("bias", DType::F32, None),
        ("relu_bias", DType::F16, Some("{ slab = 1 }")),
        (
            "gelu_bias",
            DType::F64,
            Some("{ block_cyclic = { blocks = [4, 6] } }"),
        ),
        ("bias", DType::C128, Some("\"partial\"")),
        ("gelu_bias", DType::Bf16, Some("{ slab = 0 }")),
    ] {
        let mut c = case(dtype, "{ slab = 0 }", "{ slab = 1 }");
        (c.epilog, c.out_dist, c.bias_per_column) = (Some(e), out_dist, true);
        all.push(c);
    }
    // GELU's tail rounds to f16's subnormals: the check must allow for their spacing.
    for e in ["gelu", "gelu_bias"] {
        let mut c = case(DType::F16, "{ slab = 1 }", "{ slab = 0 }");
        c.epilog = Some(e);
        all.push(c);
    }
    // Half types accumulate in f32.
    for dtype in [DType::F16, DType::Bf16] {
        all.push(case(
            dtype,
            "{ block_cyclic = { blocks = [5, 7] } }",
            "{ block_cyclic = { blocks = [7, 3] } }",
        ));
        all.push(case(dtype, "{ slab = 1 }", "{ slab = 0 }"));
    }
    // Every algorithm forced.
    for (alg, a, b) in [
        ("local", "{ slab = 0 }", "\"replicated\""),
        ("ag_gemm", "{ slab = 0 }", "{ slab = 1 }"),
        ("gemm_rs", "{ slab = 1 }", "{ slab = 0 }"),
        ("gemm_ar", "{ slab = 1 }", "{ slab = 0 }"),
        (
            "summa",
            "{ block_cyclic = { blocks = [5, 7] } }",
            "{ block_cyclic = { blocks = [7, 3] } }",
        ),
        ("summa", "{ block = {} }", "{ block = {} }"),
        ("redistribute", "{ block = {} }", "{ slab = 1 }"),
    ] {
        let mut c = case(DType::F64, a, b);
        c.algorithm = alg;
        all.push(c);
    }
    // A gathered operand in rounds and in one exchange, each pinned.
    for pipeline in ["rounds", "whole"] {
        for (alg, a, b) in [
            ("ag_gemm", "{ slab = 0 }", "{ slab = 1 }"),
            ("ag_gemm", "{ slab = 1 }", "{ slab = 1 }"),
            ("summa", "{ block = {} }", "{ block = {} }"),
        ] {
            let mut c = case(DType::F32, a, b);
            (c.algorithm, c.pipeline) = (alg, pipeline);
            all.push(c);
        }
    }
    // The product pinned to either layout where the GEMM writes the result itself: the other
    // one than the result's changed after (a local product, one left in row slabs, one that
    // moves to the result's distribution after), transposed and conjugated, in C and F order.
    for (layout, dtype, a, b, t, out_dist) in [
        (
            "C",
            DType::F64,
            "\"replicated\"",
            "\"replicated\"",
            (false, false),
            Some("\"replicated\""),
        ),
        (
            "F",
            DType::C128,
            "{ slab = 0 }",
            "\"replicated\"",
            (true, true),
            None,
        ),
        (
            "C",
            DType::F32,
            "{ slab = 0 }",
            "\"replicated\"",
            (false, true),
            Some("{ slab = 0 }"),
        ),
        (
            "F",
            DType::C64,
            "{ slab = 0 }",
            "{ slab = 1 }",
            (false, false),
            Some("{ block_cyclic = { blocks = [5, 7] } }"),
        ),
    ] {
        let mut c = case(dtype, a, b);
        (c.product_layout, c.transpose, c.out_dist) = (layout, t, out_dist);
        c.conjugate = (t.0 && dtype.is_complex(), t.1 && dtype.is_complex());
        all.push(c);
    }
    // SUMMA's slices of k add up (at 4 ranks, a 2x2 grid): in f32 for a half type, before the
    // epilog, complex, in Fortran order.
    for (dtype, epilog, layouts) in [
        (DType::F16, None, ("C", "C")),
        (DType::F32, Some("relu_bias"), ("F", "C")),
        (DType::C64, None, ("C", "F")),
    ] {
        let mut c = case(
            dtype,
            "{ block_cyclic = { blocks = [5, 7] } }",
            "{ block_cyclic = { blocks = [7, 3] } }",
        );
        (c.algorithm, c.epilog, c.layouts) = ("summa", epilog, layouts);
        c.pipeline = "rounds";
        all.push(c);
    }
    all
}

fn dtype_name(d: DType) -> &'static str {
    d.name()
}

/// The spec of every case, with the .npy files it reads; returns the spec's path.
fn write_spec(dir: &Path, cases: &[Case]) -> std::path::PathBuf {
    let mut s = String::from("[job]\nname = \"matmul\"\n");
    let mut outs = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let complex = c.dtype.is_complex();
        let a_shape = if c.transpose.0 {
            [K as u64, M as u64]
        } else {
            [M as u64, K as u64]
        };
        let b_shape = if c.transpose.1 {
            [N as u64, K as u64]
        } else {
            [K as u64, N as u64]
        };
        write_values(
            dir,
            &format!("a{i}"),
            c.dtype,
            &a_shape,
            &values(3 * i as u64 + 1, M * K, complex),
        );
        write_values(
            dir,
            &format!("b{i}"),
            c.dtype,
            &b_shape,
            &values(3 * i as u64 + 2, K * N, complex),
        );
        let d = dtype_name(c.dtype);
        s += &format!(
            "[tensors.a{i}]\nshape = {a_shape:?}\ndtype = \"{d}\"\nlayout = \"{}\"\ndistribution = {}\ninit = {{ npy = \"a{i}.npy\" }}\n",
            c.layouts.0, c.a_dist
        );
        s += &format!(
            "[tensors.b{i}]\nshape = {b_shape:?}\ndtype = \"{d}\"\nlayout = \"{}\"\ndistribution = {}\ninit = {{ npy = \"b{i}.npy\" }}\n",
            c.layouts.1, c.b_dist
        );
        let mut step = format!(
            "[[steps]]\nop = \"matmul\"\na = \"a{i}\"\nb = \"b{i}\"\nout = \"d{i}\"\nalpha = {:?}\ntranspose_a = {}\ntranspose_b = {}\nconjugate_a = {}\nconjugate_b = {}\nalgorithm = \"{}\"\npipeline = \"{}\"\nproduct_layout = \"{}\"\ncheck = true\nwarmup = 0\niterations = 1\n",
            c.alpha,
            c.transpose.0,
            c.transpose.1,
            c.conjugate.0,
            c.conjugate.1,
            c.algorithm,
            c.pipeline,
            c.product_layout
        );
        if let Some((beta, dist)) = c.beta_c {
            write_values(
                dir,
                &format!("c{i}"),
                c.dtype,
                &[M as u64, N as u64],
                &values(3 * i as u64 + 3, M * N, complex),
            );
            s += &format!(
                "[tensors.c{i}]\nshape = [{M}, {N}]\ndtype = \"{d}\"\ndistribution = {dist}\ninit = {{ npy = \"c{i}.npy\" }}\n"
            );
            step += &format!("c = \"c{i}\"\nbeta = {beta:?}\n");
        }
        if let Some(e) = c.epilog {
            step += &format!("epilog = \"{e}\"\n");
            if e.contains("bias") {
                let (len, per) = match c.bias_per_column {
                    true => (N, "column"),
                    false => (M, "row"),
                };
                write_values(
                    dir,
                    &format!("bias{i}"),
                    c.dtype,
                    &[len as u64],
                    &values(3 * i as u64 + 3, len, false),
                );
                s += &format!(
                    "[tensors.bias{i}]\nshape = [{len}]\ndtype = \"{d}\"\ninit = {{ npy = \"bias{i}.npy\" }}\n"
                );
                step += &format!("bias = \"bias{i}\"\nbias_per = \"{per}\"\n");
            }
        }
        if let Some(dist) = c.out_dist {
            s += &format!(
                "[tensors.d{i}]\nshape = [{M}, {N}]\ndtype = \"{d}\"\nlayout = \"F\"\ndistribution = {dist}\n"
            );
        }
        s += &step;
        outs.push(format!("\"d{i}\""));
    }
    s += &format!("[output]\ngather = true\ntensors = [{}]\n", outs.join(", "));
    let path = dir.join("matmul.toml");
    std::fs::write(&path, s).unwrap();
    path
}

fn mul(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

/// The naive product of case i, from the values the test wrote.
fn reference(i: usize, c: &Case) -> Vec<(f64, f64)> {
    let complex = c.dtype.is_complex();
    // The values as the dtype stores them.
    let round = |v: (f64, f64)| match c.dtype {
        DType::F32 | DType::C64 => (v.0 as f32 as f64, v.1 as f32 as f64),
        DType::F16 => (half::f16::from_f64(v.0).to_f64(), 0.0),
        DType::Bf16 => (half::bf16::from_f64(v.0).to_f64(), 0.0),
        _ => v,
    };
    let a: Vec<_> = values(3 * i as u64 + 1, M * K, complex)
        .into_iter()
        .map(round)
        .collect();
    let b: Vec<_> = values(3 * i as u64 + 2, K * N, complex)
        .into_iter()
        .map(round)
        .collect();
    let op_a = |r: usize, k: usize| {
        let v = if c.transpose.0 {
            a[k * M + r]
        } else {
            a[r * K + k]
        };
        if c.conjugate.0 { (v.0, -v.1) } else { v }
    };
    let op_b = |k: usize, j: usize| {
        let v = if c.transpose.1 {
            b[j * K + k]
        } else {
            b[k * N + j]
        };
        if c.conjugate.1 { (v.0, -v.1) } else { v }
    };
    let cm: Option<Vec<_>> = c.beta_c.map(|_| {
        values(3 * i as u64 + 3, M * N, complex)
            .into_iter()
            .map(round)
            .collect()
    });
    let bias_len = if c.bias_per_column { N } else { M };
    let bias: Vec<_> = values(3 * i as u64 + 3, bias_len, false)
        .into_iter()
        .map(round)
        .collect();
    let gelu =
        |x: f64| 0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh());
    let mut out = Vec::with_capacity(M * N);
    for r in 0..M {
        for j in 0..N {
            let mut s = (0.0, 0.0);
            for k in 0..K {
                let t = mul(op_a(r, k), op_b(k, j));
                s = (s.0 + t.0, s.1 + t.1);
            }
            let mut v = (c.alpha * s.0, c.alpha * s.1);
            if let (Some((beta, _)), Some(cm)) = (c.beta_c, &cm) {
                v = (v.0 + beta * cm[r * N + j].0, v.1 + beta * cm[r * N + j].1);
            }
            let bias = bias[if c.bias_per_column { j } else { r }].0;
            match c.epilog {
                Some("relu") => v.0 = v.0.max(0.0),
                Some("gelu") => v.0 = gelu(v.0),
                Some("bias") => v.0 += bias,
                Some("relu_bias") => v.0 = (v.0 + bias).max(0.0),
                Some("gelu_bias") => v.0 = gelu(v.0 + bias),
                _ => {}
            }
            out.push(v);
        }
    }
    out
}

#[test]
fn every_algorithm_distribution_and_dtype_at_1_to_4_ranks() {
    run_and_compare(&cases(), 1..=4, "matmul");
}

/// SUMMA on a 3x3 grid: two rounds along each grid row and column, chunks whose pieces arrive
/// in different rounds on different ranks.
#[test]
fn summa_on_a_three_by_three_grid() {
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.algorithm == "summa")
        .collect();
    assert!(cases.len() >= 5);
    run_and_compare(&cases, 9..=9, "summa");
}

/// The manifest's `pipeline` (null where no operand could move in rounds) agrees with the
/// spec: pinned `rounds` runs in rounds wherever they can (from 2 ranks, ag_gemm gathering
/// pieces that each hold all of k; SUMMA on a square grid), `whole` never does, and `auto`
/// keeps the faster of its trials.
fn check_pipeline(c: &Case, p: usize, record: &serde_json::Value, at: &str) {
    let square = (2..=p).any(|q| q * q == p);
    let whole_k =
        (c.a_dist, c.b_dist, c.transpose) == ("{ slab = 0 }", "{ slab = 1 }", (false, false));
    let can = match c.algorithm {
        "ag_gemm" => p >= 2 && whole_k,
        "summa" => square,
        _ => false,
    };
    let trials = (record["rounds_s"].as_f64(), record["whole_s"].as_f64());
    match c.pipeline {
        "whole" => assert!(record.is_null(), "{at}: {record}"),
        "rounds" => {
            assert!(!can || record["chosen"] == "rounds", "{at}: {record}");
            assert!(record.is_null() || trials == (None, None), "{at}: {record}");
        }
        _ if record.is_null() => {}
        _ => {
            let (Some(rounds), Some(whole)) = trials else {
                panic!("{at}: auto without both trials: {record}");
            };
            let faster = if rounds <= whole { "rounds" } else { "whole" };
            assert_eq!(record["chosen"], faster, "{at}: {record}");
        }
    }
}

/// The manifest's `product_layout` (null where the GEMM does not write the result itself, or
/// for `auto` where writing it in the other layout would cost too much to weigh) agrees with
/// the spec: a pinned layout is the one written, with no trials; `auto` keeps the faster.
fn check_product_layout(pinned: &str, record: &serde_json::Value, at: &str) {
    if record.is_null() {
        return;
    }
    let trials = (record["c_s"].as_f64(), record["f_s"].as_f64());
    if pinned != "auto" {
        assert_eq!(record["chosen"], pinned, "{at}: {record}");
        assert_eq!(trials, (None, None), "{at}: {record}");
        return;
    }
    let (Some(c), Some(f)) = trials else {
        panic!("{at}: auto without both trials: {record}");
    };
    let (kept, other) = if record["chosen"] == "C" {
        (c, f)
    } else {
        (f, c)
    };
    assert!(kept <= other, "{at}: kept the slower: {record}");
}

/// Runs `cases` at each rank count; every check passes and every result matches the reference.
fn run_and_compare(cases: &[Case], ranks: std::ops::RangeInclusive<usize>, name: &str) {
    for p in ranks {
        let dir = temp_dir(&format!("{name}{p}"));
        let spec = write_spec(&dir, cases);
        let out = dir.join("run");
        let m = run_ok(p, &spec, &out, &[]);
        let steps = m["steps"].as_array().unwrap();
        let tried = steps.iter().any(|s| s["pipeline"]["whole_s"].is_number());
        assert!(
            tried || p == 1 || cases.iter().all(|c| c.pipeline != "auto"),
            "{p} ranks: no trial of rounds against one exchange"
        );
        for (i, c) in cases.iter().enumerate() {
            let step = &m["steps"][i];
            assert_eq!(step["check"]["passed"], true, "{p} ranks, case {i}: {step}");
            if c.algorithm != "auto" {
                assert_eq!(step["algorithm"], c.algorithm, "case {i}");
            }
            check_pipeline(c, p, &step["pipeline"], &format!("{p} ranks, case {i}"));
            let record = &step["product_layout"];
            check_product_layout(c.product_layout, record, &format!("{p} ranks, case {i}"));
            // A local product of replicated operands is written by its GEMM, in place.
            let local = (c.a_dist, c.b_dist) == ("\"replicated\"", "\"replicated\"");
            assert!(
                c.product_layout == "auto" || !local || c.epilog.is_some() || !record.is_null(),
                "{p} ranks, case {i}: no product layout recorded"
            );
            assert!(step["tflops"].as_f64().unwrap() > 0.0);
            let (shape, got) = read_npy_complex(&out.join(format!("d{i}.npy")));
            // A partial result is written as the stack of the ranks' pieces: they add up to it.
            let got = if c.out_dist == Some("\"partial\"") {
                assert_eq!(shape, [p as u64, M as u64, N as u64]);
                assert_eq!(step["algorithm"], "k_split", "case {i}");
                (0..M * N)
                    .map(|e| {
                        (0..p).fold((0.0, 0.0), |s, r| {
                            (s.0 + got[r * M * N + e].0, s.1 + got[r * M * N + e].1)
                        })
                    })
                    .collect()
            } else {
                assert_eq!(shape, [M as u64, N as u64]);
                got
            };
            let want = reference(i, c);
            let tol = match c.dtype {
                DType::F64 | DType::C128 => 1e-12,
                DType::F32 | DType::C64 => 1e-5,
                DType::F16 => 2e-3,
                _ => 1.6e-2,
            } * K as f64;
            for (e, (g, w)) in got.iter().zip(&want).enumerate() {
                let err = (g.0 - w.0).hypot(g.1 - w.1);
                assert!(
                    err <= tol * w.0.hypot(w.1).max(1.0),
                    "{p} ranks, case {i} ({:?}), element {e}: {g:?} vs {w:?}",
                    c.dtype
                );
            }
        }
    }
}

#[test]
fn freivalds_catches_a_corrupted_product() {
    for p in [1usize, 3] {
        let dir = temp_dir(&format!("mmcorrupt{p}"));
        let out = dir.join("run");
        let ran = mpirun(
            p,
            &[
                "run",
                "specs/gemm.toml",
                "--out",
                out.to_str().unwrap(),
                "-q",
            ],
            &[("DISTRUN_CORRUPT_STEP", "0")],
            Duration::from_secs(120),
        );
        assert_eq!(ran.code, 3, "{}", ran.stderr);
        assert_eq!(manifest(&out)["steps"][0]["check"]["passed"], false);
    }
}

/// The nvmath example (ag_gemm, a ring of 2) tries rounds against one exchange before its own
/// runs, and its step line says which it kept and the trial times, as the manifest does.
#[test]
fn the_step_line_says_how_the_trials_went() {
    let dir = temp_dir("mm-trials");
    let out = dir.join("run");
    let ran = mpirun(
        2,
        &["run", "specs/gemm.toml", "--out", out.to_str().unwrap()],
        &[],
        Duration::from_secs(120),
    );
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let record = &manifest(&out)["steps"][0]["pipeline"];
    let (rounds, whole) = (record["rounds_s"].as_f64(), record["whole_s"].as_f64());
    let (Some(rounds), Some(whole)) = (rounds, whole) else {
        panic!("no trials recorded: {record}");
    };
    let kept = if record["chosen"] == "rounds" {
        "in rounds"
    } else {
        "in one exchange"
    };
    // Times as the console gives them: us below a millisecond, ms below a second.
    let time = |s: f64| match s {
        s if s < 1e-3 => format!("{:.2} us", s * 1e6),
        s if s < 1.0 => format!("{:.3} ms", s * 1e3),
        s => format!("{s:.3} s"),
    };
    let said = format!(
        "{kept} (trials: rounds {}, whole {})",
        time(rounds),
        time(whole)
    );
    assert!(ran.stderr.contains(&said), "{said} not in:\n{}", ran.stderr);
}

/// Operands some ranks hold none of: a root-held b (gathered in one exchange, never in ring
/// rounds), and an f16 product with fewer result columns than ranks (ranks with empty blocks),
/// each against a naive product of the values the test wrote.
#[test]
fn operands_some_ranks_hold_none_of() {
    let dir = temp_dir("mm-empty");
    let (m, k, n) = (4usize, 6usize, 2usize);
    let a = values(11, m * k, false);
    let b = values(12, k * n, false);
    for dtype in [DType::F64, DType::F16] {
        let name = format!("{dtype}");
        write_values(&dir, &format!("a{name}"), dtype, &[m as u64, k as u64], &a);
        write_values(&dir, &format!("b{name}"), dtype, &[k as u64, n as u64], &b);
    }
    let spec = "[job]\nname = \"empty\"\n\
        [tensors.af64]\nshape = [4, 6]\ndtype = \"f64\"\ndistribution = { slab = 0 }\ninit = { npy = \"af64.npy\" }\n\
        [tensors.bf64]\nshape = [6, 2]\ndtype = \"f64\"\ndistribution = { root = 0 }\ninit = { npy = \"bf64.npy\" }\n\
        [tensors.af16]\nshape = [4, 6]\ndtype = \"f16\"\ndistribution = { slab = 0 }\ninit = { npy = \"af16.npy\" }\n\
        [tensors.bf16]\nshape = [6, 2]\ndtype = \"f16\"\ndistribution = { slab = 1 }\ninit = { npy = \"bf16.npy\" }\n\
        [[steps]]\nop = \"matmul\"\na = \"af64\"\nb = \"bf64\"\nout = \"d64\"\ncheck = true\nwarmup = 0\niterations = 1\n\
        [[steps]]\nop = \"matmul\"\na = \"af16\"\nb = \"bf16\"\nout = \"d16\"\nalgorithm = \"ag_gemm\"\ncheck = true\nwarmup = 0\niterations = 1\n\
        [output]\ngather = true\ntensors = [\"d64\", \"d16\"]\n";
    let path = dir.join("empty.toml");
    std::fs::write(&path, spec).unwrap();
    let want: Vec<f64> = (0..m * n)
        .map(|ij| {
            (0..k)
                .map(|l| a[ij / n * k + l].0 * b[l * n + ij % n].0)
                .sum()
        })
        .collect();
    for p in [2, 3] {
        let out = dir.join(format!("run-{p}"));
        run_ok(p, &path, &out, &[]);
        for (name, tol) in [("d64", 1e-12), ("d16", 2e-2)] {
            let (shape, got) = read_npy(&out.join(format!("{name}.npy")));
            assert_eq!(shape, [m as u64, n as u64]);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "{name} at {p} ranks: {g} vs {w}"
                );
            }
        }
    }
}

/// Megatron's MLP block as two matmuls and an all_reduce: `h = gelu(x @ w1)` column-parallel
/// (w1 and h split by columns), `y = h @ w2` row-parallel into a partial result (w2 split by
/// rows: each rank's product over its slice of k), then the all_reduce that sums the slices.
#[test]
fn megatron_row_parallel_layer_at_1_to_4_ranks() {
    let (t, d, f) = (5usize, 6usize, 8usize);
    let dir = temp_dir("megatron");
    let xs = values(101, t * d, false);
    let w1 = values(102, d * f, false);
    let w2 = values(103, f * d, false);
    write_values(&dir, "x", DType::F64, &[t as u64, d as u64], &xs);
    write_values(&dir, "w1", DType::F64, &[d as u64, f as u64], &w1);
    write_values(&dir, "w2", DType::F64, &[f as u64, d as u64], &w2);
    let spec = dir.join("mlp.toml");
    std::fs::write(
        &spec,
        format!(
            "[job]\nname = \"mlp\"\n\
             [tensors.x]\nshape = [{t}, {d}]\ndtype = \"f64\"\ninit = {{ npy = \"x.npy\" }}\n\
             [tensors.w1]\nshape = [{d}, {f}]\ndtype = \"f64\"\ndistribution = {{ slab = 1 }}\ninit = {{ npy = \"w1.npy\" }}\n\
             [tensors.h]\nshape = [{t}, {f}]\ndtype = \"f64\"\ndistribution = {{ slab = 1 }}\n\
             [tensors.w2]\nshape = [{f}, {d}]\ndtype = \"f64\"\ndistribution = {{ slab = 0 }}\ninit = {{ npy = \"w2.npy\" }}\n\
             [tensors.y]\nshape = [{t}, {d}]\ndtype = \"f64\"\ndistribution = \"partial\"\n\
             [[steps]]\nop = \"matmul\"\na = \"x\"\nb = \"w1\"\nout = \"h\"\nepilog = \"gelu\"\ncheck = true\nwarmup = 0\niterations = 1\n\
             [[steps]]\nop = \"matmul\"\na = \"h\"\nb = \"w2\"\nout = \"y\"\ncheck = true\nwarmup = 0\niterations = 1\n\
             [[steps]]\nop = \"all_reduce\"\ninput = \"y\"\ncheck = true\nwarmup = 0\niterations = 1\n\
             [output]\ntensors = [\"y\"]\ngather = true\n"
        ),
    )
    .unwrap();
    let gelu =
        |x: f64| 0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh());
    let h: Vec<f64> = (0..t * f)
        .map(|e| {
            gelu(
                (0..d)
                    .map(|k| xs[e / f * d + k].0 * w1[k * f + e % f].0)
                    .sum(),
            )
        })
        .collect();
    let want: Vec<f64> = (0..t * d)
        .map(|e| (0..f).map(|k| h[e / d * f + k] * w2[k * d + e % d].0).sum())
        .collect();
    for p in 1..=4usize {
        let out = dir.join(format!("run{p}"));
        let m = run_ok(p, &spec, &out, &[]);
        assert_eq!(m["steps"][1]["algorithm"], "k_split");
        for s in m["steps"].as_array().unwrap() {
            assert_eq!(s["check"]["passed"], true, "{p} ranks: {s}");
        }
        let (shape, y) = read_npy(&out.join("y.npy"));
        assert_eq!(shape, [t as u64, d as u64]);
        for (e, (g, w)) in y.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "{p} ranks, y[{e}] = {g}, want {w}"
            );
        }
        // A corrupted all_reduce after the matmuls fails its check.
        let bad = dir.join(format!("bad{p}"));
        let ran = mpirun(
            p,
            &[
                "run",
                spec.to_str().unwrap(),
                "--out",
                bad.to_str().unwrap(),
                "-q",
            ],
            &[("DISTRUN_CORRUPT_STEP", "2")],
            Duration::from_secs(120),
        );
        assert_eq!(ran.code, 3, "{p} ranks: {}", ran.stderr);
        assert_eq!(manifest(&bad)["steps"][2]["check"]["passed"], false);
    }
}

/// Freivalds' test where its own rounding matters most: double precision (c128 and f64), a
/// short k against long rows (2048 columns summed per row of `out x`, 3 ulps of tolerance per
/// row): its sums are compensated, so the correct products pass.
#[test]
fn freivalds_holds_in_double_precision_with_a_short_k() {
    for dtype in ["f64", "c128"] {
        let spec = temp_spec(
            &format!("short-k-{dtype}"),
            &format!(
                "[job]\nname = \"short-k\"\n\
                 [tensors.a]\nshape = [2048, 1]\ndtype = \"{dtype}\"\ndistribution = {{ slab = 0 }}\ninit = {{ uniform = {{ low = -1.0, high = 1.0 }} }}\n\
                 [tensors.b]\nshape = [1, 2048]\ndtype = \"{dtype}\"\ninit = {{ uniform = {{ low = -1.0, high = 1.0 }} }}\n\
                 [tensors.c]\nshape = [2048, 2048]\ndtype = \"{dtype}\"\ndistribution = {{ slab = 0 }}\ninit = {{ normal = {{ mean = 0.0, std = 1.0 }} }}\n\
                 [[steps]]\nop = \"matmul\"\na = \"a\"\nb = \"b\"\nc = \"c\"\nbeta = -1.0\nout = \"d\"\ncheck = true\nwarmup = 0\niterations = 1\n"
            ),
        );
        for p in [1, 2, 3] {
            let out = spec.parent().unwrap().join(format!("run{p}"));
            let m = run_ok(p, &spec, &out, &[]);
            assert_eq!(m["steps"][0]["check"]["passed"], true, "{dtype}, {p} ranks");
        }
    }
}

/// Skinny products over a long k (3 x 41 over 700): trial runs weigh writing the product in the
/// other layout than the result's (changed after) and keep the faster, the result exact either
/// way; in F order replicated, and complex in C order left in row slabs, where at 4 ranks a
/// rank holds no row.
#[test]
fn skinny_products_weigh_both_layouts_at_1_to_4_ranks() {
    let (m, n, k) = (3usize, 41usize, 700usize);
    let dir = temp_dir("mm-skinny");
    let a = values(201, m * k, true);
    let b = values(202, k * n, true);
    let bt: Vec<_> = (0..n * k).map(|x| b[x % k * n + x / k]).collect();
    write_values(&dir, "a64", DType::F64, &[m as u64, k as u64], &a);
    write_values(&dir, "bt64", DType::F64, &[n as u64, k as u64], &bt);
    write_values(&dir, "a128", DType::C128, &[m as u64, k as u64], &a);
    write_values(&dir, "b128", DType::C128, &[k as u64, n as u64], &b);
    let tensor = |name: &str, shape: [usize; 2], dtype: &str, layout: &str, dist: &str| {
        let init = match name.starts_with('d') {
            true => String::new(),
            false => format!("init = {{ npy = \"{name}.npy\" }}\n"),
        };
        format!(
            "[tensors.{name}]\nshape = {shape:?}\ndtype = \"{dtype}\"\nlayout = \"{layout}\"\ndistribution = {dist}\n{init}"
        )
    };
    let step = |a: &str, b: &str, out: &str, tb: bool| {
        format!(
            "[[steps]]\nop = \"matmul\"\na = \"{a}\"\nb = \"{b}\"\nout = \"{out}\"\ntranspose_b = {tb}\ncheck = true\nwarmup = 0\niterations = 2\n"
        )
    };
    let spec = [
        "[job]\nname = \"skinny\"\n".to_string(),
        tensor("a64", [m, k], "f64", "F", "\"replicated\""),
        tensor("bt64", [n, k], "f64", "F", "\"replicated\""),
        tensor("d64", [m, n], "f64", "F", "\"replicated\""),
        tensor("a128", [m, k], "c128", "C", "{ slab = 0 }"),
        tensor("b128", [k, n], "c128", "C", "\"replicated\""),
        tensor("d128", [m, n], "c128", "C", "{ slab = 0 }"),
        step("a64", "bt64", "d64", true),
        step("a128", "b128", "d128", false),
        "[output]\ngather = true\ntensors = [\"d64\", \"d128\"]\n".to_string(),
    ]
    .concat();
    let path = dir.join("skinny.toml");
    std::fs::write(&path, spec).unwrap();
    let product = |complex: bool| -> Vec<(f64, f64)> {
        (0..m * n)
            .map(|ij| {
                (0..k).fold((0.0, 0.0), |s, l| {
                    let (x, y) = (a[ij / n * k + l], b[l * n + ij % n]);
                    let t = match complex {
                        true => mul(x, y),
                        false => (x.0 * y.0, 0.0),
                    };
                    (s.0 + t.0, s.1 + t.1)
                })
            })
            .collect()
    };
    for p in 1..=4 {
        let out = dir.join(format!("run-{p}"));
        let record = run_ok(p, &path, &out, &[]);
        for (i, (name, complex)) in [("d64", false), ("d128", true)].into_iter().enumerate() {
            let step = &record["steps"][i];
            let at = format!("{name} at {p} ranks");
            assert_eq!(step["check"]["passed"], true, "{at}: {step}");
            let layout = &step["product_layout"];
            assert!(layout["c_s"].is_number(), "{at}: no trials: {step}");
            check_product_layout("auto", layout, &at);
            let (shape, got) = read_npy_complex(&out.join(format!("{name}.npy")));
            assert_eq!(shape, [m as u64, n as u64]);
            // Sums of multiples of 1/4096: exact in double precision.
            assert_eq!(got, product(complex), "{at}");
        }
    }
}
