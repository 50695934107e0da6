//! The fft's meaning check: kinds, dtypes, the result's shape and distribution.

use super::{Fft, FftDirection, FftKind};
use crate::dist::TensorState;
use crate::plan::resolve::Resolver;
use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::tensor::{DType, Distribution, TensorSpec};

impl Resolver<'_> {
    /// The check of fft step `i` on input `x`: its result's state.
    pub(crate) fn fft(&mut self, i: usize, f: &Fft, x: &TensorState) -> Option<TensorState> {
        let here = KeyPath::root().key("steps").index(i);
        let nd = x.shape.len();
        if !(2..=3).contains(&nd) {
            self.err(Diagnostic::value(
                here.key("input"),
                format!(
                    "fft transforms 2-D or 3-D tensors, but `{}` has shape {:?}",
                    f.input, x.shape
                ),
            ));
            return None;
        }
        let out_dtype = self.fft_out_dtype(&here, f, x)?;
        if !self.fft_direction_and_out(&here, f) {
            return None;
        }
        let declared = f.out.as_ref().and_then(|o| self.loaded.spec.tensors.get(o));
        let shape = fft_out_shape(f.kind, &x.shape, declared);
        // A declared output fixes its distribution: the result moves there after the
        // transform (not partial: every rank would need the whole result).
        let declared_dist = declared
            .and_then(|d| d.distribution.clone())
            .filter(|d| *d != Distribution::Partial);
        let dist = self.fft_out_dist(i, &here, f, x, declared_dist)?;
        Some(TensorState {
            shape,
            dtype: out_dtype,
            layout: x.layout,
            dist,
        })
    }

    /// The result's dtype, where the kind takes the input's dtype (c2c and c2r complex, r2c
    /// f32 or f64); otherwise the error is said.
    fn fft_out_dtype(&mut self, here: &KeyPath, f: &Fft, x: &TensorState) -> Option<DType> {
        let (want, out_dtype) = match f.kind {
            FftKind::C2c => (x.dtype.is_complex(), Some(x.dtype)),
            FftKind::R2c => (
                matches!(x.dtype, DType::F32 | DType::F64),
                x.dtype.to_complex(),
            ),
            FftKind::C2r => (x.dtype.is_complex(), x.dtype.to_real()),
        };
        if !want {
            let need = match f.kind {
                FftKind::R2c => "f32 or f64",
                _ => "c64 or c128",
            };
            self.err(
                Diagnostic::value(
                    here.key("input"),
                    format!(
                        "a {:?} fft takes {need}, but `{}` is {}",
                        f.kind, f.input, x.dtype
                    )
                    .to_lowercase(),
                )
                .help("kind = \"c2c\" takes complex, \"r2c\" real, \"c2r\" complex input"),
            );
            return None;
        }
        Some(out_dtype.expect("kind and dtype agree"))
    }

    /// Checks that an r2c runs forward and a c2r inverse, and that either names an `out` (it
    /// changes the dtype); says whether they do.
    fn fft_direction_and_out(&mut self, here: &KeyPath, f: &Fft) -> bool {
        let needed = match f.kind {
            FftKind::R2c => Some(FftDirection::Forward),
            FftKind::C2r => Some(FftDirection::Inverse),
            FftKind::C2c => None,
        };
        if let Some(d) = needed.filter(|&d| d != f.direction) {
            let name = if d == FftDirection::Forward {
                "forward"
            } else {
                "inverse"
            };
            self.err(
                Diagnostic::value(
                    here.key("direction"),
                    format!("a {:?} fft runs {name}", f.kind).to_lowercase(),
                )
                .help(format!(
                    "set direction = \"{name}\", or leave it out for r2c"
                )),
            );
            return false;
        }
        if f.kind != FftKind::C2c && f.out.is_none() {
            self.err(
                Diagnostic::value(
                    here.clone(),
                    format!("{:?} changes the dtype, so it cannot run in place", f.kind)
                        .to_lowercase(),
                )
                .help("name an `out` tensor"),
            );
            return false;
        }
        true
    }

    /// The result's distribution: the declared one, or from the input's (a slab moves to the
    /// other axis, or stays with `reshape`; boxes stay for a c2c with `reshape`). None after
    /// saying why there is none.
    fn fft_out_dist(
        &mut self,
        i: usize,
        here: &KeyPath,
        f: &Fft,
        x: &TensorState,
        declared_dist: Option<Distribution>,
    ) -> Option<Distribution> {
        match &x.dist {
            Distribution::Slab(a) if a.index() < 2 => {
                Some(declared_dist.unwrap_or_else(|| match f.reshape {
                    true => x.dist.clone(),
                    false => Distribution::slab(1 - a.index()),
                }))
            }
            // Every rank transforms the whole tensor; the result is whole on every rank too.
            Distribution::Replicated => Some(declared_dist.unwrap_or(Distribution::Replicated)),
            Distribution::Boxes(_) => match declared_dist {
                Some(d) => Some(d),
                None if f.reshape && f.kind == FftKind::C2c => Some(x.dist.clone()),
                None => {
                    self.err(
                        Diagnostic::value(here.clone(), "an fft of boxes needs the output's distribution: declare the out tensor (boxes, as nvmath-python pairs them, or any other)")
                            .help("a c2c fft with reshape = true may leave it undeclared: the result keeps the input's boxes"),
                    );
                    None
                }
            },
            _ => {
                self.expect_dist(
                    i,
                    "input",
                    &f.input,
                    &x.dist,
                    "{ slab = 0 }, { slab = 1 }, boxes or replicated",
                    false,
                );
                None
            }
        }
    }
}

/// The result's shape: the input's, its last axis halved plus one by an r2c, and for a c2r the
/// declared output's real length where it fits (else the even length `2 (n - 1)`).
fn fft_out_shape(kind: FftKind, input: &[u64], declared: Option<&TensorSpec>) -> Vec<u64> {
    let nd = input.len();
    let mut shape = input.to_vec();
    let last = nd - 1;
    match kind {
        FftKind::C2c => {}
        FftKind::R2c => shape[last] = input[last] / 2 + 1,
        FftKind::C2r => {
            shape[last] = match declared {
                Some(d) if d.shape.len() == nd && d.shape[last] / 2 + 1 == input[last] => {
                    d.shape[last]
                }
                _ => 2 * input[last].saturating_sub(1),
            }
        }
    }
    shape
}
