//! A report's rows: every step of every point of every run, grouped into one table per op
//! family and matched across runs by step name and point values.

use super::Run;
use crate::output::manifest::StepRecord;
use indexmap::IndexMap;
use serde_json::Value;

/// The ops whose rows form one table: each collective its own, matmul, FFT, and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Family {
    /// One collective op (`all_reduce`, ...).
    Collective(String),
    /// Matmul.
    Matmul,
    /// FFT.
    Fft,
    /// Redistribute, barrier.
    Other,
}

impl Family {
    /// The family of an op, by its name in the spec.
    pub fn of(op: &str) -> Family {
        match op {
            "matmul" => Family::Matmul,
            "fft" => Family::Fft,
            "redistribute" | "barrier" => Family::Other,
            op => Family::Collective(op.to_string()),
        }
    }

    /// The table's title.
    pub fn title(&self) -> &str {
        match self {
            Family::Collective(op) => op,
            Family::Matmul => "matmul",
            Family::Fft => "fft",
            Family::Other => "other steps",
        }
    }
}

/// One step at one point of one run.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// The run's index among those reported.
    pub run: usize,
    /// The sweep point's index, for a sweep.
    pub point: Option<u64>,
    /// The point's swept values by key path (empty outside a sweep).
    pub values: &'a IndexMap<String, Value>,
    /// What the manifest recorded of the step.
    pub step: &'a StepRecord,
}

/// Every row of the runs, run by run, each in the order it ran.
pub fn rows(runs: &[Run]) -> Vec<Row<'_>> {
    static NONE: std::sync::LazyLock<IndexMap<String, Value>> =
        std::sync::LazyLock::new(IndexMap::new);
    let mut rows = Vec::new();
    for (run, r) in runs.iter().enumerate() {
        let m = &r.manifest;
        rows.extend(m.steps.iter().map(|step| Row {
            run,
            point: None,
            values: &NONE,
            step,
        }));
        for p in &m.points {
            rows.extend(p.steps.iter().map(|step| Row {
                run,
                point: Some(p.index),
                values: &p.values,
                step,
            }));
        }
    }
    rows
}

/// The swept key paths of all rows with their column names: the path's last part
/// (`tensors.x.shape[0]` -> `shape[0]`), or the whole path where two paths share it.
pub fn swept_columns(rows: &[Row]) -> IndexMap<String, String> {
    let mut paths: Vec<&String> = Vec::new();
    for row in rows {
        for path in row.values.keys() {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    let last = |p: &str| p.rsplit('.').next().unwrap_or(p).to_string();
    paths
        .iter()
        .map(|p| {
            let short = last(p);
            let shared = paths.iter().filter(|q| last(q) == short).count() > 1;
            ((*p).clone(), if shared { (*p).clone() } else { short })
        })
        .collect()
}

/// One line of a table: a step at a point, with its row in each run (None where it is missing).
#[derive(Debug)]
pub struct Line<'a> {
    /// The step's name.
    pub step: &'a str,
    /// The point's swept values (those of the first run that has it).
    pub values: &'a IndexMap<String, Value>,
    /// Indexed by run.
    pub cells: Vec<Option<Row<'a>>>,
}

impl<'a> Line<'a> {
    /// The rows present, with their runs' indices.
    pub fn present(&self) -> impl Iterator<Item = Row<'a>> + '_ {
        self.cells.iter().flatten().copied()
    }
}

/// One table: a family's lines.
#[derive(Debug)]
pub struct Group<'a> {
    /// The ops of its rows.
    pub family: Family,
    /// A line per step and point: steps in the order they first ran, each step's points in
    /// theirs.
    pub lines: Vec<Line<'a>>,
}

/// The rows grouped into tables (families in the order they first ran) whose lines match the
/// runs' rows by op, step name and point values.
pub fn groups<'a>(rows: &[Row<'a>], runs: usize) -> Vec<Group<'a>> {
    let mut groups: Vec<Group> = Vec::new();
    let mut keys: Vec<Vec<(String, String)>> = Vec::new();
    for row in rows {
        let family = Family::of(&row.step.op);
        let g = match groups.iter().position(|g| g.family == family) {
            Some(g) => g,
            None => {
                groups.push(Group {
                    family,
                    lines: Vec::new(),
                });
                keys.push(Vec::new());
                groups.len() - 1
            }
        };
        let key = (
            format!("{}\0{}", row.step.op, row.step.name),
            point_key(row),
        );
        let at = match keys[g].iter().position(|k| *k == key) {
            Some(at) => at,
            None => {
                // After the last line of the same step, else at the end.
                let at = keys[g]
                    .iter()
                    .rposition(|k| k.0 == key.0)
                    .map_or(keys[g].len(), |i| i + 1);
                keys[g].insert(at, key);
                let line = Line {
                    step: &row.step.name,
                    values: row.values,
                    cells: vec![None; runs],
                };
                groups[g].lines.insert(at, line);
                at
            }
        };
        groups[g].lines[at].cells[row.run].get_or_insert(*row);
    }
    groups
}

/// A point's values in a form that compares equal for equal values in any key order.
fn point_key(row: &Row) -> String {
    let sorted: std::collections::BTreeMap<_, _> = row.values.iter().collect();
    serde_json::to_string(&sorted).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{run_of, step, sweep_run};

    #[test]
    fn families_keep_the_order_steps_ran_in() {
        let runs = [run_of(
            "a",
            vec![
                step("mm", "matmul"),
                step("ar", "all_reduce"),
                step("b", "barrier"),
                step("ag", "all_gather"),
                step("ar2", "all_reduce"),
                step("f", "fft"),
            ],
        )];
        let rows = rows(&runs);
        let g = groups(&rows, 1);
        let titles: Vec<_> = g.iter().map(|g| g.family.title()).collect();
        assert_eq!(
            titles,
            ["matmul", "all_reduce", "other steps", "all_gather", "fft"]
        );
        let ar: Vec<_> = g[1].lines.iter().map(|l| l.step).collect();
        assert_eq!(ar, ["ar", "ar2"]);
    }

    #[test]
    fn runs_match_by_name_and_missing_rows_are_none() {
        let runs = [
            run_of("a", vec![step("ar", "all_reduce"), step("x", "all_reduce")]),
            run_of("b", vec![step("y", "all_reduce"), step("ar", "all_reduce")]),
        ];
        let rows = rows(&runs);
        let g = groups(&rows, 2);
        let lines: Vec<_> = g[0]
            .lines
            .iter()
            .map(|l| (l.step, l.cells[0].is_some(), l.cells[1].is_some()))
            .collect();
        assert_eq!(
            lines,
            [("ar", true, true), ("x", true, false), ("y", false, true)]
        );
    }

    #[test]
    fn sweep_points_match_by_values_and_stay_with_their_step() {
        // Run a sweeps sizes 8 and 16 over two steps; b holds 16 and 32 (another order of keys).
        let a = sweep_run("a", &[(8, "f32"), (16, "f32")], &["ar", "ag"]);
        let mut b = sweep_run("b", &[(32, "f32"), (16, "f32")], &["ar", "ag"]);
        for p in &mut b.manifest.points {
            p.values.reverse();
        }
        let runs = [a, b];
        let rows = rows(&runs);
        assert_eq!(rows.len(), 8);
        let g = groups(&rows, 2);
        let ar: Vec<_> = g[0]
            .lines
            .iter()
            .map(|l| {
                let size = l.values["tensors.x.shape[0]"].as_u64().unwrap();
                (l.step, size, l.cells[0].is_some(), l.cells[1].is_some())
            })
            .collect();
        assert_eq!(
            ar,
            [
                ("ar", 8, true, false),
                ("ar", 16, true, true),
                ("ar", 32, false, true)
            ]
        );
        let columns = swept_columns(&rows);
        assert_eq!(columns["tensors.x.shape[0]"], "shape[0]");
        assert_eq!(columns["tensors.x.dtype"], "dtype");
    }

    #[test]
    fn a_shared_last_part_names_the_whole_path() {
        let mut run = sweep_run("a", &[(8, "f32")], &["ar"]);
        let p = &mut run.manifest.points[0];
        p.values.insert("tensors.y.dtype".into(), "f64".into());
        let runs = [run];
        let columns = swept_columns(&rows(&runs));
        assert_eq!(columns["tensors.x.dtype"], "tensors.x.dtype");
        assert_eq!(columns["tensors.y.dtype"], "tensors.y.dtype");
        assert_eq!(columns["tensors.x.shape[0]"], "shape[0]");
    }
}
