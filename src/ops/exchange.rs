//! Planning one all-to-all-v exchange that moves a tensor from one distribution and layout to
//! another: the box intersections between what each rank holds and what each rank needs, turned
//! into strided copy runs (pack into the send buffer, unpack from the receive buffer, and the
//! rank's own part copied directly). Pure: no communication, no device.

use crate::backend::work::{Run, Runs};
use crate::dist::{Placement, TensorState};
use crate::spec::tensor::{Distribution, Layout};

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

impl<'a> Side<'a> {
    /// The side a tensor in `state` is on.
    pub fn of(state: &'a TensorState) -> Self {
        Side {
            dist: &state.dist,
            shape: &state.shape,
            layout: state.layout,
        }
    }
}

/// What one rank does in an exchange.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchange {
    /// Elements sent to each rank (0 for itself).
    pub send_counts: Vec<usize>,
    /// Elements received from each rank (0 from itself).
    pub recv_counts: Vec<usize>,
    /// Local source piece -> send buffer (ordered by destination rank, a part each).
    pub pack: Runs,
    /// Receive buffer (ordered by source rank, a part each) -> local destination piece.
    pub unpack: Runs,
    /// Local source piece -> local destination piece, for what the rank keeps.
    pub local: Runs,
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

/// An interval a piece holds on one axis: global `[lo, hi)`, from local index `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    lo: u64,
    hi: u64,
    at: u64,
}

/// One rank's piece: per-axis intervals with the local index each starts at, and the strides of
/// its local storage.
struct Piece {
    axes: Vec<Vec<Span>>,
    strides: Vec<usize>,
}

impl Piece {
    /// Number of elements.
    fn len(&self) -> usize {
        self.axes
            .iter()
            .map(|list| list.iter().map(|s| (s.hi - s.lo) as usize).sum::<usize>())
            .product()
    }
}

fn piece(side: &dyn Holdings, ranks: u64, rank: u64) -> Option<Piece> {
    let intervals = side.intervals(rank, ranks)?;
    let axes: Vec<Vec<Span>> = intervals
        .iter()
        .map(|list| {
            let mut start = 0;
            list.iter()
                .map(|&(lo, hi)| {
                    let at = start;
                    start += hi - lo;
                    Span { lo, hi, at }
                })
                .collect()
        })
        .collect();
    let local: Vec<usize> = axes
        .iter()
        .map(|list| list.iter().map(|s| (s.hi - s.lo) as usize).sum())
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

/// An interval two pieces both hold on one axis: global `[lo, hi)`, from local index `at_a` in
/// the first and `at_b` in the second.
#[derive(Debug, Clone, Copy)]
struct Common {
    lo: u64,
    hi: u64,
    at_a: u64,
    at_b: u64,
}

/// Per axis, the intervals both pieces hold.
fn intersect(a: &Piece, b: &Piece) -> Vec<Vec<Common>> {
    a.axes
        .iter()
        .zip(&b.axes)
        .map(|(xs, ys)| {
            let mut out = Vec::new();
            let mut sorted_ys: Vec<&Span> = ys.iter().collect();
            sorted_ys.sort_unstable();
            let mut sorted_xs: Vec<&Span> = xs.iter().collect();
            sorted_xs.sort_unstable();
            let (mut i, mut j) = (0, 0);
            while i < sorted_xs.len() && j < sorted_ys.len() {
                let (x, y) = (*sorted_xs[i], *sorted_ys[j]);
                let (lo, hi) = (x.lo.max(y.lo), x.hi.min(y.hi));
                if lo < hi {
                    out.push(Common {
                        lo,
                        hi,
                        at_a: x.at + (lo - x.lo),
                        at_b: y.at + (lo - y.lo),
                    });
                }
                if x.hi <= y.hi {
                    i += 1;
                } else {
                    j += 1;
                }
            }
            coalesce(out)
        })
        .collect()
}

/// Common intervals with each one that continues the one before it on both sides (globally
/// and in both pieces' local indices) joined to it: a rank's adjacent blocks of a block-cyclic
/// piece make one box, not a box each.
fn coalesce(commons: Vec<Common>) -> Vec<Common> {
    let mut out: Vec<Common> = Vec::with_capacity(commons.len());
    for c in commons {
        match out.last_mut() {
            Some(p)
                if p.hi == c.lo
                    && p.at_a + (p.hi - p.lo) == c.at_a
                    && p.at_b + (p.hi - p.lo) == c.at_b =>
            {
                p.hi = c.hi
            }
            _ => out.push(c),
        }
    }
    out
}

/// The axes from fastest to slowest in a layout.
fn order(ndim: usize, layout: Layout) -> Vec<usize> {
    match layout {
        Layout::C => (0..ndim).rev().collect(),
        Layout::F => (0..ndim).collect(),
    }
}

/// Runs copying every element the two pieces share, traversed in `traverse` order (fastest axis
/// first). A side without its piece (`a` or `b` None) is a contiguous buffer from `next`.
fn runs(
    common: &[Vec<Common>],
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
    let first = out.len();
    loop {
        let bounds: Vec<Common> = (0..nd).map(|ax| common[ax][pick[ax]]).collect();
        box_runs(&bounds, (a, b), traverse, next, (out, first));
        // Odometer over the interval choices, fastest axis first.
        if !advance(&mut pick, traverse, |ax| common[ax].len()) {
            return;
        }
    }
}

/// The runs of one box of common intervals (`bounds`, one per axis): one along the fast axis
/// (`traverse[0]`) for every element of the slow ones, each joined to the run before it where
/// it continues it (see [`push_run`]; only runs of `out` from `first` on).
fn box_runs(
    bounds: &[Common],
    (a, b): (Option<&Piece>, Option<&Piece>),
    traverse: &[usize],
    next: &mut usize,
    (out, first): (&mut Vec<Run>, usize),
) {
    // Within the box, an axis of one element orders nothing: runs go along the first longer one
    // (a piece `[1, n, n]` of a stack in F order would otherwise copy one element a run).
    let extent = |ax: usize| (bounds[ax].hi - bounds[ax].lo) as usize;
    let (long, single): (Vec<usize>, Vec<usize>) = traverse.iter().partition(|&&ax| extent(ax) > 1);
    let order: Vec<usize> = long.into_iter().chain(single).collect();
    let fast = order[0];
    let len = extent(fast);
    let mut idx = vec![0usize; bounds.len()];
    loop {
        let src = place(a, bounds, |c| c.at_a, &idx, fast, *next);
        let dst = place(b, bounds, |c| c.at_b, &idx, fast, *next);
        let run = Run {
            src: src.at,
            dst: dst.at,
            count: len,
            src_stride: src.stride,
            dst_stride: dst.stride,
        };
        push_run(out, first, run);
        *next += len;
        // Odometer over the slow axes within this box.
        if !advance(&mut idx, &order[1..], extent) {
            break;
        }
    }
}

/// Appends `run` to `out`, or joins it to the last run (when at `first` or after) where it
/// continues that run: the next elements at the same strides, or, for two single elements,
/// a run of two at the steps between them (so that single elements a fixed step apart on
/// each side, as the blocks of one element of a block-cyclic piece are, make one run).
fn push_run(out: &mut Vec<Run>, first: usize, run: Run) {
    if out.len() > first
        && let Some(last) = out.last_mut()
        && run.count > 0
    {
        if last.count == 1 && run.count == 1 && run.src > last.src && run.dst > last.dst {
            (last.src_stride, last.dst_stride) = (run.src - last.src, run.dst - last.dst);
            last.count = 2;
            return;
        }
        let continues = run.src == last.src + last.count * last.src_stride
            && run.dst == last.dst + last.count * last.dst_stride;
        let same = |a: usize, b: usize| a == b || run.count == 1;
        if continues
            && same(run.src_stride, last.src_stride)
            && same(run.dst_stride, last.dst_stride)
        {
            last.count += run.count;
            return;
        }
    }
    out.push(run);
}

/// Where one end of a run lies, and its step between elements.
struct Place {
    at: usize,
    stride: usize,
}

/// Where element `idx` of a box lies on one side: in `piece` (the box's local start there given
/// by `start`), stepping along `fast`; without a piece, at `next` of a contiguous buffer.
fn place(
    piece: Option<&Piece>,
    bounds: &[Common],
    start: fn(&Common) -> u64,
    idx: &[usize],
    fast: usize,
    next: usize,
) -> Place {
    match piece {
        Some(p) => Place {
            at: (0..bounds.len())
                .map(|ax| (start(&bounds[ax]) + idx[ax] as u64) as usize * p.strides[ax])
                .sum(),
            stride: p.strides[fast],
        },
        None => Place {
            at: next,
            stride: 1,
        },
    }
}

/// Steps an odometer whose digits are `digits[ax]` for `ax` in `axes` (fastest first), digit
/// `ax` running below `extent(ax)`; false once it wraps around.
fn advance(digits: &mut [usize], axes: &[usize], extent: impl Fn(usize) -> usize) -> bool {
    for &ax in axes {
        digits[ax] += 1;
        if digits[ax] < extent(ax) {
            return true;
        }
        digits[ax] = 0;
    }
    false
}

/// Plans rank `me`'s part of moving a tensor from `from` to `to` over `ranks` ranks. Elements
/// travel in the order of `from`'s layout, so packing reads the source contiguously.
pub fn plan(from: Side<'_>, to: &dyn Holdings, ranks: u64, me: u64) -> Exchange {
    let p = ranks as usize;
    let mut ex = Exchange {
        send_counts: vec![0; p],
        recv_counts: vec![0; p],
        ..Exchange::default()
    };
    let mine_from = piece(&from, ranks, me);
    let mine_to = piece(to, ranks, me);
    let peers = Peers {
        from,
        to,
        ranks,
        me,
        traverse: order(from.shape.len(), from.layout),
    };
    ex.direct_send = match &mine_from {
        Some(src) => peers.send(src, &mut ex),
        None => Some(vec![0; p]),
    };
    ex.direct_recv = match &mine_to {
        Some(dst) => peers.receive(dst, &mut ex),
        None => Some(vec![0; p]),
    };
    ex.direct_local = contiguous(&ex.local, true)
        .zip(contiguous(&ex.local, false))
        .map(|(s, d)| (s, d, ex.local.iter().map(|r| r.count).sum()));
    ex
}

/// One rank's exchange with its peers: both sides, the rank count, the rank, and the order the
/// elements travel in.
struct Peers<'a, 'h> {
    from: Side<'a>,
    to: &'h dyn Holdings,
    ranks: u64,
    me: u64,
    traverse: Vec<usize>,
}

impl Peers<'_, '_> {
    /// The rank as a sender, destination by destination: its own part into `ex.local`, the
    /// others' packed into `ex.pack` and counted. Where each destination's elements start in
    /// `src`, when every destination's lie there contiguously.
    fn send(&self, src: &Piece, ex: &mut Exchange) -> Option<Vec<usize>> {
        let (ranks, me) = (self.ranks, self.me);
        let mut direct = Some(vec![0; ranks as usize]);
        let mut next = 0;
        let (mut local, mut pack, mut starts) = (Vec::new(), Vec::new(), Vec::new());
        for q in 0..ranks {
            if !sources(self.from.dist, q, ranks).contains(&me) {
                continue;
            }
            let Some(dst) = piece(self.to, ranks, q) else {
                continue;
            };
            let common = intersect(src, &dst);
            if q == me {
                let mut unused = 0;
                runs(
                    &common,
                    Some(src),
                    Some(&dst),
                    &self.traverse,
                    &mut unused,
                    &mut local,
                );
            } else {
                let (before, first_run) = (next, pack.len());
                starts.push(first_run);
                runs(
                    &common,
                    Some(src),
                    None,
                    &self.traverse,
                    &mut next,
                    &mut pack,
                );
                ex.send_counts[q as usize] = next - before;
                match (contiguous(&pack[first_run..], true), direct.as_mut()) {
                    (Some(at), Some(d)) => d[q as usize] = at,
                    _ => direct = None,
                }
            }
        }
        (ex.local, ex.pack) = (local.into(), Runs::in_parts(pack, &starts));
        direct
    }

    /// The rank as a receiver, source by source: the others' parts unpacked from `ex.unpack`
    /// and counted. Where each source's elements start in `dst`, when they land there
    /// contiguously.
    fn receive(&self, dst: &Piece, ex: &mut Exchange) -> Option<Vec<usize>> {
        let (ranks, me) = (self.ranks, self.me);
        let mut direct = Some(vec![0; ranks as usize]);
        let mut next = 0;
        let (mut unpack, mut starts) = (Vec::new(), Vec::new());
        for r in sources(self.from.dist, me, ranks) {
            if r == me {
                continue;
            }
            let Some(src) = piece(&self.from, ranks, r) else {
                continue;
            };
            let common = intersect(&src, dst);
            let (before, first_run) = (next, unpack.len());
            starts.push(first_run);
            runs(
                &common,
                None,
                Some(dst),
                &self.traverse,
                &mut next,
                &mut unpack,
            );
            ex.recv_counts[r as usize] = next - before;
            match (contiguous(&unpack[first_run..], false), direct.as_mut()) {
                (Some(at), Some(d)) => d[r as usize] = at,
                _ => direct = None,
            }
        }
        ex.unpack = Runs::in_parts(unpack, &starts);
        direct
    }
}

/// The rows (runs before joining) that planning rank `me`'s part of the exchange from `from`
/// to `to` visits, sending and receiving, found from the pieces' intervals alone: planning
/// takes time in proportion. An axis of one element within a box counts as the fast one (more
/// rows than planning visits there).
pub fn rows(from: Side<'_>, to: &dyn Holdings, ranks: u64, me: u64) -> u64 {
    let traverse = order(from.shape.len(), from.layout);
    let Some(&fast) = traverse.first() else {
        return 0;
    };
    let of = |common: Vec<Vec<Common>>| -> u64 {
        (0..common.len())
            .map(|ax| match ax == fast {
                true => common[ax].len() as u64,
                false => common[ax].iter().map(|c| c.hi - c.lo).sum(),
            })
            .fold(1u64, u64::saturating_mul)
    };
    let mut total = 0u64;
    if let Some(src) = piece(&from, ranks, me) {
        for q in (0..ranks).filter(|&q| sources(from.dist, q, ranks).contains(&me)) {
            if let Some(dst) = piece(to, ranks, q) {
                total = total.saturating_add(of(intersect(&src, &dst)));
            }
        }
    }
    if let Some(dst) = piece(to, ranks, me) {
        for r in sources(from.dist, me, ranks)
            .into_iter()
            .filter(|&r| r != me)
        {
            if let Some(src) = piece(&from, ranks, r) {
                total = total.saturating_add(of(intersect(&src, &dst)));
            }
        }
    }
    total
}

/// Runs that lay out a whole array held by this rank (in `whole_layout`) as P consecutive blocks,
/// block q holding rank q's piece of `to` in `to`'s layout (blocks may differ in size, as uneven
/// slabs do), a part each: the send buffer of a reduce-scatter.
pub fn blocks(whole_layout: Layout, to: Side<'_>, ranks: u64) -> Runs {
    let whole = Side {
        dist: &Distribution::Replicated,
        shape: to.shape,
        layout: whole_layout,
    };
    let src = piece(&whole, ranks, 0).expect("a replicated tensor is held everywhere");
    let traverse = order(to.shape.len(), to.layout);
    let (mut out, mut starts) = (Vec::new(), Vec::new());
    let mut at = 0;
    for q in 0..ranks {
        let Some(dst) = piece(&to, ranks, q) else {
            continue;
        };
        let from = out.len();
        starts.push(from);
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
    Runs::in_parts(out, &starts)
}

#[cfg(test)]
mod tests;
