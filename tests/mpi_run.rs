//! The real binary under `mpiexec` at 1, 2, 3 and 4 ranks: every collective and reduce op, a
//! matrix of redistributions, each output compared with a reference computed here from the
//! arange formulas, global checksums equal across rank counts; failures stop every rank.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(180);

fn run_at(p: usize, spec: &Path, out: &Path) -> Ran {
    mpirun(
        p,
        &[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
        &[],
        LIMIT,
    )
}

/// Every step's check passed in a run directory.
fn assert_checks_passed(run: &Path) {
    let m = manifest(run);
    for s in m["steps"].as_array().unwrap() {
        if let Some(c) = s.get("check") {
            assert_eq!(c["passed"], true, "{}: {s}", run.display());
        }
    }
}

/// The spec of every collective with every reduce op, for `p` ranks. `part` is the arange over
/// the stacked [P, 4, 12] partial tensor: rank r's element i holds r*48 + i.
fn collectives_spec(p: usize) -> String {
    let mut s = format!(
        r#"[job]
name = "collectives-{p}"
[tensors.part]
shape = [4, 12]
dtype = "f64"
distribution = "partial"
init = {{ arange = {{}} }}
[tensors.ipart]
shape = [12, 4]
dtype = "i32"
distribution = "partial"
init = {{ arange = {{}} }}
[tensors.inplace]
shape = [12, 4]
dtype = "f32"
distribution = "partial"
init = {{ arange = {{}} }}
[tensors.rin]
shape = [12, 4]
dtype = "f64"
distribution = "partial"
init = {{ arange = {{}} }}
[tensors.bin]
shape = [12, 4]
dtype = "i32"
distribution = {{ root = 0 }}
init = {{ arange = {{}} }}
[tensors.rows]
shape = [12, 4]
dtype = "f32"
layout = "F"
distribution = {{ slab = 0 }}
init = {{ arange = {{ start = 5, step = 2 }} }}
[tensors.held]
shape = [12, 4]
dtype = "i32"
distribution = {{ root = {last} }}
init = {{ arange = {{}} }}
[tensors.t]
shape = [{p}, {p}, 3]
dtype = "c64"
distribution = {{ slab = 0 }}
init = {{ arange = {{}} }}
[tensors.small]
shape = [3, 2]
dtype = "i8"
distribution = "partial"
init = {{ fill = 100 }}
[tensors.ring]
shape = [{p}, 5]
dtype = "u8"
distribution = {{ slab = 0 }}
init = {{ arange = {{}} }}
"#,
        last = p - 1
    );
    let mut outputs = Vec::new();
    for op in ["sum", "prod", "min", "max", "avg"] {
        s += &format!(
            "[[steps]]\nop = \"all_reduce\"\ninput = \"part\"\nout = \"ar_{op}\"\nreduce = \"{op}\"\ncheck = true\n"
        );
        s += &format!(
            "[[steps]]\nop = \"reduce\"\ninput = \"part\"\nout = \"r_{op}\"\nreduce = \"{op}\"\nroot = {}\ncheck = true\n",
            p / 2
        );
        s += &format!(
            "[[steps]]\nop = \"reduce_scatter\"\ninput = \"part\"\nout = \"rs_{op}\"\nreduce = \"{op}\"\naxis = 1\ncheck = true\n"
        );
        outputs.extend([format!("ar_{op}"), format!("r_{op}"), format!("rs_{op}")]);
    }
    s += "[[steps]]\nop = \"all_reduce\"\ninput = \"ipart\"\nout = \"iar\"\ncheck = true\n";
    s += "[[steps]]\nop = \"all_reduce\"\ninput = \"inplace\"\ncheck = true\n";
    // i8 sums of 100 wrap (MPI and NCCL add in the dtype) before avg divides.
    s += "[[steps]]\nop = \"all_reduce\"\ninput = \"small\"\nout = \"iavg\"\nreduce = \"avg\"\ncheck = true\n";
    s += "[[steps]]\nop = \"reduce\"\ninput = \"rin\"\nreduce = \"max\"\ncheck = true\n";
    s += "[[steps]]\nop = \"broadcast\"\ninput = \"bin\"\ncheck = true\n";
    s += "[[steps]]\nop = \"all_gather\"\ninput = \"rows\"\nout = \"gathered\"\ncheck = true\n";
    s += &format!(
        "[[steps]]\nop = \"gather\"\ninput = \"rows\"\nout = \"at_root\"\nroot = {}\ncheck = true\n",
        p - 1
    );
    s += "[[steps]]\nop = \"broadcast\"\ninput = \"held\"\nout = \"everywhere\"\ncheck = true\n";
    s += "[[steps]]\nop = \"scatter\"\ninput = \"held\"\nout = \"scattered\"\naxis = 0\ncheck = true\n";
    s += "[[steps]]\nop = \"all_to_all\"\ninput = \"t\"\nout = \"swapped\"\ncheck = true\n";
    s += "[[steps]]\nop = \"send_recv\"\ninput = \"ring\"\nout = \"ringed\"\ncheck = true\n";
    s += "[[steps]]\nop = \"send_recv\"\ninput = \"ring\"\nout = \"paired\"\npairs = [[0, 0]]\ncheck = true\n";
    s += "[[steps]]\nop = \"barrier\"\n";
    outputs.extend(
        [
            "iar",
            "rin",
            "bin",
            "inplace",
            "gathered",
            "at_root",
            "everywhere",
            "scattered",
            "swapped",
            "ringed",
            "paired",
        ]
        .map(String::from),
    );
    // Both checksum algorithms: sha256 at 3 ranks.
    let checksum = if p == 3 { "sha256" } else { "xxh3-64" };
    s += &format!(
        "[output]\ngather = true\nchecksum = \"{checksum}\"\ntensors = [{}]\n",
        outputs
            .iter()
            .map(|o| format!("\"{o}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    s
}

#[test]
fn every_collective_and_reduce_op_at_1_to_4_ranks() {
    for p in 1..=4usize {
        let dir = temp_dir(&format!("coll{p}"));
        let spec = dir.join("c.toml");
        std::fs::write(&spec, collectives_spec(p)).unwrap();
        let out = dir.join("run");
        let ran = run_at(p, &spec, &out);
        assert_eq!(ran.code, 0, "{p} ranks:\n{}", ran.stderr);
        assert_checks_passed(&out);
        let pf = p as f64;
        let n = 48.0;
        let row = |r: f64, i: f64| r * n + i;
        let ranks: Vec<f64> = (0..p).map(|r| r as f64).collect();
        let expect_reduce = |op: &str, i: f64| -> f64 {
            let vals = ranks.iter().map(|&r| row(r, i));
            match op {
                "sum" => vals.sum(),
                "prod" => vals.product(),
                "min" => vals.fold(f64::INFINITY, f64::min),
                "max" => vals.fold(f64::NEG_INFINITY, f64::max),
                _ => vals.sum::<f64>() / pf,
            }
        };
        for op in ["sum", "prod", "min", "max", "avg"] {
            for name in [format!("ar_{op}"), format!("r_{op}"), format!("rs_{op}")] {
                let (shape, got) = read_npy(&out.join(format!("{name}.npy")));
                assert_eq!(shape, [4, 12], "{name}");
                for (i, g) in got.iter().enumerate() {
                    let want = expect_reduce(op, i as f64);
                    assert!(
                        (g - want).abs() <= 1e-12 * want.abs(),
                        "{p} ranks, {name}[{i}] = {g}, want {want}"
                    );
                }
            }
        }
        let (_, iar) = read_npy(&out.join("iar.npy"));
        assert!(
            iar.iter()
                .enumerate()
                .all(|(i, v)| *v == expect_reduce("sum", i as f64)),
            "i32 sum"
        );
        let (_, rin) = read_npy(&out.join("rin.npy"));
        assert!(
            rin.iter()
                .enumerate()
                .all(|(i, v)| *v == expect_reduce("max", i as f64)),
            "reduce in place"
        );
        let (_, bin) = read_npy(&out.join("bin.npy"));
        assert!(
            bin.iter().enumerate().all(|(i, v)| *v == i as f64),
            "broadcast in place"
        );
        let (_, inplace) = read_npy(&out.join("inplace.npy"));
        assert!(
            inplace
                .iter()
                .enumerate()
                .all(|(i, v)| *v == expect_reduce("sum", i as f64)),
            "in place"
        );
        // Data movement keeps global values: arange everywhere.
        for name in ["gathered", "at_root"] {
            let (_, v) = read_npy(&out.join(format!("{name}.npy")));
            assert!(
                v.iter()
                    .enumerate()
                    .all(|(i, x)| *x == 5.0 + 2.0 * i as f64),
                "{name}"
            );
        }
        for name in ["everywhere", "scattered", "swapped"] {
            let (_, v) = read_npy(&out.join(format!("{name}.npy")));
            assert!(
                v.iter().enumerate().all(|(i, x)| *x == i as f64),
                "{name} at {p} ranks: {v:?}"
            );
        }
        let (_, ringed) = read_npy(&out.join("ringed.npy"));
        for (k, v) in ringed.iter().enumerate() {
            let (r, j) = (k / 5, k % 5);
            assert_eq!(*v, (((r + p - 1) % p) * 5 + j) as f64, "ring at {p} ranks");
        }
        let (_, paired) = read_npy(&out.join("paired.npy"));
        for (k, v) in paired.iter().enumerate() {
            let want = if k < 5 { k as f64 } else { 0.0 };
            assert_eq!(
                *v, want,
                "pairs: only row 0 is sent (to itself), the rest are zeros"
            );
        }
        // Shards: one per rank, as the contract has it (empty where a rank holds nothing).
        let m = manifest(&out);
        assert_eq!(m["ranks"], p);
        assert!(
            m["tensors"]["bin"]["checksum"]
                .as_str()
                .unwrap()
                .starts_with(if p == 3 { "sha256:" } else { "xxh3-64:" })
        );
        assert_eq!(
            m["tensors"]["bin"]["shards"].as_array().unwrap().len(),
            p,
            "broadcast in place: on every rank"
        );
        assert_eq!(
            m["tensors"]["at_root"]["shards"].as_array().unwrap().len(),
            p
        );
        if p > 1 {
            // Gathered at rank p - 1: rank 0's shard holds nothing.
            let bytes = std::fs::read(out.join("at_root.rank0.npy")).unwrap();
            assert_eq!(npyz::NpyFile::new(&bytes[..]).unwrap().shape(), [0, 0]);
        }
        assert_eq!(
            m["tensors"]["gathered"]["shards"].as_array().unwrap().len(),
            p
        );
        let verify = Distrun::new().args(["verify", out.to_str().unwrap()]).run();
        assert_eq!(verify.code, 0, "{}", verify.stderr);
    }
}

/// Redistribute an arange tensor through every kind of distribution and both layouts.
fn redistribution_spec(p: usize) -> String {
    // P uneven row boxes over 13 rows, the last taking what is left.
    let mut boxes = Vec::new();
    let mut lo = 0;
    for r in 0..p {
        let hi = if r + 1 == p { 13 } else { lo + 2 + r % 2 };
        boxes.push(format!("[[{lo}, 0], [{hi}, 10]]"));
        lo = hi;
    }
    let first = if p == 4 { ", first = [1, 1]" } else { "" };
    let targets = [
        ("slab1f", "{ slab = 1 }".to_string(), "F"),
        ("blockc", "{ block = {} }".to_string(), "C"),
        (
            "blockrow",
            "{ block = { grid_layout = \"row-major\" } }".to_string(),
            "F",
        ),
        (
            "cyclic",
            format!("{{ block_cyclic = {{ blocks = [3, 2]{first} }} }}"),
            "F",
        ),
        (
            "cyclicc",
            "{ block_cyclic = { blocks = [5, 3] } }".to_string(),
            "C",
        ),
        (
            "boxes",
            format!("{{ boxes = [{}] }}", boxes.join(", ")),
            "C",
        ),
        ("repl", "\"replicated\"".to_string(), "F"),
        ("rooted", format!("{{ root = {} }}", p - 1), "C"),
        ("back", "{ slab = 0 }".to_string(), "C"),
    ];
    let mut s = String::from(
        "[job]\nname = \"redist\"\n[tensors.x]\nshape = [13, 10]\ndtype = \"f64\"\ndistribution = { slab = 0 }\ninit = { arange = {} }\n",
    );
    let mut input = "x";
    for (name, dist, layout) in &targets {
        s += &format!(
            "[[steps]]\nop = \"redistribute\"\ninput = \"{input}\"\nout = \"{name}\"\ndistribution = {dist}\nlayout = \"{layout}\"\ncheck = true\n"
        );
        input = name;
    }
    let names: Vec<String> = targets.iter().map(|t| format!("\"{}\"", t.0)).collect();
    s += &format!(
        "[output]\ngather = true\ntensors = [{}]\n",
        names.join(", ")
    );
    s
}

#[test]
fn redistribution_matrix_at_1_to_4_ranks_keeps_values_and_checksums() {
    let mut checksums: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in 1..=4usize {
        let dir = temp_dir(&format!("redist{p}"));
        let spec = dir.join("r.toml");
        std::fs::write(&spec, redistribution_spec(p)).unwrap();
        let out = dir.join("run");
        let ran = run_at(p, &spec, &out);
        assert_eq!(ran.code, 0, "{p} ranks:\n{}", ran.stderr);
        assert_checks_passed(&out);
        // verify recomputes every global checksum from the shards, whatever their distribution.
        Distrun::new()
            .args(["verify", out.to_str().unwrap()])
            .run()
            .code(0);
        let m = manifest(&out);
        for (name, t) in m["tensors"].as_object().unwrap() {
            let (shape, v) = read_npy(&out.join(format!("{name}.npy")));
            assert_eq!(shape, [13, 10]);
            assert!(
                v.iter().enumerate().all(|(i, x)| *x == i as f64),
                "{name} at {p} ranks"
            );
            checksums
                .entry(name.clone())
                .or_default()
                .push(t["checksum"].as_str().unwrap().to_string());
            // F pieces are written in Fortran order.
            if t["layout"] == "F" {
                let shard = &t["shards"][0]["file"];
                let bytes = std::fs::read(out.join(shard.as_str().unwrap())).unwrap();
                assert!(String::from_utf8_lossy(&bytes[..128]).contains("'fortran_order': True"));
            }
        }
    }
    for (name, sums) in &checksums {
        assert!(
            sums.windows(2).all(|w| w[0] == w[1]),
            "{name}: global checksums differ across rank counts: {sums:?}"
        );
    }
}

#[test]
fn example_specs_run_and_verify() {
    for (spec, counts) in [
        ("specs/allreduce.toml", vec![1, 3]),
        ("specs/redistribute.toml", vec![2]),
        ("specs/collectives.toml", vec![4]),
    ] {
        for p in counts {
            let dir = temp_dir(&format!("example{p}"));
            let out = dir.join("run");
            let ran = run_at(p, &root().join(spec), &out);
            assert_eq!(ran.code, 0, "{spec} at {p}:\n{}", ran.stderr);
            assert_checks_passed(&out);
            assert_eq!(
                Distrun::new()
                    .args(["verify", out.to_str().unwrap()])
                    .run()
                    .code,
                0
            );
            // The spec as run: the device and backends it ran with, every tensor's
            // distribution; written back as TOML it is a valid spec.
            let as_run = &manifest(&out)["spec"];
            assert_eq!(as_run["runtime"]["device"], "cpu");
            assert_eq!(as_run["runtime"]["backends"], serde_json::json!(["mpi"]));
            for (name, t) in as_run["tensors"].as_object().unwrap() {
                assert!(t.get("distribution").is_some(), "{spec}: {name}");
            }
            let again = dir.join("as-run.toml");
            std::fs::write(&again, toml::to_string(as_run).unwrap()).unwrap();
            Distrun::new()
                .args(["validate", again.to_str().unwrap()])
                .run()
                .code(0);
        }
    }
}

#[test]
fn a_failed_check_is_recorded_and_exits_3() {
    let dir = temp_dir("corrupt");
    let out = dir.join("run");
    let ran = mpirun(
        2,
        &[
            "run",
            "specs/redistribute.toml",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
        &[("DISTRUN_CORRUPT_STEP", "1")],
        LIMIT,
    );
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let m = manifest(&out);
    assert_eq!(m["steps"][0]["check"]["passed"], true);
    assert_eq!(m["steps"][1]["check"]["passed"], false);
    assert!(m["steps"][1]["check"]["max_error"].as_f64().unwrap() > 0.0);
    // Quiet, the failure still gets one line, from one rank.
    let name = m["steps"][1]["name"].as_str().unwrap();
    let lines: Vec<&str> = (ran.stderr.lines())
        .filter(|l| l.starts_with("distrun: check failed: "))
        .collect();
    assert_eq!(lines.len(), 1, "{}", ran.stderr);
    assert!(lines[0].contains(name), "{}", ran.stderr);
}

/// A corrupted all_reduce that makes an infinity: the manifest says "inf" (JSON has no
/// infinity), not null, and the run directory still verifies.
#[test]
fn an_infinite_max_error_is_recorded_as_inf() {
    let spec = temp_spec(
        "inf-error",
        "[job]\nname = \"inf-error\"\n[tensors.x]\nshape = [6]\ndtype = \"f16\"\n\
         distribution = \"partial\"\ninit = { fill = 32.5 }\n\
         [[steps]]\nop = \"all_reduce\"\ninput = \"x\"\ncheck = true\n",
    );
    let out = spec.parent().unwrap().join("run");
    // The sum is 65, which the corruption moves by 1000 x 66, past f16's largest value: infinite.
    let ran = mpirun(
        2,
        &[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[("DISTRUN_CORRUPT_STEP", "0")],
        LIMIT,
    );
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let m = manifest(&out);
    assert_eq!(m["steps"][0]["check"]["max_error"], "inf");
    assert!(ran.stderr.contains("max error inf"), "{}", ran.stderr);
    Distrun::new()
        .args(["verify", out.to_str().unwrap()])
        .run()
        .code(0);
}

#[test]
fn verify_names_a_flipped_byte() {
    let dir = temp_dir("flip");
    let out = dir.join("run");
    Distrun::new()
        .args([
            "run",
            "specs/redistribute.toml",
            "--out",
            out.to_str().unwrap(),
            "-q",
        ])
        .run()
        .code(0);
    Distrun::new()
        .args(["verify", out.to_str().unwrap()])
        .run()
        .code(0);
    let shard = out.join("z.rank0.npy");
    let mut bytes = std::fs::read(&shard).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&shard, bytes).unwrap();
    let ran = Distrun::new()
        .args(["verify", out.to_str().unwrap()])
        .run()
        .code(3);
    assert!(
        ran.stderr.contains("z.rank0.npy: checksum"),
        "{}",
        ran.stderr
    );
    // A manifest that no longer parses does not verify either; no directory is a failure.
    let manifest = out.join("manifest.json");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push('x');
    std::fs::write(&manifest, text).unwrap();
    let ran = Distrun::new()
        .args(["verify", out.to_str().unwrap()])
        .run()
        .code(3);
    assert!(ran.stderr.contains("manifest"), "{}", ran.stderr);
    std::fs::remove_file(&manifest).unwrap();
    Distrun::new()
        .args(["verify", out.to_str().unwrap()])
        .run()
        .code(3);
    Distrun::new()
        .args(["verify", dir.join("nowhere").to_str().unwrap()])
        .run()
        .code(1);
}

#[test]
fn a_failing_rank_stops_every_rank_with_its_message_once() {
    // The run directory cannot be renamed into place when the run ends (its name was taken
    // while the ranks wrote): rank 0 fails while the others wait.
    let dir = temp_dir("late");
    let spec = dir.join("late.toml");
    std::fs::write(
        &spec,
        "[job]\nname = \"late\"\n[tensors.x]\nshape = [8]\ndtype = \"f32\"\ninit = \"ones\"\n[[steps]]\nop = \"barrier\"\n[output]\ntensors = [\"x\"]\n",
    )
    .unwrap();
    let out = dir.join("run");
    // The ranks pause once they have written their first shard (DISTRUN_WRITE_PAUSE_S).
    let taker = {
        let (dir, out) = (dir.to_path_buf(), out.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !std::fs::read_dir(&dir)
                .unwrap()
                .any(|e| e.unwrap().path().join("x.rank0.npy").exists())
            {
                assert!(t0.elapsed() < Duration::from_secs(60), "no shard written");
                std::thread::sleep(Duration::from_millis(20));
            }
            std::fs::create_dir(&out).unwrap();
            std::fs::write(out.join("other"), "").unwrap();
        })
    };
    let t0 = Instant::now();
    let args = [
        "run",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ];
    let ran = mpirun(3, &args, &[("DISTRUN_WRITE_PAUSE_S", "5")], LIMIT);
    taker.join().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "it took {:?}",
        t0.elapsed()
    );
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let said = "distrun: rank 0: cannot rename the run directory into place";
    assert_eq!(ran.stderr.matches(said).count(), 1, "{}", ran.stderr);
}

#[test]
fn killing_a_rank_mid_run_stops_the_others_and_leaves_no_manifest() {
    let dir = temp_dir("kill");
    let spec = dir.join("long.toml");
    std::fs::write(
        &spec,
        format!(
            "[job]\nname = \"long\"\n[tensors.x]\nshape = [64, 64]\ndtype = \"f32\"\ndistribution = \"partial\"\ninit = \"ones\"\n[[steps]]\nop = \"all_reduce\"\ninput = \"x\"\nout = \"y\"\niterations = 10000000\n[output]\ndir = \"{}\"\ntensors = [\"y\"]\n",
            dir.join("runs").display()
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new("mpiexec");
    cmd.args([
        "--oversubscribe",
        "-n",
        "3",
        env!("CARGO_BIN_EXE_distrun"),
        "run",
        spec.to_str().unwrap(),
        "-q",
    ])
    .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let launcher = child.id();
    // Wait until the three ranks run, then kill one.
    let ranks = || -> Vec<u32> {
        let out = std::process::Command::new("pgrep")
            .args(["-f", spec.to_str().unwrap()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .filter(|&pid| pid != launcher)
            .collect()
    };
    let t0 = Instant::now();
    while ranks().len() < 3 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let victims = ranks();
    assert!(victims.len() >= 3, "three ranks run: {victims:?}");
    std::process::Command::new("kill")
        .args(["-9", &victims[1].to_string()])
        .status()
        .unwrap();
    let killed = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() && ranks().is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "ranks still running 10 s after one died"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    assert!(!status.success());
    let runs = dir.join("runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn a_rank_count_the_spec_refuses_is_named() {
    let ran = mpirun(2, &["run", "specs/collectives.toml", "-q"], &[], LIMIT);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_eq!(
        ran.stderr
            .matches("the spec requires runtime.ranks = 4, but the job has 2 rank(s)")
            .count(),
        1,
        "{}",
        ran.stderr
    );
    // An invalid spec is invalid (exit 2, its errors once) however many ranks it was given.
    let spec = temp_spec(
        "invalid-ranks",
        "[job]\nname = \"r\"\n[runtime]\nranks = 2\n[tensors.x]\nshape = [4]\ndtype = \"f32\"\ninit = \"ones\"\n[[steps]]\nop = \"all_reduce\"\ninput = \"x\"\n",
    );
    for p in [1, 3] {
        let ran = mpirun(p, &["run", spec.to_str().unwrap(), "-q"], &[], LIMIT);
        assert_eq!(ran.code, 2, "{}", ran.stderr);
        let error = "all_reduce needs a partial input";
        assert_eq!(ran.stderr.matches(error).count(), 1, "{}", ran.stderr);
    }
}

#[test]
fn a_cuda_spec_without_cuda_is_refused_before_anything_runs() {
    let dir = temp_dir("unbuilt");
    let spec = dir.join("cuda.toml");
    std::fs::write(
        &spec,
        "[job]\nname = \"gpu\"\n[runtime]\ndevice = \"cuda\"\n[[steps]]\nop = \"barrier\"\n",
    )
    .unwrap();
    let out = dir.join("run");
    let ran = Distrun::new()
        .args([spec.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .run();
    assert_eq!(ran.code, 1);
    // No CUDA here (CI): the message names the missing library and where it was looked for.
    assert!(
        ran.stderr
            .contains("needs libcuda, which was not found: tried libcuda.so"),
        "{}",
        ran.stderr
    );
    assert!(!out.exists());
}

#[test]
fn queued_timing_reports_the_mean_of_back_to_back_iterations() {
    let spec = temp_spec(
        "queued.toml",
        "[job]\nname = \"queued\"\n[tensors.x]\nshape = [4096]\ndtype = \"f32\"\n\
         distribution = \"partial\"\ninit = { arange = {} }\n\
         [[steps]]\nop = \"all_reduce\"\ninput = \"x\"\nout = \"y\"\nwarmup = 2\niterations = 50\n\
         timing = \"queued\"\ncheck = true\n[output]\ntensors = [\"y\"]\n",
    );
    for p in [1, 3] {
        let dir = temp_dir(&format!("queued-{p}"));
        let out = dir.join("run");
        let ran = run_at(p, &spec, &out);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        assert_checks_passed(&out);
        let step = &manifest(&out)["steps"][0];
        assert_eq!(step["iterations"], 50);
        let t = &step["time_s"];
        // One mean for all 50: min, median and max agree, and it is a real duration.
        assert_eq!(t["min"], t["max"]);
        assert!(t["median"].as_f64().unwrap() > 0.0, "{step}");
    }
}

#[test]
fn symmetric_tensors_run_and_keep_values_on_the_cpu_at_1_to_4_ranks() {
    // On the CPU the flag only places tensors in the plan's heap; every value stays right.
    let spec = r#"[job]
name = "sym"
[tensors.x]
shape = [13, 10]
dtype = "f64"
distribution = { slab = 0 }
init = { arange = {} }
symmetric = true
[tensors.all]
shape = [13, 10]
dtype = "f64"
distribution = "replicated"
symmetric = true
[tensors.cols]
shape = [13, 10]
dtype = "f64"
distribution = { slab = 1 }
symmetric = true
[[steps]]
op = "all_gather"
input = "x"
out = "all"
check = true
[[steps]]
op = "redistribute"
input = "x"
out = "cols"
distribution = { slab = 1 }
check = true
[output]
gather = true
tensors = ["all", "cols"]
"#;
    for p in 1..=4usize {
        let dir = temp_dir(&format!("sym{p}"));
        let path = dir.join("s.toml");
        std::fs::write(&path, spec).unwrap();
        let out = dir.join("run");
        let ran = run_at(p, &path, &out);
        assert_eq!(ran.code, 0, "{p} ranks:\n{}", ran.stderr);
        assert_checks_passed(&out);
        for name in ["all", "cols"] {
            let (shape, v) = read_npy(&out.join(format!("{name}.npy")));
            assert_eq!(shape, [13, 10]);
            assert!(
                v.iter().enumerate().all(|(i, x)| *x == i as f64),
                "{name} at {p} ranks"
            );
        }
    }
}

#[test]
fn send_recv_of_a_computed_tensor_moves_its_rows_and_is_checked() {
    // A matmul's rows go on by send_recv to a rank that the others do not send to: no init
    // predicts them, and the check compares the move with its actual input on every rank.
    let spec = |p: usize| {
        format!(
            r#"[job]
name = "computed"
[tensors.a]
shape = [{p}, 4]
dtype = "f64"
distribution = {{ slab = 0 }}
init = {{ arange = {{}} }}
[tensors.b]
shape = [4, 2]
dtype = "f64"
init = {{ arange = {{ start = 1 }} }}
[tensors.d]
shape = [{p}, 2]
dtype = "f64"
distribution = {{ slab = 0 }}
[[steps]]
op = "matmul"
a = "a"
b = "b"
out = "d"
[[steps]]
op = "send_recv"
input = "d"
out = "moved"
pairs = [[0, 1]]
check = true
[output]
tensors = ["moved"]
gather = true
"#
        )
    };
    // d[i][j] = sum_k a[i][k] b[k][j] with a = arange, b = arange + 1; moved[1] = d[0].
    let d = |j: usize| (0..4).map(|k| (k * (k * 2 + j + 1)) as f64).sum::<f64>();
    for p in [2, 3] {
        let spec = temp_spec(&format!("computed{p}"), &spec(p));
        let out = spec.parent().unwrap().join("run");
        let m = run_ok(p, &spec, &out, &[]);
        assert_eq!(m["steps"][1]["check"]["passed"], true, "{}", m["steps"][1]);
        let (shape, values) = read_npy(&out.join("moved.npy"));
        assert_eq!(shape, [p as u64, 2]);
        let mut want = vec![0.0; p * 2];
        want[2..4].copy_from_slice(&[d(0), d(1)]);
        assert_eq!(values, want, "{p} ranks");
    }
}

#[test]
fn a_panic_on_one_rank_ends_every_rank_with_its_message() {
    // Rank 1 panics (a testing hook standing in for a bug) while the others wait for it in an
    // all-reduce: the job must end, not hang while the panicking rank tears MPI down.
    let spec = temp_spec(
        "panic",
        "[job]\nname = \"panic\"\n[output]\ndir = \"runs-panic\"\n[tensors.x]\nshape = [8]\ndtype = \"f32\"\ndistribution = \"partial\"\ninit = \"ones\"\n[[steps]]\nop = \"all_reduce\"\ninput = \"x\"\n",
    );
    for (p, rank) in [(1, "0"), (3, "1")] {
        let t0 = Instant::now();
        let ran = mpirun(
            p,
            &["run", spec.to_str().unwrap(), "-q"],
            &[("DISTRUN_PANIC_RANK", rank)],
            Duration::from_secs(60),
        );
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        assert_eq!(ran.code, 1, "{p} ranks: {}", ran.stderr);
        assert_eq!(
            ran.stderr
                .matches(&format!("DISTRUN_PANIC_RANK={rank}"))
                .count(),
            1,
            "{}",
            ran.stderr
        );
        let dirs = [root().join("runs-panic"), spec.with_file_name("runs-panic")];
        assert!(dirs.iter().all(|d| !d.exists()), "nothing written");
    }
}

#[test]
fn reductions_of_a_partial_npy_tensor_are_checked_at_1_to_4_ranks() {
    // Each rank's row of a [P, 12, 5] file; every reduction's check folds the rows it reads at
    // its own piece, and the results equal the sums computed here.
    for p in 1..=4usize {
        let dir = temp_dir(&format!("npy-partial-{p}"));
        let n = 60;
        let v: Vec<(f64, f64)> = (0..p * n)
            .map(|i| ((i * 7 % 11) as f64 - 3.5, 0.0))
            .collect();
        write_values(
            &dir,
            "part",
            distrun::spec::tensor::DType::F64,
            &[p as u64, 12, 5],
            &v,
        );
        let spec = dir.join("npy.toml");
        std::fs::write(
            &spec,
            format!(
                "[job]\nname = \"npy-partial\"\n[tensors.x]\nshape = [12, 5]\ndtype = \"f64\"\ndistribution = \"partial\"\ninit = {{ npy = \"part.npy\" }}\n\
                 [[steps]]\nop = \"all_reduce\"\ninput = \"x\"\nout = \"sum\"\ncheck = true\n\
                 [[steps]]\nop = \"reduce_scatter\"\ninput = \"x\"\nout = \"mx\"\nreduce = \"max\"\naxis = 0\ncheck = true\n\
                 [[steps]]\nop = \"reduce\"\ninput = \"x\"\nout = \"at\"\nroot = {}\ncheck = true\n\
                 [output]\ntensors = [\"sum\", \"mx\", \"x\"]\ngather = true\n",
                p - 1
            ),
        )
        .unwrap();
        let out = dir.join("run");
        run_ok(p, &spec, &out, &[]);
        assert_checks_passed(&out);
        let (_, sum) = read_npy(&out.join("sum.npy"));
        let (_, mx) = read_npy(&out.join("mx.npy"));
        // The partial tensor itself is written whole as the stack of the ranks' rows.
        let (shape, stacked) = read_npy(&out.join("x.npy"));
        assert_eq!(shape, [p as u64, 12, 5]);
        assert_eq!(stacked, v.iter().map(|x| x.0).collect::<Vec<_>>());
        for i in 0..n {
            let column = (0..p).map(|r| v[r * n + i].0);
            assert_eq!(
                sum[i],
                column.clone().sum::<f64>(),
                "{p} ranks, element {i}"
            );
            assert_eq!(
                mx[i],
                column.fold(f64::MIN, f64::max),
                "{p} ranks, element {i}"
            );
        }
    }
}

#[test]
fn eight_bit_reductions_wrap_at_1_to_4_ranks() {
    // More than 16 elements, so that Open MPI's AVX reductions (which saturate 8-bit sums) would
    // take them: every result must wrap as MPI's standard and NCCL have it.
    let spec = "[job]\nname = \"wrap\"\n\
        [tensors.u]\nshape = [40]\ndtype = \"u8\"\ndistribution = \"partial\"\ninit = { fill = 200 }\n\
        [tensors.i]\nshape = [3, 13]\ndtype = \"i8\"\ndistribution = \"partial\"\ninit = { fill = 100 }\n\
        [[steps]]\nop = \"all_reduce\"\ninput = \"u\"\nout = \"usum\"\ncheck = true\n\
        [[steps]]\nop = \"reduce\"\ninput = \"u\"\nout = \"uavg\"\nreduce = \"avg\"\ncheck = true\n\
        [[steps]]\nop = \"reduce_scatter\"\ninput = \"i\"\nout = \"isum\"\naxis = 1\ncheck = true\n\
        [[steps]]\nop = \"all_reduce\"\ninput = \"i\"\nout = \"iprod\"\nreduce = \"prod\"\ncheck = true\n\
        [output]\ntensors = [\"usum\", \"uavg\", \"isum\", \"iprod\"]\ngather = true\n";
    let spec = temp_spec("wrap", spec);
    for p in 1..=4usize {
        let out = spec.parent().unwrap().join(format!("run{p}"));
        run_ok(p, &spec, &out, &[]);
        assert_checks_passed(&out);
        let usum = (200 * p) as u8;
        let isum = (100 * p) as i8;
        let iprod = (0..p).fold(1i8, |a, _| a.wrapping_mul(100));
        for (name, want, n) in [
            ("usum", f64::from(usum), 40),
            ("uavg", f64::from(usum / p as u8), 40),
            ("isum", f64::from(isum), 39),
            ("iprod", f64::from(iprod), 39),
        ] {
            let (_, v) = read_npy(&out.join(format!("{name}.npy")));
            assert_eq!(v, vec![want; n], "{name} at {p} ranks");
        }
    }
}

#[test]
fn scatter_and_reduce_scatter_split_uneven_axes_by_the_slab_rule() {
    // 7 rows and 5 columns on 1-4 ranks: rank r gets 7//P + (r < 7%P) rows (3, 2, 2 on 3).
    let spec = temp_spec(
        "uneven",
        "[job]\nname = \"uneven\"\n\
         [tensors.held]\nshape = [7, 5]\ndtype = \"i32\"\ndistribution = { root = 0 }\ninit = { arange = {} }\n\
         [tensors.part]\nshape = [7, 5]\ndtype = \"f64\"\ndistribution = \"partial\"\ninit = { arange = {} }\n\
         [[steps]]\nop = \"scatter\"\ninput = \"held\"\nout = \"rows\"\ncheck = true\n\
         [[steps]]\nop = \"reduce_scatter\"\ninput = \"part\"\nout = \"cols\"\naxis = 1\ncheck = true\n\
         [output]\ntensors = [\"rows\", \"cols\"]\ngather = true\n",
    );
    for p in 1..=4usize {
        let out = spec.parent().unwrap().join(format!("run{p}"));
        run_ok(p, &spec, &out, &[]);
        assert_checks_passed(&out);
        let (_, rows) = read_npy(&out.join("rows.npy"));
        assert!(
            rows.iter().enumerate().all(|(i, v)| *v == i as f64),
            "{p} ranks"
        );
        // Element i of rank r's array is r*35 + i: the sum over ranks is 35*P(P-1)/2 + P*i.
        let (_, cols) = read_npy(&out.join("cols.npy"));
        for (i, v) in cols.iter().enumerate() {
            assert_eq!(
                *v,
                (35 * p * (p - 1) / 2 + p * i) as f64,
                "{p} ranks, element {i}"
            );
        }
        let slab = |n: usize, r: usize| n / p + usize::from(r < n % p);
        for r in 0..p {
            let shard = |name: &str| {
                let bytes = std::fs::read(out.join(format!("{name}.rank{r}.npy"))).unwrap();
                npyz::NpyFile::new(&bytes[..]).unwrap().shape().to_vec()
            };
            assert_eq!(shard("rows"), [slab(7, r) as u64, 5], "{p} ranks, rank {r}");
            assert_eq!(shard("cols"), [7, slab(5, r) as u64], "{p} ranks, rank {r}");
        }
    }
}

/// A tensor of 7.3 TiB is refused before anything is allocated, on every rank, with the plan's
/// numbers said once; nothing is written.
#[test]
fn a_plan_larger_than_memory_is_refused_before_allocating() {
    let spec = temp_spec(
        "huge",
        "[job]\nname = \"huge\"\n[tensors.a]\nshape = [1000000, 1000000]\ndtype = \"f64\"\n\
         distribution = { slab = 0 }\ninit = \"zeros\"\n[[steps]]\nop = \"barrier\"\n",
    );
    for p in [1, 3] {
        let out = spec.parent().unwrap().join(format!("run-{p}"));
        let ran = mpirun(
            p,
            &[
                "run",
                spec.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &[],
            LIMIT,
        );
        assert_eq!(ran.code, 1, "{p} ranks: {}", ran.stderr);
        let said: Vec<&str> = (ran.stderr.lines())
            .filter(|l| l.starts_with("distrun: not enough memory: rank 0: the plan needs"))
            .collect();
        assert_eq!(said.len(), 1, "{p} ranks: {}", ran.stderr);
        assert!(said[0].contains("(tensor `a`: "), "{}", said[0]);
        assert!(!ran.stderr.contains("memory allocation"), "{}", ran.stderr);
        assert!(!out.exists(), "{p} ranks: nothing is written");
    }
}

#[test]
fn ranks_of_one_host_share_its_cores_among_their_threads() {
    let spec = temp_spec(
        "threads.toml",
        "[job]\nname = \"threads\"\n[tensors.x]\nshape = [64, 64]\ndtype = \"f64\"\n\
         distribution = { slab = 0 }\ninit = { arange = {} }\n\
         [[steps]]\nop = \"redistribute\"\ninput = \"x\"\nout = \"y\"\n\
         distribution = { slab = 1 }\ncheck = true\n[output]\ntensors = [\"y\"]\n",
    );
    let cores = std::thread::available_parallelism().unwrap().get();
    for p in [1, 3] {
        let out = temp_dir(&format!("threads-{p}")).join("run");
        let ran = run_at(p, &spec, &out);
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let threads: Vec<usize> = (manifest(&out)["rank_info"].as_array().unwrap().iter())
            .map(|r| {
                let d = r["device"].as_str().unwrap();
                d.split(['(', ' ']).find_map(|w| w.parse().ok()).expect(d)
            })
            .collect();
        // Ranks on the same cores divide them (rayon's default gave each rank every core it
        // may use, so 3 ranks started 3 threads a core); Open MPI may bind each to fewer.
        let total: usize = threads.iter().sum();
        assert!(total <= cores.max(p), "{threads:?} on {cores} cores");
    }
}
