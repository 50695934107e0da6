//! Choosing a distributed matmul algorithm from the operands' distributions: every algorithm that
//! can run is priced by the bytes each rank sends, and `auto` takes the cheapest.

use super::{MatmulAlgorithm, MatmulPipeline};
use crate::spec::tensor::Distribution;
use indexmap::IndexSet;

/// How an operand of `op(x)` (after its transpose) is split, in the product's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    /// Every rank holds all of it.
    Whole,
    /// Split along its rows (slab 0 of `op(x)`).
    Rows,
    /// Split along its columns (slab 1 of `op(x)`).
    Cols,
    /// Block or block-cyclic over a 2-D grid.
    Grid,
    /// Anything else (root, boxes).
    Other,
}

fn split(dist: &Distribution, transposed: bool) -> Split {
    let s = match dist {
        Distribution::Replicated => Split::Whole,
        Distribution::Slab(a) if a.index() == 0 => Split::Rows,
        Distribution::Slab(_) => Split::Cols,
        Distribution::Block(_) | Distribution::BlockCyclic(_) => Split::Grid,
        _ => Split::Other,
    };
    match (s, transposed) {
        (Split::Rows, true) => Split::Cols,
        (Split::Cols, true) => Split::Rows,
        (s, _) => s,
    }
}

/// What the planner needs to know of one matmul.
#[derive(Debug, Clone)]
pub struct MatmulCase<'a> {
    /// a's distribution.
    pub a: &'a Distribution,
    /// b's distribution.
    pub b: &'a Distribution,
    /// c's distribution, when there is a c.
    pub c: Option<&'a Distribution>,
    /// The declared distribution of the result, if any.
    pub out: Option<&'a Distribution>,
    /// Whether a is used transposed.
    pub transpose_a: bool,
    /// Whether b is used transposed.
    pub transpose_b: bool,
    /// Bytes of the operands and the result.
    pub bytes: OperandBytes,
    /// Rank count (None: unknown; priced as 2).
    pub ranks: Option<u64>,
    /// How an operand gathered whole travels.
    pub pipeline: MatmulPipeline,
}

/// Bytes of a matmul's operands and result (over every rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperandBytes {
    /// a's bytes.
    pub a: u64,
    /// b's bytes.
    pub b: u64,
    /// The result's bytes.
    pub out: u64,
}

/// The algorithm chosen for a matmul, with what it moves.
#[derive(Debug, Clone, PartialEq)]
pub struct MatmulChoice {
    /// The algorithm.
    pub algorithm: MatmulAlgorithm,
    /// The result's distribution.
    pub out: Distribution,
    /// The distribution the algorithm itself leaves the result in (before any final
    /// redistribution to `out`).
    pub natural: Distribution,
    /// What runs, in a few words.
    pub detail: String,
    /// Bytes each rank sends (estimated for ring collectives); None when the rank count is unknown.
    pub bytes_per_rank: Option<u64>,
}

/// One way to run the matmul, with what it moves and what that costs.
struct Candidate {
    algorithm: MatmulAlgorithm,
    out: Distribution,
    natural: Distribution,
    detail: Vec<String>,
    cost: f64,
}

impl Candidate {
    /// An algorithm that leaves the result in `dist` through the phases `detail`, sending
    /// `cost` bytes per rank.
    fn new(algorithm: MatmulAlgorithm, dist: Distribution, detail: &[&str], cost: f64) -> Self {
        Candidate {
            algorithm,
            natural: dist.clone(),
            out: dist,
            detail: detail.iter().map(|s| s.to_string()).collect(),
            cost,
        }
    }
}

/// What the candidates are priced with: the rank count, the share of a collective's data each
/// rank sends (`(p - 1) / p`), and the operands' bytes.
struct Prices {
    ranks: f64,
    share: f64,
    a: f64,
    b: f64,
    out: f64,
}

impl Prices {
    /// The prices of `case` (an unknown rank count priced as 2).
    fn of(case: &MatmulCase<'_>) -> Self {
        let ranks = case.ranks.unwrap_or(2).max(1) as f64;
        Prices {
            ranks,
            share: (ranks - 1.0) / ranks,
            a: case.bytes.a as f64,
            b: case.bytes.b as f64,
            out: case.bytes.out as f64,
        }
    }
}

/// Every algorithm that can run this matmul, cheapest first.
fn candidates(case: &MatmulCase<'_>) -> Vec<Candidate> {
    let prices = Prices::of(case);
    let sa = split(case.a, case.transpose_a);
    let sb = split(case.b, case.transpose_b);
    if case.out == Some(&Distribution::Partial) {
        return vec![k_split(case, &prices, sa, sb)];
    }
    let mut out: Vec<Candidate> = local(sa, sb).into_iter().collect();
    gathers_and_reductions(case.pipeline, &prices, sa, sb, &mut out);
    out.extend(summa(case, &prices));
    out.push(redistribute(&prices, sa, sb));
    for cand in &mut out {
        move_c_and_result(cand, case, &prices);
    }
    // Cheapest first; among equals, fewer phases, then the order above.
    out.sort_by(|x, y| {
        x.cost
            .total_cmp(&y.cost)
            .then(x.detail.len().cmp(&y.detail.len()))
    });
    out
}

/// The one way to a partial result: each rank's own product over its slice of k, unreduced. The
/// operands move to k-slabs where they are not there already (and c and the bias to rank 0,
/// which adds them).
fn k_split(case: &MatmulCase<'_>, prices: &Prices, sa: Split, sb: Split) -> Candidate {
    let mut moves = Moves::of_operands(
        prices,
        (sa != Split::Cols).then_some("redistribute a to slices of k"),
        (sb != Split::Rows).then_some("redistribute b to slices of k"),
    );
    moves.then("local GEMM on this rank's slice of k, the partial products left unreduced");
    if case.c.is_some() {
        moves.then("rank 0 adds beta * c");
        moves.cost += prices.share * prices.out;
    }
    moves.candidate(MatmulAlgorithm::KSplit, Distribution::Partial)
}

/// The phases of an algorithm that moves data where it needs it, and the bytes each rank sends.
#[derive(Default)]
struct Moves {
    detail: Vec<&'static str>,
    cost: f64,
}

impl Moves {
    /// The moves of a and b, each named where it moves (each rank sending its share of it).
    fn of_operands(prices: &Prices, a: Option<&'static str>, b: Option<&'static str>) -> Self {
        let mut moves = Moves::default();
        for (phase, bytes) in [(a, prices.a), (b, prices.b)] {
            if let Some(phase) = phase {
                moves.then(phase);
                moves.cost += prices.share * bytes;
            }
        }
        moves
    }

    /// Adds `phase`, which sends nothing.
    fn then(&mut self, phase: &'static str) {
        self.detail.push(phase);
    }

    /// The candidate of `algorithm` through these phases, leaving the result in `dist`.
    fn candidate(self, algorithm: MatmulAlgorithm, dist: Distribution) -> Candidate {
        Candidate::new(algorithm, dist, &self.detail, self.cost)
    }
}

/// The local GEMM, where the operands' pieces already multiply into the result's.
fn local(sa: Split, sb: Split) -> Option<Candidate> {
    let dist = match (sa, sb) {
        (Split::Rows, Split::Whole) => Distribution::slab(0),
        (Split::Whole, Split::Cols) => Distribution::slab(1),
        (Split::Whole, Split::Whole) => Distribution::Replicated,
        _ => return None,
    };
    Some(Candidate::new(
        MatmulAlgorithm::Local,
        dist,
        &["local GEMM"],
        0.0,
    ))
}

/// The slab algorithms: an operand all-gathered (its GEMM per ring round where the pieces are
/// whole blocks of the product), or a k-split product reduce-scattered or all-reduced.
fn gathers_and_reductions(
    pipeline: MatmulPipeline,
    prices: &Prices,
    sa: Split,
    sb: Split,
    out: &mut Vec<Candidate>,
) {
    use MatmulAlgorithm::*;
    let f = prices.share;
    // Pieces that are whole blocks of the product's columns (rows) arrive in ring rounds, each
    // round's GEMM overlapping the next round's move (ops::matmul::chunks).
    let ring = match pipeline {
        MatmulPipeline::Auto => {
            "GEMM per ring round as each piece arrives, or after the whole gather if trials find it faster"
        }
        MatmulPipeline::Rounds => "GEMM per ring round as each piece arrives",
        MatmulPipeline::Whole => "local GEMM",
    };
    if sa == Split::Rows && sb == Split::Cols {
        out.push(Candidate::new(
            AgGemm,
            Distribution::slab(0),
            &["all-gather b", ring],
            f * prices.b,
        ));
    } else if sa == Split::Rows && sb == Split::Rows {
        out.push(Candidate::new(
            AgGemm,
            Distribution::slab(0),
            &["all-gather b", "local GEMM"],
            f * prices.b,
        ));
    }
    if sb == Split::Cols && sa == Split::Rows {
        out.push(Candidate::new(
            AgGemm,
            Distribution::slab(1),
            &["all-gather a", ring],
            f * prices.a,
        ));
    } else if sb == Split::Cols && sa == Split::Cols {
        out.push(Candidate::new(
            AgGemm,
            Distribution::slab(1),
            &["all-gather a", "local GEMM"],
            f * prices.a,
        ));
    }
    if sa == Split::Cols && sb == Split::Rows {
        out.push(Candidate::new(
            GemmRs,
            Distribution::slab(0),
            &["local GEMM on a k-slice", "reduce-scatter"],
            f * prices.out,
        ));
        out.push(Candidate::new(
            GemmAr,
            Distribution::Replicated,
            &["local GEMM on a k-slice", "all-reduce"],
            2.0 * f * prices.out,
        ));
    }
}

/// SUMMA over the operands' common 2-D grid, where they share one (see [`summa_out`]).
fn summa(case: &MatmulCase<'_>, prices: &Prices) -> Option<Candidate> {
    let out_dist = summa_out(case)?;
    let given = match case.a {
        Distribution::Block(b) => &b.grid,
        Distribution::BlockCyclic(c) => &c.grid,
        _ => &None,
    };
    let grid = crate::dist::process_grid(given, prices.ranks as u64, 2);
    let (pr, pc) = (grid[0] as f64, grid[1] as f64);
    let cost = prices.a / pr * (pc - 1.0) / pc + prices.b / pc * (pr - 1.0) / pr;
    Some(Candidate::new(
        MatmulAlgorithm::Summa,
        out_dist,
        &["SUMMA: panels broadcast along grid rows and columns"],
        cost,
    ))
}

/// The fallback that always runs: a to row slabs and b replicated where they are not, then the
/// local GEMM.
fn redistribute(prices: &Prices, sa: Split, sb: Split) -> Candidate {
    let mut moves = Moves::of_operands(
        prices,
        (sa != Split::Rows).then_some("redistribute a to row slabs"),
        (sb != Split::Whole).then_some("replicate b"),
    );
    moves.then("local GEMM");
    moves.candidate(MatmulAlgorithm::Redistribute, Distribution::slab(0))
}

/// Adds to `cand` the move of c to its result's distribution and of the result to the declared
/// one, where they differ: one more move each.
fn move_c_and_result(cand: &mut Candidate, case: &MatmulCase<'_>, prices: &Prices) {
    if let Some(c) = case.c
        && *c != cand.out
    {
        cand.detail.insert(0, "redistribute c".into());
        cand.cost += prices.share * prices.out;
    }
    if let Some(target) = case.out
        && *target != cand.out
    {
        cand.detail.push("redistribute the result".into());
        cand.cost += prices.share * prices.out;
        cand.out = target.clone();
    }
}

/// SUMMA runs when a, b (untransposed) and c share one 2-D grid and kind, with matching k blocks;
/// the result takes the same grid.
fn summa_out(case: &MatmulCase<'_>) -> Option<Distribution> {
    if case.transpose_a || case.transpose_b {
        return None;
    }
    let same = |x: &Option<Vec<u32>>, y: &Option<Vec<u32>>| same_grid(x, y, case.ranks);
    match (case.a, case.b) {
        (Distribution::Block(a), Distribution::Block(b))
            if same(&a.grid, &b.grid)
                && a.grid_layout == b.grid_layout
                && a.grid.as_ref().is_none_or(|g| g.len() == 2) =>
        {
            Some(case.a.clone())
        }
        (Distribution::BlockCyclic(a), Distribution::BlockCyclic(b))
            if same(&a.grid, &b.grid)
                && a.grid_layout == b.grid_layout
                && a.first.clone().unwrap_or_else(|| vec![0; 2])
                    == b.first.clone().unwrap_or_else(|| vec![0; 2])
                && a.blocks.len() == 2
                && b.blocks.len() == 2
                && a.blocks[1] == b.blocks[0] =>
        {
            let mut out = a.clone();
            out.blocks = vec![a.blocks[0], b.blocks[1]];
            Some(Distribution::BlockCyclic(out))
        }
        _ => None,
    }
}

/// Whether two 2-D process grids are one: equal as written, or, where one is left to the plan,
/// equal once derived for `ranks` (unknown ranks: taken as equal, the plan for a rank count
/// decides).
fn same_grid(x: &Option<Vec<u32>>, y: &Option<Vec<u32>>, ranks: Option<u64>) -> bool {
    if x == y {
        return true;
    }
    match ranks {
        Some(p) => {
            crate::dist::process_grid(x, p, 2) == crate::dist::process_grid(y, p, 2)
        }
        None => x.is_none() || y.is_none(),
    }
}

/// Chooses the algorithm: the requested one (its cheapest form) or, for `auto`, the cheapest.
pub fn choose(case: &MatmulCase<'_>, requested: MatmulAlgorithm) -> Result<MatmulChoice, String> {
    let all = candidates(case);
    let pick = if requested == MatmulAlgorithm::Auto {
        all.first()
    } else {
        all.iter().find(|c| c.algorithm == requested)
    };
    match pick {
        Some(c) => Ok(MatmulChoice {
            algorithm: c.algorithm,
            out: c.out.clone(),
            natural: c.natural.clone(),
            detail: c.detail.join(", then "),
            bytes_per_rank: case.ranks.map(|_| c.cost.ceil() as u64),
        }),
        None => {
            // Each algorithm once, cheapest form first.
            let possible: IndexSet<&str> = all.iter().map(|c| c.algorithm.name()).collect();
            Err(format!(
                "algorithm `{}` cannot run with these distributions of the operands and the result; possible here: auto, {}",
                requested.name(),
                possible.into_iter().collect::<Vec<_>>().join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case<'a>(
        a: &'a Distribution,
        b: &'a Distribution,
        out: Option<&'a Distribution>,
        t: (bool, bool),
    ) -> MatmulCase<'a> {
        MatmulCase {
            a,
            b,
            c: None,
            out,
            transpose_a: t.0,
            transpose_b: t.1,
            bytes: OperandBytes {
                a: 1000,
                b: 1000,
                out: 1000,
            },
            ranks: Some(4),
            pipeline: MatmulPipeline::Rounds,
        }
    }

    #[test]
    fn row_slab_times_replicated_is_local() {
        let c = choose(
            &case(
                &Distribution::slab(0),
                &Distribution::Replicated,
                None,
                (false, false),
            ),
            MatmulAlgorithm::Auto,
        )
        .unwrap();
        assert_eq!(c.algorithm, MatmulAlgorithm::Local);
        assert_eq!(c.bytes_per_rank, Some(0));
        assert_eq!(c.out, Distribution::slab(0));
    }

    #[test]
    fn summa_takes_a_written_grid_and_the_same_one_left_to_the_plan() {
        let cyclic = |grid: Option<Vec<u32>>, first: Option<Vec<u32>>| {
            Distribution::BlockCyclic(crate::spec::tensor::BlockCyclicSpec {
                grid,
                blocks: vec![8, 8],
                grid_layout: Default::default(),
                first,
            })
        };
        let summa = |a: &Distribution, b: &Distribution, ranks| {
            let mut c = case(a, b, None, (false, false));
            c.ranks = ranks;
            choose(&c, MatmulAlgorithm::Summa).is_ok()
        };
        let (written, derived) = (cyclic(Some(vec![2, 2]), None), cyclic(None, Some(vec![0, 0])));
        // 4 ranks derive 2 x 2: one grid; without a rank count, the plan for one decides.
        assert!(summa(&written, &derived, Some(4)));
        assert!(summa(&derived, &written, None));
        // 4 x 1 is another grid than the 2 x 2 that 4 ranks derive.
        assert!(!summa(&cyclic(Some(vec![4, 1]), None), &derived, Some(4)));
    }

    #[test]
    fn nvmath_example_gathers_an_operand() {
        // a (k x m) slab 1 used transposed, b (k x n) slab 1, result slab 0: all-gather + GEMM.
        let out = Distribution::slab(0);
        let c = choose(
            &case(
                &Distribution::slab(1),
                &Distribution::slab(1),
                Some(&out),
                (true, false),
            ),
            MatmulAlgorithm::Auto,
        )
        .unwrap();
        assert_eq!(c.algorithm, MatmulAlgorithm::AgGemm);
    }

    #[test]
    fn k_split_operands_reduce_scatter() {
        let c = choose(
            &case(
                &Distribution::slab(1),
                &Distribution::slab(0),
                None,
                (false, false),
            ),
            MatmulAlgorithm::Auto,
        )
        .unwrap();
        assert_eq!(c.algorithm, MatmulAlgorithm::GemmRs);
        let forced = choose(
            &case(
                &Distribution::slab(1),
                &Distribution::slab(0),
                None,
                (false, false),
            ),
            MatmulAlgorithm::GemmAr,
        )
        .unwrap();
        assert_eq!(forced.out, Distribution::Replicated);
    }

    #[test]
    fn impossible_forced_algorithm_is_refused() {
        let err = choose(
            &case(
                &Distribution::slab(0),
                &Distribution::Replicated,
                None,
                (false, false),
            ),
            MatmulAlgorithm::Summa,
        )
        .unwrap_err();
        assert!(err.contains("summa"), "{err}");
        // Each possible algorithm named once, though several of its forms fit.
        let (a, b) = (Distribution::slab(0), Distribution::slab(1));
        let sizes = MatmulCase {
            bytes: OperandBytes {
                a: 512,
                b: 384,
                out: 768,
            },
            ..case(&a, &b, None, (false, false))
        };
        let err = choose(&sizes, MatmulAlgorithm::Summa).unwrap_err();
        let possible = err.split("possible here: ").nth(1).unwrap();
        let names: Vec<&str> = possible.split(", ").collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{err}");
    }
}
