//! Whether a distribution fits a shape and a rank count.

use super::Region;
use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::tensor::{BlockCyclicSpec, Distribution};

/// Every reason `dist` (at `path`) cannot lay out `shape` over `ranks` ranks. With `ranks` unknown,
/// only what does not depend on it is checked.
pub fn check(
    dist: &Distribution,
    shape: &[u64],
    ranks: Option<u64>,
    path: &KeyPath,
) -> Vec<Diagnostic> {
    let nd = shape.len();
    let mut out = Vec::new();
    match dist {
        Distribution::Replicated | Distribution::Partial => {}
        Distribution::Root(r) => {
            if let Some(p) = ranks.filter(|&p| u64::from(*r) >= p) {
                out.push(
                    Diagnostic::value(
                        path.key("root"),
                        format!("root rank {r} does not exist with {p} ranks"),
                    )
                    .help(format!("use a rank from 0 to {}", p - 1)),
                );
            }
        }
        Distribution::Slab(axis) => {
            if axis.index() >= nd {
                out.push(
                    Diagnostic::value(
                        path.key("slab"),
                        format!("slab axis {} does not exist in a tensor of {nd} axes (shape {shape:?})", axis.index()),
                    )
                    .help(format!("use an axis from 0 to {}", nd - 1)),
                );
            }
        }
        Distribution::Block(b) => {
            check_grid(b.grid.as_deref(), nd, ranks, &path.key("block"), &mut out);
        }
        Distribution::BlockCyclic(c) => {
            check_block_cyclic(c, shape, ranks, &path.key("block_cyclic"), &mut out)
        }
        Distribution::Boxes(boxes) => {
            check_boxes(boxes, shape, ranks, &path.key("boxes"), &mut out)
        }
    }
    out
}

/// Checks a block-cyclic layout (at `here`): its grid, one block size per axis, and a first
/// process per axis inside the grid.
fn check_block_cyclic(
    c: &BlockCyclicSpec,
    shape: &[u64],
    ranks: Option<u64>,
    here: &KeyPath,
    out: &mut Vec<Diagnostic>,
) {
    let nd = shape.len();
    check_grid(c.grid.as_deref(), nd, ranks, here, out);
    if c.blocks.len() != nd {
        out.push(
            Diagnostic::value(
                here.key("blocks"),
                format!(
                    "{} block sizes for a tensor of {nd} axes (shape {shape:?})",
                    c.blocks.len()
                ),
            )
            .help("give one block size per axis"),
        );
    }
    let Some(first) = &c.first else {
        return;
    };
    if first.len() != nd {
        out.push(
            Diagnostic::value(
                here.key("first"),
                format!("{} entries for a tensor of {nd} axes", first.len()),
            )
            .help("give one grid coordinate per axis"),
        );
    }
    let grid = match (&c.grid, ranks) {
        (Some(_), _) | (None, Some(_)) => super::process_grid(&c.grid, ranks.unwrap_or(1), nd),
        (None, None) => vec![],
    };
    for (i, (f, g)) in first.iter().zip(&grid).enumerate() {
        if f >= g {
            out.push(
                Diagnostic::value(
                    here.key("first").index(i),
                    format!("first process {f} is outside grid axis {i} of size {g}"),
                )
                .help(format!("use 0 to {}", g - 1)),
            );
        }
    }
}

/// Checks a process grid (at `path`): one entry per axis, and as many processes as ranks.
fn check_grid(
    grid: Option<&[u32]>,
    nd: usize,
    ranks: Option<u64>,
    path: &KeyPath,
    out: &mut Vec<Diagnostic>,
) {
    let Some(grid) = grid else {
        return;
    };
    let here = path.key("grid");
    if grid.len() != nd {
        out.push(
            Diagnostic::value(
                here.clone(),
                format!("a grid of {} axes for a tensor of {nd} axes", grid.len()),
            )
            .help("give one grid entry per tensor axis (1 for an axis that is not split)"),
        );
    }
    // At most three u32 entries: no overflow in u128.
    let product: u128 = grid.iter().map(|&g| u128::from(g)).product();
    if let Some(p) = ranks.filter(|&p| u128::from(p) != product) {
        let dims = grid
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("x");
        out.push(
            Diagnostic::value(
                here,
                format!("a {dims} grid holds {product} ranks, but the job has {p}"),
            )
            .help(format!("the product of the grid entries must equal {p}")),
        );
    }
}

/// Checks explicit boxes (at `path`): one per rank, each inside the shape, together covering it
/// exactly once.
fn check_boxes(
    boxes: &[[Vec<u64>; 2]],
    shape: &[u64],
    ranks: Option<u64>,
    path: &KeyPath,
    out: &mut Vec<Diagnostic>,
) {
    if let Some(p) = ranks.filter(|&p| p != boxes.len() as u64) {
        out.push(
            Diagnostic::value(path.clone(), format!("{} boxes for {p} ranks", boxes.len()))
                .help("give one [lower, upper) box per rank, in rank order"),
        );
    }
    let Some(regions) = box_regions(boxes, shape, path, out) else {
        return;
    };
    let overlapped = check_overlaps(&regions, path, out);
    if !overlapped {
        check_coverage(&regions, shape, path, out);
    }
}

/// The boxes as regions, where every box has corners of the shape's axes and lies inside it
/// (reversed on no axis); None after saying which do not.
fn box_regions(
    boxes: &[[Vec<u64>; 2]],
    shape: &[u64],
    path: &KeyPath,
    out: &mut Vec<Diagnostic>,
) -> Option<Vec<Region>> {
    let nd = shape.len();
    let mut regions = Vec::new();
    for (i, [lo, hi]) in boxes.iter().enumerate() {
        let here = path.index(i);
        if lo.len() != nd || hi.len() != nd {
            out.push(
                Diagnostic::value(
                    here,
                    format!(
                        "box {i} has corners of {} and {} axes; the tensor has {nd}",
                        lo.len(),
                        hi.len()
                    ),
                )
                .help("write each box as [[lower...], [upper...]] with one entry per axis"),
            );
            continue;
        }
        let bad = (0..nd).find(|&a| lo[a] > hi[a] || hi[a] > shape[a]);
        if let Some(a) = bad {
            out.push(
                Diagnostic::value(
                    here,
                    format!(
                        "box {i} spans [{}, {}) on axis {a}, outside [0, {}) or reversed",
                        lo[a], hi[a], shape[a]
                    ),
                )
                .help("each box needs lower <= upper <= the global shape on every axis"),
            );
            continue;
        }
        regions.push(Region {
            lower: lo.clone(),
            upper: hi.clone(),
        });
    }
    (regions.len() == boxes.len()).then_some(regions)
}

/// Says where boxes (rank by rank) overlap; whether any do.
fn check_overlaps(regions: &[Region], path: &KeyPath, out: &mut Vec<Diagnostic>) -> bool {
    let mut overlapped = false;
    for (i, a) in regions.iter().enumerate() {
        for (j, b) in regions.iter().enumerate().skip(i + 1) {
            if let Some(common) = a.intersect(b) {
                overlapped = true;
                out.push(
                    Diagnostic::value(
                        path.index(j),
                        format!(
                            "box {j} overlaps box {i} from {:?} up to {:?}",
                            common.lower, common.upper
                        ),
                    )
                    .help("boxes must cover the global shape exactly once"),
                );
            }
        }
    }
    overlapped
}

/// Checks that boxes that do not overlap cover every element of `shape`.
fn check_coverage(regions: &[Region], shape: &[u64], path: &KeyPath, out: &mut Vec<Diagnostic>) {
    // In u128: a shape past 64 bits of elements is refused elsewhere, and must not panic here.
    let volume = |extents: &mut dyn Iterator<Item = u64>| {
        extents.fold(1u128, |v, n| v.saturating_mul(n.into()))
    };
    let total = volume(&mut shape.iter().copied());
    let covered: u128 = (regions.iter())
        .map(|r| {
            volume(
                &mut r
                    .lower
                    .iter()
                    .zip(&r.upper)
                    .map(|(l, u)| u.saturating_sub(*l)),
            )
        })
        .fold(0, u128::saturating_add);
    if covered != total {
        out.push(
            Diagnostic::value(
                path.clone(),
                format!("the boxes cover {covered} of the {total} elements of shape {shape:?}"),
            )
            .help("boxes must cover the global shape exactly once"),
        );
    }
}
