//! The matmul's meaning check: operand shapes, dtypes, epilogs, and the algorithm's choice.

use super::Matmul;
use super::choice::{self as matmul, MatmulCase};
use crate::dist::{self, TensorState};
use crate::plan::StepPlan;
use crate::plan::resolve::{Resolver, byte_size};
use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::step::BiasPer;
use crate::spec::tensor::Distribution;

/// The tensors a matmul step reads, as they stand before it.
struct Operands<'t> {
    a: &'t TensorState,
    b: &'t TensorState,
    c: Option<&'t TensorState>,
    bias: Option<&'t TensorState>,
}

/// The product's dimensions: op(a) is m x k and op(b) k x n.
#[derive(Debug, Clone, Copy)]
struct Dims {
    m: u64,
    n: u64,
}

impl Resolver<'_> {
    /// The check of matmul step `i` (`ins`: a, b, then c and the bias where given): its
    /// result's state, its algorithm's choice recorded in `info`.
    pub(crate) fn matmul(
        &mut self,
        i: usize,
        m: &Matmul,
        ins: &[TensorState],
        info: &mut StepPlan,
    ) -> Option<TensorState> {
        let here = KeyPath::root().key("steps").index(i);
        let ops = Operands {
            a: &ins[0],
            b: &ins[1],
            c: m.c.as_ref().map(|_| &ins[2]),
            bias: m.bias.as_ref().map(|_| ins.last().expect("bias is read")),
        };
        let mut ok = self.matmul_matrices(&here, m, &ops);
        ok &= self.matmul_dtypes(&here, m, &ops);
        ok &= self.matmul_conjugates(&here, m, &ops);
        ok &= self.matmul_epilog(&here, m, &ops);
        let partial = self.matmul_partial_operands(i, m, &ops);
        ok &= !partial;
        let dims = self.matmul_dims(&here, m, &ops)?;
        ok &= self.matmul_addend_shapes(&here, m, &ops, dims);
        // The algorithm depends on the distributions alone: it is checked (and a forced one
        // refused) even when the errors above keep the step from resolving, except where an
        // operand is partial (no algorithm takes one: that error is already said).
        if partial {
            return None;
        }
        let declared = self
            .loaded
            .spec
            .tensors
            .get(&m.out)
            .and_then(|t| t.distribution.clone());
        ok &= self.matmul_partial_result(&here, m, declared.as_ref());
        if let Some(d) = &declared {
            let path = KeyPath::root()
                .key("tensors")
                .key(&m.out)
                .key("distribution");
            if !dist::check(d, &[dims.m, dims.n], self.ranks, &path).is_empty() {
                return None;
            }
        }
        let case = matmul_case(m, &ops, dims, declared.as_ref(), self.ranks);
        match matmul::choose(&case, m.algorithm) {
            Ok(_) if !ok => None,
            Ok(choice) => Some(result(ops.a, dims, choice, info)),
            Err(e) => {
                self.err(Diagnostic::value(here.key("algorithm"), e));
                None
            }
        }
    }

    /// Checks that a and b are matrices.
    fn matmul_matrices(&mut self, here: &KeyPath, m: &Matmul, ops: &Operands<'_>) -> bool {
        let mut ok = true;
        for (key, name, t) in [("a", &m.a, ops.a), ("b", &m.b, ops.b)] {
            if t.shape.len() != 2 {
                ok = false;
                self.err(Diagnostic::value(
                    here.key(key),
                    format!(
                        "matmul needs a matrix, but `{name}` has shape {:?}",
                        t.shape
                    ),
                ));
            }
        }
        ok
    }

    /// Checks that a is a float dtype and every other operand has a's dtype.
    fn matmul_dtypes(&mut self, here: &KeyPath, m: &Matmul, ops: &Operands<'_>) -> bool {
        let a = ops.a;
        let mut ok = true;
        if !a.dtype.is_float() {
            ok = false;
            self.err(
                Diagnostic::value(
                    here.key("a"),
                    format!("matmul does not take {} tensors", a.dtype),
                )
                .help("use f16, bf16, f32, f64, c64 or c128"),
            );
        }
        for (key, name, t) in [
            ("b", Some(&m.b), Some(ops.b)),
            ("c", m.c.as_ref(), ops.c),
            ("bias", m.bias.as_ref(), ops.bias),
        ] {
            if let (Some(name), Some(t)) = (name, t)
                && t.dtype != a.dtype
            {
                ok = false;
                self.err(Diagnostic::value(
                    here.key(key),
                    format!(
                        "`{name}` is {} but `{}` is {}: matmul operands share one dtype",
                        t.dtype, m.a, a.dtype
                    ),
                ));
            }
        }
        ok
    }

    /// Checks that a conjugated operand is also transposed, and complex.
    fn matmul_conjugates(&mut self, here: &KeyPath, m: &Matmul, ops: &Operands<'_>) -> bool {
        let mut ok = true;
        for (key, t) in [
            ("conjugate_a", m.conjugate_a && !m.transpose_a),
            ("conjugate_b", m.conjugate_b && !m.transpose_b),
        ] {
            if t {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key(key),
                        format!("{key} needs transpose_{}", &key[10..]),
                    )
                    .help("cuBLASMp conjugates only transposed operands: set both"),
                );
            }
        }
        if (m.conjugate_a || m.conjugate_b) && !ops.a.dtype.is_complex() {
            ok = false;
            let key = if m.conjugate_a {
                "conjugate_a"
            } else {
                "conjugate_b"
            };
            self.err(Diagnostic::value(
                here.key(key),
                format!("conjugation applies to complex dtypes, not {}", ops.a.dtype),
            ));
        }
        ok
    }

    /// Checks the epilog against the bias (named exactly when the epilog adds one) and the dtype
    /// (no relu or gelu of complex values), and that beta has a c to scale.
    fn matmul_epilog(&mut self, here: &KeyPath, m: &Matmul, ops: &Operands<'_>) -> bool {
        let mut ok = true;
        match (m.epilog.map(|e| e.needs_bias()), &m.bias) {
            (Some(true), None) => {
                ok = false;
                self.err(Diagnostic::value(
                    here.key("epilog"),
                    "this epilog adds a bias: name a `bias` tensor",
                ));
            }
            (Some(false) | None, Some(_)) => {
                ok = false;
                self.err(
                    Diagnostic::value(
                        here.key("bias"),
                        "a bias is read only by the bias, relu_bias and gelu_bias epilogs",
                    )
                    .help("set epilog, or remove bias"),
                );
            }
            _ => {}
        }
        if ops.a.dtype.is_complex() && crate::ops::matmul::epilog::nonlinear(m.epilog) {
            ok = false;
            self.err(
                Diagnostic::value(
                    here.key("epilog"),
                    format!("relu and gelu apply to real dtypes, not {}", ops.a.dtype),
                )
                .help("complex matmuls take the bias epilog only"),
            );
        }
        if m.beta != 0.0 && m.c.is_none() {
            ok = false;
            self.err(
                Diagnostic::value(here.key("beta"), "beta scales c, but there is no c")
                    .help("name a `c` tensor, or remove beta"),
            );
        }
        ok
    }

    /// Refuses a partial a, b or c; says whether any was.
    fn matmul_partial_operands(&mut self, i: usize, m: &Matmul, ops: &Operands<'_>) -> bool {
        let mut partial = false;
        for (key, name, t) in [
            ("a", Some(&m.a), Some(ops.a)),
            ("b", Some(&m.b), Some(ops.b)),
            ("c", m.c.as_ref(), ops.c),
        ] {
            if let (Some(name), Some(t)) = (name, t)
                && t.dist == Distribution::Partial
            {
                partial = true;
                self.expect_dist(i, key, name, &t.dist, "non-partial", false);
            }
        }
        partial
    }

    /// The product's dimensions, where a and b are matrices whose inner dimensions (after their
    /// transposes) agree; the disagreement is refused.
    fn matmul_dims(&mut self, here: &KeyPath, m: &Matmul, ops: &Operands<'_>) -> Option<Dims> {
        let (a, b) = (ops.a, ops.b);
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return None;
        }
        let (m_, k_a) = if m.transpose_a {
            (a.shape[1], a.shape[0])
        } else {
            (a.shape[0], a.shape[1])
        };
        let (k_b, n_) = if m.transpose_b {
            (b.shape[1], b.shape[0])
        } else {
            (b.shape[0], b.shape[1])
        };
        if k_a != k_b {
            self.err(
                Diagnostic::value(
                    here.key("b"),
                    format!(
                        "inner dimensions differ: op(a) is {m_}x{k_a} ({}{:?}) and op(b) is {k_b}x{n_} ({}{:?})",
                        if m.transpose_a { "transposed " } else { "" },
                        a.shape,
                        if m.transpose_b { "transposed " } else { "" },
                        b.shape
                    ),
                )
                .help("set transpose_a or transpose_b, or fix the shapes"),
            );
            return None;
        }
        Some(Dims { m: m_, n: n_ })
    }

    /// Checks that c has the result's shape and the bias one entry per row (or column) of it.
    fn matmul_addend_shapes(
        &mut self,
        here: &KeyPath,
        m: &Matmul,
        ops: &Operands<'_>,
        dims: Dims,
    ) -> bool {
        let Dims { m: m_, n: n_ } = dims;
        let mut ok = true;
        if let Some(c) = ops.c
            && c.shape != [m_, n_]
        {
            ok = false;
            self.err(Diagnostic::value(
                here.key("c"),
                format!(
                    "c must be {m_}x{n_} like the result, but has shape {:?}",
                    c.shape
                ),
            ));
        }
        if let Some(bias) = ops.bias {
            let (want, along, other, other_key) = match m.bias_per {
                BiasPer::Row => (m_, "row", n_, "column"),
                BiasPer::Column => (n_, "column", m_, "row"),
            };
            if bias.shape != [want] {
                ok = false;
                let d = Diagnostic::value(
                    here.key("bias"),
                    format!(
                        "bias must be a vector of {want} (one per {along} of the {m_}x{n_} result), but has shape {:?}",
                        bias.shape
                    ),
                );
                self.err(if bias.shape == [other] {
                    d.help(format!(
                        "for one value per {other_key}, set bias_per = \"{other_key}\""
                    ))
                } else {
                    d
                });
            }
        }
        ok
    }

    /// Refuses relu and gelu on a result declared partial (each rank holds one share of the
    /// sum); says whether the epilog is fine.
    fn matmul_partial_result(
        &mut self,
        here: &KeyPath,
        m: &Matmul,
        declared: Option<&Distribution>,
    ) -> bool {
        if declared == Some(&Distribution::Partial)
            && crate::ops::matmul::epilog::nonlinear(m.epilog)
        {
            self.err(
                Diagnostic::value(
                    here.key("epilog"),
                    format!(
                        "relu and gelu cannot apply to `{}`, a partial result: each rank holds one share of the sum",
                        m.out
                    ),
                )
                .help("apply the activation after the reduction, or use the bias epilog alone"),
            );
            return false;
        }
        true
    }
}

/// The result of the chosen algorithm, the choice recorded in `info`.
fn result(
    a: &TensorState,
    dims: Dims,
    choice: matmul::MatmulChoice,
    info: &mut StepPlan,
) -> TensorState {
    let out = TensorState {
        shape: vec![dims.m, dims.n],
        dtype: a.dtype,
        layout: a.layout,
        dist: choice.out.clone(),
    };
    info.matmul = Some(choice);
    out
}

/// What the algorithm's choice needs to know of the step: the operands' distributions and
/// bytes, the transposes, the declared result, the rank count.
fn matmul_case<'c>(
    m: &Matmul,
    ops: &Operands<'c>,
    dims: Dims,
    declared: Option<&'c Distribution>,
    ranks: Option<u64>,
) -> MatmulCase<'c> {
    let (a, b) = (ops.a, ops.b);
    MatmulCase {
        a: &a.dist,
        b: &b.dist,
        c: ops.c.map(|c| &c.dist),
        out: declared,
        transpose_a: m.transpose_a,
        transpose_b: m.transpose_b,
        bytes: matmul::OperandBytes {
            a: byte_size(&a.shape, a.dtype).unwrap_or(u64::MAX),
            b: byte_size(&b.shape, b.dtype).unwrap_or(u64::MAX),
            out: byte_size(&[dims.m, dims.n], a.dtype).unwrap_or(u64::MAX),
        },
        ranks,
        pipeline: m.pipeline,
    }
}
