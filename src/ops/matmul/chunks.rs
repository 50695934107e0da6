//! The local GEMM in pieces, each waiting only for its own operand, so that the movement of the
//! next piece overlaps this piece's GEMM (on the GPU the movements run on a second stream; on
//! the CPU they run in order, with the same results).
//!
//! A gathered operand (`ag_gemm`) arrives in ring rounds: in round s every rank receives the
//! piece of rank `me - s`, a block of the product's columns (gathering b) or rows (gathering a);
//! round 0 is the rank's own piece, which needs no movement. With NVSHMEM (`nvshmem` in the
//! spec's backends) each round is a put into the receiver's symmetric buffer, by the copy
//! engines, so the GEMM keeps every SM; otherwise an NCCL exchange.
//!
//! Gathered whole (the other way a step's trials try), an operand moves by NCCL's all-gather
//! where it can run within NCCL windows, by the copy engines ([`gathered`]): slice by slice of
//! every rank's piece, the GEMM of the rank's own piece overlapping the first slice, each
//! slice's GEMMs the next.
//!
//! SUMMA on a square grid moves whole pieces too, along grid columns (b) and grid rows (a); its
//! chunks are slices of k that add into one product, the slice held here first.

use crate::backend::work::{Run, Runs, View};
use crate::backend::{Backend, Puts, Rows, puts_of};
use crate::dist::Placement;
use crate::dist::TensorState;
use crate::ops::exchange::{Custom, Intervals};
use crate::spec::tensor::Layout;
use crate::ops::movement::{Movement, Staged};
use anyhow::Result;
use std::collections::HashMap;

/// How a round's piece of an operand arrives.
pub enum Arrival<B: Backend> {
    /// An exchange (NCCL on the GPU, MPI on the CPU).
    Exchange(Box<Staged<B>>),
    /// A put of every rank's own piece into `buf` of rank `to` (symmetric), then a signal to
    /// `to` that it has landed.
    Put { buf: B::Buf, to: usize },
    /// One slice of every rank's piece, gathered within a window ([`Backend::window`], see
    /// [`gathered`]): this rank's slice copied to its block of `slice` (`own`, from the
    /// input), then an all-gather of `count` bytes a rank; `parts` views every rank's block.
    Slice {
        slice: B::Buf,
        own: Box<Runs>,
        elem: usize,
        count: usize,
        parts: Vec<B::Buf>,
    },
}

impl<B: Backend> Arrival<B> {
    /// The piece once arrived (of a slice, rank `part`'s block).
    pub fn piece(&self, part: usize) -> &B::Buf {
        match self {
            Arrival::Exchange(s) => &s.out,
            Arrival::Put { buf, .. } => buf,
            Arrival::Slice { parts, .. } => &parts[part],
        }
    }

    /// Queues the move; a put signals `(flags, at, value)` at the receiver once it has landed.
    fn queue(
        &mut self,
        b: &B,
        input: &B::Buf,
        signal: Option<(&B::Buf, usize, u32)>,
    ) -> Result<()> {
        match (self, signal) {
            (Arrival::Put { buf, to }, Some((flags, at, value))) => {
                let puts = puts_of(b);
                puts.put((input, 0), (buf, 0), Rows::flat(b.len(input)), *to)?;
                puts.signal(flags, at, value, *to)
            }
            (Arrival::Exchange(s), _) => s.run(b, input).map(|_| ()),
            (Arrival::Slice { slice, own, elem, count, .. }, _) => {
                b.copy_runs(input, slice, own, *elem)?;
                b.all_gather_window(slice, 0, *count)
            }
            (Arrival::Put { .. }, None) => anyhow::bail!("a put round without its signal"),
        }
    }
}

/// One movement of an operand's pieces: every rank queues the rounds in the same order.
pub struct Round<B: Backend> {
    /// The operand whose pieces move.
    pub of: Gathered,
    pub arrival: Arrival<B>,
}

/// One piece of the GEMM.
pub struct Chunk {
    /// The round whose arrived piece of a this chunk multiplies; None: the operand's own piece.
    pub a: Option<usize>,
    /// The round for b, likewise.
    pub b: Option<usize>,
    /// Of a round that gathers a slice of every rank's piece, the rank whose block it is.
    pub part: usize,
    /// Views of the two operands as this chunk uses them.
    pub va: View,
    pub vb: View,
    /// Row and column of the product where this chunk's block goes.
    pub at: (usize, usize),
    /// The block adds to what earlier chunks wrote there (a slice of k) instead of replacing it.
    pub accumulate: bool,
}

/// The GEMM in chunks and the rounds that bring their operands.
pub struct Pipeline<B: Backend> {
    pub rounds: Vec<Round<B>>,
    /// In the order they run: each waits only for its own rounds.
    pub chunks: Vec<Chunk>,
    /// With puts, one u32 per round on every rank (symmetric): the round's sender sets it to
    /// the run's number once the piece has landed. Signals and copy engines need no SM, so a
    /// round never waits for a GEMM to finish on either side (a barrier kernel did: 1.3 ms).
    signals: Option<B::Buf>,
    runs: u32,
    /// The rounds gather the operand whole, slice by slice ([`gathered`]), not in a ring.
    pub whole: bool,
}

impl<B: Backend> Pipeline<B> {
    fn new(b: &B, rounds: Vec<Round<B>>, chunks: Vec<Chunk>) -> Result<Self> {
        let puts = rounds
            .iter()
            .any(|r| matches!(r.arrival, Arrival::Put { .. }));
        let signals = match puts {
            true => Some(puts_of(b).symmetric(4 * rounds.len(), 4 * rounds.len())?),
            false => None,
        };
        Ok(Pipeline {
            rounds,
            chunks,
            signals,
            runs: 0,
            whole: false,
        })
    }

    /// Queues every round on the side queue (a and b as the step's inputs); one mark each.
    /// With puts, every rank first finishes its last run's GEMMs (a barrier on the main queue):
    /// then no put overwrites a piece still in use.
    pub fn queue(&mut self, b: &B, a_in: &B::Buf, b_in: &B::Buf) -> Result<Vec<B::Mark>> {
        self.runs = self.runs.wrapping_add(1);
        if self.signals.is_some() {
            puts_of(b).put_barrier()?;
        }
        let (signals, run) = (self.signals.as_ref(), self.runs);
        self.rounds
            .iter_mut()
            .enumerate()
            .map(|(i, round)| {
                let input = match round.of {
                    Gathered::A => a_in,
                    Gathered::B => b_in,
                };
                let signal = signals.map(|s| (s, 4 * i, run));
                b.side(&mut || round.arrival.queue(b, input, signal))
            })
            .collect()
    }

    /// Makes the main queue wait for round `r`'s piece (`marks` from [`Pipeline::queue`]).
    pub fn wait(&self, b: &B, r: usize, marks: &[B::Mark]) -> Result<()> {
        match (&self.rounds[r].arrival, &self.signals) {
            (Arrival::Put { .. }, Some(flags)) => puts_of(b).wait_signal(flags, 4 * r, self.runs),
            _ => b.wait(&marks[r]),
        }
    }

    /// After the last chunk: the main queue waits for this rank's own moves too (they read its
    /// inputs).
    pub fn finish(&self, b: &B, marks: &[B::Mark]) -> Result<()> {
        marks.iter().try_for_each(|m| b.wait(m))
    }

    /// Whether chunks add slices of k into one block (then no epilog fuses into the GEMM).
    pub fn accumulates(&self) -> bool {
        self.chunks.iter().any(|c| c.accumulate)
    }
}

/// Which operand a ring gathers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gathered {
    A,
    B,
}

/// One round's movement: the operand whose pieces move, and for every rank the rank whose piece
/// it receives.
pub struct Senders {
    pub of: Gathered,
    pub from: Vec<usize>,
}

/// Elements an axis of a piece spans.
fn extent(iv: &Option<Intervals>, axis: usize) -> usize {
    iv.as_ref().map_or(0, |iv| {
        iv[axis].iter().map(|(lo, hi)| (hi - lo) as usize).sum()
    })
}

fn view_of(iv: &Option<Intervals>, state: &TensorState, transpose: bool, conjugate: bool) -> View {
    View {
        rows: extent(iv, 0),
        cols: extent(iv, 1),
        layout: state.layout,
        transpose,
        conjugate,
    }
}

/// The arrival of a round in which every rank q receives the whole piece of rank `sender[q]`
/// (each rank's piece going to one rank): a put into a symmetric buffer as large as the
/// largest piece where the backend has one, an exchange otherwise.
fn arrival<B: Backend>(
    b: &B,
    state: &TensorState,
    pieces: &[Option<Intervals>],
    sender: &[usize],
) -> Result<Arrival<B>> {
    let (ranks, rank) = (b.ranks(), b.rank());
    let elem = state.dtype.size() as usize;
    let bytes = |iv: &Option<Intervals>| extent(iv, 0) * extent(iv, 1) * elem;
    let largest = pieces.iter().map(bytes).max().unwrap_or(0);
    if let Some(puts) = b.puts() {
        let buf = puts.symmetric(largest, largest)?;
        let to = sender
            .iter()
            .position(|&s| s == rank)
            .expect("every rank sends its piece to one rank");
        return Ok(Arrival::Put { buf, to });
    }
    let custom = received(state, pieces, sender);
    let m = Movement::to(state, &custom, ranks as u64, rank as u64);
    let staged = Staged::new(b, m, bytes(&pieces[sender[rank]]))?;
    Ok(Arrival::Exchange(Box::new(staged)))
}

/// What every rank holds once a round has moved `state`'s `pieces`: the piece of its sender.
fn received(state: &TensorState, pieces: &[Option<Intervals>], sender: &[usize]) -> Custom {
    Custom {
        shape: state.shape.clone(),
        layout: state.layout,
        pieces: sender.iter().map(|&s| pieces[s].clone()).collect(),
    }
}

/// What every rank holds once `round` has moved `state`'s pieces (the plan sizes each round's
/// exchange from it).
pub fn arrived(state: &TensorState, round: &Senders, ranks: usize) -> Custom {
    received(state, &pieces_of(state, ranks), &round.from)
}

/// Every rank's piece of a tensor (None where a rank holds none).
fn pieces_of(state: &TensorState, ranks: usize) -> Vec<Option<Intervals>> {
    let placement = Placement::new(&state.dist, &state.shape, ranks as u64);
    (0..ranks).map(|q| placement.intervals(q as u64)).collect()
}

/// The storage axis of `which` (used transposed or not) along the product's free axis: op(b)'s
/// columns, or op(a)'s rows.
fn free_axis(which: Gathered, transpose: bool) -> usize {
    match which {
        Gathered::B => usize::from(!transpose),
        Gathered::A => usize::from(transpose),
    }
}

/// The rounds of a ring gathering operand `which` (in `state`, used transposed or not), each
/// with the rank every rank receives from: in round s (1..P) the rank `me - s`. None when some
/// rank's piece is not one block of the product's free axis with the whole of k (then the
/// operand is gathered in one exchange).
pub fn ring_rounds(
    which: Gathered,
    state: &TensorState,
    transpose: bool,
    ranks: usize,
) -> Option<Vec<Senders>> {
    let free = free_axis(which, transpose);
    let k = 1 - free;
    if ranks < 2 || state.shape.len() != 2 {
        return None;
    }
    let whole_k = vec![(0, state.shape[k])];
    // Every rank holds a piece (a root-held operand, say, is gathered in one exchange).
    let one_block = pieces_of(state, ranks).iter().all(|iv| {
        iv.as_ref()
            .is_some_and(|iv| iv[k] == whole_k && iv[free].len() <= 1)
    });
    one_block.then(|| {
        (1..ranks)
            .map(|s| Senders {
                of: which,
                from: (0..ranks).map(|r| (r + ranks - s) % ranks).collect(),
            })
            .collect()
    })
}

/// The ring rounds gathering operand `which` (see [`ring_rounds`]) beside the other operand's
/// whole piece (`other`); chunk s multiplies the piece of round s (chunk 0 the rank's own).
pub fn ring<B: Backend>(
    b: &B,
    which: Gathered,
    state: &TensorState,
    (transpose, conjugate): (bool, bool),
    other: View,
) -> Result<Option<Pipeline<B>>> {
    let (ranks, rank) = (b.ranks(), b.rank());
    let Some(senders) = ring_rounds(which, state, transpose, ranks) else {
        return Ok(None);
    };
    let free = free_axis(which, transpose);
    let pieces = pieces_of(state, ranks);
    let mut rounds = Vec::new();
    let mut chunks = Vec::new();
    for s in 0..ranks {
        let mine = &pieces[(rank + ranks - s) % ranks];
        let view = view_of(mine, state, transpose, conjugate);
        let start = mine
            .as_ref()
            .and_then(|iv| iv[free].first())
            .map_or(0, |&(lo, _)| lo as usize);
        let moved = (s > 0).then_some(rounds.len());
        if s > 0 {
            let arrival = arrival(b, state, &pieces, &senders[s - 1].from)?;
            rounds.push(Round { of: which, arrival });
        }
        let (a, vb, va, bm, at) = match which {
            Gathered::B => (None, view, other, moved, (0, start)),
            Gathered::A => (moved, other, view, None, (start, 0)),
        };
        chunks.push(Chunk {
            a,
            b: bm,
            part: 0,
            va,
            vb,
            at,
            accumulate: false,
        });
    }
    Pipeline::new(b, rounds, chunks).map(Some)
}

/// The most slices of every rank's piece that an operand gathered whole moves in (see
/// [`gathered`]): the GEMM of this rank's own piece overlaps the first, each slice's GEMMs the
/// next. As many slices as ranks (at least 2, at most this), the most of them that split the
/// pieces evenly, so that each slice gathers about one piece's worth, as much as the GEMM of the
/// own piece covers. On 4 H200s by NCCL alone, 4 slices against 2: f16 16384^3 3.30 -> 3.04 ms,
/// f16 12000^3 1.52 -> 1.44, f32 10000^3 10.86 -> 10.62, f32 8192^3 5.58 -> 5.67; on 2, f32
/// 10000^3 took 19.56 ms in 2 slices, 20.54 in 4 (bench/RESULTS.md, 2026-11-27 eleventh).
const SLICES: usize = 4;

/// How [`gathered`] slices an operand: every rank's piece is `slices` slices of `w` lines along
/// the product's free axis (storage axis `free`), each line `k` elements, stored one after the
/// other; block (i, q) of the window, at element `(i * P + q) * w * k`, holds slice i of rank
/// q's piece once gathered.
#[derive(Debug, PartialEq, Eq)]
struct Slicing {
    free: usize,
    k: usize,
    slices: usize,
    w: usize,
    /// Where each rank's piece starts along the free axis.
    starts: Vec<usize>,
}

/// One GEMM of a gathered operand: the round whose slice it multiplies (None: the rank's own
/// piece, from its input), the rank whose block it is, its lines, and where they start along
/// the product's free axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    round: Option<usize>,
    part: usize,
    lines: usize,
    start: usize,
}

impl Slicing {
    /// Where every rank's piece of `state` (the operand `which`, used transposed or not) is
    /// one block of the free axis with the whole of k, stored with the free axis outermost (a
    /// slice is then contiguous), all as wide and split evenly into the slices (then the
    /// window holds what the operand gathered whole would, which the plan counts); else None.
    fn of(which: Gathered, state: &TensorState, transpose: bool, ranks: usize) -> Option<Self> {
        let free = free_axis(which, transpose);
        let outermost = match state.layout {
            Layout::C => free == 0,
            Layout::F => free == 1,
        };
        ring_rounds(which, state, transpose, ranks).filter(|_| outermost)?;
        let pieces = pieces_of(state, ranks);
        let widest = pieces.iter().map(|iv| extent(iv, free)).max().unwrap_or(0);
        let most = ranks.clamp(2, SLICES).min(widest);
        let slices = (1..=most).rev().find(|s| widest % s == 0).unwrap_or(1);
        let w = widest / slices;
        let starts = pieces.iter().map(|iv| {
            let first = iv.as_ref().and_then(|iv| iv[free].first());
            first.map_or(0, |&(lo, _)| lo as usize)
        });
        (slices * w * ranks == state.shape[free] as usize).then(|| Slicing {
            free,
            k: state.shape[1 - free] as usize,
            slices,
            w,
            starts: starts.collect(),
        })
    }

    /// Elements of one block.
    fn count(&self) -> usize {
        self.w * self.k
    }

    /// Slice i of `rank`'s input copied to its block of the slice's all-gather (elements from
    /// that slice's start).
    fn own(&self, rank: usize, i: usize) -> Run {
        Run::contiguous(i * self.count(), rank * self.count(), self.count())
    }

    /// `rank`'s GEMMs in the order they run: its own piece, then each slice's blocks of the
    /// other ranks (in ring order from it).
    fn blocks(&self, rank: usize) -> Vec<Block> {
        let ranks = self.starts.len();
        let own = Block {
            round: None,
            part: rank,
            lines: self.slices * self.w,
            start: self.starts[rank],
        };
        let others = (0..self.slices).flat_map(|i| {
            (1..ranks).map(move |s| (rank + s) % ranks).map(move |q| Block {
                round: Some(i),
                part: q,
                lines: self.w,
                start: self.starts[q] + i * self.w,
            })
        });
        std::iter::once(own).chain(others).collect()
    }
}

/// The operand `which` (in `state`, used transposed or not) gathered whole within a window
/// ([`Backend::window`]: by the copy engines, the SMs left to the GEMMs) in all-gathers (up to
/// [`SLICES`]), each of one slice of every rank's piece along the product's free axis; the
/// GEMM of this rank's own piece (from its input) runs first, then each slice's, block by
/// block, once gathered ([`Slicing`]). Where the backend has windows but no puts (which move
/// rings faster) and the pieces slice so; else None.
pub fn gathered<B: Backend>(
    b: &B,
    which: Gathered,
    state: &TensorState,
    (transpose, conjugate): (bool, bool),
    other: View,
) -> Result<Option<Pipeline<B>>> {
    let (ranks, rank) = (b.ranks(), b.rank());
    let Some(sl) = Slicing::of(which, state, transpose, ranks).filter(|_| b.puts().is_none())
    else {
        return Ok(None);
    };
    let elem = state.dtype.size() as usize;
    let count = sl.count() * elem;
    let Some(win) = b.window(sl.slices * ranks * count)? else {
        return Ok(None);
    };
    let chunks = sl.blocks(rank).into_iter().map(|blk| {
        let (rows, cols) = match sl.free {
            0 => (blk.lines, sl.k),
            _ => (sl.k, blk.lines),
        };
        let view = View {
            rows,
            cols,
            layout: state.layout,
            transpose,
            conjugate,
        };
        let (a, b, va, vb, at) = match which {
            Gathered::B => (None, blk.round, other, view, (0, blk.start)),
            Gathered::A => (blk.round, None, view, other, (blk.start, 0)),
        };
        Chunk {
            a,
            b,
            part: blk.part,
            va,
            vb,
            at,
            accumulate: false,
        }
    });
    let mut rounds = Vec::new();
    for i in 0..sl.slices {
        let slice = b.window_part(&win, i * ranks * count, ranks * count)?;
        let parts = (0..ranks)
            .map(|q| b.window_part(&slice, q * count, count))
            .collect::<Result<Vec<_>>>()?;
        let arrival = Arrival::Slice {
            slice,
            own: Box::new(sl.own(rank, i).into()),
            elem,
            count,
            parts,
        };
        rounds.push(Round { of: which, arrival });
    }
    let mut pipeline = Pipeline::new(b, rounds, chunks.collect())?;
    pipeline.whole = true;
    Ok(Some(pipeline))
}

/// For every rank, the ranks (in rank order) whose `key` of their piece equals its own.
fn groups(ranks: usize, key: impl Fn(usize) -> Vec<(u64, u64)>) -> Vec<Vec<usize>> {
    let mut by_key: HashMap<Vec<(u64, u64)>, Vec<usize>> = HashMap::new();
    for q in 0..ranks {
        by_key.entry(key(q)).or_default().push(q);
    }
    (0..ranks).map(|q| by_key[&key(q)].clone()).collect()
}

/// A square grid of ranks read off every rank's pieces of a and b, as SUMMA in rounds needs it.
#[derive(Debug)]
struct Grid {
    /// For every rank, its grid row (the ranks holding the same rows of a) and its grid column
    /// (the same columns of b), in rank order.
    row: Vec<Vec<usize>>,
    col: Vec<Vec<usize>>,
    /// For every rank q and the i-th rank x of its grid row: the rank of q's grid column whose
    /// k-rows of b are the k-columns of a that x holds.
    partner: Vec<Vec<usize>>,
}

impl Grid {
    /// The grid of the pieces `ia` of a and `ib` of b (per rank: rows and columns); None unless
    /// it is square, of side 2 or more, and splits k alike along its rows and columns.
    fn of(ia: &[Intervals], ib: &[Intervals]) -> Option<Grid> {
        let ranks = ia.len();
        let (row, col) = (
            groups(ranks, |q| ia[q][0].clone()),
            groups(ranks, |q| ib[q][1].clone()),
        );
        let p = row.first()?.len();
        let partner: Vec<Vec<usize>> = (0..ranks)
            .map(|q| {
                row[q]
                    .iter()
                    .map(|&x| {
                        let mut found = col[q].iter().copied().filter(|&y| ib[y][0] == ia[x][1]);
                        match (found.next(), found.next()) {
                            (Some(y), None) => Some(y),
                            _ => None,
                        }
                    })
                    .collect::<Option<Vec<usize>>>()
            })
            .collect::<Option<_>>()?;
        let square = (0..ranks).all(|q| row[q].len() == p && col[q].len() == p);
        (p >= 2 && square).then_some(Grid { row, col, partner })
    }
}

/// SUMMA's grid for a and b (untransposed) and its rounds: on a square grid of P x P ranks that
/// split k alike (along each grid row, the k-columns of every rank's piece of a are the k-rows
/// of one rank's piece of b along the grid column), in rounds t = 1..P every rank sends its
/// piece of b to the rank t further along its grid column, then its piece of a t further
/// along its grid row. None for other grids (the panels are then gathered in one exchange).
fn summa_grid(sa: &TensorState, sb: &TensorState, ranks: usize) -> Option<(Grid, Vec<Senders>)> {
    if ranks < 2 || sa.shape.len() != 2 || sb.shape.len() != 2 {
        return None;
    }
    let ia: Vec<Intervals> = pieces_of(sa, ranks).into_iter().collect::<Option<_>>()?;
    let ib: Vec<Intervals> = pieces_of(sb, ranks).into_iter().collect::<Option<_>>()?;
    let grid = Grid::of(&ia, &ib)?;
    let p = grid.row[0].len();
    // Round 2(t-1) moves b, round 2(t-1)+1 moves a: rank q receives the piece of the rank t
    // before it in its group.
    let mut rounds = Vec::new();
    for t in 1..p {
        for (of, group) in [(Gathered::B, &grid.col), (Gathered::A, &grid.row)] {
            let from = (0..ranks)
                .map(|q| group[q][(position(&group[q], q) + p - t) % p])
                .collect();
            rounds.push(Senders { of, from });
        }
    }
    Some((grid, rounds))
}

/// Where rank `q` stands in its grid row or column.
fn position(group: &[usize], q: usize) -> usize {
    group.iter().position(|&x| x == q).unwrap_or(0)
}

/// The rounds of SUMMA (see [`summa_grid`]), None where the operands make no square grid.
pub fn summa_rounds(sa: &TensorState, sb: &TensorState, ranks: usize) -> Option<Vec<Senders>> {
    summa_grid(sa, sb, ranks).map(|(_, rounds)| rounds)
}

/// SUMMA in rounds (see [`summa_grid`]): the product is P chunks, one slice of k each,
/// accumulated: the slice held whole here first, the others in the order their pieces arrive.
/// None for other grids.
pub fn summa<B: Backend>(
    b: &B,
    sa: &TensorState,
    sb: &TensorState,
    conjugate: (bool, bool),
) -> Result<Option<Pipeline<B>>> {
    let (ranks, rank) = (b.ranks(), b.rank());
    let Some((Grid { row, col, partner }, senders)) = summa_grid(sa, sb, ranks) else {
        return Ok(None);
    };
    let (pa, pb) = (pieces_of(sa, ranks), pieces_of(sb, ranks));
    let p = row[rank].len();
    let rounds = senders
        .iter()
        .map(|s| {
            let (state, pieces) = match s.of {
                Gathered::B => (sb, &pb),
                Gathered::A => (sa, &pa),
            };
            let arrival = arrival(b, state, pieces, &s.from)?;
            Ok(Round { of: s.of, arrival })
        })
        .collect::<Result<Vec<_>>>()?;
    let round = |group: &[usize], x: usize, moves: usize| {
        let t = (position(group, rank) + p - position(group, x)) % p;
        2 * (t - 1) + moves
    };
    let (m, n) = (extent(&pa[rank], 0), extent(&pb[rank], 1));
    let mut chunks: Vec<Chunk> = row[rank]
        .iter()
        .copied()
        .zip(partner[rank].iter().copied())
        .filter(|&(x, _)| extent(&pa[x], 1) > 0)
        .map(|(x, y)| {
            let k = extent(&pa[x], 1);
            Chunk {
                a: (x != rank).then(|| round(&row[rank], x, 1)),
                b: (y != rank).then(|| round(&col[rank], y, 0)),
                part: 0,
                va: View {
                    rows: m,
                    cols: k,
                    layout: sa.layout,
                    transpose: false,
                    conjugate: conjugate.0,
                },
                vb: View {
                    rows: k,
                    cols: n,
                    layout: sb.layout,
                    transpose: false,
                    conjugate: conjugate.1,
                },
                at: (0, 0),
                accumulate: true,
            }
        })
        .collect();
    // None (held here) before every round; then by the later of the two rounds.
    chunks.sort_by_key(|c| c.a.max(c.b));
    if let Some(first) = chunks.first_mut() {
        first.accumulate = false;
    }
    Pipeline::new(b, rounds, chunks).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tensor::{BlockCyclicSpec, Distribution, GridLayout};

    /// Every rank's pieces of an m x k a and a k x n b, block-cyclic with these blocks.
    fn pieces(
        ranks: u64,
        (m, k, n): (u64, u64, u64),
        (a, b): ([u64; 2], [u64; 2]),
    ) -> (Vec<Intervals>, Vec<Intervals>) {
        let of = |shape: [u64; 2], blocks: [u64; 2]| {
            let dist = Distribution::BlockCyclic(BlockCyclicSpec {
                grid: None,
                blocks: blocks.to_vec(),
                grid_layout: GridLayout::ColMajor,
                first: None,
            });
            let p = Placement::new(&dist, &shape, ranks);
            (0..ranks).map(|q| p.intervals(q).unwrap()).collect()
        };
        (of([m, k], a), of([k, n], b))
    }

    #[test]
    fn slices_gathered_in_a_window_give_every_gemm_its_lines() {
        use crate::spec::tensor::DType;
        // b gathered by columns in F order, a by rows in C order: lines of k along the free
        // axis, contiguous. Element (line x, j) of the whole operand is x * k + j + 1.
        // The slices: as many as ranks (2 to 4), the most that split the pieces evenly.
        for (which, layout, ranks, lines, k, slices) in [
            (Gathered::B, Layout::F, 2, 12, 5, 2),
            (Gathered::B, Layout::F, 4, 16, 3, 4),
            (Gathered::A, Layout::C, 3, 18, 7, 3),
            (Gathered::A, Layout::C, 4, 8, 2, 2),
            (Gathered::B, Layout::F, 4, 12, 2, 3),
            (Gathered::A, Layout::C, 3, 15, 4, 1),
        ] {
            let free = free_axis(which, false);
            let mut shape = [k as u64; 2];
            shape[free] = lines as u64;
            let state = TensorState {
                shape: shape.to_vec(),
                dtype: DType::F32,
                layout,
                dist: Distribution::slab(free),
            };
            let sl = Slicing::of(which, &state, false, ranks).expect("even pieces slice");
            assert_eq!(sl.slices, slices, "{which:?}, {lines} lines over {ranks} ranks");
            let count = sl.count();
            let input = |q: usize| -> Vec<u64> {
                let n = slices * sl.w;
                (0..n * k).map(|e| ((sl.starts[q] + e / k) * k + e % k) as u64 + 1).collect()
            };
            // Each rank copies its slice i to its block, then the all-gather gives every rank
            // every rank's block.
            let mut window = vec![vec![0u64; slices * ranks * count]; ranks];
            for i in 0..slices {
                for (q, win) in window.iter_mut().enumerate() {
                    let r = sl.own(q, i);
                    let at = i * ranks * count;
                    win[at + r.dst..at + r.dst + r.count]
                        .copy_from_slice(&input(q)[r.src..r.src + r.count]);
                }
                for q in 0..ranks {
                    let at = (i * ranks + q) * count;
                    let block = window[q][at..at + count].to_vec();
                    for win in window.iter_mut() {
                        win[at..at + count].copy_from_slice(&block);
                    }
                }
            }
            for (me, win) in window.iter().enumerate() {
                let mut seen = vec![0; lines];
                for blk in sl.blocks(me) {
                    let data = match blk.round {
                        None => input(me),
                        Some(i) => {
                            let at = (i * ranks + blk.part) * count;
                            win[at..at + count].to_vec()
                        }
                    };
                    assert_eq!(data.len(), blk.lines * k);
                    for (e, &v) in data.iter().enumerate() {
                        let want = ((blk.start + e / k) * k + e % k) as u64 + 1;
                        assert_eq!(v, want, "{which:?} {ranks} ranks, rank {me}, {blk:?}");
                    }
                    (blk.start..blk.start + blk.lines).for_each(|x| seen[x] += 1);
                }
                assert!(seen.iter().all(|&n| n == 1), "rank {me}: {seen:?}");
            }
        }
        // Uneven pieces, or lines not outermost in storage, gather in one exchange.
        let state = |lines: u64, layout| TensorState {
            shape: vec![4, lines],
            dtype: DType::F32,
            layout,
            dist: Distribution::slab(1),
        };
        assert!(Slicing::of(Gathered::B, &state(14, Layout::F), false, 4).is_none());
        assert!(Slicing::of(Gathered::B, &state(16, Layout::C), false, 4).is_none());
        assert!(Slicing::of(Gathered::B, &state(16, Layout::F), false, 1).is_none());
        assert!(Slicing::of(Gathered::B, &state(16, Layout::F), false, 4).is_some());
    }

    #[test]
    fn square_grids_that_split_k_alike_make_a_summa_grid() {
        for (ranks, side) in [(4, 2), (9, 3)] {
            let (ia, ib) = pieces(ranks, (37, 29, 23), ([5, 7], [7, 3]));
            let grid = Grid::of(&ia, &ib).expect("a square grid");
            for q in 0..ranks as usize {
                assert_eq!(grid.row[q].len(), side);
                assert!(grid.row[q].contains(&q) && grid.col[q].contains(&q));
                // Each partner holds, along q's grid column, the k-rows of b that its row
                // peer holds as k-columns of a.
                for (&x, &y) in grid.row[q].iter().zip(&grid.partner[q]) {
                    assert!(grid.col[q].contains(&y));
                    assert_eq!(ib[y][0], ia[x][1]);
                }
            }
        }
    }

    #[test]
    fn other_grids_gather_their_panels_instead() {
        // 2 and 3 ranks: 2x1 and 3x1 grids, not square.
        for ranks in [2, 3] {
            let (ia, ib) = pieces(ranks, (37, 29, 23), ([5, 7], [7, 3]));
            assert!(Grid::of(&ia, &ib).is_none(), "{ranks} ranks");
        }
        // a's k blocks (7) differ from b's (6): no rank of b's grid column holds a's k-columns.
        let (ia, ib) = pieces(4, (37, 29, 23), ([5, 7], [6, 3]));
        assert!(Grid::of(&ia, &ib).is_none());
    }
}
