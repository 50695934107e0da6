//! The CLI end to end: schema freshness, the example specs, `plan` output (table and the
//! contract's JSON), the symmetric heap, and help texts.

mod common;
use common::*;

#[test]
fn schema_command_prints_the_committed_schema() {
    let committed = std::fs::read_to_string(root().join("schemas/distrun.schema.json")).unwrap();
    let ran = Distrun::new().args(["schema"]).run().code(0);
    assert!(
        ran.stdout == committed,
        "schemas/distrun.schema.json is stale: run `cargo run -- schema --output schemas/distrun.schema.json`"
    );
    let schema: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    // Doc comments become descriptions, which editors show.
    assert!(schema["definitions"]["TensorSpec"]["properties"]["layout"]["description"].is_string());
}

#[test]
fn schema_output_writes_the_file() {
    let dir = temp_dir("schema");
    let out = dir.join("distrun.schema.json");
    Distrun::new()
        .args(["schema", "--output", out.to_str().unwrap()])
        .run()
        .code(0);
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        written,
        std::fs::read_to_string(root().join("schemas/distrun.schema.json")).unwrap()
    );
}

#[test]
fn every_example_spec_points_at_the_schema_and_validates() {
    let specs = example_specs();
    for name in [
        "gemm",
        "gemm_block_cyclic",
        "allreduce",
        "collectives",
        "redistribute",
        "fft3d",
    ] {
        assert!(
            specs.iter().any(|p| p.file_stem().unwrap() == name),
            "specs/{name}.toml is missing"
        );
    }
    for spec in &specs {
        let text = std::fs::read_to_string(spec).unwrap();
        assert!(
            text.starts_with("#:schema ../schemas/distrun.schema.json\n"),
            "{}",
            spec.display()
        );
    }
    let args: Vec<String> = specs.iter().map(|p| p.display().to_string()).collect();
    let ran = Distrun::new().args(["validate"]).args(&args).run().code(0);
    assert_eq!(
        ran.stdout.lines().filter(|l| l.ends_with(": ok")).count(),
        specs.len()
    );
}

/// The rank counts a spec can run at: its runtime.ranks, or 1 to 4.
fn rank_counts(spec: &std::path::Path) -> Vec<u64> {
    let doc: toml::Value = toml::from_str(&std::fs::read_to_string(spec).unwrap()).unwrap();
    match doc
        .get("runtime")
        .and_then(|r| r.get("ranks"))
        .and_then(toml::Value::as_integer)
    {
        Some(p) => vec![p as u64],
        None => vec![1, 2, 3, 4],
    }
}

#[test]
fn every_example_spec_plans_at_its_rank_counts() {
    for spec in example_specs() {
        for p in rank_counts(&spec) {
            let ran = Distrun::new()
                .args([
                    "plan",
                    spec.to_str().unwrap(),
                    "--ranks",
                    &p.to_string(),
                    "--json",
                ])
                .run()
                .code(0);
            let plan = ran.json();
            assert_eq!(plan["ranks"], p);
            for (name, t) in plan["tensors"].as_object().unwrap() {
                let shapes = t["local_shapes"].as_array().unwrap();
                assert_eq!(shapes.len() as u64, p, "{name} in {}", spec.display());
                // Pieces of a split tensor add up to the whole.
                let dist = &t["distribution"];
                let count = |s: &serde_json::Value| {
                    s.as_array()
                        .unwrap()
                        .iter()
                        .map(|d| d.as_u64().unwrap())
                        .product::<u64>()
                };
                let global: u64 = t["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .product();
                let held: u64 = shapes
                    .iter()
                    .filter(|s| !s.as_array().unwrap().is_empty())
                    .map(count)
                    .sum();
                let expected = match dist.as_str() {
                    Some("replicated") | Some("partial") => global * p,
                    _ => global,
                };
                assert_eq!(held, expected, "{name} in {} at {p} ranks", spec.display());
            }
        }
    }
}

#[test]
fn plan_json_has_the_contract_shape() {
    let ran = Distrun::new()
        .args(["plan", "specs/gemm.toml", "--ranks", "4", "--json"])
        .run()
        .code(0);
    let plan = ran.json();
    let a = &plan["tensors"]["a"];
    assert_eq!(a["shape"], serde_json::json!([1024, 128]));
    assert_eq!(a["dtype"], "f32");
    assert_eq!(a["layout"], "F");
    assert_eq!(a["distribution"], serde_json::json!({"slab": 1}));
    assert_eq!(
        a["local_shapes"],
        serde_json::json!([[1024, 32], [1024, 32], [1024, 32], [1024, 32]])
    );
    assert!(a["symmetric"].is_null());
    assert_eq!(
        plan["tensors"]["d"]["distribution"],
        serde_json::json!({"slab": 0})
    );
    let step = &plan["steps"][0];
    assert_eq!(step["op"], "matmul");
    assert_eq!(step["inputs"], serde_json::json!(["a", "b"]));
    assert_eq!(step["outputs"], serde_json::json!(["d"]));
    assert_eq!(step["algorithm"], "ag_gemm");
    assert_eq!(plan["symmetric_heap_bytes"], 0);
    // 128 columns over 130 ranks: the last two hold nothing, an empty list.
    let ran = Distrun::new()
        .args(["plan", "specs/gemm.toml", "--ranks", "130", "--json"])
        .run()
        .code(0);
    let shapes = &ran.json()["tensors"]["a"]["local_shapes"];
    assert_eq!(shapes[127], serde_json::json!([1024, 1]));
    assert_eq!(shapes[128], serde_json::json!([]));
    assert_eq!(shapes[129], serde_json::json!([]));
    // The table says the same: two ranks hold none of a.
    let table = Distrun::new()
        .args(["plan", "specs/gemm.toml", "--ranks", "130"])
        .run()
        .code(0)
        .stdout;
    let a = table.lines().find(|l| l.starts_with("a ")).unwrap();
    assert!(a.contains("(2 ranks none)"), "{a}");
}

#[test]
fn slab_example_from_the_docs() {
    let spec = temp_spec(
        "slab39",
        "[job]\nname = \"slab39\"\n[tensors.a]\nshape = [39, 64]\ndtype = \"f32\"\ndistribution = { slab = 0 }\ninit = \"zeros\"\n",
    );
    let plan = Distrun::new()
        .args(["plan", spec.to_str().unwrap(), "--ranks", "4", "--json"])
        .run()
        .code(0)
        .json();
    assert_eq!(
        plan["tensors"]["a"]["local_shapes"],
        serde_json::json!([[10, 64], [10, 64], [10, 64], [9, 64]])
    );
}

#[test]
fn symmetric_heap_is_shared_by_disjoint_lifetimes() {
    let spec = temp_spec(
        "heap",
        r#"[job]
name = "heap"
[tensors.x]
shape = [1024, 1000]
dtype = "f32"
distribution = { slab = 0 }
init = "ones"
symmetric = true
[tensors.y]
shape = [1024, 1000]
dtype = "f32"
symmetric = true
[tensors.z]
shape = [1024, 1000]
dtype = "f32"
symmetric = true
[[steps]]
op = "redistribute"
input = "x"
out = "y"
distribution = { slab = 1 }
[[steps]]
op = "redistribute"
input = "y"
out = "z"
distribution = { slab = 0 }
[output]
tensors = ["z"]
"#,
    );
    let plan = Distrun::new()
        .args(["plan", spec.to_str().unwrap(), "--ranks", "3", "--json"])
        .run()
        .code(0)
        .json();
    let slot = |n: &str| {
        let s = &plan["tensors"][n]["symmetric"];
        (s["offset"].as_u64().unwrap(), s["bytes"].as_u64().unwrap())
    };
    let (x, y, z) = (slot("x"), slot("y"), slot("z"));
    // The largest piece on any rank: 342 rows x 1000 of x; 1024 x 334 columns of y.
    assert_eq!(x.1, 342 * 1000 * 4);
    assert_eq!(y.1, 1024 * 334 * 4);
    // x dies at step 0 and z is born at step 1: they may share; y overlaps both.
    assert_eq!(x.0, z.0);
    assert!(y.0 >= x.0 + x.1 || y.0 + y.1 <= x.0);
    for (offset, _) in [x, y, z] {
        assert_eq!(offset % 512, 0, "offsets are aligned");
    }
    let heap = plan["symmetric_heap_bytes"].as_u64().unwrap();
    assert!(heap >= x.1.max(z.1) + y.1 && heap.is_multiple_of(512));
}

/// The room an FFT's moves by puts take: on NVSHMEM's heap to the end where the backends name
/// it; without it, on several GPU ranks, in NCCL windows that the step holds while it runs
/// (counted in its workspace, as NCCL rounds them); on the CPU nowhere.
#[test]
fn plan_counts_the_room_for_puts_where_it_lies() {
    let plan_of = |device: &str, backends: &str| {
        let spec = temp_spec(
            &format!("puts-room-{device}-{}", backends.len()),
            &format!(
                r#"[job]
name = "puts-room"
[runtime]
device = "{device}"
{backends}
[tensors.x]
shape = [64, 48, 40]
dtype = "c64"
distribution = {{ slab = 0 }}
init = "ones"
[[steps]]
op = "fft"
input = "x"
out = "y"
[output]
tensors = []
"#
            ),
        );
        let plan = Distrun::new()
            .args(["plan", spec.to_str().unwrap(), "--ranks", "3", "--json"])
            .run()
            .code(0)
            .json();
        let step = &plan["steps"][0];
        (
            step["workspace_bytes_per_rank"].as_u64().unwrap(),
            step["heap_bytes"].as_u64().unwrap(),
            plan["peak_bytes_per_rank"].as_u64().unwrap(),
        )
    };
    let (cpu_run, cpu_heap, _) = plan_of("cpu", "");
    let (nv_run, room, nv_peak) = plan_of("cuda", r#"backends = ["nccl", "nvshmem"]"#);
    let (win_run, win_heap, win_peak) = plan_of("cuda", "");
    assert_eq!(cpu_heap, 0);
    assert!(room > 0, "an FFT's transpose by puts needs room");
    assert_eq!(nv_run, cpu_run, "NVSHMEM's room lies on the heap");
    // Two buffers (the transposed slab, the way back), each a window of whole granules, and
    // the barriers' words' window to the end of the run.
    const GRANULE: u64 = 2 << 20;
    assert!(room < GRANULE);
    assert_eq!((win_run, win_heap), (cpu_run + 2 * GRANULE, 0));
    assert_eq!(win_peak, nv_peak - room + 3 * GRANULE);
}

#[test]
fn plan_table_is_readable() {
    let ran = Distrun::new()
        .args(["plan", "specs/gemm_block_cyclic.toml", "--ranks", "4"])
        .run()
        .code(0);
    for needle in [
        "tensor",
        "local shape",
        "bytes/rank",
        "heap offset",
        "block_cyclic 2x2 blocks 64x64",
        "summa",
        "symmetric heap:",
        "peak memory:",
    ] {
        assert!(
            ran.stdout.contains(needle),
            "missing `{needle}` in:\n{}",
            ran.stdout
        );
    }
}

#[test]
fn plan_needs_a_rank_count() {
    let ran = Distrun::new()
        .args(["plan", "specs/gemm.toml"])
        .run()
        .code(2);
    assert!(ran.stderr.contains("give --ranks N"), "{}", ran.stderr);
    // A spec that fixes its rank count refuses another.
    let ran = Distrun::new()
        .args(["plan", "specs/collectives.toml", "--ranks", "3"])
        .run()
        .code(2);
    assert!(
        ran.stderr
            .contains("the spec requires 4 ranks, but 3 were asked for"),
        "{}",
        ran.stderr
    );
    // No rank count below 1 or above 2^17, for plan or validate: refused at once (a plan for
    // 2^64 - 1 ranks would allocate per rank).
    for command in ["plan", "validate"] {
        for (ranks, says) in [
            ("0", "a rank count is a whole number from 1 to 131072"),
            ("131073", "rank count too large (at most 131072)"),
            ("4294967296", "rank count too large (at most 131072)"),
            (
                "18446744073709551615",
                "rank count too large (at most 131072)",
            ),
            (
                "18446744073709551616",
                "rank count too large (at most 131072)",
            ),
        ] {
            let ran = Distrun::new()
                .args([command, "specs/gemm.toml", "--ranks", ranks])
                .run()
                .code(2);
            assert!(ran.stderr.contains(says), "{ranks}: {}", ran.stderr);
        }
    }
    // The largest count plans in about a second.
    Distrun::new()
        .args(["plan", "specs/gemm.toml", "--ranks", "131072"])
        .run()
        .code(0);
}

#[test]
fn help_shows_an_example_for_each_command() {
    for cmd in ["validate", "plan", "schema"] {
        let ran = Distrun::new().args([cmd, "--help"]).run().code(0);
        assert!(
            ran.stdout.contains(&format!("Example:\n  distrun {cmd}")),
            "{cmd} --help:\n{}",
            ran.stdout
        );
    }
    let ran = Distrun::new().args(["--help"]).run().code(0);
    assert!(
        ran.stdout
            .contains("distrun plan specs/gemm.toml --ranks 4")
    );
}

#[test]
fn verbose_runs_time_each_setup_phase_and_iteration() {
    let spec = temp_spec(
        "verbose.toml",
        "[job]\nname = \"verbose\"\n[tensors.x]\nshape = [64, 3]\ndtype = \"f32\"\n\
         distribution = \"partial\"\ninit = { uniform = {} }\n\
         [[steps]]\nop = \"all_reduce\"\ninput = \"x\"\nout = \"y\"\niterations = 2\n\
         [output]\ntensors = [\"y\"]\n",
    );
    let dir = temp_dir("verbose");
    let run = |flag: &str, name: &str| {
        let out = dir.join(name);
        Distrun::new()
            .args([
                "run",
                spec.to_str().unwrap(),
                flag,
                "--out",
                out.to_str().unwrap(),
            ])
            .run()
            .code(0)
            .stderr
    };
    let verbose = run("-v", "v");
    for line in [
        "distrun: spec planned, process group up (",
        "distrun: init x (",
        "distrun:   run 0: ",
        "distrun:   run 1: ",
        "distrun: downloaded y, 768 bytes (",
        "distrun: outputs written (",
        "distrun: process group closed (",
        "distrun: exiting (",
    ] {
        assert!(verbose.contains(line), "no {line:?} in:\n{verbose}");
    }
    // Without -v: one line per step, none of these.
    let plain = run("--device=cpu", "plain");
    assert!(
        !plain.contains("init x") && !plain.contains("run 0:") && !plain.contains("exiting"),
        "{plain}"
    );
}
