//! What the planner resolves for each op: the natural distribution of every output, FFT shapes,
//! in-place state changes and matmul algorithm choices, read from `distrun plan --json`.

mod common;
use common::*;
use serde_json::{Value, json};

fn plan(spec: &str, ranks: u64) -> Value {
    Distrun::new()
        .args(["plan", spec, "--ranks", &ranks.to_string(), "--json"])
        .run()
        .code(0)
        .json()
}

#[test]
fn collectives_give_their_natural_distributions() {
    let p = plan("specs/collectives.toml", 4);
    let dist = |n: &str| p["tensors"][n]["distribution"].clone();
    assert_eq!(dist("p_sum"), json!("replicated"));
    assert_eq!(dist("p_max"), json!({"root": 1}));
    assert_eq!(dist("p_avg"), json!({"slab": 0}));
    assert_eq!(dist("r_all"), json!("replicated"));
    assert_eq!(dist("r_rows"), json!({"slab": 0}));
    assert_eq!(dist("s_all"), json!("replicated"));
    assert_eq!(dist("s_root"), json!({"root": 3}));
    assert_eq!(dist("t_swapped"), json!({"slab": 1}));
    assert_eq!(dist("ring_next"), json!({"slab": 0}));
    // A root tensor: only its root holds a piece.
    assert_eq!(
        p["tensors"]["s_root"]["local_shapes"],
        json!([[], [], [], [12, 8]])
    );
    assert_eq!(
        p["tensors"]["t_swapped"]["local_shapes"][0],
        json!([4, 1, 16])
    );
}

#[test]
fn fft_shapes_and_slabs() {
    let spec = temp_spec(
        "fftshapes",
        r#"[job]
name = "fftshapes"
[tensors.x]
shape = [30, 27, 33]
dtype = "f64"
distribution = { slab = "x" }
init = { uniform = {} }
[tensors.back]
shape = [30, 27, 33]
dtype = "f64"
[[steps]]
op = "fft"
input = "x"
out = "xf"
kind = "r2c"
reshape = false
[[steps]]
op = "fft"
input = "xf"
out = "back"
kind = "c2r"
direction = "inverse"
reshape = false
"#,
    );
    let p = plan(spec.to_str().unwrap(), 3);
    let xf = &p["tensors"]["xf"];
    assert_eq!(xf["shape"], json!([30, 27, 17]));
    assert_eq!(xf["dtype"], "c128");
    assert_eq!(xf["distribution"], json!({"slab": 1}));
    assert_eq!(
        xf["local_shapes"],
        json!([[30, 9, 17], [30, 9, 17], [30, 9, 17]])
    );
    // The declared odd size wins over 2*(m-1).
    assert_eq!(p["tensors"]["back"]["shape"], json!([30, 27, 33]));
    assert_eq!(p["tensors"]["back"]["distribution"], json!({"slab": 0}));
}

/// The step the plan at 3 ranks gives a one-step c2c FFT of a c64 tensor `x` of `shape` in
/// `dist`, with `extra` step keys.
fn fft_step(name: &str, shape: &str, dist: &str, extra: &str) -> Value {
    let spec = temp_spec(
        name,
        &format!(
            r#"[job]
name = "{name}"
[tensors.x]
shape = {shape}
dtype = "c64"
distribution = {dist}
init = {{ uniform = {{}} }}
[[steps]]
op = "fft"
input = "x"
kind = "c2c"
{extra}
"#
        ),
    );
    plan(spec.to_str().unwrap(), 3)["steps"][0].clone()
}

/// That step's `detail`.
fn fft_detail(name: &str, shape: &str, dist: &str, extra: &str) -> Value {
    fft_step(name, shape, dist, extra)["detail"].clone()
}

#[test]
fn an_fft_check_plans_room_for_its_sums_on_the_device() {
    // Beyond the round trip (2 rows of 10 c64 values a rank), a GPU's Parseval and round-trip
    // sums hold the last axis's weights and up to 1024 blocks' partial sums (16 KiB).
    let step = fft_step("smallcheck", "[6, 10]", "{ slab = 0 }", "check = true");
    let check = step["check_bytes_per_rank"].as_u64().unwrap();
    assert!(check >= 2 * 10 * 8 + 16 * 1024 + 8 * 10, "{step}");
}

#[test]
fn a_2d_fft_down_long_columns_moves_them_batch_by_batch() {
    // From x-slabs, left in y-slabs: 8192-point columns land as rows (x contiguous) batch by
    // batch, each transformed as it lands; back in x-slabs (reshape) or down shorter columns
    // they go by the all-to-all of the other slab FFTs (batch by batch where the phase splits).
    let detail = |name: &str, rows: u64, reshape: bool| {
        let shape = format!("[{rows}, 16]");
        fft_detail(
            name,
            &shape,
            "{ slab = 0 }",
            &format!("reshape = {reshape}"),
        )
    };
    assert_eq!(
        detail("longcols", 8192, false),
        "FFT of axes 1 on x-slabs, column batch by column batch to y-slabs, FFT of axis 0 on \
         each batch as it lands"
    );
    // From y-slabs, the first phase down such columns turns each batch of them into rows and
    // back on the way to x-slabs; down shorter ones, the all-to-all.
    for (reshape, back) in [(false, ""), (true, ", then to the result's distribution")] {
        assert_eq!(
            fft_detail(
                &format!("longturn{reshape}"),
                "[8192, 16]",
                "{ slab = 1 }",
                &format!("reshape = {reshape}")
            ),
            format!(
                "FFT of axes 0 on y-slabs, column batch by column batch, turned to rows and \
                 back, to x-slabs, FFT of axis 1{back}"
            )
        );
    }
    let d = fft_detail("shortturn", "[4096, 16]", "{ slab = 1 }", "");
    assert!(d.as_str().unwrap().contains("all-to-all"), "{d}");
    for (name, rows, reshape) in [("longback", 8192, true), ("shortcols", 4096, false)] {
        let d = detail(name, rows, reshape);
        assert!(
            d.as_str()
                .unwrap()
                .contains("all-to-all (batch by batch where"),
            "{name}: {d}"
        );
    }
}

#[test]
fn an_fft_of_boxes_that_are_slabs_moves_nothing_first() {
    // Over 3 ranks 30 planes are slabs of 10: such boxes are x-slabs, so the FFT starts on
    // them (and rows of 9 are y-slabs); boxes split otherwise are moved to working slabs first.
    let detail = |name: &str, boxes: &str| {
        let dist = format!("{{ boxes = [{boxes}] }}");
        fft_detail(name, "[30, 27, 33]", &dist, "")
    };
    let d = detail(
        "boxslab",
        "[[0, 0, 0], [10, 27, 33]], [[10, 0, 0], [20, 27, 33]], [[20, 0, 0], [30, 27, 33]]",
    );
    assert!(!d.as_str().unwrap().contains("moved"), "{d}");
    let d = detail(
        "boxrows",
        "[[0, 0, 0], [30, 9, 33]], [[0, 9, 0], [30, 18, 33]], [[0, 18, 0], [30, 27, 33]]",
    );
    assert!(
        d.as_str()
            .unwrap()
            .starts_with("FFT of axes 0, 2 on y-slabs"),
        "{d}"
    );
    let d = detail(
        "boxuneven",
        "[[0, 0, 0], [30, 8, 33]], [[0, 8, 0], [30, 18, 33]], [[0, 18, 0], [30, 27, 33]]",
    );
    assert!(
        d.as_str().unwrap().contains("moved to working slabs"),
        "{d}"
    );
}

#[test]
fn in_place_all_reduce_changes_the_distribution_from_then_on() {
    let spec = temp_spec(
        "inplace",
        r#"[job]
name = "inplace"
[tensors.g]
shape = [64, 8]
dtype = "f32"
distribution = "partial"
init = "ones"
[[steps]]
op = "all_reduce"
input = "g"
[[steps]]
op = "redistribute"
input = "g"
out = "h"
distribution = { slab = 0 }
"#,
    );
    let p = plan(spec.to_str().unwrap(), 2);
    assert_eq!(p["tensors"]["g"]["distribution"], "partial");
    assert_eq!(p["tensors"]["g"]["final_distribution"], "replicated");
    assert_eq!(p["steps"][0]["outputs"], json!(["g"]));
    assert_eq!(p["tensors"]["h"]["local_shapes"], json!([[32, 8], [32, 8]]));
}

fn matmul_spec(name: &str, a: &str, b: &str, extra: &str) -> Scratch {
    let text = format!(
        "[job]\nname = \"{name}\"\n[tensors.a]\nshape = [256, 128]\ndtype = \"f32\"\ndistribution = {a}\ninit = \"ones\"\n[tensors.b]\nshape = [128, 64]\ndtype = \"f32\"\ndistribution = {b}\ninit = \"ones\"\n[[steps]]\nop = \"matmul\"\na = \"a\"\nb = \"b\"\nout = \"c\"\n{extra}\n"
    );
    temp_spec(name, &text)
}

#[test]
fn matmul_algorithms_follow_the_distributions() {
    let cases = [
        (
            "{ slab = 0 }",
            "\"replicated\"",
            "",
            "local",
            json!({"slab": 0}),
            0,
        ),
        // k split on both sides: reduce-scatter the partial products.
        (
            "{ slab = 1 }",
            "{ slab = 0 }",
            "",
            "gemm_rs",
            json!({"slab": 0}),
            256 * 64 * 4 / 2,
        ),
        (
            "{ slab = 1 }",
            "{ slab = 0 }",
            "algorithm = \"gemm_ar\"",
            "gemm_ar",
            json!("replicated"),
            256 * 64 * 4,
        ),
        // rows of a, columns of b: gathering b (32 KiB) beats gathering a (128 KiB).
        (
            "{ slab = 0 }",
            "{ slab = 1 }",
            "",
            "ag_gemm",
            json!({"slab": 0}),
            128 * 64 * 4 / 2,
        ),
        (
            "{ block_cyclic = { blocks = [32, 32] } }",
            "{ block_cyclic = { blocks = [32, 16] } }",
            "",
            "summa",
            json!({"block_cyclic": {"grid": [2, 1], "blocks": [32, 16], "grid_layout": "col-major", "first": [0, 0]}}),
            // on a 2x1 grid each rank receives the half of b it lacks.
            128 * 64 * 4 / 2,
        ),
        (
            "{ root = 0 }",
            "\"replicated\"",
            "",
            "redistribute",
            json!({"slab": 0}),
            256 * 128 * 4 / 2,
        ),
    ];
    for (i, (a, b, extra, algorithm, out, bytes)) in cases.into_iter().enumerate() {
        let spec = matmul_spec(&format!("mm{i}"), a, b, extra);
        let p = plan(spec.to_str().unwrap(), 2);
        assert_eq!(
            p["steps"][0]["algorithm"], algorithm,
            "case {i}: a {a}, b {b}"
        );
        assert_eq!(p["tensors"]["c"]["distribution"], out, "case {i}");
        assert_eq!(p["steps"][0]["bytes_sent_per_rank"], bytes, "case {i}");
    }
}

#[test]
fn the_plan_says_how_a_gathered_operand_travels() {
    for (pipeline, says) in [
        (
            "auto",
            "GEMM per ring round as each piece arrives, or after the whole gather if trials find it faster",
        ),
        ("rounds", "GEMM per ring round as each piece arrives"),
        ("whole", "local GEMM"),
    ] {
        let extra = format!("pipeline = \"{pipeline}\"");
        let spec = matmul_spec(
            &format!("pipe-{pipeline}"),
            "{ slab = 0 }",
            "{ slab = 1 }",
            &extra,
        );
        let p = plan(spec.to_str().unwrap(), 2);
        assert_eq!(p["steps"][0]["algorithm"], "ag_gemm");
        assert_eq!(
            p["steps"][0]["detail"],
            format!("all-gather b, then {says}")
        );
    }
}

#[test]
fn block_cyclic_gemm_plans_for_4096_ranks() {
    let p = plan("specs/gemm_block_cyclic.toml", 4096);
    let a = &p["tensors"]["a"];
    assert_eq!(a["distribution"]["block_cyclic"]["grid"], json!([64, 64]));
    let shapes = a["local_shapes"].as_array().unwrap();
    assert_eq!(shapes.len(), 4096);
    // 1000 rows in 64-row blocks: 16 blocks (the last of 40 rows) over 64 process rows; the
    // rest hold nothing.
    assert_eq!(shapes[0], json!([64, 64]));
    assert_eq!(shapes[15], json!([40, 64]));
    assert_eq!(shapes[16], json!([]));
    assert_eq!(p["steps"][0]["algorithm"], "summa");
}

#[test]
fn every_step_says_its_algorithm_and_bytes() {
    let p = plan("specs/collectives.toml", 4);
    let step = |i: usize, key: &str| p["steps"][i][key].clone();
    // nccl-tests' sizes: the partial [12, 8] f32 array; all_gather's whole result.
    assert_eq!(step(0, "algorithm"), json!("all_reduce"));
    assert_eq!(step(0, "bytes"), json!(12 * 8 * 4));
    assert_eq!(step(0, "count"), json!(12 * 8));
    assert_eq!(step(0, "dtype"), json!("f32"));
    assert_eq!(step(0, "reduce"), json!("sum"));
    assert_eq!(step(1, "root"), json!(1));
    assert_eq!(step(5, "algorithm"), json!("exchange"));
    assert_eq!(step(5, "bytes"), json!(12 * 8 * 8));
    for i in 0..10 {
        assert!(
            step(i, "detail").as_str().is_some_and(|d| !d.is_empty()),
            "{i}"
        );
    }
    let fft = plan("specs/fft3d.toml", 4);
    assert_eq!(fft["steps"][0]["algorithm"], json!("slab_x"));
    assert_eq!(fft["steps"][0]["kind"], json!("c2c"));
    assert_eq!(fft["steps"][0]["shape"], fft["tensors"]["x"]["shape"]);
    let one = plan("specs/fft3d.toml", 1);
    assert_eq!(one["steps"][0]["algorithm"], json!("local"));
    let gemm = plan("specs/gemm.toml", 2);
    let mnk = |k: &str| gemm["steps"][0][k].as_u64().unwrap();
    let d = &gemm["tensors"]["d"]["shape"];
    assert_eq!(
        [mnk("m"), mnk("n")],
        [d[0].as_u64().unwrap(), d[1].as_u64().unwrap()]
    );
    assert!(mnk("k") > 0);
}
