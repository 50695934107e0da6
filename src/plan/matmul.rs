//! Choosing a distributed matmul algorithm from the operands' distributions: every algorithm that
//! can run is priced by the bytes each rank sends, and `auto` takes the cheapest.

use crate::spec::step::{MatmulAlgorithm, MatmulPipeline};
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
    /// transpose_a, transpose_b.
    pub transpose: (bool, bool),
    /// Bytes of a, b and the result.
    pub bytes: (u64, u64, u64),
    /// Rank count (None: unknown; priced as 2).
    pub ranks: Option<u64>,
    /// How an operand gathered whole travels.
    pub pipeline: MatmulPipeline,
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

struct Candidate {
    algorithm: MatmulAlgorithm,
    out: Distribution,
    natural: Distribution,
    detail: Vec<String>,
    cost: f64,
}

/// Every algorithm that can run this matmul, cheapest first.
fn candidates(case: &MatmulCase<'_>) -> Vec<Candidate> {
    let p = case.ranks.unwrap_or(2).max(1) as f64;
    let f = (p - 1.0) / p;
    let (size_a, size_b, size_out) = (
        case.bytes.0 as f64,
        case.bytes.1 as f64,
        case.bytes.2 as f64,
    );
    let sa = split(case.a, case.transpose.0);
    let sb = split(case.b, case.transpose.1);
    let mut out = Vec::new();
    let mut add = |algorithm, dist: Distribution, detail: &[&str], cost: f64| {
        out.push(Candidate {
            algorithm,
            natural: dist.clone(),
            out: dist,
            detail: detail.iter().map(|s| s.to_string()).collect(),
            cost,
        })
    };
    use MatmulAlgorithm::*;
    if case.out == Some(&Distribution::Partial) {
        // Each rank's own product over its slice of k, unreduced: the operands move to k-slabs
        // where they are not there already (and c and the bias to rank 0, which adds them).
        let mut moves = Vec::new();
        let mut cost = 0.0;
        if sa != Split::Cols {
            moves.push("redistribute a to slices of k");
            cost += f * size_a;
        }
        if sb != Split::Rows {
            moves.push("redistribute b to slices of k");
            cost += f * size_b;
        }
        moves.push("local GEMM on this rank's slice of k, the partial products left unreduced");
        if case.c.is_some() {
            moves.push("rank 0 adds beta * c");
            cost += f * size_out;
        }
        return vec![Candidate {
            algorithm: KSplit,
            natural: Distribution::Partial,
            out: Distribution::Partial,
            detail: moves.iter().map(|s| s.to_string()).collect(),
            cost,
        }];
    }
    match (sa, sb) {
        (Split::Rows, Split::Whole) => add(Local, Distribution::slab(0), &["local GEMM"], 0.0),
        (Split::Whole, Split::Cols) => add(Local, Distribution::slab(1), &["local GEMM"], 0.0),
        (Split::Whole, Split::Whole) => add(Local, Distribution::Replicated, &["local GEMM"], 0.0),
        _ => {}
    }
    // Pieces that are whole blocks of the product's columns (rows) arrive in ring rounds, each
    // round's GEMM overlapping the next round's move (ops::matmul::chunks).
    let ring = match case.pipeline {
        MatmulPipeline::Auto => {
            "GEMM per ring round as each piece arrives, or after the whole gather if trials find it faster"
        }
        MatmulPipeline::Rounds => "GEMM per ring round as each piece arrives",
        MatmulPipeline::Whole => "local GEMM",
    };
    if sa == Split::Rows && sb == Split::Cols {
        add(
            AgGemm,
            Distribution::slab(0),
            &["all-gather b", ring],
            f * size_b,
        );
    } else if sa == Split::Rows && sb == Split::Rows {
        add(
            AgGemm,
            Distribution::slab(0),
            &["all-gather b", "local GEMM"],
            f * size_b,
        );
    }
    if sb == Split::Cols && sa == Split::Rows {
        add(
            AgGemm,
            Distribution::slab(1),
            &["all-gather a", ring],
            f * size_a,
        );
    } else if sb == Split::Cols && sa == Split::Cols {
        add(
            AgGemm,
            Distribution::slab(1),
            &["all-gather a", "local GEMM"],
            f * size_a,
        );
    }
    if sa == Split::Cols && sb == Split::Rows {
        add(
            GemmRs,
            Distribution::slab(0),
            &["local GEMM on a k-slice", "reduce-scatter"],
            f * size_out,
        );
        add(
            GemmAr,
            Distribution::Replicated,
            &["local GEMM on a k-slice", "all-reduce"],
            2.0 * f * size_out,
        );
    }
    if let Some(out_dist) = summa_out(case) {
        let given = match case.a {
            Distribution::Block(b) => &b.grid,
            Distribution::BlockCyclic(c) => &c.grid,
            _ => &None,
        };
        let grid = crate::dist::process_grid(given, p as u64, 2);
        let (pr, pc) = (grid[0] as f64, grid[1] as f64);
        let cost = size_a / pr * (pc - 1.0) / pc + size_b / pc * (pr - 1.0) / pr;
        add(
            Summa,
            out_dist,
            &["SUMMA: panels broadcast along grid rows and columns"],
            cost,
        );
    }
    let mut moves = Vec::new();
    let mut cost = 0.0;
    if sa != Split::Rows {
        moves.push("redistribute a to row slabs");
        cost += f * size_a;
    }
    if sb != Split::Whole {
        moves.push("replicate b");
        cost += f * size_b;
    }
    moves.push("local GEMM");
    add(Redistribute, Distribution::slab(0), &moves, cost);

    // A result or addend in another distribution than the algorithm's costs one more move.
    for cand in &mut out {
        if let Some(c) = case.c
            && *c != cand.out
        {
            cand.detail.insert(0, "redistribute c".into());
            cand.cost += f * size_out;
        }
        if let Some(target) = case.out
            && *target != cand.out
        {
            cand.detail.push("redistribute the result".into());
            cand.cost += f * size_out;
            cand.out = target.clone();
        }
    }
    // Cheapest first; among equals, fewer phases, then the order above.
    out.sort_by(|x, y| {
        x.cost
            .total_cmp(&y.cost)
            .then(x.detail.len().cmp(&y.detail.len()))
    });
    out
}

/// SUMMA runs when a, b (untransposed) and c share one 2-D grid and kind, with matching k blocks;
/// the result takes the same grid.
fn summa_out(case: &MatmulCase<'_>) -> Option<Distribution> {
    if case.transpose != (false, false) {
        return None;
    }
    match (case.a, case.b) {
        (Distribution::Block(a), Distribution::Block(b))
            if a.grid == b.grid
                && a.grid_layout == b.grid_layout
                && a.grid.as_ref().is_none_or(|g| g.len() == 2) =>
        {
            Some(case.a.clone())
        }
        (Distribution::BlockCyclic(a), Distribution::BlockCyclic(b))
            if a.grid == b.grid
                && a.grid_layout == b.grid_layout
                && a.first == b.first
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
            transpose: t,
            bytes: (1000, 1000, 1000),
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
            bytes: (512, 384, 768),
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
