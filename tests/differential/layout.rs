//! Distributions as the contract defines them, written out here on their own: which global
//! indices each rank's piece holds, per axis, and the piece's elements in its storage order.
//! The tester checks every shard a run writes against them.

use serde_json::Value as Json;

/// A distribution, as a spec writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Dist {
    Replicated,
    Partial,
    Root(usize),
    Slab(usize),
    Block {
        grid: Option<Vec<usize>>,
        row_major: bool,
    },
    BlockCyclic {
        grid: Option<Vec<usize>>,
        row_major: bool,
        blocks: Vec<usize>,
        first: Option<Vec<usize>>,
    },
    Boxes(Vec<(Vec<usize>, Vec<usize>)>),
}

/// A TOML array of integers.
pub fn list(v: &[usize]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn grid_keys(grid: &Option<Vec<usize>>, row_major: bool) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some(g) = grid {
        keys.push(format!("grid = {}", list(g)));
    }
    if row_major {
        keys.push("grid_layout = \"row-major\"".into());
    }
    keys
}

impl Dist {
    /// The TOML value (axes sometimes by name, as specs may write them).
    pub fn toml(&self, named_axis: bool) -> String {
        match self {
            Dist::Replicated => "\"replicated\"".into(),
            Dist::Partial => "\"partial\"".into(),
            Dist::Root(r) => format!("{{ root = {r} }}"),
            Dist::Slab(a) if named_axis && *a < 3 => {
                format!("{{ slab = \"{}\" }}", ["x", "y", "z"][*a])
            }
            Dist::Slab(a) => format!("{{ slab = {a} }}"),
            Dist::Block { grid, row_major } => {
                format!(
                    "{{ block = {{ {} }} }}",
                    grid_keys(grid, *row_major).join(", ")
                )
            }
            Dist::BlockCyclic {
                grid,
                row_major,
                blocks,
                first,
            } => {
                let mut keys = grid_keys(grid, *row_major);
                keys.push(format!("blocks = {}", list(blocks)));
                if let Some(f) = first {
                    keys.push(format!("first = {}", list(f)));
                }
                format!("{{ block_cyclic = {{ {} }} }}", keys.join(", "))
            }
            Dist::Boxes(boxes) => format!(
                "{{ boxes = [{}] }}",
                boxes
                    .iter()
                    .map(|(lo, hi)| format!("[{}, {}]", list(lo), list(hi)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// A distribution as the manifest records it.
    pub fn from_json(j: &Json) -> Dist {
        let uints = |v: &Json| -> Vec<usize> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect()
        };
        let opt = |v: &Json| (!v.is_null()).then(|| uints(v));
        let axis = |v: &Json| match v {
            Json::String(s) => ["x", "y", "z"].iter().position(|n| n == s).unwrap(),
            other => other.as_u64().unwrap() as usize,
        };
        match j {
            Json::String(s) if s == "replicated" => Dist::Replicated,
            Json::String(s) if s == "partial" => Dist::Partial,
            Json::Object(o) => {
                let (k, v) = o.iter().next().unwrap();
                let row_major = |v: &Json| v["grid_layout"].as_str() == Some("row-major");
                match k.as_str() {
                    "root" => Dist::Root(v.as_u64().unwrap() as usize),
                    "slab" => Dist::Slab(axis(v)),
                    "block" => Dist::Block {
                        grid: opt(&v["grid"]),
                        row_major: row_major(v),
                    },
                    "block_cyclic" => Dist::BlockCyclic {
                        grid: opt(&v["grid"]),
                        row_major: row_major(v),
                        blocks: uints(&v["blocks"]),
                        first: opt(&v["first"]),
                    },
                    "boxes" => Dist::Boxes(
                        v.as_array()
                            .unwrap()
                            .iter()
                            .map(|b| (uints(&b[0]), uints(&b[1])))
                            .collect(),
                    ),
                    other => panic!("unknown distribution {other} in the manifest"),
                }
            }
            other => panic!("unknown distribution {other} in the manifest"),
        }
    }

    /// The global indices rank `r` of `p` holds along each axis (in local order), or None when
    /// it holds nothing.
    pub fn piece(&self, shape: &[usize], p: usize, r: usize) -> Option<Vec<Vec<usize>>> {
        let all = |a: usize| (0..shape[a]).collect::<Vec<_>>();
        let whole = || (0..shape.len()).map(all).collect();
        match self {
            Dist::Replicated | Dist::Partial => Some(whole()),
            Dist::Root(q) => (*q == r).then(whole),
            Dist::Slab(axis) => {
                let (lo, hi) = crate::model::slab(shape[*axis], p, r);
                let mut v: Vec<Vec<usize>> = whole();
                v[*axis] = (lo..hi).collect();
                Some(v)
            }
            Dist::Block { grid, row_major } => {
                let g = grid.clone().unwrap_or_else(|| dims_create(p, shape.len()));
                let c = coords(r, &g, *row_major);
                Some(
                    (0..shape.len())
                        .map(|a| {
                            let b = shape[a].div_ceil(g[a]);
                            (c[a] * b..((c[a] + 1) * b).min(shape[a])).collect()
                        })
                        .collect(),
                )
            }
            Dist::BlockCyclic {
                grid,
                row_major,
                blocks,
                first,
            } => {
                let g = grid.clone().unwrap_or_else(|| dims_create(p, shape.len()));
                let c = coords(r, &g, *row_major);
                let first = first.clone().unwrap_or(vec![0; shape.len()]);
                Some(
                    (0..shape.len())
                        .map(|a| {
                            // Block j (of blocks[a] elements) lives on grid coordinate
                            // (first + j) mod g.
                            (0..shape[a])
                                .filter(|&i| (first[a] + i / blocks[a]) % g[a] == c[a])
                                .collect()
                        })
                        .collect(),
                )
            }
            Dist::Boxes(boxes) => {
                let (lo, hi) = &boxes[r];
                Some((0..shape.len()).map(|a| (lo[a]..hi[a]).collect()).collect())
            }
        }
    }
}

/// Grid coordinates of rank r: col-major numbers the first axis fastest, row-major the last.
fn coords(r: usize, grid: &[usize], row_major: bool) -> Vec<usize> {
    let mut c = vec![0; grid.len()];
    let mut rest = r;
    let order: Vec<usize> = if row_major {
        (0..grid.len()).rev().collect()
    } else {
        (0..grid.len()).collect()
    };
    for a in order {
        c[a] = rest % grid[a];
        rest /= grid[a];
    }
    c
}

/// MPI_Dims_create's grid: the most nearly square factorization of `p` into `nd` entries,
/// larger first.
pub fn dims_create(p: usize, nd: usize) -> Vec<usize> {
    // Every factorization, the one with the smallest spread (largest minimum, then smallest
    // maximum) wins.
    fn go(p: usize, nd: usize, max: usize, out: &mut Vec<usize>, best: &mut Option<Vec<usize>>) {
        if nd == 1 {
            if p <= max {
                out.push(p);
                let better = match best {
                    None => true,
                    Some(b) => {
                        let key = |v: &[usize]| (v[0] - v[v.len() - 1], v[0]);
                        key(out) < key(b)
                    }
                };
                if better {
                    *best = Some(out.clone());
                }
                out.pop();
            }
            return;
        }
        for d in (1..=max.min(p)).rev() {
            if p.is_multiple_of(d) {
                out.push(d);
                go(p / d, nd - 1, d, out, best);
                out.pop();
            }
        }
    }
    let mut best = None;
    go(p, nd, p, &mut Vec::new(), &mut best);
    best.unwrap()
}

/// The elements of a piece (per-axis global indices) in storage order, as C-order global
/// linear indices.
pub fn piece_order(shape: &[usize], axes: &[Vec<usize>], fortran: bool) -> Vec<usize> {
    let nd = shape.len();
    let local: Vec<usize> = axes.iter().map(Vec::len).collect();
    let n: usize = local.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0; nd];
    let order: Vec<usize> = if fortran {
        (0..nd).collect()
    } else {
        (0..nd).rev().collect()
    };
    for _ in 0..n {
        let g = (0..nd).fold(0, |acc, a| acc * shape[a] + axes[a][idx[a]]);
        out.push(g);
        for &a in &order {
            idx[a] += 1;
            if idx[a] < local[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}
