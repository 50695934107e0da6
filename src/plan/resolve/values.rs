//! What a tensor's init produces against what its dtype holds (a fill of 1e300 in an `i8`
//! would saturate, a uniform range of 1e308 to -1e308 overflow to infinity), and names that
//! print on one line and can become file names (no control characters).

use crate::spec::diag::{Diagnostic, KeyPath};
use crate::spec::tensor::{DType, Init, TensorSpec};

/// The values a dtype holds: integers by truncation toward zero within `[min, max]`, floats
/// (each part of a complex) up to their largest finite magnitude.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Range {
    /// Whole numbers: a value `v` is stored when `min <= trunc(v) <= max`.
    Whole { min: i128, max: i128 },
    /// Floating point: `|v| <= max`.
    Float { max: f64 },
}

impl Range {
    fn of(dtype: DType) -> Self {
        let whole = |min: i128, max: i128| Range::Whole { min, max };
        match dtype {
            DType::F16 => Range::Float {
                max: f64::from(half::f16::MAX),
            },
            DType::Bf16 => Range::Float {
                max: f64::from(half::bf16::MAX),
            },
            DType::F32 | DType::C64 => Range::Float {
                max: f64::from(f32::MAX),
            },
            DType::F64 | DType::C128 => Range::Float { max: f64::MAX },
            DType::I8 => whole(i8::MIN.into(), i8::MAX.into()),
            DType::U8 => whole(0, u8::MAX.into()),
            DType::I32 => whole(i32::MIN.into(), i32::MAX.into()),
            DType::U32 => whole(0, u32::MAX.into()),
            DType::I64 => whole(i64::MIN.into(), i64::MAX.into()),
            DType::U64 => whole(0, u64::MAX.into()),
        }
    }

    fn holds(self, v: f64) -> bool {
        match self {
            // min and max + 1 are powers of two or small: exact as f64.
            Range::Whole { min, max } => v.trunc() >= min as f64 && v.trunc() < (max + 1) as f64,
            Range::Float { max } => v.abs() <= max,
        }
    }

    fn describe(self, dtype: DType) -> String {
        match self {
            Range::Whole { min, max } => format!("{dtype} holds {min} to {max}"),
            Range::Float { max } => format!("{dtype}'s largest finite value is {}", show(max)),
        }
    }
}

/// A number as people write it: plain where that is short, else in scientific notation.
fn show(v: f64) -> String {
    if v == 0.0 || (1e-4..1e16).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// The init's problems for a tensor of `count` elements (its stacked count for a partial
/// tensor), each at the key that holds the offending value under `here` (the tensor's key).
pub fn init_problems(t: &TensorSpec, count: u64, here: &KeyPath) -> Vec<Diagnostic> {
    let Some(init) = &t.init else {
        return Vec::new();
    };
    let range = Range::of(t.dtype);
    let at = here.key("init");
    let mut out = Vec::new();
    let need = |key: KeyPath, what: String, v: f64| {
        (!range.holds(v)).then(|| {
            Diagnostic::value(
                key,
                format!("{what} is {}: {}", show(v), range.describe(t.dtype)),
            )
            .help("choose values the tensor's dtype holds, or a wider dtype")
        })
    };
    match init {
        Init::Fill(v) => out.extend(need(at.key("fill"), "the fill value".into(), *v)),
        Init::Arange(a) => {
            let last = a.start + a.step * count.saturating_sub(1) as f64;
            out.extend(need(
                at.key("arange").key("start"),
                "the first value".into(),
                a.start,
            ));
            let what = format!("the last value (element {})", count.saturating_sub(1));
            out.extend(need(at.key("arange").key("step"), what, last));
        }
        Init::Uniform(u) => {
            let at = at.key("uniform");
            out.extend(need(at.key("low"), "low".into(), u.low));
            out.extend(need(at.key("high"), "high".into(), u.high));
            if u.low > u.high {
                out.push(Diagnostic::value(
                    at.key("high"),
                    format!(
                        "high ({}) is below low ({}): the range is empty",
                        show(u.high),
                        show(u.low)
                    ),
                ));
            } else {
                // The values are low + (high - low) u: the width must be finite too.
                out.extend(need(
                    at.key("high"),
                    "the range's width".into(),
                    u.high - u.low,
                ));
            }
        }
        Init::Normal(n) => {
            let at = at.key("normal");
            if n.std < 0.0 {
                out.push(Diagnostic::value(
                    at.key("std"),
                    format!("std is {}: a standard deviation is not negative", n.std),
                ));
            }
            // The generator's draws stay within 9 standard deviations of the mean.
            let reach = n.mean.abs() + 9.0 * n.std.abs();
            out.extend(need(at.key("std"), "mean + 9 std".into(), reach));
        }
        Init::Zeros | Init::Ones | Init::Npy(_) => {}
    }
    out
}

/// The error message when `name` (of a `what`) holds a control character (a newline, a tab,
/// an escape...): names are printed one per line and become file names.
pub fn control_character(what: &str, name: &str) -> Option<String> {
    name.chars()
        .any(char::is_control)
        .then(|| format!("{what} {name:?} holds a control character: use printable ones"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tensor::{Arange, Normal, Uniform};

    fn tensor(dtype: DType, init: Init) -> TensorSpec {
        let text = format!("shape = [4]\ndtype = \"{dtype}\"");
        let mut t: TensorSpec = toml::from_str(&text).unwrap();
        t.init = Some(init);
        t
    }

    fn problems(dtype: DType, init: Init, count: u64) -> Vec<String> {
        init_problems(
            &tensor(dtype, init),
            count,
            &KeyPath::root().key("tensors").key("t"),
        )
        .into_iter()
        .map(|d| format!("{}: {}", d.path, d.message))
        .collect()
    }

    #[test]
    fn fills_must_fit_the_dtype() {
        assert!(problems(DType::I8, Init::Fill(-128.9), 1).is_empty());
        assert!(problems(DType::I8, Init::Fill(127.0), 1).is_empty());
        assert_eq!(
            problems(DType::I8, Init::Fill(1e300), 1),
            ["tensors.t.init.fill: the fill value is 1e300: i8 holds -128 to 127"]
        );
        assert_eq!(problems(DType::U8, Init::Fill(-1.0), 1).len(), 1);
        assert!(problems(DType::U8, Init::Fill(-0.5), 1).is_empty());
        assert_eq!(problems(DType::F16, Init::Fill(70000.0), 1).len(), 1);
        assert!(problems(DType::F16, Init::Fill(65504.0), 1).is_empty());
        assert_eq!(problems(DType::C64, Init::Fill(1e39), 1).len(), 1);
        assert!(problems(DType::U64, Init::Fill(2f64.powi(63)), 1).is_empty());
        assert_eq!(problems(DType::U64, Init::Fill(2f64.powi(64)), 1).len(), 1);
        assert_eq!(problems(DType::I64, Init::Fill(2f64.powi(63)), 1).len(), 1);
    }

    #[test]
    fn an_arange_must_end_inside_the_dtype() {
        let arange = |start, step| Init::Arange(Arange { start, step });
        assert!(problems(DType::I8, arange(0.0, 1.0), 128).is_empty());
        assert_eq!(
            problems(DType::I8, arange(0.0, 1.0), 129),
            [
                "tensors.t.init.arange.step: the last value (element 128) is 128: i8 holds -128 to 127"
            ]
        );
        assert_eq!(
            problems(DType::I64, arange(9.223372036854775e18, 1e6), 8).len(),
            1
        );
    }

    #[test]
    fn random_ranges_must_be_finite_and_ordered() {
        let uniform = |low, high| Init::Uniform(Uniform { low, high });
        assert!(problems(DType::F64, uniform(-1e307, 1e307), 4).is_empty());
        assert_eq!(
            problems(DType::F64, uniform(1e308, -1e308), 4),
            ["tensors.t.init.uniform.high: high (-1e308) is below low (1e308): the range is empty"]
        );
        assert!(
            problems(DType::F64, uniform(-1e308, 1e308), 4)
                .iter()
                .any(|p| p.contains("the range's width is inf")),
        );
        let normal = |mean, std| Init::Normal(Normal { mean, std });
        assert!(problems(DType::F16, normal(0.0, 1000.0), 4).is_empty());
        assert_eq!(problems(DType::F16, normal(0.0, 10000.0), 4).len(), 1);
        assert_eq!(problems(DType::F32, normal(0.0, -1.0), 4).len(), 1);
    }

    #[test]
    fn control_characters_in_names_are_refused() {
        assert!(control_character("tensor", "a b").is_none());
        assert!(control_character("tensor", "näme").is_none());
        assert_eq!(
            control_character("tensor", "a\nb").unwrap(),
            "tensor \"a\\nb\" holds a control character: use printable ones"
        );
    }
}
