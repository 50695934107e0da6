//! How a plan prints: the contract's JSON, and a table for people.

use super::{Plan, Plans, TensorPlan};
use crate::dist::process_grid;
use crate::spec::tensor::Distribution;
use serde_json::{Value, json};

/// The distribution with what the plan derived filled in: slab axes as indices, process grids
/// and first-process offsets resolved for the rank count.
pub fn resolved_dist(dist: &Distribution, ndim: usize, ranks: u64) -> Distribution {
    match dist {
        Distribution::Slab(a) => Distribution::slab(a.index()),
        Distribution::Block(b) => {
            let mut b = b.clone();
            b.grid = Some(process_grid(&b.grid, ranks, ndim));
            Distribution::Block(b)
        }
        Distribution::BlockCyclic(c) => {
            let mut c = c.clone();
            c.grid = Some(process_grid(&c.grid, ranks, ndim));
            c.first = Some(c.first.unwrap_or_else(|| vec![0; ndim]));
            Distribution::BlockCyclic(c)
        }
        other => other.clone(),
    }
}

/// Bytes for people: `512 B`, `1.5 MiB`, up to TiB with one decimal.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn dist_text(d: &Distribution) -> String {
    match d {
        Distribution::Replicated => "replicated".into(),
        Distribution::Partial => "partial".into(),
        Distribution::Root(r) => format!("root {r}"),
        Distribution::Slab(a) => format!("slab {}", a.index()),
        Distribution::Block(b) => format!("block {}", grid_text(&b.grid)),
        Distribution::BlockCyclic(c) => format!(
            "block_cyclic {} blocks {}",
            grid_text(&c.grid),
            c.blocks
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join("x")
        ),
        Distribution::Boxes(b) => format!("{} boxes", b.len()),
    }
}

fn grid_text(g: &Option<Vec<u32>>) -> String {
    g.as_ref().map_or("?".into(), |g| {
        g.iter().map(u32::to_string).collect::<Vec<_>>().join("x")
    })
}

fn shape_text(s: &[u64]) -> String {
    format!(
        "[{}]",
        s.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    )
}

fn position_text(pos: usize, n_steps: usize, start: bool) -> String {
    if start && pos == 0 {
        "start".into()
    } else if pos >= n_steps {
        "end".into()
    } else {
        pos.to_string()
    }
}

fn local_range(t: &TensorPlan) -> String {
    let held: Vec<&Vec<u64>> = t.local_shapes.iter().flatten().collect();
    let none = t.local_shapes.len() - held.len();
    let count = |s: &&&Vec<u64>| s.iter().product::<u64>();
    let (Some(lo), Some(hi)) = (held.iter().min_by_key(count), held.iter().max_by_key(count))
    else {
        return "none".into();
    };
    let mut text = if lo == hi {
        shape_text(lo)
    } else {
        format!("{} .. {}", shape_text(lo), shape_text(hi))
    };
    if none > 0 {
        text.push_str(&format!(" ({none} ranks none)"));
    }
    text
}

impl Plans {
    /// `plan --json`: the contract's document for a spec without a sweep; for a sweep, the
    /// table and per point its index, values and that document.
    pub fn to_json(&self) -> Value {
        let Some(sweep) = &self.sweep else {
            return self.first().to_json();
        };
        let points: Vec<Value> = (self.points.iter())
            .map(|(point, plan)| {
                let mut v = plan.to_json();
                v["index"] = json!(point.index);
                v["values"] = json!(point.values);
                v
            })
            .collect();
        json!({ "sweep": sweep.table, "points": points })
    }

    /// The plan's tables, for a sweep one per point under its values.
    pub fn to_table(&self, title: &str) -> String {
        if self.sweep.is_none() {
            return self.first().to_table(title);
        }
        (self.points.iter())
            .map(|(point, plan)| plan.to_table(&format!("{title}, {}", point.describe())))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Plan {
    /// The contract's `plan --json` document.
    pub fn to_json(&self) -> Value {
        let tensors: serde_json::Map<String, Value> = self
            .tensors
            .iter()
            .map(|(name, t)| {
                let s = &t.state;
                let v = json!({
                    "shape": s.shape,
                    "dtype": s.dtype,
                    "layout": s.layout,
                    "distribution": resolved_dist(&s.dist, s.shape.len(), self.ranks),
                    "local_shapes": t.local_shapes.iter().map(|l| l.clone().unwrap_or_default()).collect::<Vec<_>>(),
                    "symmetric": t.symmetric.map(|(offset, bytes)| json!({"offset": offset, "bytes": bytes})),
                    "bytes_per_rank": t.bytes_per_rank.iter().copied().max().unwrap_or(0),
                    "live": [t.first, t.last],
                    "final_distribution": (t.states.len() > 1).then(|| {
                        let last = t.states.last().expect("nonempty");
                        resolved_dist(&last.dist, last.shape.len(), self.ranks)
                    }),
                });
                (name.clone(), v)
            })
            .collect();
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|s| {
                let mut v = json!({
                    "op": s.op,
                    "name": s.name,
                    "inputs": s.inputs,
                    "outputs": s.outputs,
                });
                if let Ok(Value::Object(figures)) = serde_json::to_value(&s.figures) {
                    v.as_object_mut().expect("an object").extend(figures);
                }
                let most = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
                v["workspace_bytes_per_rank"] = json!(most(&s.memory.run));
                v["check_bytes_per_rank"] = json!(most(&s.memory.check));
                v["heap_bytes"] = json!(s.memory.heap);
                if let Some(m) = &s.matmul {
                    v["algorithm"] = json!(m.algorithm.name());
                    v["detail"] = json!(m.detail);
                    v["bytes_sent_per_rank"] = json!(m.bytes_per_rank);
                } else if let Some((algorithm, detail)) = s.step.as_op().describe(s, self.ranks) {
                    v["algorithm"] = json!(algorithm);
                    v["detail"] = json!(detail);
                }
                v
            })
            .collect();
        json!({
            "ranks": self.ranks,
            "tensors": tensors,
            "steps": steps,
            "symmetric_heap_bytes": self.symmetric_heap_bytes,
            "symmetric_tensor_bytes": self.symmetric_tensor_bytes,
            "nvshmem_symmetric_size": self.nvshmem_symmetric_size,
            "write_bytes_per_rank": self.write_bytes.iter().copied().max().unwrap_or(0),
            "peak_bytes_per_rank": self.peak_bytes_per_rank,
        })
    }

    /// A readable table: tensors, steps, then memory per rank.
    pub fn to_table(&self, title: &str) -> String {
        let mut out = format!(
            "{title} on {} rank{}\n\n",
            self.ranks,
            if self.ranks == 1 { "" } else { "s" }
        );
        out.push_str(&table(&self.tensor_rows()));
        if !self.steps.is_empty() {
            out.push('\n');
            out.push_str(&table(&self.step_rows()));
        }
        out.push_str(&self.memory_text());
        out
    }

    /// The tensor table's rows, its header first: one row per tensor.
    fn tensor_rows(&self) -> Vec<Vec<String>> {
        let n_steps = self.steps.len();
        let mut rows = vec![header(&[
            "tensor",
            "shape",
            "dtype",
            "layout",
            "distribution",
            "local shape",
            "bytes/rank",
            "heap offset",
            "live",
        ])];
        for (name, t) in &self.tensors {
            let s = &t.state;
            let mut dist = dist_text(&resolved_dist(&s.dist, s.shape.len(), self.ranks));
            if let Some(last) = t.states.last().filter(|_| t.states.len() > 1) {
                dist.push_str(&format!(" -> {}", dist_text(&last.dist)));
            }
            rows.push(vec![
                name.clone(),
                shape_text(&s.shape),
                s.dtype.to_string(),
                s.layout.to_string(),
                dist,
                local_range(t),
                human_bytes(t.bytes_per_rank.iter().copied().max().unwrap_or(0)),
                t.symmetric.map_or("-".into(), |(o, _)| o.to_string()),
                format!(
                    "{}-{}",
                    position_text(t.first, n_steps, t.from_start),
                    position_text(t.last, n_steps, false)
                ),
            ]);
        }
        rows
    }

    /// The step table's rows, its header first: one row per step.
    fn step_rows(&self) -> Vec<Vec<String>> {
        let mut rows = vec![header(&[
            "step",
            "op",
            "name",
            "inputs",
            "outputs",
            "bytes",
            "algorithm",
            "sends/rank",
            "detail",
        ])];
        for (i, s) in self.steps.iter().enumerate() {
            let m = s.matmul.as_ref();
            let (algorithm, detail) = match m {
                Some(m) => (m.algorithm.name().to_string(), m.detail.clone()),
                None => (s.step.as_op().describe(s, self.ranks)).unwrap_or(("-".into(), "".into())),
            };
            rows.push(vec![
                i.to_string(),
                s.op.to_string(),
                s.name.clone(),
                s.inputs.join(", "),
                s.outputs.join(", "),
                s.figures.bytes.map_or("-".into(), human_bytes),
                algorithm,
                m.and_then(|m| m.bytes_per_rank)
                    .map_or("-".into(), human_bytes),
                detail,
            ]);
        }
        rows
    }
}

/// A table's header row.
fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

impl Plan {
    /// The table's last lines: the heap (and what NVSHMEM is given), the most a step's workspace
    /// and check and the writing hold, and the peak.
    fn memory_text(&self) -> String {
        let most = |v: &mut dyn Iterator<Item = u64>| human_bytes(v.max().unwrap_or(0));
        let mut text = format!(
            "\nsymmetric heap: {} per rank ({} bytes)\n",
            human_bytes(self.symmetric_heap_bytes),
            self.symmetric_heap_bytes,
        );
        if let Some(size) = self.nvshmem_symmetric_size {
            text.push_str(&format!(
                "NVSHMEM heap:   {} per rank (NVSHMEM_SYMMETRIC_SIZE={size}: the heap and a margin of {})\n",
                human_bytes(size),
                human_bytes(size - self.symmetric_heap_bytes)
            ));
        }
        let steps = || self.steps.iter().map(|s| &s.memory);
        text.push_str(&format!(
            "workspace:      {} per rank at most (a step's), {} (a check's), {} (writing)\n\
             peak memory:    {} per rank (heap included)\n",
            most(&mut steps().flat_map(|m| m.run.iter().copied())),
            most(&mut steps().flat_map(|m| m.check.iter().copied())),
            most(&mut self.write_bytes.iter().copied()),
            human_bytes(self.peak_bytes_per_rank)
        ));
        text
    }
}

fn table(rows: &[Vec<String>]) -> String {
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let line: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            line.join("  ").trim_end().to_string() + "\n"
        })
        .collect()
}
