//! `distrun report` on real run directories: a small spec (three collectives, a matmul, an FFT,
//! a redistribution) run at 1 and 3 ranks, reported in every format, with ratios checked against
//! the two manifests, and plotted to SVG and PNG; unreadable directories exit 1, bad arguments 2.

mod common;
use common::*;

use serde_json::Value;
use std::path::Path;

const SPEC: &str = r#"
[job]
name = "report"

[runtime]
device = "cpu"

[tensors.p]
shape = [64, 32]
dtype = "f32"
distribution = "partial"
init = { arange = {} }

[tensors.r]
shape = [64, 32]
dtype = "f64"
distribution = { root = 0 }
init = { arange = {} }

[tensors.s]
shape = [96, 16]
dtype = "i32"
distribution = { slab = 0 }
init = { arange = {} }

[tensors.a]
shape = [48, 32]
dtype = "f32"
distribution = { slab = 0 }
init = { uniform = { low = 0.0, high = 1.0 } }

[tensors.b]
shape = [32, 40]
dtype = "f32"
distribution = { slab = 1 }
init = { uniform = { low = 0.0, high = 1.0 } }

[tensors.z]
shape = [32, 24]
dtype = "c64"
distribution = { slab = 0 }
init = { arange = {} }

[[steps]]
name = "ar"
op = "all_reduce"
input = "p"
out = "p_sum"
iterations = 5
check = true

[[steps]]
name = "bc"
op = "broadcast"
input = "r"
out = "r_all"
iterations = 5
check = true

[[steps]]
name = "ag"
op = "all_gather"
input = "s"
out = "s_all"
iterations = 5
check = true

[[steps]]
name = "mm"
op = "matmul"
a = "a"
b = "b"
out = "d"
iterations = 5
check = true

[[steps]]
name = "fz"
op = "fft"
input = "z"
out = "zf"
iterations = 5
check = true

[[steps]]
name = "rd"
op = "redistribute"
input = "s"
out = "s_cols"
distribution = { slab = 1 }
iterations = 5
"#;

/// Where the PNG test's font is, as `fonts-dejavu-core` installs it.
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// `distrun report ARGS`.
fn report(args: &[&str]) -> Ran {
    Distrun::new().args(["report"].iter().chain(args)).run()
}

/// `distrun report ARGS` with `DISTRUN_FONT` set.
fn report_with_font(font: &str, args: &[&str]) -> Ran {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_distrun"))
        .arg("report")
        .args(args)
        .env("DISTRUN_FONT", font)
        .output()
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A table's cells: the lines after `title` up to a blank line, split at runs of two spaces.
fn table(text: &str, title: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| *l == title)
        .unwrap_or_else(|| panic!("no table {title}:\n{text}"));
    lines[at + 1..]
        .iter()
        .take_while(|l| !l.is_empty())
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

/// The cell of `row` under `column` in a table with its header first.
fn cell<'a>(t: &'a [Vec<String>], row: &str, column: &str) -> &'a str {
    let c = (t[0].iter().position(|h| h == column))
        .unwrap_or_else(|| panic!("no column {column} in {:?}", t[0]));
    let r = (t.iter().find(|r| r[0] == row)).unwrap_or_else(|| panic!("no row {row}: {t:?}"));
    &r[c]
}

/// A step's record in a manifest, by name.
fn step<'a>(m: &'a Value, name: &str) -> &'a Value {
    (m["steps"].as_array().unwrap().iter())
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name}"))
}

/// A ratio as the report writes it.
fn ratio_text(r: f64) -> String {
    if r.abs() < 0.1 {
        format!("{r:.3}x")
    } else {
        format!("{r:.2}x")
    }
}

#[test]
fn reports_of_runs_at_1_and_3_ranks() {
    let spec = temp_spec("report", SPEC);
    let dir = spec.parent().unwrap();
    let (one, three) = (dir.join("one"), dir.join("three"));
    let (m1, m3) = (run_ok(1, &spec, &one, &[]), run_ok(3, &spec, &three, &[]));
    let dirs = [one.to_str().unwrap(), three.to_str().unwrap()];
    single_table(&one, &m1);
    side_by_side(&dirs, &m1, &m3);
    markdown(&dirs);
    csv_and_json(dir, &dirs, &m1, &m3);
    plots(dir, &dirs);
    sweep(dir, &m1);
}

/// A sweep's manifest (made here from the one-rank run's: two points of its steps, the second
/// with twice the bytes): its points' values are columns, its rows one per step per point.
fn sweep(dir: &Path, m1: &Value) {
    let swept = dir.join("swept");
    std::fs::create_dir(&swept).unwrap();
    let mut m = m1.clone();
    let point = |index: u64, rows: u64| {
        let mut steps = m1["steps"].clone();
        for s in steps.as_array_mut().unwrap() {
            if let Some(bytes) = s["bytes"].as_u64() {
                s["bytes"] = (bytes * rows / 64).into();
            }
        }
        serde_json::json!({
            "index": index,
            "values": {"tensors.p.shape[0]": rows, "tensors.p.dtype": "f32"},
            "steps": steps,
            "tensors": {},
        })
    };
    m["sweep"] = serde_json::json!({"tensors.p.shape[0]": [64, 128], "tensors.p.dtype": ["f32"]});
    m["points"] = serde_json::json!([point(0, 64), point(1, 128)]);
    m["steps"] = serde_json::json!([]);
    m["tensors"] = serde_json::json!({});
    std::fs::write(swept.join("manifest.json"), m.to_string()).unwrap();
    let text = report(&[swept.to_str().unwrap()]).code(0).stdout;
    // Swept columns in the manifest's order of keys (json! sorts them).
    let t = table(&text, "all_reduce");
    assert_eq!(t[0][..4], ["step", "dtype", "shape[0]", "size (B)"]);
    assert_eq!(t[1][..3], ["ar", "f32", "64"]);
    assert_eq!(t[2][..3], ["ar", "f32", "128"]);
    assert_eq!(t.len(), 3);
    let csv = report(&[swept.to_str().unwrap(), "--format", "csv"])
        .code(0)
        .stdout;
    assert_eq!(csv.lines().count(), 1 + 2 * 6);
    assert!(csv.starts_with("run,step,op,point,tensors.p.dtype,tensors.p.shape[0],bytes,"));
    let svg = dir.join("swept.svg");
    report(&[swept.to_str().unwrap(), "--plot", svg.to_str().unwrap()]).code(0);
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("swept ar (all_reduce) dtype=f32"),
        "dtype is a series, size is x"
    );
}

/// One run: nccl-tests' columns, the figures as the manifest has them.
fn single_table(one: &Path, m: &Value) {
    let ran = report(&[one.to_str().unwrap()]).code(0);
    assert!(
        ran.stdout
            .starts_with(&format!("run {}: 1 rank, cpu", one.display()))
    );
    let t = table(&ran.stdout, "all_reduce");
    assert_eq!(
        t[0],
        [
            "step",
            "size (B)",
            "count",
            "type",
            "redop",
            "time (us)",
            "min (us)",
            "algbw (GB/s)",
            "busbw (GB/s)",
            "check"
        ]
    );
    let ar = step(m, "ar");
    assert_eq!(cell(&t, "ar", "size (B)"), ar["bytes"].to_string());
    assert_eq!(cell(&t, "ar", "count"), ar["count"].to_string());
    assert_eq!(cell(&t, "ar", "type"), "f32");
    assert_eq!(cell(&t, "ar", "redop"), "sum");
    let us = ar["time_s"]["median"].as_f64().unwrap() * 1e6;
    assert_eq!(cell(&t, "ar", "time (us)"), format!("{us:.2}"));
    assert_eq!(cell(&t, "ar", "check"), "pass");
    let t = table(&ran.stdout, "matmul");
    assert_eq!(
        t[0],
        [
            "step",
            "m",
            "n",
            "k",
            "type",
            "algorithm",
            "time (us)",
            "min (us)",
            "TFLOP/s",
            "check"
        ]
    );
    assert_eq!(t[1][1..4], ["48", "40", "32"]);
    let t = table(&ran.stdout, "fft");
    assert_eq!(t[1][..4], ["fz", "32x24", "c2c", "c64"]);
    let t = table(&ran.stdout, "other steps");
    assert_eq!(t[1][..4], ["rd", "redistribute", "6144", "i32"]);
}

/// Two runs: each one's time and rate, and the second's ratio to the first, as computed from
/// the manifests.
fn side_by_side(dirs: &[&str], m1: &Value, m3: &Value) {
    let ran = report(dirs).code(0);
    let text = &ran.stdout;
    assert!(
        text.starts_with(&format!("a = {}: 1 rank, cpu", dirs[0])),
        "{text}"
    );
    assert!(
        text.contains(&format!("\nb = {}: 3 ranks, cpu", dirs[1])),
        "{text}"
    );
    let titles = [
        "all_reduce",
        "broadcast",
        "all_gather",
        "matmul",
        "fft",
        "other steps",
    ];
    let at: Vec<usize> = titles
        .iter()
        .map(|t| text.find(&format!("\n{t}\n")).unwrap())
        .collect();
    assert!(at.is_sorted(), "tables in the order the steps ran:\n{text}");
    let figure = |m: &Value, name: &str, key: &str| step(m, name)[key].as_f64().unwrap();
    // busbw at one rank is 0 for all_reduce (nccl-tests' factor 2(n-1)/n): no ratio.
    let t = table(text, "all_reduce");
    assert_eq!(
        t[0][t[0].len() - 6..],
        [
            "time a (us)",
            "busbw a (GB/s)",
            "time b (us)",
            "busbw b (GB/s)",
            "busbw b/a",
            "check"
        ]
    );
    assert_eq!(cell(&t, "ar", "busbw b/a"), "-");
    let busbw = |m| figure(m, "bc", "busbw_gbs");
    let t = table(text, "broadcast");
    assert_eq!(
        cell(&t, "bc", "busbw b/a"),
        ratio_text(busbw(m3) / busbw(m1))
    );
    assert_eq!(
        cell(&t, "bc", "busbw b (GB/s)"),
        format!("{:.2}", busbw(m3))
    );
    let t = table(text, "matmul");
    let tflops = |m| figure(m, "mm", "tflops");
    assert_eq!(
        cell(&t, "mm", "TFLOP/s b/a"),
        ratio_text(tflops(m3) / tflops(m1))
    );
    let t = table(text, "fft");
    let time = |m: &Value| step(m, "fz")["time_s"]["median"].as_f64().unwrap();
    assert_eq!(cell(&t, "fz", "time b/a"), ratio_text(time(m3) / time(m1)));
    assert_eq!(cell(&t, "fz", "check"), "pass");
    // Sizes the runs agree on are shown once, others joined.
    let sizes = |name| (figure(m1, name, "bytes"), figure(m3, name, "bytes"));
    let t = table(text, "all_gather");
    let expected = match sizes("ag") {
        (a, b) if a == b => format!("{a}"),
        (a, b) => format!("{a}/{b}"),
    };
    assert_eq!(cell(&t, "ag", "size (B)"), expected);
}

/// Markdown: the same tables in GitHub's form.
fn markdown(dirs: &[&str]) {
    let text = report(&[dirs[0], dirs[1], "--format", "md"]).code(0).stdout;
    assert!(
        text.starts_with(&format!("- a = `{}`: 1 rank", dirs[0])),
        "{text}"
    );
    assert!(
        text.contains(
            "\n### broadcast\n\n| step | size (B) | count | type | time a (us) | busbw a (GB/s) \
         | time b (us) | busbw b (GB/s) | busbw b/a | check |\n\
         | :--- | ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: | :--- |\n| bc | "
        ),
        "{text}"
    );
    assert!(text.contains("\n### other steps\n"));
}

/// CSV and JSON: a row per step per run, the figures as the manifests have them; `--output`.
fn csv_and_json(dir: &Path, dirs: &[&str], m1: &Value, m3: &Value) {
    let steps = m1["steps"].as_array().unwrap().len() + m3["steps"].as_array().unwrap().len();
    let csv = report(&[dirs[0], dirs[1], "--format", "csv"])
        .code(0)
        .stdout;
    let lines: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(lines.len(), 1 + steps, "{csv}");
    let header = &lines[0];
    assert_eq!(header[..4], ["run", "step", "op", "point"]);
    for key in [
        "bytes",
        "count",
        "dtype",
        "time_us_median",
        "busbw_gbs",
        "tflops",
        "check",
    ] {
        assert!(header.contains(&key), "{key} in {header:?}");
    }
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    assert!(lines[1..].iter().all(|l| l.len() == header.len()));
    let bc3 = (lines.iter())
        .find(|l| l[0] == dirs[1] && l[1] == "bc")
        .expect("a row of run b's broadcast");
    let busbw: f64 = bc3[col("busbw_gbs")].parse().unwrap();
    assert_eq!(busbw, step(m3, "bc")["busbw_gbs"].as_f64().unwrap());
    assert_eq!(bc3[col("check")], "pass");
    let runs: Vec<&str> = lines[1..].iter().map(|l| l[0]).collect();
    assert_eq!(runs.iter().filter(|r| **r == dirs[0]).count(), 6);

    let json: Value = serde_json::from_str(
        &report(&[dirs[0], dirs[1], "--format", "json"])
            .code(0)
            .stdout,
    )
    .expect("valid JSON");
    let rows = json.as_array().unwrap();
    assert_eq!(rows.len(), steps);
    let mm = (rows.iter())
        .find(|r| r["run"] == dirs[0] && r["step"] == "mm")
        .unwrap();
    assert_eq!(mm["m"], 48);
    assert_eq!(mm["tflops"], step(m1, "mm")["tflops"]);
    assert_eq!(mm["point"], Value::Null);

    let out = dir.join("report.csv");
    let ran = report(&[
        dirs[0],
        dirs[1],
        "--format",
        "csv",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(ran.code(0).stdout, "");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), csv);
}

/// An SVG always (no font needed), a PNG where the font is.
fn plots(dir: &Path, dirs: &[&str]) {
    let svg = dir.join("report.svg");
    for font in [FONT, "/nonexistent/font.ttf"] {
        report_with_font(font, &[dirs[0], dirs[1], "--plot", svg.to_str().unwrap()]).code(0);
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg") || text.starts_with("<?xml"));
        assert!(text.trim_end().ends_with("</svg>"));
        for series in [
            "one ar (all_reduce)",
            "three bc (broadcast)",
            "one mm (matmul)",
            "three fz (fft)",
            "busbw (GB/s)",
            "TFLOP/s",
            "size (bytes)",
        ] {
            assert!(
                text.contains(series),
                "{series} in the SVG with font {font}"
            );
        }
    }
    let png = dir.join("report.png");
    if Path::new(FONT).exists() {
        report(&[dirs[0], dirs[1], "--plot", png.to_str().unwrap()]).code(0);
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    }
    let other = dir.join("nofont.png");
    let ran = report_with_font(
        "/nonexistent/font.ttf",
        &[dirs[0], "--plot", other.to_str().unwrap()],
    );
    let ran = ran.code(1);
    assert!(ran.stderr.contains("fonts-dejavu-core"), "{}", ran.stderr);
    assert_eq!(
        ran.stdout, "",
        "nothing is reported before the plot is known to work"
    );
    assert!(!other.exists());
}

#[test]
fn unreadable_directories_exit_1_and_bad_arguments_2() {
    let dir = temp_dir("report-bad");
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let ran = report(&[empty.to_str().unwrap()]).code(1);
    assert!(
        ran.stderr.contains(empty.to_str().unwrap()),
        "{}",
        ran.stderr
    );
    let bad = dir.join("bad");
    std::fs::create_dir(&bad).unwrap();
    std::fs::write(bad.join("manifest.json"), "{\"steps\": 3}").unwrap();
    let ran = report(&[bad.to_str().unwrap()]).code(1);
    assert!(
        ran.stderr.contains("not a distrun manifest"),
        "{}",
        ran.stderr
    );
    let missing = dir.join("missing");
    let ran = report(&[missing.to_str().unwrap()]).code(1);
    assert!(ran.stderr.contains("is not a directory"), "{}", ran.stderr);
    report(&[]).code(2);
    report(&[empty.to_str().unwrap(), "--format", "xml"]).code(2);
    let ran = report(&[empty.to_str().unwrap(), "--plot", "x.pdf"]).code(2);
    assert!(ran.stderr.contains(".svg or .png"), "{}", ran.stderr);
}
