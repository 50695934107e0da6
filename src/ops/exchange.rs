//! Planning one all-to-all-v exchange that moves a tensor from one distribution and layout to
//! another: the box intersections between what each rank holds and what each rank needs, turned
//! into strided copy runs (pack into the send buffer, unpack from the receive buffer, and the
//! rank's own part copied directly). Pure: no communication, no device.

use crate::dist::Placement;
use crate::spec::tensor::{Distribution, Layout};

/// A strided copy of `count` elements: element `i` goes from `src + i*src_stride` to
/// `dst + i*dst_stride` (in elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// First source element.
    pub src: usize,
    /// First destination element.
    pub dst: usize,
    /// Elements to copy.
    pub count: usize,
    /// Source step between elements.
    pub src_stride: usize,
    /// Destination step between elements.
    pub dst_stride: usize,
}

impl Run {
    /// `count` consecutive elements from `src` to `dst`.
    pub fn contiguous(src: usize, dst: usize, count: usize) -> Self {
        Run {
            src,
            dst,
            count,
            src_stride: 1,
            dst_stride: 1,
        }
    }
}

/// One side of an exchange: a tensor's distribution and layout over its global shape.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// Distribution over the ranks.
    pub dist: &'a Distribution,
    /// Global shape.
    pub shape: &'a [u64],
    /// Storage order of each local piece.
    pub layout: Layout,
}

/// What one rank does in an exchange.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    /// Elements sent to each rank (0 for itself).
    pub send_counts: Vec<usize>,
    /// Elements received from each rank (0 from itself).
    pub recv_counts: Vec<usize>,
    /// Local source piece -> send buffer (ordered by destination rank).
    pub pack: Vec<Run>,
    /// Receive buffer (ordered by source rank) -> local destination piece.
    pub unpack: Vec<Run>,
    /// Local source piece -> local destination piece, for what the rank keeps.
    pub local: Vec<Run>,
    /// Where each destination's elements start in the source piece, when every destination's
    /// elements lie there contiguously in order (then nothing needs packing).
    pub direct_send: Option<Vec<usize>>,
    /// Where each source's elements start in the destination piece, when they land there
    /// contiguously in order (then nothing needs unpacking).
    pub direct_recv: Option<Vec<usize>>,
    /// The rank's own part as (source start, destination start, count), when it is one
    /// contiguous range at both ends (then it can travel with the others).
    pub direct_local: Option<(usize, usize, usize)>,
}

/// Where a peer's runs start on one side, when they follow each other contiguously there.
fn contiguous(runs: &[Run], src_side: bool) -> Option<usize> {
    let pos = |r: &Run| {
        if src_side {
            (r.src, r.src_stride)
        } else {
            (r.dst, r.dst_stride)
        }
    };
    let first = runs.first().map_or(0, |r| pos(r).0);
    let mut next = first;
    for r in runs {
        let (at, stride) = pos(r);
        if at != next || (stride != 1 && r.count > 1) {
            return None;
        }
        next += r.count;
    }
    Some(first)
}

impl Exchange {
    /// Elements this rank sends to others.
    pub fn sent(&self) -> usize {
        self.send_counts.iter().sum()
    }
}

/// Per axis, the `[lo, hi)` global intervals a rank holds, in local order.
pub type Intervals = Vec<Vec<(u64, u64)>>;

/// What every rank holds of a tensor: per axis, `[lo, hi)` global intervals in local order (the
/// rank holds their Cartesian product), or None.
pub trait Holdings {
    /// The global shape.
    fn shape(&self) -> &[u64];
    /// Storage order of the pieces.
    fn layout(&self) -> Layout;
    /// What `rank` holds.
    fn intervals(&self, rank: u64, ranks: u64) -> Option<Intervals>;
    /// How many elements `rank` holds along each axis (none: zeros).
    fn extents(&self, rank: u64, ranks: u64) -> Vec<u64> {
        self.intervals(rank, ranks).map_or_else(
            || vec![0; self.shape().len()],
            |iv| {
                iv.iter()
                    .map(|axis| axis.iter().map(|(lo, hi)| hi - lo).sum())
                    .collect()
            },
        )
    }
}

impl Holdings for Side<'_> {
    fn shape(&self) -> &[u64] {
        self.shape
    }
    fn layout(&self) -> Layout {
        self.layout
    }
    fn intervals(&self, rank: u64, ranks: u64) -> Option<Intervals> {
        Placement::new(self.dist, self.shape, ranks).intervals(rank)
    }
    // Without listing a block-cyclic piece's blocks (a plan sizes pieces of any tensor).
    fn extents(&self, rank: u64, ranks: u64) -> Vec<u64> {
        Placement::new(self.dist, self.shape, ranks)
            .local_shape(rank)
            .unwrap_or_else(|| vec![0; self.shape.len()])
    }
}

/// Holdings given rank by rank, for layouts no distribution names (SUMMA's panels).
#[derive(Debug, Clone)]
pub struct Custom {
    /// Global shape.
    pub shape: Vec<u64>,
    /// Storage order.
    pub layout: Layout,
    /// Per rank, per axis intervals.
    pub pieces: Vec<Option<Intervals>>,
}

impl Holdings for Custom {
    fn shape(&self) -> &[u64] {
        &self.shape
    }
    fn layout(&self) -> Layout {
        self.layout
    }
    fn intervals(&self, rank: u64, _: u64) -> Option<Intervals> {
        self.pieces[rank as usize].clone()
    }
}

/// One rank's piece: per-axis intervals with the local index each starts at, and the strides of
/// its local storage.
struct Piece {
    axes: Vec<Vec<(u64, u64, u64)>>,
    strides: Vec<usize>,
}

impl Piece {
    /// Number of elements.
    fn len(&self) -> usize {
        self.axes
            .iter()
            .map(|list| {
                list.iter()
                    .map(|(lo, hi, _)| (hi - lo) as usize)
                    .sum::<usize>()
            })
            .product()
    }
}

fn piece(side: &dyn Holdings, ranks: u64, rank: u64) -> Option<Piece> {
    let intervals = side.intervals(rank, ranks)?;
    let axes: Vec<Vec<(u64, u64, u64)>> = intervals
        .iter()
        .map(|list| {
            let mut start = 0;
            list.iter()
                .map(|&(lo, hi)| {
                    let at = start;
                    start += hi - lo;
                    (lo, hi, at)
                })
                .collect()
        })
        .collect();
    let local: Vec<usize> = axes
        .iter()
        .map(|list| list.iter().map(|(lo, hi, _)| (hi - lo) as usize).sum())
        .collect();
    Some(Piece {
        strides: strides(&local, side.layout()),
        axes,
    })
}

/// Element strides of a local shape stored in `layout`.
pub fn strides(shape: &[usize], layout: Layout) -> Vec<usize> {
    let n = shape.len();
    let mut s = vec![1; n];
    match layout {
        Layout::C => {
            for a in (0..n.saturating_sub(1)).rev() {
                s[a] = s[a + 1] * shape[a + 1];
            }
        }
        Layout::F => {
            for a in 1..n {
                s[a] = s[a - 1] * shape[a - 1];
            }
        }
    }
    s
}

/// The ranks whose pieces feed rank `q` under `from`: itself for replicated data, the root for
/// root data, everyone otherwise (their pieces do not overlap).
fn sources(from: &Distribution, q: u64, ranks: u64) -> Vec<u64> {
    match from {
        Distribution::Replicated | Distribution::Partial => vec![q],
        Distribution::Root(r) => vec![u64::from(*r)],
        _ => (0..ranks).collect(),
    }
}

/// Per axis, the intervals both pieces hold: (lo, hi, local start in a, local start in b).
fn intersect(a: &Piece, b: &Piece) -> Vec<Vec<(u64, u64, u64, u64)>> {
    a.axes
        .iter()
        .zip(&b.axes)
        .map(|(xs, ys)| {
            let mut out = Vec::new();
            let mut sorted_ys: Vec<&(u64, u64, u64)> = ys.iter().collect();
            sorted_ys.sort_unstable();
            let mut sorted_xs: Vec<&(u64, u64, u64)> = xs.iter().collect();
            sorted_xs.sort_unstable();
            let (mut i, mut j) = (0, 0);
            while i < sorted_xs.len() && j < sorted_ys.len() {
                let (xl, xh, xs0) = *sorted_xs[i];
                let (yl, yh, ys0) = *sorted_ys[j];
                let (lo, hi) = (xl.max(yl), xh.min(yh));
                if lo < hi {
                    out.push((lo, hi, xs0 + (lo - xl), ys0 + (lo - yl)));
                }
                if xh <= yh {
                    i += 1;
                } else {
                    j += 1;
                }
            }
            out
        })
        .collect()
}

/// The axes from fastest to slowest in a layout.
fn order(ndim: usize, layout: Layout) -> Vec<usize> {
    match layout {
        Layout::C => (0..ndim).rev().collect(),
        Layout::F => (0..ndim).collect(),
    }
}

/// Runs copying every element the two pieces share, traversed in `traverse` order (fastest axis
/// first). `a_packed`/`b_packed` replace a side's strides with a contiguous buffer position.
fn runs(
    common: &[Vec<(u64, u64, u64, u64)>],
    a: Option<&Piece>,
    b: Option<&Piece>,
    traverse: &[usize],
    next: &mut usize,
    out: &mut Vec<Run>,
) {
    let nd = common.len();
    if common.iter().any(Vec::is_empty) {
        return;
    }
    // Iterate over the intervals of every axis, then over the elements of every slow axis.
    let mut pick = vec![0usize; nd];
    loop {
        let bounds: Vec<(u64, u64, u64, u64)> = (0..nd).map(|ax| common[ax][pick[ax]]).collect();
        // Within the box, an axis of one element orders nothing: runs go along the first longer
        // one (a piece `[1, n, n]` of a stack in F order would otherwise copy one element a run).
        let (long, single): (Vec<usize>, Vec<usize>) = traverse
            .iter()
            .partition(|&&ax| bounds[ax].1 - bounds[ax].0 > 1);
        let mut within = long.into_iter().chain(single);
        let fast = within.next().expect("a tensor has an axis");
        let slow: Vec<usize> = within.collect();
        let len = (bounds[fast].1 - bounds[fast].0) as usize;
        let mut idx = vec![0u64; nd];
        loop {
            let offset = |p: Option<&Piece>, second: bool| {
                p.map(|p| {
                    (0..nd)
                        .map(|ax| {
                            let start = if second { bounds[ax].3 } else { bounds[ax].2 };
                            (start + idx[ax]) as usize * p.strides[ax]
                        })
                        .sum::<usize>()
                })
            };
            let (src, src_stride) = match offset(a, false) {
                Some(o) => (o, a.expect("some").strides[fast]),
                None => (*next, 1),
            };
            let (dst, dst_stride) = match offset(b, true) {
                Some(o) => (o, b.expect("some").strides[fast]),
                None => (*next, 1),
            };
            out.push(Run {
                src,
                dst,
                count: len,
                src_stride,
                dst_stride,
            });
            *next += len;
            // Odometer over the slow axes within this box.
            let mut k = 0;
            loop {
                if k == slow.len() {
                    break;
                }
                let ax = slow[k];
                idx[ax] += 1;
                if idx[ax] < bounds[ax].1 - bounds[ax].0 {
                    break;
                }
                idx[ax] = 0;
                k += 1;
            }
            if k == slow.len() {
                break;
            }
        }
        // Odometer over the interval choices, fastest axis first.
        let mut k = 0;
        loop {
            if k == nd {
                return;
            }
            let ax = traverse[k];
            pick[ax] += 1;
            if pick[ax] < common[ax].len() {
                break;
            }
            pick[ax] = 0;
            k += 1;
        }
    }
}

/// Plans rank `me`'s part of moving a tensor from `from` to `to` over `ranks` ranks. Elements
/// travel in the order of `from`'s layout, so packing reads the source contiguously.
pub fn plan(from: Side<'_>, to: &dyn Holdings, ranks: u64, me: u64) -> Exchange {
    let p = ranks as usize;
    let traverse = order(from.shape.len(), from.layout);
    let mut ex = Exchange {
        send_counts: vec![0; p],
        recv_counts: vec![0; p],
        ..Exchange::default()
    };
    let mine_from = piece(&from, ranks, me);
    let mine_to = piece(to, ranks, me);
    let mut direct_send = Some(vec![0; p]);
    let mut direct_recv = Some(vec![0; p]);
    // As a sender, destination by destination.
    let mut next = 0;
    if let Some(src) = &mine_from {
        for q in 0..ranks {
            if !sources(from.dist, q, ranks).contains(&me) {
                continue;
            }
            let Some(dst) = piece(to, ranks, q) else {
                continue;
            };
            let common = intersect(src, &dst);
            if q == me {
                let mut unused = 0;
                runs(
                    &common,
                    Some(src),
                    Some(&dst),
                    &traverse,
                    &mut unused,
                    &mut ex.local,
                );
            } else {
                let (before, first_run) = (next, ex.pack.len());
                runs(&common, Some(src), None, &traverse, &mut next, &mut ex.pack);
                ex.send_counts[q as usize] = next - before;
                match (
                    contiguous(&ex.pack[first_run..], true),
                    direct_send.as_mut(),
                ) {
                    (Some(at), Some(d)) => d[q as usize] = at,
                    _ => direct_send = None,
                }
            }
        }
    }
    // As a receiver, source by source.
    let mut next = 0;
    if let Some(dst) = &mine_to {
        for r in sources(from.dist, me, ranks) {
            if r == me {
                continue;
            }
            let Some(src) = piece(&from, ranks, r) else {
                continue;
            };
            let common = intersect(&src, dst);
            let (before, first_run) = (next, ex.unpack.len());
            runs(
                &common,
                None,
                Some(dst),
                &traverse,
                &mut next,
                &mut ex.unpack,
            );
            ex.recv_counts[r as usize] = next - before;
            match (
                contiguous(&ex.unpack[first_run..], false),
                direct_recv.as_mut(),
            ) {
                (Some(at), Some(d)) => d[r as usize] = at,
                _ => direct_recv = None,
            }
        }
    }
    ex.direct_send = direct_send;
    ex.direct_recv = direct_recv;
    ex.direct_local = contiguous(&ex.local, true)
        .zip(contiguous(&ex.local, false))
        .map(|(s, d)| (s, d, ex.local.iter().map(|r| r.count).sum()));
    ex
}

/// Runs that lay out a whole array held by this rank (in `whole_layout`) as P consecutive blocks,
/// block q holding rank q's piece of `to` in `to`'s layout (blocks may differ in size, as uneven
/// slabs do): the send buffer of a reduce-scatter.
pub fn blocks(whole_layout: Layout, to: Side<'_>, ranks: u64) -> Vec<Run> {
    let whole = Side {
        dist: &Distribution::Replicated,
        shape: to.shape,
        layout: whole_layout,
    };
    let src = piece(&whole, ranks, 0).expect("a replicated tensor is held everywhere");
    let traverse = order(to.shape.len(), to.layout);
    let mut out = Vec::new();
    let mut at = 0;
    for q in 0..ranks {
        let Some(dst) = piece(&to, ranks, q) else {
            continue;
        };
        let from = out.len();
        let mut unused = 0;
        runs(
            &intersect(&src, &dst),
            Some(&src),
            Some(&dst),
            &traverse,
            &mut unused,
            &mut out,
        );
        for r in &mut out[from..] {
            r.dst += at;
        }
        at += dst.len();
    }
    out
}

#[cfg(test)]
mod tests;
