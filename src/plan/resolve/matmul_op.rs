//! The meaning pass for matmul: operand shapes, dtypes, epilogs, and the algorithm's choice.

use super::*;
use crate::spec::step::BiasPer;

impl Resolver<'_> {
    pub(super) fn matmul(
        &mut self,
        i: usize,
        m: &crate::spec::step::Matmul,
        ins: &[TensorState],
        mut info: StepPlan,
    ) -> StepPlan {
        let here = KeyPath::root().key("steps").index(i);
        let (a, b) = (&ins[0], &ins[1]);
        let c = m.c.as_ref().map(|_| &ins[2]);
        let bias = m.bias.as_ref().map(|_| ins.last().expect("bias is read"));
        let mut ok = true;
        for (key, name, t) in [("a", &m.a, a), ("b", &m.b, b)] {
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
            ("b", Some(&m.b), Some(b)),
            ("c", m.c.as_ref(), c),
            ("bias", m.bias.as_ref(), bias),
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
        if (m.conjugate_a || m.conjugate_b) && !a.dtype.is_complex() {
            ok = false;
            let key = if m.conjugate_a {
                "conjugate_a"
            } else {
                "conjugate_b"
            };
            self.err(Diagnostic::value(
                here.key(key),
                format!("conjugation applies to complex dtypes, not {}", a.dtype),
            ));
        }
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
        if a.dtype.is_complex() && crate::ops::matmul::epilog::nonlinear(m.epilog) {
            ok = false;
            self.err(
                Diagnostic::value(
                    here.key("epilog"),
                    format!("relu and gelu apply to real dtypes, not {}", a.dtype),
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
        let mut partial = false;
        for (key, name, t) in [
            ("a", Some(&m.a), Some(a)),
            ("b", Some(&m.b), Some(b)),
            ("c", m.c.as_ref(), c),
        ] {
            if let (Some(name), Some(t)) = (name, t)
                && t.dist == Distribution::Partial
            {
                partial = true;
                self.expect_dist(i, key, name, &t.dist, "non-partial", false);
            }
        }
        ok &= !partial;
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return info;
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
            return info;
        }
        if let Some(c) = c
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
        if let Some(bias) = bias {
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
        // The algorithm depends on the distributions alone: it is checked (and a forced one
        // refused) even when the errors above keep the step from resolving, except where an
        // operand is partial (no algorithm takes one: that error is already said).
        if partial {
            return info;
        }
        let declared = self
            .loaded
            .spec
            .tensors
            .get(&m.out)
            .and_then(|t| t.distribution.clone());
        if declared == Some(Distribution::Partial)
            && crate::ops::matmul::epilog::nonlinear(m.epilog)
        {
            ok = false;
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
        }
        if let Some(d) = &declared {
            let found = dist::check(
                d,
                &[m_, n_],
                self.ranks,
                &KeyPath::root()
                    .key("tensors")
                    .key(&m.out)
                    .key("distribution"),
            );
            if !found.is_empty() {
                return info;
            }
        }
        let out_bytes = byte_size(&[m_, n_], a.dtype).unwrap_or(u64::MAX);
        let case = MatmulCase {
            a: &a.dist,
            b: &b.dist,
            c: c.map(|c| &c.dist),
            out: declared.as_ref(),
            transpose: (m.transpose_a, m.transpose_b),
            bytes: (
                byte_size(&a.shape, a.dtype).unwrap_or(u64::MAX),
                byte_size(&b.shape, b.dtype).unwrap_or(u64::MAX),
                out_bytes,
            ),
            ranks: self.ranks,
            pipeline: m.pipeline,
        };
        match matmul::choose(&case, m.algorithm) {
            Ok(_) if !ok => {}
            Ok(choice) => {
                let out = TensorState {
                    shape: vec![m_, n_],
                    dtype: a.dtype,
                    layout: a.layout,
                    dist: choice.out.clone(),
                };
                self.write(i, "out", &m.out, out.clone(), false);
                info.output_state = Some(self.current.get(&m.out).cloned().unwrap_or(out));
                info.matmul = Some(choice);
            }
            Err(e) => self.err(Diagnostic::value(here.key("algorithm"), e)),
        }
        info
    }
}
