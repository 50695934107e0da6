//! The matmul as an [`Op`]: its meaning check (`meaning.rs`), its memory (`memory.rs`), and its
//! run: in rounds or whole (trial runs choose for `pipeline = "auto"`), the product written in
//! the result's layout or the other (trial runs choose where that may pay), then Freivalds'
//! check.

use super::memory::{self};
use super::{Matmul, MatmulPipeline, PreparedMatmul, Ways, freivalds};
use crate::backend::Backend;
use crate::backend::cuda::probe::Lib;
use crate::dist::TensorState;
use crate::exec::{Chosen, StepRun, trials};
use crate::ops::Op;
use crate::plan::StepPlan;
use crate::plan::figures::Figures;
use crate::plan::memory::Needs;
use crate::plan::resolve::Resolver;
use crate::spec::step::{StepCommon, Timing};
use crate::spec::tensor::Layout;
use anyhow::Result;

impl Op for Matmul {
    fn common(&self) -> &StepCommon {
        &self.common
    }

    fn inputs(&self) -> Vec<(&'static str, &str)> {
        let mut v = vec![("a", self.a.as_str()), ("b", self.b.as_str())];
        if let Some(c) = &self.c {
            v.push(("c", c));
        }
        if let Some(b) = &self.bias {
            v.push(("bias", b));
        }
        v
    }

    fn output(&self) -> Option<(&'static str, &str)> {
        Some(("out", &self.out))
    }

    fn resolve(
        &self,
        r: &mut Resolver<'_>,
        i: usize,
        ins: &[TensorState],
        plan: &mut StepPlan,
    ) -> Option<TensorState> {
        r.matmul(i, self, ins, plan)
    }

    /// Its buffers (see [`memory`]; the GEMM library's [`LIBRARY_BYTES`] the plan adds once),
    /// and the symmetric buffers its rounds land in by puts.
    fn needs<'a>(&'a self, planned: &'a StepPlan, out: &'a TensorState, ranks: u64) -> Needs<'a> {
        let choice = (planned.matmul.as_ref()).expect("a planned matmul has an algorithm");
        let inputs = &planned.input_states;
        let check = self.common.check;
        Needs {
            run: Box::new(memory::workspace(self, choice, inputs, out, ranks, check)),
            check: Box::new(move |r| memory::check_workspace(self, inputs, out, (ranks, r))),
            puts: memory::puts_rooms(self, choice, inputs, out, ranks),
        }
    }

    /// Its m, n and k beside the default figures (of `a`).
    fn figures(&self, planned: &StepPlan, ranks: u64) -> Figures {
        let mut f = Figures::of_input(planned, ranks);
        if let Some(out) = &planned.output_state {
            let [m, n, k] = self.mnk(&planned.input_states[0], out);
            (f.m, f.n, f.k) = (Some(m), Some(n), Some(k));
        }
        f
    }

    fn library(&self) -> Option<Lib> {
        Some(Lib::Cublas)
    }

    fn run<B: Backend>(&self, run: &mut StepRun<'_, B>) -> Result<Option<B::Buf>> {
        let (b, planned, out_state) = (run.b, run.planned, run.out_state());
        let inputs = run.inputs.clone();
        let choice = (planned.matmul.as_ref()).expect("a planned matmul has an algorithm");
        let pinned = self.product_layout.pinned();
        let prepare = |rounds, product_layout| {
            let states = &planned.input_states;
            let ways = Ways {
                keep_pre: run.check(),
                rounds,
                product_layout,
            };
            PreparedMatmul::new(b, self, choice, states, out_state, ways)
        };
        let mut prepared = prepare(self.pipeline != MatmulPipeline::Whole, pinned)?;
        let (could, mut trials) = (prepared.in_rounds(), None);
        if could && self.pipeline == MatmulPipeline::Auto {
            let ways = [prepared, prepare(false, pinned)?];
            let (faster, times) = faster(b, run.timing(), ways, &inputs)?;
            (prepared, trials) = (faster, Some(times));
        }
        let mnk = self.mnk(&planned.input_states[0], out_state);
        if pinned.is_none() && prepared.weighs_layouts(mnk) {
            let other = out_state.layout.other();
            let ways = [prepared, prepare(false, Some(other))?];
            let (faster, times) = faster(b, run.timing(), ways, &inputs)?;
            prepared = faster;
            // The trial times in the order C, F.
            let trials = match other {
                Layout::F => times,
                Layout::C => [times[1], times[0]],
            };
            run.record.product_layout = Some(Chosen {
                way: prepared.product_layout(),
                trials: Some(trials),
            });
        } else if pinned.is_some() && prepared.writes_result() {
            run.record.product_layout = Some(Chosen {
                way: prepared.product_layout(),
                trials: None,
            });
        }
        // Recorded where the operand could move in rounds, or moves whole slice by slice.
        run.record.window_slices = prepared.window_slices();
        if could || run.record.window_slices.is_some() {
            let way = match prepared.in_rounds() {
                true => MatmulPipeline::Rounds,
                false => MatmulPipeline::Whole,
            };
            run.record.pipeline = Some(Chosen { way, trials });
        }
        run.record.times = run.timed(|| prepared.run(b, &inputs))?;
        run.record.flops = Some(self.flops(&planned.input_states[0], out_state));
        let (mut out, pre) = prepared.into_output();
        run.corrupt(&mut out)?;
        if run.check() {
            let operands: Vec<(&TensorState, &B::Buf)> =
                planned.input_states.iter().zip(inputs).collect();
            let result = (out_state, &out);
            let checked = freivalds::check(b, self, &operands, result, pre, run.seed)?;
            run.record.check = Some(checked);
        }
        Ok(Some(out))
    }
}

impl Matmul {
    /// The product's m, n and k (of `op(a)`: m x k, `op(b)`: k x n).
    pub(super) fn mnk(&self, a: &TensorState, out: &TensorState) -> [u64; 3] {
        let k = if self.transpose_a {
            a.shape[0]
        } else {
            a.shape[1]
        };
        [out.shape[0], out.shape[1], k]
    }

    /// Floating-point operations of one run: 2mnk, 8mnk for complex dtypes.
    fn flops(&self, a: &TensorState, out: &TensorState) -> f64 {
        let per_fma = if out.dtype.is_complex() { 8.0 } else { 2.0 };
        per_fma * self.mnk(a, out).iter().map(|&x| x as f64).product::<f64>()
    }
}

/// The faster of two ways to run a matmul (in rounds or gathering in one exchange; the product
/// written in the result's layout or the other), by trial runs; returns it and both ways' trial
/// times, in the order of `ways`.
fn faster<B: Backend>(
    b: &B,
    timing: Timing,
    mut ways: [PreparedMatmul<B>; 2],
    inputs: &[&B::Buf],
) -> Result<(PreparedMatmul<B>, [f64; 2])> {
    let times = trials(b, timing, &mut |i| ways[i].run(b, inputs))?;
    let [rounds, whole] = ways;
    Ok((if times[0] <= times[1] { rounds } else { whole }, times))
}

