//! A report's text: tables (aligned columns or GitHub markdown), one per op family with the runs
//! side by side and each one's ratio to the first; or long rows (CSV, JSON), one per step per
//! point per run.

use super::Run;
use super::rows::{Family, Group, Line, Row, groups, swept_columns};
use crate::output::manifest::StepRecord;
use indexmap::IndexMap;
use serde_json::{Value, json};

/// How `distrun report` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns, one table per op family.
    Table,
    /// GitHub markdown tables.
    Md,
    /// One header and a row per step per point per run.
    Csv,
    /// The CSV's rows as JSON objects.
    Json,
}

/// The report of `rows` (of `runs`) in `format`.
pub fn render(runs: &[Run], rows: &[Row], format: Format) -> String {
    let columns = swept_columns(rows);
    let sheets = || -> Vec<Sheet> {
        groups(rows, runs.len())
            .iter()
            .map(|g| sheet(g, &columns, runs.len()))
            .collect()
    };
    match format {
        Format::Table => {
            let mut out = legend(runs, |l, dir| format!("{l}{dir}"));
            for s in sheets() {
                out.push_str(&format!("\n{}\n{}", s.title, s.aligned()));
            }
            out
        }
        Format::Md => {
            let mut out = legend(runs, |l, dir| format!("- {l}`{dir}`"));
            for s in sheets() {
                out.push_str(&format!("\n### {}\n\n{}", s.title, s.markdown()));
            }
            out
        }
        Format::Csv => csv(&long_rows(runs, rows, &columns)),
        Format::Json => {
            let rows = long_rows(runs, rows, &columns);
            serde_json::to_string_pretty(&rows).expect("JSON values print") + "\n"
        }
    }
}

/// A run's letter in column names: a, b, ... z, then r27, r28, ...
pub fn letter(run: usize) -> String {
    match u8::try_from(run) {
        Ok(i) if i < 26 => char::from(b'a' + i).to_string(),
        _ => format!("r{}", run + 1),
    }
}

/// A line per run: its letter (with several), directory, ranks and devices.
fn legend(runs: &[Run], line: impl Fn(&str, &str) -> String) -> String {
    runs.iter()
        .enumerate()
        .map(|(i, r)| {
            let tag = if runs.len() > 1 {
                format!("{} = ", letter(i))
            } else {
                "run ".to_string()
            };
            let m = &r.manifest;
            let mut devices: Vec<&str> = Vec::new();
            for info in &m.rank_info {
                if !devices.contains(&info.device.as_str()) {
                    devices.push(&info.device);
                }
            }
            let ranks = match m.ranks {
                1 => "1 rank".to_string(),
                n => format!("{n} ranks"),
            };
            let points = match m.points.len() {
                0 => String::new(),
                n => format!(", {n} sweep points"),
            };
            let dir = r.dir.display().to_string();
            format!(
                "{}: {ranks}, {}{points}\n",
                line(&tag, &dir),
                devices.join(", ")
            )
        })
        .collect()
}

/// A column's alignment.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Align {
    Left,
    Right,
}

/// One table ready to print.
struct Sheet {
    title: String,
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Sheet {
    /// Columns aligned as the plan's table, numbers to the right, two spaces apart.
    fn aligned(&self) -> String {
        let all = || std::iter::once(&self.header).chain(&self.rows);
        let widths: Vec<usize> = (0..self.header.len())
            .map(|c| all().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        all()
            .map(|r| {
                let cells: Vec<String> = r
                    .iter()
                    .zip(&widths)
                    .zip(&self.align)
                    .map(|((cell, w), a)| match a {
                        Align::Left => format!("{cell:<w$}"),
                        Align::Right => format!("{cell:>w$}"),
                    })
                    .collect();
                cells.join("  ").trim_end().to_string() + "\n"
            })
            .collect()
    }

    /// A GitHub markdown table.
    fn markdown(&self) -> String {
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let rule: Vec<String> = (self.align.iter())
            .map(|a| match a {
                Align::Left => ":---".to_string(),
                Align::Right => "---:".to_string(),
            })
            .collect();
        let mut out = line(&self.header);
        out.push_str(&format!("| {} |\n", rule.join(" | ")));
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    /// Removes the columns at `at` whose cells are all `-`.
    fn drop_empty(&mut self, at: std::ops::Range<usize>) {
        let empty: Vec<usize> = at
            .filter(|&c| self.rows.iter().all(|r| r[c] == "-"))
            .collect();
        for &c in empty.iter().rev() {
            self.header.remove(c);
            self.align.remove(c);
            for r in &mut self.rows {
                r.remove(c);
            }
        }
    }
}

/// A figure of a step as a cell.
type Cell = fn(&StepRecord) -> String;

/// What a family's rows say the step was: name, alignment, cell.
fn described(family: &Family) -> Vec<(&'static str, Align, Cell)> {
    use Align::{Left, Right};
    let bytes: Cell = |s| opt(s.figures.bytes);
    let dtype: Cell = |s| opt(s.figures.dtype);
    match family {
        Family::Collective(_) => vec![
            ("size (B)", Right, bytes),
            ("count", Right, |s| opt(s.figures.count)),
            ("type", Left, dtype),
            ("redop", Left, |s| opt(s.figures.reduce.as_ref())),
            ("root", Right, |s| opt(s.figures.root)),
        ],
        Family::Matmul => vec![
            ("m", Right, |s| opt(s.figures.m)),
            ("n", Right, |s| opt(s.figures.n)),
            ("k", Right, |s| opt(s.figures.k)),
            ("type", Left, dtype),
            ("algorithm", Left, |s| opt(s.algorithm.as_ref())),
        ],
        Family::Fft => vec![
            ("shape", Left, |s| {
                s.figures.shape.as_deref().map_or("-".into(), shape_text)
            }),
            ("kind", Left, |s| opt(s.figures.kind.as_ref())),
            ("type", Left, dtype),
        ],
        Family::Other => vec![
            ("op", Left, |s| s.op.clone()),
            ("size (B)", Right, bytes),
            ("type", Left, dtype),
        ],
    }
}

/// A work rate: its column name, unit and figure.
#[derive(Clone, Copy)]
struct Rate {
    name: &'static str,
    unit: &'static str,
    of: fn(&StepRecord) -> Option<f64>,
}

/// The work rate a family's rows compare by (none: they compare by time).
fn rate(family: &Family) -> Option<Rate> {
    let (name, unit, of): (_, _, fn(&StepRecord) -> Option<f64>) = match family {
        Family::Collective(_) => ("busbw", "GB/s", |s| s.busbw_gbs),
        Family::Matmul => ("TFLOP/s", "", |s| s.tflops),
        Family::Fft | Family::Other => return None,
    };
    Some(Rate { name, unit, of })
}

/// A value's text, `-` for none.
fn opt(v: Option<impl ToString>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// `64x64x32`.
fn shape_text(shape: &[u64]) -> String {
    let axes: Vec<String> = shape.iter().map(u64::to_string).collect();
    axes.join("x")
}

/// Microseconds with two decimals, as nccl-tests prints them.
fn micros(seconds: f64) -> String {
    format!("{:.2}", seconds * 1e6)
}

/// A rate's text: GB/s with two decimals, TFLOP/s with three.
fn rate_text(unit: &str, v: Option<f64>) -> String {
    match (unit, v) {
        (_, None) => "-".into(),
        ("GB/s", Some(v)) => format!("{v:.2}"),
        (_, Some(v)) => format!("{v:.3}"),
    }
}

/// `b / a` as `1.08x` (three decimals below 0.1: `0.006x`); `-` where either is missing or
/// `a` is zero.
fn ratio(b: Option<f64>, a: Option<f64>) -> String {
    match (b, a) {
        (Some(b), Some(a)) if a != 0.0 && (b / a).is_finite() => match b / a {
            r if r.abs() < 0.1 => format!("{r:.3}x"),
            r => format!("{r:.2}x"),
        },
        _ => "-".into(),
    }
}

/// A check's cell: pass, FAIL or `-`.
fn check_text(s: &StepRecord) -> String {
    match s.check {
        Some(c) if c.passed => "pass".into(),
        Some(_) => "FAIL".into(),
        None => "-".into(),
    }
}

/// The check over every run of a line: `-` where none checked, `pass` where every check passed,
/// else `FAIL` and the letters of the runs that failed.
fn checks_text(line: &Line) -> String {
    let failed: Vec<String> = line
        .present()
        .filter(|r| r.step.check.is_some_and(|c| !c.passed))
        .map(|r| letter(r.run))
        .collect();
    if !failed.is_empty() {
        format!("FAIL {}", failed.join(","))
    } else if line.present().any(|r| r.step.check.is_some()) {
        "pass".into()
    } else {
        "-".into()
    }
}

/// A family's table: the step, its swept values and figures (distinct values across runs joined
/// by `/`), then one run's times and rates, or each run's time and rate and ratio to the first.
fn sheet(group: &Group, columns: &IndexMap<String, String>, runs: usize) -> Sheet {
    let described = described(&group.family);
    let rate = rate(&group.family);
    let mut header = vec!["step".to_string()];
    header.extend(columns.values().cloned());
    header.extend(described.iter().map(|d| d.0.to_string()));
    let mut align = vec![Align::Left; header.len()];
    for (i, d) in described.iter().enumerate() {
        align[1 + columns.len() + i] = d.1;
    }
    let fixed = header.len();
    let mut measured: Vec<String> = Vec::new();
    if runs == 1 {
        measured.extend(["time (us)", "min (us)"].map(String::from));
        if let Family::Collective(_) = group.family {
            measured.push("algbw (GB/s)".into());
        }
        measured.extend(rate.map(|r| with_unit(r.name, r.unit)));
    } else {
        for r in 0..runs {
            let l = letter(r);
            measured.push(format!("time {l} (us)"));
            measured.extend(rate.map(|r| with_unit(&format!("{} {l}", r.name), r.unit)));
        }
        let compared = rate.map_or("time", |r| r.name);
        measured.extend((1..runs).map(|r| format!("{compared} {}/a", letter(r))));
    }
    measured.push("check".into());
    align.extend(measured.iter().map(|h| match h.as_str() {
        "check" => Align::Left,
        _ => Align::Right,
    }));
    header.extend(measured);
    let rows = group
        .lines
        .iter()
        .map(|line| {
            let mut row = vec![line.step.to_string()];
            row.extend(
                columns
                    .keys()
                    .map(|path| line.values.get(path).map_or("-".into(), value_text)),
            );
            row.extend(described.iter().map(|d| joined(line, d.2)));
            if runs == 1 {
                let s = line.cells[0].expect("one run's line has its row").step;
                row.extend([micros(s.time_s.median), micros(s.time_s.min)]);
                if let Family::Collective(_) = group.family {
                    row.push(rate_text("GB/s", s.algbw_gbs));
                }
                row.extend(rate.map(|r| rate_text(r.unit, (r.of)(s))));
                row.push(check_text(s));
            } else {
                let steps: Vec<Option<&StepRecord>> =
                    line.cells.iter().map(|c| c.map(|r| r.step)).collect();
                for s in &steps {
                    row.push(s.map_or("-".into(), |s| micros(s.time_s.median)));
                    row.extend(rate.map(|r| rate_text(r.unit, s.and_then(r.of))));
                }
                let figure = |s: Option<&StepRecord>| match rate {
                    Some(r) => s.and_then(r.of),
                    None => s.map(|s| s.time_s.median),
                };
                row.extend(
                    steps[1..]
                        .iter()
                        .map(|s| ratio(figure(*s), figure(steps[0]))),
                );
                row.push(checks_text(line));
            }
            row
        })
        .collect();
    let mut sheet = Sheet {
        title: group.family.title().to_string(),
        header,
        align,
        rows,
    };
    sheet.drop_empty(1..fixed);
    sheet
}

/// `busbw (GB/s)`, or the name alone without a unit.
fn with_unit(name: &str, unit: &str) -> String {
    match unit {
        "" => name.to_string(),
        unit => format!("{name} ({unit})"),
    }
}

/// A figure over the runs of a line: its one value, or the runs' values joined by `/` where
/// they differ (`-` for a run without the row).
fn joined(line: &Line, cell: Cell) -> String {
    let texts: Vec<String> = (line.cells.iter())
        .map(|c| c.map_or("-".into(), |r| cell(r.step)))
        .collect();
    let first = line.present().next().map(|r| cell(r.step));
    if line.present().all(|r| Some(cell(r.step)) == first) {
        first.unwrap_or_else(|| "-".into())
    } else {
        texts.join("/")
    }
}

/// A swept value as a cell: strings bare, anything else as JSON.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// One object per row: the run's directory, step, op, point, swept values by key path, then
/// every figure (times in microseconds); null where a figure does not apply.
fn long_rows(
    runs: &[Run],
    rows: &[Row],
    columns: &IndexMap<String, String>,
) -> Vec<IndexMap<String, Value>> {
    rows.iter()
        .map(|row| {
            let (s, f) = (row.step, &row.step.figures);
            let check = s.check.map(|c| if c.passed { "pass" } else { "FAIL" });
            let named = [
                ("run", json!(runs[row.run].dir.display().to_string())),
                ("step", json!(s.name)),
                ("op", json!(s.op)),
                ("point", json!(row.point)),
            ];
            let swept = (columns.keys())
                .map(|path| (path.clone(), row.values.get(path).cloned()))
                .map(|(path, v)| (path, v.unwrap_or(Value::Null)));
            let figures = [
                ("bytes", json!(f.bytes)),
                ("count", json!(f.count)),
                ("dtype", json!(f.dtype)),
                ("reduce", json!(f.reduce)),
                ("root", json!(f.root)),
                ("m", json!(f.m)),
                ("n", json!(f.n)),
                ("k", json!(f.k)),
                ("shape", json!(f.shape)),
                ("kind", json!(f.kind)),
                ("algorithm", json!(s.algorithm)),
                ("iterations", json!(s.iterations)),
                ("warmup", json!(s.warmup)),
                ("time_us_median", json!(to_ns(s.time_s.median))),
                ("time_us_min", json!(to_ns(s.time_s.min))),
                ("time_us_max", json!(to_ns(s.time_s.max))),
                ("algbw_gbs", json!(s.algbw_gbs)),
                ("busbw_gbs", json!(s.busbw_gbs)),
                ("tflops", json!(s.tflops)),
                ("check", json!(check)),
                ("max_error", json!(s.check.map(|c| c.max_error))),
            ];
            let text = |(k, v): (&str, Value)| (k.to_string(), v);
            (named.into_iter().map(text))
                .chain(swept)
                .chain(figures.into_iter().map(text))
                .collect()
        })
        .collect()
}

/// Seconds as microseconds to the nanosecond (no binary noise in the last digits).
fn to_ns(seconds: f64) -> f64 {
    (seconds * 1e9).round() / 1e3
}

/// RFC 4180 CSV of long rows: their keys as the header, null as an empty cell, a shape as
/// `64x64`, other lists and objects as JSON.
fn csv(rows: &[IndexMap<String, Value>]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let line = |cells: Vec<String>| {
        let quoted: Vec<String> = cells.into_iter().map(|c| csv_cell(&c)).collect();
        quoted.join(",") + "\n"
    };
    let mut out = line(first.keys().cloned().collect());
    for row in rows {
        let cells = first
            .keys()
            .map(|k| match &row[k] {
                Value::Null => String::new(),
                Value::Array(a) if a.iter().all(Value::is_u64) => {
                    let axes: Vec<String> = a.iter().map(Value::to_string).collect();
                    axes.join("x")
                }
                v => value_text(v),
            })
            .collect();
        out.push_str(&line(cells));
    }
    out
}

/// A CSV cell, quoted where it holds a comma, quote or line break.
fn csv_cell(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::rows::rows;
    use crate::report::tests::{run_of, step, sweep_run};

    #[test]
    fn numbers_print_as_nccl_tests_does() {
        assert_eq!(micros(12.344e-6), "12.34");
        assert_eq!(micros(0.5), "500000.00");
        assert_eq!(rate_text("GB/s", Some(1.2345)), "1.23");
        assert_eq!(rate_text("", Some(0.01234)), "0.012");
        assert_eq!(rate_text("GB/s", None), "-");
        assert_eq!(ratio(Some(2.16), Some(2.0)), "1.08x");
        assert_eq!(ratio(Some(0.84), Some(136.53)), "0.006x");
        assert_eq!(ratio(Some(1.0), Some(0.0)), "-");
        assert_eq!(ratio(None, Some(1.0)), "-");
        assert_eq!(letter(0), "a");
        assert_eq!(letter(25), "z");
        assert_eq!(letter(26), "r27");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"x\""), "\"say \"\"x\"\"\"");
    }

    #[test]
    fn one_run_gets_nccl_tests_columns_without_empty_ones() {
        let runs = [run_of("runs/a", vec![step("ag", "all_gather")])];
        let text = render(&runs, &rows(&runs), Format::Table);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "run runs/a: 1 rank, cpu");
        assert_eq!(lines[2], "all_gather");
        let header: Vec<&str> = lines[3].split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(
            header,
            [
                "step",
                "size (B)",
                "count",
                "type",
                "time (us)",
                "min (us)",
                "algbw (GB/s)",
                "busbw (GB/s)",
                "check"
            ]
        );
        let cells: Vec<&str> = lines[4].split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "ag", "4096", "1024", "f32", "12.50", "10.00", "0.33", "0.22", "pass"
            ]
        );
    }

    #[test]
    fn several_runs_stand_side_by_side_with_ratios() {
        let mut b = run_of("b", vec![step("ar", "all_reduce"), step("mm", "matmul")]);
        b.manifest.steps[0].busbw_gbs = Some(0.44);
        b.manifest.steps[0].figures.bytes = Some(2048);
        b.manifest.steps[1].tflops = Some(3.0);
        b.manifest.steps[1].check.as_mut().unwrap().passed = false;
        let runs = [run_of("a", vec![step("ar", "all_reduce")]), b];
        let text = render(&runs, &rows(&runs), Format::Table);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "a = a: 1 rank, cpu");
        assert_eq!(lines[1], "b = b: 1 rank, cpu");
        let header: Vec<&str> = lines[4].split("  ").filter(|c| !c.is_empty()).collect();
        assert_eq!(
            header[header.len() - 6..],
            [
                "time a (us)",
                "busbw a (GB/s)",
                "time b (us)",
                "busbw b (GB/s)",
                "busbw b/a",
                "check"
            ]
        );
        let cells: Vec<&str> = lines[5].split_whitespace().collect();
        assert_eq!(cells[1], "4096/2048", "differing sizes are both shown");
        assert_eq!(cells[cells.len() - 2..], ["2.00x", "pass"]);
        assert_eq!(lines[7], "matmul");
        let cells: Vec<&str> = lines[9].split_whitespace().collect();
        assert_eq!(cells[0], "mm");
        assert!(cells.contains(&"-"), "run a has no matmul: {cells:?}");
        assert_eq!(cells[cells.len() - 3..], ["-", "FAIL", "b"]);
    }

    #[test]
    fn markdown_is_a_github_table() {
        let runs = [run_of("a", vec![step("mm", "matmul"), step("f", "fft")])];
        let text = render(&runs, &rows(&runs), Format::Md);
        assert!(text.starts_with("- run `a`: 1 rank, cpu\n"), "{text}");
        assert!(text.contains("\n### matmul\n\n| step | m | n | k | type | algorithm |"));
        assert!(text.contains("| :--- | ---: | ---: | ---: | :--- | :--- |"));
        assert!(text.contains("\n### fft\n\n| step | shape | kind | type | time (us) |"));
        assert!(text.contains("| f | 8x8 | c2c | c64 | 12.50 | 10.00 | pass |"));
    }

    #[test]
    fn long_rows_hold_every_run_and_point_with_swept_columns() {
        let runs = [
            sweep_run("x,y", &[(8, "f32"), (16, "bf16")], &["ar"]),
            run_of("b", vec![step("ar", "all_reduce")]),
        ];
        let rows = rows(&runs);
        let csv_text = render(&runs, &rows, Format::Csv);
        let lines: Vec<&str> = csv_text.lines().collect();
        assert_eq!(lines.len(), 1 + 3, "{csv_text}");
        assert!(lines[0].starts_with(
            "run,step,op,point,tensors.x.shape[0],tensors.x.dtype,bytes,count,dtype,"
        ));
        assert!(lines[1].starts_with("\"x,y\",ar,all_reduce,0,8,f32,4096,1024,f32,"));
        assert!(lines[3].starts_with("b,ar,all_reduce,,,,4096,"));
        let json: Value = serde_json::from_str(&render(&runs, &rows, Format::Json)).unwrap();
        let json = json.as_array().unwrap();
        assert_eq!(json.len(), 3);
        assert_eq!(json[1]["tensors.x.dtype"], "bf16");
        assert_eq!(json[1]["point"], 1);
        assert_eq!(json[2]["point"], Value::Null);
        assert_eq!(json[0]["time_us_median"], 12.5);
        assert_eq!(json[0]["busbw_gbs"], 0.22);
    }
}
