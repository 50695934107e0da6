//! send_recv: rows moved between ranks by a pattern or explicit pairs (shape `[P, ...]`, slab 0).

use super::collective::{Collective, Expect, Kernel, Keys, Moving};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::step::StepCommon;
use crate::spec::tensor::Distribution;
use anyhow::Result;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// send_recv step keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SendRecv {
    /// Shape `[P, ...]`, slab 0: rank r holds row r.
    pub input: String,
    /// Shape `[P, ...]`, slab 0.
    pub out: String,
    /// ring (default): `out[r] = in[(r-1) mod P]`. Ignored when `pairs` is given.
    #[serde(default)]
    pub pattern: SendRecvPattern,
    /// Explicit `[src, dst]` pairs: `out[dst] = in[src]`; rows nobody sends are zeros.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs: Option<Vec<[u32; 2]>>,
    #[serde(flatten)]
    #[allow(missing_docs)]
    pub common: StepCommon,
}

/// Built-in send/recv patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SendRecvPattern {
    /// Each rank sends its row to the next rank.
    #[default]
    Ring,
}

impl SendRecv {
    /// Every `(source, destination)` pair of ranks.
    fn pairs(&self, ranks: usize) -> Vec<(usize, usize)> {
        match &self.pairs {
            Some(pairs) => pairs
                .iter()
                .map(|[a, b]| (*a as usize, *b as usize))
                .collect(),
            None => match self.pattern {
                SendRecvPattern::Ring => (0..ranks).map(|r| (r, (r + 1) % ranks)).collect(),
            },
        }
    }

    /// Checks the pairs and the shape (one row per rank).
    fn check_pairs(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> bool {
        let here = KeyPath::root().key("steps").index(i);
        let mut ok = true;
        if let Some(p) = r.ranks.filter(|&p| x.shape[0] != p) {
            ok = false;
            let message = format!(
                "send_recv needs shape [{p}, ...] (one row per rank), but `{}` has {:?}",
                self.input, x.shape
            );
            r.err(Diagnostic::value(here.key("input"), message).help("rank r holds row r"));
        }
        let mut receivers = std::collections::HashMap::new();
        for (j, [src, dst]) in self.pairs.iter().flatten().enumerate() {
            if let Some(p) = r.ranks.filter(|&p| u64::from(*src.max(dst)) >= p) {
                ok = false;
                let message =
                    format!("pair [{src}, {dst}] names a rank that does not exist with {p} ranks");
                let help = format!("use ranks 0 to {}", p - 1);
                r.err(Diagnostic::value(here.key("pairs").index(j), message).help(help));
            }
            if let Some(k) = receivers.insert(*dst, j) {
                ok = false;
                let message = format!("rank {dst} receives twice (pairs {k} and {j})");
                let help = "each rank receives at most one row";
                r.err(Diagnostic::value(here.key("pairs").index(j), message).help(help));
            }
        }
        ok
    }
}

impl Collective for SendRecv {
    fn keys(&self) -> Keys<'_> {
        Keys::new(&self.common, &self.input, Some(&self.out))
    }

    fn result(&self, r: &mut Resolver<'_>, i: usize, x: &TensorState) -> Option<TensorState> {
        let pairs_ok = self.check_pairs(r, i, x);
        let slab0 = matches!(x.dist, Distribution::Slab(a) if a.index() == 0);
        (r.expect_dist(i, "input", &self.input, &x.dist, "{ slab = 0 }", slab0) && pairs_ok)
            .then(|| x.clone())
    }

    fn kernel(&self, m: &Moving<'_>, rank: u64) -> Result<Kernel> {
        let (p, me) = (m.ranks as usize, rank as usize);
        let row = m.piece(m.output, rank) as usize / m.input.dtype.size() as usize;
        let (mut send, mut recv, mut keep) = (vec![0; p], vec![0; p], false);
        for (src, dst) in self.pairs(p) {
            if src == me && dst == me {
                keep = true;
            } else if src == me {
                send[dst] = row;
            } else if dst == me {
                recv[src] = row;
            }
        }
        Ok(Kernel::SendRecv {
            send,
            recv,
            keep,
            row,
        })
    }

    /// The rows it sends, staged, and the result in the input's layout before a change of layout.
    fn workspace<'a>(&'a self, m: Moving<'a>) -> Box<dyn Fn(u64) -> u64 + 'a> {
        let pairs = self.pairs(m.ranks as usize);
        Box::new(move |rank| {
            let sends = pairs
                .iter()
                .filter(|&&(src, dst)| src as u64 == rank && src != dst)
                .count();
            sends as u64 * m.piece(m.input, rank) + m.relayout_bytes(rank)
        })
    }

    fn bandwidth(&self, m: &Moving<'_>, _: f64) -> (f64, f64) {
        (Moving::whole(m.input) / m.ranks as f64, 1.0)
    }

    /// Row `dst` of the result is the input's row `src` for each pair, zeros where nobody sends.
    fn expect(&self, ranks: u64) -> Expect {
        let mut rows = vec![None; ranks as usize];
        for (src, dst) in self.pairs(ranks as usize) {
            rows[dst] = Some(src as u64);
        }
        Expect::Moved(Some(rows))
    }
}
