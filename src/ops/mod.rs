//! The ops, each in its own module (its spec struct, meaning check, memory, run and check,
//! joined by the [`Op`] trait), registered in one table below; and what they share, written
//! once over the backend: exchange plans and movements, the collectives' machinery, the checks'
//! sums.

pub mod checks;
pub mod collective;
pub mod exchange;
pub mod movement;
pub mod movement_check;
mod op;
pub mod rounds;
pub mod sum;

pub use op::Op;

use crate::backend::Backend;
use crate::exec::StepRun;
use anyhow::Result;

/// Declares every op's module and joins their spec structs into [`Step`], each variant's tag the
/// module's name; [`Step`]'s methods hand each call to the op.
macro_rules! ops {
    ($( $(#[$doc:meta])* $module:ident :: $op:ident, )*) => {
        $( pub mod $module; )*

        /// One `[[steps]]` entry; `op` selects the operation.
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub enum Step {
            $( $(#[$doc])* $op($module::$op), )*
        }

        impl Step {
            /// Every op's name as written in specs, in the table's order.
            pub const NAMES: &[&str] = &[$( stringify!($module), )*];

            /// The op's name as written in specs.
            pub fn op(&self) -> &'static str {
                match self {
                    $( Step::$op(_) => stringify!($module), )*
                }
            }

            /// The op itself.
            pub fn as_op(&self) -> &dyn Op {
                match self {
                    $( Step::$op(s) => s, )*
                }
            }

            /// Runs the step (see [`Op::run`]).
            pub fn run<B: Backend>(&self, run: &mut StepRun<'_, B>) -> Result<Option<B::Buf>> {
                match self {
                    $( Step::$op(s) => s.run(run), )*
                }
            }
        }
    };
}

ops! {
    /// `out = epilog(alpha * op(a) @ op(b) + beta * c)` over any distributions and layouts.
    matmul::Matmul,
    /// 2-D or 3-D distributed FFT over all axes.
    fft::Fft,
    /// Moves a tensor to another distribution (and layout).
    redistribute::Redistribute,
    /// partial -> replicated, combining with `reduce`.
    all_reduce::AllReduce,
    /// partial -> root, combining with `reduce`.
    reduce::Reduce,
    /// root -> replicated.
    broadcast::Broadcast,
    /// slab -> replicated.
    all_gather::AllGather,
    /// partial -> slab along `axis`, combining with `reduce`.
    reduce_scatter::ReduceScatter,
    /// Shape `[P, P, ...]`: slab 0 -> slab 1.
    all_to_all::AllToAll,
    /// slab -> root.
    gather::Gather,
    /// root -> slab along `axis`.
    scatter::Scatter,
    /// Shape `[P, ...]`, slab 0 -> slab 0, rows moved between ranks by `pattern` or `pairs`.
    send_recv::SendRecv,
    /// All ranks wait for each other.
    barrier::Barrier,
}

impl Step {
    /// The keys every step takes.
    pub fn common(&self) -> &crate::spec::step::StepCommon {
        self.as_op().common()
    }

    /// The tensors the step reads, with the key that names each.
    pub fn inputs(&self) -> Vec<(&'static str, &str)> {
        self.as_op().inputs()
    }

    /// The tensor the step writes and the key that names it (`input` for an in-place step).
    pub fn output(&self) -> Option<(&'static str, &str)> {
        self.as_op().output()
    }
}

/// The outcome of a step's check: of comparing a result with its expected values (data
/// movement), or of an op's own test (Freivalds' for matmul, round trip and Parseval for fft).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Every element within tolerance (exactly equal where the op is exact).
    pub passed: bool,
    /// Largest error: absolute for exact ops, relative to the values' size for float ones.
    pub max_error: f64,
}

/// `out` where the step names one, else `input` (an in-place step): the key and tensor it writes.
pub fn out_or_input<'a>(out: &'a Option<String>, input: &'a str) -> (&'static str, &'a str) {
    match out {
        Some(o) => ("out", o),
        None => ("input", input),
    }
}

#[cfg(test)]
mod tests {
    use super::Step;

    /// The tag serde reads for each variant is the name the table gives it (its module's): a
    /// spec's `op = "all_gather"` reaches the op that `Step::op` calls all_gather.
    #[test]
    fn every_op_is_read_by_its_name() {
        let read = |name: &str| toml::from_str::<Step>(&format!("op = \"{name}\""));
        let unknown = |e: &toml::de::Error| e.to_string().contains("unknown variant");
        assert!(read("no_such_op").is_err_and(|e| unknown(&e)));
        let schema = crate::spec::schema::schema_json();
        for name in Step::NAMES {
            match read(name) {
                // Only a barrier takes no keys.
                Ok(step) => assert_eq!(step.op(), *name),
                Err(e) => assert!(!unknown(&e), "{name}: {e}"),
            }
            assert!(
                schema.contains(&format!("\"{name}\"")),
                "the schema has no op `{name}`"
            );
        }
    }
}
